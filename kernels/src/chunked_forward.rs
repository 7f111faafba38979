//! Mamba-3 MIMO chunked forward (spec §2.2, §2.3).
//!
//! The GEMM phases C, D and the state pass run on tensor cores (TF32 `mma`, see `use_mma`) for
//! bf16 activations when the rows, N and P are whole 16-wide tiles, and as f32 FMA loops otherwise
//! (always for f32 activations); the entry points keep their `forward_fma_*` names.
//!
//! One block of [`FORWARD_THREADS`] threads per (head, batch row) walks the chunks of its sequence
//! in order and carries the (P, N) state `Sᵀ` in shared memory (f32). Per chunk of `len ≤ C`
//! tokens (rows `ρ = i·R + r`):
//!
//! * **A** token scalars (`A_i` inclusive log-decay prefix, `γ_i`, key scale
//!   `c_i = γ_i + ε_{i+1}`, state-pass scale `exp(Ā_i)·c_i`), the angle increments
//!   `π·tanh(logit)·Δ` in f64 (see [`crate::angles`]), and the up-projected values
//!   `x = v ⊙ mimo_v`;
//! * **A2** the per-angle prefix of the increments from a carry reduced into [0, 2π) after every
//!   chunk, and the f32 `cos`/`sin` of each θ reduced into [−π, π);
//! * **B** biased, rotated q̂ and k̂ (the rotation is applied while staging);
//! * **B** also the weight table `w(i,i') = c_{i'}·exp(A_i − A_{i'})` for `i' < i` and `γ_i` for
//!   `i' = i` (the diagonal term: the same-time dot of rotated vectors equals the unrotated one);
//! * **C** the raw scores `W[ρ,ρ'] = q̂_ρ·k̂_ρ'` for `i' ≤ i`;
//! * **D** `y_ρ = exp(A_i)·S q̂_ρ + Σ_{i'≤i} w(i,i')·Σ_{r'} W[ρ,(i',r')] x_(i',r') + D·x_ρ` into
//!   shared memory;
//! * **E** (fused-norm mode) the per-row inverse RMS over P;
//! * **F** gate / norm / contraction or prereduce output, and the state pass
//!   `S ← exp(A_last)·S + Σ_ρ exp(Ā_i)·c_i·x_ρ k̂_ρᵀ`.
//!
//! Shapes are padded to multiples of 4 (N, P) and of the score tile (C) with zeros, so every
//! inner loop reads 16-byte vectors; padded rows and columns are never written out.
//!
//! When `staged` is set, the raw q, k and v rows of chunk c+1 are copied into a staging region
//! ([`ForwardStage`]) with 16-byte `cp.async` while chunk c computes (phases C–F), so phases A and B
//! read them from shared memory; the token scalars are loaded one token per thread and their
//! prefixes formed from shared memory (A2).
//!
//! # Launch contract
//! Grid `(H, B)`, block [`FORWARD_THREADS`], dynamic shared memory
//! `ForwardSmem::new(R, N, P, Na, C).bytes()`, plus `ForwardStage::new(R, N, P, C, size of X)
//! .bytes` when `staged` is 1; every pointer of [`ForwardParams`] valid for its documented shape
//! (the host validates); `rank == R`.

use mamba3_abi::{
    output_mode, rotation, ForwardParams, ForwardSmem, ForwardStage, FORWARD_THREADS,
};

use crate::angles::{angle_increment, reduced_f32, rotate_pair, stored_f32, wrap_two_pi_f64};
use crate::arch::cp_async::{commit_group, cp_async_cg_16, wait_group};
use crate::arch::float::fma_rn;
use crate::arch::ldmatrix::ldmatrix_x4;
use crate::arch::mma::mma_m16n8k8_tf32_f32;
use crate::arch::sreg::{
    block_x, block_y, ld_shared_f32, ld_shared_u32, ld_shared_v2_f32, ld_shared_v4_f32, smem_base,
    st_shared_f32, st_shared_v2_f32, sync_threads, thread_x,
};
#[cfg(target_arch = "nvptx64")]
use crate::elem::Bf16;
use crate::elem::{ldg, stg, Elem};
use crate::frag::{a_m16k8_tf32, acc_m16n8, b_k8n8_tf32, ldmatrix_x4_tf32_a, ldmatrix_x4_tf32_b};
use crate::geometry::Geometry;
#[cfg(target_arch = "nvptx64")]
use crate::geometry::{AnyGeometry, FixedGeometry};
use crate::math::{exp, rsqrt, sigmoid_rcp, silu_rcp, sincos};
use crate::smem::{at, ld_shared_f64, st_shared_f64};
use crate::warp_reduce;

const T: u32 = FORWARD_THREADS;

/// `acc + a·b` over four lanes, one rounding per product.
#[inline(always)]
fn dot4(acc: f32, a: [f32; 4], b: [f32; 4]) -> f32 {
    fma_rn(
        a[3],
        b[3],
        fma_rn(a[2], b[2], fma_rn(a[1], b[1], fma_rn(a[0], b[0], acc))),
    )
}

/// Element `col` of a raw staged row (activation dtype `X`) at shared byte address `row`.
#[inline(always)]
unsafe fn ld_raw<X: Elem>(row: u32, col: u32) -> f32 {
    // SAFETY (whole body): forwarded to the caller.
    unsafe {
        if X::BYTES == 4 {
            ld_shared_f32(row + 4 * col)
        } else {
            // bf16: the word holding elements 2m (low half) and 2m + 1 (high half).
            let w = ld_shared_u32(row + 2 * (col & !1));
            f32::from_bits(if col & 1 == 0 {
                w << 16
            } else {
                w & 0xffff_0000
            })
        }
    }
}

/// Word `w` (4 bytes) of a raw row of `len` elements of type `X` that starts at element `start`
/// of the global tensor `base`; elements past `len` read as zero.
#[inline(always)]
unsafe fn raw_word<X: Elem>(base: u64, start: usize, len: u32, w: u32) -> u32 {
    // SAFETY (whole body): forwarded to the caller.
    unsafe {
        if X::BYTES == 4 {
            if w < len {
                X::load(base, start + w as usize).to_bits()
            } else {
                0
            }
        } else {
            let (e0, e1) = (2 * w, 2 * w + 1);
            let lo = if e0 < len {
                X::load(base, start + e0 as usize).to_bits() >> 16
            } else {
                0
            };
            let hi = if e1 < len {
                X::load(base, start + e1 as usize).to_bits() & 0xffff_0000
            } else {
                0
            };
            lo | hi
        }
    }
}

/// Per-block constants shared by the phases.
#[derive(Clone, Copy)]
struct Ctx {
    base: u32,
    lay: ForwardSmem,
    stage: ForwardStage,
    /// Shared byte address of the staging region (valid when `staged`).
    raw: u32,
    /// Raw q, k, v come from the staging region rather than global memory.
    staged: bool,
    tid: u32,
    b: usize,
    h: usize,
    g: usize,
    s_len: usize,
    heads: usize,
    groups: usize,
    n: u32,
    p: u32,
    na: u32,
    /// Start of this (b, h) row in the (B,H,S) tensors.
    row: usize,
}

impl Ctx {
    #[inline(always)]
    fn sm(&self, region: u32, i: u32) -> u32 {
        at(self.base, region, i)
    }
}

/// Phase A: token scalars, angle increments, up-projected x.
#[inline(always)]
unsafe fn phase_scalars_angles_x<X: Elem, const R: usize>(
    prm: &ForwardParams,
    cx: &Ctx,
    c0: usize,
    len: u32,
    lane_prm: &LaneParams,
) {
    let lay = &cx.lay;
    // SAFETY (whole body): indices stay inside the launch contract's shapes and the layout.
    unsafe {
        // Raw token scalars, one thread per token, all loads of the block in flight together:
        // adt, γ_u = σ(trap_u)·Δ_u and ε_u = Δ_u·σ(−trap_u), the latter also for the token after
        // the chunk (c_{len−1} needs it). Phase A2 forms the prefixes from shared memory.
        let mut u = cx.tid;
        while u <= len {
            let t = c0 + u as usize;
            if t < cx.s_len {
                let dt = ldg(prm.dt, cx.row + t);
                let tr = X::load(prm.trap, cx.row + t);
                if u < len {
                    st_shared_f32(cx.sm(lay.adt, u), ldg(prm.adt, cx.row + t));
                    st_shared_f32(cx.sm(lay.gamma, u), sigmoid_rcp(tr) * dt);
                }
                st_shared_f32(cx.sm(lay.eps, u), dt * sigmoid_rcp(-tr));
            } else {
                st_shared_f32(cx.sm(lay.eps, u), 0.0);
            }
            u += T;
        }

        // Angle increments π·tanh(logit)·Δ in f64, one (time, angle) pair per thread, kept in the
        // (cos, sin) slots of that pair until phase A2 replaces them with the cosine and sine.
        let na = cx.na;
        let mut e = cx.tid;
        while e < len * na {
            let i = e / na;
            let j = e - i * na;
            let t = c0 + i as usize;
            let logit = ldg(
                prm.angles,
                ((cx.b * cx.s_len + t) * cx.heads + cx.h) * na as usize + j as usize,
            );
            let inc = angle_increment(logit, ldg(prm.dt, cx.row + t));
            let bits = inc.to_bits();
            st_shared_f32(cx.sm(lay.cos, e), f32::from_bits(bits as u32));
            st_shared_f32(cx.sm(lay.sin, e), f32::from_bits((bits >> 32) as u32));
            e += T;
        }

        if x_pair_path::<R>(cx) {
            x_lane_pairs::<X, R>(cx, len, lane_prm.mimo_v);
            return;
        }
        if cx.staged && row_staging::<R>() {
            x_from_stage::<X, R>(prm, cx, len);
            return;
        }
        // x = v ⊙ mimo_v, zero in padding rows and columns. Four elements per step with their
        // loads issued together (invalid ones read element 0 and are discarded).
        let p4 = lay.p4;
        let total = lay.rows * p4;
        let mut e = cx.tid;
        while e < total {
            let mut val = [0.0f32; 4];
            for (u, out) in val.iter_mut().enumerate() {
                let ee = e + u as u32 * T;
                let rho = ee / p4;
                let pp = ee - rho * p4;
                let i = rho / R as u32;
                let r = rho - i * R as u32;
                let valid = ee < total && i < len && pp < cx.p;
                let t = c0 + i as usize;
                let iv = ((cx.b * cx.s_len + t) * cx.heads + cx.h) * cx.p as usize + pp as usize;
                let im = (cx.h * R + r as usize) * cx.p as usize + pp as usize;
                let vv = if cx.staged {
                    if valid {
                        ld_raw::<X>(cx.raw + cx.stage.v + i * cx.stage.p_row, pp)
                    } else {
                        0.0
                    }
                } else {
                    X::load(prm.v, if valid { iv } else { 0 })
                };
                let mv = ldg(prm.mimo_v, if valid { im } else { 0 });
                *out = if valid { vv * mv } else { 0.0 };
            }
            for (u, v) in val.iter().enumerate() {
                let ee = e + u as u32 * T;
                if ee < total {
                    st_shared_f32(cx.sm(lay.x, ee), *v);
                }
            }
            e += 4 * T;
        }
    }
}

