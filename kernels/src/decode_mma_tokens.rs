//! Mamba-3 MIMO decode on the tensor cores over a call's `T ≥ 1` tokens (bf16 activations,
//! R = 4, N = 128, P = 64, any `Na ≤ N/2`, both rotations, every output mode, optional z and D,
//! GQA): the one-token kernel of `decode_mma.rs` with its state kept in the accumulators across
//! the tokens, read once and written once.
//!
//! The state layout, the column order ([`logical_column`]), the split-operand update
//! `H ← α·H + W·Kᵀ` and read-out `y = H·q̂` are those of `decode_mma.rs`. Tokens run one after
//! another, one block barrier each (two with the fused norm): token `t` writes its q̂ into read-out
//! slot `t mod 2` and its k̂ (bf16 and remainder) into key slot `(t + 1) mod 4` of
//! `decode_mma_tokens_smem`, slots that no thread reads again before that barrier; the update's
//! depths 0–3 read the previous token's key slot (with its remainder: in-call k̂ are not rounded,
//! as in the golden model), the call's first token the state's bf16 k in slot 0 (remainder zero).
//! θ is carried in f64 registers; the next token's inputs are loaded while this one's update and
//! read-out run; the A operands and the decay are formed after the barrier, so that no warp waits
//! there for its loads.
//!
//! Measured on the H200 (H = 64, graph µs per token, 2026-12-02): faster than the chunked
//! forward's units kernel at T = 2 (B = 1 4.50 against 4.91, B = 64 58.8 against 75.6, B = 256
//! 221 against 293), even at T = 3 (B = 256 185 against 194), slower from T = 8 (B = 256 142
//! against 80): each token's prologue, update and read-out run one after another in every block.
//!
//! # Launch contract
//! Grid `B·H` blocks of `32·DECODE_MMA_WARPS` threads, dynamic shared memory
//! `decode_mma_tokens_smem::BYTES`; `tokens ≥ 1`, `[R, N, P] == DECODE_MMA_GEOMETRY`, `Na ≤ N/2`,
//! bf16 activations; every pointer of [`DecodeParams`] valid for its documented shape (the host
//! validates). `arrivals` and `rows_per_warp` are not used.

use mamba3_abi::{
    decode_mma_tokens_smem as lay, output_mode, rotation, DecodeParams, DECODE_MMA_WARPS,
};

use crate::angles::{
    angle_increment_f32, lane_angle_logits, reduced_near_f32, rotate_pair, stored_f32, warp_sincos,
    wrap_two_pi_f64,
};
use crate::arch::float::pack_bf16x2;
use crate::arch::global::{
    ld_global_f32, ld_global_nc_f32, ld_global_v4_f32, st_global_f32, st_global_v4_f32,
};
use crate::arch::sreg::{
    block_x, fresh_u32, ld_shared_f32, shfl_xor_f32, smem_base, st_shared_f32, st_shared_u32,
    sync_threads, thread_x,
};
use crate::decode_mma::{
    chunk_quads, decay, from_pairs, gf, logical_column, read_out, store_item_words, store_k_state,
    to_pairs, update, CHUNKS, N, P, R, TILES,
};
use crate::elem::{Bf16, Elem};
use crate::math::{exp, rsqrt, sigmoid, silu, sincos, split_bf16x2};

/// Byte offset of the pair (n, n + 1), n even, in row `row` of an operand tile.
#[inline(always)]
fn pair_at(row: u32, n: u32) -> u32 {
    row * lay::ROW_STRIDE + 2 * logical_column(n)
}

/// A thread's fixed parts in the block (see the module docs).
#[derive(Clone, Copy)]
struct Roles {
    warp: u32,
    lane: u32,
    quad: u32,
    /// The prologue item: four rotation pairs (`chunk`, in `quads`) of rank `rank` of q or k.
    rank: u32,
    is_k: bool,
    chunk: u32,
    quads: [u32; 2],
    /// The warp's state rows the lane holds.
    rows: [u32; 2],
    /// Whether the lane's A-operand slots (2q, 2q + 1) are previous-token ranks (q < 2).
    prev: bool,
    slot_ranks: [u32; 2],
    /// The output stage: one row and two ranks per lane.
    out_row: u32,
    out_ranks: [u32; 2],
    /// The lane's row of an `ldmatrix` operand and the matrix it addresses.
    mat_row: u32,
    mat: u32,
}

