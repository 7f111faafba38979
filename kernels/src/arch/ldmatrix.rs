//! Warp-level shared-memory matrix loads, `ldmatrix.sync.aligned` (PTX ISA §9.7.13.4.15, sm_75+).
//!
//! With `.x4`, lanes 8·j … 8·j+7 give the row addresses of 8×8 b16 matrix j (16 contiguous bytes
//! each, 16-byte aligned); every lane receives one packed pair from each matrix. The lane→element
//! maps are in [`crate::frag`].

use core::arch::asm;

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: lane `l` gets, in register j, row `l/4`,
/// columns `2·(l%4)` (low half) and `2·(l%4)+1` (high half) of matrix j.
///
/// # Safety
/// `row_addr` is this lane's 16-byte aligned shared-space row address, inside the block's shared
/// memory; all 32 lanes call together.
#[inline(always)]
pub unsafe fn ldmatrix_x4(row_addr: u32) -> [u32; 4] {
    let r: [u32; 4];
    // SAFETY: the caller guarantees valid, aligned shared addresses on every lane.
    unsafe {
        let (r0, r1, r2, r3): (u32, u32, u32, u32);
        asm!(
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{r0}, {r1}, {r2}, {r3}}}, [{a}];",
            r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
            a = in(reg32) row_addr, options(nostack, readonly)
        );
        r = [r0, r1, r2, r3];
    }
    r
}

/// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: as [`ldmatrix_x4`] but each matrix is
/// transposed: lane `l` gets rows `2·(l%4)` (low) and `2·(l%4)+1` (high) of column `l/4`.
///
/// # Safety
/// As for [`ldmatrix_x4`].
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(row_addr: u32) -> [u32; 4] {
    let r: [u32; 4];
    // SAFETY: the caller guarantees valid, aligned shared addresses on every lane.
    unsafe {
        let (r0, r1, r2, r3): (u32, u32, u32, u32);
        asm!(
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{r0}, {r1}, {r2}, {r3}}}, [{a}];",
            r0 = out(reg32) r0, r1 = out(reg32) r1, r2 = out(reg32) r2, r3 = out(reg32) r3,
            a = in(reg32) row_addr, options(nostack, readonly)
        );
        r = [r0, r1, r2, r3];
    }
    r
}

/// `stmatrix.sync.aligned.m8n8.x4.shared.b16` (PTX ISA §9.7.13.4.16; PTX 7.8, sm_90): the store
/// twin of [`ldmatrix_x4`]: lane `l`'s register j goes to row `l/4`, columns `2·(l%4)` (low
/// half) and `2·(l%4)+1` (high half) of matrix j, whose row `i` lies at the address that lane
/// `8·j + i` gives; one instruction for the four words a thread of an `mma` accumulator holds
/// per four 8×8 tiles. Emitted behind `mamba3_abi::SM90A_INSTRUCTION_MARKER`, as the `wgmma`
/// instructions are (`crate::arch::wgmma`): a kernel that uses it runs only on compute
/// capability 9.0.
///
/// # Safety
/// As for [`ldmatrix_x4`]: every lane's 16-byte aligned row address inside the block's shared
/// memory; all 32 lanes call together.
#[inline(always)]
pub unsafe fn stmatrix_x4(row_addr: u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees valid, aligned shared addresses on every lane.
    unsafe {
        asm!(
            "// mamba3-sm90a: stmatrix.sync.aligned.m8n8.x4.shared.b16 [{a}], {{{r0}, {r1}, {r2}, {r3}}};",
            a = in(reg32) row_addr, r0 = in(reg32) v[0], r1 = in(reg32) v[1], r2 = in(reg32) v[2],
            r3 = in(reg32) v[3], options(nostack)
        );
    }
}
