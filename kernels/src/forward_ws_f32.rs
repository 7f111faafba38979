//! Mamba-3 MIMO chunked forward (spec §2.2, §2.3) for f32 activations on Hopper's warpgroup
//! tensor cores at float32 accuracy, warp specialized, for the tensor-core geometry: R = 4,
//! N = 128, P = 64, Na = 32, C = 16, the half-split rotation, the gated output.
//!
//! Every operand tile is a pair of binary16 tiles `(hi, lo)` with `x = hi + 2⁻¹¹·lo`
//! ([`crate::f16_split`]), and every product `A·B` runs as three `wgmma` passes on the f16 tensor
//! cores (the bf16 rate, twice the TF32 one): `hi·hi` into a main accumulator and `hi·lo + lo·hi`
//! into a cross accumulator, summed as `main + 2⁻¹¹·cross` where the product is used. A pair of
//! binary16 tiles takes the bytes of the bf16 kernel's two units, so a block runs one head.
//!
//! A block of two warpgroups runs one (head, batch row, segment):
//!
//! * **the producer** (warpgroup 0) stages each chunk's raw f32 q and k rows and v rows with
//!   `cp.async` (one buffer, a chunk ahead: the rows of chunk k + 1 land while the consumer runs
//!   chunk k), forms each chunk's angles (f64 increments `π·tanh(logit)·Δ` summed through the
//!   chunk, the range-reduced `sincos`; the arithmetic of the TF32 kernel, whose segment-state pass
//!   hands this kernel its segments' start angles) into its own cos/sin table, and writes the
//!   q̂ and k̂ tile pairs (biased, rotated, split);
//! * **the consumer** (warpgroup 1) holds the state `H` (P×N, f32) as `wgmma` accumulators and
//!   runs each chunk: the scores `q̂·k̂ᵀ` (while they run it writes its x = v·mimo_v and
//!   x_w = x·exp(Ā_i)·c_i tile pairs), the weighted scores split into their tile pair, the
//!   inter-chunk outputs `H·q̂ᵀ` with `H` split into registers as the A operand, the intra-chunk
//!   outputs `xᵀ·Sᵀ`, the state pass `H ← exp(A_last)·H + x_wᵀ·k̂` (into a fresh accumulator per
//!   half of N, added with the decay by one FMA per element: summed in place over every chunk the
//!   tensor cores' accumulation would drift), then the gate and the rank contraction; then, two
//!   chunks ahead, its per-chunk tables (token scalars, score weights, key scales).
//!
//! Hand-offs: a `full` named barrier (the producer arrives once a chunk's q̂ and k̂ are written and
//! fenced for the async proxy; the consumer waits) and an `empty` one (the consumer arrives once
//! its products have read them, and once before the first chunk; the producer waits before each
//! fill). The consumer's tables are double-banked by chunk parity, the producer's cos/sin table
//! likewise (it forms chunk k + 1's angles after filling chunk k).
//!
//! The outputs are formed transposed (`Yᵀ`, P × the chunk's 64 rows) with the chunk's rows ordered
//! by `forward_ws_smem::tile_row`, as in the bf16 kernel (`crate::forward_ws`), so the rank
//! contraction is in-thread; D·x enters as D on the diagonal of the weighted scores.
//!
//! Range: binary16 holds `hi` up to 65 504; q̂, k̂, x, x_w, the weighted scores and the state must
//! stay below it (the split keeps full relative accuracy down to about 2⁻¹⁴ and an absolute
//! accuracy of about 2⁻³⁵ below, which the error measure, relative to the largest output, does not
//! see).
//!
//! # Launch contract
//! Grid `(H, B, K)` (K segments, [`ForwardParams::segments`]), block
//! `mamba3_abi::FORWARD_WS_F32_THREADS`, dynamic shared memory `forward_ws_f32_smem::BYTES`,
//! compute capability 9.0 (the `sm_90a` module); the geometry, rotation and mode above, f32
//! activations, B·S·H < 2^32, no initial state, no checkpoints; q, k, v, the angle logits, the
//! output, the final k̂ and v 16-byte aligned, the final and hand-off SSM states 8-byte aligned;
//! every pointer valid for its documented shape (the host validates). Segments other than the
//! first start from the hand-off slots of the segment-state and combine passes.

use mamba3_abi::{forward_ws_f32_smem as L, forward_ws_smem as WS, ForwardParams};

use crate::angles::{angle_increment, reduced_near_f32, rotate_pair, stored_f32, wrap_two_pi_f64};
use crate::arch::barrier::{bar_arrive, bar_sync};
use crate::arch::cp_async::{commit_group, cp_async_cg_16_zfill, wait_group};
use crate::arch::float::{fma_rn, unpack_f16x2};
use crate::arch::global::st_global_v4_f32;
use crate::arch::ldmatrix::stmatrix_x4;
use crate::arch::sreg::{
    block_and_thread_fresh, block_x, block_y, block_z, fresh_u32, ld_shared_f32, ld_shared_v2_f32,
    ld_shared_v4_f32, shfl_idx_f32, st_shared_f32, st_shared_u32, st_shared_v2_f32,
    st_shared_v4_f32, thread_x,
};
use crate::arch::wgmma;
use crate::chunked_forward_mma::chunk_token_scalars;
use crate::elem::{ldg, stg};
use crate::f16_split::{split_f16x2, LO_WEIGHT};
use crate::forward_ws::{
    layout_base, load_state_f32, row_address, score_weight, shfl_idx_f64, store_state_f32, Work,
};
use crate::math::{exp, silu_rcp, sincos};

const R: u32 = 4;
const N: u32 = 128;
const P: u32 = 64;
const NA: u32 = 32;
const C: u32 = 16;

