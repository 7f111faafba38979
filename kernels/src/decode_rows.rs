//! Mamba-3 MIMO decode with the state in registers: the recurrence of spec §2.1 over `T ≥ 1`
//! tokens in one launch, for `N ≤ 128`, `N % 4 == 0`.
//!
//! A block of [`DECODE_ROWS_WARPS`] warps owns `8·rows_per_warp` (≤ 32) consecutive state rows
//! of one (head, batch row); the rows of a (b, h) are split over `⌈P / rows⌉` blocks, so a small
//! batch still covers the SMs (the host runs this kernel for few sequence-heads; the
//! shared-memory kernel of `decode.rs` is faster once B·H blocks fill the GPU). A warp owns
//! `rows_per_warp` (≤ 4) rows and a lane one 16-byte quad of columns of each: the warp loads its
//! rows with coalesced `ld.global.v4` (all in flight at once, no shared-memory round trip) before
//! anything else, keeps them in registers for every token of the call and stores them after the
//! last update; the first token's inputs and the staging of this head's biases and per-row
//! parameters go out with them, so the first token waits for one memory latency (two in the
//! general instantiations, where k̂_prev is a register load whose store ptxas places ahead of the
//! row parameters' loads). Per token the
//! block issues all its global loads before its first barrier and computes, once, the angles (one
//! `sincos` per angle, shared by q and k of every rank), the rotated q̂ and k̂ and the per-row
//! weights into shared memory; every lane then reads its own quad of k̂_prev, k̂ and q̂ of every
//! rank (conflict-free `ld.shared.v4`), and per row the weights are a broadcast. The read-out of
//! a row is a warp reduction of R values ([`warp_reduce::sum_transposed`]); the outputs read
//! shared memory only.
//!
//! The small states θ and k̂_prev are read by every block of a (b, h) and written once: after
//! reading them each block bumps the (b, h)'s arrival counter, and the last one to arrive (all
//! others have read them by then) writes them back and resets the counter, so a captured graph
//! replays with the counters at zero. Nothing waits on another block.
//!
//! # Launch contract
//! Grid `(H·⌈P / (8·rows_per_warp)⌉, B)`, block `32·DECODE_ROWS_WARPS`, dynamic shared memory
//! `DecodeRowsSmem::new(R, N, 8·rows_per_warp, Na)` bytes; `N % 4 == 0`, `N ≤ 128`,
//! `1 ≤ rows_per_warp ≤ decode_rows_max_per_warp(R)`; `arrivals` given whenever there is more
//! than one block per (b, h); fused-norm mode only with one block per (b, h); every pointer of
//! [`DecodeParams`] valid for its documented shape (the host validates).

use mamba3_abi::{
    decode_rows_max_per_warp, decode_rows_weight_stride, output_mode, rotation, DecodeParams,
    DecodeRowsSmem, DECODE_ROWS_WARPS,
};

use crate::angles::{advance, reduced_f32, stored_f32};
use crate::arch::cp_async::{commit_group, cp_async_ca_8, cp_async_cg_16, wait_group};
use crate::arch::float::fma_rn;
use crate::arch::global::{
    atom_add_acq_rel_gpu_u32, ld_global_f32, ld_global_nc_f32, ld_global_v4_f32, st_global_f32,
    st_global_u32, st_global_v4_f32,
};
use crate::arch::sreg::{
    block_x, block_y, ld_shared_f32, ld_shared_u32, ld_shared_v4_f32, opaque_u32, smem_base,
    st_shared_f32, st_shared_v4_f32, sync_threads, thread_x,
};
use crate::elem::Elem;
use crate::geometry::Geometry;
#[cfg(target_arch = "nvptx64")]
use crate::geometry::{AnyGeometry, FixedGeometry};
use crate::math::{exp, rsqrt, sigmoid, silu, sincos};
use crate::smem::at;
use crate::warp_reduce;

