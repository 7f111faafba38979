//! The products of [`crate::tile_mac`] on the tensor cores: the same [`Summed`] terms on the same
//! f32 shared-memory operands, accumulated in f32, at one of two precisions chosen per product by
//! the `SPLIT` parameter:
//!
//! * `SPLIT = true`: each weighted element `x` is split as it is loaded into `hi = bf16(x)` and
//!   `lo = bf16(x − hi)`, and a product takes three `mma.m16n8k16`: `lo_A·hi_B + hi_A·lo_B +
//!   hi_A·hi_B` (the small terms first), about 16 bits of every product;
//! * `SPLIT = false`: each weighted element is rounded to TF32 (11 bits) as it is loaded, one
//!   integer add ([`tf32_rounded`]), and a product takes `mma.m16n8k8`: a third fewer `mma` per
//!   depth and no split instructions (the bf16 backward 7–8% faster at its benchmark geometry).
//!
//! One bf16 pass (8 bits) is not offered: it loses the gradients that come out of cancelling sums
//! (∂θ of a rotation is the small difference of its q and k sides; 2.2e-2 against the target 2e-2
//! on a small case). For kernels whose activations are bf16; float32 kernels keep the FMA tiles.
//!
//! A warp owns an output tile of 16 rows × `8·NB` columns in the accumulator layout of
//! [`crate::frag::acc_m16n8`]. The summed index runs in blocks of 32 in the order of
//! [`crate::frag::mma_k32_lane`]: lane quad `q` loads depths `8q .. 8q + 8` of its rows
//! and columns, so with row strides ≡ 1 (mod 32) words (the padded layouts of the FMA tiles) each
//! scalar fragment load hits 32 distinct banks in either orientation of an operand. Rows and
//! columns past the output are clamped for loading and never stored; depths outside a term's
//! range are clamped for loading and their A elements replaced by zero.

use crate::arch::mma::{mma_m16n8k16_bf16_f32, mma_m16n8k8_tf32_f32};
use crate::arch::sreg::ld_shared_f32;
use crate::frag::{acc_m16n8, mma_k32_lane};
use crate::math::split_bf16x2;
use crate::tile_mac::{Operand, RowSpan, Summed};

/// One warp tile: rows `row0 .. row0 + 16` and columns `col0 .. col0 + 8·NB` of an output of
/// `rows × cols`.
#[derive(Clone, Copy)]
pub struct MmaTile {
    /// First row.
    pub row0: u32,
    /// First column.
    pub col0: u32,
    /// Rows of the output.
    pub rows: u32,
    /// Columns of the output.
    pub cols: u32,
    /// Index of the tile's column strip (`col0 / (8·NB)`).
    pub strip: u32,
}

impl MmaTile {
    /// The tile's first and last rows inside the output.
    #[inline(always)]
    pub fn span(&self) -> RowSpan {
        RowSpan {
            first: self.row0,
            last: (self.row0 + 15).min(self.rows - 1),
        }
    }

    /// Row and column of accumulator slot `s` of n-block `nb` held by `lane`, and whether the
    /// element lies inside the output.
    #[inline(always)]
    pub fn at(&self, lane: u32, nb: usize, s: usize) -> (u32, u32, bool) {
        let (r, c) = acc_m16n8(lane, s as u32);
        let (row, col) = (self.row0 + r, self.col0 + 8 * nb as u32 + c);
        (row, col, row < self.rows && col < self.cols)
    }
}

/// The tiles of warp `warp` (of `warps`) over a `rows × cols` output, dealt round-robin
/// (warp-uniform control flow). An iterator rather than a callback so that the products' loop
/// bodies inline into the caller whatever their size.
#[derive(Clone, Copy)]
pub struct MmaTiles<const NB: usize> {
    next: u32,
    step: u32,
    tiles: u32,
    strips: u32,
    rows: u32,
    cols: u32,
}

impl<const NB: usize> MmaTiles<NB> {
    /// The tiles of warp `warp` of `warps`.
    #[inline(always)]
    pub fn new(rows: u32, cols: u32, warp: u32, warps: u32) -> Self {
        let strips = cols.div_ceil(8 * NB as u32);
        let tiles = if rows == 0 {
            0
        } else {
            rows.div_ceil(16) * strips
        };
        MmaTiles {
            next: warp,
            step: warps,
            tiles,
            strips,
            rows,
            cols,
        }
    }
}

impl<const NB: usize> Iterator for MmaTiles<NB> {
    type Item = MmaTile;

    #[inline(always)]
    fn next(&mut self) -> Option<MmaTile> {
        if self.next >= self.tiles {
            return None;
        }
        let ti = self.next;
        self.next += self.step;
        let group = ti / self.strips;
        let strip = ti - group * self.strips;
        Some(MmaTile {
            row0: 16 * group,
            col0: strip * 8 * NB as u32,
            rows: self.rows,
            cols: self.cols,
            strip,
        })
    }
}

