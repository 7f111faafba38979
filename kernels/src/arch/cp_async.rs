//! Asynchronous global→shared copies, `cp.async` (PTX ISA §9.7.9.25, sm_80).

use core::arch::asm;

/// `cp.async.cg.shared.global [dst], [src], 16;`: copies 16 bytes, bypassing L1.
///
/// # Safety
/// `dst` is a 16-byte aligned shared-space address inside the block's shared memory; `src` is a
/// 16-byte aligned global pointer to 16 readable bytes. The data is visible only after
/// [`wait_group`] and a barrier.
#[inline(always)]
pub unsafe fn cp_async_cg_16(dst: u32, src: *const u8) {
    // SAFETY: the caller guarantees both addresses.
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16;", d = in(reg32) dst, s = in(reg64) src,
             options(nostack))
    };
}

/// `cp.async.cg.shared.global [dst], [src], 16, src_size;`: copies the first `src_size` bytes
/// (0 or 16) and zero-fills the rest of the 16, so a tile's rows past the data need no branch
/// and hold zeros instead of stale values.
///
/// # Safety
/// As [`cp_async_cg_16`]; `src` must be a valid 16-byte aligned global pointer even when
/// `src_size` is 0.
#[inline(always)]
pub unsafe fn cp_async_cg_16_zfill(dst: u32, src: *const u8, src_size: u32) {
    // SAFETY: the caller guarantees both addresses.
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst,
             s = in(reg64) src, n = in(reg32) src_size, options(nostack))
    };
}

/// `cp.async.ca.shared.global [dst], [src], 8;`: copies 8 bytes through L1 (`.cg` takes only
/// 16-byte copies).
///
/// # Safety
/// `dst` is an 8-byte aligned shared-space address inside the block's shared memory; `src` is an
/// 8-byte aligned global pointer to 8 readable bytes. The data is visible only after
/// [`wait_group`] (to this thread) and a barrier (to the others).
#[inline(always)]
pub unsafe fn cp_async_ca_8(dst: u32, src: *const u8) {
    // SAFETY: the caller guarantees both addresses.
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 8;", d = in(reg32) dst, s = in(reg64) src,
             options(nostack))
    };
}

/// `cp.async.ca.shared.global [dst], [src], 4, src_size;`: copies the first `src_size` bytes (0
/// or 4) of a 4-byte word and zero-fills the rest (a scalar of a row that may end early).
///
/// # Safety
/// `dst` is a 4-byte aligned shared-space address inside the block's shared memory; `src` is a
/// 4-byte aligned global pointer to 4 readable bytes, even when `src_size` is 0. The data is
/// visible only after [`wait_group`] (to this thread) and a barrier (to the others).
#[inline(always)]
pub unsafe fn cp_async_ca_4_zfill(dst: u32, src: *const u8, src_size: u32) {
    // SAFETY: the caller guarantees both addresses.
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {n};", d = in(reg32) dst,
             s = in(reg64) src, n = in(reg32) src_size, options(nostack))
    };
}

/// `cp.async.commit_group;`: closes the group of copies issued so far by this thread.
#[inline(always)]
pub fn commit_group() {
    // SAFETY: no operands; only orders this thread's outstanding copies.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// `cp.async.wait_group N;`: waits until at most `PENDING` of this thread's groups are in flight.
#[inline(always)]
pub fn wait_group<const PENDING: u32>() {
    // SAFETY: only waits; the memory clobber keeps later shared loads after it.
    unsafe { asm!("cp.async.wait_group {n};", n = const PENDING, options(nostack)) };
}
