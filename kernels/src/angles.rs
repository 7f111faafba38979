//! Cumulative rotary angles (spec §1.2(b)): `θ_t = Σ_{u≤t} π·tanh(logit_u)·Δ_u`.
//!
//! The increments are formed and summed in f64: an f32 increment (with `ex2.approx` inside tanh)
//! carries a small, partly systematic error that the running sum accumulates, about 2e-6 rad after
//! 2048 tokens and 7e-6 after 32768, which shows directly in the rotated k̂ and the state. In f64
//! the sum is exact to ~1e-13 over any practical length, so the only error left is the final
//! rounding of the (reduced) angle to f32 before `sincos`.

use crate::arch::float::{fma_rn, fma_rn_f64, fms_rn, rcp_approx};
use crate::arch::global::{ld_global_f32, ld_global_nc_f32};
use crate::arch::sreg::shfl_idx_f32;

/// `e^y` in f64 for `0 ≤ y ≤ 64`, relative error ~2e-16: `y = k·ln 2 + r` with a two-part
/// `ln 2`, then a degree-13 Taylor polynomial on `|r| ≤ ln 2 / 2` in fused multiply-adds, and a
/// power-of-two scale. The polynomial is evaluated by Estrin's scheme (pairs of terms combined
/// with r², r⁴, r⁸): four dependent steps instead of Horner's thirteen, which matters where one
/// thread's angle is on a decode step's critical path.
#[inline(always)]
pub fn exp_f64(y: f64) -> f64 {
    // fdlibm's split: LN2_HI has its low 32 bits clear, so k·LN2_HI is exact for |k| < 2^20.
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    const INV_LN2: f64 = core::f64::consts::LOG2_E;
    // y ≥ 0, so truncation after adding 0.5 rounds to nearest.
    let k = fma_rn_f64(y, INV_LN2, 0.5) as i64;
    let kf = k as f64;
    let r = fma_rn_f64(-kf, LN2_LO, fma_rn_f64(-kf, LN2_HI, y));
    // Σ_{j ≤ 13} r^j / j!, Horner from the highest power.
    const INV_FACT: [f64; 14] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5_040.0,
        1.0 / 40_320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
        1.0 / 39_916_800.0,
        1.0 / 479_001_600.0,
        1.0 / 6_227_020_800.0,
    ];
    let r2 = r * r;
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let pair = |j: usize| fma_rn_f64(INV_FACT[j + 1], r, INV_FACT[j]);
    let low = fma_rn_f64(
        fma_rn_f64(pair(6), r2, pair(4)),
        r4,
        fma_rn_f64(pair(2), r2, pair(0)),
    );
    let high = fma_rn_f64(pair(12), r4, fma_rn_f64(pair(10), r2, pair(8)));
    let p = fma_rn_f64(high, r8, low);
    p * f64::from_bits(((k + 1023) as u64) << 52)
}

/// `1/d` in f64 for `1 ≤ d < 2^100`, within an ulp: an f32 reciprocal seed (relative error
/// ~2^-23) refined by two Newton steps (2^-46, then below f64 rounding), each two fused
/// multiply-adds. Replaces the IEEE division, whose slow path is a called subroutine that forces
/// registers to the stack around it.
#[inline(always)]
pub fn recip_f64(d: f64) -> f64 {
    let mut y = rcp_approx(d as f32) as f64;
    y = fma_rn_f64(y, fma_rn_f64(-d, y, 1.0), y);
    fma_rn_f64(y, fma_rn_f64(-d, y, 1.0), y)
}

/// `tanh x` in f64 with an absolute error of a few 1e-16 (`1 − 2/(e^{2|x|} + 1)`, sign restored;
/// ±1 beyond |x| = 20, where the difference is below 1e-17). NaN stays NaN.
#[inline(always)]
pub fn tanh_f64(x: f64) -> f64 {
    let a = if x < 0.0 { -x } else { x };
    let t = if a > 20.0 {
        1.0
    } else {
        1.0 - 2.0 * recip_f64(exp_f64(2.0 * a) + 1.0)
    };
    if x.is_nan() {
        x
    } else if x < 0.0 {
        -t
    } else {
        t
    }
}

/// The angle increment `π·tanh(logit)·Δ` of one token, in f64.
#[inline(always)]
pub fn angle_increment(logit: f32, dt: f32) -> f64 {
    core::f64::consts::PI * tanh_f64(logit as f64) * dt as f64
}

/// The angle increment `π·tanh(logit)·Δ` of one token in f32 (absolute error a few 1e-8·π·Δ), for
/// the bf16 tensor-core forward, which sums the increments in f64 like [`angle_increment`]'s
/// callers but rounds q̂ and k̂ to bf16 (relative error 4e-3) right after the rotation: the
/// increment's f32 error (at most ~1e-4 rad after 32768 tokens even if it were all one sign, ~7e-6
/// as measured) is far below that rounding, and the f64 tanh costs ~200 instructions per token
/// and angle.
#[inline(always)]
pub fn angle_increment_f32(logit: f32, dt: f32) -> f32 {
    core::f32::consts::PI * crate::math::tanh_rcp(logit) * dt
}

/// `x` reduced into [0, 2π) in f64 (`x − 2π·floor(x/2π)`; |x| < 2^62 assumed, NaN stays NaN).
#[inline(always)]
pub fn wrap_two_pi_f64(x: f64) -> f64 {
    const TAU: f64 = core::f64::consts::TAU;
    let k = (x * (1.0 / TAU)) as i64 as f64;
    let mut r = x - k * TAU;
    if r < 0.0 {
        r += TAU;
    }
    if r >= TAU {
        r -= TAU;
    }
    r
}

