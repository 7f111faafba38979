//! Warp-wide scans: the inclusive scan of affine maps, and the prefix / suffix sums of a chunk's
//! token values.
//!
//! An element `(a, b)` is the map `h ↦ a·h + b`. An earlier `(a0, b0)` followed by a later
//! `(a1, b1)` composes to `(a1·a0, a1·b0 + b1)` (Mamba-1 spec §1.5); the operation is associative
//! with identity `(1, 0)`, so the inclusive scan of a warp's elements in lane order gives, in the
//! second component of lane `l`, the state after applying maps `0..=l` to `h = 0`.

use crate::arch::sreg::{lane_id, shfl_idx_f32, shfl_up_f32};

/// Inclusive scan over the 32 lanes (Kogge–Stone, 5 shuffle rounds). Every lane must call it.
#[inline(always)]
pub fn inclusive_affine(mut a: f32, mut b: f32) -> (f32, f32) {
    let lane = lane_id();
    let mut delta = 1;
    while delta < 32 {
        let prev_a = shfl_up_f32(a, delta);
        let prev_b = shfl_up_f32(b, delta);
        if lane >= delta {
            b = a * prev_b + b;
            a *= prev_a;
        }
        delta *= 2;
    }
    (a, b)
}

/// The inclusive prefix and the exclusive suffix of `x` over lanes 0–15 (lanes 16–31 must hold
/// 0): lane `i < 16` gets `(Σ_{u ≤ i} x_u, Σ_{i < u < 16} x_u)`, lane 15 and above a suffix of 0.
/// For a chunk of 16 tokens and their log decays these are `A_i` and `Ā_i = A_e − A_i`. `lane` is
/// the caller's lane index. Every lane must call it.
#[inline(always)]
pub fn prefix_suffix_16(x: f32, lane: u32) -> (f32, f32) {
    let mut pre = x;
    // The same prefix on the lanes reversed: lane k sums the values at lanes ≥ 15 − k.
    let mut rev = shfl_idx_f32(x, 15u32.wrapping_sub(lane));
    for d in [1u32, 2, 4, 8] {
        let o = shfl_up_f32(pre, d);
        let orev = shfl_up_f32(rev, d);
        if lane >= d {
            pre += o;
            rev += orev;
        }
    }
    // Σ_{u > i} sits at lane 14 − i.
    let suf = shfl_idx_f32(rev, 14u32.wrapping_sub(lane));
    (pre, if lane < 15 { suf } else { 0.0 })
}
