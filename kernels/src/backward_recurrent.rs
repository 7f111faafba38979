//! Mamba-3 MIMO backward, first version (spec §5): reverse mode through the step recurrence of
//! spec §2.1, token by token, with the state recomputed from checkpoints.
//!
//! Two kernels:
//!
//! * [`backward_head`], one block per (head, batch row), grid `(H, B)`:
//!   1. **forward sweep**: the cumulative angles (f64 running sums, as the forward kernel forms
//!      them; their cosines and sines go to the `cs` workspace) and the state `H_t` (P×N, f32 in
//!      shared memory), token by token; the state entering every segment of L tokens goes to the
//!      `ckpt` workspace;
//!   2. **reverse sweep**, segment by segment from the last: the segment's states are recomputed
//!      from its checkpoint into the `seg` workspace, then its tokens are walked backwards carrying
//!      the adjoint `G = ∂L/∂H_t` in shared memory. Per token: the raw outputs `y = H_t q̂ + D x`,
//!      the output-stage backward (gate, fused norm, contraction) giving `δ = ∂L/∂y` and the
//!      z / mimo_z / mimo_o / norm-weight gradients, `∂q̂ = H_tᵀδ`, `G += δ q̂ᵀ`, the γ-term of
//!      token t and the β-term of token t−1 (`∂k̂`, `∂x`, and the coefficient gradients), the
//!      chain rule to Δ, a and the trap logit, `G ← α_t G`, the inverse rotation with `∂θ`, the
//!      reverse running sum of `∂θ` into the angle-logit and Δ gradients (reset at each segment's
//!      first token to its value formed from the boundary, [`boundary_dtheta`]), and `∂v`.
//!
//!   Token gradients of this (b, h) are written directly (each element has one owner); q/k
//!   gradients go per value head to the `dqh`/`dkh` workspace and parameter gradients to this
//!   block's slot of the `slots` workspace, each element accumulated by one thread in token order.
//! * [`backward_reduce`]: sums `dqh`/`dkh` over the H/G heads of each group (head order) and the
//!   parameter slots over the batch (row order), converting to the output types.
//!
//! No atomics: every sum has a fixed order, so repeated runs are bitwise identical. This first
//! version reduces dq/dk over the heads of a group in a second kernel through a per-head
//! workspace rather than on chip, and walks tokens serially (no tensor cores); see
//! `notes/backward.md` for the measured cost and the planned chunked version.
//!
//! # Launch contract
//! [`backward_head`]: grid `(H, B)`, block [`BACKWARD_THREADS`], dynamic shared memory
//! `BackwardSmem::new(R, N, P, Na).bytes()`. [`backward_reduce`]: grid `(reduce_blocks, 1)`,
//! block [`BACKWARD_THREADS`], no shared memory, after [`backward_head`] on the same stream;
//! with `qkh_bf16`, N a multiple of 8 and `dqh` / `dkh` 16-byte aligned.
//! Every pointer of [`BackwardParams`] valid for its documented shape (the host validates).

use mamba3_abi::{
    output_mode, rotation, split_launch, BackwardParams, BackwardSlots, BackwardSmem,
    BACKWARD_THREADS,
};

use crate::angles::{angle_increment, reduced_f32, rotate_pair};
use crate::arch::float::fma_rn;
use crate::arch::sreg::{
    block_x, block_y, ld_shared_f32, smem_base, st_shared_f32, sync_threads, thread_x,
};
use crate::elem::Bf16;
use crate::elem::{ldg, stg, Elem};
use crate::math::{exp, rsqrt, sigmoid, sincos, tanh};
use crate::smem::{ld_shared_f64, st_shared_f64};
use crate::warp_reduce;

const T: u32 = BACKWARD_THREADS;
const WARPS: u32 = T / 32;
const PI: f32 = core::f32::consts::PI;

/// `Σ_i a_i·b_i` over `len` shared f32 elements at byte addresses `a + i·sa` and `b + i·sb`:
/// four partial sums (element i feeds sum i mod 4, a tail past the last whole group of four feeds
/// sum 0), combined as `(s0 + s1) + (s2 + s3)`. Four independent load pairs per step keep the
/// loads in flight; the order is fixed, so the result is deterministic.
#[inline(always)]
unsafe fn dot_sm(a: u32, sa: u32, b: u32, sb: u32, len: u32) -> f32 {
    let mut s = [0.0f32; 4];
    let mut i = 0;
    // SAFETY (whole body): the caller guarantees `len` elements at both strides.
    unsafe {
        while i + 4 <= len {
            for (k, acc) in s.iter_mut().enumerate() {
                let ik = i + k as u32;
                *acc = fma_rn(ld_shared_f32(a + ik * sa), ld_shared_f32(b + ik * sb), *acc);
            }
            i += 4;
        }
        while i < len {
            s[0] = fma_rn(ld_shared_f32(a + i * sa), ld_shared_f32(b + i * sb), s[0]);
            i += 1;
        }
    }
    (s[0] + s[1]) + (s[2] + s[3])
}

/// Per-block constants.
#[derive(Clone, Copy)]
struct Ctx {
    base: u32,
    lay: BackwardSmem,
    tid: u32,
    b: usize,
    h: usize,
    g: usize,
    s_len: usize,
    heads: usize,
    groups: usize,
    r: u32,
    n: u32,
    p: u32,
    na: u32,
    /// b·H + h.
    bh: usize,
    /// Start of this (b, h) row in the (B,H,S) tensors.
    row: usize,
    /// Number of segments of the launch's segment length L.
    nseg: usize,
    /// States per (b, h) in the `seg` workspace: min(L, S).
    seg_slots: usize,
    half_split: bool,
    d_h: f32,
}

impl Ctx {
    /// Shared byte address of f32 element `i` of `region`.
    #[inline(always)]
    fn sm(&self, region: u32, i: u32) -> u32 {
        self.base + 4 * (region + i)
    }

    /// The coordinates `(a, b)` of rotation pair `j` (spec §3).
    #[inline(always)]
    fn pair(&self, j: u32) -> (u32, u32) {
        if self.half_split {
            (j, j + self.n / 2)
        } else {
            (2 * j, 2 * j + 1)
        }
    }

    /// Global index of element (t, r, n) of the (B,S,R,H,N) per-head q/k gradients.
    #[inline(always)]
    fn qkh_index(&self, t: usize, r: u32, nn: u32) -> usize {
        (((self.b * self.s_len + t) * self.r as usize + r as usize) * self.heads + self.h)
            * self.n as usize
            + nn as usize
    }

