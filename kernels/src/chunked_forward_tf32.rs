//! Mamba-3 MIMO chunked forward for f32 activations on the TF32 tensor cores at float32 accuracy
//! (spec §2.2, §2.3), for the geometry of [`crate::chunked_forward_mma`]: R = 4, N = 128, P = 64,
//! Na = 32, C = 16.
//!
//! The structure is that kernel's (one block of four warps per (head, batch row, segment), the
//! state as `mma` accumulators in registers, warp w owning state rows `p ∈ [16w, 16w+16)`; the
//! same token-scalar and angle phases, with f64 angle increments and the range-reduced `sincos`);
//! every contraction runs as three TF32 passes on f32 operands split as the fragments are loaded,
//! the passes of one or two depth steps summed in a fresh accumulator and added to the running
//! sum in f32 ([`crate::tf32x3::mma3_add`], [`crate::tf32x3::mma3_add_pair`]: the tensor cores'
//! accumulation truncates; on the H200's upstream grid the outputs' error was 1.5e-6 summed in
//! place, 4.7e-7 this way, the figure of `chunked_forward`'s FMA kernel). The scores, the
//! inter- and intra-chunk outputs take depth steps in pairs (half the adds, 12% faster, same
//! error figures); the state pass, whose accumulators also hold the 64 state registers, one at a
//! time (in pairs it spills).
//! What differs, so that the f32 tiles still fit two blocks per SM:
//!
//! * the next chunk's raw q and k rows are copied (`cp.async`) into the q̂ and k̂ tiles themselves
//!   once the chunk's products are done, and the rotation works in place;
//! * so the state pass `H ← exp(A_last)·H + x_wᵀ·k̂` runs right after the scores and the
//!   inter-chunk outputs (each warp reads only its own state rows in both), before the barrier
//!   that frees the tiles; the intra-chunk outputs and the epilogue follow it;
//! * x = v·mimo_v and the state-pass x_w = x·exp(Ā_i)·c_i are not tiles: the products form them
//!   from the raw v rows as they load fragments (in both, a lane's fragment elements share one
//!   rank, `lane mod 4`, so two `mimo_v` values per lane serve every fragment).
//!
//! Fragment orders: the scores' and outputs' contractions over n take the depth index of lane
//! quad q as the adjacent columns `2q, 2q+1` of each 8-column step (a permutation of the summed
//! index that A and B share), so q̂ and k̂ fragments are 8-byte loads and the output GEMM's B
//! operand is the state accumulators as they lie; the contractions over the chunk's rows keep the
//! natural order (their fragments are formed element by element anyway).
//!
//! Rows past the sequence (a short last chunk) come from zero-filled copies: their q̂ and k̂ are
//! the rotated biases (finite), their v is zero, and their score weights and key scales are zero,
//! so every product runs on the full chunk without a branch.
//!
//! # Launch contract
//! As [`crate::chunked_forward_mma`]'s, with f32 activations and dynamic shared memory
//! [`forward_tf32_smem::BYTES`].

use mamba3_abi::{forward_tf32_smem as L, rotation, ForwardParams};

use crate::angles::stored_f32;
use crate::arch::cp_async::{commit_group, cp_async_cg_16, cp_async_cg_16_zfill, wait_group};
use crate::arch::float::fma_rn;
use crate::arch::sreg::{
    block_x, block_y, fresh_u32, ld_shared_f32, ld_shared_v2_f32, ld_shared_v4_f32, opaque_u32,
    smem_base, smem_base_fresh, st_shared_v2_f32, st_shared_v4_f32, sync_threads, thread_x,
};
use crate::chunked_forward_mma::{
    column_params, cs_source, entering_state, lane_words, phase_angles_weights, phase_epilogue,
    phase_increments, prefetch, rank_params, scal_in, store_segment_end, store_state_tile,
    transform_pairs, weigh_row_tile_scores, Blk, EpilogueIo, Regions, S_EXPA, S_KSCALE,
};
use crate::elem::{ldg, stg};
use crate::math::silu_rcp;
use crate::smem::ld_shared_f64;
use crate::tf32x3::{mma3_add, mma3_add_pair, split, Split};

const R: u32 = 4;
const N: u32 = 128;
const P: u32 = 64;
const NA: u32 = 32;
const C: u32 = 16;