/// Named barriers: [`FULL`] and [`EMPTY`] (producer and consumer, 256 threads), the consumer's
/// own [`CONSUMER`] and the producer's own [`PRODUCER`] (128 each).
const FULL: u32 = 1;
const EMPTY: u32 = 2;
const CONSUMER: u32 = 3;
const PRODUCER: u32 = 4;

/// Bytes between a tile's `hi` and `lo` halves for q̂ and k̂ (`(64, 128)` binary16).
const QK_LO: u32 = L::Q_LO - L::Q_HI;
/// Bytes between a tile's `hi` and `lo` halves for x, x_w and the scores (`(64, 64)`).
const X_LO: u32 = L::X_LO - L::X_HI;

/// The block's work: one head, `Work::h0`.
#[inline(always)]
fn work_of_block(prm: &ForwardParams, x: u32, y: u32, z: u32) -> Work {
    Work::of_block_heads::<1>(prm, x, y, z)
}

/// The hand-off slot of segment `seg` of the block's (b, h) row (`(B,H,K−1)` slots).
#[inline(always)]
fn slot(work: &Work, seg: usize) -> usize {
    (work.b * work.heads + work.h0) * (work.segments - 1) + seg
}

/// The kernel body (see the module docs).
///
/// # Safety
/// The launch contract of the module docs.
#[inline(always)]
pub unsafe fn forward_ws_f32(prm: &ForwardParams) {
    // Through a broadcast from lane 0, so that the compiler knows the warpgroup index is uniform
    // across the warp.
    let wg = shfl_idx_f32(f32::from_bits(thread_x() / 128), 0).to_bits();
    // SAFETY: the launch contract; each warpgroup takes one branch as a whole.
    unsafe {
        if wg == 0 {
            producer(
                prm,
                &work_of_block(prm, block_x(), block_y(), block_z()),
                thread_x(),
            );
        } else {
            consumer(
                prm,
                &work_of_block(prm, block_x(), block_y(), block_z()),
                thread_x() - 128,
            );
        }
    }
}

/// Issues the `cp.async` copies of chunk `k`'s raw rows: q and k (row `4t + r`, 32 pieces of
/// 16 bytes each; producer thread `tid` copies piece `tid mod 32` of rank `tid / 32` at every time,
/// so each warp copies whole rows) into the staging buffer, and the v rows into slot `k mod 3`.
/// Rows of times ≥ len are zero-filled.
#[inline(always)]
unsafe fn stage_chunk(prm: &ForwardParams, work: &Work, base: u32, k: u32, tid: u32) {
    let (c0, len) = work.chunk(k);
    let (piece, r) = (tid % 32, tid / 32);
    let token_bytes = 4 * R * work.groups as u32 * N;
    // SAFETY (whole body): sources are 16-byte pieces of tokens < S of the 16-byte aligned
    // tensors of the launch contract (a token of the chunk for zero-filled rows, never read);
    // destinations inside the staging buffer and the v slot.
    unsafe {
        let first = row_address(
            (4 * ((r * work.groups as u32 + work.g as u32) * N) + 16 * piece) as u64,
            work.token(c0),
            token_bytes,
        );
        for t in 0..C {
            let (off, size) = if t < len {
                (first + token_bytes as u64 * t as u64, 16)
            } else {
                (first, 0)
            };
            let rho = 4 * t + r;
            let dst = base + L::RAW + 512 * rho + 16 * L::raw_piece(rho, piece);
            cp_async_cg_16_zfill(dst, (prm.q + off) as *const u8, size);
            cp_async_cg_16_zfill(dst + L::RAW_K, (prm.k + off) as *const u8, size);
        }
        let v_slot = base + L::V + (k % 3) * L::V_SLOT_BYTES;
        let piece = tid % 16;
        for i in 0..2u32 {
            let t = tid / 16 + 8 * i;
            let (src_t, size) = if t < len { (c0 + t, 16) } else { (c0, 0) };
            let v_src = row_address(
                prm.v + 16 * piece as u64,
                work.token_head(src_t, work.h0 as u32),
                4 * P,
            );
            cp_async_cg_16_zfill(v_slot + 256 * t + 16 * piece, v_src as *const u8, size);
        }
    }
}

/// A producer thread's angle inputs of one chunk: the angle logits and Δ of its angle
/// `8·warp + lane mod 8` at times `4·(lane / 8) + i` (zeros past the chunk).
#[derive(Clone, Copy, Default)]
struct AngleInputs {
    logits: [f32; 4],
    dts: [f32; 4],
}

/// Loads producer thread `tid`'s [`AngleInputs`] of chunk `k`.
#[inline(always)]
unsafe fn load_angle_inputs(prm: &ForwardParams, work: &Work, k: u32, tid: u32) -> AngleInputs {
    let mut a = AngleInputs::default();
    if k >= work.chunks() {
        return a;
    }
    let (w, lane) = (tid / 32, tid % 32);
    let (c0, len) = work.chunk(k);
    let angle = 8 * w + lane % 8;
    let t0 = 4 * (lane / 8);
    let first = row_address(
        prm.angles + 4 * angle as u64,
        work.token_head(c0 + t0, work.h0 as u32),
        4 * NA,
    );
    let stride = (4 * work.heads as u32 * NA) as u64;
    let row = work.row(0) as usize + (c0 + t0) as usize;
    // SAFETY: times below the chunk's length, inside the (B,S,H,Na) logits and (B,H,S) Δ.
    unsafe {
        for i in 0..4usize {
            if t0 + (i as u32) < len {
                a.logits[i] = ldg(first + stride * i as u64, 0);
                a.dts[i] = ldg(prm.dt, row + i);
            }
        }
    }
    a
}

