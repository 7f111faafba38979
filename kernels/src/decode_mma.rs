//! Mamba-3 MIMO decode of one token on the tensor cores: the recurrence of spec §2.1 for `T = 1`
//! with bf16 activations at R = 4, N = 128, P = 64 (any `Na ≤ N/2`, both rotations, every output
//! mode, optional z and D, GQA).
//!
//! A block of [`DECODE_MMA_WARPS`] warps runs one (b, h); warp `w` holds state rows
//! `16w .. 16w + 16` as the f32 accumulators of sixteen `mma.m16n8k16` n8 tiles (64 registers a
//! lane), loaded and stored as 16-byte quads: lane quad `q` of a row's columns `16s .. 16s + 16`
//! holds columns `16s + 4q .. 16s + 4q + 4`, which are slots 0–1 of n8 tiles `2s` and `2s + 1`.
//! The tiles' column order ([`logical_column`]) is therefore not the state's; the bf16 operand
//! tiles in shared memory are written in it, so every product sums over matching columns.
//!
//! * Update `H ← α·H + W·Kᵀ`: W is the (16 × 8) matrix of row weights `β·v_prev·mimo_v` (ranks
//!   0–3) and `γ·v·mimo_v` (4–7), K the eight rank vectors k̂_prev and k̂. W is split into bf16
//!   `hi + lo` and k̂ likewise (k̂_prev is bf16 already): one 16-deep step `[W_hi | W_lo]·[K; K]`
//!   and one 8-deep step `W_hi·k̂_lo` per n8 tile, so the increment keeps about 2^-16 of its size
//!   and the state stays f32 (the α scaling is f32).
//! * Read-out `y = H·q̂`: the accumulators are the A operand (`hi + lo` bf16 again, two steps per
//!   16 columns) against an 8-column B whose columns 0–3 are q̂'s bf16 ranks and 4–7 their
//!   remainders, so `y_r` = column r + column r + 4 of the product (one shuffle).
//!
//! The per-(b, h) prologue (angles, rotation and bias of q and k) is spread over the block: each
//! thread forms four rotation pairs of one rank of q or k; every warp advances the angles (lane
//! `i` angle `i` and `i + 32`; the increment in f32 and θ in f64, as the bf16 tensor-core forward
//! does: an f64 tanh measured +0.1–0.3 µs per call at batch 1–8) and the lanes take their pairs'
//! sines and cosines by shuffles. The output stage's inputs are loaded after the barrier, when the
//! prologue's registers are free (staged by `cp.async` at the start instead, the calls measured
//! 0.3–0.6 µs slower at batch 1–8).
//!
//! Calls of several tokens run the token loop of `decode_mma_tokens.rs`, which shares this file's
//! column order and layout helpers; this one-token body stays separate because every shared
//! restructuring of it measured 2–8% slower on the H200 (the driver's JIT schedules the barrier
//! and the state loads differently).
//!
//! # Launch contract
//! Grid `B·H` blocks of `32·DECODE_MMA_WARPS` threads, dynamic shared memory
//! `decode_mma_smem::BYTES`; `tokens == 1`, `[R, N, P] == DECODE_MMA_GEOMETRY`, `Na ≤ N/2`, bf16
//! activations; every pointer of [`DecodeParams`] valid for its documented shape (the host
//! validates). `arrivals` and `rows_per_warp` are not used.

use mamba3_abi::{
    decode_mma_smem as lay, output_mode, rotation, DecodeParams, DECODE_MMA_GEOMETRY,
    DECODE_MMA_WARPS,
};

use crate::angles::{
    angle_increment_f32, lane_angle_inputs, reduced_near_f32, rotate_pair, stored_f32, warp_sincos,
    wrap_two_pi_f64,
};
use crate::arch::float::pack_bf16x2;
use crate::arch::global::{ld_global_nc_f32, ld_global_v4_f32, st_global_f32, st_global_v4_f32};
use crate::arch::ldmatrix::{ldmatrix_x4, ldmatrix_x4_trans};
use crate::arch::mma::{mma_m16n8k16_bf16_f32, mma_m16n8k8_bf16_f32};
use crate::arch::sreg::{
    block_x, ld_shared_f32, shfl_xor_f32, smem_base, st_shared_f32, st_shared_u32, sync_threads,
    thread_x,
};
use crate::elem::{Bf16, Elem};
use crate::math::{exp, rsqrt, sigmoid, silu, sincos, split_bf16x2};

