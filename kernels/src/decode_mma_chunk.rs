//! Mamba-3 MIMO decode of `1 ≤ T ≤ 8` tokens on the tensor cores in chunk form (bf16
//! activations, R = 4, N = 128, P = 64, any `Na ≤ N/2`, both rotations, every output mode,
//! optional z and D, GQA): the recurrence of spec §2.1 over the call's tokens as one chunk of the
//! SSD decomposition, started from the state, which a block per (b, h) holds as `mma`
//! accumulators (the layout and column order of `decode_mma.rs`) from one load to one store.
//!
//! With `a_t` the log decays, `A_t = a_0 + … + a_t`, `λ_t = σ(trap_t)`, `γ_t = λ_t·Δ_t`,
//! `ε_t = (1 − λ_t)·Δ_t` and `c_t = γ_t + ε_{t+1}`, the keys of the call are the carried k̂ (key
//! slot `j = 0`: `A = 0`, `c = ε_0`, x from the state's raw v) and the tokens' k̂ (slot `j = t + 1`),
//! x_j = v_j·mimo_v. Then (H the state before the call)
//!
//! * `y_t = e^{A_t}·H·q̂_t + Σ_j w(t, j)·(k̂_j·q̂_t)·x_j`, `w(t, j) = e^{A_t − A_j}·c_j` for keys
//!   before token t, `γ_t` for its own, 0 after;
//! * `H ← e^{A_{T−1}}·H + Σ_j u_j·x_j·k̂_jᵀ`, `u_j = w(T − 1, j)`.
//!
//! Every product is bf16 `mma.m16n8k16` with f32 accumulation, rounding the operands the chunked
//! forward rounds (q̂, k̂, x, the scaled x, the weighted scores and the state as the read-out's A
//! operand): the read-out `H·q̂` takes the accumulators as A against q̂'s rows (32 query rows:
//! token t rank r at `4t + r`), the scores `K·Q̂ᵀ` (48 key rows × 32 query columns) are weighted
//! and stored as bf16, the intra term and the state update take x and the scaled x through
//! `ldmatrix .trans`. Four block barriers (five with the fused norm): inputs staged (`cp.async`
//! for the raw q, k, v, z rows and the head's biases, mimo and norm weights; angles, token
//! scalars and the carried k̂ beside them), operand tiles formed, weighted scores stored, norm
//! sums. Warp w forms the (cos, sin) of tokens 2w, 2w + 1, summing the angle increments up to
//! them in f64 (one reduction to [0, 2π) at the end, for the stored θ).
//!
//! The state's loads are issued after the angle phase, right before the first barrier: issued
//! first, the H200 measured B = 256, T = 8 at 626 µs per call (their registers also pushed the
//! angle phase to spill), after the barrier 633, here 570.
//!
//! Beside the chunked forward's short-call kernel (`forward_mma_units_*`, 219 registers and
//! 113 KB of shared memory, two blocks per SM walking the batch rows) this one keeps a single
//! chunk's tiles (71 KB, 168 registers) and three blocks per SM.
//!
//! # Launch contract
//! Grid `B·H` blocks of `32·DECODE_MMA_WARPS` threads, dynamic shared memory
//! `decode_mma_chunk_smem::BYTES`; `1 ≤ tokens ≤ DECODE_MMA_CHUNK_MAX_TOKENS`,
//! `[R, N, P] == DECODE_MMA_GEOMETRY`, `Na ≤ N/2`, bf16 activations with q, k, v and z 16-byte
//! aligned; every pointer of [`DecodeParams`] valid for its documented shape (the host
//! validates). `arrivals` and `rows_per_warp` are not used.

use mamba3_abi::{
    decode_mma_chunk_smem as lay, output_mode, rotation, DecodeParams, DECODE_MMA_CHUNK_MAX_TOKENS,
    DECODE_MMA_WARPS,
};

