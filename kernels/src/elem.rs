//! Element types of activations in global memory: f32 or bf16 (stored as its bit pattern).
//! Arithmetic is always f32; these convert at the load/store boundary.

use crate::arch::float::to_bf16;
use crate::arch::global::{ld_global_v2_u32, ld_global_v4_f32, ld_global_v4_u32};

/// A storage type of activations.
pub trait Elem: Copy {
    /// Bytes per element in global memory.
    const BYTES: u32;
    /// Loads element `i` of `base` as f32.
    ///
    /// # Safety
    /// `base + i` must be a valid, readable element.
    unsafe fn load(base: u64, i: usize) -> f32;
    /// Stores `value` (rounded to nearest even) at element `i` of `base`.
    ///
    /// # Safety
    /// `base + i` must be a valid, writable element.
    unsafe fn store(base: u64, i: usize, value: f32);
    /// Loads elements `i .. i + 4` of `base` as f32 with one vector load.
    ///
    /// # Safety
    /// The four elements must be valid and readable, and `base + i` aligned to four elements.
    unsafe fn load4(base: u64, i: usize) -> [f32; 4];
    /// Four elements as loaded, before their conversion to f32 (fewer registers while a load is
    /// in flight for bf16).
    type Raw4: Copy + Default;
    /// Loads elements `i .. i + 4` of `base` with one vector load, unconverted ([`Elem::widen4`]
    /// converts them).
    ///
    /// # Safety
    /// As [`Elem::load4`].
    unsafe fn load4_raw(base: u64, i: usize) -> Self::Raw4;
    /// The f32 values of four elements loaded by [`Elem::load4_raw`].
    fn widen4(raw: Self::Raw4) -> [f32; 4];
    /// One element as loaded, before its conversion to f32.
    type Raw: Copy + Default;
    /// Loads element `i` of `base`, unconverted ([`Elem::widen`] converts it): a load whose
    /// value is converted only where it is used, so the warp does not wait for it right away.
    ///
    /// # Safety
    /// As [`Elem::load`].
    unsafe fn load_raw(base: u64, i: usize) -> Self::Raw;
    /// The f32 value of an element loaded by [`Elem::load_raw`].
    fn widen(raw: Self::Raw) -> f32;
}

/// Loads f32 element `i` of a global f32 tensor (parameters, scalars, workspaces).
///
/// # Safety
/// `base + i` must be a valid, readable f32 element.
#[inline(always)]
pub unsafe fn ldg(base: u64, i: usize) -> f32 {
    // SAFETY: forwarded to the caller.
    unsafe { <f32 as Elem>::load(base, i) }
}

/// Stores `value` at f32 element `i` of a global f32 tensor.
///
/// # Safety
/// `base + i` must be a valid, writable f32 element.
#[inline(always)]
pub unsafe fn stg(base: u64, i: usize, value: f32) {
    // SAFETY: forwarded to the caller.
    unsafe { <f32 as Elem>::store(base, i, value) }
}

/// bfloat16, as its 16-bit pattern.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl Elem for f32 {
    const BYTES: u32 = 4;
    #[inline(always)]
    unsafe fn load(base: u64, i: usize) -> f32 {
        // SAFETY: forwarded to the caller.
        unsafe { *(base as *const f32).add(i) }
    }
    #[inline(always)]
    unsafe fn store(base: u64, i: usize, value: f32) {
        // SAFETY: forwarded to the caller.
        unsafe { *(base as *mut f32).add(i) = value }
    }
    #[inline(always)]
    unsafe fn load4(base: u64, i: usize) -> [f32; 4] {
        // SAFETY: forwarded to the caller (16-byte aligned).
        unsafe { ld_global_v4_f32(base + 4 * i as u64) }
    }
    type Raw4 = [f32; 4];
    #[inline(always)]
    unsafe fn load4_raw(base: u64, i: usize) -> [f32; 4] {
        // SAFETY: forwarded to the caller.
        unsafe { Self::load4(base, i) }
    }
    #[inline(always)]
    fn widen4(raw: [f32; 4]) -> [f32; 4] {
        raw
    }
    type Raw = f32;
    #[inline(always)]
    unsafe fn load_raw(base: u64, i: usize) -> f32 {
        // SAFETY: forwarded to the caller.
        unsafe { Self::load(base, i) }
    }
    #[inline(always)]
    fn widen(raw: f32) -> f32 {
        raw
    }
}

impl Bf16 {
    /// Loads elements `i .. i + 8` of a bf16 tensor with one 16-byte load, unconverted
    /// ([`Bf16::widen8`] converts them).
    ///
    /// # Safety
    /// The eight elements must be valid and readable, and `base + 2i` 16-byte aligned.
    #[inline(always)]
    pub unsafe fn load8_raw(base: u64, i: usize) -> [u32; 4] {
        // SAFETY: forwarded to the caller (16-byte aligned).
        unsafe { ld_global_v4_u32(base + 2 * i as u64) }
    }
    /// The f32 values of eight elements loaded by [`Bf16::load8_raw`].
    #[inline(always)]
    pub fn widen8([a, b, c, d]: [u32; 4]) -> [f32; 8] {
        let [x0, x1, x2, x3] = Self::widen4([a, b]);
        let [x4, x5, x6, x7] = Self::widen4([c, d]);
        [x0, x1, x2, x3, x4, x5, x6, x7]
    }
}

impl Elem for Bf16 {
    const BYTES: u32 = 2;
    #[inline(always)]
    unsafe fn load(base: u64, i: usize) -> f32 {
        // SAFETY: forwarded to the caller.
        Self::widen(unsafe { Self::load_raw(base, i) })
    }
    #[inline(always)]
    unsafe fn store(base: u64, i: usize, value: f32) {
        // SAFETY: forwarded to the caller.
        unsafe { *(base as *mut u16).add(i) = to_bf16(value) }
    }
    #[inline(always)]
    unsafe fn load4(base: u64, i: usize) -> [f32; 4] {
        // SAFETY: forwarded to the caller.
        Self::widen4(unsafe { Self::load4_raw(base, i) })
    }
    type Raw4 = [u32; 2];
    #[inline(always)]
    unsafe fn load4_raw(base: u64, i: usize) -> [u32; 2] {
        // SAFETY: forwarded to the caller (8-byte aligned).
        unsafe { ld_global_v2_u32(base + 2 * i as u64) }
    }
    /// Element i is the low half of word 0.
    #[inline(always)]
    fn widen4([lo, hi]: [u32; 2]) -> [f32; 4] {
        [
            f32::from_bits(lo << 16),
            f32::from_bits(lo & 0xffff_0000),
            f32::from_bits(hi << 16),
            f32::from_bits(hi & 0xffff_0000),
        ]
    }
    /// The bit pattern, zero-extended.
    type Raw = u32;
    #[inline(always)]
    unsafe fn load_raw(base: u64, i: usize) -> u32 {
        // SAFETY: forwarded to the caller.
        (unsafe { *(base as *const u16).add(i) }) as u32
    }
    #[inline(always)]
    fn widen(raw: u32) -> f32 {
        f32::from_bits(raw << 16)
    }
}
