//! Self-test kernels: each exercises one device primitive on data the host can check with a plain
//! loop (`mamba3_host::primitives`). They are entry points of the same PTX module as the real
//! kernels, so the PTX gate assembles them too. The entry points exist for nvptx only; a body the
//! CPU emulation also runs (`tests/primitives_emulated.rs`) is a plain function beside its entry.
//!
//! # Safety (all entry points)
//! Pointers are device pointers to buffers of at least the sizes stated per kernel; outputs do not
//! alias inputs. Launch shapes are stated per kernel.

use crate::arch::{cp_async, float, ldmatrix, mma, sreg, wgmma};
use crate::{frag, math, warp_scan};

/// Packs two bf16 bit patterns into one register, `lo` in the low half (the lower element index).
#[inline(always)]
fn pack(lo: u16, hi: u16) -> u32 {
    lo as u32 | ((hi as u32) << 16)
}

/// `d = a·b + c` with one `mma.m16n8k16` bf16 instruction.
///
/// One warp (grid 1, block 32). `a`: 16×16 bf16 bits, row-major; `b`: 16×8 bf16 bits indexed
/// (k, n), row-major; `c`, `d`: 16×8 f32, row-major.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_mma_bf16_m16n8k16(
    a: *const u16,
    b: *const u16,
    c: *const f32,
    d: *mut f32,
) {
    let lane = sreg::lane_id();
    // SAFETY (whole body): sizes per the kernel contract; lane maps stay inside the tiles.
    unsafe {
        let a_at = |i| {
            let (r, k) = frag::a_m16k16(lane, i);
            *a.add((r * 16 + k) as usize)
        };
        let b_at = |i| {
            let (k, n) = frag::b_k16n8(lane, i);
            *b.add((k * 8 + n) as usize)
        };
        let a_regs = [
            pack(a_at(0), a_at(1)),
            pack(a_at(2), a_at(3)),
            pack(a_at(4), a_at(5)),
            pack(a_at(6), a_at(7)),
        ];
        let b_regs = [pack(b_at(0), b_at(1)), pack(b_at(2), b_at(3))];
        let mut acc = [0.0f32; 4];
        for (i, slot) in acc.iter_mut().enumerate() {
            let (r, n) = frag::acc_m16n8(lane, i as u32);
            *slot = *c.add((r * 8 + n) as usize);
        }
        mma::mma_m16n8k16_bf16_f32(&mut acc, a_regs, b_regs);
        for (i, value) in acc.iter().enumerate() {
            let (r, n) = frag::acc_m16n8(lane, i as u32);
            *d.add((r * 8 + n) as usize) = *value;
        }
    }
}

/// `d = tf32(a)·tf32(b) + c` with one `mma.m16n8k8` tf32 instruction.
///
/// One warp. `a`: 16×8 f32 row-major; `b`: 8×8 f32 indexed (k, n) row-major; `c`, `d`: 16×8 f32.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_mma_tf32_m16n8k8(
    a: *const f32,
    b: *const f32,
    c: *const f32,
    d: *mut f32,
) {
    let lane = sreg::lane_id();
    // SAFETY (whole body): sizes per the kernel contract; lane maps stay inside the tiles.
    unsafe {
        let a_at = |i| {
            let (r, k) = frag::a_m16k8_tf32(lane, i);
            float::to_tf32(*a.add((r * 8 + k) as usize))
        };
        let b_at = |i| {
            let (k, n) = frag::b_k8n8_tf32(lane, i);
            float::to_tf32(*b.add((k * 8 + n) as usize))
        };
        let mut acc = [0.0f32; 4];
        for (i, slot) in acc.iter_mut().enumerate() {
            let (r, n) = frag::acc_m16n8(lane, i as u32);
            *slot = *c.add((r * 8 + n) as usize);
        }
        mma::mma_m16n8k8_tf32_f32(
            &mut acc,
            [a_at(0), a_at(1), a_at(2), a_at(3)],
            [b_at(0), b_at(1)],
        );
        for (i, value) in acc.iter().enumerate() {
            let (r, n) = frag::acc_m16n8(lane, i as u32);
            *d.add((r * 8 + n) as usize) = *value;
        }
    }
}