/// Whether phases A and B read the staging region row by row ([`x_from_stage`], [`qk_from_stage`]).
/// Not at R = 8: that bf16 kernel already needs 254 of 255 registers on sm_90, and the row loops'
/// loop-invariant values tip it into spilling; it keeps the per-element loops.
#[inline(always)]
const fn row_staging<const R: usize>() -> bool {
    R <= 4
}

/// Phase A's x = v ⊙ mimo_v from the staging region: one warp per row ρ, lanes along p, so the
/// row's indices are formed once rather than per element; zero in padding rows and columns.
#[inline(always)]
unsafe fn x_from_stage<X: Elem, const R: usize>(prm: &ForwardParams, cx: &Ctx, len: u32) {
    let lay = &cx.lay;
    let (warp, lane) = (cx.tid / 32, cx.tid % 32);
    // SAFETY (whole body): rows < cp·R, columns < p4 lie inside the x region and the staged rows.
    unsafe {
        let mut rho = warp;
        while rho < lay.rows {
            let i = rho / R as u32;
            let r = rho - i * R as u32;
            let v_row = cx.raw + cx.stage.v + i * cx.stage.p_row;
            let m_base = (cx.h * R + r as usize) * cx.p as usize;
            let mut pp = lane;
            while pp < lay.p4 {
                let val = if i < len && pp < cx.p {
                    ld_raw::<X>(v_row, pp) * ldg(prm.mimo_v, m_base + pp as usize)
                } else {
                    0.0
                };
                st_shared_f32(cx.sm(lay.x, rho * lay.p4 + pp), val);
                pp += 32;
            }
            rho += T / 32;
        }
    }
}

/// Phase A's x = v ⊙ mimo_v from the staging region when [`x_pair_path`] holds: one warp per row
/// ρ, each lane columns 2l and 2l + 1 (one word or 8-byte load, weights from registers, one 8-byte
/// store); zero in padding rows and columns.
#[inline(always)]
unsafe fn x_lane_pairs<X: Elem, const R: usize>(cx: &Ctx, len: u32, mimo_v: [f32; 2]) {
    let lay = &cx.lay;
    let (warp, lane) = (cx.tid / 32, cx.tid % 32);
    let col = 2 * lane;
    if col >= lay.p4 {
        return;
    }
    // SAFETY (whole body): rows < cp·R and columns < p4 lie inside the x region and the staged
    // rows; p4 and the region start are multiples of 4, so the pair is 8-byte aligned.
    unsafe {
        let mut rho = warp;
        while rho < lay.rows {
            let i = rho / R as u32;
            let val = if i < len && col < cx.p {
                let v = ld_raw2::<X>(cx.raw + cx.stage.v + i * cx.stage.p_row, col);
                [v[0] * mimo_v[0], v[1] * mimo_v[1]]
            } else {
                [0.0; 2]
            };
            st_shared_v2_f32(cx.sm(lay.x, rho * lay.p4 + col), val);
            rho += T / 32;
        }
    }
}

/// Whether phase B takes [`qk_lane_pairs`]: every row a warp visits has the same rank (the warp
/// count is a multiple of R), one pass of 32 lanes covers N (N ≤ 128, a multiple of 4), and the
/// angle pairs of a lane are one 8-byte `cos`/`sin` load (Na even).
#[inline(always)]
fn lane_pair_path<const R: usize>(cx: &Ctx) -> bool {
    cx.staged
        && row_staging::<R>()
        && (T / 32).is_multiple_of(R as u32)
        && cx.n.is_multiple_of(4)
        && cx.n <= 128
        && cx.na.is_multiple_of(2)
}

/// The two element pairs `(a, a + 1)` and `(b, b + 1)` of q and k that lane `l < N/4` owns in
/// [`qk_lane_pairs`]: rotation pairs `(a, b)` and `(a + 1, b + 1)` in the half-split convention,
/// `(a, a + 1)` and `(b, b + 1)` in the pairwise one; their angles are `2l` and `2l + 1` either way.
#[inline(always)]
fn lane_pair_columns(n: u32, half_split: bool, lane: u32) -> (u32, u32) {
    if half_split {
        (2 * lane, n / 2 + 2 * lane)
    } else {
        (4 * lane, 4 * lane + 2)
    }
}

/// This lane's per-head parameters for the lane-pair paths, loaded once per block (the warp's rank
/// never changes): the q and k biases of [`qk_lane_pairs`] (columns of [`lane_pair_columns`] in the
/// order a, a + 1, b, b + 1) and the `mimo_v` weights of columns 2l, 2l + 1 for [`x_lane_pairs`].
#[derive(Clone, Copy)]
struct LaneParams {
    q: [f32; 4],
    k: [f32; 4],
    mimo_v: [f32; 2],
}

/// Whether phase A's x takes [`x_lane_pairs`]: ranks fixed per warp as for [`lane_pair_path`], and
/// one pass of 32 lanes, two columns each, covers an even P.
#[inline(always)]
fn x_pair_path<const R: usize>(cx: &Ctx) -> bool {
    lane_pair_path::<R>(cx) && cx.p.is_multiple_of(2) && cx.p <= 64
}

/// Loads [`LaneParams`] (zeros where a path does not apply or the lane owns no columns).
#[inline(always)]
unsafe fn lane_params<const R: usize>(prm: &ForwardParams, cx: &Ctx) -> LaneParams {
    let lane = cx.tid % 32;
    let r = (cx.tid / 32) as usize % R;
    let mut params = LaneParams {
        q: [0.0; 4],
        k: [0.0; 4],
        mimo_v: [0.0; 2],
    };
    if x_pair_path::<R>(cx) && 2 * lane < cx.p {
        let base = (cx.h * R + r) * cx.p as usize + 2 * lane as usize;
        // SAFETY: columns 2l + 1 < P of this head's rank-r weight row.
        unsafe {
            params.mimo_v = [ldg(prm.mimo_v, base), ldg(prm.mimo_v, base + 1)];
        }
    }
    if lane_pair_path::<R>(cx) && lane < cx.n / 4 {
        let (a, b) = lane_pair_columns(cx.n, prm.rotation == rotation::HALF_SPLIT, lane);
        let base = (cx.h * R + r) * cx.n as usize;
        for (u, col) in [a, a + 1, b, b + 1].into_iter().enumerate() {
            // SAFETY: column < N of this head's rank-r bias row.
            unsafe {
                params.q[u] = ldg(prm.q_bias, base + col as usize);
                params.k[u] = ldg(prm.k_bias, base + col as usize);
            }
        }
    }
    params
}

/// Elements `col` and `col + 1` (`col` even) of a raw staged row at shared byte address `row`.
#[inline(always)]
unsafe fn ld_raw2<X: Elem>(row: u32, col: u32) -> [f32; 2] {
    // SAFETY (whole body): forwarded to the caller; rows are 16-byte aligned, so the 8-byte f32
    // pair is aligned.
    unsafe {
        if X::BYTES == 4 {
            ld_shared_v2_f32(row + 4 * col)
        } else {
            let w = ld_shared_u32(row + 2 * col);
            [f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000)]
        }
    }
}

/// Phase B's q̂ and k̂ from the staging region when [`lane_pair_path`] holds: one warp per row ρ,
/// each lane two element pairs of q and of k (one word or 8-byte load each), its biases from
/// registers ([`LaneParams`]) and 8-byte stores. Same arithmetic as [`qk_from_stage`].
#[inline(always)]
unsafe fn qk_lane_pairs<const R: usize, X: Elem, const Q: bool>(
    prm: &ForwardParams,
    cx: &Ctx,
    len: u32,
    tf32: bool,
    params: &LaneParams,
) {
    let lay = &cx.lay;
    let half_split = prm.rotation == rotation::HALF_SPLIT;
    let ns = lay.n_stride;
    let (warp, lane) = (cx.tid / 32, cx.tid % 32);
    if lane >= cx.n / 4 {
        return;
    }
    let (a, b) = lane_pair_columns(cx.n, half_split, lane);
    let j = 2 * lane;
    // SAFETY (whole body): rows < cp·R and columns < N lie inside the q̂/k̂ regions and the staged
    // rows; angle pairs (j, j + 1) < Na start at even, 8-byte aligned elements.
    unsafe {
        let mut rho = warp;
        while rho < lay.rows {
            let i = rho / R as u32;
            let mut q = [0.0f32; 4];
            let mut k = [0.0f32; 4];
            if i < len {
                let k_row = cx.raw + cx.stage.k + rho * cx.stage.n_row;
                let (ka, kb) = (ld_raw2::<X>(k_row, a), ld_raw2::<X>(k_row, b));
                k = [ka[0], ka[1], kb[0], kb[1]];
                if Q {
                    let q_row = cx.raw + cx.stage.q + rho * cx.stage.n_row;
                    let (qa, qb) = (ld_raw2::<X>(q_row, a), ld_raw2::<X>(q_row, b));
                    q = [qa[0], qa[1], qb[0], qb[1]];
                }
                for u in 0..4 {
                    q[u] += params.q[u];
                    k[u] += params.k[u];
                }
                if j < cx.na {
                    let c = ld_shared_v2_f32(cx.sm(lay.cos, i * cx.na + j));
                    let s = ld_shared_v2_f32(cx.sm(lay.sin, i * cx.na + j));
                    // Element slots of the two rotation pairs (see `lane_pair_columns`).
                    let pairs = if half_split {
                        [(0, 2), (1, 3)]
                    } else {
                        [(0, 1), (2, 3)]
                    };
                    for (m, (x, y)) in pairs.into_iter().enumerate() {
                        (q[x], q[y]) = rotate_pair(q[x], q[y], c[m], s[m]);
                        (k[x], k[y]) = rotate_pair(k[x], k[y], c[m], s[m]);
                    }
                }
            }
            if tf32 {
                q = q.map(tf32_round);
                k = k.map(tf32_round);
            }
            if Q {
                st_shared_v2_f32(cx.sm(lay.q, rho * ns + a), [q[0], q[1]]);
                st_shared_v2_f32(cx.sm(lay.q, rho * ns + b), [q[2], q[3]]);
            }
            st_shared_v2_f32(cx.sm(lay.k, rho * ns + a), [k[0], k[1]]);
            st_shared_v2_f32(cx.sm(lay.k, rho * ns + b), [k[2], k[3]]);
            rho += T / 32;
        }
    }
}

