//! Small matrix products on shared-memory operands with plain FMA, for kernels whose products are
//! too varied (transposed operands, per-element weights, causal bounds) for a fixed tensor-core
//! layout.
//!
//! An output of `rows × cols` is cut into warp tiles of 4 rows × `32·CU` columns; lane `l` of a
//! warp owns rows `row0 .. row0 + 4` and columns `strip + 32u + l` (`u < CU`). Consecutive lanes
//! thus read consecutive columns of an operand whose column index is contiguous, and columns
//! `stride` apart when it is not; callers pad such strides to an odd word count so that either
//! walk hits 32 distinct banks. The four rows of a tile are the same for the whole warp, so the
//! row operand's loads are broadcasts.

use crate::arch::float::fma_rn;
use crate::arch::sreg::ld_shared_f32;

/// A matrix in shared memory: element `(i, k)` at byte address `base + 4·(i·s_i + k·s_k)`.
///
/// For the row operand `A` of a product, `i` is the output row; for the column operand `B`, `i`
/// is the output column; `k` is the summed index in both.
#[derive(Clone, Copy)]
pub struct Operand {
    /// Shared-space byte address of element (0, 0).
    pub base: u32,
    /// Stride of `i` in words.
    pub s_i: u32,
    /// Stride of `k` in words.
    pub s_k: u32,
}

impl Operand {
    /// The byte address of element `(i, k)`.
    #[inline(always)]
    pub fn at(&self, i: u32, k: u32) -> u32 {
        self.base + 4 * (i * self.s_i + k * self.s_k)
    }
}

/// The first and last output rows of a warp tile (clamped to the output): what a causal bound on
/// a product's summed range depends on.
#[derive(Clone, Copy)]
pub struct RowSpan {
    /// First row.
    pub first: u32,
    /// Last row.
    pub last: u32,
}

/// One warp tile of an output: rows `rows` (clamped to the last valid row for loads; `row_ok`
/// says which are real) and this lane's columns `cols` (clamped likewise, `col_ok`).
#[derive(Clone, Copy)]
pub struct Tile<const CU: usize> {
    /// Output rows (clamped).
    pub rows: [u32; 4],
    /// Which rows lie inside the output.
    pub row_ok: [bool; 4],
    /// This lane's output columns (clamped).
    pub cols: [u32; CU],
    /// Which columns lie inside the output.
    pub col_ok: [bool; CU],
    /// Index of the tile's column strip.
    pub strip: u32,
}

impl<const CU: usize> Tile<CU> {
    /// The tile's first and last rows.
    #[inline(always)]
    pub fn span(&self) -> RowSpan {
        RowSpan {
            first: self.rows[0],
            last: self.rows[3],
        }
    }
}

/// Calls `f` for every tile of warp `warp` (of `warps`) over a `rows × cols` output; tiles are
/// dealt round-robin, so every lane of a warp sees the same tiles (warp-uniform control flow).
#[inline(always)]
pub fn for_each_tile<const CU: usize>(
    rows: u32,
    cols: u32,
    warp: u32,
    warps: u32,
    lane: u32,
    mut f: impl FnMut(&Tile<CU>),
) {
    if rows == 0 || cols == 0 {
        return;
    }
    let width = 32 * CU as u32;
    let strips = cols.div_ceil(width);
    let tiles = rows.div_ceil(4) * strips;
    let mut ti = warp;
    while ti < tiles {
        let group = ti / strips;
        let strip = ti - group * strips;
        let mut tile = Tile {
            rows: [0; 4],
            row_ok: [false; 4],
            cols: [0; CU],
            col_ok: [false; CU],
            strip,
        };
        for a in 0..4 {
            let r = 4 * group + a as u32;
            tile.row_ok[a] = r < rows;
            tile.rows[a] = if r < rows { r } else { rows - 1 };
        }
        for u in 0..CU {
            let c = strip * width + 32 * u as u32 + lane;
            tile.col_ok[u] = c < cols;
            tile.cols[u] = if c < cols { c } else { cols - 1 };
        }
        f(&tile);
        ti += warps;
    }
}

/// `acc[a][u] += Σ_{k ∈ ks} wa(row_a, k)·A(row_a, k) · wb(k)·B(col_u, k)`, k ascending (a
/// fixed order: deterministic). `wa` and `wb` are per-element weights (return 1.0 for none; the
/// multiply then folds away).
///
/// # Safety
/// Every element the loop reads (the tile's clamped rows and columns, `k ∈ ks`) must lie inside
/// the block's shared memory.
#[inline(always)]
pub unsafe fn mac<const CU: usize>(
    acc: &mut [[f32; CU]; 4],
    tile: &Tile<CU>,
    a: Operand,
    b: Operand,
    ks: core::ops::Range<u32>,
    wa: impl Fn(u32, u32) -> f32,
    wb: impl Fn(u32) -> f32,
) {
    for k in ks {
        // SAFETY: forwarded to the caller.
        let av: [f32; 4] = core::array::from_fn(
            |i| unsafe { ld_shared_f32(a.at(tile.rows[i], k)) } * wa(tile.rows[i], k),
        );
        let scale = wb(k);
        // SAFETY: forwarded to the caller.
        let bv: [f32; CU] =
            core::array::from_fn(|u| unsafe { ld_shared_f32(b.at(tile.cols[u], k)) } * scale);
        for (row, &x) in acc.iter_mut().zip(&av) {
            for (c, &y) in row.iter_mut().zip(&bv) {
                *c = fma_rn(x, y, *c);
            }
        }
    }
}

