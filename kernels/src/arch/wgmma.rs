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
    advance as advance_desc, desc as sw128_desc, k_major as k_major_desc, k_major_offset,
    mn_major as mn_major_desc, mn_major_offset, GROUP_BYTES, ROW_BYTES,
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

/// The accumulator operand list of an m64n128 tile in a template: the 64 positional operands.
macro_rules! acc_list_n128 {
    () => {
        "{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}, {32}, {33}, {34}, {35}, {36}, {37}, {38}, {39}, {40}, {41}, {42}, {43}, {44}, {45}, {46}, {47}, {48}, {49}, {50}, {51}, {52}, {53}, {54}, {55}, {56}, {57}, {58}, {59}, {60}, {61}, {62}, {63}"
    };
}

/// The accumulator operand list of an m64n64 tile in a template: the 32 positional operands.
macro_rules! acc_list_n64 {
    () => {
        "{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}"
    };
}

/// One `wgmma.mma_async` instruction for `$shape` (`"m64n64k16"`) on `$ty` operands (`"bf16"`,
/// `"f16"`) with the immediates `$trans`
/// (`"imm-trans-a, imm-trans-b"`); the accumulators `$acc` (tiles `[$j]`) are the positional
/// operands, tile by tile.
macro_rules! wgmma_asm {
    ($shape:literal, $ty:literal, $list:ident, $trans:literal, $acc:ident, $a:ident, $b:ident, $sd:ident, [$($j:literal)*]) => {
        asm!(
            concat!(
                "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; ",
                "wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty, " {{",
                $list!(),
                "}}, {a}, {b}, %wgd, 1, 1, ", $trans, "; }}"
            ),
            $(
                inout(reg32) $acc[$j][0], inout(reg32) $acc[$j][1],
                inout(reg32) $acc[$j][2], inout(reg32) $acc[$j][3],
            )*
            a = in(reg64) $a, b = in(reg64) $b, sd = in(reg32) $sd,
            options(nostack)
        )
    };
}

/// The public `wgmma` entry for one shape: `$name::<TRANS_A, TRANS_B>` over an accumulator tile
/// of `[$j]` n8 tiles, waited for by `$wait`.
macro_rules! wgmma_mma {
    ($name:ident, $wait:ident, $shape:literal, $ty:literal, $n:literal, $list:ident, [$($j:literal)*]) => {
        #[doc = concat!(
            "`wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty,
            "` (PTX ISA §9.7.15.5.2): ",
            "issues `acc ← A·B (+ acc when scale_d)` for the warpgroup, A 64×16 and B 16×", $n,
            " ", $ty, " in shared memory through the descriptors `a` and `b` ([`sw128_desc`]); ",
            "`TRANS_A` / `TRANS_B` select the M-/N-major layout (else K-major). Thread `t` of the ",
            "warpgroup owns `acc[j]` = rows `16·(t/32) + (t%32)/4` (elements 0, 1) and that + 8 ",
            "(elements 2, 3), columns `8j + 2·(t%4)` and + 1: the `mma.m16n8` accumulator map of ",
            "warp `t/32`'s 16-row slice.\n\n# Safety\nAll 128 threads of a warpgroup (four ",
            "consecutive warps starting at a multiple of four) call it together with the same ",
            "descriptors, which address 1024-byte aligned SW128 tiles inside the block's shared ",
            "memory; shared stores the operands depend on were followed by ",
            "[`fence_proxy_async_shared`] and a barrier, and [`fence`] ran after the last ",
            "ordinary write of `acc`. `acc` is not read or written until [`commit_group`] and [`",
            stringify!($wait),
            "`]. Compute capability 9.0 only (in other modules this is a comment and `acc` stays ",
            "unchanged)."
        )]
        #[inline(always)]
        pub unsafe fn $name<const TRANS_A: bool, const TRANS_B: bool>(
            acc: &mut [[f32; 4]; [$($j),*].len()],
            a: u64,
            b: u64,
            scale_d: bool,
        ) {
            let sd = scale_d as u32;
            // SAFETY: the caller's contract.
            unsafe {
                match (TRANS_A, TRANS_B) {
                    (false, false) => wgmma_asm!($shape, $ty, $list, "0, 0", acc, a, b, sd, [$($j)*]),
                    (false, true) => wgmma_asm!($shape, $ty, $list, "0, 1", acc, a, b, sd, [$($j)*]),
                    (true, false) => wgmma_asm!($shape, $ty, $list, "1, 0", acc, a, b, sd, [$($j)*]),
                    (true, true) => wgmma_asm!($shape, $ty, $list, "1, 1", acc, a, b, sd, [$($j)*]),
                }
            }
        }
    };
}