/// Phase B's q̂ and k̂ from the staging region: one warp per row ρ, lanes along the rotation
/// pairs (same arithmetic as the unstaged loop of [`phase_stage_qk`]).
#[inline(always)]
unsafe fn qk_from_stage<const R: usize, X: Elem, const Q: bool>(
    prm: &ForwardParams,
    cx: &Ctx,
    len: u32,
    tf32: bool,
) {
    let lay = &cx.lay;
    let half = cx.n / 2;
    let pairs = lay.n4 / 2;
    let half_split = prm.rotation == rotation::HALF_SPLIT;
    let ns = lay.n_stride;
    let (warp, lane) = (cx.tid / 32, cx.tid % 32);
    // SAFETY (whole body): rows < cp·R and columns < n4 lie inside the q̂/k̂ regions and the
    // staged rows; bias indices < (H·R·N).
    unsafe {
        let mut rho = warp;
        while rho < lay.rows {
            let i = rho / R as u32;
            let r = rho - i * R as u32;
            let q_row = cx.raw + cx.stage.q + rho * cx.stage.n_row;
            let k_row = cx.raw + cx.stage.k + rho * cx.stage.n_row;
            let bias = (cx.h * R + r as usize) * cx.n as usize;
            let mut j = lane;
            while j < pairs {
                let (ia, ib) = if j >= half {
                    (cx.n, cx.n + 1)
                } else if half_split {
                    (j, j + half)
                } else {
                    (2 * j, 2 * j + 1)
                };
                let (mut qa, mut qb, mut ka, mut kb) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
                if i < len && j < half {
                    if Q {
                        qa = ld_raw::<X>(q_row, ia) + ldg(prm.q_bias, bias + ia as usize);
                        qb = ld_raw::<X>(q_row, ib) + ldg(prm.q_bias, bias + ib as usize);
                    }
                    ka = ld_raw::<X>(k_row, ia) + ldg(prm.k_bias, bias + ia as usize);
                    kb = ld_raw::<X>(k_row, ib) + ldg(prm.k_bias, bias + ib as usize);
                    if j < cx.na {
                        let c = ld_shared_f32(cx.sm(lay.cos, i * cx.na + j));
                        let s = ld_shared_f32(cx.sm(lay.sin, i * cx.na + j));
                        (qa, qb) = rotate_pair(qa, qb, c, s);
                        (ka, kb) = rotate_pair(ka, kb, c, s);
                    }
                }
                if tf32 {
                    (qa, qb, ka, kb) = (
                        tf32_round(qa),
                        tf32_round(qb),
                        tf32_round(ka),
                        tf32_round(kb),
                    );
                }
                if Q {
                    st_shared_f32(cx.sm(lay.q, rho * ns + ia), qa);
                    st_shared_f32(cx.sm(lay.q, rho * ns + ib), qb);
                }
                st_shared_f32(cx.sm(lay.k, rho * ns + ia), ka);
                st_shared_f32(cx.sm(lay.k, rho * ns + ib), kb);
                j += 32;
            }
            rho += T / 32;
        }
    }
}

/// Phase A2, token scalars: the inclusive log-decay prefix `A_i`, `exp(A_i)`, `c_i`, and the
/// state-pass scale `exp(Ā_i)·c_i`, one thread per chunk position, from phase A's raw scalars.
#[inline(always)]
unsafe fn phase_token_scalars(cx: &Ctx, len: u32) {
    let lay = &cx.lay;
    // SAFETY (whole body): positions < cp and tokens ≤ len lie inside the scalar regions.
    unsafe {
        let mut i = cx.tid;
        while i < lay.cp {
            let (mut a_cs, mut e_a, mut gamma, mut c_s, mut k_s) = (0.0, 0.0, 0.0, 0.0, 0.0);
            if i < len {
                let (mut pre, mut suf) = (0.0f32, 0.0f32);
                let mut u = 0;
                while u < len {
                    let a = ld_shared_f32(cx.sm(lay.adt, u));
                    if u <= i {
                        pre += a;
                    } else {
                        suf += a;
                    }
                    u += 1;
                }
                gamma = ld_shared_f32(cx.sm(lay.gamma, i));
                c_s = gamma + ld_shared_f32(cx.sm(lay.eps, i + 1));
                a_cs = pre;
                e_a = exp(pre);
                k_s = exp(suf) * c_s;
            }
            st_shared_f32(cx.sm(lay.a_cs, i), a_cs);
            st_shared_f32(cx.sm(lay.exp_a, i), e_a);
            st_shared_f32(cx.sm(lay.gamma, i), gamma);
            st_shared_f32(cx.sm(lay.c_scale, i), c_s);
            st_shared_f32(cx.sm(lay.k_scale, i), k_s);
            i += T;
        }
    }
}

/// Phase A2: cumulative angles. Angle j is owned by thread T−1−j (mod T), the same thread every
/// chunk, so the carried total needs no barrier of its own; each θ is reduced into [−π, π) and
/// its cosine and sine replace the increment in the pair's slots.
#[inline(always)]
unsafe fn phase_angle_prefix(cx: &Ctx, len: u32) {
    let lay = &cx.lay;
    let na = cx.na;
    // SAFETY (whole body): slots < len·Na lie inside the (cos, sin) regions.
    unsafe {
        let mut j = T - 1 - cx.tid;
        while j < na {
            let slot = cx.sm(lay.theta, 2 * j);
            let mut acc = ld_shared_f64(slot);
            let mut i = 0;
            while i < len {
                let e = i * na + j;
                let (c_addr, s_addr) = (cx.sm(lay.cos, e), cx.sm(lay.sin, e));
                let lo = ld_shared_u32(c_addr) as u64;
                let hi = ld_shared_u32(s_addr) as u64;
                acc += f64::from_bits(lo | (hi << 32));
                let (s, c) = sincos(reduced_f32(acc));
                st_shared_f32(c_addr, c);
                st_shared_f32(s_addr, s);
                i += 1;
            }
            st_shared_f64(slot, wrap_two_pi_f64(acc));
            j += T;
        }
    }
}

/// (time, angle) pairs per thread of the parallel angle prefix; longer chunks use the serial
/// [`phase_angle_prefix`].
const ANGLE_ITEMS: usize = 4;

/// Whether [`phase_angle_prefix_sums`] / [`phase_angle_prefix_store`] cover the chunk.
#[inline(always)]
fn parallel_angles(cx: &Ctx, len: u32) -> bool {
    len * cx.na <= ANGLE_ITEMS as u32 * T
}

/// Phase A2, parallel angle prefix, first half: each (time i, angle j) pair of the chunk sums the
/// carried total and the increments 0..=i of its angle, in the serial order (so θ is bitwise the
/// same as [`phase_angle_prefix`]'s), and keeps θ in registers over the barrier that follows.
#[inline(always)]
unsafe fn phase_angle_prefix_sums(cx: &Ctx, len: u32) -> [f64; ANGLE_ITEMS] {
    let lay = &cx.lay;
    let na = cx.na;
    let mut theta = [0.0f64; ANGLE_ITEMS];
    // SAFETY (whole body): pairs < len·Na lie inside the (cos, sin) regions, angles < Na inside
    // the carried totals.
    unsafe {
        for (m, th) in theta.iter_mut().enumerate() {
            let e = cx.tid + m as u32 * T;
            if e < len * na {
                let i = e / na;
                let j = e - i * na;
                let mut acc = ld_shared_f64(cx.sm(lay.theta, 2 * j));
                let mut u = 0;
                while u <= i {
                    let f = u * na + j;
                    let lo = ld_shared_u32(cx.sm(lay.cos, f)) as u64;
                    let hi = ld_shared_u32(cx.sm(lay.sin, f)) as u64;
                    acc += f64::from_bits(lo | (hi << 32));
                    u += 1;
                }
                *th = acc;
            }
        }
    }
    theta
}

/// Phase A2, parallel angle prefix, second half (after a barrier): the cosine and sine of each θ
/// reduced into [−π, π) replace the increments, and the last time's θ, reduced into [0, 2π),
/// becomes the carried total.
#[inline(always)]
unsafe fn phase_angle_prefix_store(cx: &Ctx, len: u32, theta: [f64; ANGLE_ITEMS]) {
    let lay = &cx.lay;
    let na = cx.na;
    // SAFETY (whole body): as in `phase_angle_prefix_sums`.
    unsafe {
        for (m, th) in theta.iter().enumerate() {
            let e = cx.tid + m as u32 * T;
            if e < len * na {
                let i = e / na;
                let j = e - i * na;
                let (s, c) = sincos(reduced_f32(*th));
                st_shared_f32(cx.sm(lay.cos, e), c);
                st_shared_f32(cx.sm(lay.sin, e), s);
                if i == len - 1 {
                    st_shared_f64(cx.sm(lay.theta, 2 * j), wrap_two_pi_f64(*th));
                }
            }
        }
    }
}