impl Roles {
    #[inline(always)]
    fn new(half_split: bool) -> Self {
        Self::of(thread_x(), half_split)
    }

    /// The parts of thread `tid`.
    #[inline(always)]
    fn of(tid: u32, half_split: bool) -> Self {
        let (warp, lane) = (tid / 32, tid % 32);
        let (g, quad) = (lane / 4, lane % 4);
        let chunk = tid % CHUNKS;
        Roles {
            warp,
            lane,
            quad,
            rank: tid / (2 * CHUNKS),
            is_k: (tid / CHUNKS) % 2 == 1,
            chunk,
            quads: chunk_quads(chunk, half_split),
            rows: [16 * warp + g, 16 * warp + g + 8],
            prev: quad < 2,
            slot_ranks: [(2 * quad) % R, (2 * quad) % R + 1],
            out_row: 16 * warp + g + 8 * (quad / 2),
            out_ranks: [2 * (quad % 2), 2 * (quad % 2) + 1],
            mat_row: lane % 8,
            mat: lane / 8,
        }
    }
}

/// A token's decay and trapezoid scalars `(α, β, γ)`.
#[inline(always)]
fn token_scalars(dt: f32, adt: f32, trap: f32) -> (f32, f32, f32) {
    let lambda = sigmoid(trap);
    let alpha = exp(adt);
    (alpha, (1.0 - lambda) * dt * alpha, lambda * dt)
}

/// Angle `a` of the lane advanced from `old` by one token: θ (f64, in [0, 2π)), its stored f32
/// and its (sin, cos).
#[inline(always)]
fn advance_angle(old: f64, logit: f32, dt: f32) -> (f64, f32, (f32, f32)) {
    let theta = wrap_two_pi_f64(old + angle_increment_f32(logit, dt) as f64);
    (theta, stored_f32(theta), sincos(reduced_near_f32(theta)))
}

/// The thread's item biased and rotated: the warp holds the angles' (sin, cos) in `sincos_held`.
#[inline(always)]
fn rotated_item(
    ro: &Roles,
    raw: [[f32; 4]; 2],
    bias: [[f32; 4]; 2],
    sincos_held: [(f32, f32); 2],
    na: u32,
    half_split: bool,
) -> [[f32; 4]; 2] {
    let biased: [[f32; 4]; 2] =
        core::array::from_fn(|i| core::array::from_fn(|e| raw[i][e] + bias[i][e]));
    let (mut first, mut second) = to_pairs(biased, half_split);
    for e in 0..4 {
        let j = 4 * ro.chunk + e as u32;
        let (s, c) = warp_sincos(sincos_held, j, na > 32);
        if j < na {
            (first[e], second[e]) = rotate_pair(first[e], second[e], c, s);
        }
    }
    from_pairs(first, second, half_split)
}

/// The update's A operands from the lane's row weights `scale·v·mimo_v`: the 16-deep step's
/// (depths 0–7 the weights' bf16, 8–15 their remainders: B repeats K) and the bf16 words alone
/// (the 8-deep step's against k̂'s remainders).
#[inline(always)]
fn row_weights(scale: f32, w_v: [f32; 2], w_mimo: [[f32; 2]; 2]) -> ([u32; 4], [u32; 2]) {
    let w = |k: usize, i: usize| scale * w_v[k] * w_mimo[k][i];
    let (hi0, lo0) = split_bf16x2(w(0, 0), w(0, 1));
    let (hi1, lo1) = split_bf16x2(w(1, 0), w(1, 1));
    ([hi0, hi1, lo0, lo1], [hi0, hi1])
}

/// Global address of state row `p` of (b, h) `bh`.
#[inline(always)]
fn state_row(prm: &DecodeParams, bh: u32, p: u32) -> u64 {
    prm.ssm + 4 * (bh * P + p) as u64 * N as u64
}

