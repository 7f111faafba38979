//! Warpgroup-level matrix multiply-accumulate, `wgmma` (PTX ISA §9.7.15; PTX ISA 8.0,
//! `sm_90a`), and the shared-memory layout its operands take.
//!
//! rustc emits PTX 7.0 for `sm_80`, where none of these instructions exist, so each function emits
//! the instruction behind the comment prefix `mamba3_abi::SM90A_INSTRUCTION_MARKER` (one line;
//! register operands substituted as usual). The host turns those lines into instructions only in
//! the module it loads on compute capability 9.0 (`.target sm_90a`, see
//! `mamba3::ptx_for_compute_capability`); everywhere else they stay comments, so a kernel that uses
//! them must only be launched on 9.0 (`Kernel::needs_wgmma`).
//!
//! Operand layout: every tile is stored in the 128-byte swizzle mode (PTX ISA §9.7.15.5.1.2,
//! "128B swizzling"): rows of 128 bytes (64 bf16) in 64-column blocks, block `c/64` after all
//! rows of the block before; inside a 1024-byte group of 8 rows, the 16-byte piece `q` of row `r`
//! sits at piece `q ^ (r % 8)` ([`sw128_offset`]). The same bytes serve as a K-major operand
//! (rows = M or N, columns = K) and as an M-/N-major one (rows = K, columns = M or N), so one tile
//! can feed both forms. Tiles start 1024-byte aligned (the swizzle is a function of the address).
//! Piece-wise accesses of a warp (16 bytes per lane, 8 rows) and word-wise ones along a row hit
//! 32 distinct banks.

use core::arch::asm;

pub use mamba3_abi::swizzle128::{
    desc as sw128_desc, k_major as k_major_desc, mn_major as mn_major_desc, GROUP_BYTES, ROW_BYTES,
};
pub use mamba3_abi::swizzle128_offset as sw128_offset;

/// `fence.proxy.async.shared::cta` (PTX ISA §9.7.12.4, "membar/fence"; PTX 8.0, sm_90): makes this
/// thread's earlier ordinary shared-memory writes visible to the async proxy that `wgmma` reads
/// operands through. Every writing thread runs it before the barrier that precedes the `wgmma`.
#[inline(always)]
pub fn fence_proxy_async_shared() {
    // SAFETY: a memory fence; it changes nothing the program reads.
    unsafe {
        asm!(
            "// mamba3-sm90a: fence.proxy.async.shared::cta;",
            options(nostack)
        )
    };
}

/// `wgmma.fence.sync.aligned` (PTX ISA §9.7.15.7.1): orders this warpgroup's earlier register and
/// shared-memory accesses before the `wgmma` that follow; required before the first `wgmma` of a
/// group whose accumulators ordinary instructions wrote.
#[inline(always)]
pub fn fence() {
    // SAFETY: warpgroup-collective ordering; no data effect.
    unsafe {
        asm!(
            "// mamba3-sm90a: wgmma.fence.sync.aligned;",
            options(nostack)
        )
    };
}

/// `wgmma.commit_group.sync.aligned` (PTX ISA §9.7.15.7.2): closes the group of `wgmma` issued
/// since the last commit.
#[inline(always)]
pub fn commit_group() {
    // SAFETY: warpgroup-collective bookkeeping; no data effect.
    unsafe {
        asm!(
            "// mamba3-sm90a: wgmma.commit_group.sync.aligned;",
            options(nostack)
        )
    };
}