/// Rank of the kernel's geometry.
pub(crate) const R: u32 = DECODE_MMA_GEOMETRY[0];
/// State size of the kernel's geometry.
pub(crate) const N: u32 = DECODE_MMA_GEOMETRY[1];
/// Head dim of the kernel's geometry.
pub(crate) const P: u32 = DECODE_MMA_GEOMETRY[2];
/// n8 accumulator tiles of a warp's 16 state rows.
pub(crate) const TILES: usize = (N / 8) as usize;
/// Chunks of four rotation pairs in one rank vector.
pub(crate) const CHUNKS: u32 = N / 8;

// One prologue item (four rotation pairs of one rank of q or of k) per thread.
const _: () = assert!(R * 2 * CHUNKS == 32 * DECODE_MMA_WARPS && P == 16 * DECODE_MMA_WARPS);

/// Position of state column `n` in the accumulators' column order (column `8j + c` of the order is
/// slot column `c` of n8 tile `j`): within each 16 columns, lane quad `q`'s four consecutive
/// columns `4q .. 4q + 4` are columns `2q, 2q + 1` of the first tile and of the second.
#[inline(always)]
pub const fn logical_column(n: u32) -> u32 {
    let m = n % 16;
    16 * (n / 16) + 8 * ((m / 2) % 2) + 2 * (m / 4) + m % 2
}

/// The first state columns of the two 4-column quads of rotation chunk `c` (pairs `4c .. 4c + 4`):
/// half-split pairs `(j, j + N/2)` lie in quads `4c` and `N/2 + 4c`; pairwise pairs `(2j, 2j + 1)`
/// fill quads `8c` and `8c + 4`.
#[inline(always)]
pub(crate) fn chunk_quads(c: u32, half_split: bool) -> [u32; 2] {
    if half_split {
        [4 * c, N / 2 + 4 * c]
    } else {
        [8 * c, 8 * c + 4]
    }
}

/// The chunk's four pairs as (first members, second members), from its two quads.
#[inline(always)]
pub(crate) fn to_pairs([a, b]: [[f32; 4]; 2], half_split: bool) -> ([f32; 4], [f32; 4]) {
    if half_split {
        (a, b)
    } else {
        ([a[0], a[2], b[0], b[2]], [a[1], a[3], b[1], b[3]])
    }
}

/// Inverse of [`to_pairs`].
#[inline(always)]
pub(crate) fn from_pairs(first: [f32; 4], second: [f32; 4], half_split: bool) -> [[f32; 4]; 2] {
    if half_split {
        [first, second]
    } else {
        [
            [first[0], second[0], first[1], second[1]],
            [first[2], second[2], first[3], second[3]],
        ]
    }
}

/// Byte address of f32 element `i` of a global tensor.
#[inline(always)]
pub(crate) fn gf(base: u64, i: u32) -> u64 {
    base + 4 * i as u64
}

/// `H ← α·H`.
#[inline(always)]
pub(crate) fn decay(acc: &mut [[f32; 4]; TILES], alpha: f32) {
    for tile in acc.iter_mut() {
        for x in tile.iter_mut() {
            *x *= alpha;
        }
    }
}

/// `H += W·Kᵀ`: per four n8 tiles one `ldmatrix.trans` of K (lane address `k_at`) and one of k̂'s
/// remainders (`k_lo_at`).
///
/// # Safety
/// Every lane of the warp calls it; the addresses lie inside the kernel's shared memory.
#[inline(always)]
pub(crate) unsafe fn update(
    acc: &mut [[f32; 4]; TILES],
    [k_at, k_lo_at]: [u32; 2],
    a_wide: &[u32; 4],
    a_narrow: &[u32; 2],
) {
    for i in 0..TILES / 4 {
        // SAFETY: warp-wide, inside the tiles.
        unsafe {
            let k = ldmatrix_x4_trans(k_at + 64 * i as u32);
            let k_lo = ldmatrix_x4_trans(k_lo_at + 64 * i as u32);
            for t in 0..4 {
                mma_m16n8k16_bf16_f32(&mut acc[4 * i + t], *a_wide, [k[t], k[t]]);
                mma_m16n8k8_bf16_f32(&mut acc[4 * i + t], *a_narrow, k_lo[t]);
            }
        }
    }
}

