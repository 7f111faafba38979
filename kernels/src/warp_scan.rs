//! Warp-wide inclusive scan of affine maps.
//!
//! An element `(a, b)` is the map `h ↦ a·h + b`. An earlier `(a0, b0)` followed by a later
//! `(a1, b1)` composes to `(a1·a0, a1·b0 + b1)` (Mamba-1 spec §1.5); the operation is associative
//! with identity `(1, 0)`, so the inclusive scan of a warp's elements in lane order gives, in the
//! second component of lane `l`, the state after applying maps `0..=l` to `h = 0`.

use crate::arch::sreg::{lane_id, shfl_up_f32};

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