/// [`mac`] of a [`Summed`] term over its range for the tile's rows.
///
/// # Safety
/// As for [`mac`].
#[inline(always)]
pub unsafe fn mac_term<const CU: usize>(
    acc: &mut [[f32; CU]; 4],
    tile: &Tile<CU>,
    t: &impl Summed,
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        mac(
            acc,
            tile,
            t.a(),
            t.b(),
            t.ks(tile.span()),
            |i, k| t.wa(i, k),
            |k| t.wb(k),
        )
    }
}

/// One summed term of [`product`] / [`product2`]: `Σ_{k ∈ ks(tile)} wa(row, k)·A(row, k) ·
/// wb(k)·B(col, k)` (see [`mac`]).
#[derive(Clone, Copy)]
pub struct Term<KS, WA, WB> {
    /// Row operand.
    pub a: Operand,
    /// Column operand.
    pub b: Operand,
    /// The summed range for a tile's rows (causal bounds depend on them).
    pub ks: KS,
    /// Per-element weight of A.
    pub wa: WA,
    /// Per-k weight of B.
    pub wb: WB,
}

/// What [`product`] and [`product2`] (and their tensor-core versions in [`crate::tile_mma`]) need
/// of a summed term; implemented by [`Term`].
pub trait Summed {
    /// Row operand.
    fn a(&self) -> Operand;
    /// Column operand.
    fn b(&self) -> Operand;
    /// The summed range for a tile's rows.
    fn ks(&self, rows: RowSpan) -> core::ops::Range<u32>;
    /// Weight of A's element `(i, k)`.
    fn wa(&self, i: u32, k: u32) -> f32;
    /// Weight of B at depth `k`.
    fn wb(&self, k: u32) -> f32;
}

impl<KS, WA, WB> Summed for Term<KS, WA, WB>
where
    KS: Fn(RowSpan) -> core::ops::Range<u32>,
    WA: Fn(u32, u32) -> f32,
    WB: Fn(u32) -> f32,
{
    #[inline(always)]
    fn a(&self) -> Operand {
        self.a
    }
    #[inline(always)]
    fn b(&self) -> Operand {
        self.b
    }
    #[inline(always)]
    fn ks(&self, rows: RowSpan) -> core::ops::Range<u32> {
        (self.ks)(rows)
    }
    #[inline(always)]
    fn wa(&self, i: u32, k: u32) -> f32 {
        (self.wa)(i, k)
    }
    #[inline(always)]
    fn wb(&self, k: u32) -> f32 {
        (self.wb)(k)
    }
}

/// A [`Term`] without weights.
#[inline(always)]
pub fn plain<KS>(
    a: Operand,
    b: Operand,
    ks: KS,
) -> Term<KS, impl Fn(u32, u32) -> f32, impl Fn(u32) -> f32> {
    Term {
        a,
        b,
        ks,
        wa: |_, _| 1.0,
        wb: |_| 1.0,
    }
}

/// The `rows × cols` product of one term over this warp's tiles (see [`for_each_tile`]): each
/// element inside the output goes to `out(row, col, value)`.
///
/// # Safety
/// As for [`mac`], for every tile.
#[inline(always)]
pub unsafe fn product<const CU: usize>(
    (rows, cols): (u32, u32),
    (warp, warps, lane): (u32, u32, u32),
    t: &impl Summed,
    mut out: impl FnMut(u32, u32, f32),
) {
    for_each_tile::<CU>(rows, cols, warp, warps, lane, |tile| {
        let mut acc = [[0.0f32; CU]; 4];
        // SAFETY: forwarded to the caller.
        unsafe { mac_term(&mut acc, tile, t) };
        for (a, acc_a) in acc.iter().enumerate() {
            for (u, v) in acc_a.iter().enumerate() {
                if tile.row_ok[a] && tile.col_ok[u] {
                    out(tile.rows[a], tile.cols[u], *v);
                }
            }
        }
    });
}

/// As [`product`] with two terms summed separately: `out(row, col, first, second)`.
///
/// # Safety
/// As for [`mac`], for every tile and both terms.
#[inline(always)]
pub unsafe fn product2<const CU: usize>(
    (rows, cols): (u32, u32),
    (warp, warps, lane): (u32, u32, u32),
    t1: &impl Summed,
    t2: &impl Summed,
    mut out: impl FnMut(u32, u32, f32, f32),
) {
    for_each_tile::<CU>(rows, cols, warp, warps, lane, |tile| {
        let mut first = [[0.0f32; CU]; 4];
        let mut second = [[0.0f32; CU]; 4];
        // SAFETY: forwarded to the caller.
        unsafe {
            mac_term(&mut first, tile, t1);
            mac_term(&mut second, tile, t2);
        }
        for a in 0..4 {
            for u in 0..CU {
                if tile.row_ok[a] && tile.col_ok[u] {
                    out(tile.rows[a], tile.cols[u], first[a][u], second[a][u]);
                }
            }
        }
    });
}