/// This kernel's [`Regions`].
struct F32Regions;

impl Regions for F32Regions {
    const SCAL: u32 = L::SCAL;
    const THETA: u32 = L::THETA;
    const TOT: u32 = L::TOT;
    const WT: u32 = L::WT;
    const CS: u32 = L::CS;
    const IDENT: u32 = L::IDENT;
    const F32_ANGLES: bool = true;
}

const _: () = assert!(L::SCAL_BYTES == mamba3_abi::forward_mma_smem::SCAL_BYTES);

/// Shared address of token scalar `row` of time `i` in bank `bank`.
#[inline(always)]
fn scal(bk: &Blk, bank: u32, row: u32, i: u32) -> u32 {
    scal_in::<F32Regions>(bk, bank, row, i)
}

/// Issues the `cp.async` copies of chunk `[c0, c0 + len)`'s raw q and k rows into the q̂ and k̂
/// tiles and its v and z rows into bank `bank`; rows of times ≥ `len` are zero-filled (source:
/// time `c0`'s, never read).
#[inline(always)]
unsafe fn stage_chunk<const STATES_ONLY: bool>(
    prm: &ForwardParams,
    bk: &Blk,
    c0: u32,
    len: u32,
    bank: u32,
) {
    // Warp w copies quad `lane` of rows ρ = 4i + w (rank w, time i).
    let token_floats = R as usize * bk.groups * N as usize;
    let qk_first = (((bk.b * bk.s_len + c0 as usize) * R as usize + bk.warp as usize) * bk.groups
        + bk.g)
        * N as usize
        + 4 * bk.lane as usize;
    // SAFETY (whole body): every source is a 16-byte quad of a token < S (time c0 for the
    // zero-filled rows) of the 16-byte aligned tensors of the launch contract; destinations are
    // inside the tiles and banks of the layout.
    unsafe {
        for i in 0..C {
            let (src, size) = if i < len {
                (qk_first + i as usize * token_floats, 16)
            } else {
                (qk_first, 0)
            };
            let dst = (4 * i + bk.warp) * L::QK_STRIDE + 16 * bk.lane;
            if !STATES_ONLY {
                cp_async_cg_16_zfill(
                    bk.base + L::Q + dst,
                    (prm.q as usize + 4 * src) as *const u8,
                    size,
                );
            }
            cp_async_cg_16_zfill(
                bk.base + L::K + dst,
                (prm.k as usize + 4 * src) as *const u8,
                size,
            );
        }
        for m in 0..2 {
            let e = bk.tid + 128 * m;
            let (i, quad) = (e / 16, (e % 16) as usize);
            let t = c0 as usize + if i < len { i as usize } else { 0 };
            let size = if i < len { 16 } else { 0 };
            let src = (((bk.b * bk.s_len + t) * bk.heads + bk.h) * P as usize + 4 * quad) * 4;
            let dst = bk.base + L::BANK + bank * L::BANK_BYTES + i * 256 + 16 * quad as u32;
            cp_async_cg_16_zfill(dst, (prm.v as usize + src) as *const u8, size);
            if !STATES_ONLY && prm.z != 0 {
                cp_async_cg_16_zfill(dst + 4096, (prm.z as usize + src) as *const u8, size);
            }
        }
    }
}

/// One row's inputs of the rotation: its (c, s) pairs and the lane's two raw column-pair pairs
/// (see `chunked_forward_mma::lane_words`; pair 0 unused in the k-only segment pass).
#[derive(Clone, Copy, Default)]
struct RawRow {
    cs: [f32; 4],
    words: [[[f32; 2]; 2]; 2],
}

/// Rows of the rotation whose shared-memory loads are issued together (see
/// `chunked_forward_mma::ROTATE_GROUP`).
const ROTATE_GROUP: u32 = 4;