/// `wgmma.wait_group.sync.aligned 0` for an accumulator tile of `[$j]` n8 tiles: the
/// accumulators are operands (listed in a comment line) so that the compiler keeps every read
/// of them after the wait.
macro_rules! wgmma_wait {
    ($name:ident, $shape:literal, $list:ident, [$($j:literal)*]) => {
        #[doc = concat!(
            "`wgmma.wait_group.sync.aligned 0` (PTX ISA §9.7.15.7.3): waits until every ",
            "committed `wgmma` group of the warpgroup has completed, then makes `acc` (an ",
            $shape,
            " accumulator tile those groups wrote) readable. The accumulators are operands of ",
            "the wait so that the compiler keeps every read of them after it."
        )]
        #[inline(always)]
        pub fn $name(acc: &mut [[f32; 4]; [$($j),*].len()]) {
            // SAFETY: a warpgroup-collective wait; it only orders the listed registers after it.
            unsafe {
                asm!(
                    "// mamba3-sm90a: wgmma.wait_group.sync.aligned 0;",
                    concat!("// ", $list!()),
                    $(
                        inout(reg32) acc[$j][0], inout(reg32) acc[$j][1],
                        inout(reg32) acc[$j][2], inout(reg32) acc[$j][3],
                    )*
                    options(nostack)
                )
            };
        }
    };
}