use crate::angles::{
    angle_increment_f32, reduced_near_f32, rotate_pair, stored_f32, wrap_two_pi_f64,
};
use crate::arch::cp_async::{commit_group, cp_async_cg_16, wait_group};
use crate::arch::float::pack_bf16x2;
use crate::arch::global::{
    ld_global_f32, ld_global_nc_f32, ld_global_v4_f32, st_global_f32, st_global_u32,
    st_global_v4_f32,
};
use crate::arch::ldmatrix::{ldmatrix_x4, ldmatrix_x4_trans};
use crate::arch::mma::mma_m16n8k16_bf16_f32;
use crate::arch::sreg::{
    block_x, ld_shared_f32, ld_shared_u32, ld_shared_v2_f32, ld_shared_v4_f32, shfl_idx_f32,
    shfl_xor_f32, smem_base, st_shared_f32, st_shared_u32, st_shared_v2_f32, sync_threads,
    thread_x,
};
use crate::decode_mma::{
    chunk_quads, from_pairs, gf, logical_column, store_k_state, to_pairs, CHUNKS, N, P, R, TILES,
};
use crate::elem::{Bf16, Elem};
use crate::math::{exp, rsqrt, sigmoid, silu, sincos};

/// Most tokens of a call.
const T_MAX: u32 = DECODE_MMA_CHUNK_MAX_TOKENS;
/// Key slots of the tiles: the carried k̂ and the tokens, padded to whole 16-row depth steps.
const KEY_SLOTS: u32 = lay::KEY_ROWS / 4;
/// Tokens of the rotation whose shared loads are issued together.
const ROTATE_GROUP: u32 = 2;
/// Key slots of the x tiles whose shared loads are issued together.
const X_GROUP: u32 = 4;

/// Shared address of the staged head parameters `i` (0: mimo_v, 1: mimo_z, 2: mimo_o).
#[inline(always)]
fn mimo_at(i: u32) -> u32 {
    lay::MIMO + i * R * P * 4
}

/// Rows of the scalar region ([`lay::SCAL`], 16 f32 each), by key slot `j` or token `t`.
const KEY_A: u32 = 0;
/// `c_j` of key slot j (`ε_0` for the carried key).
const KEY_C: u32 = 1;
/// `u_j`: key slot j's weight in the state after the call.
const KEY_U: u32 = 2;
/// `A_t` of token t.
const TOKEN_A: u32 = 3;
/// `γ_t` of token t.
const TOKEN_GAMMA: u32 = 4;
/// `e^{A_t}` of token t.
const TOKEN_EXP_A: u32 = 5;

/// Shared address of scalar `row` at index `i`.
#[inline(always)]
fn scal(sm: u32, row: u32, i: u32) -> u32 {
    sm + lay::SCAL + 64 * row + 4 * i
}

/// Byte offset of the pair (n, n + 1), n even, in row `row` of a q̂ / k̂ tile.
#[inline(always)]
fn pair_at(row: u32, n: u32) -> u32 {
    row * lay::QK_STRIDE + 2 * logical_column(n)
}

/// Lane address of an `ldmatrix .trans` A operand (rows m0 .. m0 + 16, depths k0 .. k0 + 16)
/// from a tile stored depth-major (rows k, `stride` bytes, m contiguous bf16).
#[inline(always)]
fn a_trans_addr(tile: u32, stride: u32, k0: u32, m0: u32, lane: u32) -> u32 {
    tile + (k0 + lane % 8 + 8 * (lane / 16)) * stride + 2 * (m0 + 8 * ((lane / 8) % 2))
}

/// Lane address of an `ldmatrix .trans` pair of B operands (depths k0 .. k0 + 16, columns
/// n0 .. n0 + 16 as two n8 tiles) from a tile stored depth-major (rows k, n contiguous bf16):
/// registers `[b0, b1]` of the first n8 tile, then of the second.
#[inline(always)]
fn b_trans_addr(tile: u32, stride: u32, k0: u32, n0: u32, lane: u32) -> u32 {
    tile + (k0 + lane % 8 + 8 * ((lane / 8) % 2)) * stride + 2 * (n0 + 8 * (lane / 16))
}

/// The weight `w(t, j)` of key slot `j` in token `t`'s output (see the module docs).
///
/// # Safety
/// After the barrier that publishes the scalars; `t < 16`, `j < 16`.
#[inline(always)]
unsafe fn score_weight(sm: u32, t: u32, j: u32) -> f32 {
    // SAFETY: inside the scalar region.
    unsafe {
        if j <= t {
            exp(ld_shared_f32(scal(sm, TOKEN_A, t)) - ld_shared_f32(scal(sm, KEY_A, j)))
                * ld_shared_f32(scal(sm, KEY_C, j))
        } else if j == t + 1 {
            ld_shared_f32(scal(sm, TOKEN_GAMMA, t))
        } else {
            0.0
        }
    }
}