    /// Global index of element (t, p) of a (B,S,H,P) tensor.
    #[inline(always)]
    fn vz_index(&self, t: usize, pp: u32) -> usize {
        ((self.b * self.s_len + t) * self.heads + self.h) * self.p as usize + pp as usize
    }

    /// Global index of `cos θ_{t,j}` in the `cs` workspace (`sin` follows Na elements later).
    #[inline(always)]
    fn cs_index(&self, t: usize, j: u32) -> usize {
        (self.bh * self.s_len + t) * 2 * self.na as usize + j as usize
    }

    /// Start of the recomputed state of token `t` of the segment starting at `t0`.
    #[inline(always)]
    fn seg_state(&self, t: usize, t0: usize) -> usize {
        (self.bh * self.seg_slots + (t - t0)) * (self.p * self.n) as usize
    }

    /// Start of the state entering segment `c` (c ≥ 1).
    #[inline(always)]
    fn ckpt_state(&self, c: usize) -> usize {
        (self.bh * self.nseg + c) * (self.p * self.n) as usize
    }
}

/// The step coefficients of token t (spec §2.1).
#[derive(Clone, Copy)]
struct Coefs {
    alpha: f32,
    beta: f32,
    gamma: f32,
    lam: f32,
    dt: f32,
}

#[inline(always)]
unsafe fn coefs<X: Elem>(prm: &BackwardParams, cx: &Ctx, t: usize) -> Coefs {
    // SAFETY (whole body): t < S, inside the (B,H,S) tensors.
    unsafe {
        let dt = ldg(prm.dt, cx.row + t);
        let alpha = exp(ldg(prm.adt, cx.row + t));
        let lam = sigmoid(X::load(prm.trap, cx.row + t));
        Coefs {
            alpha,
            beta: (1.0 - lam) * dt * alpha,
            gamma: lam * dt,
            lam,
            dt,
        }
    }
}

/// q̂, k̂ (bias added, then rotated by θ_t from the `cs` workspace) and x = v ⊙ mimo_v of token
/// `t` into token slot `slot`.
#[inline(always)]
unsafe fn load_token<X: Elem>(prm: &BackwardParams, cx: &Ctx, t: usize, slot: u32) {
    let lay = &cx.lay;
    let (rn, rp) = (cx.r * cx.n, cx.r * cx.p);
    let half = cx.n / 2;
    // SAFETY (whole body): r < R, pairs < N/2, p < P and t < S stay inside the launch
    // contract's shapes and the layout.
    unsafe {
        let mut e = cx.tid;
        while e < cx.r * half {
            let r = e / half;
            let j = e - r * half;
            let (ia, ib) = cx.pair(j);
            let src = (((cx.b * cx.s_len + t) * cx.r as usize + r as usize) * cx.groups + cx.g)
                * cx.n as usize;
            let bias = (cx.h * cx.r as usize + r as usize) * cx.n as usize;
            let mut qa = X::load(prm.q, src + ia as usize) + ldg(prm.q_bias, bias + ia as usize);
            let mut qb = X::load(prm.q, src + ib as usize) + ldg(prm.q_bias, bias + ib as usize);
            let mut ka = X::load(prm.k, src + ia as usize) + ldg(prm.k_bias, bias + ia as usize);
            let mut kb = X::load(prm.k, src + ib as usize) + ldg(prm.k_bias, bias + ib as usize);
            if j < cx.na {
                let ci = cx.cs_index(t, j);
                let c = ldg(prm.cs, ci);
                let s = ldg(prm.cs, ci + cx.na as usize);
                (qa, qb) = rotate_pair(qa, qb, c, s);
                (ka, kb) = rotate_pair(ka, kb, c, s);
            }
            let o = slot * rn + r * cx.n;
            st_shared_f32(cx.sm(lay.q, o + ia), qa);
            st_shared_f32(cx.sm(lay.q, o + ib), qb);
            st_shared_f32(cx.sm(lay.k, o + ia), ka);
            st_shared_f32(cx.sm(lay.k, o + ib), kb);
            e += T;
        }
        let mut e = cx.tid;
        while e < rp {
            let r = e / cx.p;
            let pp = e - r * cx.p;
            let mv = ldg(
                prm.mimo_v,
                (cx.h * cx.r as usize) * cx.p as usize + e as usize,
            );
            let v = X::load(prm.v, cx.vz_index(t, pp));
            st_shared_f32(cx.sm(lay.x, slot * rp + e), v * mv);
            e += T;
        }
    }
}

/// One step of the recurrence into the state in shared memory:
/// `H ← α_t H + β_t Σ_r x_{t−1,r} k̂_{t−1,r}ᵀ + γ_t Σ_r x_{t,r} k̂_{t,r}ᵀ` (no β-term at t = 0),
/// with the new state also stored at `dst` (element offset in `dst_base`) when `dst_base ≠ 0`.
#[inline(always)]
unsafe fn advance_state<X: Elem>(
    prm: &BackwardParams,
    cx: &Ctx,
    t: usize,
    dst_base: u64,
    dst: usize,
) {
    let lay = &cx.lay;
    let (rn, rp) = (cx.r * cx.n, cx.r * cx.p);
    let cur = (t % 2) as u32;
    let prv = 1 - cur;
    // SAFETY (whole body): elements < P·N of the state and the token slots; `dst` covers P·N.
    unsafe {
        let co = coefs::<X>(prm, cx, t);
        let pn = cx.p * cx.n;
        let mut e = cx.tid;
        while e < pn {
            let pp = e / cx.n;
            let nn = e - pp * cx.n;
            let addr = cx.sm(lay.state, pp * lay.n_stride + nn);
            let mut acc = co.alpha * ld_shared_f32(addr);
            let mut r = 0;
            while r < cx.r {
                let xc = ld_shared_f32(cx.sm(lay.x, cur * rp + r * cx.p + pp));
                let kc = ld_shared_f32(cx.sm(lay.k, cur * rn + r * cx.n + nn));
                acc += co.gamma * xc * kc;
                if t > 0 {
                    let xp = ld_shared_f32(cx.sm(lay.x, prv * rp + r * cx.p + pp));
                    let kp = ld_shared_f32(cx.sm(lay.k, prv * rn + r * cx.n + nn));
                    acc += co.beta * xp * kp;
                }
                r += 1;
            }
            st_shared_f32(addr, acc);
            if dst_base != 0 {
                stg(dst_base, dst + e as usize, acc);
            }
            e += T;
        }
    }
}

