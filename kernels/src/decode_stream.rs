//! Mamba-3 MIMO decode of one token with the state streamed through registers: the recurrence of
//! spec §2.1 for `T = 1`, `N ≤ 128`, `N % 4 == 0`, gated or prereduce output.
//!
//! Every warp owns `rows_per_warp` consecutive state rows of one (head, batch row) and streams
//! them alone (at most one block barrier, in the prologue below), so an SM overlaps many warps'
//! memory waits instead of stepping a block through phases. A lane owns one 16-byte quad of
//! columns. Lane j advances angles j and j + 32 (in f64, one `sincos` each) and the lanes take
//! their columns' sines and cosines by shuffles; a lane then forms the rotated, biased q̂ and k̂ of
//! its columns itself (the partner column of a rotation pair loaded directly, two ranks' loads in
//! flight at a time) into the warp's shared region, and keeps k̂ and k̂_prev in registers. The
//! prologue's small loads go out before the state rows' copies. The rows stream
//! through a ring in shared memory: `cp.async` keeps [`DECODE_STREAM_DEPTH`] rows in flight per
//! warp at no register cost (each lane copies and reads only its own quad, so no barrier orders
//! them). Per group of [`DECODE_STREAM_GROUP`] rows, each lane first stages the weights of two
//! rows; the rows then go two at a time (update, R read-out partial sums each, one transposing
//! warp reduction for both, [`warp_reduce::sum_transposed_pair`]), and each lane finishes two
//! rows' outputs after the group.
//!
//! When P splits into exactly [`DECODE_STREAM_WARPS`] row ranges the four warps of a block are
//! the four ranges of one (b, h) and share the prologue: warp w forms q̂ and k̂ of ranks w and
//! w + 4 only, and after one block barrier each warp copies the other ranks into its own region.
//!
//! The small states θ and k̂_prev are read by every warp of a (b, h) and written once. In a
//! shared-prologue block the barrier orders every warp's reads before warp 0 writes them back.
//! Otherwise, with more than one warp per (b, h), each warp bumps the (b, h)'s arrival counter
//! after reading them and the last to arrive writes them back and resets the counter (as in
//! `decode_rows.rs`), so a captured graph replays with the counters at zero. Raw v of a row is
//! read and replaced by the lane that owns the row.
//!
//! # Launch contract
//! Grid `⌈B·H·⌈P / rows_per_warp⌉ / DECODE_STREAM_WARPS⌉` blocks of `32·DECODE_STREAM_WARPS`
//! threads, dynamic shared memory `DecodeStreamSmem::new(R).block_bytes()`; `tokens == 1`,
//! `N % 4 == 0`, `N ≤ DECODE_STREAM_MAX_N`, `rows_per_warp ≥ 1`, mode gated or prereduce;
//! `arrivals` given whenever `rows_per_warp < P`; every pointer of [`DecodeParams`] valid for its
//! documented shape (the host validates).

use mamba3_abi::{
    decode_rows_weight_stride, output_mode, rotation, DecodeParams, DecodeStreamSmem,
    DECODE_STREAM_DEPTH, DECODE_STREAM_GROUP, DECODE_STREAM_WARPS,
};

use crate::angles::{advance, lane_angle_inputs, reduced_f32, stored_f32, warp_sincos};
use crate::arch::cp_async::{commit_group, cp_async_cg_16, wait_group};
use crate::arch::float::fma_rn;
use crate::arch::global::{
    atom_add_acq_rel_cta_u32, atom_add_acq_rel_gpu_u32, ld_global_nc_f32, st_global_f32,
    st_global_u32, st_global_v4_f32,
};
use crate::arch::sreg::{
    block_x, ld_shared_f32, ld_shared_v4_f32, opaque_u32, smem_base, st_shared_f32,
    st_shared_v4_f32, sync_threads, sync_warp, thread_x,
};
use crate::elem::{ldg, Elem};
use crate::geometry::Geometry;
#[cfg(target_arch = "nvptx64")]
use crate::geometry::{AnyGeometry, FixedGeometry};
use crate::math::{exp, sigmoid, silu, sincos};
use crate::smem::at;
use crate::warp_reduce;

const DEPTH: usize = DECODE_STREAM_DEPTH as usize;
/// Rows per group: weights staged before, outputs formed after, two rows per lane.
const GROUP: u32 = DECODE_STREAM_GROUP;
/// Bytes of one ring slot: a row's quads of the 32 lanes.
const SLOT_BYTES: u32 = 32 * 16;