const THREADS: u32 = 32 * DECODE_ROWS_WARPS;
/// State rows a warp holds at most ([`decode_rows_max_per_warp`] of every rank).
const MAX_ROWS: usize = 4;
/// Room for the rotation items (rank, pair) of a thread: `R·N/2 ≤ R·64`, at most 2 per thread.
const ROT_ITEMS: usize = 2;

/// One token's global inputs of a thread (see `load_token` in [`decode_rows`]); activations as
/// loaded ([`Elem::load_raw`]), converted where they are used, so that a warp does not wait for
/// the first token's loads before it has issued the setup's.
struct TokenInputs<X: Elem> {
    dt: f32,
    adt: f32,
    trap: X::Raw,
    logit: f32,
    rot: [[X::Raw; 4]; ROT_ITEMS],
    v: [X::Raw; 2],
    z: X::Raw,
}

impl<X: Elem> Default for TokenInputs<X> {
    fn default() -> Self {
        TokenInputs {
            dt: 0.0,
            adt: 0.0,
            trap: X::Raw::default(),
            logit: 0.0,
            rot: [[X::Raw::default(); 4]; ROT_ITEMS],
            v: [X::Raw::default(); 2],
            z: X::Raw::default(),
        }
    }
}

/// Rotation items per thread at rank `r`: `⌈r·64 / THREADS⌉`.
const fn rot_items(r: usize) -> usize {
    (r * 64).div_ceil(THREADS as usize)
}

/// Byte address of f32 element `i` of a global tensor.
#[inline(always)]
fn gf(base: u64, i: u32) -> u64 {
    base + 4 * i as u64
}