/// The gate `silu(z ⊙ mimo_z)` of (t, r, p), its derivative, z and mimo_z (1, 0, 0, 0 without z).
#[inline(always)]
unsafe fn gate<X: Elem>(prm: &BackwardParams, cx: &Ctx, t: usize, r: u32, pp: u32) -> [f32; 4] {
    if prm.z == 0 {
        return [1.0, 0.0, 0.0, 0.0];
    }
    // SAFETY: (t, p) and (h, r, p) inside z and mimo_z.
    unsafe {
        let zv = X::load(prm.z, cx.vz_index(t, pp));
        let mz = ldg(
            prm.mimo_z,
            (cx.h * cx.r as usize + r as usize) * cx.p as usize + pp as usize,
        );
        let u = zv * mz;
        let s = sigmoid(u);
        [u * s, s * (1.0 + u * (1.0 - s)), zv, mz]
    }
}

/// ∂L/∂out of (t, r, p) (see [`BackwardParams::dout_index`]).
#[inline(always)]
unsafe fn dout<X: Elem>(prm: &BackwardParams, cx: &Ctx, t: usize, r: u32, pp: u32) -> f32 {
    // SAFETY: indices inside dout's layout.
    unsafe { X::load(prm.dout, prm.dout_index(cx.b, t, r, cx.h, pp)) }
}

/// Reverse step, phases a–b: `y = H_t q̂ + D x` (H_t in the state region), then the output-stage
/// backward: δ, ∂z, and the mimo_o / mimo_z / norm-weight / D accumulators (spec §4.1, §5.1).
#[inline(always)]
unsafe fn output_backward<X: Elem>(prm: &BackwardParams, cx: &Ctx, t: usize) {
    let lay = &cx.lay;
    let (rn, rp) = (cx.r * cx.n, cx.r * cx.p);
    let cur = (t % 2) as u32;
    let fused = prm.mode == output_mode::FUSED_NORM;
    let gated = prm.mode == output_mode::GATED;
    // SAFETY (whole body): indices inside the launch contract's shapes and the layout; phases
    // separated by barriers.
    unsafe {
        let mut e = cx.tid;
        while e < rp {
            let r = e / cx.p;
            let pp = e - r * cx.p;
            let mut acc = dot_sm(
                cx.sm(lay.state, pp * lay.n_stride),
                4,
                cx.sm(lay.q, cur * rn + r * cx.n),
                4,
                cx.n,
            );
            acc += cx.d_h * ld_shared_f32(cx.sm(lay.x, cur * rp + e));
            st_shared_f32(cx.sm(lay.y, e), acc);
            e += T;
        }
        sync_threads();

        let w_at = |pp: u32| -> f32 {
            if prm.norm_weight != 0 {
                ldg(prm.norm_weight, cx.h * cx.p as usize + pp as usize)
            } else {
                1.0
            }
        };
        let mo_at = |r: u32, pp: u32| -> f32 {
            if prm.mimo_o != 0 {
                ldg(
                    prm.mimo_o,
                    (cx.h * cx.r as usize + r as usize) * cx.p as usize + pp as usize,
                )
            } else {
                1.0
            }
        };
        if fused {
            // Per rank (one warp each): rstd = 1/sqrt(mean_p y² + eps) and mean_p(dŷ ⊙ ŷ).
            let (warp, lane) = (cx.tid / 32, cx.tid % 32);
            let mut r = warp;
            while r < cx.r {
                let mut ss = 0.0f32;
                let mut pp = lane;
                while pp < cx.p {
                    let yv = ld_shared_f32(cx.sm(lay.y, r * cx.p + pp));
                    ss += yv * yv;
                    pp += 32;
                }
                let rstd = rsqrt(warp_reduce::sum(ss) / cx.p as f32 + prm.norm_eps);
                let mut md = 0.0f32;
                let mut pp = lane;
                while pp < cx.p {
                    let yv = ld_shared_f32(cx.sm(lay.y, r * cx.p + pp));
                    let g = gate::<X>(prm, cx, t, r, pp)[0];
                    let dyhat = dout::<X>(prm, cx, t, r, pp) * w_at(pp) * g * mo_at(r, pp);
                    md += dyhat * (yv * rstd);
                    pp += 32;
                }
                let md = warp_reduce::sum(md) / cx.p as f32;
                if lane == 0 {
                    st_shared_f32(cx.sm(lay.stats, r), rstd);
                    st_shared_f32(cx.sm(lay.stats, cx.r + r), md);
                }
                r += WARPS;
            }
            sync_threads();
        }

        let mut pp = cx.tid;
        while pp < cx.p {
            let mut dz = 0.0f32;
            let mut r = 0;
            while r < cx.r {
                let [g, gp, zv, mz] = gate::<X>(prm, cx, t, r, pp);
                let yv = ld_shared_f32(cx.sm(lay.y, r * cx.p + pp));
                let d = dout::<X>(prm, cx, t, r, pp);
                let i = r * cx.p + pp;
                let (delta, dgate) = if fused {
                    let rstd = ld_shared_f32(cx.sm(lay.stats, r));
                    let md = ld_shared_f32(cx.sm(lay.stats, cx.r + r));
                    let (w, mo) = (w_at(pp), mo_at(r, pp));
                    let yhat = yv * rstd;
                    let dyhat = d * w * g * mo;
                    let a = cx.sm(lay.acc_norm, pp);
                    st_shared_f32(a, ld_shared_f32(a) + d * yhat * g * mo);
                    let a = cx.sm(lay.acc_mo, i);
                    st_shared_f32(a, ld_shared_f32(a) + d * yhat * w * g);
                    (rstd * (dyhat - yhat * md), d * yhat * w * mo)
                } else if gated {
                    let mo = mo_at(r, pp);
                    let a = cx.sm(lay.acc_mo, i);
                    st_shared_f32(a, ld_shared_f32(a) + d * yv * g);
                    (d * mo * g, d * mo * yv)
                } else {
                    (d * g, d * yv)
                };
                st_shared_f32(cx.sm(lay.delta, i), delta);
                if prm.z != 0 {
                    let du = dgate * gp;
                    dz += du * mz;
                    let a = cx.sm(lay.acc_mz, i);
                    st_shared_f32(a, ld_shared_f32(a) + du * zv);
                }
                let xv = ld_shared_f32(cx.sm(lay.x, cur * rp + i));
                let a = cx.sm(lay.acc_d, pp);
                st_shared_f32(a, ld_shared_f32(a) + delta * xv);
                let a = cx.sm(lay.dx, cur * rp + i);
                st_shared_f32(a, ld_shared_f32(a) + cx.d_h * delta);
                r += 1;
            }
            if prm.z != 0 {
                X::store(prm.dz, cx.vz_index(t, pp), dz);
            }
            pp += T;
        }
    }
}

