//! Floating-point instructions with a rounding mode the compiler must not change.

use core::arch::asm;

/// `fma.rn.f32` (PTX ISA §9.7.3.6): `a·b + c` rounded once.
///
/// Used where the single rounding is part of the algorithm (Cody–Waite range reduction), so it must
/// not depend on the compiler's contraction choices.
#[inline(always)]
pub fn fma_rn(a: f32, b: f32, c: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("fma.rn.f32 {d}, {a}, {b}, {c};", d = out(reg32) d, a = in(reg32) a, b = in(reg32) b,
             c = in(reg32) c, options(pure, nomem, nostack))
    };
    d
}

/// `a·b − c` rounded once: `neg.f32` of the subtrahend and `fma.rn.f32` in one `asm!` block (PTX
/// ISA §9.7.3.5, §9.7.3.6), so that ptxas folds the negation into the FMA's addend. Written as
/// `fma_rn(a, b, -c)`, LLVM moves the negation onto a factor of `c` that other products share
/// (`−(x·s)` becomes `x·(−s)`), and ptxas then spends a sign-flip instruction on it.
#[inline(always)]
pub fn fms_rn(a: f32, b: f32, c: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("{{ .reg .f32 n; neg.f32 n, {c}; fma.rn.f32 {d}, {a}, {b}, n; }}", d = out(reg32) d,
             a = in(reg32) a, b = in(reg32) b, c = in(reg32) c, options(pure, nomem, nostack))
    };
    d
}

/// `cvt.rni.f32.f32` (PTX ISA §9.7.9.21): round to the nearest integer, ties to even.
#[inline(always)]
pub fn round_nearest(a: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("cvt.rni.f32.f32 {d}, {a};", d = out(reg32) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `cvt.rna.tf32.f32` (PTX ISA §9.7.9.21, sm_80): round an f32 to TF32 (10-bit mantissa), nearest,
/// ties away from zero; the result is an f32 bit pattern with the low 13 bits clear.
#[inline(always)]
pub fn to_tf32(a: f32) -> u32 {
    let d: u32;
    // SAFETY: register-only conversion.
    unsafe {
        asm!("cvt.rna.tf32.f32 {d}, {a};", d = out(reg32) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `fma.rn.f64` (PTX ISA §9.7.3.6): `a·b + c` in f64, rounded once (one `DFMA` where the
/// compiler would otherwise emit a multiply and an add: rustc does not contract `a * b + c`).
/// Through LLVM's `fma` intrinsic rather than `asm!`, so that constant operands stay immediates or
/// constant-bank operands instead of being moved into registers at every use.
#[inline(always)]
pub fn fma_rn_f64(a: f64, b: f64, c: f64) -> f64 {
    core::intrinsics::fmaf64(a, b, c)
}

/// `rcp.approx.ftz.f32` (PTX ISA §9.7.3.13): 1/a, maximum error 1 ulp; a seed for Newton steps
/// (the IEEE division has a slow path that the compiler calls as a subroutine).
#[inline(always)]
pub fn rcp_approx(a: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("rcp.approx.ftz.f32 {d}, {a};", d = out(reg32) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `rsqrt.approx.ftz.f32` (PTX ISA §9.7.3.16): 1/√a, maximum relative error 2^-22.9; one `MUFU`
/// where the IEEE square root and division each have a slow path called as a subroutine.
#[inline(always)]
pub fn rsqrt_approx(a: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("rsqrt.approx.ftz.f32 {d}, {a};", d = out(reg32) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `tanh.approx.f32` (PTX ISA §9.7.3, floating-point `tanh`; sm_75 and newer): tanh a, one
/// `MUFU`, within the ISA's bound of 2^-10.987 relative error (the hardware measures about 1.1e-5).
#[inline(always)]
pub fn tanh_approx(a: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("tanh.approx.f32 {d}, {a};", d = out(reg32) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `ex2.approx.ftz.f32` (PTX ISA §9.7.3.21): 2^a, maximum relative error about 2^-22.
#[inline(always)]
pub fn exp2_approx(a: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("ex2.approx.ftz.f32 {d}, {a};", d = out(reg32) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `sin.approx.ftz.f32` and `cos.approx.ftz.f32` (PTX ISA §9.7.3.18, §9.7.3.19): `(sin a, cos a)`
/// with an absolute error of about 2^-20.9 for `|a| ≤ π` (the error grows with |a|, so callers
/// reduce the argument first), two `MUFU` instructions.
#[inline(always)]
pub fn sincos_approx(a: f32) -> (f32, f32) {
    let (s, c): (f32, f32);
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("sin.approx.ftz.f32 {s}, {a};", "cos.approx.ftz.f32 {c}, {a};", s = out(reg32) s,
             c = out(reg32) c, a = in(reg32) a, options(pure, nomem, nostack))
    };
    (s, c)
}

/// `sqrt.rn.f32` (PTX ISA §9.7.3.17): correctly rounded square root.
#[inline(always)]
pub fn sqrt_rn(a: f32) -> f32 {
    let d: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!("sqrt.rn.f32 {d}, {a};", d = out(reg32) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `cvt.rn.bf16.f32` (PTX ISA §9.7.9.21, sm_80): f32 → bf16 bits, round to nearest even.
#[inline(always)]
pub fn to_bf16(a: f32) -> u16 {
    let d: u16;
    // SAFETY: register-only conversion.
    unsafe {
        asm!("cvt.rn.bf16.f32 {d}, {a};", d = out(reg16) d, a = in(reg32) a, options(pure, nomem, nostack))
    };
    d
}

/// `cvt.rn.f16x2.f32` (PTX ISA §9.7.9.21, sm_80): `lo` and `hi` rounded to IEEE binary16
/// (nearest, ties to even; beyond ±65504 to ±infinity) and packed into one register, `lo` in the
/// low half: the operand format of the f16 `mma` / `wgmma` forms.
#[inline(always)]
pub fn pack_f16x2(lo: f32, hi: f32) -> u32 {
    let d: u32;
    // SAFETY: register-only conversion. The ISA's first source goes to the upper half.
    unsafe {
        asm!("cvt.rn.f16x2.f32 {d}, {h}, {l};", d = out(reg32) d, h = in(reg32) hi, l = in(reg32) lo,
             options(pure, nomem, nostack))
    };
    d
}

/// `cvt.f32.f16` of both halves of a packed pair (PTX ISA §9.7.9.21): `(low, high)` widened
/// exactly.
#[inline(always)]
pub fn unpack_f16x2(pair: u32) -> (f32, f32) {
    let (lo, hi): (f32, f32);
    // SAFETY: register-only conversions.
    unsafe {
        asm!("{{ .reg .b16 %fl, %fh; mov.b32 {{%fl, %fh}}, {p}; cvt.f32.f16 {l}, %fl; cvt.f32.f16 {h}, %fh; }}",
             l = out(reg32) lo, h = out(reg32) hi, p = in(reg32) pair, options(pure, nomem, nostack))
    };
    (lo, hi)
}

/// `cvt.rn.bf16x2.f32` (PTX ISA §9.7.9.21, sm_80): `lo` and `hi` rounded to bf16 (nearest, ties
/// to even) and packed into one register, `lo` in the low half: the operand format of the bf16
/// `mma` fragments and of packed bf16 stores.
#[inline(always)]
pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
    let d: u32;
    // SAFETY: register-only conversion. The ISA's first source goes to the upper half.
    unsafe {
        asm!("cvt.rn.bf16x2.f32 {d}, {h}, {l};", d = out(reg32) d, h = in(reg32) hi, l = in(reg32) lo,
             options(pure, nomem, nostack))
    };
    d
}