/// The read-out `y = H·q̂` of the lane's output row and ranks, q̂'s tile at lane address `q_at`
/// (per 32 columns one `ldmatrix`: two 16-deep steps of B).
///
/// # Safety
/// Every lane of the warp calls it; the address lies inside the kernel's shared memory.
#[inline(always)]
pub(crate) unsafe fn read_out(acc: &[[f32; 4]; TILES], q_at: u32, quad: u32) -> [f32; 2] {
    // The bf16 and remainder passes accumulate apart: two chains of eight `mma` instead of one of
    // sixteen.
    let (mut y, mut y_lo) = ([0.0f32; 4], [0.0f32; 4]);
    for i in 0..TILES / 4 {
        // SAFETY: warp-wide, inside the tile.
        unsafe {
            let qb = ldmatrix_x4(q_at + 64 * i as u32);
            for u in 0..2 {
                let (t0, t1) = (acc[4 * i + 2 * u], acc[4 * i + 2 * u + 1]);
                let (h0, l0) = split_bf16x2(t0[0], t0[1]);
                let (h1, l1) = split_bf16x2(t0[2], t0[3]);
                let (h2, l2) = split_bf16x2(t1[0], t1[1]);
                let (h3, l3) = split_bf16x2(t1[2], t1[3]);
                let bq = [qb[2 * u], qb[2 * u + 1]];
                mma_m16n8k16_bf16_f32(&mut y, [h0, h1, h2, h3], bq);
                mma_m16n8k16_bf16_f32(&mut y_lo, [l0, l1, l2, l3], bq);
            }
        }
    }
    // Columns r and r + 4 (lane quads q and q ^ 2) hold q̂'s bf16 and remainder products.
    for i in 0..4 {
        y[i] += y_lo[i];
        y[i] += shfl_xor_f32(y[i], 2);
    }
    if quad >= 2 {
        [y[2], y[3]]
    } else {
        [y[0], y[1]]
    }
}

/// Writes the thread's k̂ words (bf16 pairs `k_hi[i][pair]` of the columns from `quads[i]`) into
/// row `row` of the state's k `(B,R,H,N)` at `k_state`.
///
/// # Safety
/// The row is inside the state and no other thread writes these columns.
#[inline(always)]
pub(crate) unsafe fn store_k_state(k_state: u64, row: u32, quads: [u32; 2], k_hi: &[[u32; 2]; 2]) {
    for (i, &c0) in quads.iter().enumerate() {
        for (pair, &word) in k_hi[i].iter().enumerate() {
            let n = c0 + 2 * pair as u32;
            let (x0, x1) = (
                f32::from_bits(word << 16),
                f32::from_bits(word & 0xffff_0000),
            );
            // SAFETY: inside the caller's row.
            unsafe {
                Bf16::store(k_state, (row + n) as usize, x0);
                Bf16::store(k_state, (row + n + 1) as usize, x1);
            }
        }
    }
}