/// Stages four 8×8 b16 matrices in shared memory and reads them back with `ldmatrix .x4`
/// (`trans != 0`: `.x4.trans`).
///
/// One warp, 512 bytes of dynamic shared memory. `src`: 4×8×8 u16, matrix-major, row-major within;
/// `out`: 32 lanes × 4 registers, lane-major.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_ldmatrix_x4(src: *const u16, out: *mut u32, trans: u32) {
    let lane = sreg::lane_id();
    let base = sreg::smem_base();
    // SAFETY (whole body): 256 elements staged into 512 bytes of shared memory; row addresses are
    // 16-byte aligned (rows of 8 u16 from an aligned base).
    unsafe {
        let mut i = lane;
        while i < 256 {
            sreg::st_shared_u16(base + 2 * i, *src.add(i as usize));
            i += 32;
        }
        sreg::sync_threads();
        let row_addr = base + 2 * ((lane / 8) * 64 + (lane % 8) * 8);
        let regs = if trans != 0 {
            ldmatrix::ldmatrix_x4_trans(row_addr)
        } else {
            ldmatrix::ldmatrix_x4(row_addr)
        };
        for (j, value) in regs.iter().enumerate() {
            *out.add((lane * 4) as usize + j) = *value;
        }
    }
}

/// Copies `chunks` 16-byte chunks `src → shared → dst` through `cp.async.cg` + `wait_group 0`.
///
/// One block of any width, `16·chunks` bytes of dynamic shared memory; `src` and `dst` 16-byte
/// aligned.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_cp_async(src: *const u8, dst: *mut u32, chunks: u32) {
    let base = sreg::smem_base();
    let tid = sreg::thread_x();
    let step = sreg::block_dim_x();
    // SAFETY (whole body): chunk indices are below `chunks`, inside both buffers and the smem.
    unsafe {
        let mut i = tid;
        while i < chunks {
            cp_async::cp_async_cg_16(base + 16 * i, src.add(16 * i as usize));
            i += step;
        }
        cp_async::commit_group();
        cp_async::wait_group::<0>();
        sreg::sync_threads();
        // Read back words written by other threads' copies: the barrier above made them visible.
        let mut w = tid;
        while w < 4 * chunks {
            *dst.add(w as usize) = sreg::ld_shared_u32(base + 4 * w);
            w += step;
        }
    }
}

/// Inclusive affine scan of `(a, b)` pairs within each warp: element `i` belongs to the segment of
/// 32 starting at `32·(i/32)`.
///
/// Any grid of whole warps covering `n`; lanes past `n` scan the identity `(1, 0)`.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_warp_scan(
    a: *const f32,
    b: *const f32,
    out_a: *mut f32,
    out_b: *mut f32,
    n: u32,
) {
    let i = sreg::block_x() * sreg::block_dim_x() + sreg::thread_x();
    let valid = i < n;
    // Branch-free prologue: with an `if valid { load } else { identity }` LLVM may duplicate the
    // whole scan into both arms, and the warp's shuffles would then run on divergent paths.
    let at = i.min(n.saturating_sub(1)) as usize;
    // SAFETY: `at < n` whenever `n > 0`; with `n == 0` nothing is read or written.
    unsafe {
        let (x, y) = if n > 0 {
            (*a.add(at), *b.add(at))
        } else {
            (1.0, 0.0)
        };
        let (x, y) = (if valid { x } else { 1.0 }, if valid { y } else { 0.0 });
        let (sa, sb) = warp_scan::inclusive_affine(x, y);
        if valid {
            *out_a.add(i as usize) = sa;
            *out_b.add(i as usize) = sb;
        }
    }
}

/// `s[i], c[i] = sin(x[i]), cos(x[i])` through [`math::sincos`].
///
/// Any 1-D grid covering `n`.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_sincos(x: *const f32, s: *mut f32, c: *mut f32, n: u32) {
    let i = sreg::block_x() * sreg::block_dim_x() + sreg::thread_x();
    if i < n {
        // SAFETY: `i < n`.
        unsafe {
            let (sin, cos) = math::sincos(*x.add(i as usize));
            *s.add(i as usize) = sin;
            *c.add(i as usize) = cos;
        }
    }
}