/// Phase B: q̂ and k̂ (bias added, then rotated), zero in padding rows and columns; the score
/// weights per pair of times. Without `Q` (the segment-state pass, which needs only k̂ for the
/// state) the row-wise staged path skips q̂ and the score weights. With `tf32` (the tensor-core
/// phases follow) q̂ and k̂ are stored rounded to TF32, the precision `mma` reads them in.
#[inline(always)]
unsafe fn phase_stage_qk<X: Elem, const R: usize, const Q: bool>(
    prm: &ForwardParams,
    cx: &Ctx,
    c0: usize,
    len: u32,
    tf32: bool,
    lane_prm: &LaneParams,
) {
    let lay = &cx.lay;
    let half = cx.n / 2;
    let pairs = lay.n4 / 2;
    let half_split = prm.rotation == rotation::HALF_SPLIT;
    let ns = lay.n_stride;
    // SAFETY (whole body): indices stay inside the launch contract's shapes and the layout.
    unsafe {
        // Four (row, pair) items per step with their loads issued together (invalid ones read
        // element 0 and are discarded).
        let total = if lane_pair_path::<R>(cx) {
            qk_lane_pairs::<R, X, Q>(prm, cx, len, tf32, lane_prm);
            0
        } else if cx.staged && row_staging::<R>() {
            qk_from_stage::<R, X, Q>(prm, cx, len, tf32);
            0
        } else {
            lay.rows * pairs
        };
        let mut e = cx.tid;
        while e < total {
            let mut vals = [[0.0f32; 4]; 4];
            for (u, out) in vals.iter_mut().enumerate() {
                let ee = e + u as u32 * T;
                let rho = ee / pairs;
                let j = ee - rho * pairs;
                let i = rho / R as u32;
                let r = rho - i * R as u32;
                let valid = ee < total && j < half && i < len;
                let (ia, ib) = if half_split {
                    (j, j + half)
                } else {
                    (2 * j, 2 * j + 1)
                };
                let t = c0 + i as usize;
                let src =
                    (((cx.b * cx.s_len + t) * R + r as usize) * cx.groups + cx.g) * cx.n as usize;
                let bias = (cx.h * R + r as usize) * cx.n as usize;
                let (sa, sb) = if valid {
                    (src + ia as usize, src + ib as usize)
                } else {
                    (0, 0)
                };
                let (ba, bb) = if valid {
                    (bias + ia as usize, bias + ib as usize)
                } else {
                    (0, 0)
                };
                let (rqa, rqb, rka, rkb) = if cx.staged {
                    if valid {
                        let q_row = cx.raw + cx.stage.q + rho * cx.stage.n_row;
                        let k_row = cx.raw + cx.stage.k + rho * cx.stage.n_row;
                        (
                            ld_raw::<X>(q_row, ia),
                            ld_raw::<X>(q_row, ib),
                            ld_raw::<X>(k_row, ia),
                            ld_raw::<X>(k_row, ib),
                        )
                    } else {
                        (0.0, 0.0, 0.0, 0.0)
                    }
                } else {
                    (
                        X::load(prm.q, sa),
                        X::load(prm.q, sb),
                        X::load(prm.k, sa),
                        X::load(prm.k, sb),
                    )
                };
                let qa = rqa + ldg(prm.q_bias, ba);
                let qb = rqb + ldg(prm.q_bias, bb);
                let ka = rka + ldg(prm.k_bias, ba);
                let kb = rkb + ldg(prm.k_bias, bb);
                *out = if valid { [qa, qb, ka, kb] } else { [0.0; 4] };
            }
            for (u, v) in vals.iter().enumerate() {
                let ee = e + u as u32 * T;
                if ee < total {
                    let rho = ee / pairs;
                    let j = ee - rho * pairs;
                    let i = rho / R as u32;
                    let (ia, ib) = if j >= half {
                        (cx.n, cx.n + 1)
                    } else if half_split {
                        (j, j + half)
                    } else {
                        (2 * j, 2 * j + 1)
                    };
                    let [mut qa, mut qb, mut ka, mut kb] = *v;
                    if j < cx.na && i < len {
                        let c = ld_shared_f32(cx.sm(lay.cos, i * cx.na + j));
                        let s = ld_shared_f32(cx.sm(lay.sin, i * cx.na + j));
                        (qa, qb) = rotate_pair(qa, qb, c, s);
                        (ka, kb) = rotate_pair(ka, kb, c, s);
                    }
                    if tf32 {
                        (qa, qb, ka, kb) = (
                            tf32_round(qa),
                            tf32_round(qb),
                            tf32_round(ka),
                            tf32_round(kb),
                        );
                    }
                    st_shared_f32(cx.sm(lay.q, rho * ns + ia), qa);
                    st_shared_f32(cx.sm(lay.q, rho * ns + ib), qb);
                    st_shared_f32(cx.sm(lay.k, rho * ns + ia), ka);
                    st_shared_f32(cx.sm(lay.k, rho * ns + ib), kb);
                }
            }
            e += 4 * T;
        }
        // Score weights per (time, earlier time): c_{i'}·exp(A_i − A_{i'}), γ_i on the diagonal.
        let cp = lay.cp;
        let mut e = if Q { cx.tid } else { cp * cp };
        while e < cp * cp {
            let i = e / cp;
            let i2 = e - i * cp;
            let w = if i2 < i {
                ld_shared_f32(cx.sm(lay.c_scale, i2))
                    * exp(ld_shared_f32(cx.sm(lay.a_cs, i)) - ld_shared_f32(cx.sm(lay.a_cs, i2)))
            } else if i2 == i {
                ld_shared_f32(cx.sm(lay.gamma, i))
            } else {
                0.0
            };
            st_shared_f32(cx.sm(lay.seg, e), w);
            e += T;
        }
    }
}

/// Copies chunk `c0`'s raw q and k rows (row `ρ = i·R + r`) and v rows (row i) of `len` tokens
/// into the staging region: 16-byte `cp.async` copies that complete while the current chunk
/// computes (visible after `wait_group` and a barrier), or, when a row is not a whole number of
/// 16-byte aligned units in global memory, plain 4-byte loads and stores (visible after the
/// barrier alone).
#[inline(always)]
unsafe fn stage_raw<X: Elem, const R: usize>(prm: &ForwardParams, cx: &Ctx, c0: usize, len: u32) {
    let st = &cx.stage;
    let eb = X::BYTES as usize;
    // SAFETY (whole body): rows < len·R (q, k) and < len (v) of tokens < S, within each row's
    // padded bytes; the launch contract's shapes bound the global reads.
    unsafe {
        let qk_vec = (cx.n * X::BYTES).is_multiple_of(16) && (prm.q | prm.k).is_multiple_of(16);
        let upr = if qk_vec { st.n_row / 16 } else { st.n_row / 4 };
        let total = len * R as u32 * upr;
        let mut u = cx.tid;
        while u < 2 * total {
            let second = u >= total;
            let uu = if second { u - total } else { u };
            let rho = uu / upr;
            let col = uu - rho * upr;
            let i = rho / R as u32;
            let r = rho - i * R as u32;
            let src = (((cx.b * cx.s_len + c0 + i as usize) * R + r as usize) * cx.groups + cx.g)
                * cx.n as usize;
            let (gbase, region) = if second { (prm.k, st.k) } else { (prm.q, st.q) };
            let dst = cx.raw + region + rho * st.n_row;
            if qk_vec {
                let from = gbase + (src * eb) as u64 + 16 * col as u64;
                cp_async_cg_16(dst + 16 * col, from as *const u8);
            } else {
                let word = raw_word::<X>(gbase, src, cx.n, col);
                st_shared_f32(dst + 4 * col, f32::from_bits(word));
            }
            u += T;
        }
        let v_vec = (cx.p * X::BYTES).is_multiple_of(16) && prm.v.is_multiple_of(16);
        let upr = if v_vec { st.p_row / 16 } else { st.p_row / 4 };
        let total = len * upr;
        let mut u = cx.tid;
        while u < total {
            let i = u / upr;
            let col = u - i * upr;
            let src = ((cx.b * cx.s_len + c0 + i as usize) * cx.heads + cx.h) * cx.p as usize;
            let dst = cx.raw + st.v + i * st.p_row;
            if v_vec {
                let from = prm.v + (src * eb) as u64 + 16 * col as u64;
                cp_async_cg_16(dst + 16 * col, from as *const u8);
            } else {
                let word = raw_word::<X>(prm.v, src, cx.p, col);
                st_shared_f32(dst + 4 * col, f32::from_bits(word));
            }
            u += T;
        }
        commit_group();
    }
}

/// Phase C: raw scores `q̂_ρ·k̂_ρ'` over 4×4 row tiles that hold a pair `i' ≤ i`; the weights
/// are applied in phase D.
#[inline(always)]
unsafe fn phase_scores<const R: usize>(cx: &Ctx, len: u32) {
    let lay = &cx.lay;
    let tiles = (len * R as u32).div_ceil(4);
    let ns = lay.n_stride;
    let nq = lay.n4 / 4;
    let ws = lay.w_stride;
    // SAFETY (whole body): rows < ceil(len·R/4)·4 ≤ cp·R and columns < n4 lie inside the staged
    // regions.
    unsafe {
        let mut tile = cx.tid;
        while tile < tiles * tiles {
            let ti = tile / tiles;
            let tj = tile - ti * tiles;
            // Needed when the first column's time is not after the last row's time.
            if 4 * tj / R as u32 <= (4 * ti + 3) / R as u32 {
                let mut acc = [[0.0f32; 4]; 4];
                let q_row = cx.sm(lay.q, 4 * ti * ns);
                let k_row = cx.sm(lay.k, 4 * tj * ns);
                // Start each tile at a different column quad so that lanes reading different k̂
                // rows hit different banks; the sum is order-independent up to rounding.
                let mut c = tj % nq;
                let mut it = 0;
                while it < nq {
                    let mut qv = [[0.0f32; 4]; 4];
                    let mut kv = [[0.0f32; 4]; 4];
                    for a in 0..4 {
                        qv[a] = ld_shared_v4_f32(q_row + 4 * (a as u32 * ns + 4 * c));
                        kv[a] = ld_shared_v4_f32(k_row + 4 * (a as u32 * ns + 4 * c));
                    }
                    for a in 0..4 {
                        for bb in 0..4 {
                            acc[a][bb] = dot4(acc[a][bb], qv[a], kv[bb]);
                        }
                    }
                    c += 1;
                    if c == nq {
                        c = 0;
                    }
                    it += 1;
                }
                for a in 0..4 {
                    let row = cx.sm(lay.w, (4 * ti + a as u32) * ws + 4 * tj);
                    for bb in 0..4 {
                        st_shared_f32(row + 4 * bb as u32, acc[a][bb]);
                    }
                }
            }
            tile += T;
        }
    }
}