/// Reverse step, phase c: `∂q̂_t = H_tᵀ δ` (H_t in the state region) and `G += δ q̂ᵀ` (the
/// read-out of token t).
#[inline(always)]
unsafe fn readout_backward(cx: &Ctx, t: usize) {
    let lay = &cx.lay;
    let rn = cx.r * cx.n;
    let cur = (t % 2) as u32;
    // SAFETY (whole body): indices inside the layout and the `seg` workspace.
    unsafe {
        let mut e = cx.tid;
        while e < rn {
            let r = e / cx.n;
            let nn = e - r * cx.n;
            let acc = dot_sm(
                cx.sm(lay.delta, r * cx.p),
                4,
                cx.sm(lay.state, nn),
                4 * lay.n_stride,
                cx.p,
            );
            st_shared_f32(cx.sm(lay.dq, e), acc);
            e += T;
        }
        let mut e = cx.tid;
        while e < cx.p * cx.n {
            let pp = e / cx.n;
            let nn = e - pp * cx.n;
            let addr = cx.sm(lay.adj, pp * lay.n_stride + nn);
            let mut acc = ld_shared_f32(addr);
            let mut r = 0;
            while r < cx.r {
                acc += ld_shared_f32(cx.sm(lay.delta, r * cx.p + pp))
                    * ld_shared_f32(cx.sm(lay.q, cur * rn + r * cx.n + nn));
                r += 1;
            }
            st_shared_f32(addr, acc);
            e += T;
        }
    }
}

/// Reverse step, phase d: the write-in terms of `H_t` — γ_t with token t, β_t with token t−1:
/// `∂x_s += coef·G k̂_s`, `∂k̂_s += coef·Gᵀ x_s`, and the per-warp partial sums of
/// `∂α = ⟨G, H_{t−1}⟩`, `∂γ = Σ x_t ⊙ G k̂_t`, `∂β = Σ x_{t−1} ⊙ G k̂_{t−1}` into `red`.
/// `h_prev` is the element offset of `H_{t−1}` in `prev_base` (0: the zero state).
#[inline(always)]
unsafe fn write_in_backward(cx: &Ctx, t: usize, co: &Coefs, prev_base: u64, h_prev: usize) {
    let lay = &cx.lay;
    let (rn, rp) = (cx.r * cx.n, cx.r * cx.p);
    let cur = (t % 2) as u32;
    let prv = 1 - cur;
    let slots: u32 = if t > 0 { 2 } else { 1 };
    // SAFETY (whole body): indices inside the layout and the state workspaces.
    unsafe {
        let mut d_alpha = 0.0f32;
        if prev_base != 0 {
            let mut e = cx.tid;
            while e < cx.p * cx.n {
                let pp = e / cx.n;
                let nn = e - pp * cx.n;
                d_alpha += ld_shared_f32(cx.sm(lay.adj, pp * lay.n_stride + nn))
                    * ldg(prev_base, h_prev + e as usize);
                e += T;
            }
        }
        // Item (s, r, p): s = 0 is token t (γ), s = 1 token t−1 (β).
        let (mut d_gamma, mut d_beta) = (0.0f32, 0.0f32);
        let mut e = cx.tid;
        while e < slots * rp {
            let s = e / rp;
            let i = e - s * rp;
            let r = i / cx.p;
            let pp = i - r * cx.p;
            let slot = if s == 0 { cur } else { prv };
            let gk = dot_sm(
                cx.sm(lay.adj, pp * lay.n_stride),
                4,
                cx.sm(lay.k, slot * rn + r * cx.n),
                4,
                cx.n,
            );
            let xv = ld_shared_f32(cx.sm(lay.x, slot * rp + i));
            let dx = cx.sm(lay.dx, slot * rp + i);
            if s == 0 {
                d_gamma += xv * gk;
                st_shared_f32(dx, ld_shared_f32(dx) + co.gamma * gk);
            } else {
                d_beta += xv * gk;
                st_shared_f32(dx, co.beta * gk);
            }
            e += T;
        }
        let mut e = cx.tid;
        while e < slots * rn {
            let s = e / rn;
            let i = e - s * rn;
            let r = i / cx.n;
            let nn = i - r * cx.n;
            let slot = if s == 0 { cur } else { prv };
            let acc = dot_sm(
                cx.sm(lay.x, slot * rp + r * cx.p),
                4,
                cx.sm(lay.adj, nn),
                4 * lay.n_stride,
                cx.p,
            );
            let dk = cx.sm(lay.dk, slot * rn + i);
            if s == 0 {
                st_shared_f32(dk, ld_shared_f32(dk) + co.gamma * acc);
            } else {
                st_shared_f32(dk, co.beta * acc);
            }
            e += T;
        }
        let (warp, lane) = (cx.tid / 32, cx.tid % 32);
        let sums = [
            warp_reduce::sum(d_alpha),
            warp_reduce::sum(d_gamma),
            warp_reduce::sum(d_beta),
        ];
        if lane == 0 {
            for (k, v) in sums.iter().enumerate() {
                st_shared_f32(cx.sm(lay.red, k as u32 * WARPS + warp), *v);
            }
        }
    }
}

/// Lanes that split the state rows of one angle in [`pair_cross_partial`]'s callers: the largest
/// power of two ≤ 32 with one aligned group of lanes per angle in the block.
#[inline(always)]
pub(crate) fn boundary_lanes(na: u32) -> u32 {
    let most = (T / na.max(1)).clamp(1, 32);
    1 << (31 - most.leading_zeros())
}

/// State rows per batch of loads in [`pair_cross_partial`].
const BOUNDARY_BATCH: usize = 8;

