//! Warp-wide sums through butterfly shuffles.

use crate::arch::sreg::shfl_xor_f32;

/// Sum of `v` over the 32 lanes; every lane gets the total. Every lane must call it.
#[inline(always)]
pub fn sum(mut v: f32) -> f32 {
    let mut mask = 16;
    while mask > 0 {
        v += shfl_xor_f32(v, mask);
        mask /= 2;
    }
    v
}