/// Producer thread `tid`'s share of chunk `k`'s cos/sin table (bank `k mod 2`): θ of its angle at
/// its four times, from `carry` (the angle entering the chunk, f64 in [0, 2π)) and the f64
/// increments summed through the chunk across the warp's four time groups. Returns the angle
/// leaving the chunk, reduced. Every producer thread calls it together.
#[inline(always)]
unsafe fn angle_tables(base: u32, k: u32, tid: u32, x: AngleInputs, carry: f64) -> f64 {
    let (w, lane) = (tid / 32, tid % 32);
    let (angle, group) = (8 * w + lane % 8, lane / 8);
    let mut run = 0.0f64;
    let mut part = [0.0f64; 4];
    for (i, p) in part.iter_mut().enumerate() {
        // Times past the chunk have logit and Δ zero: their increment is an exact zero.
        run += angle_increment(x.logits[i], x.dts[i]);
        *p = run;
    }
    let (mut before, mut total) = (0.0f64, 0.0f64);
    for j in 0..4u32 {
        let tj = shfl_idx_f64(run, lane % 8 + 8 * j);
        if j < group {
            before += tj;
        }
        total += tj;
    }
    let cs = base + L::CS + (k & 1) * 16 * L::CS_STRIDE + WS::cs_offset(angle);
    for (i, p) in part.iter().enumerate() {
        let t = 4 * group + i as u32;
        let (s, c) = sincos(reduced_near_f32(carry + (before + p)));
        // SAFETY: inside the CS region.
        unsafe { st_shared_v2_f32(cs + t * L::CS_STRIDE, [c, s]) };
    }
    wrap_two_pi_f64(carry + total)
}

/// The producer warpgroup (thread `tid` < 128).
#[inline(always)]
unsafe fn producer(prm: &ForwardParams, work: &Work, tid: u32) {
    let base = layout_base();
    let chunks = work.chunks();
    let (w, lane) = (tid / 32, tid % 32);
    // SAFETY (whole body): the launch contract; shared addresses inside the layout.
    unsafe {
        // The biases, four columns per 16-byte unit (`forward_ws_smem::bias_column`).
        for e in [tid, tid + 128] {
            let (r, x, i) = (e / 64, (e / 32) % 2, e % 32);
            let src = if x == 0 { prm.q_bias } else { prm.k_bias };
            let col =
                (work.h0 * R as usize + r as usize) * N as usize + WS::bias_column(i) as usize;
            let v = [0, 1, 2, 3].map(|c| ldg(src, col + c));
            st_shared_v4_f32(base + L::BIAS + (2 * r + x) * 512 + 16 * i, v);
        }
        let mut carry = 0.0f64;
        if work.seg > 0 {
            let at = 2 * (slot(work, work.seg - 1) * NA as usize + (8 * w + lane % 8) as usize);
            carry = ldg(prm.seg_theta, at) as f64 + ldg(prm.seg_theta, at + 1) as f64;
        }
        if chunks > 0 {
            stage_chunk(prm, work, base, 0, tid);
        }
        commit_group();
        let mut ahead = load_angle_inputs(prm, work, 0, tid);
        if chunks > 0 {
            carry = angle_tables(base, 0, tid, ahead, carry);
        }
        ahead = load_angle_inputs(prm, work, 1, tid);
        for k in 0..chunks {
            wait_group::<0>();
            // Chunk k's rows have landed and its angles are written, for every producer thread.
            bar_sync::<PRODUCER, 128>();
            // The consumer's products have read chunk k − 1's tiles.
            bar_sync::<EMPTY, 256>();
            fill(base, k, tid);
            wgmma::fence_proxy_async_shared();
            bar_arrive::<FULL, 256>();
            if k + 1 < chunks {
                // Every producer thread is done with chunk k's raw rows (one staging buffer).
                bar_sync::<PRODUCER, 128>();
                let (bx, by, bz, _) = block_and_thread_fresh();
                let work = &work_of_block(prm, bx, by, bz);
                stage_chunk(prm, work, base, k + 1, tid);
                commit_group();
                let next = load_angle_inputs(prm, work, k + 2, tid);
                carry = angle_tables(base, k + 1, tid, ahead, carry);
                ahead = next;
            }
        }
        if chunks == 0 || work.t_end != work.s_len as u32 {
            return;
        }
        let (bx, by, bz, tid) = block_and_thread_fresh();
        let work = &work_of_block(prm, bx, by, bz);
        let bh = work.b * work.heads + work.h0;
        let (w, lane) = (tid / 32, tid % 32);
        if prm.final_theta != 0 && lane < 8 {
            let angle = 8 * w + lane;
            stg(
                prm.final_theta,
                bh * NA as usize + angle as usize,
                stored_f32(carry),
            );
        }
        // k̂ (hi + 2⁻¹¹·lo) and raw v of the last token.
        bar_sync::<PRODUCER, 128>();
        let (_, last_len) = work.chunk(chunks - 1);
        let last = last_len - 1;
        if prm.final_k != 0 {
            let (r, c4) = (tid / 32, tid % 32);
            let at =
                base + L::K_HI + mamba3_abi::swizzle128_offset(64, WS::tile_row(last, r), 4 * c4);
            let [h01, h23] = ld_shared_v2_f32(at).map(f32::to_bits);
            let [l01, l23] = ld_shared_v2_f32(at + QK_LO).map(f32::to_bits);
            let join = |h: u32, l: u32| {
                let ((h0, h1), (l0, l1)) = (unpack_f16x2(h), unpack_f16x2(l));
                [fma_rn(l0, LO_WEIGHT, h0), fma_rn(l1, LO_WEIGHT, h1)]
            };
            let ([v0, v1], [v2, v3]) = (join(h01, l01), join(h23, l23));
            let row = ((work.b * R as usize + r as usize) * work.heads + work.h0) * N as usize;
            st_global_v4_f32(
                prm.final_k + 4 * (row as u64 + 4 * c4 as u64),
                [v0, v1, v2, v3],
            );
        }
        if prm.final_v != 0 && tid < 16 {
            let row = base + L::V + ((chunks - 1) % 3) * L::V_SLOT_BYTES + 256 * last;
            let v = ld_shared_v4_f32(row + 16 * tid);
            st_global_v4_f32(
                prm.final_v + 4 * (bh * P as usize) as u64 + 16 * tid as u64,
                v,
            );
        }
    }
}

