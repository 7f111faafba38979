//! Warp-wide sums through butterfly shuffles.

use crate::arch::sreg::shfl_xor_f32;

/// Sum of `v` over the 32 lanes; every lane gets the total. Every lane must call it.
#[inline(always)]
pub fn sum(v: f32) -> f32 {
    group_sum(v, 32)
}

/// Sum of `v` over each aligned group of `width` lanes (`width` a power of two ≤ 32); every lane of
/// a group gets its total. Every lane must call it.
#[inline(always)]
pub fn group_sum(mut v: f32, width: u32) -> f32 {
    let mut mask = width / 2;
    while mask > 0 {
        v += shfl_xor_f32(v, mask);
        mask /= 2;
    }
    v
}

/// Sum of `v` over the four lanes of each quad (lanes `4q .. 4q + 4`, the lanes that share a row
/// of an `mma` accumulator); every lane of the quad gets it. Every lane must call it.
#[inline(always)]
pub fn quad_sum(v: f32) -> f32 {
    let v = v + shfl_xor_f32(v, 1);
    v + shfl_xor_f32(v, 2)
}

/// Sums each of `V` per-lane values over the 32 lanes (`V` a power of two ≤ 32) and returns, in
/// lane `l`, the total of value `l / (32 / V)`. Every lane must call it.
///
/// Why not `V` calls of [`sum`]: each halving step sends half of the values still held to the
/// partner lane and keeps the other half (the upper half where the partner bit is set), so `V`
/// totals take `V − 1` shuffles before the remaining `5 − log2 V` butterfly steps, not `5·V`.
#[inline(always)]
pub fn sum_transposed<const V: usize>(vals: [f32; V], lane: u32) -> f32 {
    transposed_from(vals, lane, 16)
}

/// [`sum_transposed`] of two sets of `V` values at once (`2V ≤ 32`): lane `l` gets the total of
/// value `(l % 16) / (16 / V)` of set `a` for `l < 16`, of set `b` for `l ≥ 16`. The first step
/// sends a whole set across the half-warps, so two sets cost `V` shuffles more than one.
#[inline(always)]
pub fn sum_transposed_pair<const V: usize>(a: [f32; V], b: [f32; V], lane: u32) -> f32 {
    let upper = lane & 16 != 0;
    let mut vals = [0.0f32; V];
    for (i, v) in vals.iter_mut().enumerate() {
        let (keep, send) = if upper { (b[i], a[i]) } else { (a[i], b[i]) };
        *v = keep + shfl_xor_f32(send, 16);
    }
    transposed_from(vals, lane, 8)
}

/// The halving steps of [`sum_transposed`] from lane bit `mask` down, then the butterflies.
#[inline(always)]
fn transposed_from<const V: usize>(mut vals: [f32; V], lane: u32, mut mask: u32) -> f32 {
    let mut count = V;
    while count > 1 {
        let half = count / 2;
        let upper = lane & mask != 0;
        for i in 0..half {
            let (keep, send) = if upper {
                (vals[i + half], vals[i])
            } else {
                (vals[i], vals[i + half])
            };
            vals[i] = keep + shfl_xor_f32(send, mask);
        }
        count = half;
        mask /= 2;
    }
    let mut v = vals[0];
    while mask > 0 {
        v += shfl_xor_f32(v, mask);
        mask /= 2;
    }
    v
}
