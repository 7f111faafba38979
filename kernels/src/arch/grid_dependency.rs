//! Programmatic dependent launch: `griddepcontrol` (PTX ISA, "Parallel Synchronization and
//! Communication Instructions: griddepcontrol"; introduced in PTX ISA 7.8, requires sm_90).
//!
//! rustc emits PTX 7.0 for `sm_80`, where the instruction does not exist, so each function here
//! emits a marker comment instead (the text of `mamba3_abi::GRIDDEPCONTROL_WAIT_MARKER` and
//! `GRIDDEPCONTROL_LAUNCH_DEPENDENTS_MARKER`; `asm!` takes only a literal, and a host test checks
//! that the module carries the markers). The host rewrites the module for compute capability 9.0 and
//! newer (`.version 7.8`, `.target sm_90`, every marker replaced by the instruction it names; see
//! `mamba3::ptx_for_compute_capability`) and only there launches the marked kernels with the
//! programmatic-stream-serialization attribute. In the sm_80 module the markers stay comments, and
//! a kernel launched without the attribute finds both instructions to be no-ops, so the same code
//! is correct under either launch.

use core::arch::asm;

/// `griddepcontrol.wait`: blocks until the grids this one depends on have completed and their
/// memory operations are visible. Every block of a kernel launched with programmatic stream
/// serialization must pass here before it reads or writes global memory another kernel touches.
/// The missing `nomem` option makes it a compiler memory barrier: no load is hoisted above it.
#[inline(always)]
pub fn wait_for_prerequisite_grids() {
    // SAFETY: the instruction only waits; it reads and writes nothing of the program's.
    unsafe {
        asm!(
            "// mamba3-griddepcontrol: wait",
            options(nostack, preserves_flags)
        )
    };
}

/// `griddepcontrol.launch_dependents`: lets the next kernel of the stream, when launched with
/// programmatic stream serialization, be scheduled once every block of this grid has issued it
/// (that kernel still waits for this grid's completion in its own
/// [`wait_for_prerequisite_grids`]).
#[inline(always)]
pub fn launch_dependent_grids() {
    // SAFETY: a scheduling hint; it reads and writes nothing of the program's.
    unsafe {
        asm!(
            "// mamba3-griddepcontrol: launch_dependents",
            options(nostack, preserves_flags)
        )
    };
}

/// The prologue of every kernel the host may launch with programmatic stream serialization: wait
/// for the previous kernel, then let the next one be scheduled (after the wait, so at most one
/// grid waits behind a running one).
#[inline(always)]
pub fn dependent_launch_prologue() {
    wait_for_prerequisite_grids();
    launch_dependent_grids();
}