/// Phase R: q̂ and k̂ of the chunk, rotated in place in their tiles (warp r: the rows of rank r).
#[inline(always)]
unsafe fn phase_rotate<const STATES_ONLY: bool, const HALF_SPLIT: bool>(
    prm: &ForwardParams,
    bk: &Blk,
    cs_at: (u32, u32),
) {
    // Read here every chunk (L1 hits) rather than held in registers across the chunk loop.
    // SAFETY: the launch contract.
    let balanced = HALF_SPLIT && !STATES_ONLY;
    let rp = unsafe { rank_params(prm, bk, balanced) };
    let r = bk.warp;
    // Byte offsets of the lane's two pairs in a q̂/k̂ tile row.
    let tile_at =
        lane_words(bk.lane, balanced).map(|(is_k, c)| if is_k { L::K } else { L::Q } + 4 * c);
    // SAFETY (whole body): rows < 64 and columns < 128 of the tiles; every lane reads and writes
    // only its own words, which the last `cp.async` group wrote.
    unsafe {
        for i0 in (0..C).step_by(ROTATE_GROUP as usize) {
            let mut rows = [RawRow::default(); ROTATE_GROUP as usize];
            for (di, row) in rows.iter_mut().enumerate() {
                let i = i0 + di as u32;
                let at = bk.base + (4 * i + r) * L::QK_STRIDE;
                row.cs = if HALF_SPLIT {
                    ld_shared_v4_f32(cs_at.0 + cs_at.1 * i)
                } else {
                    let [c, s] = ld_shared_v2_f32(cs_at.0 + cs_at.1 * i);
                    [c, s, 1.0, 0.0]
                };
                for (j, (words, &off)) in row.words.iter_mut().zip(&tile_at).enumerate() {
                    if !STATES_ONLY || j == 1 {
                        *words = [ld_shared_v2_f32(at + off), ld_shared_v2_f32(at + off + 256)];
                    }
                }
            }
            for (di, row) in rows.iter().enumerate() {
                let at = bk.base + (4 * (i0 + di as u32) + r) * L::QK_STRIDE;
                let [first, second] =
                    transform_pairs(row.words, &rp, row.cs, HALF_SPLIT, STATES_ONLY);
                if !STATES_ONLY {
                    st_shared_v2_f32(at + tile_at[0], first.0);
                    st_shared_v2_f32(at + tile_at[0] + 256, first.1);
                }
                st_shared_v2_f32(at + tile_at[1], second.0);
                st_shared_v2_f32(at + tile_at[1] + 256, second.1);
            }
        }
    }
}

/// The A fragment (rows `row0 .. row0+16`, depth step `kk` of 8 columns, quad q holding columns
/// `8kk + 2q, 8kk + 2q + 1`) of the q̂ or k̂ tile at `tile`, split.
#[inline(always)]
unsafe fn qk_a_frag(tile: u32, row0: u32, kk: u32, lane: u32) -> Split<4> {
    let at = tile + (row0 + lane / 4) * L::QK_STRIDE + 4 * (8 * kk + 2 * (lane % 4));
    // SAFETY: inside the tile (rows < 64, columns < 128).
    let ([x0, x2], [x1, x3]) = unsafe {
        (
            ld_shared_v2_f32(at),
            ld_shared_v2_f32(at + 8 * L::QK_STRIDE),
        )
    };
    split([x0, x1, x2, x3])
}

/// The B fragment (output columns = tile rows `col0 .. col0+8`, depth step `kk` in the order of
/// [`qk_a_frag`]) of the k̂ tile, split: the scores' `k̂ᵀ`.
#[inline(always)]
unsafe fn qk_b_frag(tile: u32, col0: u32, kk: u32, lane: u32) -> Split<2> {
    let at = tile + (col0 + lane / 4) * L::QK_STRIDE + 4 * (8 * kk + 2 * (lane % 4));
    // SAFETY: inside the tile.
    split(unsafe { ld_shared_v2_f32(at) })
}

