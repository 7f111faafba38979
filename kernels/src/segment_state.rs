//! Sequence splitting for the chunked forward (spec performance.md §3.3): when the (head, batch)
//! grid leaves SMs idle, each (b, h) row's chunks are cut into K segments of whole chunks, and
//!
//! 1. the segment-state pass (`segment_state_*`, [`chunked_forward_pass`] with `STATES_ONLY`)
//!    runs segments 0..K−1 from a zero state with their angles counted from zero, and hands off
//!    each one's end state `S_local(s)`, angle total `θ_local(s)` and decay `decay(s)` (the
//!    product of its chunk decays);
//! 2. the combine pass ([`segment_combine`], one block per (h, b)) walks the segments in order:
//!    `S_end(s) = decay(s)·S_end(s−1) + Rot(θ_end(s−1))·S_local(s)` and
//!    `θ_end(s) = θ_end(s−1) + θ_local(s)` (mod 2π), in place;
//! 3. the forward proper (`forward_fma_*` with `segments = K`) runs every segment from its true
//!    start state `S_end(s−1)`, θ_end(s−1).
//!
//! The bf16 tensor-core forward (`crate::chunked_forward_mma`) has its own segment-state pass with
//! the same hand-off format and shares the combine pass.
//!
//! Why step 2 is exact: a segment's keys are rotated by the true angle `θ_end(s−1) + θ_local`, and
//! rotations of one angle pair compose, `Rot(a + b) = Rot(a)·Rot(b)`; the state is linear in the
//! rotated keys along N, so the local-frame state turns into the true one by rotating each
//! (ia, ib) pair of every state row by `θ_end(s−1)`. Decays multiply. The chunk boundaries (and so
//! the trapezoidal key scale `c_i = γ_i + ε_{i+1}`, which reaches one token past a chunk) are the
//! same as without splitting. No atomics: each block owns its slot, and the combine is
//! sequential over segments in a fixed order.
//!
//! # Launch contract (combine)
//! Grid `(H, B)`, block [`SEGMENT_COMBINE_THREADS`], dynamic shared memory
//! `segment_combine_smem_bytes(K, Na)`; the hand-off buffers of [`SegmentCombineParams`] hold
//! `(B,H,K−1,…)` slots written by the segment-state pass.

use mamba3_abi::{rotation, SegmentCombineParams, SEGMENT_COMBINE_THREADS};

use crate::angles::{reduced_f32, wrap_two_pi_f64};
use crate::arch::sreg::{
    block_x, block_y, ld_shared_f32, smem_base, st_shared_f32, sync_threads, thread_x,
};
#[cfg(target_arch = "nvptx64")]
use crate::chunked_forward::chunked_forward_pass;
use crate::chunked_forward::split_f64;
#[cfg(target_arch = "nvptx64")]
use crate::elem::Bf16;
use crate::elem::Elem;
#[cfg(target_arch = "nvptx64")]
use crate::geometry::{AnyGeometry, FixedGeometry};
use crate::math::sincos;
#[cfg(target_arch = "nvptx64")]
use mamba3_abi::ForwardParams;

const T: u32 = SEGMENT_COMBINE_THREADS;

/// Hand-off slots whose loads the combine issues before it uses the first of them.
const SLOT_BATCH: u32 = 4;

/// (p, rotation pair)s a combine thread carries through the slots together (strided by the block).
const PAIR_BATCH: usize = 8;

/// Reads an angle stored in global memory as `hi + lo` (two f32, see [`split_f64`]).
#[inline(always)]
unsafe fn ld_angle(base: u64, word: usize) -> f64 {
    // SAFETY: forwarded to the caller.
    unsafe { <f32 as Elem>::load(base, word) as f64 + <f32 as Elem>::load(base, word + 1) as f64 }
}

