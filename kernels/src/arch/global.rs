//! Global-memory accesses with an explicit state space, and the grid-scope atomics and fences of
//! the decode kernel's last-block hand-off.
//!
//! Device pointers arrive as `u64` addresses; plain Rust dereferences of them compile to generic
//! `ld`/`st`, which need an address-space check per access. These name `.global` directly.

use core::arch::asm;

/// `ld.global.f32` (PTX ISA §9.7.9.8) of a location the kernel may also write.
///
/// # Safety
/// `addr` is a 4-byte aligned global address of a readable f32.
#[inline(always)]
pub unsafe fn ld_global_f32(addr: u64) -> f32 {
    let v: f32;
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("ld.global.f32 {v}, [{a}];", v = out(reg32) v, a = in(reg64) addr, options(nostack, readonly))
    };
    v
}

/// `ld.global.nc.f32` (PTX ISA §9.7.9.9): through the non-coherent (read-only) data cache, for
/// parameters and inputs no thread of the launch writes.
///
/// # Safety
/// `addr` is a 4-byte aligned global address of an f32 that stays unchanged during the launch.
#[inline(always)]
pub unsafe fn ld_global_nc_f32(addr: u64) -> f32 {
    let v: f32;
    // SAFETY: the caller guarantees the address and that nothing writes it during the launch.
    unsafe {
        asm!("ld.global.nc.f32 {v}, [{a}];", v = out(reg32) v, a = in(reg64) addr, options(pure, readonly, nostack))
    };
    v
}

/// `ld.global.v4.f32` (PTX ISA §9.7.9.8): 16 bytes into four registers.
///
/// # Safety
/// `addr` is a 16-byte aligned global address of four readable f32.
#[inline(always)]
pub unsafe fn ld_global_v4_f32(addr: u64) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    // SAFETY: the caller guarantees the address and its alignment.
    unsafe {
        asm!("ld.global.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
             c = out(reg32) c, d = out(reg32) d, p = in(reg64) addr, options(nostack, readonly))
    };
    [a, b, c, d]
}

/// `ld.global.v4.b32` (PTX ISA §9.7.9.8): 16 bytes into four registers.
///
/// # Safety
/// `addr` is a 16-byte aligned global address of sixteen readable bytes.
#[inline(always)]
pub unsafe fn ld_global_v4_u32(addr: u64) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees the address and its alignment.
    unsafe {
        asm!("ld.global.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
             c = out(reg32) c, d = out(reg32) d, p = in(reg64) addr, options(nostack, readonly))
    };
    [a, b, c, d]
}

/// `ld.global.v2.b32` (PTX ISA §9.7.9.8): 8 bytes into two registers.
///
/// # Safety
/// `addr` is an 8-byte aligned global address of eight readable bytes.
#[inline(always)]
pub unsafe fn ld_global_v2_u32(addr: u64) -> [u32; 2] {
    let (a, b): (u32, u32);
    // SAFETY: the caller guarantees the address and its alignment.
    unsafe {
        asm!("ld.global.v2.b32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg64) addr,
             options(nostack, readonly))
    };
    [a, b]
}

/// `ld.global.v2.f32` (PTX ISA §9.7.9.8): 8 bytes into two registers.
///
/// # Safety
/// `addr` is an 8-byte aligned global address of two readable f32.
#[inline(always)]
pub unsafe fn ld_global_v2_f32(addr: u64) -> [f32; 2] {
    let (a, b): (f32, f32);
    // SAFETY: the caller guarantees the address and its alignment.
    unsafe {
        asm!("ld.global.v2.f32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg64) addr,
             options(nostack, readonly))
    };
    [a, b]
}

/// `st.global.v2.f32` (PTX ISA §9.7.9.10): two registers to 8 bytes.
///
/// # Safety
/// `addr` is an 8-byte aligned global address of two writable f32.
#[inline(always)]
pub unsafe fn st_global_v2_f32(addr: u64, v: [f32; 2]) {
    // SAFETY: the caller guarantees the address and its alignment.
    unsafe {
        asm!("st.global.v2.f32 [{p}], {{{a}, {b}}};", p = in(reg64) addr, a = in(reg32) v[0], b = in(reg32) v[1],
             options(nostack))
    };
}