/// Phase M1: the weighted scores of the warp's 16 rows into the W tile, the inter-chunk outputs
/// `exp(A_i)·q̂·Hᵀ` of the warp's 16 columns (all 64 rows), returned.
#[inline(always)]
unsafe fn phase_scores_inter(bk: &Blk, bank: u32, state: &[[f32; 4]; 16]) -> [[[f32; 4]; 2]; 4] {
    let (w, lane) = (bk.warp, bk.lane);
    let (g, t4) = (lane / 4, lane % 4);
    let (q_tile, k_tile) = (bk.base + L::Q, bk.base + L::K);
    // SAFETY (whole body): addresses inside the Q, K, W, WT and SCAL regions.
    unsafe {
        let mut sc = [[0.0f32; 4]; 8];
        for kp in 0..8u32 {
            let (k0, k1) = (2 * kp, 2 * kp + 1);
            let a = [
                qk_a_frag(q_tile, 16 * w, k0, lane),
                qk_a_frag(q_tile, 16 * w, k1, lane),
            ];
            for (jt, s) in sc.iter_mut().enumerate() {
                if (jt as u32) < 2 * w + 2 {
                    let b = [
                        qk_b_frag(k_tile, 8 * jt as u32, k0, lane),
                        qk_b_frag(k_tile, 8 * jt as u32, k1, lane),
                    ];
                    mma3_add_pair(s, [&a[0], &a[1]], [&b[0], &b[1]]);
                }
            }
        }
        weigh_row_tile_scores::<F32Regions>(bk, w, true, &sc, |jt, s, wa, wb| {
            let at = bk.base + L::W + (16 * w + g) * L::W_STRIDE + 4 * (8 * jt + 2 * t4);
            st_shared_v2_f32(at, [s[0] * wa, s[1] * wa]);
            st_shared_v2_f32(at + 8 * L::W_STRIDE, [s[2] * wb, s[3] * wb]);
        });

        let mut y = [[[0.0f32; 4]; 2]; 4];
        for kp in 0..8usize {
            // The state accumulators of n-tile kk are the B fragments of output columns
            // 16w .. 16w+8 (slots 0, 1) and 16w+8 .. 16w+16 (slots 2, 3) in this depth order.
            let (k0, k1) = (2 * kp, 2 * kp + 1);
            let (s0, s1) = (&state[k0], &state[k1]);
            let b0 = [split([s0[0], s0[1]]), split([s1[0], s1[1]])];
            let b1 = [split([s0[2], s0[3]]), split([s1[2], s1[3]])];
            for (mt, ym) in y.iter_mut().enumerate() {
                let a = [
                    qk_a_frag(q_tile, 16 * mt as u32, k0 as u32, lane),
                    qk_a_frag(q_tile, 16 * mt as u32, k1 as u32, lane),
                ];
                mma3_add_pair(&mut ym[0], [&a[0], &a[1]], [&b0[0], &b0[1]]);
                mma3_add_pair(&mut ym[1], [&a[0], &a[1]], [&b1[0], &b1[1]]);
            }
        }
        for (mt, ym) in y.iter_mut().enumerate() {
            let i = 4 * mt as u32 + g / 4;
            let ea = ld_shared_f32(scal(bk, bank, S_EXPA, i));
            let eb = ld_shared_f32(scal(bk, bank, S_EXPA, i + 2));
            for yj in ym.iter_mut() {
                yj[0] *= ea;
                yj[1] *= ea;
                yj[2] *= eb;
                yj[3] *= eb;
            }
        }
        y
    }
}

/// Phase M1, last part: `H ← exp(A_last)·H + x_wᵀ·k̂` for the warp's 16 state rows, x_w formed
/// from the raw v rows (`mv`: `mimo_v[lane mod 4]` at the lane's rows `16w + lane/4` and `+ 8`).
/// The n-tiles go in four groups of four ([`state_tiles`], x_w's fragments formed again per
/// group): each tile's chain of [`mma3_add`] is serial, and more chains at once spill.
#[inline(always)]
unsafe fn phase_state(bk: &Blk, len: u32, bank: u32, mv: [f32; 2], state: &mut [[f32; 4]; 16]) {
    // SAFETY (whole body): len − 1 < 16; see `state_tiles`.
    unsafe {
        let decay = ld_shared_f32(scal(bk, bank, S_EXPA, len - 1));
        for st in state.iter_mut() {
            for v in st.iter_mut() {
                *v *= decay;
            }
        }
        state_tiles::<0>(bk, bank, mv, state);
        state_tiles::<4>(bk, bank, mv, state);
        state_tiles::<8>(bk, bank, mv, state);
        state_tiles::<12>(bk, bank, mv, state);
    }
}