/// The shared byte addresses of `L` lines (rows of A or columns of B) of an operand at depth 0,
/// and the bytes per depth: a fragment load is then one add (none where the depth stride is a
/// compile-time constant and the offset folds into the load).
#[derive(Clone, Copy)]
struct Lines<const L: usize> {
    start: [u32; L],
    depth_bytes: u32,
}

impl<const L: usize> Lines<L> {
    #[inline(always)]
    fn new(op: Operand, lines: [u32; L]) -> Self {
        Lines {
            start: lines.map(|i| op.at(i, 0)),
            depth_bytes: 4 * op.s_k,
        }
    }

    /// The address of depth `k` of line `l`.
    #[inline(always)]
    fn at(&self, l: usize, k: u32) -> u32 {
        self.start[l] + k * self.depth_bytes
    }
}

/// `x` rounded to TF32 as the `mma` reads it: half a TF32 ulp added to the bit pattern (ties
/// away from zero, carries into the exponent as rounding should), the low 13 bits left for the
/// tensor core to drop (it reads a TF32 operand's top 19 bits). One integer add per element where
/// `cvt.rna.tf32.f32` costs four instructions on sm_90.
#[inline(always)]
fn tf32_rounded(x: f32) -> u32 {
    x.to_bits().wrapping_add(0x1000)
}

/// One 4-deep step of [`mma_mac`] for this lane's depths `k_lane .. k_lane + 4`; `MASKED` clamps
/// every depth into `ks` and zeroes A outside it. `SPLIT = false`: two `mma.m16n8k8` on TF32
/// operands of two depths each (the lane's quad position `q` of A's and B's depth axis holds
/// depth `k_lane + 2m`, position `q + 4` depth `k_lane + 2m + 1`, in step `m`). `SPLIT = true`:
/// one 16-deep `mma.m16n8k16` step (this lane's four depths of it) as three bf16 passes
/// `lo_A·hi_B + hi_A·lo_B + hi_A·hi_B`. Either way A and B share the permutation of the summed
/// index, which is all the ISA asks.
///
/// # Safety
/// As for [`mma_mac`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn step<const NB: usize, const MASKED: bool, const SPLIT: bool>(
    acc: &mut [[f32; 4]; NB],
    row_a: [u32; 2],
    (at_a, at_b): (&Lines<2>, &Lines<NB>),
    k_lane: u32,
    ks: &core::ops::Range<u32>,
    wa: &impl Fn(u32, u32) -> f32,
    wb: &impl Fn(u32) -> f32,
) {
    let depth = |j: u32| {
        let k = k_lane + j;
        if MASKED {
            (k.clamp(ks.start, ks.end - 1), ks.contains(&k))
        } else {
            (k, true)
        }
    };
    let load_a = |h: usize, j: u32| {
        let (k, inside) = depth(j);
        // SAFETY: forwarded to the caller; `k` is inside `ks`.
        let v = unsafe { ld_shared_f32(at_a.at(h, k)) } * wa(row_a[h], k) * wb(k);
        if inside {
            v
        } else {
            0.0
        }
    };
    // SAFETY: as above.
    let load_b = |nb: usize, j: u32| unsafe { ld_shared_f32(at_b.at(nb, depth(j).0)) };
    if SPLIT {
        let a_pairs = [
            split_bf16x2(load_a(0, 0), load_a(0, 1)),
            split_bf16x2(load_a(1, 0), load_a(1, 1)),
            split_bf16x2(load_a(0, 2), load_a(0, 3)),
            split_bf16x2(load_a(1, 2), load_a(1, 3)),
        ];
        let a_hi = [a_pairs[0].0, a_pairs[1].0, a_pairs[2].0, a_pairs[3].0];
        let a_lo = [a_pairs[0].1, a_pairs[1].1, a_pairs[2].1, a_pairs[3].1];
        for (nb, acc_nb) in acc.iter_mut().enumerate() {
            let (b0_hi, b0_lo) = split_bf16x2(load_b(nb, 0), load_b(nb, 1));
            let (b1_hi, b1_lo) = split_bf16x2(load_b(nb, 2), load_b(nb, 3));
            mma_m16n8k16_bf16_f32(acc_nb, a_lo, [b0_hi, b1_hi]);
            mma_m16n8k16_bf16_f32(acc_nb, a_hi, [b0_lo, b1_lo]);
            mma_m16n8k16_bf16_f32(acc_nb, a_hi, [b0_hi, b1_hi]);
        }
    } else {
        let a = |h: usize, j: u32| tf32_rounded(load_a(h, j));
        let a = [
            [a(0, 0), a(1, 0), a(0, 1), a(1, 1)],
            [a(0, 2), a(1, 2), a(0, 3), a(1, 3)],
        ];
        for (nb, acc_nb) in acc.iter_mut().enumerate() {
            let b = |j: u32| tf32_rounded(load_b(nb, j));
            mma_m16n8k8_tf32_f32(acc_nb, a[0], [b(0), b(1)]);
            mma_m16n8k8_tf32_f32(acc_nb, a[1], [b(2), b(3)]);
        }
    }
}

