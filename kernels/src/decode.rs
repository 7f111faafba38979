//! Mamba-3 MIMO decode: the recurrence of spec §2.1 advanced over `T ≥ 1` tokens in one launch.
//!
//! One block per (head, batch row), [`DECODE_WARPS`] warps. The block stages the (P, N) state in
//! shared memory once (`cp.async`), runs every token of the call on chip — rotary + bias, the
//! trapezoidal update with the previous token's rotated k and raw v, the read-out, D, gate, norm and
//! contraction — and writes the state back once. Within a token, warp `w` owns state rows
//! `p ≡ w (mod WARPS)` and each lane the columns `n ≡ lane (mod 32)`, so the rank axis sits in
//! registers (`R` is a const generic) and the read-out is a warp reduction.
//!
//! # Launch contract
//! Grid `(H, B)`, block `32·DECODE_WARPS`, dynamic shared memory `DecodeSmem::new(R, N, P, Na)`
//! bytes; every pointer of [`DecodeParams`] valid for its documented shape (the host validates).

use mamba3_abi::{align4, output_mode, rotation, DecodeParams, DecodeSmem, DECODE_WARPS};

use crate::arch::cp_async;
use crate::arch::sreg::{
    block_x, block_y, ld_shared_f32, ld_shared_v4_f32, shfl_xor_f32, smem_base, st_shared_f32, sync_threads,
    thread_x,
};
use crate::elem::Elem;
use crate::math::{exp, rsqrt, sigmoid, silu, sincos, tanh, wrap_two_pi};

const THREADS: u32 = 32 * DECODE_WARPS;

/// 16-byte aligned f32 quad for vectorized global stores.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct F32x4([f32; 4]);

/// Shared-space address of f32 element `i` of the region starting at element `region`.
#[inline(always)]
fn at(base: u32, region: u32, i: u32) -> u32 {
    base + 4 * (region + i)
}

/// Sum over the warp; every lane gets the total.
#[inline(always)]
fn warp_sum(mut v: f32) -> f32 {
    let mut mask = 16;
    while mask > 0 {
        v += shfl_xor_f32(v, mask);
        mask /= 2;
    }
    v
}

/// Loads f32 element `i` of a global tensor.
#[inline(always)]
unsafe fn ld(base: u64, i: u32) -> f32 {
    // SAFETY: forwarded to the caller.
    unsafe { *(base as *const f32).add(i as usize) }
}