/// One `wgmma.mma_async` instruction for `$shape` with A from four registers per thread and the
/// immediate `$trans_b`; the accumulators `$acc` (tiles `[$j]`) are the positional operands.
macro_rules! wgmma_rs_asm {
    ($shape:literal, $ty:literal, $list:ident, $trans_b:literal, $acc:ident, $a:ident, $b:ident, $sd:ident, [$($j:literal)*]) => {
        asm!(
            concat!(
                "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; ",
                "wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty, " {{",
                $list!(),
                "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, %wgd, 1, 1, ", $trans_b, "; }}"
            ),
            $(
                inout(reg32) $acc[$j][0], inout(reg32) $acc[$j][1],
                inout(reg32) $acc[$j][2], inout(reg32) $acc[$j][3],
            )*
            a0 = in(reg32) $a[0], a1 = in(reg32) $a[1], a2 = in(reg32) $a[2], a3 = in(reg32) $a[3],
            b = in(reg64) $b, sd = in(reg32) $sd,
            options(nostack)
        )
    };
}

/// Keeps the A registers of eight k16 steps (an m64k128 operand) of [`mma_m64n64k16_bf16_rs`]
/// alive up to this point: an empty instruction that reads and rewrites them, placed after the wait
/// that retires those products, so that the compiler gives none of their registers to another
/// value while the tensor cores may still read them.
#[inline(always)]
pub fn keep_a_m64k128(a: &mut [[u32; 4]; 8]) {
    // SAFETY: an empty instruction (a comment); it only extends the registers' lifetimes.
    unsafe {
        asm!(
            concat!("// ", acc_list_n64!()),
            inout(reg32) a[0][0], inout(reg32) a[0][1], inout(reg32) a[0][2], inout(reg32) a[0][3],
            inout(reg32) a[1][0], inout(reg32) a[1][1], inout(reg32) a[1][2], inout(reg32) a[1][3],
            inout(reg32) a[2][0], inout(reg32) a[2][1], inout(reg32) a[2][2], inout(reg32) a[2][3],
            inout(reg32) a[3][0], inout(reg32) a[3][1], inout(reg32) a[3][2], inout(reg32) a[3][3],
            inout(reg32) a[4][0], inout(reg32) a[4][1], inout(reg32) a[4][2], inout(reg32) a[4][3],
            inout(reg32) a[5][0], inout(reg32) a[5][1], inout(reg32) a[5][2], inout(reg32) a[5][3],
            inout(reg32) a[6][0], inout(reg32) a[6][1], inout(reg32) a[6][2], inout(reg32) a[6][3],
            inout(reg32) a[7][0], inout(reg32) a[7][1], inout(reg32) a[7][2], inout(reg32) a[7][3],
            options(nostack)
        )
    };
}

/// One `wgmma.mma_async` that starts a fresh accumulator tile (scale-d false): the accumulators
/// are outputs only, so the compiler keeps no earlier value of them alive into the product.
/// `$a` is either `desc` (A through a descriptor, immediates `$trans`) or the four registers.
macro_rules! wgmma_fresh_asm {
    (desc, $shape:literal, $ty:literal, $list:ident, $trans:literal, $acc:ident, $a:ident, $b:ident, [$($j:literal)*]) => {
        asm!(
            concat!(
                "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; ",
                "wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty, " {{",
                $list!(),
                "}}, {a}, {b}, %wgd, 1, 1, ", $trans, "; }}"
            ),
            $(
                out(reg32) $acc[$j][0], out(reg32) $acc[$j][1],
                out(reg32) $acc[$j][2], out(reg32) $acc[$j][3],
            )*
            a = in(reg64) $a, b = in(reg64) $b, sd = in(reg32) 0u32,
            options(nostack)
        )
    };
    (regs, $shape:literal, $ty:literal, $list:ident, $trans_b:literal, $acc:ident, $a:ident, $b:ident, [$($j:literal)*]) => {
        asm!(
            concat!(
                "// mamba3-sm90a: {{ .reg .pred %wgd; setp.ne.u32 %wgd, {sd}, 0; ",
                "wgmma.mma_async.sync.aligned.", $shape, ".f32.", $ty, ".", $ty, " {{",
                $list!(),
                "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, %wgd, 1, 1, ", $trans_b, "; }}"
            ),
            $(
                out(reg32) $acc[$j][0], out(reg32) $acc[$j][1],
                out(reg32) $acc[$j][2], out(reg32) $acc[$j][3],
            )*
            a0 = in(reg32) $a[0], a1 = in(reg32) $a[1], a2 = in(reg32) $a[2], a3 = in(reg32) $a[3],
            b = in(reg64) $b, sd = in(reg32) 0u32,
            options(nostack)
        )
    };
}

/// The register-A and fresh-accumulator `wgmma` entries on `$ty` operands: `$rs`, `$rs_fresh`
/// and `$fresh` (m64n64k16).
macro_rules! wgmma_m64n64_entries {
    ($rs:ident, $rs_fresh:ident, $fresh:ident, $ty:literal) => {
        #[doc = concat!(
            "`wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, "` with A in registers ",
            "(PTX ISA §9.7.15.5.2): issues `acc ← A·B (+ acc when scale_d)` for the warpgroup, A ",
            "64×16 ", $ty, " as four registers of packed pairs per thread in the `mma.m16n8k16` ",
            "A-fragment map of warp `t/32`'s 16-row slice (`a[0]` rows g, columns 2q, 2q+1; `a[1]` ",
            "rows g+8; `a[2]`, `a[3]` the same at columns + 8; g = (t%32)/4, q = t%4), B 16×64 ",
            $ty, " in shared memory through the descriptor `b`, K-major unless `TRANS_B`. The ",
            "accumulator map is that of [`mma_m64n64k16_bf16`], so an accumulator tile's two ",
            "adjacent n8 tiles, packed, are the A registers of one k16 step of the next product.",
            "\n\n# Safety\nAs [`mma_m64n64k16_bf16`]; [`fence`] also ran after the last ordinary ",
            "write of `a`, and the registers of `a` stay untouched until the wait that retires ",
            "this product (pass them to [`keep_a_m64k128`] after it)."
        )]
        #[inline(always)]
        pub unsafe fn $rs<const TRANS_B: bool>(
            acc: &mut [[f32; 4]; 8],
            a: [u32; 4],
            b: u64,
            scale_d: bool,
        ) {
            let sd = scale_d as u32;
            // SAFETY: the caller's contract.
            unsafe {
                if TRANS_B {
                    wgmma_rs_asm!("m64n64k16", $ty, acc_list_n64, "1", acc, a, b, sd, [0 1 2 3 4 5 6 7]);
                } else {
                    wgmma_rs_asm!("m64n64k16", $ty, acc_list_n64, "0", acc, a, b, sd, [0 1 2 3 4 5 6 7]);
                }
            }
        }

        #[doc = concat!(
            "[`", stringify!($rs), "`] without scale-d: returns a fresh accumulator tile, so that ",
            "no earlier value of the tile stays alive into the product.\n\n# Safety\nAs [`",
            stringify!($rs), "`]."
        )]
        #[inline(always)]
        pub unsafe fn $rs_fresh<const TRANS_B: bool>(a: [u32; 4], b: u64) -> [[f32; 4]; 8] {
            let mut acc = [[0.0f32; 4]; 8];
            // SAFETY: the caller's contract.
            unsafe {
                if TRANS_B {
                    wgmma_fresh_asm!(regs, "m64n64k16", $ty, acc_list_n64, "1", acc, a, b, [0 1 2 3 4 5 6 7]);
                } else {
                    wgmma_fresh_asm!(regs, "m64n64k16", $ty, acc_list_n64, "0", acc, a, b, [0 1 2 3 4 5 6 7]);
                }
            }
            acc
        }

        #[doc = concat!(
            "The m64n64k16 `wgmma` on ", $ty, " operands through descriptors without scale-d: ",
            "returns a fresh accumulator tile `A·B` (its first k16 step), so that no earlier value ",
            "of the tile stays alive into the product.\n\n# Safety\nAs [`mma_m64n64k16_bf16`]."
        )]
        #[inline(always)]
        pub unsafe fn $fresh<const TRANS_A: bool, const TRANS_B: bool>(
            a: u64,
            b: u64,
        ) -> [[f32; 4]; 8] {
            let mut acc = [[0.0f32; 4]; 8];
            // SAFETY: the caller's contract.
            unsafe {
                match (TRANS_A, TRANS_B) {
                    (false, false) => {
                        wgmma_fresh_asm!(desc, "m64n64k16", $ty, acc_list_n64, "0, 0", acc, a, b, [0 1 2 3 4 5 6 7])
                    }
                    (false, true) => {
                        wgmma_fresh_asm!(desc, "m64n64k16", $ty, acc_list_n64, "0, 1", acc, a, b, [0 1 2 3 4 5 6 7])
                    }
                    (true, false) => {
                        wgmma_fresh_asm!(desc, "m64n64k16", $ty, acc_list_n64, "1, 0", acc, a, b, [0 1 2 3 4 5 6 7])
                    }
                    (true, true) => {
                        wgmma_fresh_asm!(desc, "m64n64k16", $ty, acc_list_n64, "1, 1", acc, a, b, [0 1 2 3 4 5 6 7])
                    }
                }
            }
            acc
        }
    };
}