/// Phase D: raw per-rank outputs `y` for every (time, p) of the chunk, ranks in registers.
#[inline(always)]
unsafe fn phase_outputs_raw<const R: usize>(cx: &Ctx, len: u32, d_h: f32) {
    let lay = &cx.lay;
    let ns = lay.n_stride;
    let nq = lay.n4 / 4;
    let p4 = lay.p4;
    let ws = lay.w_stride;
    // SAFETY (whole body): rows < len·R, columns < n4 / p4 lie inside the staged regions.
    unsafe {
        let mut item = cx.tid;
        while item < len * cx.p {
            let i = item / cx.p;
            let pp = item - i * cx.p;
            let mut acc = [0.0f32; R];
            // Inter-chunk: exp(A_i)·q̂ᵀS.
            let s_row = cx.sm(lay.state, pp * ns);
            let q_row = cx.sm(lay.q, i * R as u32 * ns);
            let mut c = 0;
            while c < nq {
                let sv = ld_shared_v4_f32(s_row + 16 * c);
                for r in 0..R {
                    let qv = ld_shared_v4_f32(q_row + 4 * (r as u32 * ns + 4 * c));
                    acc[r] = dot4(acc[r], qv, sv);
                }
                c += 1;
            }
            let e_a = ld_shared_f32(cx.sm(lay.exp_a, i));
            for a in acc.iter_mut() {
                *a *= e_a;
            }
            // Intra-chunk and diagonal through the weighted scores.
            let mut xv = [0.0f32; R];
            let mut i2 = 0;
            while i2 <= i {
                for r2 in 0..R {
                    xv[r2] = ld_shared_f32(cx.sm(lay.x, (i2 * R as u32 + r2 as u32) * p4 + pp));
                }
                let w = ld_shared_f32(cx.sm(lay.seg, i * lay.cp + i2));
                let mut part = [0.0f32; R];
                for r in 0..R {
                    let w_row = cx.sm(lay.w, (i * R as u32 + r as u32) * ws + i2 * R as u32);
                    if R % 4 == 0 {
                        for q4 in 0..R / 4 {
                            let wv = ld_shared_v4_f32(w_row + 16 * q4 as u32);
                            part[r] = dot4(
                                part[r],
                                wv,
                                [xv[4 * q4], xv[4 * q4 + 1], xv[4 * q4 + 2], xv[4 * q4 + 3]],
                            );
                        }
                    } else {
                        for r2 in 0..R {
                            part[r] = fma_rn(ld_shared_f32(w_row + 4 * r2 as u32), xv[r2], part[r]);
                        }
                    }
                    acc[r] = fma_rn(w, part[r], acc[r]);
                }
                i2 += 1;
            }
            // Skip: after the loop xv holds x of time i.
            for r in 0..R {
                acc[r] = fma_rn(d_h, xv[r], acc[r]);
                st_shared_f32(cx.sm(lay.y, (i * R as u32 + r as u32) * p4 + pp), acc[r]);
            }
            item += T;
        }
    }
}

/// Phase E: per-row inverse RMS over P (fused-norm mode), one warp per row.
#[inline(always)]
unsafe fn phase_rstd<const R: usize>(cx: &Ctx, len: u32, eps: f32) {
    let lay = &cx.lay;
    let warp = cx.tid / 32;
    let lane = cx.tid % 32;
    // SAFETY (whole body): rows < len·R and columns < P lie inside the y region.
    unsafe {
        let mut rho = warp;
        while rho < len * R as u32 {
            let mut ss = 0.0f32;
            let mut pp = lane;
            while pp < cx.p {
                let y = ld_shared_f32(cx.sm(lay.y, rho * lay.p4 + pp));
                ss = fma_rn(y, y, ss);
                pp += 32;
            }
            let total = warp_reduce::sum(ss);
            if lane == 0 {
                st_shared_f32(cx.sm(lay.rstd, rho), rsqrt(total / cx.p as f32 + eps));
            }
            rho += T / 32;
        }
    }
}

/// Phase F, first half: gate / norm / contraction (or prereduce) and the global stores.
#[inline(always)]
unsafe fn phase_store_outputs<X: Elem, const R: usize>(
    prm: &ForwardParams,
    cx: &Ctx,
    c0: usize,
    len: u32,
    column: &ColumnParams<R>,
) {
    let lay = &cx.lay;
    let p = cx.p as usize;
    let has_z = prm.z != 0;
    let norm = prm.mode == output_mode::FUSED_NORM;
    // SAFETY (whole body): indices stay inside the launch contract's shapes and the layout.
    unsafe {
        let total = len * cx.p;
        let mut item0 = cx.tid;
        while item0 < total {
            // The z values of four items first, loads issued together (invalid ones read
            // element 0 and are discarded).
            let mut zs = [0.0f32; 4];
            if has_z {
                for (u, zv) in zs.iter_mut().enumerate() {
                    let item = item0 + u as u32 * T;
                    let i = item / cx.p;
                    let pp = item - i * cx.p;
                    let tok = cx.b * cx.s_len + c0 + i as usize;
                    let iz = (tok * cx.heads + cx.h) * p + pp as usize;
                    *zv = X::load(prm.z, if item < total { iz } else { 0 });
                }
            }
            // When P divides the block size, the four items share their column p: its mimo_z and
            // mimo_o come from `column` (loaded once per block), or at R = 8 are loaded here once
            // for all four.
            let same_p = T.is_multiple_of(cx.p);
            let (mut mz, mut mo) = (column.mimo_z, column.mimo_o);
            if same_p && !column_params_cached::<R>() && item0 < total {
                let p0 = (item0 % cx.p) as usize;
                for r in 0..R {
                    if has_z {
                        mz[r] = ldg(prm.mimo_z, (cx.h * R + r) * p + p0);
                    }
                    if prm.mode != output_mode::PREREDUCE {
                        mo[r] = ldg(prm.mimo_o, (cx.h * R + r) * p + p0);
                    }
                }
            }
            let mimo_z = |r: usize, pp: u32| {
                if same_p {
                    mz[r]
                } else {
                    ldg(prm.mimo_z, (cx.h * R + r) * p + pp as usize)
                }
            };
            let mimo_o = |r: usize, pp: u32| {
                if same_p {
                    mo[r]
                } else {
                    ldg(prm.mimo_o, (cx.h * R + r) * p + pp as usize)
                }
            };
            // One closure call per item with a constant index keeps `zs` in registers (a loop
            // over it is not unrolled, its body being large).
            let finish = |u: u32, zv: f32| {
                let item = item0 + u * T;
                if item < total {
                    let i = item / cx.p;
                    let pp = item - i * cx.p;
                    let tok = cx.b * cx.s_len + c0 + i as usize;
                    if prm.mode == output_mode::PREREDUCE {
                        for r in 0..R {
                            let mut y = ld_shared_f32(
                                cx.sm(lay.y, (i * R as u32 + r as u32) * lay.p4 + pp),
                            );
                            if has_z {
                                y *= silu_rcp(zv * mimo_z(r, pp));
                            }
                            X::store(
                                prm.out,
                                ((tok * R + r) * cx.heads + cx.h) * p + pp as usize,
                                y,
                            );
                        }
                    } else {
                        let w = if norm && prm.norm_weight != 0 {
                            ldg(prm.norm_weight, cx.h * p + pp as usize)
                        } else {
                            1.0
                        };
                        let mut out = 0.0f32;
                        for r in 0..R {
                            let rho = i * R as u32 + r as u32;
                            let mut y = ld_shared_f32(cx.sm(lay.y, rho * lay.p4 + pp));
                            if norm {
                                y *= ld_shared_f32(cx.sm(lay.rstd, rho)) * w;
                            }
                            if has_z {
                                y *= silu_rcp(zv * mimo_z(r, pp));
                            }
                            out = fma_rn(y, mimo_o(r, pp), out);
                        }
                        X::store(prm.out, (tok * cx.heads + cx.h) * p + pp as usize, out);
                    }
                }
            };
            finish(0, zs[0]);
            finish(1, zs[1]);
            finish(2, zs[2]);
            finish(3, zs[3]);
            item0 += 4 * T;
        }
    }
}

/// The `mimo_z` and `mimo_o` weights of this thread's output column `p = tid mod P`, loaded once per
/// block: when P divides the block size every output item of the thread has that column, every
/// chunk (zeros and ones otherwise, and for the weights a mode does not use).
#[derive(Clone, Copy)]
struct ColumnParams<const R: usize> {
    mimo_z: [f32; R],
    mimo_o: [f32; R],
}

/// Whether [`ColumnParams`] are loaded once per block: not at R = 8, whose 16 live weights would
/// spill; phase F then loads them once per chunk.
#[inline(always)]
const fn column_params_cached<const R: usize>() -> bool {
    R <= 4
}

/// Loads [`ColumnParams`].
#[inline(always)]
unsafe fn column_params<const R: usize>(prm: &ForwardParams, cx: &Ctx) -> ColumnParams<R> {
    let mut column = ColumnParams {
        mimo_z: [0.0; R],
        mimo_o: [1.0; R],
    };
    if column_params_cached::<R>() && T.is_multiple_of(cx.p) {
        let (p, p0) = (cx.p as usize, (cx.tid % cx.p) as usize);
        for r in 0..R {
            // SAFETY: column p0 < P of this head's rank-r weight rows.
            unsafe {
                if prm.z != 0 {
                    column.mimo_z[r] = ldg(prm.mimo_z, (cx.h * R + r) * p + p0);
                }
                if prm.mode != output_mode::PREREDUCE {
                    column.mimo_o[r] = ldg(prm.mimo_o, (cx.h * R + r) * p + p0);
                }
            }
        }
    }
    column
}