/// Loads the lane's state rows into the accumulators.
///
/// # Safety
/// `bh` is a (b, h) of the launch.
#[inline(always)]
unsafe fn load_state(prm: &DecodeParams, ro: &Roles, bh: u32) -> [[f32; 4]; TILES] {
    let mut acc = [[0.0f32; 4]; TILES];
    for s in 0..TILES / 2 {
        let col = 16 * s as u64 + 4 * ro.quad as u64;
        // SAFETY: inside the state of (b, h).
        let (lo, hi) = unsafe {
            (
                ld_global_v4_f32(state_row(prm, bh, ro.rows[0]) + 4 * col),
                ld_global_v4_f32(state_row(prm, bh, ro.rows[1]) + 4 * col),
            )
        };
        acc[2 * s] = [lo[0], lo[1], hi[0], hi[1]];
        acc[2 * s + 1] = [lo[2], lo[3], hi[2], hi[3]];
    }
    acc
}

/// Stores the accumulators back into the lane's state rows.
///
/// # Safety
/// `bh` is a (b, h) of the launch.
#[inline(always)]
unsafe fn store_state(prm: &DecodeParams, ro: &Roles, bh: u32, acc: &[[f32; 4]; TILES]) {
    for s in 0..TILES / 2 {
        let col = 16 * s as u64 + 4 * ro.quad as u64;
        let (t0, t1) = (acc[2 * s], acc[2 * s + 1]);
        // SAFETY: inside the state of (b, h).
        unsafe {
            st_global_v4_f32(
                state_row(prm, bh, ro.rows[0]) + 4 * col,
                [t0[0], t0[1], t1[0], t1[1]],
            );
            st_global_v4_f32(
                state_row(prm, bh, ro.rows[1]) + 4 * col,
                [t0[2], t0[3], t1[2], t1[3]],
            );
        }
    }
}

/// The output stage's inputs of the lane's row and ranks.
#[derive(Clone, Copy)]
struct OutputInputs {
    v: f32,
    z: f32,
    mimo_v: [f32; 2],
    mimo_z: [f32; 2],
    mimo_o: [f32; 2],
    norm_w: f32,
    d: f32,
}

impl OutputInputs {
    /// Loads them for head `h`, the token's raw v and z at element `at` of `(B,T,H,P)`.
    ///
    /// # Safety
    /// `h` and `at` lie inside the launch's shapes.
    #[inline(always)]
    unsafe fn load(prm: &DecodeParams, ro: &Roles, h: u32, at: u32) -> Self {
        let row_param = |tensor: u64, r: u32| {
            // SAFETY: inside `(H,R,P)`.
            unsafe { ld_global_nc_f32(gf(tensor, (h * R + r) * P + ro.out_row)) }
        };
        let has_z = prm.z != 0;
        // SAFETY: inside the caller's shapes.
        unsafe {
            OutputInputs {
                v: Bf16::load(prm.v, at as usize),
                z: if has_z {
                    Bf16::load(prm.z, at as usize)
                } else {
                    0.0
                },
                mimo_v: ro.out_ranks.map(|r| row_param(prm.mimo_v, r)),
                mimo_z: ro
                    .out_ranks
                    .map(|r| if has_z { row_param(prm.mimo_z, r) } else { 0.0 }),
                mimo_o: ro.out_ranks.map(|r| {
                    if prm.mimo_o != 0 {
                        row_param(prm.mimo_o, r)
                    } else {
                        0.0
                    }
                }),
                norm_w: if prm.mode == output_mode::FUSED_NORM && prm.norm_weight != 0 {
                    ld_global_nc_f32(gf(prm.norm_weight, h * P + ro.out_row))
                } else {
                    1.0
                },
                d: if prm.d != 0 {
                    ld_global_nc_f32(gf(prm.d, h))
                } else {
                    0.0
                },
            }
        }
    }
}

