//! Shared-memory addressing shared by the kernel families: f32 regions addressed by element, and
//! f64 values kept as two 32-bit words (the f32 regions are only 4-byte aligned, so an f64 cannot
//! use an 8-byte `ld.shared.f64`).

use crate::arch::sreg::{ld_shared_u32, st_shared_f32};

/// Shared-space address of f32 element `i` of the region starting at element `region`.
#[inline(always)]
pub fn at(base: u32, region: u32, i: u32) -> u32 {
    base + 4 * (region + i)
}

/// Reads an f64 stored as two 32-bit words (low word first) at shared address `addr`.
///
/// # Safety
/// `addr .. addr + 8` must lie inside the block's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_f64(addr: u32) -> f64 {
    // SAFETY: forwarded to the caller.
    let (lo, hi) = unsafe { (ld_shared_u32(addr), ld_shared_u32(addr + 4)) };
    f64::from_bits(lo as u64 | ((hi as u64) << 32))
}

/// Writes an f64 as two 32-bit words (low word first) at shared address `addr`.
///
/// # Safety
/// `addr .. addr + 8` must lie inside the block's shared memory.
#[inline(always)]
pub unsafe fn st_shared_f64(addr: u32, value: f64) {
    let bits = value.to_bits();
    // SAFETY: forwarded to the caller.
    unsafe {
        st_shared_f32(addr, f32::from_bits(bits as u32));
        st_shared_f32(addr + 4, f32::from_bits((bits >> 32) as u32));
    }
}
