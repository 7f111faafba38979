//! Special registers, barriers, warp shuffles and the dynamic shared-memory base.

use core::arch::asm;
use core::arch::nvptx;

// The block's dynamic shared memory (size given at launch). PTX ISA §5.1.5 (`.extern .shared`
// arrays of unspecified size alias the dynamic shared memory of the launch).
core::arch::global_asm!(".extern .shared .align 16 .b8 SMEM[];");

/// Shared-space (32-bit) address of the first byte of the block's dynamic shared memory.
///
/// Addresses in the shared window are what `ld.shared`, `st.shared`, `ldmatrix` and `cp.async`
/// take; generic pointers would compile to slower generic loads. PTX ISA §9.7.9.1 (`mov`).
#[inline(always)]
pub fn smem_base() -> u32 {
    let base: u32;
    // SAFETY: reads the address of a symbol; no memory is touched.
    unsafe { asm!("mov.u32 {r}, SMEM;", r = out(reg32) base, options(pure, nomem, nostack)) };
    base
}

/// [`smem_base`] as its own instruction at each call (the `asm!` is not `pure`, so the compiler
/// neither merges nor hoists it): for a use after a long loop, where keeping the first call's
/// value alive costs a register (or a spill) through the loop.
#[inline(always)]
pub fn smem_base_fresh() -> u32 {
    let base: u32;
    // SAFETY: reads the address of a symbol; no memory is touched.
    unsafe { asm!("mov.u32 {r}, SMEM;", r = out(reg32) base, options(nomem, nostack)) };
    base
}

/// `%tid.x`.
#[inline(always)]
pub fn thread_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `%ctaid.x`.
#[inline(always)]
pub fn block_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// `%ntid.x`.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// Lane index within the warp (`%laneid`, PTX ISA §10.2).
#[inline(always)]
pub fn lane_id() -> u32 {
    thread_x() & 31
}

/// Block-wide barrier, `bar.sync 0` (PTX ISA §9.7.12.1).
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: every thread of the block reaches the call sites that use it.
    unsafe { nvptx::_syncthreads() }
}

/// Warp-wide barrier, `bar.warp.sync 0xffffffff` (PTX ISA §9.7.12.2): the lanes' shared-memory
/// accesses before it are ordered before those after it, for the whole warp.
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: every lane of the warp reaches the call sites that use it (member mask full).
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) }
}