/// The two bf16 halves of a packed word as f32 (low half first).
#[inline(always)]
fn unpack(w: u32) -> [f32; 2] {
    [f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000)]
}

/// The chunk-form decode body; see the module docs.
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn decode_mma_chunk(prm: &DecodeParams) {
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, quad) = (lane / 4, lane % 4);
    let (heads, na, tokens) = (prm.heads, prm.na, prm.tokens);
    let bh = block_x();
    let (b, h) = (bh / heads, bh % heads);
    let group = h / (heads / prm.groups);
    let half_split = prm.rotation != rotation::PAIRWISE;
    let norm = prm.mode == output_mode::FUSED_NORM;
    let has_z = prm.z != 0;
    let sm = smem_base();
    // The rotation item: four pairs (`chunk`) of rank `rank` of q or k (`is_k`), every token.
    let rank = tid / (2 * CHUNKS);
    let is_k = (tid / CHUNKS) % 2 == 1;
    let chunk = tid % CHUNKS;
    let quads = chunk_quads(chunk, half_split);
    // The lane's state rows (warp w: rows 16w .. 16w + 16).
    let rows = [16 * warp + g, 16 * warp + g + 8];
    let row_addr = |p: u32| prm.ssm + 4 * (bh * P + p) as u64 * N as u64;
    let state_col = |s: usize| 16 * s as u64 + 4 * quad as u64;
    let k_state_row = ((b * R + rank) * heads + h) * N;

    // SAFETY (whole body): indices stay inside the shapes of the launch contract; shared offsets
    // inside `decode_mma_chunk_smem`; every lane reaches every shuffle, `ldmatrix` and `mma`, and
    // every thread the block barriers (their conditions are uniform over the block). Each global
    // state element is read and then written by one thread (v_state: read before the first
    // barrier, written after the second).
    unsafe {
        // --- Staging: raw q, k rows (token t rank r at row 4t + r), v and z rows ---
        for piece in (tid..tokens * R * 16).step_by(32 * DECODE_MMA_WARPS as usize) {
            let (row, part) = (piece / 16, piece % 16);
            let (t, r) = (row / R, row % R);
            let src = 2 * ((((b * tokens + t) * R + r) * prm.groups + group) * N + 8 * part) as u64;
            let dst = row * 256 + 16 * part;
            cp_async_cg_16(sm + lay::RAW_Q + dst, (prm.q + src) as *const u8);
            cp_async_cg_16(sm + lay::RAW_K + dst, (prm.k + src) as *const u8);
        }
        if tid < tokens * 8 {
            let (t, part) = (tid / 8, tid % 8);
            let src = 2 * (((b * tokens + t) * heads + h) * P + 8 * part) as u64;
            let dst = t * 128 + 16 * part;
            cp_async_cg_16(sm + lay::V + dst, (prm.v + src) as *const u8);
            if has_z {
                cp_async_cg_16(sm + lay::Z + dst, (prm.z + src) as *const u8);
            }
        }
        // The head's parameters: mimo_v, mimo_z, mimo_o (R·P f32 each), the q and k biases
        // (R·N f32 each), the norm weights (P f32), absent ones skipped (never read).
        let stage_rows = |dst: u32, src: u64, pieces: u32| {
            for piece in (tid..pieces).step_by(32 * DECODE_MMA_WARPS as usize) {
                cp_async_cg_16(
                    sm + dst + 16 * piece,
                    (src + 16 * piece as u64) as *const u8,
                );
            }
        };
        let head_mimo = 4 * (h * R * P) as u64;
        stage_rows(mimo_at(0), prm.mimo_v + head_mimo, R * P / 4);
        if has_z {
            stage_rows(mimo_at(1), prm.mimo_z + head_mimo, R * P / 4);
        }
        if prm.mimo_o != 0 {
            stage_rows(mimo_at(2), prm.mimo_o + head_mimo, R * P / 4);
        }
        let head_bias = 4 * (h * R * N) as u64;
        stage_rows(lay::BIAS, prm.q_bias + head_bias, R * N / 4);
        stage_rows(lay::BIAS + R * N * 4, prm.k_bias + head_bias, R * N / 4);
        if norm && prm.norm_weight != 0 {
            stage_rows(
                lay::NORM_WEIGHT,
                prm.norm_weight + 4 * (h * P) as u64,
                P / 4,
            );
        }
        commit_group();

        // --- The carried k̂ into key slot 0 (k items), the carried raw v (x items) ---
        if is_k {
            for &c0 in &quads {
                let k_prev = Bf16::load4(prm.k_state, (k_state_row + c0) as usize);
                for pair in 0..2 {
                    let word = pack_bf16x2(k_prev[2 * pair], k_prev[2 * pair + 1]);
                    st_shared_u32(sm + lay::K + pair_at(rank, c0 + 2 * pair as u32), word);
                }
            }
        }
        // x items: rank `warp`, state rows (columns of x) 2·lane, 2·lane + 1.
        let x_rank = warp;
        let v_prev = [
            Bf16::load(prm.v_state, (bh * P + 2 * lane) as usize),
            Bf16::load(prm.v_state, (bh * P + 2 * lane + 1) as usize),
        ];

        // --- Token scalars (warp 3, lane t) ---
        if warp == 3 {
            let live = lane < tokens;
            let bht = bh * tokens + lane;
            let (dt, adt, trap) = if live {
                (
                    ld_global_nc_f32(gf(prm.dt, bht)),
                    ld_global_nc_f32(gf(prm.adt, bht)),
                    Bf16::load(prm.trap, bht as usize),
                )
            } else {
                (0.0, 0.0, 0.0)
            };
            let lambda = sigmoid(trap);
            let gamma = lambda * dt;
            let eps = (1.0 - lambda) * dt;
            // A_t: inclusive prefix of the log decays over the lanes (zero past the call).
            let mut a = adt;
            for shift in [1u32, 2, 4] {
                let up = shfl_idx_f32(a, lane.saturating_sub(shift));
                if lane >= shift {
                    a += up;
                }
            }
            let eps_next = shfl_idx_f32(eps, (lane + 1) % 32);
            let c = gamma + if lane + 1 < tokens { eps_next } else { 0.0 };
            let a_last = shfl_idx_f32(a, tokens - 1);
            let eps0 = shfl_idx_f32(eps, 0);
            // Key slot j = lane: the carried key (j = 0) or token j − 1.
            let key = lane.wrapping_sub(1);
            let (key_a, key_c, key_gamma) = (
                shfl_idx_f32(a, key % 32),
                shfl_idx_f32(c, key % 32),
                shfl_idx_f32(gamma, key % 32),
            );
            let (ka, kc, ku) = if lane == 0 {
                (0.0, eps0, exp(a_last) * eps0)
            } else if key + 1 < tokens {
                (key_a, key_c, exp(a_last - key_a) * key_c)
            } else if key + 1 == tokens {
                (key_a, key_c, key_gamma)
            } else {
                (0.0, 0.0, 0.0)
            };
            if lane < 16 {
                st_shared_f32(scal(sm, KEY_A, lane), ka);
                st_shared_f32(scal(sm, KEY_C, lane), kc);
                st_shared_f32(scal(sm, KEY_U, lane), ku);
                st_shared_f32(scal(sm, TOKEN_A, lane), if live { a } else { 0.0 });
                st_shared_f32(scal(sm, TOKEN_GAMMA, lane), if live { gamma } else { 0.0 });
                st_shared_f32(scal(sm, TOKEN_EXP_A, lane), if live { exp(a) } else { 0.0 });
            }
        }

        // --- Angles: warp w the tokens 2w, 2w + 1, lane l the angles l and l + 32; θ advanced
        // over the tokens up to them (the increments independent, the f64 sum short), the
        // (cos, sin) of the warp's tokens stored, the identity for angles past Na ---
        // θ after the call, for the warp holding the last token to write back after the first
        // barrier (every warp reads θ before it).
        let mut theta_last = [0.0f32; 2];
        for (set, last) in theta_last.iter_mut().enumerate() {
            let a = lane + 32 * set as u32;
            if a >= na {
                for t in 2 * warp..(2 * warp + 2).min(tokens) {
                    st_shared_v2_f32(sm + lay::CS + 8 * (t * 64 + a), [1.0, 0.0]);
                }
                continue;
            }
            if 2 * warp >= tokens {
                continue;
            }
            let mut theta = ld_global_f32(gf(prm.theta, bh * na + a)) as f64;
            let inputs: [(f32, f32); T_MAX as usize] = core::array::from_fn(|t| {
                let t = t as u32;
                if t < tokens && t <= 2 * warp + 1 {
                    let bt = b * tokens + t;
                    (
                        ld_global_nc_f32(gf(prm.angles, (bt * heads + h) * na + a)),
                        ld_global_nc_f32(gf(prm.dt, bh * tokens + t)),
                    )
                } else {
                    (0.0, 0.0)
                }
            });
            for (t, &(logit, dt)) in inputs.iter().enumerate() {
                let t = t as u32;
                if t < tokens && t <= 2 * warp + 1 {
                    // Summed in f64 and reduced once at the end: the rotations' reduction
                    // takes any angle, and a per-token wrap is a long f64 chain.
                    theta += angle_increment_f32(logit, dt) as f64;
                    if t >= 2 * warp {
                        let (s, c) = sincos(reduced_near_f32(theta));
                        st_shared_v2_f32(sm + lay::CS + 8 * (t * 64 + a), [c, s]);
                    }
                    if t + 1 == tokens {
                        *last = stored_f32(wrap_two_pi_f64(theta));
                    }
                }
            }
        }
        // --- The state into the accumulators (issued after the angle phase, whose registers it
        // would otherwise share; first needed after the operand tiles are formed) ---
        let mut acc = [[0.0f32; 4]; TILES];
        for s in 0..TILES / 2 {
            let lo = ld_global_v4_f32(row_addr(rows[0]) + 4 * state_col(s));
            let hi = ld_global_v4_f32(row_addr(rows[1]) + 4 * state_col(s));
            acc[2 * s] = [lo[0], lo[1], hi[0], hi[1]];
            acc[2 * s + 1] = [lo[2], lo[3], hi[2], hi[3]];
        }
        wait_group::<0>();
        // Staged rows, scalars, (cos, sin) and the carried k̂ are in shared memory.
        sync_threads();
        if warp == (tokens - 1) / 2 {
            for (set, &last) in theta_last.iter().enumerate() {
                let a = lane + 32 * set as u32;
                if a < na {
                    st_global_f32(gf(prm.theta, bh * na + a), last);
                }
            }
        }

        // --- q̂ and k̂ rows of every token (zero past the call), the last k̂ written back ---
        let bias_row = lay::BIAS + 4 * ((is_k as u32 * R + rank) * N);
        let bias: [[f32; 4]; 2] = quads.map(|c| ld_shared_v4_f32(sm + bias_row + 4 * c));
        let raw_tile = if is_k { lay::RAW_K } else { lay::RAW_Q };
        // Tokens in groups, a group's shared loads all issued before its first store (the
        // accesses keep their program order, so a load behind a store would wait for it).
        for t0 in (0..T_MAX).step_by(ROTATE_GROUP as usize) {
            let inputs: [([u32; 4], [[f32; 2]; 4]); ROTATE_GROUP as usize] =
                core::array::from_fn(|i| {
                    let t = t0 + i as u32;
                    if t < tokens {
                        let raw_row = sm + raw_tile + (4 * t + rank) * 256;
                        let raw = [
                            ld_shared_u32(raw_row + 2 * quads[0]),
                            ld_shared_u32(raw_row + 2 * quads[0] + 4),
                            ld_shared_u32(raw_row + 2 * quads[1]),
                            ld_shared_u32(raw_row + 2 * quads[1] + 4),
                        ];
                        let cs = core::array::from_fn(|e| {
                            ld_shared_v2_f32(sm + lay::CS + 8 * (t * 64 + 4 * chunk + e as u32))
                        });
                        (raw, cs)
                    } else {
                        ([0; 4], [[1.0, 0.0]; 4])
                    }
                });
            for (i, (raw, cs)) in inputs.iter().enumerate() {
                let t = t0 + i as u32;
                let dst_row = if is_k {
                    lay::K + (4 * (t + 1) + rank) * lay::QK_STRIDE
                } else {
                    lay::Q + (4 * t + rank) * lay::QK_STRIDE
                };
                let mut words = [[0u32; 2]; 2];
                if t < tokens {
                    let raw: [[f32; 4]; 2] = core::array::from_fn(|q| {
                        let ([a0, a1], [a2, a3]) = (unpack(raw[2 * q]), unpack(raw[2 * q + 1]));
                        [a0, a1, a2, a3]
                    });
                    let biased: [[f32; 4]; 2] =
                        core::array::from_fn(|q| core::array::from_fn(|e| raw[q][e] + bias[q][e]));
                    let (mut first, mut second) = to_pairs(biased, half_split);
                    for e in 0..4 {
                        let [c, s] = cs[e];
                        (first[e], second[e]) = rotate_pair(first[e], second[e], c, s);
                    }
                    let rotated = from_pairs(first, second, half_split);
                    for (q, quad_words) in words.iter_mut().enumerate() {
                        for (pair, word) in quad_words.iter_mut().enumerate() {
                            *word = pack_bf16x2(rotated[q][2 * pair], rotated[q][2 * pair + 1]);
                        }
                    }
                }
                for (q, &c0) in quads.iter().enumerate() {
                    for pair in 0..2 {
                        let n = c0 + 2 * pair as u32;
                        st_shared_u32(sm + dst_row + 2 * logical_column(n), words[q][pair]);
                    }
                }
                if is_k && t + 1 == tokens {
                    store_k_state(prm.k_state, k_state_row, quads, &words);
                }
            }
        }
        // The key tile's padding rows past the last token's.
        if is_k {
            for slot in T_MAX + 1..KEY_SLOTS {
                for &c0 in &quads {
                    for pair in 0..2 {
                        st_shared_u32(sm + lay::K + pair_at(4 * slot + rank, c0 + 2 * pair), 0);
                    }
                }
            }
        }

        // --- x and the scaled x of every key slot (zero past the call), loads first ---
        let x_mimo = ld_shared_v2_f32(sm + mimo_at(0) + 4 * (x_rank * P + 2 * lane));
        for slot0 in (0..KEY_SLOTS).step_by(X_GROUP as usize) {
            let x_inputs: [([f32; 2], f32); X_GROUP as usize] = core::array::from_fn(|i| {
                let slot = slot0 + i as u32;
                let v = if slot == 0 {
                    v_prev
                } else if slot <= tokens {
                    unpack(ld_shared_u32(sm + lay::V + (slot - 1) * 128 + 4 * lane))
                } else {
                    [0.0, 0.0]
                };
                (v, ld_shared_f32(scal(sm, KEY_U, slot)))
            });
            for (i, &(v, u)) in x_inputs.iter().enumerate() {
                let x = [v[0] * x_mimo[0], v[1] * x_mimo[1]];
                let at = (4 * (slot0 + i as u32) + x_rank) * lay::X_STRIDE + 4 * lane;
                st_shared_u32(sm + lay::X + at, pack_bf16x2(x[0], x[1]));
                st_shared_u32(sm + lay::XW + at, pack_bf16x2(x[0] * u, x[1] * u));
            }
        }
        // Every thread has stored its operand words (and read the carried raw v).
        sync_threads();
        if warp == 0 {
            let last = ld_shared_u32(sm + lay::V + (tokens - 1) * 128 + 4 * lane);
            st_global_u32(prm.v_state + 2 * (bh * P + 2 * lane) as u64, last);
        }

        // --- Read-out from the state: y = H·q̂ for all query columns (4 n8 tiles) ---
        let (mat_row, mat) = (lane % 8, lane / 8);
        let q_at = sm + lay::Q + mat_row * lay::QK_STRIDE + 16 * mat;
        let mut y = [[0.0f32; 4]; 4];
        for i in 0..TILES / 4 {
            let qb: [[u32; 4]; 4] = core::array::from_fn(|nt| {
                ldmatrix_x4(q_at + (8 * nt as u32) * lay::QK_STRIDE + 64 * i as u32)
            });
            for u in 0..2 {
                let (t0, t1) = (acc[4 * i + 2 * u], acc[4 * i + 2 * u + 1]);
                let a = [
                    pack_bf16x2(t0[0], t0[1]),
                    pack_bf16x2(t0[2], t0[3]),
                    pack_bf16x2(t1[0], t1[1]),
                    pack_bf16x2(t1[2], t1[3]),
                ];
                for (nt, yt) in y.iter_mut().enumerate() {
                    mma_m16n8k16_bf16_f32(yt, a, [qb[nt][2 * u], qb[nt][2 * u + 1]]);
                }
            }
        }

        // --- Scores of the warp's query tile (tokens 2w, 2w + 1) against every key row ---
        let q_warp_at = q_at + 8 * warp * lay::QK_STRIDE;
        let mut scores = [[0.0f32; 4]; (lay::KEY_ROWS / 16) as usize];
        for i in 0..TILES / 4 {
            let qb = ldmatrix_x4(q_warp_at + 64 * i as u32);
            for u in 0..2 {
                let col0 = 32 * i as u32 + 16 * u as u32;
                for (m, s) in scores.iter_mut().enumerate() {
                    let ka = ldmatrix_x4(
                        sm + lay::K
                            + (16 * m as u32 + lane % 16) * lay::QK_STRIDE
                            + 2 * (col0 + 8 * (lane / 16)),
                    );
                    mma_m16n8k16_bf16_f32(s, ka, [qb[2 * u], qb[2 * u + 1]]);
                }
            }
        }
        let t_col = 2 * warp + quad / 2;
        let weights: [[f32; 2]; (lay::KEY_ROWS / 16) as usize] = core::array::from_fn(|m| {
            core::array::from_fn(|half| {
                score_weight(sm, t_col, (16 * m as u32 + g + 8 * half as u32) / 4)
            })
        });
        for (m, s) in scores.iter().enumerate() {
            for half in 0..2u32 {
                let row = 16 * m as u32 + g + 8 * half;
                let w = weights[m][half as usize];
                let e = 2 * half as usize;
                st_shared_u32(
                    sm + lay::W + row * lay::W_STRIDE + 2 * (8 * warp + 2 * quad),
                    pack_bf16x2(s[e] * w, s[e + 1] * w),
                );
            }
        }
        // The inter term's decay per query column (token 2nt + quad / 2).
        for (nt, yt) in y.iter_mut().enumerate() {
            let decay = ld_shared_f32(scal(sm, TOKEN_EXP_A, 2 * nt as u32 + quad / 2));
            for v in yt.iter_mut() {
                *v *= decay;
            }
        }
        // Every warp has stored its weighted scores.
        sync_threads();

        // --- Intra term: y += xᵀ·W over the key rows ---
        for ks in 0..lay::KEY_ROWS / 16 {
            let xa = ldmatrix_x4_trans(a_trans_addr(
                sm + lay::X,
                lay::X_STRIDE,
                16 * ks,
                16 * warp,
                lane,
            ));
            for pair in 0..2u32 {
                let wb = ldmatrix_x4_trans(b_trans_addr(
                    sm + lay::W,
                    lay::W_STRIDE,
                    16 * ks,
                    16 * pair,
                    lane,
                ));
                mma_m16n8k16_bf16_f32(&mut y[2 * pair as usize], xa, [wb[0], wb[1]]);
                mma_m16n8k16_bf16_f32(&mut y[2 * pair as usize + 1], xa, [wb[2], wb[3]]);
            }
        }

        // --- State: H ← e^{A_{T−1}}·H + (scaled x)ᵀ·K, stored ---
        let total_decay = ld_shared_f32(scal(sm, TOKEN_EXP_A, tokens - 1));
        for tile in acc.iter_mut() {
            for v in tile.iter_mut() {
                *v *= total_decay;
            }
        }
        for ks in 0..lay::KEY_ROWS / 16 {
            let xa = ldmatrix_x4_trans(a_trans_addr(
                sm + lay::XW,
                lay::X_STRIDE,
                16 * ks,
                16 * warp,
                lane,
            ));
            for tp in 0..TILES / 2 {
                let kb = ldmatrix_x4_trans(b_trans_addr(
                    sm + lay::K,
                    lay::QK_STRIDE,
                    16 * ks,
                    16 * tp as u32,
                    lane,
                ));
                mma_m16n8k16_bf16_f32(&mut acc[2 * tp], xa, [kb[0], kb[1]]);
                mma_m16n8k16_bf16_f32(&mut acc[2 * tp + 1], xa, [kb[2], kb[3]]);
            }
        }
        for s in 0..TILES / 2 {
            let (t0, t1) = (acc[2 * s], acc[2 * s + 1]);
            st_global_v4_f32(
                row_addr(rows[0]) + 4 * state_col(s),
                [t0[0], t0[1], t1[0], t1[1]],
            );
            st_global_v4_f32(
                row_addr(rows[1]) + 4 * state_col(s),
                [t0[2], t0[3], t1[2], t1[3]],
            );
        }

        // --- Outputs: lane tiles nt hold token 2nt + quad / 2, ranks out_ranks, rows `rows` ---
        let out_ranks = [2 * (quad % 2), 2 * (quad % 2) + 1];
        let row_param = |i: u32, r: u32, p: u32| ld_shared_f32(sm + mimo_at(i) + 4 * (r * P + p));
        let d_skip = if prm.d != 0 {
            ld_global_nc_f32(gf(prm.d, h))
        } else {
            0.0
        };
        // out_y per (tile, row, rank), the gate likewise.
        let mut out_y = [[[0.0f32; 2]; 2]; 4];
        let mut gate = [[[1.0f32; 2]; 2]; 4];
        for (k, &p) in rows.iter().enumerate() {
            let mimo_v = out_ranks.map(|r| row_param(0, r, p));
            let mimo_z = out_ranks.map(|r| if has_z { row_param(1, r, p) } else { 0.0 });
            for nt in 0..4 {
                let t = (2 * nt as u32 + quad / 2).min(tokens - 1);
                // Element p of a staged row (a select, not an index: no local array).
                let element = |tile: u32| {
                    let [even, odd] = unpack(ld_shared_u32(sm + tile + t * 128 + 4 * (p / 2)));
                    if p % 2 == 0 {
                        even
                    } else {
                        odd
                    }
                };
                let v = element(lay::V);
                let z = if has_z { element(lay::Z) } else { 0.0 };
                for e in 0..2 {
                    out_y[nt][k][e] = y[nt][2 * k + e] + d_skip * v * mimo_v[e];
                    if has_z {
                        gate[nt][k][e] = silu(z * mimo_z[e]);
                    }
                }
            }
        }
        let mut rstd = [[1.0f32; 2]; 4];
        if norm {
            for nt in 0..4 {
                for e in 0..2 {
                    let mut sq =
                        out_y[nt][0][e] * out_y[nt][0][e] + out_y[nt][1][e] * out_y[nt][1][e];
                    for mask in [4, 8, 16] {
                        sq += shfl_xor_f32(sq, mask);
                    }
                    if lane < 4 {
                        let t = 2 * nt as u32 + quad / 2;
                        st_shared_f32(
                            sm + lay::NORM + 4 * ((warp * T_MAX + t) * R + out_ranks[e]),
                            sq,
                        );
                    }
                }
            }
            sync_threads();
            for (nt, rs) in rstd.iter_mut().enumerate() {
                let t = 2 * nt as u32 + quad / 2;
                for e in 0..2 {
                    let mut total = 0.0f32;
                    for w in 0..DECODE_MMA_WARPS {
                        total += ld_shared_f32(
                            sm + lay::NORM + 4 * ((w * T_MAX + t) * R + out_ranks[e]),
                        );
                    }
                    rs[e] = rsqrt(total / P as f32 + prm.norm_eps);
                }
            }
        }
        for (k, &p) in rows.iter().enumerate() {
            let norm_w = if norm && prm.norm_weight != 0 {
                ld_shared_f32(sm + lay::NORM_WEIGHT + 4 * p)
            } else {
                1.0
            };
            let mimo_o = out_ranks.map(|r| {
                if prm.mimo_o != 0 {
                    row_param(2, r, p)
                } else {
                    0.0
                }
            });
            for nt in 0..4 {
                let t = 2 * nt as u32 + quad / 2;
                let bt = b * tokens + t;
                if prm.mode == output_mode::PREREDUCE {
                    if t < tokens {
                        for e in 0..2 {
                            let at = ((bt * R + out_ranks[e]) * heads + h) * P + p;
                            Bf16::store(prm.out, at as usize, out_y[nt][k][e] * gate[nt][k][e]);
                        }
                    }
                } else {
                    let mut out = 0.0f32;
                    for e in 0..2 {
                        out += out_y[nt][k][e] * rstd[nt][e] * norm_w * gate[nt][k][e] * mimo_o[e];
                    }
                    out += shfl_xor_f32(out, 1);
                    if quad % 2 == 0 && t < tokens {
                        Bf16::store(prm.out, ((bt * heads + h) * P + p) as usize, out);
                    }
                }
            }
        }
    }
}

/// Chunk-form tensor-core decode entry point for `1 ≤ params.tokens ≤ 8` tokens (bf16, R = 4,
/// N = 128, P = 64); see the module docs.
///
/// # Safety
/// See the module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn decode_mma_chunk_bf16_r4_n128_p64(params: DecodeParams) {
    crate::arch::grid_dependency::dependent_launch_prologue();
    // SAFETY: forwarded launch contract.
    unsafe { decode_mma_chunk(&params) }
}