/// Stores a prologue item's rotated pairs (columns from `quads`) as bf16 words into tile rows
/// `hi_tile` and, their rounding remainders, `lo_tile` (byte offsets), and with `carried` the
/// carried k̂ `k_prev` (bf16 already) into row `carried_row`; returns the bf16 words.
///
/// # Safety
/// The rows lie inside the kernel's shared memory.
#[inline(always)]
pub(crate) unsafe fn store_item_words(
    sm: u32,
    quads: &[u32; 2],
    rotated: &[[f32; 4]; 2],
    [hi_tile, lo_tile]: [u32; 2],
    carried: bool,
    carried_row: u32,
    k_prev: &[[f32; 4]; 2],
) -> [[u32; 2]; 2] {
    let mut k_hi = [[0u32; 2]; 2];
    for (i, &c0) in quads.iter().enumerate() {
        for pair in 0..2 {
            let n = c0 + 2 * pair as u32;
            let (x0, x1) = (rotated[i][2 * pair], rotated[i][2 * pair + 1]);
            let (hi, lo) = split_bf16x2(x0, x1);
            k_hi[i][pair] = hi;
            let at = 2 * logical_column(n);
            // SAFETY: inside the caller's rows.
            unsafe {
                st_shared_u32(sm + hi_tile + at, hi);
                st_shared_u32(sm + lo_tile + at, lo);
                if carried {
                    let prev_pair = pack_bf16x2(k_prev[i][2 * pair], k_prev[i][2 * pair + 1]);
                    st_shared_u32(sm + carried_row + at, prev_pair);
                }
            }
        }
    }
    k_hi
}