/// The token's outputs from the read-out `y_row`: D skip, gate, optional norm (its warp sums in
/// shared memory at `norm_slot`, one block barrier), contraction over ranks; token row `bt` of
/// the `(B,T,…)` output, head `h`.
///
/// # Safety
/// Every thread of the block calls it; `norm_slot` lies inside `decode_mma_tokens_smem`.
#[inline(always)]
unsafe fn write_outputs(
    prm: &DecodeParams,
    ro: &Roles,
    inp: &OutputInputs,
    y_row: [f32; 2],
    norm_slot: u32,
    bt: u32,
    h: u32,
) {
    let has_z = prm.z != 0;
    let out_y: [f32; 2] = core::array::from_fn(|k| y_row[k] + inp.d * inp.v * inp.mimo_v[k]);
    let gate: [f32; 2] = core::array::from_fn(|k| {
        if has_z {
            silu(inp.z * inp.mimo_z[k])
        } else {
            1.0
        }
    });
    let heads = prm.heads;
    // SAFETY (stores, shared accesses, barrier): inside the shapes; uniform conditions.
    unsafe {
        if prm.mode == output_mode::PREREDUCE {
            for k in 0..2 {
                let at = ((bt * R + ro.out_ranks[k]) * heads + h) * P + ro.out_row;
                Bf16::store(prm.out, at as usize, out_y[k] * gate[k]);
            }
        } else {
            let mut rstd = [1.0f32; 2];
            if prm.mode == output_mode::FUSED_NORM {
                // Sums of squares over the warp's rows (lanes of one rank pair: quad mod 2), then
                // over the block's warps.
                let mut sq = out_y.map(|x| x * x);
                for mask in [2, 4, 8, 16] {
                    for s in sq.iter_mut() {
                        *s += shfl_xor_f32(*s, mask);
                    }
                }
                if ro.lane < 2 {
                    for (k, &s) in sq.iter().enumerate() {
                        st_shared_f32(norm_slot + 4 * (ro.warp * R + 2 * ro.lane + k as u32), s);
                    }
                }
                sync_threads();
                for (k, rs) in rstd.iter_mut().enumerate() {
                    let mut total = 0.0f32;
                    for w in 0..DECODE_MMA_WARPS {
                        total += ld_shared_f32(norm_slot + 4 * (w * R + ro.out_ranks[k]));
                    }
                    *rs = rsqrt(total / P as f32 + prm.norm_eps);
                }
            }
            let mut out = 0.0f32;
            for k in 0..2 {
                out += out_y[k] * rstd[k] * inp.norm_w * gate[k] * inp.mimo_o[k];
            }
            out += shfl_xor_f32(out, 1);
            if ro.quad % 2 == 0 {
                Bf16::store(prm.out, (((bt * heads + h) * P) + ro.out_row) as usize, out);
            }
        }
    }
}

/// Writes the carried state but the SSM rows back: θ (warp 0), the item's k̂ words (k threads,
/// row `k_state_row` of `(B,R,H,N)`) and the last raw v.
///
/// # Safety
/// After the barrier that follows every thread's reads of them; inside the shapes.
#[inline(always)]
unsafe fn write_back(
    prm: &DecodeParams,
    ro: &Roles,
    bh: u32,
    theta_stored: [f32; 2],
    k_state_row: u32,
    k_hi: [[u32; 2]; 2],
    v: f32,
) {
    // SAFETY: inside the shapes, each element written by one thread.
    unsafe {
        if ro.warp == 0 {
            for (a, &t) in theta_stored.iter().enumerate() {
                let i = ro.lane + 32 * a as u32;
                if i < prm.na {
                    st_global_f32(gf(prm.theta, bh * prm.na + i), t);
                }
            }
        }
        if ro.is_k {
            store_k_state(prm.k_state, k_state_row, ro.quads, &k_hi);
        }
        if ro.quad % 2 == 0 {
            Bf16::store(prm.v_state, (bh * P + ro.out_row) as usize, v);
        }
    }
}

/// One token's inputs of a thread, loaded a token ahead of their use.
#[derive(Clone, Copy)]
struct TokenInputs {
    dt: f32,
    adt: f32,
    trap: f32,
    /// Raw logits of the lane's angles `lane`, `lane + 32`.
    logits: [f32; 2],
    /// The thread's two quads of raw q or k.
    raw: [[f32; 4]; 2],
    /// Raw v of the lane's two rows: the previous token's (quads 0–1) or this token's.
    w_v: [f32; 2],
}