/// Phase F, second half: `S ← exp(A_last)·S + Σ_ρ exp(Ā_i)·c_i·x_ρ k̂_ρᵀ` over 4×4 (p, n) tiles.
#[inline(always)]
unsafe fn phase_state<const R: usize>(cx: &Ctx, len: u32) {
    let lay = &cx.lay;
    let ns = lay.n_stride;
    let nq = lay.n4 / 4;
    let pq = lay.p4 / 4;
    // SAFETY (whole body): rows < len·R and padded columns lie inside the staged regions.
    unsafe {
        let decay = ld_shared_f32(cx.sm(lay.exp_a, len - 1));
        let mut tile = cx.tid;
        while tile < nq * pq {
            let tp = tile / nq;
            let tn = tile - tp * nq;
            let mut acc = [[0.0f32; 4]; 4];
            let mut i = 0;
            while i < len {
                let ks = ld_shared_f32(cx.sm(lay.k_scale, i));
                for r in 0..R {
                    let rho = i * R as u32 + r as u32;
                    let kv = ld_shared_v4_f32(cx.sm(lay.k, rho * ns + 4 * tn));
                    let xv = ld_shared_v4_f32(cx.sm(lay.x, rho * lay.p4 + 4 * tp));
                    let kv = [kv[0] * ks, kv[1] * ks, kv[2] * ks, kv[3] * ks];
                    for a in 0..4 {
                        for bb in 0..4 {
                            acc[a][bb] = fma_rn(xv[a], kv[bb], acc[a][bb]);
                        }
                    }
                }
                i += 1;
            }
            for a in 0..4 {
                let addr = cx.sm(lay.state, (4 * tp + a as u32) * ns + 4 * tn);
                let sv = ld_shared_v4_f32(addr);
                for bb in 0..4 {
                    st_shared_f32(addr + 4 * bb as u32, fma_rn(decay, sv[bb], acc[a][bb]));
                }
            }
            tile += T;
        }
    }
}

/// Whether the tensor-core phases apply: bf16 activations and GEMM dimensions that are whole
/// 16-wide tiles (rows `cp·R`, N and P). The f32 path stays on the FMA phases: a three-pass TF32
/// split (hi·hi + hi·lo + lo·hi) was measured slower than FMA on the H200 (2026-11-29: 6.29 ms vs
/// 4.85 ms at H=64, B=1, S=2048) and reached 2.6e-6 at N=256, C=8 against the 2e-6 target.
#[inline(always)]
fn use_mma<X: Elem>(cx: &Ctx) -> bool {
    X::BYTES == 2
        && cx.lay.rows.is_multiple_of(16)
        && cx.n.is_multiple_of(16)
        && cx.p.is_multiple_of(16)
}

/// TF32 bit pattern of the f32 bit pattern `bits`: nearest, ties away from zero, exactly what
/// `cvt.rna.tf32.f32` gives for finite values, in two integer operations.
#[inline(always)]
fn tf32_bits(bits: u32) -> u32 {
    bits.wrapping_add(0x1000) & !0x1fff
}

/// `v` rounded to TF32 (as an f32): how q̂, k̂ and the weighted scores are stored for the
/// tensor-core phases, which then feed them to `mma` as loaded.
#[inline(always)]
fn tf32_round(v: f32) -> f32 {
    f32::from_bits(tf32_bits(v.to_bits()))
}

/// Shared address of this lane's `ldmatrix .x4` row for the TF32 A operand (16 rows × 8 deep) of
/// the row-major f32 tile at `tile` with row stride `stride` (in f32).
#[inline(always)]
fn a_rows_tf32(tile: u32, stride: u32, lane: u32) -> u32 {
    let (r, c) = ldmatrix_x4_tf32_a(lane);
    tile + 4 * (r * stride + c)
}

/// Shared address of this lane's `ldmatrix .x4` row for two TF32 B operands (8 deep × 8 columns
/// each, columns 0–7 and 8–15) of the tile stored column by column (`tile` + column · `stride`
/// f32 + depth).
#[inline(always)]
fn b_rows_tf32(tile: u32, stride: u32, lane: u32) -> u32 {
    let (r, c) = ldmatrix_x4_tf32_b(lane);
    tile + 4 * (r * stride + c)
}

/// Phase C on tensor cores: weighted scores `W[ρ,ρ'] = w(i,i')·q̂_ρ·k̂_ρ'` per 16×16 block with
/// `ρ'`-block ≤ `ρ`-block (later blocks hold only later times, as 16 is a multiple of R), one warp
/// per block; blocks past the chunk's live rows are skipped (phase D skips them too). q̂ and k̂
/// are stored TF32-rounded, so both operands come straight from `ldmatrix`.
#[inline(always)]
unsafe fn phase_scores_mma<const R: usize>(cx: &Ctx, len: u32) {
    let lay = &cx.lay;
    let ns = lay.n_stride;
    let ws = lay.w_stride;
    let (warp, lane) = (cx.tid / 32, cx.tid % 32);
    let live = (len * R as u32).div_ceil(16);
    // SAFETY (whole body): rows < 16·live ≤ rows and columns < N lie inside the staged regions;
    // all 32 lanes of a warp take the same items.
    unsafe {
        let mut item = warp;
        while item < live * live {
            let mb = item / live;
            let nb = item - mb * live;
            if nb <= mb {
                let mut acc = [[0.0f32; 4]; 2];
                let a_row = a_rows_tf32(cx.sm(lay.q, 16 * mb * ns), ns, lane);
                let b_row = b_rows_tf32(cx.sm(lay.k, 16 * nb * ns), ns, lane);
                let mut kk = 0;
                while kk < cx.n {
                    let a = ldmatrix_x4(a_row + 4 * kk);
                    let b = ldmatrix_x4(b_row + 4 * kk);
                    mma_m16n8k8_tf32_f32(&mut acc[0], a, [b[0], b[1]]);
                    mma_m16n8k8_tf32_f32(&mut acc[1], a, [b[2], b[3]]);
                    kk += 8;
                }
                for (t, acc_t) in acc.iter().enumerate() {
                    for (slot, v) in acc_t.iter().enumerate() {
                        let (r, c) = acc_m16n8(lane, slot as u32);
                        let rho = 16 * mb + r;
                        let rho2 = 16 * nb + 8 * t as u32 + c;
                        let w = ld_shared_f32(
                            cx.sm(lay.seg, rho / R as u32 * lay.cp + rho2 / R as u32),
                        );
                        st_shared_f32(cx.sm(lay.w, rho * ws + rho2), tf32_round(v * w));
                    }
                }
            }
            item += T / 32;
        }
    }
}

/// Phase D on tensor cores: `y = exp(A_i)·q̂ Sᵀ + W x + D·x` per (16-row block, group of `8·TN`
/// p columns), one warp per item. q̂ and W come TF32-rounded from `ldmatrix` (one A fragment feeds
/// all `TN` tiles); the state is loaded the same way and rounded in registers (it stays f32 in
/// shared memory); x, stored p-contiguous, is read element by element from per-lane base
/// addresses.
#[inline(always)]
unsafe fn phase_outputs_mma<const R: usize>(cx: &Ctx, len: u32, d_h: f32) {
    // SAFETY: forwarded. Four tiles per group where they divide P; two at R = 8 (registers).
    unsafe {
        if R < 8 && cx.p.is_multiple_of(32) {
            phase_outputs_mma_groups::<R, 4>(cx, len, d_h)
        } else {
            phase_outputs_mma_groups::<R, 2>(cx, len, d_h)
        }
    }
}

/// [`phase_outputs_mma`] with groups of `TN` (even) 8-wide p tiles (`8·TN` divides P).
#[inline(always)]
unsafe fn phase_outputs_mma_groups<const R: usize, const TN: usize>(cx: &Ctx, len: u32, d_h: f32) {
    let lay = &cx.lay;
    let ns = lay.n_stride;
    let ws = lay.w_stride;
    let p4 = lay.p4;
    let (warp, lane) = (cx.tid / 32, cx.tid % 32);
    let live = (len * R as u32).div_ceil(16);
    let width = 8 * TN as u32;
    let pg = cx.p / width;
    // This lane's (k, n) of the B operand: x rows k and k + 4, column n of each 8-wide tile.
    let (xk, xn) = b_k8n8_tf32(lane, 0);
    // SAFETY (whole body): rows < 16·live, p < P and n < N lie inside the staged regions; the
    // weighted scores of blocks kb ≤ mb were written by phase C; all lanes take the same items.
    unsafe {
        let mut item = warp;
        while item < live * pg {
            let mb = item / pg;
            let nb = item - mb * pg;
            let mut acc = [[0.0f32; 4]; TN];
            let a_row = a_rows_tf32(cx.sm(lay.q, 16 * mb * ns), ns, lane);
            let b_row = b_rows_tf32(cx.sm(lay.state, width * nb * ns), ns, lane);
            let mut kk = 0;
            while kk < cx.n {
                let a = ldmatrix_x4(a_row + 4 * kk);
                for pair in 0..TN / 2 {
                    let s = ldmatrix_x4(b_row + 4 * (16 * pair as u32 * ns + kk)).map(tf32_bits);
                    mma_m16n8k8_tf32_f32(&mut acc[2 * pair], a, [s[0], s[1]]);
                    mma_m16n8k8_tf32_f32(&mut acc[2 * pair + 1], a, [s[2], s[3]]);
                }
                kk += 8;
            }
            // Rows r and r + 8 of the block (accumulator slots 0, 1 and 2, 3).
            let (r0, _) = acc_m16n8(lane, 0);
            let decay = [
                ld_shared_f32(cx.sm(lay.exp_a, (16 * mb + r0) / R as u32)),
                ld_shared_f32(cx.sm(lay.exp_a, (16 * mb + r0 + 8) / R as u32)),
            ];
            for acc_t in acc.iter_mut() {
                for (slot, v) in acc_t.iter_mut().enumerate() {
                    *v *= decay[slot / 2];
                }
            }
            let w_row = a_rows_tf32(cx.sm(lay.w, 16 * mb * ws), ws, lane);
            let x_lane = cx.sm(lay.x, xk * p4 + width * nb + xn);
            let mut kb = 0;
            while kb <= mb {
                for half in 0..2u32 {
                    let a = ldmatrix_x4(w_row + 4 * (16 * kb + 8 * half));
                    let x0 = x_lane + 4 * (16 * kb + 8 * half) * p4;
                    for (t, acc_t) in acc.iter_mut().enumerate() {
                        let xt = x0 + 32 * t as u32;
                        let b = [
                            tf32_bits(ld_shared_u32(xt)),
                            tf32_bits(ld_shared_u32(xt + 16 * p4)),
                        ];
                        mma_m16n8k8_tf32_f32(acc_t, a, b);
                    }
                }
                kb += 1;
            }
            for (t, acc_t) in acc.iter().enumerate() {
                for (slot, v) in acc_t.iter().enumerate() {
                    let (r, c) = acc_m16n8(lane, slot as u32);
                    let at = (16 * mb + r) * p4 + width * nb + 8 * t as u32 + c;
                    let x = ld_shared_f32(cx.sm(lay.x, at));
                    st_shared_f32(cx.sm(lay.y, at), fma_rn(d_h, x, *v));
                }
            }
            item += T / 32;
        }
    }
}