/// Rows `p ≡ first (mod lanes)` of `Σ_p G[p, a]·H[p, b] − G[p, b]·H[p, a]` for the pair `(a, b)`:
/// `H` a (P, N) f32 state in global memory at `state`, `G` its adjoint in shared memory
/// (`g_addr(p, col)`). This is how ∂L changes when the state is rotated by a common angle in that
/// pair, i.e. minus the ∂θ carried across a boundary by the keys before it (see
/// [`boundary_dtheta`]). The state words of `BOUNDARY_BATCH` rows are requested before any is
/// used, one round trip per batch rather than per row.
///
/// # Safety
/// `state` holds P·N f32 words; `g_addr` gives valid shared addresses for `p < P`, `col < N`.
#[inline(always)]
pub(crate) unsafe fn pair_cross_partial(
    state: u64,
    n: u32,
    g_addr: impl Fn(u32, u32) -> u32,
    p: u32,
    (ia, ib): (u32, u32),
    first: u32,
    lanes: u32,
) -> f32 {
    let mut acc = 0.0f32;
    let mut start = first;
    while start < p {
        let mut hv = [[0.0f32; 2]; BOUNDARY_BATCH];
        let mut k = 0;
        while k < BOUNDARY_BATCH {
            let pp = start + k as u32 * lanes;
            if pp < p {
                let h = (pp * n) as usize;
                // SAFETY: row pp < P of the state.
                hv[k] = unsafe { [ldg(state, h + ia as usize), ldg(state, h + ib as usize)] };
            }
            k += 1;
        }
        let mut k = 0;
        while k < BOUNDARY_BATCH {
            let pp = start + k as u32 * lanes;
            if pp < p {
                // SAFETY: the caller's `g_addr` contract.
                let (ga, gb) =
                    unsafe { (ld_shared_f32(g_addr(pp, ia)), ld_shared_f32(g_addr(pp, ib))) };
                acc += ga * hv[k][1] - gb * hv[k][0];
            }
            k += 1;
        }
        start += BOUNDARY_BATCH as u32 * lanes;
    }
    acc
}

/// After token `t0`'s reverse step, `t0` the first token of segment `c ≥ 1`: sets the running sum
/// of ∂θ to `Σ_{s ≥ t0} ∂θ_s` formed from the boundary instead of summed token by token. A common
/// shift of θ_s for every s ≥ t0 moves only the interactions of those tokens with the keys before
/// t0, which reach them through the state `H_{t0−1}` (adjoint `G` after `G ← α_{t0}·G`) and the
/// carried key `k̂_{t0−1}` of the β term: the sum is `Σ_p G[p, a]·H[p, b] − G[p, b]·H[p, a]` minus
/// that key's `∂k̂_β·J k̂` over the ranks. The per-token terms do not shrink with distance although
/// their sum does, so carrying them let their roundings add up over the sequence.
///
/// # Safety
/// The launch contract; every thread calls it between barriers; the layout's `k` and `dk` slot of
/// token t0−1 hold its rotated key and the β part of its gradient.
#[inline(always)]
unsafe fn boundary_dtheta(prm: &BackwardParams, cx: &Ctx, t0: usize, c: usize) {
    let lay = &cx.lay;
    let rn = cx.r * cx.n;
    let lanes = boundary_lanes(cx.na);
    let j = cx.tid / lanes;
    let g = cx.tid - j * lanes;
    let mut acc = 0.0f32;
    if j < cx.na {
        let (ia, ib) = cx.pair(j);
        // SAFETY: checkpoint c holds H_{t0−1}, (P, N); the adjoint is (P, N) at row stride
        // n_stride.
        acc = unsafe {
            pair_cross_partial(
                prm.ckpt + 4 * cx.ckpt_state(c) as u64,
                cx.n,
                |pp, col| cx.sm(lay.adj, pp * lay.n_stride + col),
                cx.p,
                (ia, ib),
                g,
                lanes,
            )
        };
        let prv = ((t0 - 1) % 2) as u32 * rn;
        let mut r = g;
        while r < cx.r {
            let o = prv + r * cx.n;
            // SAFETY: slot prv of `k` and `dk` holds R·N words.
            unsafe {
                let (du, dw) = (
                    ld_shared_f32(cx.sm(lay.dk, o + ia)),
                    ld_shared_f32(cx.sm(lay.dk, o + ib)),
                );
                let (ka, kb) = (
                    ld_shared_f32(cx.sm(lay.k, o + ia)),
                    ld_shared_f32(cx.sm(lay.k, o + ib)),
                );
                acc -= dw * ka - du * kb;
            }
            r += lanes;
        }
    }
    let total = warp_reduce::group_sum(acc, lanes);
    if j < cx.na && g == 0 {
        // SAFETY: `suffix` holds Na words.
        unsafe { st_shared_f32(cx.sm(lay.suffix, j), total) };
    }
}

/// The block totals of the `red` partial sums, in warp order: (∂α, ∂γ, ∂β).
#[inline(always)]
unsafe fn reduced(cx: &Ctx) -> [f32; 3] {
    let mut out = [0.0f32; 3];
    // SAFETY: `red` holds 3·WARPS words.
    unsafe {
        for (k, o) in out.iter_mut().enumerate() {
            let mut w = 0;
            while w < WARPS {
                *o += ld_shared_f32(cx.sm(cx.lay.red, k as u32 * WARPS + w));
                w += 1;
            }
        }
    }
    out
}