/// The decode body for activation type `X` and rank `R`.
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn decode_rows<X: Elem, const R: usize, G: Geometry>(prm: &DecodeParams) {
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (heads, tokens) = (prm.heads, prm.tokens);
    let (n, p, na) = G::dims(prm.n, prm.p, prm.na);
    let r_count = R as u32;
    let rows_per_warp = prm.rows_per_warp;
    let block_rows = DECODE_ROWS_WARPS * rows_per_warp;
    let splits = p.div_ceil(block_rows);
    let (h, split) = (block_x() / splits, block_x() % splits);
    let b = block_y();
    let bh = b * heads + h;
    let first_row = split * block_rows;
    let rows_here = block_rows.min(p - first_row);
    let group = h / (heads / prm.groups);
    let half_n = n / 2;
    let lay = DecodeRowsSmem::new(r_count, n, block_rows, na);
    let sm = smem_base();
    let w_stride = decode_rows_weight_stride(r_count);
    let k_stride = r_count * n;
    let has_z = prm.z != 0;
    let norm = prm.mode == output_mode::FUSED_NORM;
    // This warp's rows (local to the block) and this lane's quad of columns.
    let warp_first = warp * rows_per_warp;
    let warp_rows = if warp_first < rows_here {
        rows_per_warp.min(rows_here - warp_first)
    } else {
        0
    };
    let col = 4 * lane;
    let active = col < n;
    let warp_state =
        prm.ssm + 4 * ((bh * p + first_row + warp_first) as u64 * n as u64 + col as u64);

    // SAFETY (whole body): indices stay inside the shapes of the launch contract; shared offsets
    // inside `lay`; barriers are reached by every thread (no early return); shuffles by whole warps.
    unsafe {
        // The state rows, the first token's inputs and the setup's loads go out before the first
        // shared-memory store (a store of a loaded value stalls the warp until it lands, and every
        // later load behind it); the first token's activations stay raw until they are used (a
        // bf16 widening right after its load was such a wait, ahead of the state loads), and
        // k̂_prev comes by `cp.async` in the fixed instantiations (below). Each later token's
        // prologue issues all of its own loads before its first barrier.
        // --- The warp's state rows, all loads in flight at once ---
        let mut state = [[0.0f32; 4]; MAX_ROWS];
        let rows_cap = decode_rows_max_per_warp(r_count) as usize;
        if active {
            for (i, s) in state.iter_mut().enumerate() {
                if i < rows_cap && (i as u32) < warp_rows {
                    *s = ld_global_v4_f32(warp_state + 4 * (i as u32 * n) as u64);
                }
            }
        }
        let row_items = rows_here * r_count;
        // The (rank, pair) of rotation item `k` of thread `tid` and its two columns.
        let pair_of = |k: usize, tid: u32| {
            let item = tid + k as u32 * THREADS;
            let (r, i) = (item / half_n, item % half_n);
            let (n0, n1) = if prm.rotation == rotation::PAIRWISE {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + half_n)
            };
            (item < r_count * half_n, r, i, n0, n1)
        };
        // Token `t`'s global inputs for thread `tid`: the scalars, the angle logit, raw q and k of
        // its rotation items, and raw v (current and previous token) and z of its (row, rank)
        // item (`row_items ≤ 32·8 = THREADS`, so a thread has at most one item).
        let load_token = |t: u32, tid: u32| -> TokenInputs<X> {
            let scalar = bh * tokens + t;
            let token_hp = ((b * tokens + t) * heads + h) * p;
            let angle = THREADS - 1 - tid;
            let mut inp = TokenInputs::<X> {
                dt: ld_global_nc_f32(gf(prm.dt, scalar)),
                adt: ld_global_nc_f32(gf(prm.adt, scalar)),
                trap: X::load_raw(prm.trap, scalar as usize),
                ..TokenInputs::default()
            };
            if angle < na {
                inp.logit =
                    ld_global_nc_f32(gf(prm.angles, ((b * tokens + t) * heads + h) * na + angle));
            }
            for (k, v4) in inp.rot.iter_mut().enumerate().take(rot_items(R)) {
                let (valid, r, _, n0, n1) = pair_of(k, tid);
                if valid {
                    let qk_row = (((b * tokens + t) * r_count + r) * prm.groups + group) * n;
                    *v4 = [
                        X::load_raw(prm.q, (qk_row + n0) as usize),
                        X::load_raw(prm.q, (qk_row + n1) as usize),
                        X::load_raw(prm.k, (qk_row + n0) as usize),
                        X::load_raw(prm.k, (qk_row + n1) as usize),
                    ];
                }
            }
            if tid < row_items {
                let (item_i, item_r) = (tid / r_count, tid % r_count);
                let item_row = first_row + item_i;
                inp.v[0] = X::load_raw(prm.v, (token_hp + item_row) as usize);
                inp.v[1] = if t == 0 {
                    X::load_raw(prm.v_state, (bh * p + item_row) as usize)
                } else {
                    X::load_raw(prm.v, (token_hp - heads * p + item_row) as usize)
                };
                if has_z && item_r == 0 {
                    inp.z = X::load_raw(prm.z, (token_hp + item_row) as usize);
                }
            }
            inp
        };
        // The general rank-4 instantiations sit at the 128-register cap (two blocks per SM) and
        // spill with the first token's inputs held through the setup: they load them in the
        // token loop, a second memory latency.
        let early = G::DIMS.is_some() || R != 4;
        let mut inp = if early {
            load_token(0, tid)
        } else {
            TokenInputs::default()
        };
        // --- Small states: θ (a thread per angle, in a register for the whole call), k̂_prev ---
        // Angle `THREADS − 1 − tid`: the last warps own the angles, whose f64 step is a long
        // dependency chain, so it overlaps the first warps' per-row weights.
        let angle = THREADS - 1 - tid;
        let mut theta = if angle < na {
            ld_global_f32(gf(prm.theta, bh * na + angle)) as f64
        } else {
            0.0
        };
        let (p_mimo_v, p_mimo_z, p_out_w) = (
            lay.row_params,
            lay.row_params + row_items,
            lay.row_params + 2 * row_items,
        );
        // The setup's loads: this head's biases (contiguous `(R,N)` f32 blocks)
        // are copied by `cp.async` in 16-byte units; k̂_prev (a quad of columns per item) and the
        // per-row parameters (mimo_v, mimo_z, mimo_o·norm weight of one (row, rank) per item)
        // are loaded into registers, all before the shared-memory stores of a round.
        let quads = k_stride / 4;
        // k̂_prev by `cp.async` in the fixed-geometry instantiations (the batch-1 kernels, one
        // memory latency fewer); the general ones load it into registers (the widening step
        // pushed the rank-2 and rank-4 kernels over their register cap).
        let kprev_async = G::DIMS.is_some();
        let mut u = tid;
        while u < 2 * quads {
            let (region, src) = if u < quads {
                (lay.bias, prm.q_bias)
            } else {
                (lay.bias + k_stride, prm.k_bias)
            };
            let e = 4 * (u % quads);
            cp_async_cg_16(at(sm, region, e), gf(src, h * k_stride + e) as *const u8);
            u += THREADS;
        }
        let mut quad = tid;
        let mut item = tid;
        while quad < quads || item < row_items {
            let e = 4 * quad;
            let (r, c) = (e / n, e % n);
            let src = ((b * r_count + r) * heads + h) * n + c;
            let k_prev = if quad < quads && !kprev_async {
                X::load4(prm.k_state, src as usize)
            } else {
                [0.0; 4]
            };
            if quad < quads && kprev_async {
                // k̂_prev by `cp.async` (no register load whose store ptxas would hoist, with its
                // wait, above the row parameters' loads): f32 straight into its slot, bf16 words
                // into the q̂ region, widened by the same thread after its `wait_group`.
                if X::BYTES == 4 {
                    cp_async_cg_16(at(sm, lay.k_rot, e), gf(prm.k_state, src) as *const u8);
                } else {
                    cp_async_ca_8(
                        at(sm, lay.q_rot, e / 2),
                        (prm.k_state + 2 * src as u64) as *const u8,
                    );
                }
            }
            let mut rp = [0.0f32, 0.0, 1.0, 1.0];
            if item < row_items {
                let (ri, r) = (item / r_count, item % r_count);
                let g = (h * r_count + r) * p + first_row + ri;
                rp[0] = ld_global_nc_f32(gf(prm.mimo_v, g));
                if has_z {
                    rp[1] = ld_global_nc_f32(gf(prm.mimo_z, g));
                }
                if prm.mimo_o != 0 {
                    rp[2] = ld_global_nc_f32(gf(prm.mimo_o, g));
                }
                if norm {
                    rp[3] = ld_global_nc_f32(gf(prm.norm_weight, h * p + first_row + ri));
                }
            }
            if quad < quads && !kprev_async {
                st_shared_v4_f32(at(sm, lay.k_rot, e), k_prev);
            }
            if item < row_items {
                st_shared_f32(at(sm, p_mimo_v, item), rp[0]);
                st_shared_f32(at(sm, p_mimo_z, item), rp[1]);
                st_shared_f32(at(sm, p_out_w, item), rp[3] * rp[2]);
            }
            quad += THREADS;
            item += THREADS;
        }
        commit_group();
        let d_skip = if prm.d != 0 {
            ld_global_nc_f32(gf(prm.d, h))
        } else {
            0.0
        };
        let mut arrived = 0u32;
        // No barrier here: before the first token's barrier a thread reads only the row
        // parameters it staged itself, and that barrier (after each thread's `wait_group`)
        // publishes the rest of the setup.

        for t in 0..tokens {
            let (prev, cur) = (t % 2, (t + 1) % 2);
            let token_hp = ((b * tokens + t) * heads + h) * p;
            // Zero that the compiler cannot see through: indices derived from `tid` and the warp's
            // rows are recomputed every token instead of hoisted out of the loop, where their
            // addresses (two registers each) would stay live next to the state.
            let fresh = opaque_u32(t) - t;
            let tid = tid + fresh;
            let warp_first = warp_first + fresh;
            let col = col + fresh;
            if t > 0 || !early {
                inp = load_token(t, tid);
            }
            let TokenInputs {
                dt,
                adt,
                trap,
                logit,
                rot,
                v: item_v,
                z,
            } = inp;
            let (trap, z) = (X::widen(trap), X::widen(z));
            let item_v = [X::widen(item_v[0]), X::widen(item_v[1])];
            let angle = THREADS - 1 - tid;
            let (item_i, item_r) = (tid / r_count, tid % r_count);
            if tid < row_items && item_r == 0 {
                if has_z {
                    st_shared_f32(at(sm, lay.z, item_i), z);
                }
                st_shared_f32(at(sm, lay.v, item_i), item_v[0]);
            }
            let alpha = exp(adt);
            let lambda = sigmoid(trap);
            let beta = (1.0 - lambda) * dt * alpha;
            let gamma = lambda * dt;

            // --- Per-row weights of the block's rows ---
            if tid < row_items {
                let (i, r) = (item_i, item_r);
                let [vc, vp] = item_v;
                let mv = ld_shared_f32(at(sm, p_mimo_v, tid));
                st_shared_f32(at(sm, lay.weights, i * w_stride + r), beta * vp * mv);
                st_shared_f32(
                    at(sm, lay.weights, i * w_stride + r_count + r),
                    gamma * vc * mv,
                );
            }
            // --- Angles: θ += π·tanh(logit)·Δ in [0, 2π) (f64 across the call), one sincos per angle ---
            if angle < na {
                theta = advance(theta, logit, dt);
                let (s, c) = sincos(reduced_f32(theta));
                st_shared_f32(at(sm, lay.sin, angle), s);
                st_shared_f32(at(sm, lay.cos, angle), c);
            }
            wait_group::<0>();
            if t == 0 && kprev_async && X::BYTES != 4 {
                // This thread's bf16 k̂_prev words (copied by itself) into the f32 slot; the
                // count formed here (held from the setup, it spilled in the general kernels).
                let quads = opaque_u32(k_stride) / 4;
                let mut quad = tid;
                while quad < quads {
                    let e = 4 * quad;
                    let raw = [
                        ld_shared_u32(at(sm, lay.q_rot, e / 2)),
                        ld_shared_u32(at(sm, lay.q_rot, e / 2 + 1)),
                    ];
                    let wide = [
                        f32::from_bits(raw[0] << 16),
                        f32::from_bits(raw[0] & 0xffff_0000),
                        f32::from_bits(raw[1] << 16),
                        f32::from_bits(raw[1] & 0xffff_0000),
                    ];
                    st_shared_v4_f32(at(sm, lay.k_rot, e), wide);
                    quad += THREADS;
                }
            }
            sync_threads();
            // Every thread of the block has read θ and k̂_prev (first token): arrive. The count
            // is read only at the end, so the atomic's latency hides behind the token's work; its
            // acquire half is what orders the last arriver's write-back after the others' reads
            // (a fence before the write-back would wait for this thread's state stores).
            if t == 0 && tid == 0 && splits > 1 {
                arrived = atom_add_acq_rel_gpu_u32(prm.arrivals + 4 * bh as u64, 1);
            }

            // --- Bias, then rotation, of q and k: a thread per (rank, pair) ---
            let k_prev = lay.k_rot + prev * k_stride;
            let k_cur = lay.k_rot + cur * k_stride;
            for (k, v4) in rot.iter().enumerate().take(rot_items(R)) {
                let (valid, r, i, n0, n1) = pair_of(k, tid);
                if valid {
                    let (s, c) = if i < na {
                        (
                            ld_shared_f32(at(sm, lay.sin, i)),
                            ld_shared_f32(at(sm, lay.cos, i)),
                        )
                    } else {
                        (0.0, 1.0)
                    };
                    let bias = |v: u32, col: u32| {
                        ld_shared_f32(at(sm, lay.bias + v * k_stride, r * n + col))
                    };
                    let [q0, q1, k0, k1] = [
                        X::widen(v4[0]),
                        X::widen(v4[1]),
                        X::widen(v4[2]),
                        X::widen(v4[3]),
                    ];
                    let (q0, q1) = (q0 + bias(0, n0), q1 + bias(0, n1));
                    let (k0, k1) = (k0 + bias(1, n0), k1 + bias(1, n1));
                    st_shared_f32(at(sm, lay.q_rot, r * n + n0), q0 * c - q1 * s);
                    st_shared_f32(at(sm, lay.q_rot, r * n + n1), q0 * s + q1 * c);
                    st_shared_f32(at(sm, k_cur, r * n + n0), k0 * c - k1 * s);
                    st_shared_f32(at(sm, k_cur, r * n + n1), k0 * s + k1 * c);
                }
            }
            sync_threads();

            // --- State update and read-out: a warp per row, a lane per quad of columns ---
            // k̂_prev and k̂ stay in registers over the rows; q̂ is re-read per row (a register
            // budget of two blocks per SM).
            let mut kp = [[0.0f32; 4]; R];
            let mut kc = [[0.0f32; 4]; R];
            if active {
                for r in 0..R {
                    let off = r as u32 * n + col;
                    kp[r] = ld_shared_v4_f32(at(sm, k_prev, off));
                    kc[r] = ld_shared_v4_f32(at(sm, k_cur, off));
                }
            }
            let spread = 32 / r_count;
            // One row per iteration, the rows rotating through `state[0]`: a rolled loop keeps
            // the compiler from interleaving rows (whose loads would need registers the state
            // holds); the rotation is register moves, and `rows_cap` turns restore the order.
            let mut i = 0;
            while i < opaque_u32(rows_cap as u32) {
                if i < warp_rows {
                    let s = &mut state[0];
                    let local = warp_first + i;
                    let w_row = at(sm, lay.weights, local * w_stride);
                    let mut w = [0.0f32; 16];
                    for c in 0..(2 * R).div_ceil(4) {
                        let quad = ld_shared_v4_f32(w_row + 16 * c as u32);
                        w[4 * c..4 * c + 4].copy_from_slice(&quad);
                    }
                    for e in s.iter_mut() {
                        *e *= alpha;
                    }
                    for r in 0..R {
                        for e in 0..4 {
                            s[e] = fma_rn(w[r], kp[r][e], fma_rn(w[R + r], kc[r][e], s[e]));
                        }
                    }
                    let mut acc = [0.0f32; R];
                    for (r, a) in acc.iter_mut().enumerate() {
                        let qv = if active {
                            ld_shared_v4_f32(at(sm, lay.q_rot, r as u32 * n + col))
                        } else {
                            [0.0; 4]
                        };
                        for e in 0..4 {
                            *a = fma_rn(s[e], qv[e], *a);
                        }
                    }
                    let y = warp_reduce::sum_transposed(acc, lane);
                    if lane % spread == 0 {
                        st_shared_f32(at(sm, lay.y, (lane / spread) * block_rows + local), y);
                    }
                }
                state = core::array::from_fn(|j| state[(j + 1) % MAX_ROWS]);
                i += 1;
            }
            if t + 1 == tokens && active {
                // The state is final: store it now, so it is not live through the outputs.
                for (i, s) in state.iter().enumerate() {
                    if i < rows_cap && (i as u32) < warp_rows {
                        st_global_v4_f32(warp_state + 4 * (i as u32 * n) as u64, *s);
                    }
                }
            }
            if t + 1 == tokens && tid == 0 {
                // The last block of the (b, h) to arrive owns the write-back of θ and k̂ (every
                // other block has read them) and resets the counter for the next launch.
                let owner = splits == 1 || arrived == splits - 1;
                if owner && splits > 1 {
                    st_global_u32(prm.arrivals + 4 * bh as u64, 0);
                }
                st_shared_f32(at(sm, lay.owner, 0), if owner { 1.0 } else { 0.0 });
            }
            sync_threads();

            // --- Outputs: D, gate, optional head-wise RMSNorm over P per rank, contraction ---
            let y_full = |r: u32, i: u32| {
                let skip = d_skip
                    * ld_shared_f32(at(sm, lay.v, i))
                    * ld_shared_f32(at(sm, p_mimo_v, i * r_count + r));
                skip + ld_shared_f32(at(sm, lay.y, r * block_rows + i))
            };
            let mut rstd = [1.0f32; R];
            if norm {
                // One block holds every row (launch contract).
                let mut r = warp;
                while r < r_count {
                    let mut sq = 0.0f32;
                    let mut i = lane;
                    while i < rows_here {
                        let v = y_full(r, i);
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
                    r += DECODE_ROWS_WARPS;
                }
                sync_threads();
                for (r, x) in rstd.iter_mut().enumerate() {
                    *x = ld_shared_f32(at(sm, lay.rstd, r as u32));
                }
            }
            let gate = |r: u32, i: u32| {
                if has_z {
                    silu(
                        ld_shared_f32(at(sm, lay.z, i))
                            * ld_shared_f32(at(sm, p_mimo_z, i * r_count + r)),
                    )
                } else {
                    1.0
                }
            };
            if prm.mode == output_mode::PREREDUCE {
                let mut item = tid;
                while item < row_items {
                    let (i, r) = (item / r_count, item % r_count);
                    let y = y_full(r, i) * gate(r, i);
                    X::store(
                        prm.out,
                        ((((b * tokens + t) * r_count + r) * heads + h) * p + first_row + i)
                            as usize,
                        y,
                    );
                    item += THREADS;
                }
            } else {
                let mut i = tid;
                while i < rows_here {
                    let mut out = 0.0f32;
                    for (r, &rs) in rstd.iter().enumerate() {
                        let r = r as u32;
                        out += y_full(r, i)
                            * rs
                            * gate(r, i)
                            * ld_shared_f32(at(sm, p_out_w, i * r_count + r));
                    }
                    X::store(prm.out, (token_hp + first_row + i) as usize, out);
                    i += THREADS;
                }
            }
            if t + 1 < tokens {
                sync_threads();
            }
        }

        // --- Write back: raw v of the last token; θ and k̂ by the owner ---
        let mut i = tid;
        while i < rows_here {
            X::store(
                prm.v_state,
                (bh * p + first_row + i) as usize,
                ld_shared_f32(at(sm, lay.v, i)),
            );
            i += THREADS;
        }
        if ld_shared_f32(at(sm, lay.owner, 0)) != 0.0 {
            if angle < na {
                st_global_f32(gf(prm.theta, bh * na + angle), stored_f32(theta));
            }
            let last = lay.k_rot + (tokens % 2) * k_stride;
            let mut i = tid;
            while i < k_stride {
                let (r, c) = (i / n, i % n);
                X::store(
                    prm.k_state,
                    (((b * r_count + r) * heads + h) * n + c) as usize,
                    ld_shared_f32(at(sm, last, i)),
                );
                i += THREADS;
            }
        }
    }
}