/// The token-loop body over `prm.tokens ≥ 1` tokens; see the module docs.
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn decode_mma_tokens(prm: &DecodeParams) {
    let half_split = prm.rotation != rotation::PAIRWISE;
    let ro = Roles::new(half_split);
    let (heads, na, tokens) = (prm.heads, prm.na, prm.tokens);
    let bh = block_x();
    let (b, h) = (bh / heads, bh % heads);
    let group = h / (heads / prm.groups);
    let sm = smem_base();
    // Token `t` writes key slot `(t + 1) mod 4`; slot 0 holds the carried k̂.
    let k_slot = |t: u32| lay::K_SLOT * ((t + 1) % lay::K_SLOTS);

    // SAFETY (whole body): indices stay inside the shapes of the launch contract; shared offsets
    // inside `decode_mma_tokens_smem`; every lane reaches every shuffle, `ldmatrix` and `mma`, and
    // every thread the block barriers (their conditions are uniform over the block). Global state
    // is read before the first barrier and written after the last token's, each element by one
    // thread, and a shared slot is rewritten only after a barrier that follows its last read.
    unsafe {
        let (src, bias) = if ro.is_k {
            (prm.k, prm.k_bias)
        } else {
            (prm.q, prm.q_bias)
        };
        let load_token = |t: u32| {
            let bht = bh * tokens + t;
            let bt = b * tokens + t;
            let qk_row = ((bt * R + ro.rank) * prm.groups + group) * N;
            // Row weights' inputs: raw v (this token) or the previous token's (the state's at
            // the call's first token).
            let w_v = ro.rows.map(|p| {
                if !ro.prev {
                    Bf16::load(prm.v, ((bt * heads + h) * P + p) as usize)
                } else if t == 0 {
                    Bf16::load(prm.v_state, (bh * P + p) as usize)
                } else {
                    Bf16::load(prm.v, (((bt - 1) * heads + h) * P + p) as usize)
                }
            });
            TokenInputs {
                dt: ld_global_nc_f32(gf(prm.dt, bht)),
                adt: ld_global_nc_f32(gf(prm.adt, bht)),
                trap: Bf16::load(prm.trap, bht as usize),
                logits: lane_angle_logits(prm.angles, (bt * heads + h) * na, na, ro.lane),
                raw: ro.quads.map(|c| Bf16::load4(src, (qk_row + c) as usize)),
                w_v,
            }
        };
        // The head's bias quads and the weights' mimo_v, loaded again (from L1, through a fresh
        // head index) at each token rather than held across the loop.
        let load_head = |h: u32| {
            let bias_row = (h * R + ro.rank) * N;
            let bias_quads = ro.quads.map(|c| f32::load4(bias, (bias_row + c) as usize));
            let w_mimo = ro.rows.map(|p| {
                ro.slot_ranks
                    .map(|r| ld_global_nc_f32(gf(prm.mimo_v, (h * R + r) * P + p)))
            });
            (bias_quads, w_mimo)
        };

        // --- Loads: the first token's, the carried θ and k̂, then the state ---
        let mut inputs = load_token(0);
        let mut theta: [f64; 2] = core::array::from_fn(|a| {
            let i = ro.lane + 32 * a as u32;
            if i < na {
                ld_global_f32(gf(prm.theta, bh * na + i)) as f64
            } else {
                0.0
            }
        });
        let mut head_inputs = load_head(h);
        let k_state_row = ((b * R + ro.rank) * heads + h) * N;
        let k_prev: [[f32; 4]; 2] = if ro.is_k {
            ro.quads
                .map(|c| Bf16::load4(prm.k_state, (k_state_row + c) as usize))
        } else {
            [[0.0; 4]; 2]
        };
        let mut acc = load_state(prm, &ro, bh);
        // The carried k̂ (bf16 already: remainder zero) into key slot 0.
        if ro.is_k {
            for (i, &c0) in ro.quads.iter().enumerate() {
                for pair in 0..2 {
                    let n = c0 + 2 * pair as u32;
                    let word = pack_bf16x2(k_prev[i][2 * pair], k_prev[i][2 * pair + 1]);
                    st_shared_u32(sm + lay::K + pair_at(ro.rank, n), word);
                    st_shared_u32(sm + lay::K_LO + pair_at(ro.rank, n), 0);
                }
            }
        }

        for t in 0..tokens {
            let last = t + 1 == tokens;
            // Token addresses formed from a fresh copy of `t` where they are used: strength-
            // reduced into pointers carried across the loop, they would hold a register pair each.
            let t = fresh_u32(t);
            let bt = b * tokens + t;
            // The thread's parts formed again from a fresh index rather than held across tokens.
            let ro = Roles::of(fresh_u32(thread_x()), half_split);
            let TokenInputs {
                dt,
                adt,
                trap,
                logits,
                raw,
                w_v,
            } = inputs;
            if t > 0 {
                head_inputs = load_head(fresh_u32(h));
            }
            let (bias_quads, w_mimo) = head_inputs;
            let (alpha, beta, gamma) = token_scalars(dt, adt, trap);
            let mut theta_stored = [0.0f32; 2];
            let mut sincos_held = [(0.0f32, 1.0f32); 2];
            for a in 0..2 {
                if ro.lane + 32 * (a as u32) < na {
                    (theta[a], theta_stored[a], sincos_held[a]) =
                        advance_angle(theta[a], logits[a], dt);
                }
            }

            // --- The item rotated and stored into this token's slots ---
            let rotated = rotated_item(&ro, raw, bias_quads, sincos_held, na, half_split);
            let q_slot = lay::Q + lay::Q_SLOT * (t % 2);
            let tiles = if ro.is_k {
                [
                    lay::K + k_slot(t) + pair_at(ro.rank, 0),
                    lay::K_LO + k_slot(t) + pair_at(ro.rank, 0),
                ]
            } else {
                [
                    q_slot + pair_at(ro.rank, 0),
                    q_slot + pair_at(R + ro.rank, 0),
                ]
            };
            let k_hi = store_item_words(sm, &ro.quads, &rotated, tiles, false, 0, &[[0.0; 4]; 2]);

            // Every thread has stored this token's operand words (and, at the first token, read
            // the carried state).
            sync_threads();
            if !last {
                inputs = load_token(t + 1);
            }

            let out_inputs =
                OutputInputs::load(prm, &ro, fresh_u32(h), (bt * heads + h) * P + ro.out_row);
            if last {
                write_back(prm, &ro, bh, theta_stored, k_state_row, k_hi, out_inputs.v);
            }

            // Depths 0–3 from the previous token's key slot, 4–7 from this token's.
            let key_row = if ro.mat_row < R {
                k_slot(t + lay::K_SLOTS - 1) + ro.mat_row * lay::ROW_STRIDE
            } else {
                k_slot(t) + (ro.mat_row - R) * lay::ROW_STRIDE
            };
            let at = [lay::K, lay::K_LO].map(|tile| sm + tile + key_row + 16 * ro.mat);
            // The A operands and the decay after the barrier: before it, a warp would wait there
            // for its loads.
            let scale = if ro.prev { beta } else { gamma };
            let (a_wide, a_narrow) = row_weights(scale, w_v, w_mimo);
            decay(&mut acc, alpha);
            update(&mut acc, at, &a_wide, &a_narrow);
            if last {
                store_state(prm, &ro, bh, &acc);
            }
            let q_at = sm + q_slot + ro.mat_row * lay::ROW_STRIDE + 16 * ro.mat;
            let y_row = read_out(&acc, q_at, ro.quad);
            let norm_slot = sm + lay::NORM + lay::NORM_SLOT * (t % 2);
            write_outputs(prm, &ro, &out_inputs, y_row, norm_slot, bt, h);
        }
    }
}

/// Tensor-core decode entry point for `params.tokens ≥ 1` tokens (bf16, R = 4, N = 128, P = 64):
/// the state stays in the accumulators across the call's tokens; see the module docs.
///
/// # Safety
/// See the module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn decode_mma_tokens_bf16_r4_n128_p64(params: DecodeParams) {
    crate::arch::grid_dependency::dependent_launch_prologue();
    // SAFETY: forwarded launch contract.
    unsafe { decode_mma_tokens(&params) }
}
