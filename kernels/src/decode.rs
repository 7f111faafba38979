//! Mamba-3 MIMO decode: the recurrence of spec §2.1 advanced over `T ≥ 1` tokens in one launch.
//!
//! One block per (head, batch row), [`DECODE_WARPS`] warps. The block stages the (P, N) state in
//! shared memory once (`cp.async`), runs every token of the call on chip — rotary + bias, the
//! trapezoidal update with the previous token's rotated k and raw v, the read-out, D, gate, norm and
//! contraction — and writes the state back once. Within a token a lane owns two state rows of one
//! column split (the splits fill the warps when P is small), so the rank axis sits in registers
//! (`R` is a const generic), the read-out needs no cross-lane reduction, and the shared vectors
//! k̂_prev, k̂, q̂ are warp-uniform broadcast loads.
//!
//! # Launch contract
//! Grid `(H, B)`, block `32·DECODE_WARPS`, dynamic shared memory `DecodeSmem::new(R, N, P, Na)`
//! bytes; every pointer of [`DecodeParams`] valid for its documented shape (the host validates).

use mamba3_abi::{
    align4, decode_column_splits, decode_state_stride, output_mode, rotation, DecodeParams,
    DecodeSmem, DECODE_WARPS,
};

use crate::angles::{advance, reduced_f32, stored_f32};
use crate::arch::cp_async;
use crate::arch::float::fma_rn;
use crate::arch::sreg::{
    block_x, block_y, ld_shared_f32, ld_shared_v4_f32, opaque_u32, smem_base, st_shared_f32,
    st_shared_v4_f32, sync_threads, thread_x,
};
use crate::elem::Elem;
use crate::geometry::Geometry;
#[cfg(target_arch = "nvptx64")]
use crate::geometry::{AnyGeometry, FixedGeometry};
use crate::math::{exp, rsqrt, sigmoid, silu, sincos};
use crate::smem::{at, ld_shared_f64, st_shared_f64};
use crate::warp_reduce;

const THREADS: u32 = 32 * DECODE_WARPS;