/// `H[:, tiles FIRST .. FIRST + 4] += x_wᵀ·k̂[:, those tiles]` (see [`phase_state`]; separate
/// instantiations so that every tile index is a constant).
#[inline(always)]
unsafe fn state_tiles<const FIRST: usize>(
    bk: &Blk,
    bank: u32,
    mv: [f32; 2],
    state: &mut [[f32; 4]; 16],
) {
    let (w, lane) = (bk.warp, bk.lane);
    let (g, t4) = (lane / 4, lane % 4);
    let v_at = bk.base + L::BANK + bank * L::BANK_BYTES + 4 * (16 * w + g);
    // SAFETY (whole body): addresses inside the BANK, K and SCAL regions.
    unsafe {
        // A rolled loop over the depth steps, so that ptxas keeps the groups apart (unrolled, it
        // interleaves all sixteen chains and spills).
        for kk in 0..opaque_u32(8) {
            // Depth ρ = 8kk + t4 (time 2kk, rank t4) and ρ + 4 (time 2kk + 1, rank t4).
            let (i0, i1) = (2 * kk, 2 * kk + 1);
            let ks = [
                ld_shared_f32(scal(bk, bank, S_KSCALE, i0)),
                ld_shared_f32(scal(bk, bank, S_KSCALE, i1)),
            ];
            let v = [
                ld_shared_f32(v_at + 256 * i0),
                ld_shared_f32(v_at + 256 * i0 + 32),
                ld_shared_f32(v_at + 256 * i1),
                ld_shared_f32(v_at + 256 * i1 + 32),
            ];
            let a = split([
                v[0] * mv[0] * ks[0],
                v[1] * mv[1] * ks[0],
                v[2] * mv[0] * ks[1],
                v[3] * mv[1] * ks[1],
            ]);
            let k_at = bk.base + L::K + (8 * kk + t4) * L::QK_STRIDE + 4 * g;
            for np in FIRST..FIRST + 4 {
                let at = k_at + 32 * np as u32;
                let b = split([ld_shared_f32(at), ld_shared_f32(at + 4 * L::QK_STRIDE)]);
                mma3_add(&mut state[np], &a, &b);
            }
        }
    }
}

/// Phase M2, first part: the intra-chunk outputs (weighted scores times x, x formed from the raw
/// v rows; causal tiles only).
#[inline(always)]
unsafe fn phase_intra(bk: &Blk, bank: u32, mv: [f32; 2], y: &mut [[[f32; 4]; 2]; 4]) {
    // Opaque copies: the fragment addresses are formed here each chunk; hoisted out of the chunk
    // loop, eight of them spilled.
    let (w, lane) = (opaque_u32(bk.warp), opaque_u32(bk.lane));
    let (g, t4) = (lane / 4, lane % 4);
    let v_at = bk.base + L::BANK + bank * L::BANK_BYTES + 4 * (16 * w + g);
    // SAFETY (whole body): addresses inside the BANK and W regions.
    unsafe {
        // Rolled (an opaque count), like the state pass: unrolled, it spills.
        for kp in 0..opaque_u32(4) {
            // Depth ρ' = 8kk + t4 (time 2kk, rank t4) and ρ' + 4 (time 2kk + 1) for the depth
            // steps kk = 2kp and 2kp + 1; output column 16w + 8j + g.
            let b = [2 * kp, 2 * kp + 1].map(|kk| {
                [0u32, 1].map(|j| {
                    let at = v_at + 32 * j;
                    let m = mv[j as usize];
                    split([
                        ld_shared_f32(at + 256 * (2 * kk)) * m,
                        ld_shared_f32(at + 256 * (2 * kk + 1)) * m,
                    ])
                })
            });
            for (mt, ym) in y.iter_mut().enumerate() {
                // Both steps of a pair are inside the causal range or neither.
                if kp < mt as u32 + 1 {
                    let a = [2 * kp, 2 * kp + 1].map(|kk| {
                        let at =
                            bk.base + L::W + (16 * mt as u32 + g) * L::W_STRIDE + 4 * (8 * kk + t4);
                        split([
                            ld_shared_f32(at),
                            ld_shared_f32(at + 8 * L::W_STRIDE),
                            ld_shared_f32(at + 16),
                            ld_shared_f32(at + 8 * L::W_STRIDE + 16),
                        ])
                    });
                    mma3_add_pair(&mut ym[0], [&a[0], &a[1]], [&b[0][0], &b[1][0]]);
                    mma3_add_pair(&mut ym[1], [&a[0], &a[1]], [&b[0][1], &b[1][1]]);
                }
            }
        }
    }
}

