//! Scalar device math that must hold float32 accuracy.

use crate::arch::float::{fma_rn, pack_bf16x2, round_nearest};

/// 2/π rounded to f32.
const TWO_OVER_PI: f32 = 0.636_619_8;
/// π/2 as the unevaluated sum `HI + MID + LO` of three f32 (Cody–Waite reduction).
const PIO2_HI: f32 = f32::from_bits(0x3fc9_0fdb);
const PIO2_MID: f32 = f32::from_bits(0xb33b_bd2e);
const PIO2_LO: f32 = f32::from_bits(0xa700_0000);

/// `(sin x, cos x)` with an absolute error below 2e-7 for `|x| ≤ 1e5`.
///
/// Why not `sin.approx.f32`: its error grows with |x| (about 1e-2 at 1e5), and cumulative rotary
/// angles reach that range. The argument is reduced by `j = rint(x·2/π)` with a three-term
/// Cody–Waite subtraction, each term one `fma.rn` so the reduced argument keeps ~1e-8 absolute
/// accuracy; then minimax polynomials on [−π/4, π/4] (Cephes `sinf`/`cosf` coefficients) and the
/// quadrant `j mod 4` select and sign the results.
#[inline(always)]
pub fn sincos(x: f32) -> (f32, f32) {
    let j = round_nearest(x * TWO_OVER_PI);
    let r = fma_rn(-j, PIO2_HI, x);
    let r = fma_rn(-j, PIO2_MID, r);
    let r = fma_rn(-j, PIO2_LO, r);
    let z = r * r;
    let sin_poly = fma_rn(fma_rn(-1.951_529_6e-4, z, 8.332_161e-3), z, -1.666_665_5e-1) * z;
    let s = fma_rn(sin_poly, r, r);
    let cos_poly = fma_rn(
        fma_rn(2.443_315_7e-5, z, -1.388_731_6e-3),
        z,
        4.166_664_6e-2,
    );
    let c = fma_rn(cos_poly * z, z, fma_rn(-0.5, z, 1.0));
    match (j as i32) & 3 {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

/// `e^x` through `ex2.approx` (relative error about 2^-22 plus the rounding of `x·log2 e`).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    crate::arch::float::exp2_approx(x * core::f32::consts::LOG2_E)
}

/// Logistic sigmoid `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `x·σ(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// [`sigmoid`] with the reciprocal by `rcp.approx` (1 ulp; the denominator is at least 1, so
/// flushing subnormals changes nothing): the IEEE division's slow path is a called subroutine that
/// costs instructions at every use. The forward's per-element gates take it; the register-capped
/// decode kernels keep [`sigmoid`] (the reciprocal's extra live range makes one of them spill).
#[inline(always)]
pub fn sigmoid_rcp(x: f32) -> f32 {
    crate::arch::float::rcp_approx(1.0 + exp(-x))
}

/// `x·σ(x)` through [`sigmoid_rcp`].
#[inline(always)]
pub fn silu_rcp(x: f32) -> f32 {
    x * sigmoid_rcp(x)
}

/// `y·silu(x)` through one `tanh.approx.f32`: `silu(x) = h + h·tanh h` with `h = x/2`. The
/// sigmoid `(1 + tanh h)/2` is off by at most 2^-11.987 absolute (`tanh.approx`'s 2^-10.987
/// relative error, halved), so the product is off by at most `|x·y|·2^-11.987` (2.5e-4): for
/// gates of bf16 outputs, whose own rounding is 2^-9 relative; float32 outputs keep [`silu_rcp`].
#[inline(always)]
pub fn mul_silu_tanh_approx(y: f32, x: f32) -> f32 {
    mul_silu_half_tanh_approx(y, 0.5 * x)
}

/// [`mul_silu_tanh_approx`] of `y` and `x = 2h`, from the halved argument `h`: where `x` is a
/// product with a per-column weight, the halving goes into the weight once (exact in binary)
/// instead of costing a multiply per element.
#[inline(always)]
pub fn mul_silu_half_tanh_approx(y: f32, h: f32) -> f32 {
    let a = y * h;
    fma_rn(a, crate::arch::float::tanh_approx(h), a)
}

/// `tanh x` with an absolute error of a few 1e-8 (not `tanh.approx.f32`, whose 2^-11 relative
/// error would show in cumulative angles): `1 − 2/(e^{2|x|} + 1)` with the sign restored.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let t = 1.0 - 2.0 / (exp(2.0 * x.abs()) + 1.0);
    if x < 0.0 {
        -t
    } else {
        t
    }
}

/// [`tanh`] with the reciprocal by `rcp.approx` (1 ulp; the denominator is at least 2), as
/// [`sigmoid_rcp`] is to [`sigmoid`]: no division subroutine where many are formed per block.
#[inline(always)]
pub fn tanh_rcp(x: f32) -> f32 {
    let t = fma_rn(
        -2.0,
        crate::arch::float::rcp_approx(exp(2.0 * x.abs()) + 1.0),
        1.0,
    );
    if x < 0.0 {
        -t
    } else {
        t
    }
}

/// `1/sqrt(x)`, correctly rounded square root then IEEE division.
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / crate::arch::float::sqrt_rn(x)
}

/// A pair of f32 as packed bf16 `hi` (rounded to nearest) and the packed bf16 of the remainders
/// `lo`: `hi + lo` holds each value to about 2^-16 of itself, so two bf16 `mma` passes
/// (`hi·b + lo·b`) keep a product far more accurate than one.
#[inline(always)]
pub fn split_bf16x2(x0: f32, x1: f32) -> (u32, u32) {
    let hi = pack_bf16x2(x0, x1);
    let (h0, h1) = (f32::from_bits(hi << 16), f32::from_bits(hi & 0xffff_0000));
    (hi, pack_bf16x2(x0 - h0, x1 - h1))
}