/// `acc[nb] += Σ_{k ∈ ks} wa(row, k)·A(row, k) · wb(k)·B(col, k)` over the tile, the operands
/// split into bf16 `hi + lo` (`SPLIT`) or rounded to TF32 after weighting (see the module docs);
/// blocks of 32 depths in a fixed order (deterministic).
///
/// # Safety
/// Every element in the tile's rows and columns (clamped to the output) and depths `ks` must lie
/// inside the block's shared memory. Every lane of the warp must call it (warp-synchronous `mma`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn mma_mac<const NB: usize, const SPLIT: bool>(
    acc: &mut [[f32; 4]; NB],
    tile: &MmaTile,
    lane: u32,
    a: Operand,
    b: Operand,
    ks: core::ops::Range<u32>,
    wa: impl Fn(u32, u32) -> f32,
    wb: impl Fn(u32) -> f32,
) {
    if ks.is_empty() {
        return;
    }
    let (g, k8) = mma_k32_lane(lane);
    let last = tile.rows - 1;
    let rows = [(tile.row0 + g).min(last), (tile.row0 + g + 8).min(last)];
    let cols: [u32; NB] =
        core::array::from_fn(|nb| (tile.col0 + 8 * nb as u32 + g).min(tile.cols - 1));
    let at = (&Lines::new(a, rows), &Lines::new(b, cols));
    let mut kb = ks.start & !31;
    while kb < ks.end {
        // SAFETY: forwarded to the caller.
        unsafe {
            if kb >= ks.start && kb + 32 <= ks.end {
                step::<NB, false, SPLIT>(acc, rows, at, kb + k8, &ks, &wa, &wb);
                step::<NB, false, SPLIT>(acc, rows, at, kb + k8 + 4, &ks, &wa, &wb);
            } else {
                step::<NB, true, SPLIT>(acc, rows, at, kb + k8, &ks, &wa, &wb);
                step::<NB, true, SPLIT>(acc, rows, at, kb + k8 + 4, &ks, &wa, &wb);
            }
        }
        kb += 32;
    }
}

/// [`mma_mac`] of a [`Summed`] term over its range for the tile's rows.
///
/// # Safety
/// As for [`mma_mac`].
#[inline(always)]
pub unsafe fn mma_term<const NB: usize, const SPLIT: bool>(
    acc: &mut [[f32; 4]; NB],
    tile: &MmaTile,
    lane: u32,
    t: &impl Summed,
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        mma_mac::<NB, SPLIT>(
            acc,
            tile,
            lane,
            t.a(),
            t.b(),
            t.ks(tile.span()),
            |i, k| t.wa(i, k),
            |k| t.wb(k),
        )
    }
}

/// The `rows × cols` product of one term over this warp's tiles (see [`MmaTiles`]):
/// each element inside the output goes to `out(row, col, value)`.
///
/// # Safety
/// As for [`mma_mac`], for every tile.
#[inline(always)]
pub unsafe fn product<const NB: usize, const SPLIT: bool>(
    (rows, cols): (u32, u32),
    (warp, warps, lane): (u32, u32, u32),
    t: &impl Summed,
    mut out: impl FnMut(u32, u32, f32),
) {
    for tile in MmaTiles::<NB>::new(rows, cols, warp, warps) {
        let tile = &tile;
        let mut acc = [[0.0f32; 4]; NB];
        // SAFETY: forwarded to the caller.
        unsafe { mma_term::<NB, SPLIT>(&mut acc, tile, lane, t) };
        for (nb, acc_nb) in acc.iter().enumerate() {
            for (s, v) in acc_nb.iter().enumerate() {
                let (row, col, inside) = tile.at(lane, nb, s);
                if inside {
                    out(row, col, *v);
                }
            }
        }
    }
}

/// As [`product`] with two terms summed separately: `out(row, col, first, second)`.
///
/// # Safety
/// As for [`mma_mac`], for every tile and both terms.
#[inline(always)]
pub unsafe fn product2<const NB: usize, const SPLIT: bool>(
    (rows, cols): (u32, u32),
    (warp, warps, lane): (u32, u32, u32),
    t1: &impl Summed,
    t2: &impl Summed,
    mut out: impl FnMut(u32, u32, f32, f32),
) {
    for tile in MmaTiles::<NB>::new(rows, cols, warp, warps) {
        let tile = &tile;
        let mut first = [[0.0f32; 4]; NB];
        let mut second = [[0.0f32; 4]; NB];
        // SAFETY: forwarded to the caller.
        unsafe {
            mma_term::<NB, SPLIT>(&mut first, tile, lane, t1);
            mma_term::<NB, SPLIT>(&mut second, tile, lane, t2);
        }
        for nb in 0..NB {
            for s in 0..4 {
                let (row, col, inside) = tile.at(lane, nb, s);
                if inside {
                    out(row, col, first[nb][s], second[nb][s]);
                }
            }
        }
    }
}