/// The decode body for activation type `X` and rank `R`.
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn decode<X: Elem, const R: usize>(prm: &DecodeParams) {
    let (h, b) = (block_x(), block_y());
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (heads, n, p, na, tokens) = (prm.heads, prm.n, prm.p, prm.na, prm.tokens);
    let r_count = R as u32;
    let group = h / (heads / prm.groups);
    let lay = DecodeSmem::new(r_count, n, p, na);
    let sm = smem_base();
    let bh = b * heads + h;
    let half_n = n / 2;

    // SAFETY (whole body): indices stay inside the shapes of the launch contract; shared offsets
    // inside `lay`; barriers are reached by every thread (no early return).
    unsafe {
        // --- Stage the state: ssm via cp.async, the small states with plain loads ---
        let ssm_block = prm.ssm + 4 * (bh as u64) * (p * n) as u64;
        let total = p * n;
        if total % 4 == 0 {
            let mut c = tid;
            while c < total / 4 {
                cp_async::cp_async_cg_16(at(sm, lay.state, 4 * c), (ssm_block + 16 * c as u64) as *const u8);
                c += THREADS;
            }
            cp_async::commit_group();
        } else {
            let mut i = tid;
            while i < total {
                st_shared_f32(at(sm, lay.state, i), ld(ssm_block, i));
                i += THREADS;
            }
        }
        let mut j = tid;
        while j < na {
            st_shared_f32(at(sm, lay.theta, j), ld(prm.theta, bh * na + j));
            j += THREADS;
        }
        // Previous-token k and v go to buffer 0; token t reads buffer t % 2 and writes (t + 1) % 2.
        let mut i = tid;
        while i < r_count * n {
            let (r, col) = (i / n, i % n);
            st_shared_f32(at(sm, lay.k_rot, i), X::load(prm.k_state, (((b * r_count + r) * heads + h) * n + col) as usize));
            i += THREADS;
        }
        let mut i = tid;
        while i < p {
            st_shared_f32(at(sm, lay.v, i), X::load(prm.v_state, (bh * p + i) as usize));
            i += THREADS;
        }
        cp_async::wait_group::<0>();
        sync_threads();

        let has_z = prm.z != 0;
        let d_skip = if prm.d != 0 { ld(prm.d, h) } else { 0.0 };
        let k_stride = align4(r_count * n);
        let v_stride = align4(p);

        for t in 0..tokens {
            let (prev, cur) = (t % 2, (t + 1) % 2);
            let k_prev = lay.k_rot + prev * k_stride;
            let k_cur = lay.k_rot + cur * k_stride;
            let v_prev = lay.v + prev * v_stride;
            let v_cur = lay.v + cur * v_stride;
            let scalar = bh * tokens + t;
            let dt = ld(prm.dt, scalar);
            let alpha = exp(ld(prm.adt, scalar));
            let lambda = sigmoid(X::load(prm.trap, scalar as usize));
            let beta = (1.0 - lambda) * dt * alpha;
            let gamma = lambda * dt;

            // --- Angles: θ += π·tanh(logit)·Δ, kept in [0, 2π) ---
            let mut j = tid;
            while j < na {
                let logit = ld(prm.angles, ((b * tokens + t) * heads + h) * na + j);
                let theta = ld_shared_f32(at(sm, lay.theta, j)) + core::f32::consts::PI * tanh(logit) * dt;
                st_shared_f32(at(sm, lay.theta, j), wrap_two_pi(theta));
                j += THREADS;
            }
            // Raw v and z of this token.
            let token_hp = ((b * tokens + t) * heads + h) * p;
            let mut i = tid;
            while i < p {
                st_shared_f32(at(sm, v_cur, i), X::load(prm.v, (token_hp + i) as usize));
                if has_z {
                    st_shared_f32(at(sm, lay.z, i), X::load(prm.z, (token_hp + i) as usize));
                }
                i += THREADS;
            }
            sync_threads();

            // --- Bias, then rotation, of q and k: one thread per (rank, pair) ---
            let mut idx = tid;
            while idx < r_count * half_n {
                let (r, i) = (idx / half_n, idx % half_n);
                let (n0, n1) = if prm.rotation == rotation::PAIRWISE { (2 * i, 2 * i + 1) } else { (i, i + half_n) };
                let qk_row = (((b * tokens + t) * r_count + r) * prm.groups + group) * n;
                let bias_row = (h * r_count + r) * n;
                let q0 = X::load(prm.q, (qk_row + n0) as usize) + ld(prm.q_bias, bias_row + n0);
                let q1 = X::load(prm.q, (qk_row + n1) as usize) + ld(prm.q_bias, bias_row + n1);
                let k0 = X::load(prm.k, (qk_row + n0) as usize) + ld(prm.k_bias, bias_row + n0);
                let k1 = X::load(prm.k, (qk_row + n1) as usize) + ld(prm.k_bias, bias_row + n1);
                let (s, c) = if i < na { sincos(ld_shared_f32(at(sm, lay.theta, i))) } else { (0.0, 1.0) };
                st_shared_f32(at(sm, lay.q_rot, r * n + n0), q0 * c - q1 * s);
                st_shared_f32(at(sm, lay.q_rot, r * n + n1), q0 * s + q1 * c);
                st_shared_f32(at(sm, k_cur, r * n + n0), k0 * c - k1 * s);
                st_shared_f32(at(sm, k_cur, r * n + n1), k0 * s + k1 * c);
                idx += THREADS;
            }
            sync_threads();

            // --- State update and read-out: warp per row, rank axis in registers ---
            let mut row = warp;
            while row < p {
                let mut x_cur = [0.0f32; R];
                let mut w_prev = [0.0f32; R];
                let mut w_cur = [0.0f32; R];
                let (vc, vp) = (ld_shared_f32(at(sm, v_cur, row)), ld_shared_f32(at(sm, v_prev, row)));
                for r in 0..R {
                    let mv = ld(prm.mimo_v, (h * r_count + r as u32) * p + row);
                    x_cur[r] = vc * mv;
                    w_prev[r] = beta * vp * mv;
                    w_cur[r] = gamma * x_cur[r];
                }
                let mut acc = [0.0f32; R];
                let mut col = lane;
                while col < n {
                    let cell = at(sm, lay.state, row * n + col);
                    let mut s = alpha * ld_shared_f32(cell);
                    for r in 0..R {
                        let kp = ld_shared_f32(at(sm, k_prev, r as u32 * n + col));
                        let kc = ld_shared_f32(at(sm, k_cur, r as u32 * n + col));
                        s += w_prev[r] * kp + w_cur[r] * kc;
                    }
                    st_shared_f32(cell, s);
                    for (r, a) in acc.iter_mut().enumerate() {
                        *a += s * ld_shared_f32(at(sm, lay.q_rot, r as u32 * n + col));
                    }
                    col += 32;
                }
                // Lane r < R finishes rank r (compile-time indices only: no local memory).
                let mut y_mine = 0.0f32;
                for r in 0..R {
                    let y = warp_sum(acc[r]) + d_skip * x_cur[r];
                    if lane == r as u32 {
                        y_mine = y;
                    }
                }
                let mut contribution = 0.0f32;
                if lane < r_count {
                    let rp = (h * r_count + lane) * p + row;
                    let gate = if has_z { silu(ld_shared_f32(at(sm, lay.z, row)) * ld(prm.mimo_z, rp)) } else { 1.0 };
                    match prm.mode {
                        output_mode::PREREDUCE => X::store(
                            prm.out,
                            ((((b * tokens + t) * r_count + lane) * heads + h) * p + row) as usize,
                            y_mine * gate,
                        ),
                        output_mode::FUSED_NORM => st_shared_f32(at(sm, lay.y, lane * p + row), y_mine),
                        _ => contribution = y_mine * gate * ld(prm.mimo_o, rp),
                    }
                }
                if prm.mode == output_mode::GATED {
                    let out = warp_sum(contribution);
                    if lane == 0 {
                        X::store(prm.out, (token_hp + row) as usize, out);
                    }
                }
                row += DECODE_WARPS;
            }

            // --- Fused head-wise RMSNorm over P per rank, then gate and contraction ---
            if prm.mode == output_mode::FUSED_NORM {
                sync_threads();
                let mut r = warp;
                while r < r_count {
                    let mut sq = 0.0f32;
                    let mut i = lane;
                    while i < p {
                        let v = ld_shared_f32(at(sm, lay.y, r * p + i));
                        sq += v * v;
                        i += 32;
                    }
                    let total_sq = warp_sum(sq);
                    if lane == 0 {
                        st_shared_f32(at(sm, lay.rstd, r), rsqrt(total_sq / p as f32 + prm.norm_eps));
                    }
                    r += DECODE_WARPS;
                }
                sync_threads();
                let mut i = tid;
                while i < p {
                    let zv = if has_z { ld_shared_f32(at(sm, lay.z, i)) } else { 0.0 };
                    let w = ld(prm.norm_weight, h * p + i);
                    let mut out = 0.0f32;
                    for r in 0..r_count {
                        let rp = (h * r_count + r) * p + i;
                        let gate = if has_z { silu(zv * ld(prm.mimo_z, rp)) } else { 1.0 };
                        let yn = ld_shared_f32(at(sm, lay.y, r * p + i)) * ld_shared_f32(at(sm, lay.rstd, r));
                        out += yn * w * gate * ld(prm.mimo_o, rp);
                    }
                    X::store(prm.out, (token_hp + i) as usize, out);
                    i += THREADS;
                }
            }
            sync_threads();
        }

        // --- Write the state back once ---
        if total % 4 == 0 {
            let mut c = tid;
            while c < total / 4 {
                let quad = ld_shared_v4_f32(at(sm, lay.state, 4 * c));
                *((ssm_block + 16 * c as u64) as *mut F32x4) = F32x4(quad);
                c += THREADS;
            }
        } else {
            let mut i = tid;
            while i < total {
                *((ssm_block as *mut f32).add(i as usize)) = ld_shared_f32(at(sm, lay.state, i));
                i += THREADS;
            }
        }
        let mut j = tid;
        while j < na {
            *((prm.theta as *mut f32).add((bh * na + j) as usize)) = ld_shared_f32(at(sm, lay.theta, j));
            j += THREADS;
        }
        let last = tokens % 2;
        let mut i = tid;
        while i < r_count * n {
            let (r, col) = (i / n, i % n);
            let v = ld_shared_f32(at(sm, lay.k_rot + last * k_stride, i));
            X::store(prm.k_state, (((b * r_count + r) * heads + h) * n + col) as usize, v);
            i += THREADS;
        }
        let mut i = tid;
        while i < p {
            X::store(prm.v_state, (bh * p + i) as usize, ld_shared_f32(at(sm, lay.v + last * v_stride, i)));
            i += THREADS;
        }
    }
}


macro_rules! decode_entry {
    ($($name:ident: $x:ty, $r:literal;)*) => {$(
        /// Decode entry point (activation type and rank in the name); see the module docs.
        ///
        /// # Safety
        /// See the module's launch contract.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(params: DecodeParams) {
            // SAFETY: forwarded launch contract.
            unsafe { decode::<$x, $r>(&params) }
        }
    )*};
}

decode_entry! {
    decode_f32_r1: f32, 1;
    decode_f32_r2: f32, 2;
    decode_f32_r4: f32, 4;
    decode_f32_r8: f32, 8;
    decode_bf16_r1: crate::elem::Bf16, 1;
    decode_bf16_r2: crate::elem::Bf16, 2;
    decode_bf16_r4: crate::elem::Bf16, 4;
    decode_bf16_r8: crate::elem::Bf16, 8;
}