/// Phase F's state pass on tensor cores: `S ← exp(A_last)·S + Σ_ρ (exp(Ā_i)·c_i·x_ρ) k̂_ρᵀ`, one
/// warp per (16-row p block, group of `8·TN` n columns), over the chunk's live 16-row blocks. Both
/// operands are stored with the summed index ρ outermost, which `ldmatrix` (b16 transposes only)
/// cannot turn, so they are read element by element: the x operand once per 8-deep step for all
/// `TN` tiles, scaled by the key scale and rounded in registers; k̂ is stored TF32-rounded, so its
/// elements go to `mma` as loaded.
#[inline(always)]
unsafe fn phase_state_mma<const R: usize>(cx: &Ctx, len: u32) {
    // SAFETY: forwarded. Four tiles per group where they divide N; two at R = 8, whose other
    // phases leave no registers for four (sm_90 spills).
    unsafe {
        if R < 8 && cx.n.is_multiple_of(32) {
            phase_state_mma_groups::<R, 4>(cx, len)
        } else {
            phase_state_mma_groups::<R, 2>(cx, len)
        }
    }
}

/// [`phase_state_mma`] with groups of `TN` 8-wide n tiles (`8·TN` divides N).
#[inline(always)]
unsafe fn phase_state_mma_groups<const R: usize, const TN: usize>(cx: &Ctx, len: u32) {
    let lay = &cx.lay;
    let ns = lay.n_stride;
    let p4 = lay.p4;
    let (warp, lane) = (cx.tid / 32, cx.tid % 32);
    let live = (len * R as u32).div_ceil(16);
    let width = 8 * TN as u32;
    let (pb, ng) = (cx.p / 16, cx.n / width);
    // This lane's A element (row m = p, column k = ρ) and B element (row k = ρ, column n).
    let (am, ak) = a_m16k8_tf32(lane, 0);
    let (bk, bn) = b_k8n8_tf32(lane, 0);
    // SAFETY (whole body): p < P, n < N and rows < 16·live lie inside the staged regions; all
    // lanes take the same items.
    unsafe {
        let decay = ld_shared_f32(cx.sm(lay.exp_a, len - 1));
        let mut item = warp;
        while item < pb * ng {
            let mb = item / ng;
            let nb = item - mb * ng;
            let s_blk = cx.sm(lay.state, 16 * mb * ns + width * nb);
            let mut acc = [[0.0f32; 4]; TN];
            for (t, acc_t) in acc.iter_mut().enumerate() {
                for (slot, v) in acc_t.iter_mut().enumerate() {
                    let (r, c) = acc_m16n8(lane, slot as u32);
                    *v = decay * ld_shared_f32(s_blk + 4 * (r * ns + 8 * t as u32 + c));
                }
            }
            let x_lane = cx.sm(lay.x, ak * p4 + 16 * mb + am);
            let k_lane = cx.sm(lay.k, bk * ns + width * nb + bn);
            let mut rho0 = 0;
            while rho0 < 16 * live {
                let ks0 = ld_shared_f32(cx.sm(lay.k_scale, (rho0 + ak) / R as u32));
                let ks1 = ld_shared_f32(cx.sm(lay.k_scale, (rho0 + ak + 4) / R as u32));
                let xa = x_lane + 4 * rho0 * p4;
                let a = [
                    tf32_bits((ks0 * ld_shared_f32(xa)).to_bits()),
                    tf32_bits((ks0 * ld_shared_f32(xa + 32)).to_bits()),
                    tf32_bits((ks1 * ld_shared_f32(xa + 16 * p4)).to_bits()),
                    tf32_bits((ks1 * ld_shared_f32(xa + 16 * p4 + 32)).to_bits()),
                ];
                let kb = k_lane + 4 * rho0 * ns;
                for (t, acc_t) in acc.iter_mut().enumerate() {
                    let kt = kb + 32 * t as u32;
                    let b = [ld_shared_u32(kt), ld_shared_u32(kt + 16 * ns)];
                    mma_m16n8k8_tf32_f32(acc_t, a, b);
                }
                rho0 += 8;
            }
            for (t, acc_t) in acc.iter().enumerate() {
                for (slot, v) in acc_t.iter().enumerate() {
                    let (r, c) = acc_m16n8(lane, slot as u32);
                    st_shared_f32(s_blk + 4 * (r * ns + 8 * t as u32 + c), *v);
                }
            }
            item += T / 32;
        }
    }
}

/// Writes the requested final states after the last chunk.
#[inline(always)]
unsafe fn write_final_states<X: Elem, const R: usize>(
    prm: &ForwardParams,
    cx: &Ctx,
    last_len: u32,
) {
    let lay = &cx.lay;
    let (n, p) = (cx.n as usize, cx.p as usize);
    let bh = cx.b * cx.heads + cx.h;
    // SAFETY (whole body): indices stay inside the launch contract's shapes and the layout.
    unsafe {
        if prm.final_theta != 0 {
            let mut j = cx.tid;
            while j < cx.na {
                let th = stored_f32(ld_shared_f64(cx.sm(lay.theta, 2 * j)));
                stg(prm.final_theta, bh * cx.na as usize + j as usize, th);
                j += T;
            }
        }
        if prm.final_ssm != 0 {
            let mut e = cx.tid;
            while e < cx.p * cx.n {
                let pp = e / cx.n;
                let nn = e - pp * cx.n;
                let v = ld_shared_f32(cx.sm(lay.state, pp * lay.n_stride + nn));
                stg(prm.final_ssm, (bh * p + pp as usize) * n + nn as usize, v);
                e += T;
            }
        }
        if prm.final_k != 0 {
            let mut e = cx.tid;
            while e < R as u32 * cx.n {
                let r = e / cx.n;
                let nn = e - r * cx.n;
                let rho = (last_len - 1) * R as u32 + r;
                let v = ld_shared_f32(cx.sm(lay.k, rho * lay.n_stride + nn));
                X::store(
                    prm.final_k,
                    ((cx.b * R + r as usize) * cx.heads + cx.h) * n + nn as usize,
                    v,
                );
                e += T;
            }
        }
        if prm.final_v != 0 {
            let last = cx.b * cx.s_len + cx.s_len - 1;
            let mut pp = cx.tid as usize;
            while pp < p {
                let v = X::load(prm.v, (last * cx.heads + cx.h) * p + pp);
                X::store(prm.final_v, bh * p + pp, v);
                pp += T as usize;
            }
        }
    }
}

/// The chunked forward body for activation type `X` and rank `R` (the forward pass proper; see
/// [`chunked_forward_pass`]).
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn chunked_forward<X: Elem, const R: usize, G: Geometry>(prm: &ForwardParams) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_pass::<X, R, false, G>(prm) }
}

/// `x` as the unevaluated sum `hi + lo` of two f32 (exact to ~2^-48 relative): how angle totals
/// travel through global memory. Numeric f32 values rather than the two halves of the f64's bit
/// pattern: on the H200 the bit-pattern hand-off lost the low word's precision (2026-11-29,
/// θ errors of 2^-18 rad that the CPU emulation of the same source did not show).
#[inline(always)]
pub fn split_f64(x: f64) -> (f32, f32) {
    let hi = x as f32;
    (hi, (x - hi as f64) as f32)
}

/// Loads this block's start state and angle carry from hand-off slot `slot` (see
/// [`ForwardParams::seg_state`]); padding columns and rows of the state stay zero.
#[inline(always)]
unsafe fn load_segment_start(prm: &ForwardParams, cx: &Ctx, slot: usize) {
    let (n, p) = (cx.n as usize, cx.p as usize);
    let slots = prm.segments as usize - 1;
    let row = (cx.b * cx.heads + cx.h) * slots + slot;
    // SAFETY (whole body): slot < K−1, and every index below lies inside the (B,H,K−1,…)
    // hand-off buffers of the launch contract.
    unsafe {
        fill_state(cx, |pp, nn| ldg(prm.seg_state, (row * p + pp) * n + nn));
        fill_theta(cx, |j| {
            let at = 2 * (row * cx.na as usize + j);
            ldg(prm.seg_theta, at) as f64 + ldg(prm.seg_theta, at + 1) as f64
        });
    }
}

/// Writes `value(p, n)` over this block's state region (padding rows and columns zero).
#[inline(always)]
unsafe fn fill_state(cx: &Ctx, mut value: impl FnMut(usize, usize) -> f32) {
    let lay = &cx.lay;
    let mut e = cx.tid;
    while e < lay.p4 * lay.n_stride {
        let pp = e / lay.n_stride;
        let nn = e - pp * lay.n_stride;
        let v = if pp < cx.p && nn < cx.n {
            value(pp as usize, nn as usize)
        } else {
            0.0
        };
        // SAFETY: inside the state region of the layout.
        unsafe { st_shared_f32(cx.sm(lay.state, e), v) };
        e += T;
    }
}

/// Writes `value(j)` as angle carry `j < Na` (f64).
#[inline(always)]
unsafe fn fill_theta(cx: &Ctx, mut value: impl FnMut(usize) -> f64) {
    let mut j = cx.tid;
    while j < cx.na {
        let theta = value(j as usize);
        // SAFETY: inside the θ region of the layout.
        unsafe { st_shared_f64(cx.sm(cx.lay.theta, 2 * j), theta) };
        j += T;
    }
}

