//! Programmatic dependent launch: `griddepcontrol` (PTX ISA, "Parallel Synchronization and
//! Communication Instructions: griddepcontrol"; introduced in PTX ISA 7.8, requires sm_90).
//!
//! rustc emits PTX 7.0 for `sm_80`, where the instruction does not exist, so each function here
//! emits a marker comment instead (the text of `mamba3_abi::GRIDDEPCONTROL_WAIT_MARKER` and
//! `GRIDDEPCONTROL_LAUNCH_DEPENDENTS_MARKER`; `asm!` takes only a literal, and a host test checks
//! that the module carries the markers). The host rewrites the module for compute capability 9.0 and
//! newer (`.version 8.0`, `.target sm_90`, every marker replaced by the instruction it names; see
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

/// `cp.async.bulk.prefetch.L2.global [addr], bytes` when `on` (PTX ISA 8.0, "Data Movement and
/// Conversion Instructions: cp.async.bulk.prefetch"; sm_90): asks L2 for `bytes` (a multiple of
/// 16) from `addr` (16-byte aligned) through the bulk-copy unit, one instruction for the whole
/// range. It returns nothing to the program, so a kernel may issue it before
/// [`wait_for_prerequisite_grids`] for data the previous grid may still write: L2 is where those
/// writes land, and the kernel's own loads after the wait see them.
///
/// The condition is an instruction predicate, not a branch: branches around it made ptxas treat
/// the warp-collective code after it as possibly divergent (collective-handling `WARPSYNC`s and
/// uniform-register moves, 1 880 SASS instructions against 1 472 in the one-token decode). In the
/// `sm_80` module the line is the comment `mamba3_abi::SM90_INSTRUCTION_MARKER` + instruction, a
/// no-op; the host's `sm_90` rewrite restores it.
#[inline(always)]
pub fn prefetch_l2_bulk_if(on: bool, addr: u64, bytes: u32) {
    // SAFETY: a cache hint; it writes nothing and faults on nothing the program sees.
    unsafe {
        asm!(
            "// mamba3-sm90: {{ .reg .pred %pf; setp.ne.u32 %pf, {on}, 0; @%pf cp.async.bulk.prefetch.L2.global [{addr}], {bytes}; }}",
            on = in(reg32) on as u32,
            addr = in(reg64) addr,
            bytes = in(reg32) bytes,
            options(nostack, preserves_flags, readonly)
        )
    };
}

/// `prefetch.global.L2 [addr]` when `on` (PTX ISA 7.0 "Data Movement and Conversion Instructions:
/// prefetch, prefetchu"): asks L2 for the line holding `addr`. Predicated and emitted as an
/// `sm_90` instruction marker like [`prefetch_l2_bulk_if`], so that only the module that launches
/// with programmatic dependent launch (where it can run before [`wait_for_prerequisite_grids`],
/// overlapping the previous grid) carries it.
#[inline(always)]
pub fn prefetch_l2_line_if(on: bool, addr: u64) {
    // SAFETY: a cache hint; it writes nothing and faults on nothing the program sees.
    unsafe {
        asm!(
            "// mamba3-sm90: {{ .reg .pred %pf; setp.ne.u32 %pf, {on}, 0; @%pf prefetch.global.L2 [{addr}]; }}",
            on = in(reg32) on as u32,
            addr = in(reg64) addr,
            options(nostack, preserves_flags, readonly)
        )
    };
}