// Entry points exist only on the device, so that the host test `tests/decode_emulated.rs` can
// compile this file against emulated primitives.
macro_rules! decode_rows_entry {
    ($($name:ident: $x:ty, $r:literal, $g:ty;)*) => {$(
        /// Register-resident decode entry point (activation type and rank in the name); see the
        /// module docs.
        ///
        /// # Safety
        /// See the module's launch contract.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(params: DecodeParams) {
            crate::arch::grid_dependency::dependent_launch_prologue();
            // SAFETY: forwarded launch contract.
            unsafe { decode_rows::<$x, $r, $g>(&params) }
        }
    )*};
}

decode_rows_entry! {
    decode_rows_f32_r1: f32, 1, AnyGeometry;
    decode_rows_f32_r2: f32, 2, AnyGeometry;
    decode_rows_f32_r4: f32, 4, AnyGeometry;
    decode_rows_f32_r8: f32, 8, AnyGeometry;
    decode_rows_bf16_r1: crate::elem::Bf16, 1, AnyGeometry;
    decode_rows_bf16_r2: crate::elem::Bf16, 2, AnyGeometry;
    decode_rows_bf16_r4: crate::elem::Bf16, 4, AnyGeometry;
    decode_rows_bf16_r8: crate::elem::Bf16, 8, AnyGeometry;
    decode_rows_fixed_f32_r4_n128_p64_na32: f32, 4, FixedGeometry<128, 64, 32, 0>;
    decode_rows_fixed_bf16_r4_n128_p64_na32: crate::elem::Bf16, 4, FixedGeometry<128, 64, 32, 0>;
}