/// 16-byte aligned f32 quad for vectorized global stores.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct F32x4([f32; 4]);

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
pub unsafe fn decode<X: Elem, const R: usize, G: Geometry>(prm: &DecodeParams) {
    let (h, b) = (block_x(), block_y());
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (heads, tokens) = (prm.heads, prm.tokens);
    let (n, p, na) = G::dims(prm.n, prm.p, prm.na);
    let r_count = R as u32;
    // Outside the state update, loops over the ranks run to an opaque bound: unrolled, they would
    // keep every rank's values live at once and raise the whole kernel's register count.
    let ranks = opaque_u32(r_count);
    let group = h / (heads / prm.groups);
    let lay = DecodeSmem::new(r_count, n, p, na);
    let sm = smem_base();
    let bh = b * heads + h;
    let half_n = n / 2;
    let rp = r_count * p;
    let (w_mimo_v, w_mimo_z, w_mimo_o, w_norm) = (
        lay.weights,
        lay.weights + rp,
        lay.weights + 2 * rp,
        lay.weights + 3 * rp,
    );
    let (w_prev, w_cur) = (lay.row_weights, lay.row_weights + rp);
    let has_z = prm.z != 0;
    let k_stride = align4(r_count * n);
    let v_stride = align4(p);

    // SAFETY (whole body): indices stay inside the shapes of the launch contract; shared offsets
    // inside `lay`; barriers are reached by every thread (no early return).
    unsafe {
        // --- Stage the state (cp.async), this head's weights and the small states ---
        let ssm_block = prm.ssm + 4 * (bh as u64) * (p * n) as u64;
        // Stage the state (cp.async; rows padded to `stride`), awaited before the first update.
        let stride = decode_state_stride(n);
        let vectorized = n % 4 == 0;
        if vectorized {
            // A warp per row, a lane per 16-byte quad: no index division.
            let mut row = warp;
            while row < p {
                let mut cq = lane;
                while cq < n / 4 {
                    let dst = at(sm, lay.state, row * stride + 4 * cq);
                    let src = ssm_block + 4 * (row * n + 4 * cq) as u64;
                    cp_async::cp_async_cg_16(dst, src as *const u8);
                    cq += 32;
                }
                row += DECODE_WARPS;
            }
            cp_async::commit_group();
        } else {
            let mut i = tid;
            while i < p * n {
                st_shared_f32(at(sm, lay.state, i), ld(ssm_block, i));
                i += THREADS;
            }
        }
        let mut i = tid;
        while i < rp {
            let g = h * rp + i;
            st_shared_f32(at(sm, w_mimo_v, i), ld(prm.mimo_v, g));
            st_shared_f32(
                at(sm, w_mimo_z, i),
                if has_z { ld(prm.mimo_z, g) } else { 0.0 },
            );
            st_shared_f32(
                at(sm, w_mimo_o, i),
                if prm.mimo_o != 0 {
                    ld(prm.mimo_o, g)
                } else {
                    0.0
                },
            );
            i += THREADS;
        }
        let mut i = tid;
        while i < p {
            let w = if prm.norm_weight != 0 {
                ld(prm.norm_weight, h * p + i)
            } else {
                0.0
            };
            st_shared_f32(at(sm, w_norm, i), w);
            // Previous-token raw v goes to buffer 0; token t reads buffer t % 2, writes (t + 1) % 2.
            st_shared_f32(
                at(sm, lay.v, i),
                X::load(prm.v_state, (bh * p + i) as usize),
            );
            i += THREADS;
        }
        let mut j = tid;
        while j < na {
            st_shared_f64(at(sm, lay.theta, 2 * j), ld(prm.theta, bh * na + j) as f64);
            j += THREADS;
        }
        for r in 0..ranks {
            let mut col = tid;
            while col < n {
                let k = X::load(
                    prm.k_state,
                    (((b * r_count + r) * heads + h) * n + col) as usize,
                );
                st_shared_f32(at(sm, lay.k_rot, r * n + col), k);
                col += THREADS;
            }
        }
        let d_skip = if prm.d != 0 { ld(prm.d, h) } else { 0.0 };
        cp_async::wait_group::<0>();
        sync_threads();

        for t in 0..tokens {
            let (prev, cur) = (t % 2, (t + 1) % 2);
            let k_prev = lay.k_rot + prev * k_stride;
            let k_cur = lay.k_rot + cur * k_stride;
            let v_prev = lay.v + prev * v_stride;
            let v_cur = lay.v + cur * v_stride;
            let scalar = bh * tokens + t;
            let dt = ld(prm.dt, scalar);
            // --- Angles (θ += π·tanh(logit)·Δ in [0, 2π), f64 across the call) and their sines and
            // cosines; from the last thread down, so that their long f64 chain overlaps the first
            // warps' per-row weights ---
            let mut j = THREADS - 1 - tid;
            while j < na {
                let logit = ld(prm.angles, ((b * tokens + t) * heads + h) * na + j);
                let theta = advance(ld_shared_f64(at(sm, lay.theta, 2 * j)), logit, dt);
                st_shared_f64(at(sm, lay.theta, 2 * j), theta);
                let (s, c) = sincos(reduced_f32(theta));
                st_shared_f32(at(sm, lay.theta, 2 * na + 2 * j), s);
                st_shared_f32(at(sm, lay.theta, 2 * na + 2 * j + 1), c);
                j += THREADS;
            }
            // --- Raw v, z; per-row weights ---
            let alpha = exp(ld(prm.adt, scalar));
            let lambda = sigmoid(X::load(prm.trap, scalar as usize));
            let beta = (1.0 - lambda) * dt * alpha;
            let gamma = lambda * dt;
            let token_hp = ((b * tokens + t) * heads + h) * p;

            let mut i = tid;
            while i < p {
                let vc = X::load(prm.v, (token_hp + i) as usize);
                let vp = ld_shared_f32(at(sm, v_prev, i));
                st_shared_f32(at(sm, v_cur, i), vc);
                if has_z {
                    st_shared_f32(at(sm, lay.z, i), X::load(prm.z, (token_hp + i) as usize));
                }
                for r in 0..ranks {
                    let mv = ld_shared_f32(at(sm, w_mimo_v, r * p + i));
                    st_shared_f32(at(sm, w_prev, r * p + i), beta * vp * mv);
                    st_shared_f32(at(sm, w_cur, r * p + i), gamma * vc * mv);
                }
                i += THREADS;
            }
            sync_threads();

            // --- Bias, then rotation, of q and k: one thread per (rank, pair) ---
            for r in 0..ranks {
                let mut i = tid;
                while i < half_n {
                    let (n0, n1) = if prm.rotation == rotation::PAIRWISE {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half_n)
                    };
                    let qk_row = (((b * tokens + t) * r_count + r) * prm.groups + group) * n;
                    let bias_row = (h * r_count + r) * n;
                    let q0 = X::load(prm.q, (qk_row + n0) as usize) + ld(prm.q_bias, bias_row + n0);
                    let q1 = X::load(prm.q, (qk_row + n1) as usize) + ld(prm.q_bias, bias_row + n1);
                    let k0 = X::load(prm.k, (qk_row + n0) as usize) + ld(prm.k_bias, bias_row + n0);
                    let k1 = X::load(prm.k, (qk_row + n1) as usize) + ld(prm.k_bias, bias_row + n1);
                    let (s, c) = if i < na {
                        (
                            ld_shared_f32(at(sm, lay.theta, 2 * na + 2 * i)),
                            ld_shared_f32(at(sm, lay.theta, 2 * na + 2 * i + 1)),
                        )
                    } else {
                        (0.0, 1.0)
                    };
                    st_shared_f32(at(sm, lay.q_rot, r * n + n0), q0 * c - q1 * s);
                    st_shared_f32(at(sm, lay.q_rot, r * n + n1), q0 * s + q1 * c);
                    st_shared_f32(at(sm, k_cur, r * n + n0), k0 * c - k1 * s);
                    st_shared_f32(at(sm, k_cur, r * n + n1), k0 * s + k1 * c);
                    i += THREADS;
                }
            }
            sync_threads();

            // --- State update and read-out ---
            // A lane owns two state rows (`row0`, `row0 + 32`) of one column split: their row
            // weights and R read-out sums stay in registers (no cross-lane reduction), while
            // k̂_prev, k̂ and q̂ of the current columns are warp-uniform broadcast loads shared
            // by both rows.
            let splits = decode_column_splits(p);
            let mut item = warp;
            while item < p.div_ceil(64) * splits {
                let (set, split) = (item / splits, item % splits);
                let row0 = 64 * set + lane;
                if row0 < p {
                    // A missing second row repeats the first and stores nothing.
                    let has_row1 = row0 + 32 < p;
                    let row1 = if has_row1 { row0 + 32 } else { row0 };
                    let mut wp = [[0.0f32; R]; 2];
                    let mut wc = [[0.0f32; R]; 2];
                    for (k, row) in [row0, row1].into_iter().enumerate() {
                        for r in 0..R {
                            wp[k][r] = ld_shared_f32(at(sm, w_prev, r as u32 * p + row));
                            wc[k][r] = ld_shared_f32(at(sm, w_cur, r as u32 * p + row));
                        }
                    }
                    let mut acc = [[0.0f32; R]; 2];
                    let rows = [
                        at(sm, lay.state, row0 * stride),
                        at(sm, lay.state, row1 * stride),
                    ];
                    // Byte addresses of rank r's vectors at column 0; a column adds 4 bytes.
                    let mut kp_base = [0u32; R];
                    let mut kc_base = [0u32; R];
                    let mut q_base = [0u32; R];
                    for r in 0..R {
                        kp_base[r] = at(sm, k_prev, r as u32 * n);
                        kc_base[r] = at(sm, k_cur, r as u32 * n);
                        q_base[r] = at(sm, lay.q_rot, r as u32 * n);
                    }
                    if vectorized {
                        let span = (n / 4).div_ceil(splits);
                        let first = 16 * split * span;
                        let end = 4 * n.min(4 * (split + 1) * span);
                        let mut off = first;
                        while off < end {
                            let mut s4 = [
                                ld_shared_v4_f32(rows[0] + off),
                                ld_shared_v4_f32(rows[1] + off),
                            ];
                            for row in s4.iter_mut() {
                                for v in row.iter_mut() {
                                    *v *= alpha;
                                }
                            }
                            for r in 0..R {
                                let kp = ld_shared_v4_f32(kp_base[r] + off);
                                let kc = ld_shared_v4_f32(kc_base[r] + off);
                                for k in 0..2 {
                                    for e in 0..4 {
                                        s4[k][e] = fma_rn(
                                            wp[k][r],
                                            kp[e],
                                            fma_rn(wc[k][r], kc[e], s4[k][e]),
                                        );
                                    }
                                }
                            }
                            st_shared_v4_f32(rows[0] + off, s4[0]);
                            if has_row1 {
                                st_shared_v4_f32(rows[1] + off, s4[1]);
                            }
                            for r in 0..R {
                                let q4 = ld_shared_v4_f32(q_base[r] + off);
                                for k in 0..2 {
                                    for e in 0..4 {
                                        acc[k][r] = fma_rn(s4[k][e], q4[e], acc[k][r]);
                                    }
                                }
                            }
                            off += 16;
                        }
                    } else {
                        let span = n.div_ceil(splits);
                        let end = 4 * n.min((split + 1) * span);
                        let mut off = 4 * split * span;
                        while off < end {
                            let mut s = [
                                alpha * ld_shared_f32(rows[0] + off),
                                alpha * ld_shared_f32(rows[1] + off),
                            ];
                            for r in 0..R {
                                let kp = ld_shared_f32(kp_base[r] + off);
                                let kc = ld_shared_f32(kc_base[r] + off);
                                for k in 0..2 {
                                    s[k] = fma_rn(wp[k][r], kp, fma_rn(wc[k][r], kc, s[k]));
                                }
                            }
                            st_shared_f32(rows[0] + off, s[0]);
                            if has_row1 {
                                st_shared_f32(rows[1] + off, s[1]);
                            }
                            for r in 0..R {
                                let q = ld_shared_f32(q_base[r] + off);
                                for k in 0..2 {
                                    acc[k][r] = fma_rn(s[k], q, acc[k][r]);
                                }
                            }
                            off += 4;
                        }
                    }
                    for r in 0..R {
                        let slot = (split * r_count + r as u32) * p;
                        st_shared_f32(at(sm, lay.y_part, slot + row0), acc[0][r]);
                        if has_row1 {
                            st_shared_f32(at(sm, lay.y_part, slot + row1), acc[1][r]);
                        }
                    }
                }
                item += DECODE_WARPS;
            }
            sync_threads();
            // y_r[row] = Σ over splits + D·x.
            for r in 0..ranks {
                let mut row = tid;
                while row < p {
                    let idx = r * p + row;
                    let mut y = d_skip
                        * ld_shared_f32(at(sm, v_cur, row))
                        * ld_shared_f32(at(sm, w_mimo_v, idx));
                    for sp in 0..splits {
                        y += ld_shared_f32(at(sm, lay.y_part, (sp * r_count + r) * p + row));
                    }
                    st_shared_f32(at(sm, lay.y, idx), y);
                    row += THREADS;
                }
            }
            sync_threads();

            // --- Outputs: gate, optional head-wise RMSNorm over P per rank, contraction ---
            if prm.mode == output_mode::FUSED_NORM {
                let mut r = warp;
                while r < r_count {
                    let mut sq = 0.0f32;
                    let mut i = lane;
                    while i < p {
                        let v = ld_shared_f32(at(sm, lay.y, r * p + i));
                        sq += v * v;
                        i += 32;
                    }
                    let total_sq = warp_reduce::sum(sq);
                    if lane == 0 {
                        st_shared_f32(
                            at(sm, lay.rstd, r),
                            rsqrt(total_sq / p as f32 + prm.norm_eps),
                        );
                    }
                    r += DECODE_WARPS;
                }
                sync_threads();
            }
            let gate = |r: u32, i: u32| {
                if has_z {
                    silu(
                        ld_shared_f32(at(sm, lay.z, i))
                            * ld_shared_f32(at(sm, w_mimo_z, r * p + i)),
                    )
                } else {
                    1.0
                }
            };
            if prm.mode == output_mode::PREREDUCE {
                for r in 0..ranks {
                    let mut i = tid;
                    while i < p {
                        let y = ld_shared_f32(at(sm, lay.y, r * p + i)) * gate(r, i);
                        X::store(
                            prm.out,
                            ((((b * tokens + t) * r_count + r) * heads + h) * p + i) as usize,
                            y,
                        );
                        i += THREADS;
                    }
                }
            } else {
                let norm = prm.mode == output_mode::FUSED_NORM;
                let mut i = tid;
                while i < p {
                    let w = if norm {
                        ld_shared_f32(at(sm, w_norm, i))
                    } else {
                        1.0
                    };
                    let mut out = 0.0f32;
                    for r in 0..ranks {
                        let rstd = if norm {
                            ld_shared_f32(at(sm, lay.rstd, r))
                        } else {
                            1.0
                        };
                        let y = ld_shared_f32(at(sm, lay.y, r * p + i)) * rstd;
                        out += y * w * gate(r, i) * ld_shared_f32(at(sm, w_mimo_o, r * p + i));
                    }
                    X::store(prm.out, (token_hp + i) as usize, out);
                    i += THREADS;
                }
            }
            sync_threads();
        }

        // --- Write the state back once ---
        if vectorized {
            let mut row = warp;
            while row < p {
                let mut cq = lane;
                while cq < n / 4 {
                    let quad = ld_shared_v4_f32(at(sm, lay.state, row * stride + 4 * cq));
                    *((ssm_block + 4 * (row * n + 4 * cq) as u64) as *mut F32x4) = F32x4(quad);
                    cq += 32;
                }
                row += DECODE_WARPS;
            }
        } else {
            // An opaque start: the setup's identical first test would otherwise be kept (spilled)
            // across the token loop.
            let mut i = opaque_u32(tid);
            while i < p * n {
                *((ssm_block as *mut f32).add(i as usize)) = ld_shared_f32(at(sm, lay.state, i));
                i += THREADS;
            }
        }
        let mut j = tid;
        while j < na {
            *((prm.theta as *mut f32).add((bh * na + j) as usize)) =
                stored_f32(ld_shared_f64(at(sm, lay.theta, 2 * j)));
            j += THREADS;
        }
        let last = tokens % 2;
        for r in 0..ranks {
            let mut col = tid;
            while col < n {
                let v = ld_shared_f32(at(sm, lay.k_rot + last * k_stride, r * n + col));
                X::store(
                    prm.k_state,
                    (((b * r_count + r) * heads + h) * n + col) as usize,
                    v,
                );
                col += THREADS;
            }
        }
        let mut i = tid;
        while i < p {
            X::store(
                prm.v_state,
                (bh * p + i) as usize,
                ld_shared_f32(at(sm, lay.v + last * v_stride, i)),
            );
            i += THREADS;
        }
    }
}