/// Writes chunk `k`'s q̂ and k̂ tile pairs from the staged rows and the cos/sin table (bank
/// `k mod 2`). Producer thread `tid` owns rank `tid / 32`, tensor `(tid / 16) mod 2` (q, k) and
/// piece `p = tid mod 4` of its rows at times `t₀ + 4j`, `t₀ = (tid / 8) mod 2 + 2·((tid / 4) mod
/// 2)`: the columns `8p..8p + 8` rotated with their partners `64 + 8p..`, and the biased-only
/// `32 + 8p..`, `96 + 8p..` (the bf16 kernel's map, whose tile stores and table loads fall on
/// distinct bank groups; the staged f32 rows' [`L::raw_piece`] does the same for the row loads).
#[inline(always)]
unsafe fn fill(base: u32, k: u32, tid: u32) {
    let (base, tid) = (fresh_u32(base), fresh_u32(tid));
    let (r, x, p) = (tid / 32, (tid / 16) % 2, tid % 4);
    let t0 = (tid / 8) % 2 + 2 * ((tid / 4) % 2);
    let sw = 2 * t0 + r % 2;
    let (lo, mid) = (16 * (p ^ sw), 16 * ((4 + p) ^ sw));
    let raw = base + L::RAW + x * L::RAW_K + (4 * t0 + r) * 512;
    let flip = (t0 / 2) % 2;
    let raw_at = [0u32, 1, 8, 9, 16, 17, 24, 25].map(|o| 16 * ((2 * p + o) ^ flip));
    let tile = base + x * (L::K_HI - L::Q_HI) + WS::tile_row(t0, r) * 128;
    let cs = base + L::CS + (k & 1) * 16 * L::CS_STRIDE + t0 * L::CS_STRIDE + WS::cs_offset(8 * p);
    let cs_units = [0, 2, 4, 6].map(|a| WS::cs_offset(8 * p + a) - WS::cs_offset(8 * p));
    // SAFETY (whole body): indices inside the layout's regions.
    unsafe {
        let bias_at = base + L::BIAS + (2 * r + x) * 512 + 16 * p;
        let bias = [0u32, 1, 2, 3].map(|g| {
            let [b0, b1, b2, b3] = ld_shared_v4_f32(bias_at + 128 * g);
            let [b4, b5, b6, b7] = ld_shared_v4_f32(bias_at + 128 * g + 64);
            [b0, b1, b2, b3, b4, b5, b6, b7]
        });
        for j in 0..4u32 {
            // Time t₀ + 4j: staged rows 16j further on, tile rows 16j, table rows 4j.
            let row = raw + 8192 * j;
            let words = raw_at.map(|o| ld_shared_v4_f32(row + o));
            let col = |g: usize, e: usize| words[2 * g + e / 4][e % 4];
            let cs_row = cs + 4 * j * L::CS_STRIDE;
            let cs_j = cs_units.map(|o| ld_shared_v4_f32(cs_row + o));
            let mut hi = [[0u32; 4]; 4];
            let mut lo_w = [[0u32; 4]; 4];
            for e in 0..4usize {
                // Columns 2e, 2e + 1 of each group of eight; angles 8p + 2e, + 1.
                let [c0, s0, c1, s1] = cs_j[e];
                let (e0, e1) = (2 * e, 2 * e + 1);
                let (ra0, rb0) =
                    rotate_pair(col(0, e0) + bias[0][e0], col(2, e0) + bias[1][e0], c0, s0);
                let (ra1, rb1) =
                    rotate_pair(col(0, e1) + bias[0][e1], col(2, e1) + bias[1][e1], c1, s1);
                (hi[0][e], lo_w[0][e]) = split_f16x2::<true>(ra0, ra1);
                (hi[2][e], lo_w[2][e]) = split_f16x2::<true>(rb0, rb1);
                (hi[1][e], lo_w[1][e]) =
                    split_f16x2::<true>(col(1, e0) + bias[2][e0], col(1, e1) + bias[2][e1]);
                (hi[3][e], lo_w[3][e]) =
                    split_f16x2::<true>(col(3, e0) + bias[3][e0], col(3, e1) + bias[3][e1]);
            }
            let at = tile + 2048 * j;
            for (o, piece) in [lo, mid, 8192 + lo, 8192 + mid].iter().enumerate() {
                st_shared_v4_f32(at + piece, hi[o].map(f32::from_bits));
                st_shared_v4_f32(at + QK_LO + piece, lo_w[o].map(f32::from_bits));
            }
        }
    }
}

/// A consumer thread's token scalars of one chunk: adt, Δ and the trap logit of chunk time `lane`
/// (lanes ≤ 16, zeros past S; adt zero past the chunk).
#[derive(Clone, Copy, Default)]
struct ChunkInputs {
    adt: f32,
    dt: f32,
    trap: f32,
}