/// Byte address of f32 element `i` of a global tensor.
#[inline(always)]
fn gf(base: u64, i: u32) -> u64 {
    base + 4 * i as u64
}

/// The streaming decode body for activation type `X` and rank `R`.
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn decode_stream<X: Elem, const R: usize, G: Geometry>(prm: &DecodeParams) {
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let heads = prm.heads;
    let (n, p, na) = G::dims(prm.n, prm.p, prm.na);
    let r_count = R as u32;
    let rows_per_warp = prm.rows_per_warp;
    let splits = p.div_ceil(rows_per_warp);
    let unit = block_x() * DECODE_STREAM_WARPS + warp;
    // The block's warps are the splits of one (b, h) (a block starts at a multiple of
    // DECODE_STREAM_WARPS units): they share the prologue's per-rank work and meet at one barrier.
    let shared_prologue = splits == DECODE_STREAM_WARPS;
    if unit >= prm.batch * heads * splits {
        // Whole warps leave (never in a shared-prologue block: its four units exist).
        return;
    }
    let (bh, split) = (unit / splits, unit % splits);
    let (b, h) = (bh / heads, bh % heads);
    let first_row = split * rows_per_warp;
    let rows = rows_per_warp.min(p - first_row);
    let group = h / (heads / prm.groups);
    let half_n = n / 2;
    let col = 4 * lane;
    let active = col < n;
    let lay = DecodeStreamSmem::new(r_count);
    let sm = smem_base() + 4 * warp * lay.total;
    let w_stride = decode_rows_weight_stride(r_count);
    let token_hp = bh * p;
    // Lanes past N read a valid quad (the row's last) and discard it: every row load and every
    // shared read of the loop is unconditional.
    let load_col = col.min(n - 4);
    let row_addr =
        |i: u32| prm.ssm + 4 * ((token_hp + first_row + i) as u64 * n as u64 + load_col as u64);

    // SAFETY (whole body): indices stay inside the shapes of the launch contract; shared offsets
    // inside the block's regions of `lay` (another warp's only for the shared prologue's copy,
    // after the block barrier); every lane reaches every warp barrier and shuffle, and every
    // thread of a shared-prologue block the block barrier (the only early return is per whole
    // warp, outside such blocks).
    unsafe {
        // --- Every load whose address is known now, the prologue's small ones first ---
        // The state rows go last: the prologue's loads issued behind them waited for their share
        // of the rows' megabytes at HBM (H200, batch 4–8: 5–7% of the call). DEPTH rows are in
        // flight per warp, copied (`cp.async`, one commit group per row) into the lane's own
        // slots of the warp's ring, so they cost no registers; slot `row % DEPTH`.
        let ring_lane = at(sm, lay.ring, lane * 4);
        let ring_slot = |row: u32| ring_lane + (row % DEPTH as u32) * SLOT_BYTES;
        // One row's quad into a ring slot, as its own commit group; past the warp's last row the
        // group stays empty (it still counts for `wait_group`), so no copy queues ahead of the
        // output stage's loads.
        let copy_row = |slot: u32, src: u64, real: bool| {
            if real {
                cp_async_cg_16(slot, src as *const u8);
            }
            commit_group();
        };
        // k̂_prev of the lane's quad, and raw v, previous v and z of the lane's two rows of the
        // first group (consumed after the angle and q̂/k̂ prologue).
        let mut kp = [[0.0f32; 4]; R];
        if active {
            for (r, k) in kp.iter_mut().enumerate() {
                *k = X::load4(
                    prm.k_state,
                    (((b * r_count + r as u32) * heads + h) * n + col) as usize,
                );
            }
        }
        let has_z = prm.z != 0;
        let row_inputs = |done: u32| -> [[f32; 3]; 2] {
            core::array::from_fn(|k| {
                let j = lane + 32 * k as u32;
                if done + j < rows && j < GROUP {
                    let at_row = (token_hp + first_row + done + j) as usize;
                    let z = if has_z { X::load(prm.z, at_row) } else { 0.0 };
                    [X::load(prm.v, at_row), X::load(prm.v_state, at_row), z]
                } else {
                    [0.0; 3]
                }
            })
        };
        let mut inputs = row_inputs(0);
        let dt = ld_global_nc_f32(gf(prm.dt, bh));
        let adt = ld_global_nc_f32(gf(prm.adt, bh));
        let trap = X::load(prm.trap, bh as usize);
        // This lane's two angles: old θ and the logit, loaded with the rest.
        let angle_inputs = lane_angle_inputs(prm.theta, prm.angles, bh * na, na, lane);
        // --- q̂, k̂ and k̂_prev of this lane's columns, two ranks at a time into the warp's region ---
        let pairwise = prm.rotation == rotation::PAIRWISE;
        // A rolled loop over rank pairs keeps two ranks' loads in flight together (one memory
        // latency per pair) without holding every rank's raw vectors in registers.
        // The partner columns of the lane's quad: the quad itself, pairs swapped (pairwise); the
        // quad half a row away when N/2 is a multiple of 4 (half-split); else column by column.
        let lower = |e: usize| {
            if pairwise {
                e % 2 == 0
            } else {
                col + (e as u32) < half_n
            }
        };
        let partner = |c: u32| {
            if pairwise {
                c ^ 1
            } else if c < half_n {
                c + half_n
            } else {
                c - half_n
            }
        };
        // `v` plus quad `c` of rank `r`'s bias (an (H,R,N) f32 tensor).
        let add_bias = |v: [f32; 4], bias: u64, r: u32, c: u32| {
            let w = f32::load4(bias, ((h * r_count + r) * n + c) as usize);
            [v[0] + w[0], v[1] + w[1], v[2] + w[2], v[3] + w[3]]
        };
        // A quad with its rotation pairs swapped: the partner quad in the pairwise convention.
        let swap_pairs = |v: [f32; 4]| [v[1], v[0], v[3], v[2]];
        // The raw vectors of rank `r`, biased: q own and partner quads, k own and partner.
        let load_rank = |r: u32| -> [[f32; 4]; 4] {
            if !active || r >= r_count {
                return [[0.0; 4]; 4];
            }
            let qk_row = ((b * r_count + r) * prm.groups + group) * n;
            let bias_row = (h * r_count + r) * n;
            let biased = |x: u64, bias: u64, c: u32| {
                add_bias(X::load4(x, (qk_row + c) as usize), bias, r, c)
            };
            let others = |x: u64, bias: u64, own: [f32; 4]| {
                if pairwise {
                    swap_pairs(own)
                } else if half_n % 4 == 0 {
                    biased(x, bias, partner(col))
                } else {
                    core::array::from_fn(|e| {
                        let c = partner(col + e as u32);
                        X::load(x, (qk_row + c) as usize) + ldg(bias, (bias_row + c) as usize)
                    })
                }
            };
            let q_own = biased(prm.q, prm.q_bias, col);
            let q_other = others(prm.q, prm.q_bias, q_own);
            let k_own = biased(prm.k, prm.k_bias, col);
            let k_other = others(prm.k, prm.k_bias, k_own);
            [q_own, q_other, k_own, k_other]
        };
        // The first ranks' raw vectors go out with the other prologue loads (one memory latency
        // for all of them); the rank loop loads each next pair once these are stored. In a
        // shared-prologue block warp w forms ranks w and w + DECODE_STREAM_WARPS only.
        let mut ranks = if shared_prologue {
            let second = if R > DECODE_STREAM_WARPS as usize {
                load_rank(warp + DECODE_STREAM_WARPS)
            } else {
                [[0.0; 4]; 4]
            };
            (load_rank(warp), second)
        } else {
            (
                load_rank(0),
                if R >= 4 { load_rank(1) } else { [[0.0; 4]; 4] },
            )
        };
        // The fixed rank-4 instantiation also issues ranks 2 and 3's raw q and k words here
        // (unconverted, unbiased: their f32 vectors and biases would spill), so the rank loop
        // waits only for their biases, which every warp of the head reads.
        let all_ranks = G::DIMS.is_some() && R == 4 && half_n % 4 == 0 && !shared_prologue;
        let raw_rank = |r: u32| -> [X::Raw4; 4] {
            let mut raw = [X::Raw4::default(); 4];
            if all_ranks && active {
                let qk_row = ((b * r_count + r) * prm.groups + group) * n;
                raw[0] = X::load4_raw(prm.q, (qk_row + col) as usize);
                raw[2] = X::load4_raw(prm.k, (qk_row + col) as usize);
                if !pairwise {
                    raw[1] = X::load4_raw(prm.q, (qk_row + partner(col)) as usize);
                    raw[3] = X::load4_raw(prm.k, (qk_row + partner(col)) as usize);
                }
            }
            raw
        };
        let later_raw = [raw_rank(2), raw_rank(3)];
        // Rank `r`'s element of an (H,R,P) parameter at head row `row`.
        let row_param = |tensor: u64, r: u32, row: u32| {
            ld_global_nc_f32(gf(tensor, (h * r_count + r) * p + row))
        };
        // mimo_v of the lane's first row, for its weights (a dependent L2 round trip after the
        // rotation otherwise), then the state rows.
        let early_mv: [f32; R] = core::array::from_fn(|r| {
            if lane < rows {
                row_param(prm.mimo_v, r as u32, first_row + lane)
            } else {
                0.0
            }
        });
        for row in 0..DEPTH as u32 {
            copy_row(ring_slot(row), row_addr(row), row < rows);
        }
        // Rank `r`'s vectors from its raw words, biased.
        let finish_rank = |r: u32, raw: [X::Raw4; 4]| -> [[f32; 4]; 4] {
            if !active {
                return [[0.0; 4]; 4];
            }
            let biased = |raw: X::Raw4, bias: u64, c: u32| add_bias(X::widen4(raw), bias, r, c);
            let q_own = biased(raw[0], prm.q_bias, col);
            let k_own = biased(raw[2], prm.k_bias, col);
            if pairwise {
                [q_own, swap_pairs(q_own), k_own, swap_pairs(k_own)]
            } else {
                [
                    q_own,
                    biased(raw[1], prm.q_bias, partner(col)),
                    k_own,
                    biased(raw[3], prm.k_bias, partner(col)),
                ]
            }
        };
        let lambda = sigmoid(trap);
        let alpha = exp(adt);
        let beta = (1.0 - lambda) * dt * alpha;
        let gamma = lambda * dt;

        // --- The new angles (lane j advances angles j and j + 32 in f64 and keeps their stored
        // form in the warp's region), then the sines and cosines of this lane's columns by shuffles ---
        let mut angle_sincos = [(0.0f32, 1.0f32); 2];
        for (a, sc) in angle_sincos.iter_mut().enumerate() {
            let i = lane + 32 * a as u32;
            if i < na {
                let [old, logit] = angle_inputs[a];
                let theta = advance(old as f64, logit, dt);
                st_shared_f32(at(sm, lay.theta, i), stored_f32(theta));
                *sc = sincos(reduced_f32(theta));
            }
        }
        let mut sin = [0.0f32; 4];
        let mut cos = [1.0f32; 4];
        for e in 0..4 {
            let c = load_col + e as u32;
            let i = if pairwise { c / 2 } else { c % half_n };
            let (s, c) = warp_sincos(angle_sincos, i, na > 32);
            if active && i < na {
                (sin[e], cos[e]) = (s, c);
            }
        }

        // The pair (x0, x1) turns into (x0·cos − x1·sin, x0·sin + x1·cos).
        let rotate = |own: [f32; 4], other: [f32; 4]| -> [f32; 4] {
            core::array::from_fn(|e| {
                if lower(e) {
                    own[e] * cos[e] - other[e] * sin[e]
                } else {
                    other[e] * sin[e] + own[e] * cos[e]
                }
            })
        };
        // Idle lanes store zero vectors, so that their (discarded) state quads add nothing.
        let store_rank = |r: u32, [q_own, q_other, k_own, k_other]: [[f32; 4]; 4]| {
            if r < r_count {
                let slot = (r * 32 + lane) * 4;
                st_shared_v4_f32(at(sm, lay.q_rot, slot), rotate(q_own, q_other));
                st_shared_v4_f32(at(sm, lay.k_rot, slot), rotate(k_own, k_other));
            }
        };
        // (Ranks 1 and 2 go one at a time: pairing them costs registers the rows need.)
        let mut r = 0;
        if shared_prologue {
            store_rank(warp, ranks.0);
            store_rank(warp + DECODE_STREAM_WARPS, ranks.1);
            r = r_count;
        } else if all_ranks {
            store_rank(0, ranks.0);
            store_rank(1, ranks.1);
            ranks = (finish_rank(2, later_raw[0]), finish_rank(3, later_raw[1]));
            store_rank(2, ranks.0);
            store_rank(3, ranks.1);
            r = r_count;
        }
        while r < opaque_u32(r_count) {
            if R >= 4 {
                store_rank(r, ranks.0);
                store_rank(r + 1, ranks.1);
                r += 2;
                if r < r_count {
                    ranks = (load_rank(r), load_rank(r + 1));
                }
            } else {
                store_rank(r, ranks.0);
                r += 1;
                if r < r_count {
                    ranks.0 = load_rank(r);
                }
            }
        }
        if shared_prologue {
            // Every warp has stored its ranks and read θ and k̂_prev (the barrier orders those
            // reads before warp 0's write-back): copy the other warps' ranks into this warp's
            // region, where the rows read them.
            sync_threads();
            for r in 0..r_count {
                let from = r % DECODE_STREAM_WARPS;
                if from != warp {
                    let other = smem_base() + 4 * from * lay.total;
                    let slot = (r * 32 + lane) * 4;
                    let (q, k) = (
                        ld_shared_v4_f32(at(other, lay.q_rot, slot)),
                        ld_shared_v4_f32(at(other, lay.k_rot, slot)),
                    );
                    st_shared_v4_f32(at(sm, lay.q_rot, slot), q);
                    st_shared_v4_f32(at(sm, lay.k_rot, slot), k);
                }
            }
            sync_warp();
        }
        // k̂ and k̂_prev stay in registers for the rows; q̂ is read per row.
        let mut kh = [[0.0f32; 4]; R];
        for (r, k) in kh.iter_mut().enumerate() {
            *k = ld_shared_v4_f32(at(sm, lay.k_rot, (r as u32 * 32 + lane) * 4));
        }
        // Every lane has read θ and k̂_prev: arrive. The count is read only at the end, so the
        // atomic's latency hides behind the rows; its acquire half orders the last arriver's
        // write-back after the other warps' reads (no fence behind the row stores). When the
        // splits of a (b, h) divide the block's warps they are warps of this block (a block
        // starts at a multiple of DECODE_STREAM_WARPS units), so a CTA-scope add suffices: its
        // release does not wait for the ring's copies in flight.
        let mut arrived = 0u32;
        if splits > 1 && !shared_prologue {
            sync_warp();
            if lane == 0 {
                let counter = prm.arrivals + 4 * bh as u64;
                arrived = if DECODE_STREAM_WARPS % splits == 0 {
                    atom_add_acq_rel_cta_u32(counter, 1)
                } else {
                    atom_add_acq_rel_gpu_u32(counter, 1)
                };
            }
        }

        // Byte address of the next row to update, and the row size.
        let mut row_ptr = row_addr(0);
        let row_bytes = 4 * n as u64;
        let d_skip = if prm.d != 0 {
            ld_global_nc_f32(gf(prm.d, h))
        } else {
            0.0
        };
        let spread = 32 / r_count;
        let pair_spread = 16 / r_count;
        // Shared addresses of the group's weights, and where this lane's read-out total goes
        // (row pairs: rank (l mod 16) / (16/R) of the pair's row l / 16; single rows: rank
        // l / (32/R)).
        let w_base = at(sm, lay.weights, 0);
        let y_pair = at(sm, lay.y, ((lane % 16) / pair_spread) * GROUP + lane / 16);
        let y_single = at(sm, lay.y, (lane / spread) * GROUP);
        let mut done = 0u32;
        while done < rows {
            let group_rows = (rows - done).min(GROUP);
            if done > 0 {
                inputs = row_inputs(done);
            }
            // An (H,R,P) parameter (1.0 where `present` is false) at the lane's two rows of the
            // group, every rank: all loads issued before any is used.
            let row_params = |tensor: u64, present: bool| -> [[f32; R]; 2] {
                core::array::from_fn(|k| {
                    let j = lane + 32 * k as u32;
                    let row = first_row + done + j;
                    core::array::from_fn(|r| {
                        if present && j < group_rows {
                            row_param(tensor, r as u32, row)
                        } else {
                            1.0
                        }
                    })
                })
            };
            // --- Lane l: the weights of rows l and l + 32 of the group; raw v replaced by the
            // current one. A row's R mimo_v loads go out before its stores (stores are `asm!`
            // with memory effects: a load after one waits its turn; both rows' loads at once
            // made the general R = 4 kernels spill on sm_80) ---
            for (k, j) in [lane, lane + 32].into_iter().enumerate() {
                if j < group_rows {
                    let row = first_row + done + j;
                    let [vc, vp, _] = inputs[k];
                    let mimo_v: [f32; R] = if done == 0 && k == 0 {
                        early_mv
                    } else {
                        core::array::from_fn(|r| row_param(prm.mimo_v, r as u32, row))
                    };
                    X::store(prm.v_state, (token_hp + row) as usize, vc);
                    for (r, &mv) in mimo_v.iter().enumerate() {
                        let r = r as u32;
                        st_shared_f32(at(sm, lay.weights, j * w_stride + r), beta * vp * mv);
                        st_shared_f32(
                            at(sm, lay.weights, j * w_stride + r_count + r),
                            gamma * vc * mv,
                        );
                    }
                }
            }
            sync_warp();

            // --- The group's rows: update and read-out, row copies kept DEPTH ahead ---
            // This lane's quads of q̂ (read once per row pair, shared by both rows).
            let load_q = || -> [[f32; 4]; R] {
                core::array::from_fn(|r| {
                    ld_shared_v4_f32(at(sm, lay.q_rot, (r as u32 * 32 + lane) * 4))
                })
            };
            // Row `j` of the group: scale, rank-2R update, this lane's R read-out partial sums.
            let step = |mut s: [f32; 4], j: u32, q: &[[f32; 4]; R]| {
                let w_row = w_base + j * 4 * w_stride;
                let mut w = [0.0f32; 16];
                for c in 0..(2 * R).div_ceil(4) {
                    let quad = ld_shared_v4_f32(w_row + 16 * c as u32);
                    w[4 * c..4 * c + 4].copy_from_slice(&quad);
                }
                // An idle lane's quad is a (finite) copy of the row's last quad: its zero k̂ and
                // q̂ make it add nothing, and it is not stored.
                for x in s.iter_mut() {
                    *x *= alpha;
                }
                for r in 0..R {
                    for e in 0..4 {
                        s[e] = fma_rn(w[r], kp[r][e], fma_rn(w[R + r], kh[r][e], s[e]));
                    }
                }
                let mut acc = [0.0f32; R];
                for (r, a) in acc.iter_mut().enumerate() {
                    for e in 0..4 {
                        *a = fma_rn(s[e], q[r][e], *a);
                    }
                }
                (s, acc)
            };
            // The row's copy is consumed: refill its slot with the row DEPTH ahead.
            let refill = |row: u32, slot: u32, ptr: u64| {
                copy_row(
                    slot,
                    ptr + DEPTH as u64 * row_bytes,
                    row + (DEPTH as u32) < rows,
                );
            };
            // Two rows at a time share one transposing reduction (their chains overlap);
            // this lane's copies of both have landed once at most DEPTH − 2 groups pend.
            let mut j = 0;
            while j + 2 <= group_rows {
                let row = done + j;
                // DEPTH is even and groups hold whole pairs but for the last: a pair's two slots
                // are adjacent.
                let slot = ring_slot(row);
                wait_group::<{ DEPTH as u32 - 2 }>();
                let q = load_q();
                let (s0, acc0) = step(ld_shared_v4_f32(slot), j, &q);
                let (s1, acc1) = step(ld_shared_v4_f32(slot + SLOT_BYTES), j + 1, &q);
                let y = warp_reduce::sum_transposed_pair(acc0, acc1, lane);
                if lane % pair_spread == 0 {
                    st_shared_f32(y_pair + 4 * j, y);
                }
                if active {
                    st_global_v4_f32(row_ptr, s0);
                    st_global_v4_f32(row_ptr + row_bytes, s1);
                }
                refill(row, slot, row_ptr);
                refill(row + 1, slot + SLOT_BYTES, row_ptr + row_bytes);
                row_ptr += 2 * row_bytes;
                j += 2;
            }
            if j < group_rows {
                let row = done + j;
                let slot = ring_slot(row);
                wait_group::<{ DEPTH as u32 - 1 }>();
                let (s, acc) = step(ld_shared_v4_f32(slot), j, &load_q());
                let y = warp_reduce::sum_transposed(acc, lane);
                if lane % spread == 0 {
                    st_shared_f32(y_single + 4 * j, y);
                }
                if active {
                    st_global_v4_f32(row_ptr, s);
                }
                refill(row, slot, row_ptr);
                row_ptr += row_bytes;
            }
            sync_warp();

            // --- Lane l: the outputs of rows l and l + 32 (D skip, gate, contraction over ranks);
            // the parameters are loaded again (the rows' registers are free now), all before the
            // first use ---
            let (mimo_v, mimo_z, mimo_o) = (
                row_params(prm.mimo_v, true),
                row_params(prm.mimo_z, has_z),
                row_params(prm.mimo_o, prm.mimo_o != 0),
            );
            for (k, j) in [lane, lane + 32].into_iter().enumerate() {
                if j < group_rows {
                    let row = first_row + done + j;
                    let [vc, _, z] = inputs[k];
                    let mut out = 0.0f32;
                    for r in 0..R {
                        let y = d_skip * vc * mimo_v[k][r]
                            + ld_shared_f32(at(sm, lay.y, r as u32 * GROUP + j));
                        let gate = if has_z { silu(z * mimo_z[k][r]) } else { 1.0 };
                        if prm.mode == output_mode::PREREDUCE {
                            X::store(
                                prm.out,
                                (((b * r_count + r as u32) * heads + h) * p + row) as usize,
                                y * gate,
                            );
                        } else {
                            out += y * gate * mimo_o[k][r];
                        }
                    }
                    if prm.mode != output_mode::PREREDUCE {
                        X::store(prm.out, (token_hp + row) as usize, out);
                    }
                }
            }
            done += group_rows;
        }

        // --- θ and k̂ by the warp that arrived last (or the only one; warp 0 of a
        // shared-prologue block) ---
        if splits > 1 && !shared_prologue {
            if lane == 0 {
                let owner = arrived == splits - 1;
                if owner {
                    st_global_u32(prm.arrivals + 4 * bh as u64, 0);
                }
                st_shared_f32(at(sm, lay.owner, 0), if owner { 1.0 } else { 0.0 });
            }
            sync_warp();
        }
        let owner = if shared_prologue {
            warp == 0
        } else {
            splits == 1 || ld_shared_f32(at(sm, lay.owner, 0)) != 0.0
        };
        if owner {
            for a in 0..2 {
                let i = lane + 32 * a;
                if i < na {
                    st_global_f32(
                        gf(prm.theta, bh * na + i),
                        ld_shared_f32(at(sm, lay.theta, i)),
                    );
                }
            }
        }
        if owner && active {
            for r in 0..r_count {
                let k = ld_shared_v4_f32(at(sm, lay.k_rot, (r * 32 + lane) * 4));
                for (e, &x) in k.iter().enumerate() {
                    let c = col + e as u32;
                    X::store(
                        prm.k_state,
                        (((b * r_count + r) * heads + h) * n + c) as usize,
                        x,
                    );
                }
            }
        }
    }
}