/// Starts the block from the caller's initial state ([`ForwardParams::init_theta`] and the three
/// pointers after it): `h₀ + ε₀·Σ_r (v₀·mimo_v_r) k̂₀_rᵀ` into the state region, where
/// `ε₀ = Δ₀(1 − σ(trap₀))` is the trapezoidal weight of the token before the first (the chunked
/// keys carry it one token ahead, and no key of this call precedes token 0), and θ₀ into the
/// angle carries; padding columns and rows of the state stay zero.
#[inline(always)]
unsafe fn load_initial_state<X: Elem, const R: usize>(prm: &ForwardParams, cx: &Ctx) {
    let (n, p) = (cx.n as usize, cx.p as usize);
    let bh = cx.b * cx.heads + cx.h;
    // SAFETY (whole body): indices inside the initial-state tensors and the (B,H,S) token
    // scalars of the launch contract.
    unsafe {
        let eps = ldg(prm.dt, bh * cx.s_len) * sigmoid_rcp(-X::load(prm.trap, bh * cx.s_len));
        fill_state(cx, |pp, nn| {
            let v0 = eps * X::load(prm.init_v, bh * p + pp);
            let mut v = ldg(prm.init_ssm, (bh * p + pp) * n + nn);
            for r in 0..R {
                let w = v0 * ldg(prm.mimo_v, (cx.h * R + r) * p + pp);
                let k0 = X::load(prm.init_k, ((cx.b * R + r) * cx.heads + cx.h) * n + nn);
                v = fma_rn(w, k0, v);
            }
            v
        });
        fill_theta(cx, |j| ldg(prm.init_theta, bh * cx.na as usize + j) as f64);
    }
}

/// Writes this block's segment end state, angle total and decay into hand-off slot `slot` (the
/// segment-state pass).
#[inline(always)]
unsafe fn store_segment_end(prm: &ForwardParams, cx: &Ctx, slot: usize, decay: f32) {
    let lay = &cx.lay;
    let (n, p) = (cx.n as usize, cx.p as usize);
    let slots = prm.segments as usize - 1;
    let row = (cx.b * cx.heads + cx.h) * slots + slot;
    // SAFETY (whole body): as in `load_segment_start`.
    unsafe {
        let mut e = cx.tid;
        while e < cx.p * cx.n {
            let pp = e / cx.n;
            let nn = e - pp * cx.n;
            let v = ld_shared_f32(cx.sm(lay.state, pp * lay.n_stride + nn));
            stg(prm.seg_state, (row * p + pp as usize) * n + nn as usize, v);
            e += T;
        }
        let mut j = cx.tid;
        while j < cx.na {
            let at = 2 * (row * cx.na as usize + j as usize);
            let (hi, lo) = split_f64(ld_shared_f64(cx.sm(lay.theta, 2 * j)));
            stg(prm.seg_theta, at, hi);
            stg(prm.seg_theta, at + 1, lo);
            j += T;
        }
        if cx.tid == 0 {
            stg(prm.seg_decay, row, decay);
        }
    }
}

/// The chunked forward over this block's segment of the sequence (all of it when
/// `prm.segments ≤ 1`).
///
/// `STATES_ONLY = false` is the forward proper: it starts from the true state of its segment
/// (zero, or hand-off slot s−1 after the combine pass) and writes the outputs, and the last
/// segment the final states. `STATES_ONLY = true` is the segment-state pass: from a zero state and
/// zero angles it runs only what the state needs (phases A, A2, k̂ of B, the state pass) and
/// writes the segment's end state, angle total and decay into slot s; the last segment's block
/// has nothing to do.
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn chunked_forward_pass<
    X: Elem,
    const R: usize,
    const STATES_ONLY: bool,
    G: Geometry,
>(
    prm: &ForwardParams,
) {
    let (heads, groups) = (prm.heads as usize, prm.groups as usize);
    let h = block_x() as usize;
    let segments = prm.segments.max(1) as usize;
    let y = block_y() as usize;
    let b = y / segments;
    let seg = y - b * segments;
    if STATES_ONLY && seg + 1 >= segments {
        return;
    }
    let s_len = prm.seq_len as usize;
    let (n, p, na) = G::dims(prm.n, prm.p, prm.na);
    let chunk32 = G::chunk(prm.chunk);
    let chunk = chunk32 as usize;
    // Token range of the segment, in u32 (S < 2^32): the loop bounds stay in single registers.
    let (t_begin, t_end) = if segments > 1 {
        let span = prm.seg_chunks * chunk32;
        (
            (seg as u32 * span).min(prm.seq_len),
            ((seg as u32 + 1) * span).min(prm.seq_len),
        )
    } else {
        (0, prm.seq_len)
    };
    let lay = ForwardSmem::new(R as u32, n, p, na, chunk32);
    let base = smem_base();
    let cx = Ctx {
        base,
        lay,
        stage: ForwardStage::new(R as u32, n, p, chunk32, X::BYTES),
        raw: base + lay.bytes(),
        staged: prm.staged != 0,
        tid: thread_x(),
        b,
        h,
        g: h / (heads / groups),
        s_len,
        heads,
        groups,
        n,
        p,
        na,
        row: (b * heads + h) * s_len,
    };
    // SAFETY (whole body): the launch contract; every phase is separated by block barriers.
    unsafe {
        let d_h = if prm.d != 0 { ldg(prm.d, h) } else { 0.0 };
        let lane_prm = lane_params::<R>(prm, &cx);
        let column = column_params::<R>(prm, &cx);
        if cx.staged && t_begin < t_end {
            stage_raw::<X, R>(prm, &cx, t_begin as usize, (t_end - t_begin).min(chunk32));
        }
        if !STATES_ONLY && seg > 0 {
            load_segment_start(prm, &cx, seg - 1);
        } else if seg == 0 && prm.init_ssm != 0 {
            // Both passes: the segment-state pass's slot 0 then holds the true end state of
            // segment 0 and its absolute angle, which the combine pass takes as they are.
            load_initial_state::<X, R>(prm, &cx);
        } else {
            // Zero state and angle carries.
            let mut e = cx.tid;
            while e < lay.p4 * lay.n_stride {
                st_shared_f32(cx.sm(lay.state, e), 0.0);
                e += T;
            }
            let mut j = cx.tid;
            while j < 2 * cx.na {
                st_shared_f32(cx.sm(lay.theta, j), 0.0);
                j += T;
            }
        }
        wait_group::<0>();
        sync_threads();

        // Product of the chunk decays (the segment-state pass; thread 0's copy is the one kept).
        let mut decay = 1.0f32;
        let mut c0u = t_begin;
        while c0u < t_end {
            let len = (t_end - c0u).min(chunk32);
            let c0 = c0u as usize;
            phase_scalars_angles_x::<X, R>(prm, &cx, c0, len, &lane_prm);
            sync_threads();
            phase_token_scalars(&cx, len);
            let par_angles = parallel_angles(&cx, len);
            let theta = if par_angles {
                phase_angle_prefix_sums(&cx, len)
            } else {
                [0.0; ANGLE_ITEMS]
            };
            sync_threads();
            if par_angles {
                phase_angle_prefix_store(&cx, len, theta);
            } else {
                phase_angle_prefix(&cx, len);
            }
            sync_threads();
            let mma = use_mma::<X>(&cx);
            if STATES_ONLY {
                phase_stage_qk::<X, R, false>(prm, &cx, c0, len, mma, &lane_prm);
            } else {
                phase_stage_qk::<X, R, true>(prm, &cx, c0, len, mma, &lane_prm);
            }
            sync_threads();
            // The staging region is free from here to the end of the chunk: fetch the next one.
            let next = c0u + chunk32;
            if cx.staged && next < t_end {
                stage_raw::<X, R>(prm, &cx, next as usize, (t_end - next).min(chunk32));
            }
            if !STATES_ONLY {
                if mma {
                    phase_scores_mma::<R>(&cx, len);
                } else {
                    phase_scores::<R>(&cx, len);
                }
                sync_threads();
                if mma {
                    phase_outputs_mma::<R>(&cx, len, d_h);
                } else {
                    phase_outputs_raw::<R>(&cx, len, d_h);
                }
                sync_threads();
                if prm.mode == output_mode::FUSED_NORM {
                    phase_rstd::<R>(&cx, len, prm.norm_eps);
                    sync_threads();
                }
                phase_store_outputs::<X, R>(prm, &cx, c0, len, &column);
            } else if cx.tid == 0 {
                decay *= ld_shared_f32(cx.sm(lay.exp_a, len - 1));
            }
            if mma {
                phase_state_mma::<R>(&cx, len);
            } else {
                phase_state::<R>(&cx, len);
            }
            wait_group::<0>();
            sync_threads();
            c0u += chunk32;
        }
        // Only the last segment ends at S (segments are never empty); the segment index is read
        // again rather than kept live through the chunk loop.
        if STATES_ONLY {
            store_segment_end(prm, &cx, block_y() as usize % segments, decay);
        } else if t_end == prm.seq_len {
            let last_len = (s_len - (s_len - 1) / chunk * chunk) as u32;
            write_final_states::<X, R>(prm, &cx, last_len);
        }
    }
}

// Every global access above goes through `Elem`, and the entry points exist only on the device, so
// that the host test `tests/forward_emulated.rs` can compile this file against emulated
// primitives (threads, barriers, checked shared and global memory).
macro_rules! forward_entry {
    ($name:ident, $x:ty, $r:literal) => {
        forward_entry!($name, $x, $r, AnyGeometry);
    };
    ($name:ident, $x:ty, $r:literal, $g:ty) => {
        /// Chunked forward entry point (see the module's launch contract).
        ///
        /// # Safety
        /// The module's launch contract.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(params: ForwardParams) {
            // SAFETY: forwarded launch contract.
            unsafe { chunked_forward::<$x, $r, $g>(&params) }
        }
    };
}

forward_entry!(forward_fma_f32_r1, f32, 1);
forward_entry!(forward_fma_f32_r2, f32, 2);
forward_entry!(forward_fma_f32_r4, f32, 4);
forward_entry!(forward_fma_f32_r8, f32, 8);
forward_entry!(forward_fma_bf16_r1, Bf16, 1);
forward_entry!(forward_fma_bf16_r2, Bf16, 2);
forward_entry!(forward_fma_bf16_r4, Bf16, 4);
forward_entry!(forward_fma_bf16_r8, Bf16, 8);
forward_entry!(
    forward_fixed_f32_r4_n128_p64_na32_c16,
    f32,
    4,
    FixedGeometry<128, 64, 32, 16>
);
forward_entry!(
    forward_fixed_bf16_r4_n128_p64_na32_c16,
    Bf16,
    4,
    FixedGeometry<128, 64, 32, 16>
);