// Entry points exist only on the device, so that the host test `tests/decode_emulated.rs` can
// compile this file against emulated primitives (threads, barriers, checked shared and global
// memory).
macro_rules! decode_entry {
    ($($name:ident: $x:ty, $r:literal, $g:ty;)*) => {$(
        /// Decode entry point (activation type and rank in the name); see the module docs.
        ///
        /// # Safety
        /// See the module's launch contract.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(params: DecodeParams) {
            crate::arch::grid_dependency::dependent_launch_prologue();
            // SAFETY: forwarded launch contract.
            unsafe { decode::<$x, $r, $g>(&params) }
        }
    )*};
}

decode_entry! {
    decode_f32_r1: f32, 1, AnyGeometry;
    decode_f32_r2: f32, 2, AnyGeometry;
    decode_f32_r4: f32, 4, AnyGeometry;
    decode_f32_r8: f32, 8, AnyGeometry;
    decode_bf16_r1: crate::elem::Bf16, 1, AnyGeometry;
    decode_bf16_r2: crate::elem::Bf16, 2, AnyGeometry;
    decode_bf16_r4: crate::elem::Bf16, 4, AnyGeometry;
    decode_bf16_r8: crate::elem::Bf16, 8, AnyGeometry;
    decode_fixed_f32_r4_n128_p64_na32: f32, 4, FixedGeometry<128, 64, 32, 0>;
    decode_fixed_bf16_r4_n128_p64_na32: crate::elem::Bf16, 4, FixedGeometry<128, 64, 32, 0>;
}
