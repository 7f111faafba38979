//! Raw PTX: one small `#[inline(always)]` function per instruction.
//!
//! All inline `asm!` of the crate lives below this module. Each function names the PTX ISA section
//! it follows (PTX ISA 7.0 unless noted, the version rustc emits for `sm_80`).

pub mod barrier;
pub mod cp_async;
pub mod float;
pub mod global;
pub mod grid_dependency;
pub mod ldmatrix;
pub mod mma;
pub mod sreg;
pub mod wgmma;