/// `wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16` (PTX ISA §9.7.15.5.2): issues
/// `acc ← A·B (+ acc when scale_d)` for the warpgroup, A 64×16 and B 16×64 bf16 in shared memory
/// through the descriptors `a` and `b` ([`sw128_desc`]); `TRANS_A` / `TRANS_B` select the
/// M-/N-major layout (else K-major). Thread `t` of the warpgroup owns `acc[j]` = rows
/// `16·(t/32) + (t%32)/4` (elements 0, 1) and that + 8 (elements 2, 3), columns
/// `8j + 2·(t%4)` and + 1: the `mma.m16n8` accumulator map of warp `t/32`'s 16-row slice.
///
/// # Safety
/// All 128 threads of a warpgroup (four consecutive warps starting at a multiple of four) call it
/// together with the same descriptors, which address 1024-byte aligned SW128 tiles inside the
/// block's shared memory; shared stores the operands depend on were followed by
/// [`fence_proxy_async_shared`] and a barrier, and [`fence`] ran after the last ordinary write of
/// `acc`. `acc` is not read or written until [`commit_group`] and [`wait_all_m64n64`].
/// Compute capability 9.0 only (in other modules this is a comment and `acc` stays unchanged).
#[inline(always)]
pub unsafe fn mma_m64n64k16_bf16<const TRANS_A: bool, const TRANS_B: bool>(
    acc: &mut [[f32; 4]; 8],
    a: u64,
    b: u64,
    scale_d: bool,
) {
    let sd = scale_d as u32;
    // SAFETY: the caller's contract.
    unsafe {
        match (TRANS_A, TRANS_B) {
            (false, false) => mma_m64n64k16_kk(acc, a, b, sd),
            (false, true) => mma_m64n64k16_kn(acc, a, b, sd),
            (true, false) => mma_m64n64k16_mk(acc, a, b, sd),
            (true, true) => mma_m64n64k16_mn(acc, a, b, sd),
        }
    }
}