/// `st.global.v4.f32` (PTX ISA §9.7.9.10): four registers to 16 bytes.
///
/// # Safety
/// `addr` is a 16-byte aligned global address of four writable f32.
#[inline(always)]
pub unsafe fn st_global_v4_f32(addr: u64, v: [f32; 4]) {
    // SAFETY: the caller guarantees the address and its alignment.
    unsafe {
        asm!("st.global.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) addr, a = in(reg32) v[0],
             b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
    };
}

/// `st.global.f32` (PTX ISA §9.7.9.10).
///
/// # Safety
/// `addr` is a 4-byte aligned global address of a writable f32.
#[inline(always)]
pub unsafe fn st_global_f32(addr: u64, v: f32) {
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("st.global.f32 [{a}], {v};", a = in(reg64) addr, v = in(reg32) v, options(nostack))
    };
}

/// `st.global.u32` (PTX ISA §9.7.9.10).
///
/// # Safety
/// `addr` is a 4-byte aligned global address of a writable u32.
#[inline(always)]
pub unsafe fn st_global_u32(addr: u64, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("st.global.u32 [{a}], {v};", a = in(reg64) addr, v = in(reg32) v, options(nostack))
    };
}

/// `atom.acq_rel.gpu.global.add.u32` (PTX ISA §9.7.13.3; memory model §8.8, §8.9): adds `v`,
/// returns the old value. The release half orders this thread's earlier accesses (with a block
/// barrier before it, the whole block's) before the add for every thread of the GPU; the acquire
/// half orders the accesses after it (with a barrier after, the block's) after every release the
/// add reads from, so the block whose add comes last in the counter's order sees every other
/// block's earlier accesses as done. ptxas emits `MEMBAR.ALL.GPU; ATOMG; CCTL.IVALL`: the acquire
/// half is an L1 invalidation, not a wait for this thread's outstanding stores, which a
/// `fence.acq_rel.gpu` placed after them would be.
///
/// # Safety
/// `addr` is a 4-byte aligned global address of a u32.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_gpu_u32(addr: u64, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees the address; the implicit memory clobber keeps accesses on
    // their side of the ordering.
    unsafe {
        asm!("atom.acq_rel.gpu.global.add.u32 {o}, [{a}], {v};", o = out(reg32) old, a = in(reg64) addr,
             v = in(reg32) v, options(nostack))
    };
    old
}

/// `atom.acq_rel.cta.global.add.u32` (PTX ISA §9.7.13.3; memory model §8.8, §8.9): as
/// [`atom_add_acq_rel_gpu_u32`] for a counter that only threads of one block use. ptxas emits
/// `MEMBAR.ALL.CTA; ATOMG.STRONG.SM`: the release half does not wait for this thread's global
/// loads in flight to be performed GPU-wide, as the GPU-scope barrier does.
///
/// # Safety
/// `addr` is a 4-byte aligned global address of a u32; every thread that accesses it during the
/// launch belongs to the calling thread's block.
#[inline(always)]
pub unsafe fn atom_add_acq_rel_cta_u32(addr: u64, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees the address and that only this block uses it.
    unsafe {
        asm!("atom.acq_rel.cta.global.add.u32 {o}, [{a}], {v};", o = out(reg32) old, a = in(reg64) addr,
             v = in(reg32) v, options(nostack))
    };
    old
}

/// `prefetch.global.L2` (PTX ISA §9.7.9.15): brings the line holding `addr` into L2 without
/// waiting for it or occupying a register, so a later load of it costs an L2 hit.
///
/// # Safety
/// `addr` is a global address inside an allocation (a prefetch never faults, but the PTX
/// contract asks for a valid address).
#[inline(always)]
pub unsafe fn prefetch_l2(addr: u64) {
    // SAFETY: a prefetch reads nothing into the program and writes nothing.
    unsafe {
        asm!("prefetch.global.L2 [{a}];", a = in(reg64) addr, options(nostack, readonly, preserves_flags))
    };
}