/// Writes an angle into global memory as `hi + lo` (two f32, see [`split_f64`]).
#[inline(always)]
unsafe fn st_angle(base: u64, word: usize, value: f64) {
    let (hi, lo) = split_f64(value);
    // SAFETY: forwarded to the caller.
    unsafe {
        <f32 as Elem>::store(base, word, hi);
        <f32 as Elem>::store(base, word + 1, lo);
    }
}

/// The combine pass for the block's (h, b) row (see the module docs).
///
/// # Safety
/// The module's launch contract.
#[inline(always)]
pub unsafe fn segment_combine(prm: &SegmentCombineParams) {
    let h = block_x() as usize;
    let b = block_y() as usize;
    let tid = thread_x();
    let base = smem_base();
    let slots = prm.segments.saturating_sub(1);
    let (n, p, na) = (prm.n, prm.p, prm.na);
    let row = (b * prm.heads as usize + h) * slots as usize;
    let cos_at = |s: u32, j: u32| base + 4 * (s * na + j);
    let sin_at = |s: u32, j: u32| base + 4 * ((slots + s) * na + j);
    // SAFETY (whole body): slots < K−1, angles < Na, p < P, n < N index the (B,H,K−1,…) buffers
    // and the (K−1, Na) shared tables of the launch contract.
    unsafe {
        // The start angle of every slot's segment (θ_end of the one before; 0 for the first),
        // its cosine and sine; each slot's θ becomes the true θ at its segment's end. The θ words
        // of SLOT_BATCH slots are loaded before any is used: each batch costs one memory
        // latency rather than one per slot.
        let mut j = tid;
        while j < na {
            let mut theta = 0.0f64;
            let mut s0 = 0;
            while s0 < slots {
                let batch = (slots - s0).min(SLOT_BATCH);
                let word = |s: u32| 2 * ((row + s as usize) * na as usize + j as usize);
                let mut local = [0.0f64; SLOT_BATCH as usize];
                for v in 0..SLOT_BATCH as usize {
                    if (v as u32) < batch {
                        local[v] = ld_angle(prm.seg_theta, word(s0 + v as u32));
                    }
                }
                for v in 0..SLOT_BATCH as usize {
                    let s = s0 + v as u32;
                    if (v as u32) < batch {
                        let (sn, cs) = sincos(reduced_f32(theta));
                        st_shared_f32(cos_at(s, j), cs);
                        st_shared_f32(sin_at(s, j), sn);
                        theta = wrap_two_pi_f64(theta + local[v]);
                        st_angle(prm.seg_theta, word(s), theta);
                    }
                }
                s0 += batch;
            }
            j += T;
        }
        sync_threads();
        // Each thread carries PAIR_BATCH (p, rotation pair)s at a time through the segments, the
        // pairs' two state columns of SLOT_BATCH slots loaded before the first is combined.
        let half = (n / 2).max(1);
        let half_split = prm.rotation == rotation::HALF_SPLIT;
        let pairs = p * half;
        let mut e0 = tid;
        while e0 < pairs {
            // Indexed loops over constant bounds (unrolled, so the arrays stay in registers).
            let mut col_a = [0u32; PAIR_BATCH];
            let mut col_b = [0u32; PAIR_BATCH];
            let mut angle = [0u32; PAIR_BATCH];
            let mut inside = [false; PAIR_BATCH];
            for u in 0..PAIR_BATCH {
                let e = e0 + u as u32 * T;
                let (pp, j) = (e / half, e % half);
                let (ia, ib) = if half_split {
                    (j, j + half)
                } else {
                    (2 * j, 2 * j + 1)
                };
                col_a[u] = pp * n + ia;
                col_b[u] = pp * n + ib;
                angle[u] = j;
                inside[u] = e < pairs;
            }
            let mut run_a = [0.0f32; PAIR_BATCH];
            let mut run_b = [0.0f32; PAIR_BATCH];
            let mut s0 = 0;
            while s0 < slots {
                let batch = (slots - s0).min(SLOT_BATCH);
                let mut la = [[0.0f32; PAIR_BATCH]; SLOT_BATCH as usize];
                let mut lb = [[0.0f32; PAIR_BATCH]; SLOT_BATCH as usize];
                let mut decay = [0.0f32; SLOT_BATCH as usize];
                // The slots' first state words, and each slot's index.
                let slot = |v: usize| row + s0 as usize + v;
                let at = |v: usize| slot(v) * (p * n) as usize;
                for v in 0..SLOT_BATCH as usize {
                    if (v as u32) < batch {
                        let at = at(v);
                        decay[v] = <f32 as Elem>::load(prm.seg_decay, slot(v));
                        for u in 0..PAIR_BATCH {
                            if inside[u] {
                                let (a, b) = (at + col_a[u] as usize, at + col_b[u] as usize);
                                la[v][u] = <f32 as Elem>::load(prm.seg_state, a);
                                lb[v][u] = <f32 as Elem>::load(prm.seg_state, b);
                            }
                        }
                    }
                }
                for v in 0..SLOT_BATCH as usize {
                    if (v as u32) < batch {
                        let (s, at) = (s0 + v as u32, at(v));
                        for u in 0..PAIR_BATCH {
                            let (mut a, mut b) = (la[v][u], lb[v][u]);
                            if angle[u] < na {
                                let cs = ld_shared_f32(cos_at(s, angle[u]));
                                let sn = ld_shared_f32(sin_at(s, angle[u]));
                                (a, b) = (cs * a - sn * b, sn * a + cs * b);
                            }
                            run_a[u] = decay[v] * run_a[u] + a;
                            run_b[u] = decay[v] * run_b[u] + b;
                            if inside[u] {
                                let (a, b) = (at + col_a[u] as usize, at + col_b[u] as usize);
                                <f32 as Elem>::store(prm.seg_state, a, run_a[u]);
                                <f32 as Elem>::store(prm.seg_state, b, run_b[u]);
                            }
                        }
                    }
                }
                s0 += batch;
            }
            e0 += PAIR_BATCH as u32 * T;
        }
    }
}