// Entry points exist only on the device, so that the host test `tests/decode_emulated.rs` can
// compile this file against emulated primitives.
macro_rules! decode_stream_entry {
    ($($name:ident: $x:ty, $r:literal, $g:ty;)*) => {$(
        /// Streaming decode entry point (activation type and rank in the name); see the module
        /// docs.
        ///
        /// # Safety
        /// See the module's launch contract.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(params: DecodeParams) {
            crate::arch::grid_dependency::dependent_launch_prologue();
            // SAFETY: forwarded launch contract.
            unsafe { decode_stream::<$x, $r, $g>(&params) }
        }
    )*};
}

decode_stream_entry! {
    decode_stream_f32_r1: f32, 1, AnyGeometry;
    decode_stream_f32_r2: f32, 2, AnyGeometry;
    decode_stream_f32_r4: f32, 4, AnyGeometry;
    decode_stream_f32_r8: f32, 8, AnyGeometry;
    decode_stream_bf16_r1: crate::elem::Bf16, 1, AnyGeometry;
    decode_stream_bf16_r2: crate::elem::Bf16, 2, AnyGeometry;
    decode_stream_bf16_r4: crate::elem::Bf16, 4, AnyGeometry;
    decode_stream_bf16_r8: crate::elem::Bf16, 8, AnyGeometry;
    decode_stream_fixed_bf16_r4_n128_p64_na32: crate::elem::Bf16, 4, FixedGeometry<128, 64, 32, 0>;
}