/// Walks the logical `rows × cols` matrix `src` (row-major, `(r, c)` at `r·cols + c`) as a
/// swizzled tile's packed element pairs: K-major (`transpose` false) keeps its rows as tile rows;
/// M-/N-major (`transpose` true) stores its columns as tile rows. Every thread of the block takes
/// a share of the pairs and calls `put(offset, first, second)` with the pair's byte offset in the
/// tile and its two elements.
unsafe fn for_each_swizzled_pair<T: Copy>(
    src: *const T,
    rows: u32,
    cols: u32,
    transpose: bool,
    mut put: impl FnMut(u32, T, T),
) {
    let (tile_rows, tile_cols) = if transpose {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let at = |row: u32, col: u32| {
        let (r, c) = if transpose { (col, row) } else { (row, col) };
        // SAFETY: `r < rows`, `c < cols` (the caller's sizes).
        unsafe { *src.add((r * cols + c) as usize) }
    };
    let mut pair = sreg::thread_x();
    while pair < tile_rows * tile_cols / 2 {
        let (row, col) = (pair / (tile_cols / 2), 2 * (pair % (tile_cols / 2)));
        put(
            wgmma::sw128_offset(tile_rows, row, col),
            at(row, col),
            at(row, col + 1),
        );
        pair += sreg::block_dim_x();
    }
}

/// Stores the bf16 matrix `src` into a swizzled tile at `tile` ([`for_each_swizzled_pair`]).
unsafe fn store_swizzled(tile: u32, src: *const u16, rows: u32, cols: u32, transpose: bool) {
    // SAFETY: the caller's sizes; stores inside the tile the caller reserved.
    unsafe {
        for_each_swizzled_pair(src, rows, cols, transpose, |offset, a, b| {
            sreg::st_shared_u32(tile + offset, pack(a, b))
        })
    }
}

/// The eight k-steps of [`prim_wgmma_bf16_m64n128k128`] for one operand layout.
unsafe fn wgmma_k128<const TRANS_A: bool, const TRANS_B: bool>(
    acc: &mut [[f32; 4]; 16],
    (a_tile, b_tile): (u32, u32),
    exchange: bool,
) {
    let mn_major = |tile: u32, k0: u32| {
        let d = wgmma::mn_major_desc(tile, 128, k0);
        if exchange {
            let (leading, stride) = ((d >> 16) & 0x3fff, (d >> 32) & 0x3fff);
            (d & !(0x3fff << 16) & !(0x3fff << 32)) | (stride << 16) | (leading << 32)
        } else {
            d
        }
    };
    for step in 0..8 {
        let k0 = 16 * step;
        let a = if TRANS_A {
            mn_major(a_tile, k0)
        } else {
            wgmma::k_major_desc(a_tile, 64, k0)
        };
        let b = if TRANS_B {
            mn_major(b_tile, k0)
        } else {
            wgmma::k_major_desc(b_tile, 128, k0)
        };
        // SAFETY: the kernel's contract (one warpgroup, tiles stored and fenced).
        unsafe { wgmma::mma_m64n128k16_bf16::<TRANS_A, TRANS_B>(acc, a, b, step > 0) };
    }
}

/// `d = a·b` over K = 128 through eight `wgmma.m64n128k16` bf16 instructions from swizzled shared
/// tiles (compute capability 9.0 only).
///
/// One warpgroup (grid 1, block 128), dynamic shared memory [`mamba3_abi::WGMMA_TEST_SMEM`]. `a`: 64×128 bf16
/// bits `(m, k)` row-major; `b`: 128×128 bf16 bits `(k, n)` row-major; `d`: 64×128 f32 row-major.
/// `layout` bit 0: A stored M-major (else K-major); bit 1: B stored N-major (else K-major); bit 2:
/// the M-/N-major descriptors with their leading and stride offsets exchanged (a diagnostic for
/// the layout convention).
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_wgmma_bf16_m64n128k128(
    a: *const u16,
    b: *const u16,
    d: *mut f32,
    layout: u32,
) {
    let tid = sreg::thread_x();
    let base = (sreg::smem_base() + wgmma::GROUP_BYTES - 1) & !(wgmma::GROUP_BYTES - 1);
    let tiles = (base, base + 16 * 1024);
    let (trans_a, trans_b, exchange) = (layout & 1 != 0, layout & 2 != 0, layout & 4 != 0);
    let mut acc = [[0.0f32; 4]; 16];
    // SAFETY (whole body): sizes per the kernel contract; the tiles fit the reserved memory.
    unsafe {
        store_swizzled(tiles.0, a, 64, 128, trans_a);
        store_swizzled(tiles.1, b, 128, 128, !trans_b);
        wgmma::fence_proxy_async_shared();
        sreg::sync_threads();
        wgmma::fence();
        match (trans_a, trans_b) {
            (false, false) => wgmma_k128::<false, false>(&mut acc, tiles, exchange),
            (false, true) => wgmma_k128::<false, true>(&mut acc, tiles, exchange),
            (true, false) => wgmma_k128::<true, false>(&mut acc, tiles, exchange),
            (true, true) => wgmma_k128::<true, true>(&mut acc, tiles, exchange),
        }
        wgmma::commit_group();
        wgmma::wait_all_m64n128(&mut acc);
        let (warp, lane) = (tid / 32, tid % 32);
        for (j, tile) in acc.iter().enumerate() {
            for (e, value) in tile.iter().enumerate() {
                let row = 16 * warp + lane / 4 + 8 * (e as u32 / 2);
                let col = 8 * j as u32 + 2 * (lane % 4) + e as u32 % 2;
                *d.add((row * 128 + col) as usize) = *value;
            }
        }
    }
}

/// Stores the f32 matrix `src` split by [`crate::f16_split::split_f16x2`] into two swizzled
/// binary16 tiles, `hi` and `lo`, laid out as [`store_swizzled`] lays out a bf16 tile.
unsafe fn store_split_swizzled<const SCALED: bool>(
    (hi_tile, lo_tile): (u32, u32),
    src: *const f32,
    rows: u32,
    cols: u32,
    transpose: bool,
) {
    // SAFETY: the caller's sizes; stores inside the tiles the caller reserved.
    unsafe {
        for_each_swizzled_pair(src, rows, cols, transpose, |offset, a, b| {
            let (hi, lo) = crate::f16_split::split_f16x2::<SCALED>(a, b);
            sreg::st_shared_u32(hi_tile + offset, hi);
            sreg::st_shared_u32(lo_tile + offset, lo);
        })
    }
}

/// `acc += A·B` over one k16 step as the three binary16 passes of [`crate::f16_split`]: with a
/// scaled `lo`, `hi·lo + lo·hi` into `small` and `hi·hi` into `acc`; unscaled, all three into
/// `acc`, the small terms first. `start` / `small_start`: `acc` / `small` begin at this step
/// (scale-d false).
unsafe fn wgmma_split_step(
    acc: &mut [[f32; 4]; 8],
    small: &mut [[f32; 4]; 8],
    (a_hi, a_lo, b_hi, b_lo): (u64, u64, u64, u64),
    scaled: bool,
    (start, small_start): (bool, bool),
) {
    // SAFETY: the kernel's contract (one warpgroup, tiles stored and fenced).
    unsafe {
        if scaled {
            wgmma::mma_m64n64k16_f16::<false, false>(small, a_lo, b_hi, !small_start);
            wgmma::mma_m64n64k16_f16::<false, false>(small, a_hi, b_lo, true);
            wgmma::mma_m64n64k16_f16::<false, false>(acc, a_hi, b_hi, !start);
        } else {
            wgmma::mma_m64n64k16_f16::<false, false>(acc, a_lo, b_hi, !start);
            wgmma::mma_m64n64k16_f16::<false, false>(acc, a_hi, b_lo, true);
            wgmma::mma_m64n64k16_f16::<false, false>(acc, a_hi, b_hi, true);
        }
    }
}

/// `d = a·b` over K = 128 at float32 accuracy through `wgmma.m64n64k16` binary16 passes on split
/// operands ([`crate::f16_split`]), a probe of how the tensor cores accumulate (compute capability
/// 9.0 only).
///
/// One warpgroup (grid 1, block 128), dynamic shared memory [`mamba3_abi::WGMMA_SPLIT_TEST_SMEM`].
/// `a`: 64×128 f32 `(m, k)` row-major; `b`: 128×64 f32 `(k, n)` row-major; `d`: 64×64 f32
/// row-major. `mode` bit 0: `lo` scaled by 2¹¹ and its products summed in their own accumulator
/// (else unscaled, every pass in one); bits 1–2: how the passes accumulate over the eight k16
/// steps: 0 in place in the tensor cores' accumulator, 1 in a fresh accumulator per step and
/// 2 per four steps, each added to the running sum by f32 adds (round to nearest).
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn prim_wgmma_f16_split_m64n64k128(
    a: *const f32,
    b: *const f32,
    d: *mut f32,
    mode: u32,
) {
    // SAFETY: forwarded to the caller.
    unsafe { wgmma_f16_split_product(a, b, d, mode) }
}

/// The body of [`prim_wgmma_f16_split_m64n64k128`] (also run by the CPU emulation).
///
/// # Safety
/// That kernel's contract.
pub unsafe fn wgmma_f16_split_product(a: *const f32, b: *const f32, d: *mut f32, mode: u32) {
    let tid = sreg::thread_x();
    let base = (sreg::smem_base() + wgmma::GROUP_BYTES - 1) & !(wgmma::GROUP_BYTES - 1);
    let (a_hi, a_lo, b_hi, b_lo) = (base, base + 16384, base + 32768, base + 49152);
    let scaled = mode & 1 != 0;
    let group = match (mode >> 1) & 3 {
        0 => 8,
        1 => 1,
        _ => 4,
    };
    let mut sum = [[0.0f32; 4]; 8];
    let mut fresh = [[0.0f32; 4]; 8];
    let mut small = [[0.0f32; 4]; 8];
    // SAFETY (whole body): sizes per the kernel contract; the tiles fit the reserved memory.
    unsafe {
        if scaled {
            store_split_swizzled::<true>((a_hi, a_lo), a, 64, 128, false);
            store_split_swizzled::<true>((b_hi, b_lo), b, 128, 64, true);
        } else {
            store_split_swizzled::<false>((a_hi, a_lo), a, 64, 128, false);
            store_split_swizzled::<false>((b_hi, b_lo), b, 128, 64, true);
        }
        wgmma::fence_proxy_async_shared();
        sreg::sync_threads();
        for step in 0..8u32 {
            let k0 = 16 * step;
            let descs = (
                wgmma::k_major_desc(a_hi, 64, k0),
                wgmma::k_major_desc(a_lo, 64, k0),
                wgmma::k_major_desc(b_hi, 64, k0),
                wgmma::k_major_desc(b_lo, 64, k0),
            );
            wgmma::fence();
            if group == 8 {
                wgmma_split_step(&mut sum, &mut small, descs, scaled, (step == 0, step == 0));
            } else {
                let start = step % group == 0;
                wgmma_split_step(&mut fresh, &mut small, descs, scaled, (start, step == 0));
                if (step + 1) % group == 0 {
                    wgmma::commit_group();
                    wgmma::wait_all_m64n64(&mut fresh);
                    for (s, f) in sum.iter_mut().zip(&fresh) {
                        for e in 0..4 {
                            s[e] += f[e];
                        }
                    }
                }
            }
        }
        wgmma::commit_group();
        wgmma::wait_all_m64n64(&mut sum);
        wgmma::wait_all_m64n64(&mut small);
        let (warp, lane) = (tid / 32, tid % 32);
        for (j, (tile, small_tile)) in sum.iter().zip(&small).enumerate() {
            for e in 0..4 {
                let value = if scaled {
                    float::fma_rn(small_tile[e], crate::f16_split::LO_WEIGHT, tile[e])
                } else {
                    tile[e]
                };
                let row = 16 * warp + lane / 4 + 8 * (e as u32 / 2);
                let col = 8 * j as u32 + 2 * (lane % 4) + e as u32 % 2;
                *d.add((row * 64 + col) as usize) = value;
            }
        }
    }
}