/// Loads consumer thread `ct`'s [`ChunkInputs`] of chunk `k`.
#[inline(always)]
unsafe fn load_chunk_inputs(prm: &ForwardParams, work: &Work, k: u32, ct: u32) -> ChunkInputs {
    let mut a = ChunkInputs::default();
    if k >= work.chunks() {
        return a;
    }
    let lane = ct % 32;
    let (c0, len) = work.chunk(k);
    let t = c0 + lane;
    // SAFETY: token indices checked against the chunk and the sequence; (B,H,S) tensors.
    unsafe {
        if lane <= C && t < work.s_len as u32 {
            let at = (work.row(0) + t) as usize;
            if lane < len {
                a.adt = ldg(prm.adt, at);
            }
            a.dt = ldg(prm.dt, at);
            a.trap = ldg(prm.trap, at);
        }
    }
    a
}

/// Consumer thread `ct`'s share of chunk `k`'s tables (bank `k mod 2`): the score weights
/// `w(i, i')` (`c_{i'}·exp(A_i − A_{i'})` below the diagonal, `γ_i` on it) of rows
/// `lane / 16 + 2j`, `j ∈ {2·warp, 2·warp + 1}`; from warp 0 `exp(A_i)`, the decay `exp(A_last)`
/// and the key scales `exp(Ā_i)·c_i`. Every consumer thread calls it together.
#[inline(always)]
unsafe fn chunk_tables(base: u32, k: u32, len: u32, ct: u32, x: ChunkInputs) {
    let (w, lane) = (ct / 32, ct % 32);
    let [pre, suf, gamma, c_s] = chunk_token_scalars(lane, len, [x.adt, x.dt, x.trap]);
    let bank = k & 1;
    let wt = base + L::WT + bank * 1024;
    let ea = base + L::EXPA + bank * 128;
    let ip = lane % 16;
    let (a_ip, c_ip) = (shfl_idx_f32(pre, ip), shfl_idx_f32(c_s, ip));
    // SAFETY (whole body): indices inside the WT, EXPA and KSCALE regions.
    unsafe {
        for jj in 0..2u32 {
            let j = 2 * w + jj;
            let wv = score_weight(pre, gamma, (a_ip, c_ip), lane, j);
            st_shared_f32(wt + 4 * (lane + 32 * j), wv);
        }
        let exp_a = exp(pre);
        let decay = shfl_idx_f32(exp_a, len - 1);
        if w == 0 && lane < C {
            st_shared_f32(ea + 4 * lane, exp_a);
            st_shared_f32(base + L::KSCALE + 64 * bank + 4 * lane, exp(suf) * c_s);
        }
        if w == 0 && lane == C {
            st_shared_f32(ea + 4 * C, decay);
        }
    }
}

/// Writes consumer thread `ct`'s words of the x and x_w tile pairs: rows of times
/// `4·(ct / 32) + i` (every rank), columns `2·(ct mod 32)`, `+ 1`, from the staged v rows of slot
/// `slot` and the key scales of bank `bank`.
#[inline(always)]
unsafe fn write_x(base: u32, bank: u32, slot: u32, ct: u32) {
    let (base, ct) = (fresh_u32(base), fresh_u32(ct));
    let (w, lane) = (ct / 32, ct % 32);
    let v_rows = base + L::V + slot * L::V_SLOT_BYTES;
    // SAFETY (whole body): indices inside the tiles and tables.
    unsafe {
        let v = [0u32, 1, 2, 3].map(|i| ld_shared_v2_f32(v_rows + 256 * (4 * w + i) + 8 * lane));
        let ks = ld_shared_v4_f32(base + L::KSCALE + 64 * bank + 16 * w);
        let [a0, a1, a2, a3] = ld_shared_v4_f32(base + L::MIMO_V + 32 * lane);
        let [a4, a5, a6, a7] = ld_shared_v4_f32(base + L::MIMO_V + 32 * lane + 16);
        let mv = [[a0, a1], [a2, a3], [a4, a5], [a6, a7]];
        for (i, &[v0, v1]) in v.iter().enumerate() {
            let t = 4 * w + i as u32;
            for (r, mr) in mv.iter().enumerate() {
                let at = mamba3_abi::swizzle128_offset(64, WS::tile_row(t, r as u32), 2 * lane);
                let (x0, x1) = (v0 * mr[0], v1 * mr[1]);
                let (xh, xl) = split_f16x2::<true>(x0, x1);
                st_shared_u32(base + L::X_HI + at, xh);
                st_shared_u32(base + L::X_HI + X_LO + at, xl);
                let (wh, wl) = split_f16x2::<true>(x0 * ks[i], x1 * ks[i]);
                st_shared_u32(base + L::XW_HI + at, wh);
                st_shared_u32(base + L::XW_HI + X_LO + at, wl);
            }
        }
    }
}

/// `main + 2⁻¹¹·cross`, element by element.
#[inline(always)]
fn joined(main: &[[f32; 4]; 8], cross: &[[f32; 4]; 8]) -> [[f32; 4]; 8] {
    let mut out = [[0.0f32; 4]; 8];
    for j in 0..8 {
        for e in 0..4 {
            out[j][e] = fma_rn(cross[j][e], LO_WEIGHT, main[j][e]);
        }
    }
    out
}

