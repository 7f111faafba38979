//! Float32-accurate products on the TF32 tensor cores: each operand is split into a TF32 `hi`
//! and its remainder `lo`, and a product is `lo·hi + hi·lo + hi·hi` on `mma.m16n8k8` (three
//! passes; the dropped `lo·lo` and the remainders' truncation leave about 2⁻²¹ of each product,
//! where one TF32 pass leaves 2⁻¹¹).

use crate::arch::mma::mma_m16n8k8_tf32_f32;

/// An operand fragment of `K` registers split into TF32 halves.
#[derive(Clone, Copy)]
pub struct Split<const K: usize> {
    /// `x` rounded to TF32.
    pub hi: [u32; K],
    /// `x − hi` (the `mma` reads its top 19 bits).
    pub lo: [u32; K],
}

/// Splits each element of a fragment (see the module docs): `hi` is `x` rounded to TF32 (to
/// nearest, ties away, by an integer add on the bit pattern: finite `x` below the top binade),
/// `lo = x − hi` (exact) passed whole: the `mma` reads a TF32 operand's top 19 bits, so `lo` is
/// truncated there (error below 2⁻²¹·|x|, unbiased: `lo` takes either sign). Three instructions
/// per element where `cvt.rna.tf32.f32` twice costs nine on sm_90.
#[inline(always)]
pub fn split<const K: usize>(x: [f32; K]) -> Split<K> {
    let hi = x.map(|v| v.to_bits().wrapping_add(0x1000) & !0x1fff);
    // Indexed (an iterator chain here was left as a loop over a local-memory array).
    let lo = core::array::from_fn(|i| (x[i] - f32::from_bits(hi[i])).to_bits());
    Split { hi, lo }
}

/// `acc += A·B` at float32 accuracy for an m16n8k8 tile (fragment layouts of
/// [`crate::frag::a_m16k8_tf32`] and [`crate::frag::b_k8n8_tf32`]); the small terms first.
#[inline(always)]
pub fn mma3(acc: &mut [f32; 4], a: &Split<4>, b: &Split<2>) {
    mma_m16n8k8_tf32_f32(acc, a.lo, b.hi);
    mma_m16n8k8_tf32_f32(acc, a.hi, b.lo);
    mma_m16n8k8_tf32_f32(acc, a.hi, b.hi);
}

/// `acc += A·B` as [`mma3`], the three passes summed in a fresh accumulator that is then added
/// to `acc` by f32 adds (round to nearest): the tensor cores' own accumulation truncates, so an
/// accumulator that takes many passes drifts (in the forward's 128-deep sums, ~1.5e-6 of the
/// outputs against 4e-7 with round-to-nearest). The fresh accumulator is `acc·0` (zero: the
/// accumulators are finite), not a constant zero, so that consecutive calls on one `acc` stay a
/// chain: with independent zeros ptxas runs every pass of an unrolled loop at once and spills.
#[inline(always)]
pub fn mma3_add(acc: &mut [f32; 4], a: &Split<4>, b: &Split<2>) {
    let mut t = [0.0f32; 4];
    for i in 0..4 {
        // IEEE semantics (NaN, infinities, −0) keep LLVM and ptxas from folding `acc·0`.
        t[i] = acc[i] * 0.0;
    }
    mma3(&mut t, a, b);
    for i in 0..4 {
        acc[i] += t[i];
    }
}

/// `acc += A₀·B₀ + A₁·B₁` as two [`mma3`] summed in one fresh accumulator (see [`mma3_add`]):
/// two depth steps per round-to-nearest add, half the adds and zeroings of [`mma3_add`] for
/// twice the truncated passes per fresh sum.
#[inline(always)]
pub fn mma3_add_pair(acc: &mut [f32; 4], a: [&Split<4>; 2], b: [&Split<2>; 2]) {
    let mut t = [0.0f32; 4];
    for i in 0..4 {
        t[i] = acc[i] * 0.0;
    }
    mma3(&mut t, a[0], b[0]);
    mma3(&mut t, a[1], b[1]);
    for i in 0..4 {
        acc[i] += t[i];
    }
}
