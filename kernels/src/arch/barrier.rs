//! Named CTA barriers (PTX ISA §9.7.12.1, `bar`/`barrier`; PTX 2.0): hand-offs between the
//! warpgroups of a warp-specialized kernel. A barrier `ID` (1–15; 0 is the block-wide
//! `sync_threads`) completes when `THREADS` threads (a multiple of 32, counted by whole warps) have
//! reached it through either instruction; [`bar_sync`] waits for that, [`bar_arrive`] does not.
//! Both order the calling threads' earlier shared-memory accesses before the accesses of the
//! threads that wait at the same completion.

use core::arch::asm;

/// `bar.sync ID, THREADS`: arrives at named barrier `ID` and waits until `THREADS` threads have
/// arrived.
///
/// # Safety
/// Every warp that takes part reaches the call with all its lanes; exactly `THREADS` threads
/// arrive at barrier `ID` before it completes (no warp arrives twice in one completion).
#[inline(always)]
pub unsafe fn bar_sync<const ID: u32, const THREADS: u32>() {
    // SAFETY: the caller's contract.
    unsafe { asm!("bar.sync {id}, {n};", id = const ID, n = const THREADS, options(nostack)) }
}

/// `bar.arrive ID, THREADS`: arrives at named barrier `ID` without waiting (the producer side of a
/// hand-off whose consumers wait with [`bar_sync`]).
///
/// # Safety
/// As [`bar_sync`].
#[inline(always)]
pub unsafe fn bar_arrive<const ID: u32, const THREADS: u32>() {
    // SAFETY: the caller's contract.
    unsafe { asm!("bar.arrive {id}, {n};", id = const ID, n = const THREADS, options(nostack)) }
}

/// `exit;` (PTX ISA §9.7.11, control flow) in every module but compute capability 9.0's, where the host's
/// rewrite drops it (`mamba3_abi::NOT_SM90A_INSTRUCTION_MARKER`): the first statement of a kernel
/// that only runs there, so that modules that never launch it compile it to nothing.
#[inline(always)]
pub fn exit_unless_sm90a() {
    // SAFETY: ends the thread in modules that never launch the kernel; gone where it runs.
    unsafe { asm!("exit; // mamba3-not-sm90a", options(nostack)) }
}

/// `setmaxnreg.inc.sync.aligned.u32 REGS` (PTX ISA §9.7.18.1; PTX 8.0, `sm_90a`): raises the
/// calling warpgroup's per-thread register allocation to `REGS` (a multiple of 8, 24–256), waiting
/// until other warpgroups have released enough. Behind the `sm_90a` marker (see
/// `arch::wgmma`): a comment in modules for other architectures.
///
/// # Safety
/// All threads of a warpgroup execute it together; the kernel declares a register cap at entry
/// (launch bounds) and the warpgroups' totals never exceed the register file.
#[inline(always)]
pub unsafe fn setmaxnreg_inc<const REGS: u32>() {
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: setmaxnreg.inc.sync.aligned.u32 {n};",
            n = const REGS,
            options(nostack)
        )
    }
}

/// `setmaxnreg.dec.sync.aligned.u32 REGS`: lowers the calling warpgroup's per-thread register
/// allocation to `REGS`, releasing the rest to warpgroups that raise theirs.
///
/// # Safety
/// As [`setmaxnreg_inc`]; the warpgroup's code after it fits `REGS` registers.
#[inline(always)]
pub unsafe fn setmaxnreg_dec<const REGS: u32>() {
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: setmaxnreg.dec.sync.aligned.u32 {n};",
            n = const REGS,
            options(nostack)
        )
    }
}