/// Issues (and commits) the state product of half `HALF` of N into a fresh main and cross
/// accumulator pair: `x_wᵀ·k̂[:, 64·HALF..]` over the chunk's 64 rows.
///
/// # Safety
/// The consumer's, after the x_w tiles' writes were fenced and every consumer warp's are in.
#[inline(always)]
unsafe fn state_half<const HALF: u32>(base: u32) -> ([[f32; 4]; 8], [[f32; 4]; 8]) {
    let k_hi = base + L::K_HI + 8192 * HALF;
    let desc = |tile: u32, kk: u32| wgmma::mn_major_desc(tile, 64, 16 * kk);
    // SAFETY: the caller's contract.
    unsafe {
        let mut main =
            wgmma::mma_m64n64k16_f16_fresh::<true, true>(desc(base + L::XW_HI, 0), desc(k_hi, 0));
        let mut cross = wgmma::mma_m64n64k16_f16_fresh::<true, true>(
            desc(base + L::XW_HI, 0),
            desc(k_hi + QK_LO, 0),
        );
        wgmma::mma_m64n64k16_f16::<true, true>(
            &mut cross,
            desc(base + L::XW_LO, 0),
            desc(k_hi, 0),
            true,
        );
        for kk in 1..4u32 {
            let (xw_hi, xw_lo) = (desc(base + L::XW_HI, kk), desc(base + L::XW_LO, kk));
            let (kh, kl) = (desc(k_hi, kk), desc(k_hi + QK_LO, kk));
            wgmma::mma_m64n64k16_f16::<true, true>(&mut main, xw_hi, kh, true);
            wgmma::mma_m64n64k16_f16::<true, true>(&mut cross, xw_hi, kl, true);
            wgmma::mma_m64n64k16_f16::<true, true>(&mut cross, xw_lo, kh, true);
        }
        wgmma::commit_group();
        (main, cross)
    }
}

/// Folds a state half's fresh product into the state: `H ← decay·H + main + 2⁻¹¹·cross`.
#[inline(always)]
fn fold_state(state: &mut [[f32; 4]], main: &[[f32; 4]; 8], cross: &[[f32; 4]; 8], decay: f32) {
    for (j, st) in state.iter_mut().enumerate() {
        for e in 0..4 {
            st[e] = fma_rn(st[e], decay, fma_rn(cross[j][e], LO_WEIGHT, main[j][e]));
        }
    }
}