/// `wgmma.wait_group.sync.aligned 0` (PTX ISA §9.7.15.7.3): waits until every committed
/// `wgmma` group of the warpgroup has completed, then makes `acc` (an m64n64 accumulator tile
/// those groups wrote) readable. The accumulators are operands of the wait so that the compiler
/// keeps every read of them after it.
#[inline(always)]
pub fn wait_all_m64n64(acc: &mut [[f32; 4]; 8]) {
    // SAFETY: a warpgroup-collective wait; it only orders the listed registers after it.
    unsafe {
        asm!(
            "// mamba3-sm90a: wgmma.wait_group.sync.aligned 0;",
            "// {d0} {d1} {d2} {d3} {d4} {d5} {d6} {d7} {d8} {d9} {d10} {d11} {d12} {d13} {d14} {d15} {d16} {d17} {d18} {d19} {d20} {d21} {d22} {d23} {d24} {d25} {d26} {d27} {d28} {d29} {d30} {d31}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n64k16_kk(acc: &mut [[f32; 4]; 8], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}}}, {a}, {b}, %wgd, 1, 1, 0, 0; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n64k16_kn(acc: &mut [[f32; 4]; 8], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}}}, {a}, {b}, %wgd, 1, 1, 0, 1; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n64k16_mk(acc: &mut [[f32; 4]; 8], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}}}, {a}, {b}, %wgd, 1, 1, 1, 0; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n64k16_mn(acc: &mut [[f32; 4]; 8], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}}}, {a}, {b}, %wgd, 1, 1, 1, 1; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}

/// `wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16` (PTX ISA §9.7.15.5.2): issues
/// `acc ← A·B (+ acc when scale_d)` for the warpgroup, A 64×16 and B 16×128 bf16 in shared memory
/// through the descriptors `a` and `b` ([`sw128_desc`]); `TRANS_A` / `TRANS_B` select the
/// M-/N-major layout (else K-major). Thread `t` of the warpgroup owns `acc[j]` = rows
/// `16·(t/32) + (t%32)/4` (elements 0, 1) and that + 8 (elements 2, 3), columns
/// `8j + 2·(t%4)` and + 1: the `mma.m16n8` accumulator map of warp `t/32`'s 16-row slice.
///
/// # Safety
/// All 128 threads of a warpgroup (four consecutive warps starting at a multiple of four) call it
/// together with the same descriptors, which address 1024-byte aligned SW128 tiles inside the
/// block's shared memory; shared stores the operands depend on were followed by
/// [`fence_proxy_async_shared`] and a barrier, and [`fence`] ran after the last ordinary write of
/// `acc`. `acc` is not read or written until [`commit_group`] and [`wait_all_m64n128`].
/// Compute capability 9.0 only (in other modules this is a comment and `acc` stays unchanged).
#[inline(always)]
pub unsafe fn mma_m64n128k16_bf16<const TRANS_A: bool, const TRANS_B: bool>(
    acc: &mut [[f32; 4]; 16],
    a: u64,
    b: u64,
    scale_d: bool,
) {
    let sd = scale_d as u32;
    // SAFETY: the caller's contract.
    unsafe {
        match (TRANS_A, TRANS_B) {
            (false, false) => mma_m64n128k16_kk(acc, a, b, sd),
            (false, true) => mma_m64n128k16_kn(acc, a, b, sd),
            (true, false) => mma_m64n128k16_mk(acc, a, b, sd),
            (true, true) => mma_m64n128k16_mn(acc, a, b, sd),
        }
    }
}

/// `wgmma.wait_group.sync.aligned 0` (PTX ISA §9.7.15.7.3): waits until every committed
/// `wgmma` group of the warpgroup has completed, then makes `acc` (an m64n128 accumulator tile
/// those groups wrote) readable. The accumulators are operands of the wait so that the compiler
/// keeps every read of them after it.
#[inline(always)]
pub fn wait_all_m64n128(acc: &mut [[f32; 4]; 16]) {
    // SAFETY: a warpgroup-collective wait; it only orders the listed registers after it.
    unsafe {
        asm!(
            "// mamba3-sm90a: wgmma.wait_group.sync.aligned 0;",
            "// {d0} {d1} {d2} {d3} {d4} {d5} {d6} {d7} {d8} {d9} {d10} {d11} {d12} {d13} {d14} {d15} {d16} {d17} {d18} {d19} {d20} {d21} {d22} {d23} {d24} {d25} {d26} {d27} {d28} {d29} {d30} {d31} {d32} {d33} {d34} {d35} {d36} {d37} {d38} {d39} {d40} {d41} {d42} {d43} {d44} {d45} {d46} {d47} {d48} {d49} {d50} {d51} {d52} {d53} {d54} {d55} {d56} {d57} {d58} {d59} {d60} {d61} {d62} {d63}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            d32 = inout(reg32) acc[8][0], d33 = inout(reg32) acc[8][1], d34 = inout(reg32) acc[8][2], d35 = inout(reg32) acc[8][3],
            d36 = inout(reg32) acc[9][0], d37 = inout(reg32) acc[9][1], d38 = inout(reg32) acc[9][2], d39 = inout(reg32) acc[9][3],
            d40 = inout(reg32) acc[10][0], d41 = inout(reg32) acc[10][1], d42 = inout(reg32) acc[10][2], d43 = inout(reg32) acc[10][3],
            d44 = inout(reg32) acc[11][0], d45 = inout(reg32) acc[11][1], d46 = inout(reg32) acc[11][2], d47 = inout(reg32) acc[11][3],
            d48 = inout(reg32) acc[12][0], d49 = inout(reg32) acc[12][1], d50 = inout(reg32) acc[12][2], d51 = inout(reg32) acc[12][3],
            d52 = inout(reg32) acc[13][0], d53 = inout(reg32) acc[13][1], d54 = inout(reg32) acc[13][2], d55 = inout(reg32) acc[13][3],
            d56 = inout(reg32) acc[14][0], d57 = inout(reg32) acc[14][1], d58 = inout(reg32) acc[14][2], d59 = inout(reg32) acc[14][3],
            d60 = inout(reg32) acc[15][0], d61 = inout(reg32) acc[15][1], d62 = inout(reg32) acc[15][2], d63 = inout(reg32) acc[15][3],
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n128k16_kk(acc: &mut [[f32; 4]; 16], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}}}, {a}, {b}, %wgd, 1, 1, 0, 0; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            d32 = inout(reg32) acc[8][0], d33 = inout(reg32) acc[8][1], d34 = inout(reg32) acc[8][2], d35 = inout(reg32) acc[8][3],
            d36 = inout(reg32) acc[9][0], d37 = inout(reg32) acc[9][1], d38 = inout(reg32) acc[9][2], d39 = inout(reg32) acc[9][3],
            d40 = inout(reg32) acc[10][0], d41 = inout(reg32) acc[10][1], d42 = inout(reg32) acc[10][2], d43 = inout(reg32) acc[10][3],
            d44 = inout(reg32) acc[11][0], d45 = inout(reg32) acc[11][1], d46 = inout(reg32) acc[11][2], d47 = inout(reg32) acc[11][3],
            d48 = inout(reg32) acc[12][0], d49 = inout(reg32) acc[12][1], d50 = inout(reg32) acc[12][2], d51 = inout(reg32) acc[12][3],
            d52 = inout(reg32) acc[13][0], d53 = inout(reg32) acc[13][1], d54 = inout(reg32) acc[13][2], d55 = inout(reg32) acc[13][3],
            d56 = inout(reg32) acc[14][0], d57 = inout(reg32) acc[14][1], d58 = inout(reg32) acc[14][2], d59 = inout(reg32) acc[14][3],
            d60 = inout(reg32) acc[15][0], d61 = inout(reg32) acc[15][1], d62 = inout(reg32) acc[15][2], d63 = inout(reg32) acc[15][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n128k16_kn(acc: &mut [[f32; 4]; 16], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}}}, {a}, {b}, %wgd, 1, 1, 0, 1; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            d32 = inout(reg32) acc[8][0], d33 = inout(reg32) acc[8][1], d34 = inout(reg32) acc[8][2], d35 = inout(reg32) acc[8][3],
            d36 = inout(reg32) acc[9][0], d37 = inout(reg32) acc[9][1], d38 = inout(reg32) acc[9][2], d39 = inout(reg32) acc[9][3],
            d40 = inout(reg32) acc[10][0], d41 = inout(reg32) acc[10][1], d42 = inout(reg32) acc[10][2], d43 = inout(reg32) acc[10][3],
            d44 = inout(reg32) acc[11][0], d45 = inout(reg32) acc[11][1], d46 = inout(reg32) acc[11][2], d47 = inout(reg32) acc[11][3],
            d48 = inout(reg32) acc[12][0], d49 = inout(reg32) acc[12][1], d50 = inout(reg32) acc[12][2], d51 = inout(reg32) acc[12][3],
            d52 = inout(reg32) acc[13][0], d53 = inout(reg32) acc[13][1], d54 = inout(reg32) acc[13][2], d55 = inout(reg32) acc[13][3],
            d56 = inout(reg32) acc[14][0], d57 = inout(reg32) acc[14][1], d58 = inout(reg32) acc[14][2], d59 = inout(reg32) acc[14][3],
            d60 = inout(reg32) acc[15][0], d61 = inout(reg32) acc[15][1], d62 = inout(reg32) acc[15][2], d63 = inout(reg32) acc[15][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n128k16_mk(acc: &mut [[f32; 4]; 16], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}}}, {a}, {b}, %wgd, 1, 1, 1, 0; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            d32 = inout(reg32) acc[8][0], d33 = inout(reg32) acc[8][1], d34 = inout(reg32) acc[8][2], d35 = inout(reg32) acc[8][3],
            d36 = inout(reg32) acc[9][0], d37 = inout(reg32) acc[9][1], d38 = inout(reg32) acc[9][2], d39 = inout(reg32) acc[9][3],
            d40 = inout(reg32) acc[10][0], d41 = inout(reg32) acc[10][1], d42 = inout(reg32) acc[10][2], d43 = inout(reg32) acc[10][3],
            d44 = inout(reg32) acc[11][0], d45 = inout(reg32) acc[11][1], d46 = inout(reg32) acc[11][2], d47 = inout(reg32) acc[11][3],
            d48 = inout(reg32) acc[12][0], d49 = inout(reg32) acc[12][1], d50 = inout(reg32) acc[12][2], d51 = inout(reg32) acc[12][3],
            d52 = inout(reg32) acc[13][0], d53 = inout(reg32) acc[13][1], d54 = inout(reg32) acc[13][2], d55 = inout(reg32) acc[13][3],
            d56 = inout(reg32) acc[14][0], d57 = inout(reg32) acc[14][1], d58 = inout(reg32) acc[14][2], d59 = inout(reg32) acc[14][3],
            d60 = inout(reg32) acc[15][0], d61 = inout(reg32) acc[15][1], d62 = inout(reg32) acc[15][2], d63 = inout(reg32) acc[15][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}

#[inline(always)]
unsafe fn mma_m64n128k16_mn(acc: &mut [[f32; 4]; 16], a: u64, b: u64, scale_d: u32) {
    // SAFETY: forwarded from the public wrapper's contract.
    unsafe {
        asm!(
            "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{d0}, {d1}, {d2}, {d3}, {d4}, {d5}, {d6}, {d7}, {d8}, {d9}, {d10}, {d11}, {d12}, {d13}, {d14}, {d15}, {d16}, {d17}, {d18}, {d19}, {d20}, {d21}, {d22}, {d23}, {d24}, {d25}, {d26}, {d27}, {d28}, {d29}, {d30}, {d31}, {d32}, {d33}, {d34}, {d35}, {d36}, {d37}, {d38}, {d39}, {d40}, {d41}, {d42}, {d43}, {d44}, {d45}, {d46}, {d47}, {d48}, {d49}, {d50}, {d51}, {d52}, {d53}, {d54}, {d55}, {d56}, {d57}, {d58}, {d59}, {d60}, {d61}, {d62}, {d63}}}, {a}, {b}, %wgd, 1, 1, 1, 1; }}",
            d0 = inout(reg32) acc[0][0], d1 = inout(reg32) acc[0][1], d2 = inout(reg32) acc[0][2], d3 = inout(reg32) acc[0][3],
            d4 = inout(reg32) acc[1][0], d5 = inout(reg32) acc[1][1], d6 = inout(reg32) acc[1][2], d7 = inout(reg32) acc[1][3],
            d8 = inout(reg32) acc[2][0], d9 = inout(reg32) acc[2][1], d10 = inout(reg32) acc[2][2], d11 = inout(reg32) acc[2][3],
            d12 = inout(reg32) acc[3][0], d13 = inout(reg32) acc[3][1], d14 = inout(reg32) acc[3][2], d15 = inout(reg32) acc[3][3],
            d16 = inout(reg32) acc[4][0], d17 = inout(reg32) acc[4][1], d18 = inout(reg32) acc[4][2], d19 = inout(reg32) acc[4][3],
            d20 = inout(reg32) acc[5][0], d21 = inout(reg32) acc[5][1], d22 = inout(reg32) acc[5][2], d23 = inout(reg32) acc[5][3],
            d24 = inout(reg32) acc[6][0], d25 = inout(reg32) acc[6][1], d26 = inout(reg32) acc[6][2], d27 = inout(reg32) acc[6][3],
            d28 = inout(reg32) acc[7][0], d29 = inout(reg32) acc[7][1], d30 = inout(reg32) acc[7][2], d31 = inout(reg32) acc[7][3],
            d32 = inout(reg32) acc[8][0], d33 = inout(reg32) acc[8][1], d34 = inout(reg32) acc[8][2], d35 = inout(reg32) acc[8][3],
            d36 = inout(reg32) acc[9][0], d37 = inout(reg32) acc[9][1], d38 = inout(reg32) acc[9][2], d39 = inout(reg32) acc[9][3],
            d40 = inout(reg32) acc[10][0], d41 = inout(reg32) acc[10][1], d42 = inout(reg32) acc[10][2], d43 = inout(reg32) acc[10][3],
            d44 = inout(reg32) acc[11][0], d45 = inout(reg32) acc[11][1], d46 = inout(reg32) acc[11][2], d47 = inout(reg32) acc[11][3],
            d48 = inout(reg32) acc[12][0], d49 = inout(reg32) acc[12][1], d50 = inout(reg32) acc[12][2], d51 = inout(reg32) acc[12][3],
            d52 = inout(reg32) acc[13][0], d53 = inout(reg32) acc[13][1], d54 = inout(reg32) acc[13][2], d55 = inout(reg32) acc[13][3],
            d56 = inout(reg32) acc[14][0], d57 = inout(reg32) acc[14][1], d58 = inout(reg32) acc[14][2], d59 = inout(reg32) acc[14][3],
            d60 = inout(reg32) acc[15][0], d61 = inout(reg32) acc[15][1], d62 = inout(reg32) acc[15][2], d63 = inout(reg32) acc[15][3],
            a = in(reg64) a, b = in(reg64) b, sd = in(reg32) scale_d,
            options(nostack)
        )
    };
}