/// This kernel's `EpilogueIo`: f32 pairs.
struct F32Io;

impl EpilogueIo for F32Io {
    const ELEM: u32 = 4;
    const Z: u32 = 4096;
    #[inline(always)]
    unsafe fn pair(addr: u32) -> [f32; 2] {
        // SAFETY: the caller's address is inside the bank (8-byte aligned: even columns).
        unsafe { ld_shared_v2_f32(addr) }
    }
    #[inline(always)]
    unsafe fn store(out: u64, at: usize, v: [f32; 2]) {
        // SAFETY: the caller's index is inside the output. Two stores: the output view is only
        // 4-byte aligned.
        unsafe {
            stg(out, at, v[0]);
            stg(out, at + 1, v[1]);
        }
    }
    #[inline(always)]
    fn gated(y: f32, x: f32) -> f32 {
        y * silu_rcp(x)
    }
}

/// Copies k̂₀ of the caller's initial state (`(R,N)` f32 of this (b, h), 2 KB) to [`L::INIT_K`]
/// (one 16-byte `cp.async` per thread; [`add_initial_trapezoid`] reads it after the first
/// barrier).
#[inline(always)]
unsafe fn stage_initial_k(prm: &ForwardParams, bk: &Blk) {
    let (r, quad) = (bk.tid / 32, bk.tid % 32);
    let src = ((bk.b * R as usize + r as usize) * bk.heads + bk.h) * N as usize + 4 * quad as usize;
    // SAFETY: R·N f32 fill the 2 KB region; `init_k` is 16-byte aligned and each rank's row of
    // N = 128 f32 is 512 bytes (launch contract).
    unsafe {
        cp_async_cg_16(
            bk.base + L::INIT_K + 16 * bk.tid,
            (prm.init_k + 4 * src as u64) as *const u8,
        )
    };
}

/// Adds the trapezoidal term `Σ_r u_r[p]·k̂₀_r[n]` of the token before the first to the state
/// (`u` from [`load_initial_state`], k̂₀ staged by [`stage_initial_k`]; after the first barrier).
#[inline(always)]
unsafe fn add_initial_trapezoid(bk: &Blk, u: &[[f32; R as usize]; 2], state: &mut [[f32; 4]; 16]) {
    for (nt, st) in state.iter_mut().enumerate() {
        let n = 8 * nt as u32 + 2 * (bk.lane % 4);
        for r in 0..R {
            // SAFETY: inside the INIT_K region, which holds k̂₀ until the first chunk's weights.
            let [k0, k1] = unsafe { ld_shared_v2_f32(bk.base + L::INIT_K + 4 * (r * N + n)) };
            let r = r as usize;
            st[0] = fma_rn(u[0][r], k0, st[0]);
            st[1] = fma_rn(u[0][r], k1, st[1]);
            st[2] = fma_rn(u[1][r], k0, st[2]);
            st[3] = fma_rn(u[1][r], k1, st[3]);
        }
    }
}

/// Final θ, SSM state, last k̂ and last raw v (the block that ends at S; `bank` is its last
/// chunk's, whose raw v rows are still staged; the k̂ tile holds its rotated rows).
#[inline(always)]
unsafe fn write_final_states(
    prm: &ForwardParams,
    bk: &Blk,
    last_len: u32,
    bank: u32,
    state: &[[f32; 4]; 16],
) {
    let bh = bk.b * bk.heads + bk.h;
    // SAFETY (whole body): indices inside the final-state tensors of the launch contract, the
    // THETA region, the k̂ tile and the bank.
    unsafe {
        if prm.final_theta != 0 && bk.tid < NA {
            let th = stored_f32(ld_shared_f64(bk.base + L::THETA + 8 * bk.tid));
            stg(prm.final_theta, bh * NA as usize + bk.tid as usize, th);
        }
        if prm.final_ssm != 0 {
            store_state_tile(bk, prm.final_ssm, bh * (P * N) as usize, state);
        }
        if prm.final_k != 0 {
            for m in 0..R * N / 128 {
                let e = bk.tid + 128 * m;
                let (r, n) = (e / N, e % N);
                let rho = 4 * (last_len - 1) + r;
                let v = ld_shared_f32(bk.base + L::K + rho * L::QK_STRIDE + 4 * n);
                let at = ((bk.b * R as usize + r as usize) * bk.heads + bk.h) * N as usize;
                stg(prm.final_k, at + n as usize, v);
            }
        }
        if prm.final_v != 0 && bk.tid < P {
            let row = bk.base + L::BANK + bank * L::BANK_BYTES + (last_len - 1) * 256;
            let v = ld_shared_f32(row + 4 * bk.tid);
            stg(prm.final_v, bh * P as usize + bk.tid as usize, v);
        }
    }
}