/// The consumer (thread `ct` < 128 of warpgroup 1).
#[inline(always)]
unsafe fn consumer(prm: &ForwardParams, work: &Work, ct: u32) {
    let base = layout_base();
    let (w, lane) = (ct / 32, ct % 32);
    let (g, q) = (lane / 4, lane % 4);
    let h = work.h0;
    let chunks = work.chunks();
    // State rows p0 and p0 + 8 of the thread (and output columns).
    let p0 = 16 * w + g;
    let has_z = prm.z != 0;
    // SAFETY (whole body): the launch contract; shared addresses inside the layout.
    unsafe {
        let d = if prm.d != 0 { ldg(prm.d, h) } else { 0.0 };
        // mimo_z and mimo_o of column ct / 2 (ranks 2·(ct mod 2), + 1).
        {
            let (p, r0) = (ct / 2, 2 * (ct % 2));
            for r in r0..r0 + 2 {
                let at = (h * R as usize + r as usize) * P as usize + p as usize;
                let mz = if has_z { ldg(prm.mimo_z, at) } else { 0.0 };
                st_shared_f32(base + L::MIMO_ZO + 32 * p + 4 * r, mz);
                st_shared_f32(base + L::MIMO_ZO + 32 * p + 16 + 4 * r, ldg(prm.mimo_o, at));
            }
        }
        // mimo_v of the thread's x columns 2·lane, 2·lane + 1 at rank w.
        {
            let at = (h * R as usize + w as usize) * P as usize + 2 * lane as usize;
            let mv = [ldg(prm.mimo_v, at), ldg(prm.mimo_v, at + 1)];
            st_shared_v2_f32(base + L::MIMO_V + 32 * lane + 8 * w, mv);
        }
        let mut state = [[0.0f32; 4]; 16];
        if work.seg > 0 {
            let slot = slot(work, work.seg - 1);
            state = load_state_f32(prm.seg_state + 4 * (slot * (P * N) as usize) as u64, ct);
        }
        for k in 0..chunks.min(2) {
            let x = load_chunk_inputs(prm, work, k, ct);
            chunk_tables(base, k, work.chunk(k).1, ct, x);
        }
        if chunks > 0 {
            bar_arrive::<EMPTY, 256>();
        }
        let mut z = load_z(prm, work, 0, (p0, q), has_z);
        for k in 0..chunks {
            bar_sync::<FULL, 256>();
            let bank = k & 1;
            let base = fresh_u32(base);
            let decay = ld_shared_f32(base + L::EXPA + bank * 128 + 4 * C);
            // The scores q̂·k̂ᵀ: main and cross accumulators over the eight k16 steps.
            wgmma::fence();
            let (q_hi, k_hi) = (
                wgmma::k_major_desc(base + L::Q_HI, 64, 0),
                wgmma::k_major_desc(base + L::K_HI, 64, 0),
            );
            let (q_lo, k_lo) = (
                wgmma::k_major_desc(base + L::Q_LO, 64, 0),
                wgmma::k_major_desc(base + L::K_LO, 64, 0),
            );
            let mut s_main = wgmma::mma_m64n64k16_f16_fresh::<false, false>(q_hi, k_hi);
            let mut s_cross = wgmma::mma_m64n64k16_f16_fresh::<false, false>(q_hi, k_lo);
            wgmma::mma_m64n64k16_f16::<false, false>(&mut s_cross, q_lo, k_hi, true);
            for kk in 1..8u32 {
                let step = wgmma::k_major_offset(64, 16 * kk);
                let adv = |d: u64| wgmma::advance_desc(d, step);
                wgmma::mma_m64n64k16_f16::<false, false>(&mut s_main, adv(q_hi), adv(k_hi), true);
                wgmma::mma_m64n64k16_f16::<false, false>(&mut s_cross, adv(q_hi), adv(k_lo), true);
                wgmma::mma_m64n64k16_f16::<false, false>(&mut s_cross, adv(q_lo), adv(k_hi), true);
            }
            wgmma::commit_group();
            // The row time's weights of the column times 4kk + q, and the chunk's x and x_w,
            // while the scores run.
            let wt = base + L::WT + bank * 1024 + 4 * (16 * (4 * w + g / 2) + q);
            let weights = [0u32, 1, 2, 3].map(|kk| ld_shared_f32(wt + 16 * kk));
            write_x(base, bank, k % 3, ct);
            wgmma::wait_m64n64::<0>(&mut s_main);
            wgmma::wait_m64n64::<0>(&mut s_cross);
            // Weighted scores (time weights; D on the diagonal) split into the S tile pair, four
            // 8×8 tiles per `stmatrix` (the bf16 kernel's map).
            let diag = g / 2 == q;
            let row = 16 * w + 8 * ((lane / 8) % 2) + lane % 8;
            let row_at = base + L::S_HI + 128 * row + 16 * ((lane / 16) ^ (lane % 8));
            for i in 0..4u32 {
                let wv = weights[i as usize];
                let mut hi = [0u32; 4];
                let mut lo = [0u32; 4];
                for m in 0..4usize {
                    let (jj, hh) = (2 * i as usize + m / 2, m % 2);
                    let on_diag = diag && jj as u32 == 2 * w + hh as u32;
                    let (d0, d1) = match (on_diag, g % 2 == 0) {
                        (true, true) => (d, 0.0),
                        (true, false) => (0.0, d),
                        _ => (0.0, 0.0),
                    };
                    let (sm, sc) = (&s_main[jj], &s_cross[jj]);
                    let v0 = fma_rn(fma_rn(sc[2 * hh], LO_WEIGHT, sm[2 * hh]), wv, d0);
                    let v1 = fma_rn(fma_rn(sc[2 * hh + 1], LO_WEIGHT, sm[2 * hh + 1]), wv, d1);
                    (hi[m], lo[m]) = split_f16x2::<true>(v0, v1);
                }
                stmatrix_x4(row_at ^ (32 * i), hi);
                stmatrix_x4((row_at ^ (32 * i)) + X_LO, lo);
            }
            // The state before this chunk split as the inter-chunk product's A operand.
            let mut a_hi = [[0u32; 4]; 8];
            let mut a_lo = [[0u32; 4]; 8];
            for kk in 0..8usize {
                let (s0, s1) = (&state[2 * kk], &state[2 * kk + 1]);
                let parts = [
                    split_f16x2::<true>(s0[0], s0[1]),
                    split_f16x2::<true>(s0[2], s0[3]),
                    split_f16x2::<true>(s1[0], s1[1]),
                    split_f16x2::<true>(s1[2], s1[3]),
                ];
                a_hi[kk] = parts.map(|(h, _)| h);
                a_lo[kk] = parts.map(|(_, l)| l);
            }
            wgmma::fence_proxy_async_shared();
            // Every thread's x, x_w and score words are in before any warp's product reads them.
            bar_sync::<CONSUMER, 128>();
            wgmma::fence();
            let mut y_main = wgmma::mma_m64n64k16_f16_rs_fresh::<false>(a_hi[0], q_hi);
            let mut y_cross = wgmma::mma_m64n64k16_f16_rs_fresh::<false>(a_hi[0], q_lo);
            wgmma::mma_m64n64k16_f16_rs::<false>(&mut y_cross, a_lo[0], q_hi, true);
            for kk in 1..8usize {
                let step = wgmma::k_major_offset(64, 16 * kk as u32);
                let adv = |d: u64| wgmma::advance_desc(d, step);
                wgmma::mma_m64n64k16_f16_rs::<false>(&mut y_main, a_hi[kk], adv(q_hi), true);
                wgmma::mma_m64n64k16_f16_rs::<false>(&mut y_cross, a_hi[kk], adv(q_lo), true);
                wgmma::mma_m64n64k16_f16_rs::<false>(&mut y_cross, a_lo[kk], adv(q_hi), true);
            }
            wgmma::commit_group();
            let ea_at = base + L::EXPA + bank * 128 + 4 * q;
            let ea = [0u32, 1, 2, 3].map(|kk| ld_shared_f32(ea_at + 16 * kk));
            wgmma::wait_m64n64::<0>(&mut y_main);
            wgmma::wait_m64n64::<0>(&mut y_cross);
            wgmma::keep_a_m64k128(&mut a_hi);
            wgmma::keep_a_m64k128(&mut a_lo);
            for (jj, (ym, yc)) in y_main.iter_mut().zip(y_cross.iter_mut()).enumerate() {
                for e in 0..4 {
                    ym[e] *= ea[jj / 2];
                    yc[e] *= ea[jj / 2];
                }
            }
            // The intra-chunk outputs xᵀ·Sᵀ into the same pair, retired and joined before the
            // state products start: the pair and a state half's pair are never live together.
            wgmma::fence();
            for kk in 0..4u32 {
                let x_hi = wgmma::mn_major_desc(base + L::X_HI, 64, 16 * kk);
                let x_lo = wgmma::mn_major_desc(base + L::X_LO, 64, 16 * kk);
                let s_hi = wgmma::k_major_desc(base + L::S_HI, 64, 16 * kk);
                let s_lo = wgmma::k_major_desc(base + L::S_LO, 64, 16 * kk);
                wgmma::mma_m64n64k16_f16::<true, false>(&mut y_main, x_hi, s_hi, true);
                wgmma::mma_m64n64k16_f16::<true, false>(&mut y_cross, x_hi, s_lo, true);
                wgmma::mma_m64n64k16_f16::<true, false>(&mut y_cross, x_lo, s_hi, true);
            }
            wgmma::commit_group();
            wgmma::wait_m64n64::<0>(&mut y_main);
            wgmma::wait_m64n64::<0>(&mut y_cross);
            let y = joined(&y_main, &y_cross);
            // The first state half runs while the gate and the rank contraction do: column
            // 8j + 2q + e of y is time 4(j/2) + q, rank 2(j mod 2) + e.
            let (mut f_main, mut f_cross) = state_half::<0>(base);
            let zc = z;
            let zo = base + L::MIMO_ZO + 32 * p0;
            let zo = [zo, zo + 32 * 8].map(|at| {
                let [z0, z1, z2, z3] = ld_shared_v4_f32(at);
                let [o0, o1, o2, o3] = ld_shared_v4_f32(at + 16);
                ([z0, z1, z2, z3], [o0, o1, o2, o3])
            });
            let mut o = [[0.0f32; 2]; 4];
            for (kk, ok) in o.iter_mut().enumerate() {
                for (hh, out) in ok.iter_mut().enumerate() {
                    let zv = zc[kk][hh];
                    let (mz, mo) = &zo[hh];
                    for jr in 0..2usize {
                        for e in 0..2usize {
                            let r = 2 * jr + e;
                            let yv = y[2 * kk + jr][2 * hh + e];
                            let gated = if has_z { yv * silu_rcp(zv * mz[r]) } else { yv };
                            *out = fma_rn(gated, mo[r], *out);
                        }
                    }
                }
            }
            wgmma::wait_m64n64::<0>(&mut f_main);
            wgmma::wait_m64n64::<0>(&mut f_cross);
            fold_state(&mut state[..8], &f_main, &f_cross, decay);
            let (mut f_main, mut f_cross) = state_half::<1>(base);
            // Chunk k + 2's inputs and chunk k + 1's z, loaded while the second half runs.
            let (bx, by, bz, _) = block_and_thread_fresh();
            let work = &work_of_block(prm, bx, by, bz);
            let (c0, len) = work.chunk(k);
            let ahead = load_chunk_inputs(prm, work, k + 2, ct);
            z = load_z(prm, work, k + 1, (p0, q), has_z);
            wgmma::wait_m64n64::<0>(&mut f_main);
            wgmma::wait_m64n64::<0>(&mut f_cross);
            if k + 1 < chunks {
                bar_arrive::<EMPTY, 256>();
            }
            fold_state(&mut state[8..], &f_main, &f_cross, decay);
            // The output rows share the score tiles: every warp's slice of the intra-chunk
            // product (which reads all of them) has retired only once every warp is past its
            // wait; this barrier also ends every read of the tables' bank k mod 2.
            bar_sync::<CONSUMER, 128>();
            let base = fresh_u32(base);
            let out_rows = base + L::OUT;
            for (kk, ok) in o.iter().enumerate() {
                for (hh, &v) in ok.iter().enumerate() {
                    let t = 4 * kk as u32 + q;
                    st_shared_f32(out_rows + t * L::OUT_STRIDE + 4 * (p0 + 8 * hh as u32), v);
                }
            }
            bar_sync::<CONSUMER, 128>();
            let (t, piece) = (ct / 8, ct % 8);
            if t < len {
                let bth = work.token_head(c0 + t, work.h0 as u32);
                for pc in [piece, piece + 8] {
                    let v = ld_shared_v4_f32(out_rows + t * L::OUT_STRIDE + 16 * pc);
                    st_global_v4_f32(row_address(prm.out + 16 * pc as u64, bth, 4 * P), v);
                }
            }
            // Chunk k + 2's tables, into the bank chunk k's products no longer read.
            if k + 2 < chunks {
                chunk_tables(base, k + 2, work.chunk(k + 2).1, ct, ahead);
            }
        }
        let (bx, by, bz, tx) = block_and_thread_fresh();
        let work = work_of_block(prm, bx, by, bz);
        let at_end = work.chunks() > 0 && work.t_end == work.s_len as u32;
        if at_end && prm.final_ssm != 0 {
            let bh = work.b * work.heads + work.h0;
            store_state_f32(
                prm.final_ssm + 4 * (bh * (P * N) as usize) as u64,
                tx % 128,
                &state,
            );
        }
    }
}