/// The tensor-core decode body; see the module docs.
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn decode_mma(prm: &DecodeParams) {
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, quad) = (lane / 4, lane % 4);
    let heads = prm.heads;
    let na = prm.na;
    let bh = block_x();
    let (b, h) = (bh / heads, bh % heads);
    let group = h / (heads / prm.groups);
    let half_split = prm.rotation != rotation::PAIRWISE;
    let has_z = prm.z != 0;
    let norm = prm.mode == output_mode::FUSED_NORM;
    let sm = smem_base();

    // This thread's prologue item: four rotation pairs of rank `rank` of q (or k: `is_k`).
    let rank = tid / (2 * CHUNKS);
    let is_k = (tid / CHUNKS) % 2 == 1;
    let chunk = tid % CHUNKS;
    let quads = chunk_quads(chunk, half_split);
    // The warp's rows held by this lane, and the rank slots of the update's A operand it holds
    // (slots 2q, 2q + 1: previous-token ranks for q < 2, current-token ranks for q ≥ 2).
    let rows = [16 * warp + g, 16 * warp + g + 8];
    let prev = quad < 2;
    let slot_ranks = [(2 * quad) % R, (2 * quad) % R + 1];
    // The output stage: one row and two ranks per lane.
    let out_row = 16 * warp + g + 8 * (quad / 2);
    let out_ranks = [2 * (quad % 2), 2 * (quad % 2) + 1];

    // SAFETY (whole body): indices stay inside the shapes of the launch contract; shared offsets
    // inside `decode_mma_smem`; every lane reaches every shuffle, `ldmatrix` and `mma`, and every
    // thread the block barriers (their conditions are uniform over the block). Global state is
    // read before the first barrier and written after it, each element by one thread.
    unsafe {
        // --- Loads: the prologue's first, then the state ---
        let dt = ld_global_nc_f32(gf(prm.dt, bh));
        let adt = ld_global_nc_f32(gf(prm.adt, bh));
        let trap = Bf16::load(prm.trap, bh as usize);
        let angle_inputs = lane_angle_inputs(prm.theta, prm.angles, bh * na, na, lane);
        let (src, bias) = if is_k {
            (prm.k, prm.k_bias)
        } else {
            (prm.q, prm.q_bias)
        };
        let qk_row = ((b * R + rank) * prm.groups + group) * N;
        let bias_row = (h * R + rank) * N;
        let raw: [[f32; 4]; 2] = quads.map(|c| Bf16::load4(src, (qk_row + c) as usize));
        let bias_quads: [[f32; 4]; 2] = quads.map(|c| f32::load4(bias, (bias_row + c) as usize));
        let k_state_row = ((b * R + rank) * heads + h) * N;
        let k_prev: [[f32; 4]; 2] = if is_k {
            quads.map(|c| Bf16::load4(prm.k_state, (k_state_row + c) as usize))
        } else {
            [[0.0; 4]; 2]
        };
        // Row weights' inputs: raw v (current token) or the state's v (previous), and mimo_v.
        let v_src = if prev { prm.v_state } else { prm.v };
        let w_v = rows.map(|p| Bf16::load(v_src, (bh * P + p) as usize));
        let w_mimo =
            rows.map(|p| slot_ranks.map(|r| ld_global_nc_f32(gf(prm.mimo_v, (h * R + r) * P + p))));
        let row_addr = |p: u32| prm.ssm + 4 * (bh * P + p) as u64 * N as u64;
        let mut acc = [[0.0f32; 4]; TILES];
        for s in 0..TILES / 2 {
            let col = 16 * s as u64 + 4 * quad as u64;
            let lo = ld_global_v4_f32(row_addr(rows[0]) + 4 * col);
            let hi = ld_global_v4_f32(row_addr(rows[1]) + 4 * col);
            acc[2 * s] = [lo[0], lo[1], hi[0], hi[1]];
            acc[2 * s + 1] = [lo[2], lo[3], hi[2], hi[3]];
        }
        // --- Scalars, angles (every warp all of them, lane i angles i and i + 32) ---
        let lambda = sigmoid(trap);
        let alpha = exp(adt);
        let beta = (1.0 - lambda) * dt * alpha;
        let gamma = lambda * dt;
        let mut theta_stored = [0.0f32; 2];
        let mut angle_sincos = [(0.0f32, 1.0f32); 2];
        for a in 0..2 {
            if lane + 32 * (a as u32) < na {
                let [old, logit] = angle_inputs[a];
                let theta = wrap_two_pi_f64(old as f64 + angle_increment_f32(logit, dt) as f64);
                theta_stored[a] = stored_f32(theta);
                angle_sincos[a] = sincos(reduced_near_f32(theta));
            }
        }

        // --- This thread's rotation pairs: biased, rotated, split into bf16 and stored ---
        let biased: [[f32; 4]; 2] =
            core::array::from_fn(|i| core::array::from_fn(|e| raw[i][e] + bias_quads[i][e]));
        let (mut first, mut second) = to_pairs(biased, half_split);
        for e in 0..4 {
            let j = 4 * chunk + e as u32;
            let (s, c) = warp_sincos(angle_sincos, j, na > 32);
            if j < na {
                (first[e], second[e]) = rotate_pair(first[e], second[e], c, s);
            }
        }
        let rotated = from_pairs(first, second, half_split);
        // Byte offset of the pair (n, n + 1), n even, in a tile row.
        let pair_at = |row: u32, n: u32| row * lay::ROW_STRIDE + 2 * logical_column(n);
        let (hi_tile, lo_tile) = if is_k {
            (lay::K + pair_at(R + rank, 0), lay::K_LO + pair_at(rank, 0))
        } else {
            (lay::Q + pair_at(rank, 0), lay::Q + pair_at(R + rank, 0))
        };
        let tiles = [hi_tile, lo_tile];
        let k_prev_row = lay::K + pair_at(rank, 0);
        let k_hi = store_item_words(sm, &quads, &rotated, tiles, is_k, k_prev_row, &k_prev);

        // --- The update's A operand: this lane's row weights, split into bf16 hi and lo ---
        let scale = if prev { beta } else { gamma };
        let w = |k: usize, i: usize| scale * w_v[k] * w_mimo[k][i];
        let (hi0, lo0) = split_bf16x2(w(0, 0), w(0, 1));
        let (hi1, lo1) = split_bf16x2(w(1, 0), w(1, 1));
        // 16-deep step: depths 0–7 the weights' bf16, 8–15 their remainders (B repeats K).
        let a_wide = [hi0, hi1, lo0, lo1];
        // 8-deep step against k̂'s remainders (depths 4–7; depths 0–3 zero here).
        let a_narrow = if prev { [0, 0] } else { [hi0, hi1] };
        for tile in acc.iter_mut() {
            for x in tile.iter_mut() {
                *x *= alpha;
            }
        }
        // Every thread has read θ, k̂_prev and v_prev and stored its operand words.
        sync_threads();

        // The output stage's inputs (issued after the barrier: before it the state and the
        // prologue take every register).
        let row_param =
            |tensor: u64, r: u32| ld_global_nc_f32(gf(tensor, (h * R + r) * P + out_row));
        let out_v = Bf16::load(prm.v, (bh * P + out_row) as usize);
        let out_z = if has_z {
            Bf16::load(prm.z, (bh * P + out_row) as usize)
        } else {
            0.0
        };
        let out_mimo_v = out_ranks.map(|r| row_param(prm.mimo_v, r));
        let out_mimo_z = out_ranks.map(|r| if has_z { row_param(prm.mimo_z, r) } else { 0.0 });
        let out_mimo_o = out_ranks.map(|r| {
            if prm.mimo_o != 0 {
                row_param(prm.mimo_o, r)
            } else {
                0.0
            }
        });
        let norm_w = if norm && prm.norm_weight != 0 {
            ld_global_nc_f32(gf(prm.norm_weight, h * P + out_row))
        } else {
            1.0
        };
        let d_skip = if prm.d != 0 {
            ld_global_nc_f32(gf(prm.d, h))
        } else {
            0.0
        };

        // --- State after the barrier: θ, k̂ and raw v written back once ---
        if warp == 0 {
            for (a, &t) in theta_stored.iter().enumerate() {
                let i = lane + 32 * a as u32;
                if i < na {
                    st_global_f32(gf(prm.theta, bh * na + i), t);
                }
            }
        }
        if is_k {
            store_k_state(prm.k_state, k_state_row, quads, &k_hi);
        }

        if quad % 2 == 0 {
            Bf16::store(prm.v_state, (bh * P + out_row) as usize, out_v);
        }

        // --- Update: per four n8 tiles one `ldmatrix.trans` of K and one of k̂'s remainders ---
        let (mat_row, mat) = (lane % 8, lane / 8);
        let k_at = sm + lay::K + mat_row * lay::ROW_STRIDE + 16 * mat;
        let k_lo_at = sm + lay::K_LO + (mat_row % R) * lay::ROW_STRIDE + 16 * mat;
        for i in 0..TILES / 4 {
            let k = ldmatrix_x4_trans(k_at + 64 * i as u32);
            let k_lo = ldmatrix_x4_trans(k_lo_at + 64 * i as u32);
            for t in 0..4 {
                mma_m16n8k16_bf16_f32(&mut acc[4 * i + t], a_wide, [k[t], k[t]]);
                mma_m16n8k8_bf16_f32(&mut acc[4 * i + t], a_narrow, k_lo[t]);
            }
        }
        for s in 0..TILES / 2 {
            let col = 16 * s as u64 + 4 * quad as u64;
            let (t0, t1) = (acc[2 * s], acc[2 * s + 1]);
            st_global_v4_f32(row_addr(rows[0]) + 4 * col, [t0[0], t0[1], t1[0], t1[1]]);
            st_global_v4_f32(row_addr(rows[1]) + 4 * col, [t0[2], t0[3], t1[2], t1[3]]);
        }

        // --- Read-out: per 32 columns one `ldmatrix` of q̂ (two 16-deep steps of B) ---
        let q_at = sm + lay::Q + mat_row * lay::ROW_STRIDE + 16 * mat;
        let y_row = read_out(&acc, q_at, quad);

        // --- Outputs: D skip, gate, optional norm, contraction over ranks ---
        let out_y: [f32; 2] = core::array::from_fn(|k| y_row[k] + d_skip * out_v * out_mimo_v[k]);
        let gate: [f32; 2] = core::array::from_fn(|k| {
            if has_z {
                silu(out_z * out_mimo_z[k])
            } else {
                1.0
            }
        });
        if prm.mode == output_mode::PREREDUCE {
            for k in 0..2 {
                let at = ((b * R + out_ranks[k]) * heads + h) * P + out_row;
                Bf16::store(prm.out, at as usize, out_y[k] * gate[k]);
            }
        } else {
            let mut rstd = [1.0f32; 2];
            if norm {
                // Sums of squares over the warp's rows (lanes of one rank pair: quad mod 2),
                // then over the block's warps.
                let mut sq = out_y.map(|x| x * x);
                for mask in [2, 4, 8, 16] {
                    for s in sq.iter_mut() {
                        *s += shfl_xor_f32(*s, mask);
                    }
                }
                if lane < 2 {
                    for (k, &s) in sq.iter().enumerate() {
                        st_shared_f32(sm + lay::NORM + 4 * (warp * R + 2 * lane + k as u32), s);
                    }
                }
                sync_threads();
                for (k, rs) in rstd.iter_mut().enumerate() {
                    let mut total = 0.0f32;
                    for w in 0..DECODE_MMA_WARPS {
                        total += ld_shared_f32(sm + lay::NORM + 4 * (w * R + out_ranks[k]));
                    }
                    *rs = rsqrt(total / P as f32 + prm.norm_eps);
                }
            }
            let mut out = 0.0f32;
            for k in 0..2 {
                out += out_y[k] * rstd[k] * norm_w * gate[k] * out_mimo_o[k];
            }
            out += shfl_xor_f32(out, 1);
            if quad % 2 == 0 {
                Bf16::store(prm.out, (bh * P + out_row) as usize, out);
            }
        }
    }
}