/// Reverse step, phase f: `G ← α_t G`; the state region ← `H_{t−1}` from `prev_base` at
/// `h_prev` when that is the `seg` workspace (the next step's H_t; otherwise the next segment's
/// recompute sets it); the inverse rotation of ∂q̂, ∂k̂ with ∂θ, the reverse running sum of ∂θ
/// into the angle-logit gradient and the θ part of ∂Δ; ∂v and ∂mimo_v.
#[inline(always)]
unsafe fn token_finish<X: Elem>(
    prm: &BackwardParams,
    cx: &Ctx,
    t: usize,
    co: &Coefs,
    prev_base: u64,
    h_prev: usize,
) {
    let lay = &cx.lay;
    let (rn, rp) = (cx.r * cx.n, cx.r * cx.p);
    let cur = (t % 2) as u32;
    let next_state = prev_base == prm.seg;
    // SAFETY (whole body): indices inside the launch contract's shapes and the layout.
    unsafe {
        let mut e = cx.tid;
        while e < cx.p * cx.n {
            let pp = e / cx.n;
            let nn = e - pp * cx.n;
            let addr = cx.sm(lay.adj, pp * lay.n_stride + nn);
            st_shared_f32(addr, co.alpha * ld_shared_f32(addr));
            if next_state {
                let v = ldg(prm.seg, h_prev + e as usize);
                st_shared_f32(cx.sm(lay.state, pp * lay.n_stride + nn), v);
            }
            e += T;
        }
        // One thread per rotation pair, over ranks and over q then k: it owns the pair's bias
        // accumulators and forms ∂θ_j of this token.
        let mut j = cx.tid;
        while j < cx.n / 2 {
            let (ia, ib) = cx.pair(j);
            let rotated = j < cx.na;
            let (c, s) = if rotated {
                let ci = cx.cs_index(t, j);
                (ldg(prm.cs, ci), ldg(prm.cs, ci + cx.na as usize))
            } else {
                (1.0, 0.0)
            };
            let mut dtheta = 0.0f32;
            let mut r = 0;
            while r < cx.r {
                for (hat, dhat, out, acc) in [
                    (lay.q, lay.dq, prm.dqh, lay.acc_qb),
                    (lay.k, lay.dk + cur * rn, prm.dkh, lay.acc_kb),
                ] {
                    let o = r * cx.n;
                    let du = ld_shared_f32(cx.sm(dhat, o + ia));
                    let dw = ld_shared_f32(cx.sm(dhat, o + ib));
                    let (da, db) = if rotated {
                        let ha = ld_shared_f32(cx.sm(hat, cur * rn + o + ia));
                        let hb = ld_shared_f32(cx.sm(hat, cur * rn + o + ib));
                        dtheta += dw * ha - du * hb;
                        (du * c + dw * s, dw * c - du * s)
                    } else {
                        (du, dw)
                    };
                    stg(out, cx.qkh_index(t, r, ia), da);
                    stg(out, cx.qkh_index(t, r, ib), db);
                    let a = cx.sm(acc, o + ia);
                    st_shared_f32(a, ld_shared_f32(a) + da);
                    let a = cx.sm(acc, o + ib);
                    st_shared_f32(a, ld_shared_f32(a) + db);
                }
                r += 1;
            }
            if rotated {
                let a = cx.sm(lay.suffix, j);
                let suffix = ld_shared_f32(a) + dtheta;
                st_shared_f32(a, suffix);
                let ai = ((cx.b * cx.s_len + t) * cx.heads + cx.h) * cx.na as usize + j as usize;
                let th = tanh(ldg(prm.angles, ai));
                stg(prm.dangles, ai, suffix * PI * co.dt * (1.0 - th * th));
                st_shared_f32(cx.sm(lay.ddt_angle, j), suffix * PI * th);
            }
            j += T;
        }
        let mut pp = cx.tid;
        while pp < cx.p {
            let v = X::load(prm.v, cx.vz_index(t, pp));
            let mut dv = 0.0f32;
            let mut r = 0;
            while r < cx.r {
                let i = r * cx.p + pp;
                let dx = ld_shared_f32(cx.sm(lay.dx, cur * rp + i));
                dv += dx * ldg(prm.mimo_v, cx.h * rp as usize + i as usize);
                let a = cx.sm(lay.acc_mv, i);
                st_shared_f32(a, ld_shared_f32(a) + dx * v);
                r += 1;
            }
            X::store(prm.dv, cx.vz_index(t, pp), dv);
            pp += T;
        }
    }
}

/// Thread 0, after the barrier that ends token t's reverse step: the chain rule through
/// `α = e^a`, `β = (1−λ)Δα`, `γ = λΔ`, `λ = σ(τ)`, plus the θ path of ∂Δ (spec §5.3–5.5 in step
/// form), written to dadt, ddt and dtrap.
#[inline(always)]
unsafe fn token_scalars_out<X: Elem>(
    prm: &BackwardParams,
    cx: &Ctx,
    t: usize,
    co: &Coefs,
    red: [f32; 3],
) {
    let [d_alpha, d_gamma, d_beta] = red;
    // SAFETY (whole body): t < S; `ddt_angle` holds Na words.
    unsafe {
        let mut d_dt = d_beta * (1.0 - co.lam) * co.alpha + d_gamma * co.lam;
        let mut j = 0;
        while j < cx.na {
            d_dt += ld_shared_f32(cx.sm(cx.lay.ddt_angle, j));
            j += 1;
        }
        let d_lam = d_gamma * co.dt - d_beta * co.dt * co.alpha;
        stg(prm.dadt, cx.row + t, d_alpha * co.alpha + d_beta * co.beta);
        stg(prm.ddt, cx.row + t, d_dt);
        X::store(prm.dtrap, cx.row + t, d_lam * co.lam * (1.0 - co.lam));
    }
}

/// Zeroes `len` words of `region`.
#[inline(always)]
unsafe fn zero(cx: &Ctx, region: u32, len: u32) {
    let mut e = cx.tid;
    while e < len {
        // SAFETY: forwarded to the caller (region of at least `len` words).
        unsafe { st_shared_f32(cx.sm(region, e), 0.0) };
        e += T;
    }
}

/// Zeroes the state region's P×N elements.
#[inline(always)]
unsafe fn zero_state(cx: &Ctx, region: u32) {
    let mut e = cx.tid;
    while e < cx.p * cx.n {
        let pp = e / cx.n;
        let nn = e - pp * cx.n;
        // SAFETY: forwarded to the caller (a state region).
        unsafe { st_shared_f32(cx.sm(region, pp * cx.lay.n_stride + nn), 0.0) };
        e += T;
    }
}

