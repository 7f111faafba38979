//! Warp-level matrix multiply-accumulate, `mma.sync.aligned` (PTX ISA §9.7.13.3).
//!
//! Fragment layouts (which lane holds which element) live in [`crate::frag`]; these wrappers only
//! issue the instruction. Operands are grouped D / A / B / C as in the ISA. The `asm!` blocks are not
//! `pure`: a warp-collective instruction must not be moved into a divergent branch.

use core::arch::asm;

/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (PTX ISA §9.7.13.4.8, sm_80):
/// `D = A·B + C` with A 16×16 bf16 (row), B 16×8 bf16 (col), C and D 16×8 f32, accumulated in place.
///
/// `a` holds 4 registers of two packed bf16 each, `b` 2 such registers, `acc` the 4 f32 of C/D.
#[inline(always)]
pub fn mma_m16n8k16_bf16_f32(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // SAFETY: register-only warp instruction; all 32 lanes of the warp execute it together.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
            "{{{d0}, {d1}, {d2}, {d3}}},",  // D
            "{{{a0}, {a1}, {a2}, {a3}}},",  // A
            "{{{b0}, {b1}}},",              // B
            "{{{d0}, {d1}, {d2}, {d3}}};",  // C (= D, accumulate in place)
            d0 = inout(reg32) acc[0], d1 = inout(reg32) acc[1],
            d2 = inout(reg32) acc[2], d3 = inout(reg32) acc[3],
            a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
            b0 = in(reg32) b[0], b1 = in(reg32) b[1],
            options(nomem, nostack)
        )
    };
}

/// `mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32` (PTX ISA §9.7.13.4.8, sm_80):
/// `D = A·B + C` with A 16×8 bf16 (row), B 8×8 bf16 (col), C and D 16×8 f32, accumulated in place.
///
/// `a` holds 2 registers of two packed bf16 each, `b` one such register, `acc` the 4 f32 of C/D
/// (lane maps: [`crate::frag::a_m16k8`], [`crate::frag::b_k8n8`]).
#[inline(always)]
pub fn mma_m16n8k8_bf16_f32(acc: &mut [f32; 4], a: [u32; 2], b: u32) {
    // SAFETY: register-only warp instruction; all 32 lanes of the warp execute it together.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32",
            "{{{d0}, {d1}, {d2}, {d3}}},",  // D
            "{{{a0}, {a1}}},",              // A
            "{{{b0}}},",                    // B
            "{{{d0}, {d1}, {d2}, {d3}}};",  // C (= D, accumulate in place)
            d0 = inout(reg32) acc[0], d1 = inout(reg32) acc[1],
            d2 = inout(reg32) acc[2], d3 = inout(reg32) acc[3],
            a0 = in(reg32) a[0], a1 = in(reg32) a[1],
            b0 = in(reg32) b,
            options(nomem, nostack)
        )
    };
}

/// `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32` (PTX ISA §9.7.13.4.8, sm_80):
/// `D = A·B + C` with A 16×8 tf32 (row), B 8×8 tf32 (col), C and D 16×8 f32, accumulated in place.
///
/// `a` and `b` hold TF32 operands as f32 bit patterns: the tensor core reads each register's top
/// 19 bits (sign, exponent, 10 mantissa bits) and drops the low 13, so a caller rounds first
/// ([`crate::arch::float::to_tf32`], or half a TF32 ulp added to the bits) or accepts truncation.
#[inline(always)]
pub fn mma_m16n8k8_tf32_f32(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // SAFETY: register-only warp instruction; all 32 lanes of the warp execute it together.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
            "{{{d0}, {d1}, {d2}, {d3}}},",  // D
            "{{{a0}, {a1}, {a2}, {a3}}},",  // A
            "{{{b0}, {b1}}},",              // B
            "{{{d0}, {d1}, {d2}, {d3}}};",  // C (= D)
            d0 = inout(reg32) acc[0], d1 = inout(reg32) acc[1],
            d2 = inout(reg32) acc[2], d3 = inout(reg32) acc[3],
            a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
            b0 = in(reg32) b[0], b1 = in(reg32) b[1],
            options(nomem, nostack)
        )
    };
}