/// A block's constants and its token range.
struct Plan {
    bk: Blk,
    /// Segment of the block and segments per (b, h).
    seg: usize,
    segments: usize,
    /// Tokens `[t_begin, t_end)` of the segment.
    t_begin: u32,
    t_end: u32,
}

/// The [`Plan`] of the block at (`block_x`, `block_y`) with shared base `base`.
#[inline(always)]
fn plan(prm: &ForwardParams, base: u32, block_x: u32, block_y: u32) -> Plan {
    let (heads, groups) = (prm.heads as usize, prm.groups as usize);
    let h = block_x as usize;
    let segments = prm.segments.max(1) as usize;
    let b = block_y as usize / segments;
    let seg = block_y as usize - b * segments;
    let (t_begin, t_end) = if segments > 1 {
        let span = prm.seg_chunks * C;
        (
            (seg as u32 * span).min(prm.seq_len),
            ((seg as u32 + 1) * span).min(prm.seq_len),
        )
    } else {
        (0, prm.seq_len)
    };
    let tid = thread_x();
    Plan {
        bk: Blk {
            base,
            tid,
            warp: tid / 32,
            lane: tid % 32,
            b,
            h,
            g: h / (heads / groups),
            s_len: prm.seq_len as usize,
            heads,
            groups,
            row: (b * heads + h) * prm.seq_len as usize,
        },
        seg,
        segments,
        t_begin,
        t_end,
    }
}