/// Segment-state pass entry points: [`chunked_forward_pass`] with `STATES_ONLY`, same launch
/// contract as the forward (grid `(H, B·K)`), hand-off buffers required.
macro_rules! segment_state_entry {
    ($name:ident, $x:ty, $r:literal) => {
        segment_state_entry!($name, $x, $r, AnyGeometry);
    };
    ($name:ident, $x:ty, $r:literal, $g:ty) => {
        /// Segment-state pass entry point (see the module docs).
        ///
        /// # Safety
        /// The forward's launch contract with `segments ≥ 2` and the hand-off buffers.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(params: ForwardParams) {
            // SAFETY: forwarded launch contract.
            unsafe { chunked_forward_pass::<$x, $r, true, $g>(&params) }
        }
    };
}

segment_state_entry!(segment_state_f32_r1, f32, 1);
segment_state_entry!(segment_state_f32_r2, f32, 2);
segment_state_entry!(segment_state_f32_r4, f32, 4);
segment_state_entry!(segment_state_f32_r8, f32, 8);
segment_state_entry!(segment_state_bf16_r1, Bf16, 1);
segment_state_entry!(segment_state_bf16_r2, Bf16, 2);
segment_state_entry!(segment_state_bf16_r4, Bf16, 4);
segment_state_entry!(segment_state_bf16_r8, Bf16, 8);
segment_state_entry!(
    segment_state_fixed_f32_r4_n128_p64_na32_c16,
    f32,
    4,
    FixedGeometry<128, 64, 32, 16>
);
segment_state_entry!(
    segment_state_fixed_bf16_r4_n128_p64_na32_c16,
    Bf16,
    4,
    FixedGeometry<128, 64, 32, 16>
);

/// Combine pass entry point (see the module's launch contract).
///
/// # Safety
/// The module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn segment_combine_f32(params: SegmentCombineParams) {
    // SAFETY: forwarded launch contract.
    unsafe { segment_combine(&params) }
}