/// The per-head backward for activation type `X` (see the module docs).
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn backward_head<X: Elem>(prm: &BackwardParams) {
    let (heads, groups) = (prm.heads as usize, prm.groups as usize);
    let h = block_x() as usize;
    let b = block_y() as usize;
    let s_len = prm.seq_len as usize;
    let seg_len = prm.seg_len as usize;
    let lay = BackwardSmem::new(prm.rank, prm.n, prm.p, prm.na);
    let cx = Ctx {
        base: smem_base(),
        lay,
        tid: thread_x(),
        b,
        h,
        g: h / (heads / groups),
        s_len,
        heads,
        groups,
        r: prm.rank,
        n: prm.n,
        p: prm.p,
        na: prm.na,
        bh: b * heads + h,
        row: (b * heads + h) * s_len,
        nseg: s_len.div_ceil(seg_len),
        seg_slots: seg_len.min(s_len),
        half_split: prm.rotation == rotation::HALF_SPLIT,
        // SAFETY: h < H.
        d_h: if prm.d != 0 {
            unsafe { ldg(prm.d, h) }
        } else {
            0.0
        },
    };
    let (rn, rp) = (cx.r * cx.n, cx.r * cx.p);
    // SAFETY (whole body): the launch contract; phases are separated by block barriers.
    unsafe {
        // Forward sweep: angles, states, checkpoints.
        zero_state(&cx, lay.state);
        zero(&cx, lay.theta, 2 * cx.na);
        sync_threads();
        let mut t = 0;
        while t < s_len {
            // Angle j is owned by thread j for the whole sweep (its running total needs no
            // barrier of its own).
            let mut j = cx.tid;
            while j < cx.na {
                let slot = cx.sm(lay.theta, 2 * j);
                let ai = ((b * s_len + t) * heads + h) * cx.na as usize + j as usize;
                let acc = ld_shared_f64(slot)
                    + angle_increment(ldg(prm.angles, ai), ldg(prm.dt, cx.row + t));
                st_shared_f64(slot, acc);
                let (s, c) = sincos(reduced_f32(acc));
                let ci = cx.cs_index(t, j);
                stg(prm.cs, ci, c);
                stg(prm.cs, ci + cx.na as usize, s);
                j += T;
            }
            sync_threads();
            load_token::<X>(prm, &cx, t, (t % 2) as u32);
            sync_threads();
            let next = t + 1;
            let (dst_base, dst) = if next.is_multiple_of(seg_len) && next < s_len {
                (prm.ckpt, cx.ckpt_state(next / seg_len))
            } else {
                (0, 0)
            };
            advance_state::<X>(prm, &cx, t, dst_base, dst);
            sync_threads();
            t += 1;
        }

        // Reverse sweep.
        zero_state(&cx, lay.adj);
        let last = ((s_len - 1) % 2) as u32;
        zero(&cx, lay.dk + last * rn, rn);
        zero(&cx, lay.dx + last * rp, rp);
        zero(&cx, lay.suffix, cx.na);
        zero(&cx, lay.acc_qb, rn);
        zero(&cx, lay.acc_kb, rn);
        zero(&cx, lay.acc_mv, rp);
        zero(&cx, lay.acc_mz, rp);
        zero(&cx, lay.acc_mo, rp);
        zero(&cx, lay.acc_norm, cx.p);
        zero(&cx, lay.acc_d, cx.p);
        // Token whose dadt / ddt / dtrap thread 0 still has to write (after the next barrier).
        let mut pending: Option<(usize, Coefs, [f32; 3])> = None;
        let mut c = cx.nseg;
        while c > 0 {
            c -= 1;
            let t0 = c * seg_len;
            let t1 = (t0 + seg_len).min(s_len);
            // Recompute the segment's states from its checkpoint.
            let mut e = cx.tid;
            while e < cx.p * cx.n {
                let pp = e / cx.n;
                let nn = e - pp * cx.n;
                let v = if c == 0 {
                    0.0
                } else {
                    ldg(prm.ckpt, cx.ckpt_state(c) + e as usize)
                };
                st_shared_f32(cx.sm(lay.state, pp * lay.n_stride + nn), v);
                e += T;
            }
            if t0 > 0 {
                load_token::<X>(prm, &cx, t0 - 1, ((t0 - 1) % 2) as u32);
            }
            sync_threads();
            let mut t = t0;
            while t < t1 {
                load_token::<X>(prm, &cx, t, (t % 2) as u32);
                sync_threads();
                advance_state::<X>(prm, &cx, t, prm.seg, cx.seg_state(t, t0));
                sync_threads();
                t += 1;
            }
            // Walk the segment's tokens backwards.
            let mut t = t1;
            while t > t0 {
                t -= 1;
                if let Some((tp, co, red)) = pending.take() {
                    if cx.tid == 0 {
                        token_scalars_out::<X>(prm, &cx, tp, &co, red);
                    }
                }
                if t > 0 {
                    load_token::<X>(prm, &cx, t - 1, ((t - 1) % 2) as u32);
                }
                output_backward::<X>(prm, &cx, t);
                sync_threads();
                readout_backward(&cx, t);
                sync_threads();
                let co = coefs::<X>(prm, &cx, t);
                let (prev_base, h_prev) = if t > t0 {
                    (prm.seg, cx.seg_state(t - 1, t0))
                } else if c > 0 {
                    (prm.ckpt, cx.ckpt_state(c))
                } else {
                    (0, 0)
                };
                write_in_backward(&cx, t, &co, prev_base, h_prev);
                sync_threads();
                let red = reduced(&cx);
                token_finish::<X>(prm, &cx, t, &co, prev_base, h_prev);
                sync_threads();
                if t == t0 && c > 0 && cx.na > 0 {
                    boundary_dtheta(prm, &cx, t0, c);
                    sync_threads();
                }
                pending = Some((t, co, red));
            }
        }
        if let Some((tp, co, red)) = pending {
            if cx.tid == 0 {
                token_scalars_out::<X>(prm, &cx, tp, &co, red);
            }
        }

        // This block's parameter-gradient slot.
        let sl = BackwardSlots::new(cx.r, cx.n, cx.p);
        let base = cx.bh * sl.len as usize;
        for (region, off, len) in [
            (lay.acc_qb, sl.q_bias, rn),
            (lay.acc_kb, sl.k_bias, rn),
            (lay.acc_mv, sl.mimo_v, rp),
            (lay.acc_mz, sl.mimo_z, rp),
            (lay.acc_mo, sl.mimo_o, rp),
            (lay.acc_norm, sl.norm, cx.p),
        ] {
            let mut e = cx.tid;
            while e < len {
                stg(
                    prm.slots,
                    base + (off + e) as usize,
                    ld_shared_f32(cx.sm(region, e)),
                );
                e += T;
            }
        }
        if cx.tid == 0 {
            let mut dd = 0.0f32;
            let mut pp = 0;
            while pp < cx.p {
                dd += ld_shared_f32(cx.sm(lay.acc_d, pp));
                pp += 1;
            }
            stg(prm.slots, base + sl.d as usize, dd);
        }
    }
}