/// The forward body (see the module docs and `chunked_forward_mma::chunked_forward_mma`, whose
/// segment, hand-off and initial-state conventions it shares). `STATES_ONLY = true` is the
/// segment-state pass.
///
/// # Safety
/// The module's launch contract.
#[inline(always)]
pub unsafe fn chunked_forward_tf32<const STATES_ONLY: bool>(prm: &ForwardParams) {
    let Plan {
        bk,
        seg,
        segments,
        t_begin,
        t_end,
    } = plan(prm, smem_base(), block_x(), block_y());
    if STATES_ONLY && seg + 1 >= segments {
        return;
    }
    let (h, tid) = (bk.h, bk.tid);
    let half_split = prm.rotation == rotation::HALF_SPLIT;
    // SAFETY (whole body): the launch contract; phases are separated by block barriers.
    unsafe {
        let cs_at = cs_source::<F32Regions>(&bk, half_split, half_split && !STATES_ONLY);
        if tid == 0 {
            st_shared_v4_f32(bk.base + L::IDENT, [1.0, 0.0, 1.0, 0.0]);
        }
        // mimo_v of rank (lane mod 4) at the lane's state rows / output columns 16w + lane/4
        // and + 8: every x and x_w element this lane forms.
        let mv = {
            let at = (h * R as usize + (bk.lane % 4) as usize) * P as usize
                + (16 * bk.warp + bk.lane / 4) as usize;
            [ldg(prm.mimo_v, at), ldg(prm.mimo_v, at + 8)]
        };
        let mut state = [[0.0f32; 4]; 16];
        if t_begin < t_end {
            stage_chunk::<STATES_ONLY>(prm, &bk, t_begin, (t_end - t_begin).min(C), 0);
        }
        let init = seg == 0 && prm.init_ssm != 0;
        if init {
            stage_initial_k(prm, &bk);
        }
        commit_group();
        let mut pf = prefetch::<f32>(prm, &bk, t_begin, (t_end - t_begin).min(C));
        let init_weights = entering_state::<f32, F32Regions>(
            prm,
            &bk,
            (seg, segments),
            init,
            !STATES_ONLY,
            &mut state,
        );
        wait_group::<0>();
        sync_threads();
        if init {
            add_initial_trapezoid(&bk, &init_weights, &mut state);
        }

        let mut s1 = phase_increments::<F32Regions>(&bk, (t_end - t_begin).min(C), &pf, 0);
        sync_threads();
        let mut c0 = t_begin;
        let mut last_len = 1u32;
        let mut bank = 0u32;
        let mut decay = 1.0f32;
        while c0 < t_end {
            let len = (t_end - c0).min(C);
            last_len = len;
            phase_angles_weights::<F32Regions, STATES_ONLY>(&bk, len, s1.0, s1.1, bank);
            sync_threads();
            let next = c0 + C;
            if next < t_end {
                // Addresses from fresh block constants: held through the loop, they spill on
                // sm_80–89.
                let now = plan(prm, bk.base, fresh_u32(block_x()), fresh_u32(block_y())).bk;
                pf = prefetch::<f32>(prm, &now, next, (t_end - next).min(C));
            }
            if half_split {
                phase_rotate::<STATES_ONLY, true>(prm, &bk, cs_at);
            } else {
                phase_rotate::<STATES_ONLY, false>(prm, &bk, cs_at);
            }
            sync_threads();
            let mut y = [[[0.0f32; 4]; 2]; 4];
            if STATES_ONLY {
                decay *= ld_shared_f32(scal(&bk, bank, S_EXPA, len - 1));
            } else {
                y = phase_scores_inter(&bk, bank, &state);
            }
            phase_state(&bk, len, bank, mv, &mut state);
            // The next chunk's angle increments and token scalars: beside the state pass in the
            // forward; after the barrier in the segment-state pass (beside the state pass there,
            // ptxas spills on sm_90).
            if !STATES_ONLY && next < t_end {
                s1 = phase_increments::<F32Regions>(&bk, (t_end - next).min(C), &pf, bank ^ 1);
            }
            sync_threads();
            // The q̂ and k̂ tiles are free: the next chunk's raw rows land during the outputs.
            if next < t_end {
                stage_chunk::<STATES_ONLY>(prm, &bk, next, (t_end - next).min(C), bank ^ 1);
            }
            commit_group();
            if STATES_ONLY && next < t_end {
                s1 = phase_increments::<F32Regions>(&bk, (t_end - next).min(C), &pf, bank ^ 1);
            }
            if !STATES_ONLY {
                phase_intra(&bk, bank, mv, &mut y);
                // The column parameters read here every chunk (L1 hits) rather than held in
                // registers across the chunk loop.
                let cp = column_params(prm, &bk);
                let bank_at = bk.base + L::BANK + bank * L::BANK_BYTES;
                phase_epilogue::<F32Io, true>(
                    prm,
                    &bk,
                    c0,
                    len,
                    bank_at,
                    bk.base + L::NORM,
                    &mut y,
                    &cp,
                );
            }
            wait_group::<0>();
            sync_threads();
            c0 = next;
            bank ^= 1;
        }
        // The block's constants formed again from fresh reads rather than kept alive (or
        // spilled) through the chunk loop.
        let Plan {
            bk,
            seg,
            segments,
            t_begin,
            t_end,
        } = plan(
            prm,
            smem_base_fresh(),
            fresh_u32(block_x()),
            fresh_u32(block_y()),
        );
        if STATES_ONLY {
            let slot = (bk.b * bk.heads + bk.h) * (segments - 1) + seg;
            store_segment_end::<F32Regions>(prm, &bk, slot, decay, &state);
        } else if t_end == prm.seq_len && t_begin < t_end {
            write_final_states(prm, &bk, last_len, bank ^ 1, &state);
        }
    }
}

/// f32 tensor-core forward entry point, R = 4, N = 128, P = 64, Na = 32, C = 16 (see the
/// module's launch contract).
///
/// # Safety
/// The module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_mma_f32_r4_n128_p64_na32_c16(params: ForwardParams) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_tf32::<false>(&params) }
}

/// Segment-state pass of the split f32 tensor-core forward (see [`chunked_forward_tf32`]).
///
/// # Safety
/// The module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn segment_state_mma_f32_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_tf32::<true>(&params) }
}