/// Asks L2 for what the block's (b, h) reads: the angle rows' lines and the token scalars, then
/// per thread `t < 16` one row by a bulk prefetch (q, k and the state's k of rank `t mod 4`, then
/// v, the state's v, z and the state itself). Branch-free (predicated instructions), so that the
/// body after it compiles as without it.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn prefetch_call(prm: &DecodeParams) {
    use crate::arch::grid_dependency::{prefetch_l2_bulk_if, prefetch_l2_line_if};
    let tid = thread_x();
    let bh = block_x();
    let heads = prm.heads;
    let (b, h) = (bh / heads, bh % heads);
    let group = h / (heads / prm.groups);
    let angle_at = 4 * (bh * prm.na + tid) as u64;
    prefetch_l2_line_if(tid < prm.na, prm.theta + angle_at);
    prefetch_l2_line_if(tid < prm.na, prm.angles + angle_at);
    let scalar = match tid {
        0 => prm.dt + 4 * bh as u64,
        1 => prm.adt + 4 * bh as u64,
        _ => prm.trap + 2 * bh as u64,
    };
    prefetch_l2_line_if(tid < 3, scalar);
    let rank = tid % R;
    let qk_row = 2 * (((b * R + rank) * prm.groups + group) * N) as u64;
    let k_state_row = 2 * (((b * R + rank) * heads + h) * N) as u64;
    let v_row = 2 * (bh * P) as u64;
    let (addr, bytes) = match (tid / R, rank) {
        (0, _) => (prm.q + qk_row, 2 * N),
        (1, _) => (prm.k + qk_row, 2 * N),
        (2, _) => (prm.k_state + k_state_row, 2 * N),
        (_, 0) => (prm.v + v_row, 2 * P),
        (_, 1) => (prm.v_state + v_row, 2 * P),
        (_, 2) => (prm.z + v_row, 2 * P),
        _ => (prm.ssm + 4 * (bh * P * N) as u64, 4 * P * N),
    };
    prefetch_l2_bulk_if(tid < 16 && (tid != 14 || prm.z != 0), addr, bytes);
}

/// Tensor-core decode entry point (bf16, R = 4, N = 128, P = 64); see the module docs.
///
/// # Safety
/// See the module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn decode_mma_bf16_r4_n128_p64(params: DecodeParams) {
    crate::arch::grid_dependency::dependent_launch_prologue();
    // SAFETY: forwarded launch contract.
    unsafe { decode_mma(&params) }
}

/// [`decode_mma_bf16_r4_n128_p64`] whose blocks first ask L2 for their inputs and state
/// ([`prefetch_call`], before the dependent-launch wait): for grids that fit the GPU at once,
/// whose blocks can be resident while the previous grid finishes. A separate entry, so that the
/// other keeps its code.
///
/// # Safety
/// See the module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn decode_mma_prefetch_bf16_r4_n128_p64(params: DecodeParams) {
    prefetch_call(&params);
    crate::arch::grid_dependency::dependent_launch_prologue();
    // SAFETY: forwarded launch contract.
    unsafe { decode_mma(&params) }
}