/// z of chunk `k` at the thread's outputs: times `4kk + q`, columns `p0` and `p0 + 8`; zeros
/// past the chunk (or without z).
#[inline(always)]
unsafe fn load_z(
    prm: &ForwardParams,
    work: &Work,
    k: u32,
    (p0, q): (u32, u32),
    has_z: bool,
) -> [[f32; 2]; 4] {
    let mut z = [[0.0f32; 2]; 4];
    if !has_z || k >= work.chunks() {
        return z;
    }
    let (c0, len) = work.chunk(k);
    let first = row_address(
        prm.z + 4 * p0 as u64,
        work.token_head(c0 + q, work.h0 as u32),
        4 * P,
    );
    let stride = (4 * 4 * work.heads as u32 * P) as u64;
    // SAFETY: tokens < len of the chunk, inside the (B,S,H,P) z of the launch contract.
    unsafe {
        for (kk, zw) in z.iter_mut().enumerate() {
            if 4 * kk as u32 + q < len {
                let row = first + stride * kk as u64;
                *zw = [ldg(row, 0), ldg(row, 8)];
            }
        }
    }
    z
}

/// The warp-specialized f32 forward at R = 4, N = 128, P = 64, Na = 32, C = 16 (module docs).
///
/// # Safety
/// The launch contract of the module docs.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_ws_f32_r4_n128_p64_na32_c16(params: ForwardParams) {
    crate::arch::barrier::exit_unless_sm90a();
    // SAFETY: forwarded to the caller.
    unsafe { forward_ws_f32(&params) }
}