/// `θ + π·tanh(logit)·Δ` reduced into [0, 2π), all in f64: one decode step of a carried angle.
/// The carried angle stays f64 across the tokens of a call, so the only roundings the rotations
/// see are [`reduced_f32`]'s and the one of the stored state ([`stored_f32`]).
#[inline(always)]
pub fn advance(theta: f64, logit: f32, dt: f32) -> f64 {
    wrap_two_pi_f64(theta + angle_increment(logit, dt))
}

/// An angle in [0, 2π) as the f32 of the state format, kept in [0, 2π) (an angle within half an
/// f32 ulp below 2π would round up to 2π; it is stored as 0, the same angle). NaN stays NaN.
#[inline(always)]
pub fn stored_f32(theta: f64) -> f32 {
    let t = theta as f32;
    if (0.0..core::f32::consts::TAU).contains(&t) || t.is_nan() {
        t
    } else {
        0.0
    }
}

/// `x` reduced into [−π, π) and rounded to f32: the argument handed to `sincos` (its rounding error
/// is at most 1.2e-7 rad, the smallest an f32 angle allows).
#[inline(always)]
pub fn reduced_f32(x: f64) -> f32 {
    let r = wrap_two_pi_f64(x);
    let r = if r >= core::f64::consts::PI {
        r - core::f64::consts::TAU
    } else {
        r
    };
    r as f32
}

/// `x` minus the nearest multiple of 2π (nearest by an f32 estimate, so the result can pass ±π by
/// a few ulps), rounded to f32: [`reduced_f32`]'s job in six instructions instead of two
/// f64↔integer conversions and branches, for `|x| < 2^20` and a `sincos` that takes any
/// argument near [−π, π] (the subtraction itself is one f64 fused multiply-add, exact to ~1e-16).
#[inline(always)]
pub fn reduced_near_f32(x: f64) -> f32 {
    const INV_TAU: f32 = 1.0 / core::f32::consts::TAU;
    let k = crate::arch::float::round_nearest(x as f32 * INV_TAU);
    fma_rn_f64(-(k as f64), core::f64::consts::TAU, x) as f32
}

/// The pair `(a, b)` rotated by the angle whose cosine and sine are `c` and `s`:
/// `(a·c − b·s, a·s + b·c)` (one product of each rounded, the other fused), the rotation of spec §1
/// applied to one (ia, ib) pair of q or k.
#[inline(always)]
pub fn rotate_pair(a: f32, b: f32, c: f32, s: f32) -> (f32, f32) {
    (fms_rn(a, c, b * s), fma_rn(a, s, b * c))
}

/// The sine and cosine of angle `i` (`i < 64`) from the warp, lane `l` holding those of angles
/// `l` and `l + 32` in `held` (the second only read when `two_sets`, i.e. `Na > 32`): the decode
/// kernels advance each angle once per warp and hand it to the lanes whose columns it rotates.
/// Every lane of the warp calls it together.
#[inline(always)]
pub fn warp_sincos(held: [(f32, f32); 2], i: u32, two_sets: bool) -> (f32, f32) {
    let from = i % 32;
    let mut sc = (shfl_idx_f32(held[0].0, from), shfl_idx_f32(held[0].1, from));
    if two_sets {
        let second = (shfl_idx_f32(held[1].0, from), shfl_idx_f32(held[1].1, from));
        if i >= 32 {
            sc = second;
        }
    }
    sc
}

/// The decode kernels' per-lane angle inputs: lane `lane` reads the carried θ and the raw logit of
/// angles `lane` and `lane + 32` (zeros past `na`) of the (b, h) whose `na` angles start at
/// element `first` of the f32 tensors at `theta` and `logits` (the layout [`warp_sincos`] serves).
///
/// # Safety
/// Elements `first .. first + na` of both tensors must be readable; no thread of the launch
/// writes the logits.
#[inline(always)]
pub unsafe fn lane_angle_inputs(
    theta: u64,
    logits: u64,
    first: u32,
    na: u32,
    lane: u32,
) -> [[f32; 2]; 2] {
    core::array::from_fn(|a| {
        let i = lane + 32 * a as u32;
        if i < na {
            let at = 4 * (first + i) as u64;
            // SAFETY: inside the caller's range.
            unsafe { [ld_global_f32(theta + at), ld_global_nc_f32(logits + at)] }
        } else {
            [0.0; 2]
        }
    })
}

/// The raw logits of lane `lane`'s angles `lane` and `lane + 32` (zeros past `na`) of the f32
/// tensor at `logits` from element `first`: [`lane_angle_inputs`] without θ, for the token loop
/// of the tensor-core decode, whose θ is carried in registers.
///
/// # Safety
/// Elements `first .. first + na` must be readable; no thread of the launch writes them.
#[inline(always)]
pub unsafe fn lane_angle_logits(logits: u64, first: u32, na: u32, lane: u32) -> [f32; 2] {
    core::array::from_fn(|a| {
        let i = lane + 32 * a as u32;
        if i < na {
            // SAFETY: inside the caller's range.
            unsafe { ld_global_nc_f32(logits + 4 * (first + i) as u64) }
        } else {
            0.0
        }
    })
}