/// `trap` (PTX ISA §9.7.15.4): aborts the kernel.
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` never returns.
    unsafe { asm!("trap;", options(noreturn, nostack)) }
}

/// `shfl.sync.up.b32` over the full warp (PTX ISA §9.7.8.6): value of lane `lane - delta`;
/// lanes below `delta` get their own value back.
#[inline(always)]
pub fn shfl_up_f32(value: f32, delta: u32) -> f32 {
    let out: f32;
    // Not `pure`: a pure asm may be sunk into the branch that uses its result, and a `shfl.sync`
    // executed by part of the warp with a full member mask is undefined.
    // SAFETY: register-only instruction; called by all 32 lanes (member mask 0xffffffff).
    unsafe {
        asm!(
            "shfl.sync.up.b32 {d}, {a}, {b}, 0, 0xffffffff;",
            d = out(reg32) out, a = in(reg32) value, b = in(reg32) delta,
            options(nomem, nostack)
        )
    };
    out
}

/// `shfl.sync.bfly.b32` over the full warp (PTX ISA §9.7.8.6): value of lane `lane ^ mask`.
#[inline(always)]
pub fn shfl_xor_f32(value: f32, mask: u32) -> f32 {
    let out: f32;
    // Not `pure`, for the reason given at `shfl_up_f32`.
    // SAFETY: register-only instruction; called by all 32 lanes (member mask 0xffffffff).
    unsafe {
        asm!(
            "shfl.sync.bfly.b32 {d}, {a}, {b}, 31, 0xffffffff;",
            d = out(reg32) out, a = in(reg32) value, b = in(reg32) mask,
            options(nomem, nostack)
        )
    };
    out
}

/// `shfl.sync.idx.b32` over the full warp (PTX ISA §9.7.8.6): value of lane `src % 32`.
#[inline(always)]
pub fn shfl_idx_f32(value: f32, src: u32) -> f32 {
    let out: f32;
    // Not `pure`, for the reason given at `shfl_up_f32`.
    // SAFETY: register-only instruction; called by all 32 lanes (member mask 0xffffffff).
    unsafe {
        asm!(
            "shfl.sync.idx.b32 {d}, {a}, {b}, 31, 0xffffffff;",
            d = out(reg32) out, a = in(reg32) value, b = in(reg32) src,
            options(nomem, nostack)
        )
    };
    out
}

/// `%ctaid.y`.
#[inline(always)]
pub fn block_y() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_y() as u32 }
}

/// `%ctaid.z`.
#[inline(always)]
pub fn block_z() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_z() as u32 }
}

/// `st.shared.f32` at a shared-space address (PTX ISA §9.7.9.10).
///
/// # Safety
/// `addr` must be 4-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_f32(addr: u32, value: f32) {
    // SAFETY: the caller guarantees the address is in bounds.
    unsafe {
        asm!("st.shared.f32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) value, options(nostack))
    };
}

/// `ld.shared.f32` at a shared-space address (PTX ISA §9.7.9.8).
///
/// # Safety
/// `addr` must be 4-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_f32(addr: u32) -> f32 {
    let v: f32;
    // SAFETY: the caller guarantees the address is in bounds.
    unsafe {
        asm!("ld.shared.f32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr, options(nostack, readonly))
    };
    v
}

/// `ld.shared.v4.f32` at a shared-space address (PTX ISA §9.7.9.8).
///
/// # Safety
/// `addr` must be 16-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v4_f32(addr: u32) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    // SAFETY: the caller guarantees the address is in bounds and aligned.
    unsafe {
        asm!("ld.shared.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
             c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr, options(nostack, readonly))
    };
    [a, b, c, d]
}

/// `ld.shared.v2.f32` at a shared-space address (PTX ISA §9.7.9.8).
///
/// # Safety
/// `addr` must be 8-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v2_f32(addr: u32) -> [f32; 2] {
    let (a, b): (f32, f32);
    // SAFETY: the caller guarantees the address is in bounds and aligned.
    unsafe {
        asm!("ld.shared.v2.f32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
             p = in(reg32) addr, options(nostack, readonly))
    };
    [a, b]
}

/// `st.shared.v2.f32` at a shared-space address (PTX ISA §9.7.9.10).
///
/// # Safety
/// `addr` must be 8-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_v2_f32(addr: u32, v: [f32; 2]) {
    // SAFETY: the caller guarantees the address is in bounds and aligned.
    unsafe {
        asm!("st.shared.v2.f32 [{p}], {{{a}, {b}}};", p = in(reg32) addr, a = in(reg32) v[0],
             b = in(reg32) v[1], options(nostack))
    };
}

/// `st.shared.b16` at a shared-space address (PTX ISA §9.7.9.10).
///
/// # Safety
/// `addr` must lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_u16(addr: u32, value: u16) {
    // SAFETY: the caller guarantees the address is in bounds.
    unsafe {
        asm!("st.shared.b16 [{a}], {v};", a = in(reg32) addr, v = in(reg16) value, options(nostack))
    };
}

/// `ld.shared.b32` at a shared-space address (PTX ISA §9.7.9.8).
///
/// # Safety
/// `addr` must be 4-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_shared_u32(addr: u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees the address is in bounds.
    unsafe {
        asm!("ld.shared.b32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr, options(nostack, readonly))
    };
    v
}

/// `st.shared.b32` at a shared-space address (PTX ISA §9.7.9.10).
///
/// # Safety
/// `addr` must be 4-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_u32(addr: u32, value: u32) {
    // SAFETY: the caller guarantees the address is in bounds.
    unsafe {
        asm!("st.shared.b32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) value, options(nostack))
    };
}

/// `x`, hidden from the optimizer (`mov.u32`): a loop bounded by it is not unrolled, which keeps
/// large loop bodies from being replicated (and their registers multiplied).
#[inline(always)]
pub fn opaque_u32(x: u32) -> u32 {
    let y: u32;
    // SAFETY: register move.
    unsafe {
        asm!("mov.u32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack))
    };
    y
}

/// `(%ctaid.x, %ctaid.y, %ctaid.z, %tid.x)` read anew at each call (`mov.u32`, not `pure`):
/// after a long loop, values derived from them are re-formed instead of held in registers across
/// it (PTX ISA §10, special registers).
#[inline(always)]
pub fn block_and_thread_fresh() -> (u32, u32, u32, u32) {
    let (bx, by, bz, tx): (u32, u32, u32, u32);
    // SAFETY: reads special registers.
    unsafe {
        asm!("mov.u32 {bx}, %ctaid.x;", "mov.u32 {by}, %ctaid.y;", "mov.u32 {bz}, %ctaid.z;",
             "mov.u32 {tx}, %tid.x;", bx = out(reg32) bx, by = out(reg32) by,
             bz = out(reg32) bz, tx = out(reg32) tx, options(nomem, nostack))
    };
    (bx, by, bz, tx)
}

/// `x` as its own instruction at each call (`mov.u32`, not `pure`): values derived from it are
/// recomputed where they are used instead of being hoisted out of a long loop and held in
/// registers across it (PTX ISA §9.7.9.1).
#[inline(always)]
pub fn fresh_u32(x: u32) -> u32 {
    let y: u32;
    // SAFETY: register move.
    unsafe {
        asm!("mov.u32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(nomem, nostack))
    };
    y
}

/// `st.shared.v4.f32` at a shared-space address (PTX ISA §9.7.9.10).
///
/// # Safety
/// `addr` must be 16-byte aligned and lie inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_v4_f32(addr: u32, v: [f32; 4]) {
    // SAFETY: the caller guarantees the address is in bounds and aligned.
    unsafe {
        asm!("st.shared.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr, a = in(reg32) v[0],
             b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
    };
}