/// The reduce kernel for activation type `X` (see the module docs): grid-stride over the dq and
/// dk elements (sum over the heads of the group, in head order) and the parameter-gradient
/// elements (sum over the batch, in row order).
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn backward_reduce<X: Elem>(prm: &BackwardParams) {
    let (b_len, s_len, r_len) = (prm.batch as usize, prm.seq_len as usize, prm.rank as usize);
    let (heads, groups) = (prm.heads as usize, prm.groups as usize);
    let (n, p) = (prm.n as usize, prm.p as usize);
    let per_group = heads / groups;
    let qk = b_len * s_len * r_len * groups * n;
    // bf16 per-head partials (`qkh_bf16`, N a multiple of 8 there) go eight elements an item, as
    // one 16-byte load per head with eight heads' loads in flight: as 2-byte loads the reduce was
    // bound by their count, as 8-byte loads four at a time by their latency.
    let octet = prm.qkh_bf16 != 0;
    let items = if octet { qk / 8 } else { qk };
    let sl = BackwardSlots::new(prm.rank, prm.n, prm.p);
    let slot_len = sl.len as usize;
    // A split tensor-core call: `K·B` slot rows, and one boundary token per (b, h, boundary) to
    // finish (see `mamba3_abi::split_launch`).
    let k1 = if prm.split != 0 {
        prm.split_boundaries as usize
    } else {
        0
    };
    let slot_rows = b_len * (k1 + 1);
    let params_end = 2 * items + heads * slot_len;
    let total = params_end + b_len * heads * k1;
    let stride = prm.reduce_blocks as usize * T as usize;
    let mut i = block_x() as usize * T as usize + thread_x() as usize;
    let (rn, rp) = (r_len * n, r_len * p);
    // SAFETY (whole body): every index lies inside the shapes of the launch contract.
    unsafe {
        while i < total {
            if i < 2 * items {
                let second = i >= items;
                let item = if second { i - items } else { i };
                let e = if octet { 8 * item } else { item };
                let nn = e % n;
                let rest = e / n;
                let g = rest % groups;
                let bsr = rest / groups;
                let src = if second { prm.dkh } else { prm.dqh };
                let dst = if second { prm.dk } else { prm.dq };
                let head = |hh: usize| (bsr * heads + g * per_group + hh) * n + nn;
                if octet {
                    // The heads' loads in flight before their adds (in head order).
                    const IN_FLIGHT: usize = 8;
                    let mut acc = [0.0f32; 8];
                    let mut hh = 0;
                    while hh < per_group {
                        let mut v = [Default::default(); IN_FLIGHT];
                        for (k, vk) in v.iter_mut().enumerate() {
                            if hh + k < per_group {
                                *vk = Bf16::load8_raw(src, head(hh + k));
                            }
                        }
                        for (k, vk) in v.iter().enumerate() {
                            if hh + k < per_group {
                                let x = Bf16::widen8(*vk);
                                for (j, a) in acc.iter_mut().enumerate() {
                                    *a += x[j];
                                }
                            }
                        }
                        hh += IN_FLIGHT;
                    }
                    for (k, a) in acc.iter().enumerate() {
                        X::store(dst, e + k, *a);
                    }
                } else {
                    let mut acc = 0.0f32;
                    let mut hh = 0;
                    while hh < per_group {
                        acc += ldg(src, head(hh));
                        hh += 1;
                    }
                    X::store(dst, e, acc);
                }
            } else if i >= params_end {
                finish_boundary_token::<X>(prm, i - params_end);
            } else {
                let e = i - 2 * items;
                let h = e / slot_len;
                let o = e - h * slot_len;
                let mut acc = 0.0f32;
                let mut b = 0;
                while b < slot_rows {
                    acc += ldg(prm.slots, (b * heads + h) * slot_len + o);
                    b += 1;
                }
                let o32 = o as u32;
                let (dst, idx) = if o32 < sl.k_bias {
                    (prm.dq_bias, h * rn + o)
                } else if o32 < sl.mimo_v {
                    (prm.dk_bias, h * rn + o - sl.k_bias as usize)
                } else if o32 < sl.mimo_z {
                    (prm.dmimo_v, h * rp + o - sl.mimo_v as usize)
                } else if o32 < sl.mimo_o {
                    (prm.dmimo_z, h * rp + o - sl.mimo_z as usize)
                } else if o32 < sl.norm {
                    (prm.dmimo_o, h * rp + o - sl.mimo_o as usize)
                } else if o32 < sl.d {
                    (prm.dnorm, h * p + o - sl.norm as usize)
                } else {
                    (prm.dd, h)
                };
                if dst != 0 {
                    stg(dst, idx, acc);
                }
            }
            i += stride;
        }
    }
}

/// Finishes the first token of the segment after boundary `item % (K − 1)` of (b, h) =
/// `item / (K − 1)` of a split call: its ∂Δ and ∂trap from the pieces its own segment wrote and
/// the ε term (∂c of the token before) the segment before wrote (see
/// `mamba3_abi::split_launch`).
///
/// # Safety
/// A split call's `split_tokens`, `ddt` and `dtrap` (module launch contract).
#[inline(always)]
unsafe fn finish_boundary_token<X: Elem>(prm: &BackwardParams, item: usize) {
    let k1 = prm.split_boundaries as usize;
    let (bh, j) = (item / k1, item % k1);
    let t = (j + 1) * prm.split_chunks as usize * prm.seg_len as usize;
    let at = item * split_launch::TOKEN_WORDS as usize;
    // SAFETY: the record of an existing boundary and a token < S of this (b, h).
    unsafe {
        let [ddt0, dlam0, lam, dt, deps] = [0, 1, 2, 3, 4].map(|k| ldg(prm.split_tokens, at + k));
        let row = bh * prm.seq_len as usize;
        stg(prm.ddt, row + t, ddt0 + deps * (1.0 - lam));
        X::store(prm.dtrap, row + t, (dlam0 - deps * dt) * lam * (1.0 - lam));
    }
}

// Every global access above goes through `Elem`, and the entry points exist only on the device, so
// that the host test `tests/backward_emulated.rs` can compile this file against emulated
// primitives.
macro_rules! backward_entries {
    ($head:ident, $reduce:ident, $x:ty) => {
        /// Per-head backward entry point (see the module's launch contract).
        ///
        /// # Safety
        /// The module's launch contract.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $head(params: BackwardParams) {
            // SAFETY: forwarded launch contract.
            unsafe { backward_head::<$x>(&params) }
        }

        /// Reduce entry point (see the module's launch contract).
        ///
        /// # Safety
        /// The module's launch contract.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $reduce(params: BackwardParams) {
            // SAFETY: forwarded launch contract.
            unsafe { backward_reduce::<$x>(&params) }
        }
    };
}

backward_entries!(backward_head_f32, backward_reduce_f32, f32);
backward_entries!(backward_head_bf16, backward_reduce_bf16, Bf16);