wgmma_m64n64_entries!(
    mma_m64n64k16_bf16_rs,
    mma_m64n64k16_bf16_rs_fresh,
    mma_m64n64k16_bf16_fresh,
    "bf16"
);
wgmma_m64n64_entries!(
    mma_m64n64k16_f16_rs,
    mma_m64n64k16_f16_rs_fresh,
    mma_m64n64k16_f16_fresh,
    "f16"
);

/// `wgmma.wait_group.sync.aligned PENDING` for an accumulator tile of `[$j]` n8 tiles.
macro_rules! wgmma_wait_pending {
    ($name:ident, $shape:literal, $list:ident, [$($j:literal)*]) => {
        #[doc = concat!(
            "`wgmma.wait_group.sync.aligned PENDING` (PTX ISA §9.7.15.7.3): waits until at most ",
            "`PENDING` of the warpgroup's committed `wgmma` groups are still running (groups ",
            "complete in commit order), then makes `acc` (an ", $shape, " accumulator tile that ",
            "the completed groups wrote) readable; the accumulators are operands of the wait so ",
            "that the compiler keeps every read of them after it."
        )]
        #[inline(always)]
        pub fn $name<const PENDING: u32>(acc: &mut [[f32; 4]; [$($j),*].len()]) {
            // SAFETY: a warpgroup-collective wait; it only orders the listed registers after it.
            unsafe {
                asm!(
                    "// mamba3-sm90a: wgmma.wait_group.sync.aligned {n};",
                    concat!("// ", $list!()),
                    $(
                        inout(reg32) acc[$j][0], inout(reg32) acc[$j][1],
                        inout(reg32) acc[$j][2], inout(reg32) acc[$j][3],
                    )*
                    n = const PENDING,
                    options(nostack)
                )
            };
        }
    };
}

wgmma_wait_pending!(wait_m64n64, "m64n64", acc_list_n64, [0 1 2 3 4 5 6 7]);
wgmma_wait_pending!(wait_m64n128, "m64n128", acc_list_n128,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15]);

wgmma_mma!(mma_m64n64k16_bf16, wait_all_m64n64, "m64n64k16", "bf16", "64", acc_list_n64,
    [0 1 2 3 4 5 6 7]);
wgmma_mma!(mma_m64n64k16_f16, wait_all_m64n64, "m64n64k16", "f16", "64", acc_list_n64,
    [0 1 2 3 4 5 6 7]);
wgmma_mma!(mma_m64n128k16_bf16, wait_all_m64n128, "m64n128k16", "bf16", "128", acc_list_n128,
    [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15]);
wgmma_wait!(wait_all_m64n64, "m64n64", acc_list_n64, [0 1 2 3 4 5 6 7]);
wgmma_wait!(wait_all_m64n128, "m64n128", acc_list_n128, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15]);
