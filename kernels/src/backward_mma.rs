//! Mamba-3 MIMO backward on bf16 tensor cores (spec §5 on the chunked form of §2.2) for one
//! geometry: R = 4, N = 128, P = 64, Na = 32, C = 16, bf16 activations.
//!
//! One block of eight warps per (head, batch row) walks the chunks from the last to the first,
//! carrying the adjoint `G = ∂L/∂H̃'` of the state leaving the chunk as `mma` accumulators in
//! registers (warp w: state rows `p ∈ [16(w mod 4), +16)`, the 64 columns of column half `w / 4`).
//! The state `H̃` entering each chunk (bf16) and θ entering it come from the checkpoint sweep
//! (`backward_ckpt_mma_*` in `chunked_forward_mma`), which runs first.
//!
//! A chunk's 64 rank-flattened rows `ρ = 4i + r` give the bf16 operand tiles q̂, k̂ (64×128), x, δ,
//! e^A·δ, `W ⊙ q̂k̂ᵀ`, `W ⊙ δxᵀ` (64×64), H̃ and G (64×128); every product is
//! `mma.m16n8k16` with f32 accumulation and both operands read by `ldmatrix` (`.trans` for the
//! transposed ones), warp w computing row tile `w mod 4` and column half `w / 4` of each:
//!
//! * the outputs again: `y = e^{A}·q̂H̃ᵀ + (W ⊙ q̂k̂ᵀ)x + D·x`, then the output-stage backward
//!   (one warp per row, rank fixed per warp) gives δ, ∂z and the mimo_o / mimo_z / norm / D
//!   partials;
//! * `Dₛ = δxᵀ`, the token-pair sums `m(t, s) = Σ_{r,r'} (q̂k̂ᵀ ⊙ Dₛ)` by shuffles, `W ⊙ Dₛ`;
//! * `∂Q̂ = e^{A}δ·H̃ + (W ⊙ Dₛ)k̂`, `∂K̂ = (W ⊙ Dₛ)ᵀq̂ + diag(c E(e,·))·xG`,
//!   `∂X = (W ⊙ q̂k̂ᵀ)ᵀδ + diag(c E(e,·))·k̂Gᵀ + D·δ`, each row-summed against q̂ or k̂ on the way
//!   for the inter part of ∂A and the state-pass sums `sp`; the inverse rotation of ∂q̂ and ∂k̂ in
//!   registers (both members of every rotated pair lie in one lane) with ∂θ, ∂v, and the bias and
//!   mimo_v partials;
//! * `G ← e^{A_e}·G + (e^{A}δ)ᵀq̂`, and the boundary sum of ∂θ handed to the chunk before
//!   (`Σ_p G[p, a]·H̃[p, b] − G[p, b]·H̃[p, a]`, see `backward_chunked::boundary_dtheta`).
//!
//! The scalar chain (∂c, ∂A, ∂γ, the running sums of ∂θ inside the chunk, ∂a, ∂Δ, ∂trap with the
//! first token's ∂ε from the chunk before) is the chunked kernel's (`backward_chunked`, whose
//! module docs give the formulas). The next chunk's raw q, k, v, z and ∂L/∂out rows are copied by
//! `cp.async` while the current one runs.
//!
//! Precision: bf16 operands wherever the bf16 forward rounds (q̂, k̂, x, the weighted scores, the
//! state) and also δ, e^A·δ, `W ⊙ Dₛ` and G; every sum in f32, G itself in f32, the angles as in
//! the bf16 forward; the per-head ∂q̃ / ∂k̃ handed to the reduce kernel in bf16 (summed there in
//! f32). H200: worst gradient 8.6e-3 on upstream's cases and 1.1e-2 on the small calls against the
//! 2e-2 bound (the bf16 rounding of the returned gradients alone is ~4e-3); a single-token call
//! whose ∂trap cancels reaches 2.05e-2, within the change one bf16 rounding of its inputs makes
//! (`notes/backward.md`).
//!
//! Outputs are those of the other backward kernels: token gradients written directly, ∂q̃ / ∂k̃
//! per value head to `dqh` / `dkh`, parameter partials to this block's slot; `backward_reduce`
//! finishes. No atomics; every sum has a fixed order.
//!
//! # Sequence split
//! When `B·H` leaves SMs idle, the host cuts each row into segments and launches the kernel twice
//! (`split_launch`): a block then walks only its segment's chunks, from a zero adjoint (the last
//! segment, and the *local* passes of the middle segments, which run the outputs, the
//! output-stage backward and the adjoint update only) or from the true adjoint at its end,
//! combined from the local passes' start adjoints and decays. Such a block starts its ∂θ running
//! sum from the boundary sums at its end (the same identity as between chunks) and hands its
//! first token's ∂Δ / ∂λ pieces, and its last key's ∂c, to `split_tokens` for the reduce kernel.
//!
//! # Launch contract
//! Grid `(H, B, max(1, K − 1))`, block [`BACKWARD_MMA_THREADS`], dynamic shared memory [`L::BYTES`]; the
//! geometry above with bf16 activations and `seg_len = 16`; q, k, v, z and ∂L/∂out 16-byte
//! aligned; `ckpt` `(B, H, ⌈S/16⌉, P, N)` bf16 and `cs` `(B, H, ⌈S/16⌉, Na, 2)` f32 as the
//! checkpoint sweep wrote them, both 16-byte aligned; `dqh` / `dkh` take bf16
//! (`qkh_bf16 = 1`, 4-byte aligned); the other pointers as for `backward_chunked`. A split
//! call: `split_boundaries = K − 1 ≥ 2` and `split_chunks = m ≥ 1` with `(K − 1)·m < ⌈S/16⌉`,
//! `split_adj` 16-byte aligned, the split regions and `K·B` slot rows as `split_launch` lays
//! them out.

use mamba3_abi::{
    backward_mma_smem as L, output_mode, rotation, split_launch, BackwardParams, BackwardSlots,
    BACKWARD_MMA_THREADS,
};

use crate::angles::{angle_increment_f32, reduced_near_f32};
use crate::arch::cp_async::{commit_group, cp_async_cg_16_zfill, wait_group};
use crate::arch::float::{fma_rn, fms_rn, pack_bf16x2, rsqrt_approx, sincos_approx};
use crate::arch::global::{ld_global_v4_f32, prefetch_l2, st_global_u32, st_global_v4_f32};
use crate::arch::ldmatrix::{ldmatrix_x4, ldmatrix_x4_trans};
use crate::arch::mma::mma_m16n8k16_bf16_f32;
use crate::arch::sreg::{
    block_x, block_y, block_z, fresh_u32, ld_shared_f32, ld_shared_u32, ld_shared_v2_f32,
    ld_shared_v4_f32, shfl_idx_f32, shfl_xor_f32, smem_base_fresh, st_shared_f32, st_shared_u32,
    st_shared_v2_f32, st_shared_v4_f32, sync_threads, sync_warp, thread_x,
};
use crate::chunked_forward_mma::{rotate_row, unpack};
use crate::elem::{ldg, stg, Bf16, Elem};
use crate::frag::{ldsm_a, ldsm_a_trans, ldsm_b, ldsm_b_trans};
use crate::math::{exp, sigmoid_rcp, tanh_rcp};
use crate::smem::{ld_shared_f64, st_shared_f64};
use crate::warp_reduce;
use crate::warp_scan::prefix_suffix_16;

const R: u32 = 4;
const N: u32 = 128;
const P: u32 = 64;
const NA: u32 = 32;
const C: u32 = 16;
const T: u32 = BACKWARD_MMA_THREADS;
const WARPS: u32 = T / 32;
const PI: f32 = core::f32::consts::PI;

/// `rolled!(k in from, to => { body })` runs the body for `k` in `from..to` as a loop the compiler
/// keeps rolled: the counter passes through [`fresh_u32`] each iteration, so no trip count is
/// known and nothing is unrolled (fully unrolled, the products, row loops and epilogues of a chunk
/// outgrow the instruction cache: Nsight Compute put a quarter of the stall samples on waiting for
/// instructions). A macro, not a function taking a closure: the closure of a large body was not
/// inlined, and the launch parameters it borrowed went to local memory. The body must not
/// `continue` the loop.
macro_rules! rolled {
    ($k:ident in $from:expr, $to:expr => $body:block) => {{
        let mut $k: u32 = $from;
        let end: u32 = $to;
        while $k < end {
            $body
            $k = fresh_u32($k + 1);
        }
    }};
}

// Rows of the per-token scalar region `L::TOK` (16 words each).
/// Δ_t (0 past the chunk).
const TOK_DT: u32 = 0;
/// λ_t = σ(trap_t).
const TOK_LAM: u32 = 1;
/// γ_t = λ_t Δ_t.
const TOK_GAM: u32 = 2;
/// Key scale c_t = γ_t + ε_{t+1}.
const TOK_C: u32 = 3;
/// e^{A_t} (A_t the inclusive prefix of the chunk's log decays).
const TOK_EA: u32 = 4;
/// E(e, t) = e^{A_e − A_t}.
const TOK_EE: u32 = 5;
/// A_t.
const TOK_A: u32 = 6;
/// ∂A_t.
const TOK_DA: u32 = 7;
/// ∂c_t.
const TOK_DC: u32 = 8;
/// State-pass part of ∂c_t: E(e, t)·sp(t).
const TOK_SPT: u32 = 9;
/// ∂γ_t.
const TOK_DG: u32 = 10;
/// The state-pass key weight c_t·E(e, t).
const TOK_CE: u32 = 11;

// Words of `L::MISC`.
/// Per-warp partials of ⟨G, H̃⟩ (8 words).
const RED: u32 = 0;
/// Pending first token of the chunk after (two slots by chunk parity, 5 words each): its token
/// index (u32; `u32::MAX` for none), ∂Δ and ∂λ without the ε term, λ, Δ.
const PEND: u32 = 16;
const NONE: u32 = u32::MAX;

/// Per-block constants.
#[derive(Clone, Copy)]
struct Bk {
    base: u32,
    tid: u32,
    warp: u32,
    lane: u32,
    /// Row tile `warp mod 4` and column half `warp / 4` of the warp's product tiles.
    mt: u32,
    ch: u32,
    b: usize,
    h: usize,
    s_len: usize,
    heads: usize,
    groups: usize,
    /// Chunks ⌈S/C⌉.
    nc: usize,
    /// b·H + h.
    bh: usize,
    /// Start of this (b, h) row in the (B,H,S) tensors.
    row: usize,
    half_split: bool,
    prereduce: bool,
}

impl Bk {
    /// The block's constants, formed from fresh copies (`fresh_u32`, `smem_base_fresh`) of the
    /// thread and block indices, the shared base and the launch parameters: each phase builds its
    /// own, so the compiler forms the lane-dependent addresses where a phase uses them instead of
    /// hoisting them out of the chunk loop and holding them (or spilling them) through it.
    #[inline(always)]
    fn new<const HALF: bool>(prm: &BackwardParams) -> Self {
        let tid = fresh_u32(thread_x());
        let heads = fresh_u32(prm.heads) as usize;
        let groups = fresh_u32(prm.groups) as usize;
        let s_len = fresh_u32(prm.seq_len) as usize;
        let h = fresh_u32(block_x()) as usize;
        let b = fresh_u32(block_y()) as usize;
        let warp = tid / 32;
        Bk {
            base: smem_base_fresh(),
            tid,
            warp,
            lane: tid % 32,
            mt: warp % 4,
            ch: warp / 4,
            b,
            h,
            s_len,
            heads,
            groups,
            nc: s_len.div_ceil(C as usize),
            bh: b * heads + h,
            row: (b * heads + h) * s_len,
            half_split: HALF,
            prereduce: prm.mode == output_mode::PREREDUCE,
        }
    }

    /// The q/k group of this block's head, `h / (H/G)`: formed where it is used (a division by a
    /// launch value costs a subroutine-sized sequence, too much for every phase's constants).
    #[inline(always)]
    fn group(&self) -> usize {
        // `max(1)`: no divide-by-zero check (the host validates G ≥ 1 dividing H ≥ 1 anyway).
        let per_group = (self.heads as u32 / (self.groups as u32).max(1)).max(1);
        (self.h as u32 / per_group) as usize
    }

    /// Shared address of token scalar `row` of chunk token `t`.
    #[inline(always)]
    fn tok(&self, row: u32, t: u32) -> u32 {
        self.base + L::TOK + 64 * row + 4 * t
    }

    #[inline(always)]
    unsafe fn ts(&self, row: u32, t: u32) -> f32 {
        // SAFETY: forwarded to the caller (t < 16).
        unsafe { ld_shared_f32(self.tok(row, t)) }
    }

    /// The pair weight W(t, s).
    #[inline(always)]
    unsafe fn w(&self, t: u32, s: u32) -> f32 {
        // SAFETY: forwarded to the caller (t, s < 16).
        unsafe { ld_shared_f32(self.base + L::WT + 4 * (16 * t + s)) }
    }

    /// Checkpoint slot of chunk `c` of this (b, h).
    #[inline(always)]
    fn slot(&self, c: usize) -> usize {
        self.bh * self.nc + c
    }

    /// Element index of (token t, rank r, column 0) of this block's group in (B,S,R,G,N).
    #[inline(always)]
    fn qk_src(&self, t: usize, r: u32) -> usize {
        (((self.b * self.s_len + t) * R as usize + r as usize) * self.groups + self.group())
            * N as usize
    }

    /// Element index of (token t, rank r, column 0) in the per-head (B,S,R,H,N) gradients.
    #[inline(always)]
    fn qkh(&self, t: usize, r: u32) -> usize {
        (((self.b * self.s_len + t) * R as usize + r as usize) * self.heads + self.h) * N as usize
    }

    /// Element index of (token t, column 0) in a (B,S,H,P) tensor.
    #[inline(always)]
    fn vz(&self, t: usize) -> usize {
        ((self.b * self.s_len + t) * self.heads + self.h) * P as usize
    }

    /// Element index of (token t, angle j) in the (B,S,H,Na) angle tensors.
    #[inline(always)]
    fn angle(&self, t: usize, j: u32) -> usize {
        ((self.b * self.s_len + t) * self.heads + self.h) * NA as usize + j as usize
    }

    /// Tokens of chunk `c`.
    #[inline(always)]
    fn len(&self, c: usize) -> u32 {
        (self.s_len - c * C as usize).min(C as usize) as u32
    }

    /// Chunk token of the lane's accumulator row half `hr` (rows `g` and `g + 8` of the warp's
    /// row tile: tokens `4·mt + g/4` and two later).
    #[inline(always)]
    fn row_tok(&self, hr: u32) -> u32 {
        4 * self.mt + self.lane / 16 + 2 * hr
    }

    /// The lane's accumulator row of half `hr` within the chunk's 64 rows.
    #[inline(always)]
    fn acc_row(&self, hr: u32) -> u32 {
        16 * self.mt + self.lane / 4 + 8 * hr
    }

    /// Column of slot `e` of entry `t` of the warp's list of eight n8 tiles over N = 128:
    /// tiles `4·ch .. 4·ch + 4` and `8 + 4·ch ..` (column halves `[32ch, +32)` and `[64 + 32ch,
    /// +32)`, so both columns of a half-split pair `(j, j + 64)` lie in one lane).
    #[inline(always)]
    fn wide_col(&self, t: u32, e: u32) -> u32 {
        let tile = if t < 4 {
            4 * self.ch + t
        } else {
            4 + 4 * self.ch + t
        };
        8 * tile + 2 * (self.lane % 4) + e
    }

    /// Column of slot `e` of n8 tile `t` (0..4) of the warp's 32 columns over a 64-wide product.
    #[inline(always)]
    fn narrow_col(&self, t: u32, e: u32) -> u32 {
        32 * self.ch + 8 * t + 2 * (self.lane % 4) + e
    }
}

/// The chunks a block walks and what it does with them (see [`split_launch`]).
#[derive(Clone, Copy)]
struct Span {
    /// First chunk.
    lo: usize,
    /// One past the last chunk.
    hi: usize,
    /// Segment index (0 when not split; `K − 1` for the last segment).
    seg: usize,
    /// The local adjoint pass: outputs, output-stage backward and adjoint update only.
    local: bool,
    /// Starts from the true adjoint at boundary `seg` (a zero adjoint otherwise).
    from_boundary: bool,
    /// Writes the adjoint at its start (and, local, the segment's decay) to this boundary slot.
    hand_off: Option<usize>,
}

impl Span {
    #[inline(always)]
    fn new(prm: &BackwardParams, nc: usize) -> Self {
        let k1 = prm.split_boundaries as usize;
        let m = prm.split_chunks as usize;
        let j = block_z() as usize;
        let segment =
            |seg: usize, local: bool, from_boundary: bool, hand_off: Option<usize>| Span {
                lo: seg * m,
                hi: if seg == k1 { nc } else { (seg + 1) * m },
                seg,
                local,
                from_boundary,
                hand_off,
            };
        match prm.split {
            split_launch::FIRST if j == 0 => segment(k1, false, false, Some(k1 - 1)),
            split_launch::FIRST => segment(j, true, false, Some(j - 1)),
            split_launch::SECOND => segment(j, false, true, None),
            _ => Span {
                lo: 0,
                hi: nc,
                seg: 0,
                local: false,
                from_boundary: false,
                hand_off: None,
            },
        }
    }
}

/// Byte address of element 0 of this (b, h)'s boundary slot `j` of the split adjoints; a thread's
/// 32 accumulators lie at `16·(256·t + tid)` bytes from it for `t` in 0..8 (coalesced 16-byte
/// accesses).
#[inline(always)]
fn split_adj_slot(prm: &BackwardParams, bk: &Bk, j: usize) -> u64 {
    let k1 = prm.split_boundaries as usize;
    prm.split_adj + 4 * ((bk.bh * k1 + j) * (P * N) as usize) as u64
}

/// Element index of word 0 of this (b, h)'s record of boundary `j` in `split_tokens`.
#[inline(always)]
fn split_token(prm: &BackwardParams, bk: &Bk, j: usize) -> usize {
    (bk.bh * prm.split_boundaries as usize + j) * split_launch::TOKEN_WORDS as usize
}

/// The true adjoint at boundary `seg` of a split call: `G(K − 2) = adj[K − 2]`,
/// `G(i) = adj[i] + decay[i]·G(i + 1)`, summed from the last boundary down.
#[inline(always)]
unsafe fn end_adjoint(prm: &BackwardParams, bk: &Bk, seg: usize) -> [[f32; 4]; 8] {
    let k1 = prm.split_boundaries as usize;
    let mut g = [[0.0f32; 4]; 8];
    let mut j = k1;
    // SAFETY (whole body): slots `seg .. K − 1` of this (b, h), written by the first launch.
    unsafe {
        while j > seg {
            j -= 1;
            let d = if j + 1 == k1 {
                0.0
            } else {
                ldg(prm.split_decay, bk.bh * k1 + j)
            };
            let at = split_adj_slot(prm, bk, j);
            for (t, gt) in g.iter_mut().enumerate() {
                let v = ld_global_v4_f32(at + 16 * (T as u64 * t as u64 + bk.tid as u64));
                for (e, x) in gt.iter_mut().enumerate() {
                    *x = fma_rn(d, *x, v[e]);
                }
            }
        }
    }
    g
}

/// Stores the adjoint (and, for a local pass, the segment's decay) at boundary slot `j`.
#[inline(always)]
unsafe fn write_adjoint(
    prm: &BackwardParams,
    bk: &Bk,
    j: usize,
    adj: &[[f32; 4]; 8],
    decay: Option<f32>,
) {
    let at = split_adj_slot(prm, bk, j);
    // SAFETY: slot `j` of this (b, h) in the workspace of the launch contract.
    unsafe {
        for (t, gt) in adj.iter().enumerate() {
            st_global_v4_f32(at + 16 * (T as u64 * t as u64 + bk.tid as u64), *gt);
        }
        if let Some(d) = decay {
            if bk.tid == 0 {
                stg(
                    prm.split_decay,
                    bk.bh * prm.split_boundaries as usize + j,
                    d,
                );
            }
        }
    }
}

/// First column of the `ldmatrix` B pair `u` (0..4) of the warp's wide tile list.
#[inline(always)]
fn wide_pair_col(ch: u32, u: u32) -> u32 {
    32 * ch + 16 * (u % 2) + 64 * (u / 2)
}

/// The next chunk's raw inputs held in registers until its first phase.
#[derive(Clone, Copy, Default)]
struct Prefetch {
    /// Warp 0, lane u ≤ 16: adt (u < len), Δ and the trap logit of chunk token u (zero past S).
    scal: [f32; 3],
    /// Angle logit (angle = lane) and Δ of chunk tokens `2·warp + u`.
    logit: [f32; 2],
    dt: [f32; 2],
    /// θ entering the chunk (angle = lane), the checkpoint's (hi, lo) pair.
    theta: [f32; 2],
}

#[inline(always)]
unsafe fn prefetch(prm: &BackwardParams, bk: &Bk, c: usize) -> Prefetch {
    let mut pf = Prefetch::default();
    let t0 = c * C as usize;
    let len = bk.len(c);
    // SAFETY (whole body): every index is checked against the token range and lies inside the
    // tensors of the launch contract.
    unsafe {
        let t = t0 + bk.lane as usize;
        if bk.warp == 0 && bk.lane <= C && t < bk.s_len {
            if bk.lane < len {
                pf.scal[0] = ldg(prm.adt, bk.row + t);
            }
            pf.scal[1] = ldg(prm.dt, bk.row + t);
            pf.scal[2] = Bf16::load(prm.trap, bk.row + t);
        }
        for u in 0..2 {
            let i = 2 * bk.warp + u as u32;
            if i < len {
                let t = t0 + i as usize;
                pf.logit[u] = ldg(prm.angles, bk.angle(t, bk.lane));
                pf.dt[u] = ldg(prm.dt, bk.row + t);
            }
        }
        let at = 2 * (bk.slot(c) * NA as usize + bk.lane as usize);
        pf.theta = [ldg(prm.cs, at), ldg(prm.cs, at + 1)];
    }
    pf
}

/// Issues the `cp.async` copies of chunk `c`'s raw q, k rows (into the staging area) and v, z,
/// ∂L/∂out rows (into bank `bank`). Rows of times past the chunk are zero-filled (their source is
/// the chunk's first token, never read), so the phases after it run on all 16 times without a
/// branch: those rows give δ = 0 and x = 0, and their token scalars are zero.
#[inline(always)]
unsafe fn stage_chunk(prm: &BackwardParams, bk: &Bk, c: usize, bank: u32) {
    let t0 = c * C as usize;
    let len = bk.len(c);
    let tid = bk.tid;
    // SAFETY (whole body): every source is a 16-byte piece of a token < S of the 16-byte aligned
    // tensors of the launch contract; destinations lie inside the staging regions.
    unsafe {
        // q and k: 64 rows of 16 pieces; thread tid copies piece tid mod 16 of rows tid/16 + 16j.
        let piece = tid % 16;
        for j in 0..4u32 {
            let rho = tid / 16 + 16 * j;
            let (i, r) = (rho / 4, rho % 4);
            let (t, size) = if i < len {
                (t0 + i as usize, 16)
            } else {
                (t0, 0)
            };
            let src = 2 * (bk.qk_src(t, r) + 8 * piece as usize);
            let dst = rho * 256 + 16 * piece;
            cp_async_cg_16_zfill(
                bk.base + L::RAW_Q + dst,
                (prm.q as usize + src) as *const u8,
                size,
            );
            cp_async_cg_16_zfill(
                bk.base + L::RAW_K + dst,
                (prm.k as usize + src) as *const u8,
                size,
            );
        }
        let bank_at = bk.base + L::BANK + bank * L::BANK_BYTES;
        // v (threads 0–127) and z (128–255): 16 rows of 8 pieces.
        let e = tid % 128;
        let (i, piece) = (e / 8, e % 8);
        let (t, size) = if i < len {
            (t0 + i as usize, 16)
        } else {
            (t0, 0)
        };
        let src = 2 * (bk.vz(t) + 8 * piece as usize);
        let dst = i * 128 + 16 * piece;
        if tid < 128 {
            cp_async_cg_16_zfill(bank_at + dst, (prm.v as usize + src) as *const u8, size);
        } else if prm.z != 0 {
            cp_async_cg_16_zfill(
                bank_at + L::BANK_Z + dst,
                (prm.z as usize + src) as *const u8,
                size,
            );
        }
        // ∂L/∂out: 16 token rows, or 64 rows ρ in prereduce mode.
        let rows = if bk.prereduce { 64 } else { 16 };
        let mut e = tid;
        while e < rows * 8 {
            let (rho, piece) = (e / 8, e % 8);
            let (i, r) = if bk.prereduce {
                (rho / 4, rho % 4)
            } else {
                (rho, 0)
            };
            let (t, size) = if i < len {
                (t0 + i as usize, 16)
            } else {
                (t0, 0)
            };
            let src = 2 * (prm.dout_index(bk.b, t, r, bk.h, 0) + 8 * piece as usize);
            cp_async_cg_16_zfill(
                bank_at + L::BANK_DOUT + rho * 128 + 16 * piece,
                (prm.dout as usize + src) as *const u8,
                size,
            );
            e += T;
        }
    }
}

/// Prefetches chunk `c`'s state checkpoint (16 KB of bf16) into L2, one chunk before
/// [`stage_state`] copies it.
#[inline(always)]
unsafe fn prefetch_state(prm: &BackwardParams, bk: &Bk, c: usize) {
    let base = prm.ckpt + 2 * (bk.slot(c) * (P * N) as usize) as u64;
    if bk.tid < 128 {
        // SAFETY: 128 lines of 128 bytes cover the slot.
        unsafe { prefetch_l2(base + 128 * bk.tid as u64) };
    }
}

/// Issues the `cp.async` copies of chunk `c`'s state checkpoint (bf16 `(P, N)`, rows of 256
/// bytes) into the tile `HS`: thread tid copies piece tid mod 16 of rows tid/16 + 16j.
#[inline(always)]
unsafe fn stage_state(prm: &BackwardParams, bk: &Bk, c: usize) {
    let base = prm.ckpt as usize + 2 * bk.slot(c) * (P * N) as usize;
    let piece = bk.tid % 16;
    // SAFETY: inside the slot (launch contract: 16-byte aligned) and the HS tile.
    unsafe {
        for j in 0..4u32 {
            let p = bk.tid / 16 + 16 * j;
            cp_async_cg_16_zfill(
                bk.base + L::HS + p * L::QK_STRIDE + 16 * piece,
                (base + (p * 256 + 16 * piece) as usize) as *const u8,
                16,
            );
        }
    }
}

/// Warp 0: the chunk's token scalars (one time per lane; lane 16 holds the next chunk's first
/// token, whose ε enters the last key scale).
#[inline(always)]
unsafe fn token_scalars(bk: &Bk, len: u32, sc: [f32; 3]) {
    let lane = bk.lane;
    let a = if lane < len { sc[0] } else { 0.0 };
    let (pre, suf) = prefix_suffix_16(a, lane);
    let (dt, tr) = (sc[1], sc[2]);
    let lam = sigmoid_rcp(tr);
    let valid = lane < len;
    let gamma = if valid { lam * dt } else { 0.0 };
    // Zero past S (the prefetch left Δ = 0 there).
    let eps = dt * sigmoid_rcp(-tr);
    let eps_next = shfl_idx_f32(eps, lane + 1);
    let c_s = if valid { gamma + eps_next } else { 0.0 };
    let ee = exp(suf);
    if lane < C {
        // SAFETY: lane < 16 indexes the TOK rows.
        unsafe {
            st_shared_f32(bk.tok(TOK_DT, lane), if valid { dt } else { 0.0 });
            st_shared_f32(bk.tok(TOK_LAM, lane), lam);
            st_shared_f32(bk.tok(TOK_GAM, lane), gamma);
            st_shared_f32(bk.tok(TOK_C, lane), c_s);
            st_shared_f32(bk.tok(TOK_EA, lane), exp(pre));
            st_shared_f32(bk.tok(TOK_EE, lane), ee);
            st_shared_f32(bk.tok(TOK_A, lane), pre);
            st_shared_f32(bk.tok(TOK_CE, lane), c_s * ee);
        }
    }
}

/// Phase A1: the angle increments of the warp's two times (angle = lane) with their prefix
/// (returned), the warp totals and tanh of the logits into shared memory; warp 0 forms the token
/// scalars.
#[inline(always)]
unsafe fn phase_increments(bk: &Bk, len: u32, pf: &Prefetch) -> [f64; 2] {
    let mut loc = [0.0f64; 2];
    let mut acc = 0.0f64;
    // SAFETY (whole body): indices inside the TOT, DTHA and TOK regions.
    unsafe {
        for (u, l) in loc.iter_mut().enumerate() {
            // Times past the chunk have logit and Δ zero from the prefetch: an exact zero.
            acc += angle_increment_f32(pf.logit[u], pf.dt[u]) as f64;
            *l = acc;
            let t = 2 * bk.warp + u as u32;
            st_shared_f32(
                bk.base + L::DTHA + 4 * (32 * t + bk.lane),
                tanh_rcp(pf.logit[u]),
            );
        }
        st_shared_f64(bk.base + L::TOT + 8 * (32 * bk.warp + bk.lane), acc);
        if bk.warp == 0 {
            token_scalars(bk, len, pf.scal);
        }
    }
    loc
}

/// Phase A2: θ of the warp's two times, their cosines and sines; the pair tables W and E.
#[inline(always)]
unsafe fn phase_angles(bk: &Bk, len: u32, pf: &Prefetch, loc: [f64; 2]) {
    // SAFETY (whole body): indices inside the TOT, CS, TOK, WT and ET regions.
    unsafe {
        let mut totals = [0.0f64; 7];
        for (w, tot) in totals.iter_mut().enumerate() {
            *tot = ld_shared_f64(bk.base + L::TOT + 8 * (32 * w as u32 + bk.lane));
        }
        let (t, s) = (bk.tid / 16, bk.tid % 16);
        let sc = [
            ld_shared_f32(bk.tok(TOK_A, t)),
            ld_shared_f32(bk.tok(TOK_A, s)),
            ld_shared_f32(bk.tok(TOK_C, s)),
            ld_shared_f32(bk.tok(TOK_GAM, t)),
        ];
        let mut th0 = pf.theta[0] as f64 + pf.theta[1] as f64;
        for (w, tot) in totals.iter().enumerate() {
            th0 += if (w as u32) < bk.warp { *tot } else { 0.0 };
        }
        for (u, l) in loc.iter().enumerate() {
            let i = 2 * bk.warp + u as u32;
            let (sn, cs) = sincos_approx(reduced_near_f32(th0 + *l));
            st_shared_v2_f32(bk.base + L::CS + 8 * (32 * i + bk.lane), [cs, sn]);
        }
        let inside = s <= t && t < len;
        let e = if inside { exp(sc[0] - sc[1]) } else { 0.0 };
        let w = if !inside {
            0.0
        } else if s == t {
            sc[3]
        } else {
            e * sc[2]
        };
        st_shared_f32(bk.base + L::WT + 4 * bk.tid, w);
        st_shared_f32(bk.base + L::ET + 4 * bk.tid, e);
    }
}

/// Phase A3: q̂, k̂ and x of the chunk as bf16 tiles. Warp w takes rank `w mod 4` and times
/// `w / 4 + 2m`; lane l columns 2l, 2l+1, 64+2l, 65+2l of q and k (both halves of its pairs in
/// either rotation convention) and 2l, 2l+1 of x.
#[inline(always)]
unsafe fn phase_rotate(prm: &BackwardParams, bk: &Bk, bank: u32) {
    let (r, l) = (bk.warp % 4, bk.lane);
    let hr = bk.h * R as usize + r as usize;
    let cols = [2 * l, 2 * l + 1, 64 + 2 * l, 65 + 2 * l].map(|c| c as usize);
    // Half-split: lanes 0–15 read the (c, s) pairs of angles 2l, 2l+1, lanes 16–31 (columns no
    // pair rotates) the identity; pairwise: lane l reads angle l.
    let (cs_at, cs_step) = if !bk.half_split {
        (bk.base + L::CS + 8 * l, 256)
    } else if l < 16 {
        (bk.base + L::CS + 16 * l, 256)
    } else {
        (bk.base + L::IDENT, 0)
    };
    let v_at = bk.base + L::BANK + bank * L::BANK_BYTES;
    // SAFETY (whole body): (h, r, column) inside the biases and mimo_v; rows < 64 and columns
    // inside the staging area, the bank and the tiles.
    unsafe {
        let q_bias = cols.map(|c| ldg(prm.q_bias, hr * N as usize + c));
        let k_bias = cols.map(|c| ldg(prm.k_bias, hr * N as usize + c));
        let mv = [
            ldg(prm.mimo_v, hr * P as usize + 2 * l as usize),
            ldg(prm.mimo_v, hr * P as usize + 2 * l as usize + 1),
        ];
        rolled!(group in 0, 2 => {
            // Every load of four rows before their first store (the shared accesses are `asm!`
            // with memory effects and keep their order).
            let mut raw = [[0u32; 5]; 4];
            let mut css = [[0.0f32; 4]; 4];
            for (m, (row, cs)) in raw.iter_mut().zip(css.iter_mut()).enumerate() {
                let i = bk.warp / 4 + 2 * (4 * group + m as u32);
                let at = (4 * i + r) * 256 + 4 * l;
                *row = [
                    ld_shared_u32(bk.base + L::RAW_Q + at),
                    ld_shared_u32(bk.base + L::RAW_Q + at + 128),
                    ld_shared_u32(bk.base + L::RAW_K + at),
                    ld_shared_u32(bk.base + L::RAW_K + at + 128),
                    ld_shared_u32(v_at + 128 * i + 4 * l),
                ];
                *cs = if bk.half_split {
                    ld_shared_v4_f32(cs_at + cs_step * i)
                } else {
                    let [c, s] = ld_shared_v2_f32(cs_at + cs_step * i);
                    [c, s, 1.0, 0.0]
                };
            }
            for (m, (row, cs)) in raw.iter().zip(css.iter()).enumerate() {
                let i = bk.warp / 4 + 2 * (4 * group + m as u32);
                let rho = 4 * i + r;
                let qk_at = rho * L::QK_STRIDE + 4 * l;
                let (q0, q1) = rotate_row(row[0], row[1], q_bias, *cs, bk.half_split);
                let (k0, k1) = rotate_row(row[2], row[3], k_bias, *cs, bk.half_split);
                st_shared_u32(bk.base + L::QH + qk_at, q0);
                st_shared_u32(bk.base + L::QH + qk_at + 128, q1);
                st_shared_u32(bk.base + L::KH + qk_at, k0);
                st_shared_u32(bk.base + L::KH + qk_at + 128, k1);
                let (v0, v1) = unpack(row[4]);
                st_shared_u32(
                    bk.base + L::X + rho * L::X_STRIDE + 4 * l,
                    pack_bf16x2(v0 * mv[0], v1 * mv[1]),
                );
            }
        });
    }
}

/// Phase B1: the raw scores `q̂k̂ᵀ` of the warp's causal tiles (returned, kept for the pair sums)
/// with `W ⊙ q̂k̂ᵀ` into `WS`, and the inter-chunk outputs `e^{A}·q̂H̃ᵀ` of its 16×32 tile.
#[inline(always)]
unsafe fn phase_scores_inter(bk: &Bk) -> ([[f32; 4]; 4], [[f32; 4]; 4]) {
    let (mt, ch, lane) = (bk.mt, bk.ch, bk.lane);
    let mut sc = [[0.0f32; 4]; 4];
    let mut y = [[0.0f32; 4]; 4];
    // SAFETY (whole body): tile addresses inside the QH, KH, HS, WS, WT and TOK regions.
    unsafe {
        rolled!(kk in 0, 8 => {
            let a = ldmatrix_x4(bk.base + L::QH + ldsm_a(L::QK_STRIDE, 16 * mt, 16 * kk, lane));
            for u in 0..2u32 {
                let jt = 2 * ch + u;
                if jt <= mt {
                    let b =
                        ldmatrix_x4(bk.base + L::KH + ldsm_b(L::QK_STRIDE, 16 * jt, 16 * kk, lane));
                    mma_m16n8k16_bf16_f32(&mut sc[2 * u as usize], a, [b[0], b[1]]);
                    mma_m16n8k16_bf16_f32(&mut sc[2 * u as usize + 1], a, [b[2], b[3]]);
                }
            }
            for v in 0..2u32 {
                let b = ldmatrix_x4(
                    bk.base + L::HS + ldsm_b(L::QK_STRIDE, 32 * ch + 16 * v, 16 * kk, lane),
                );
                mma_m16n8k16_bf16_f32(&mut y[2 * v as usize], a, [b[0], b[1]]);
                mma_m16n8k16_bf16_f32(&mut y[2 * v as usize + 1], a, [b[2], b[3]]);
            }
        });
        let tt = [bk.row_tok(0), bk.row_tok(1)];
        for u in 0..2u32 {
            let jt = 2 * ch + u;
            if jt > mt {
                continue;
            }
            let mut wts = [[0.0f32; 2]; 2];
            for (nn, wn) in wts.iter_mut().enumerate() {
                let s_tok = 4 * jt + 2 * nn as u32 + (lane % 4) / 2;
                *wn = [bk.w(tt[0], s_tok), bk.w(tt[1], s_tok)];
            }
            for (nn, wn) in wts.iter().enumerate() {
                let s = &sc[(2 * u) as usize + nn];
                let col = 16 * jt + 8 * nn as u32 + 2 * (lane % 4);
                for hr in 0..2usize {
                    let at = bk.acc_row(hr as u32) * L::X_STRIDE + 2 * col;
                    st_shared_u32(
                        bk.base + L::WS + at,
                        pack_bf16x2(s[2 * hr] * wn[hr], s[2 * hr + 1] * wn[hr]),
                    );
                }
            }
        }
        scale_rows(bk, &mut y, TOK_EA);
    }
    (sc, y)
}

/// Multiplies each accumulator row of the warp's tiles by token scalar `row` of its token (the
/// lane's two row halves, see [`Bk::row_tok`]).
///
/// # Safety
/// The TOK region holds the chunk's token scalars.
#[inline(always)]
unsafe fn scale_rows<const K: usize>(bk: &Bk, acc: &mut [[f32; 4]; K], row: u32) {
    // SAFETY: forwarded to the caller (row tokens < 16).
    let f = unsafe { [bk.ts(row, bk.row_tok(0)), bk.ts(row, bk.row_tok(1))] };
    for at in acc.iter_mut() {
        at[0] *= f[0];
        at[1] *= f[0];
        at[2] *= f[1];
        at[3] *= f[1];
    }
}

/// Phase B2: `y += (W ⊙ q̂k̂ᵀ)·x + D·x` and y into the `Y` region.
#[inline(always)]
unsafe fn phase_intra_y(prm: &BackwardParams, bk: &Bk, bank: u32, y: &mut [[f32; 4]; 4]) {
    let (mt, ch, lane) = (bk.mt, bk.ch, bk.lane);
    // SAFETY (whole body): tile addresses inside the WS, X, bank and Y regions; (h, r, p) inside
    // mimo_v.
    unsafe {
        rolled!(kk in 0, mt + 1 => {
            let a = ldmatrix_x4(bk.base + L::WS + ldsm_a(L::X_STRIDE, 16 * mt, 16 * kk, lane));
            for v in 0..2u32 {
                let b = ldmatrix_x4_trans(
                    bk.base + L::X + ldsm_b_trans(L::X_STRIDE, 16 * kk, 32 * ch + 16 * v, lane),
                );
                mma_m16n8k16_bf16_f32(&mut y[2 * v as usize], a, [b[0], b[1]]);
                mma_m16n8k16_bf16_f32(&mut y[2 * v as usize + 1], a, [b[2], b[3]]);
            }
        });
        let d_h = if prm.d != 0 { ldg(prm.d, bk.h) } else { 0.0 };
        let r = (lane / 4) % 4;
        let mv_at = (bk.h * R as usize + r as usize) * P as usize;
        let v_at = bk.base + L::BANK + bank * L::BANK_BYTES;
        for (t, yt) in y.iter_mut().enumerate() {
            let col = bk.narrow_col(t as u32, 0);
            let dmv = [
                d_h * ldg(prm.mimo_v, mv_at + col as usize),
                d_h * ldg(prm.mimo_v, mv_at + col as usize + 1),
            ];
            for hr in 0..2u32 {
                let (v0, v1) = unpack(ld_shared_u32(v_at + 128 * bk.row_tok(hr) + 2 * col));
                let s = 2 * hr as usize;
                yt[s] = fma_rn(v0, dmv[0], yt[s]);
                yt[s + 1] = fma_rn(v1, dmv[1], yt[s + 1]);
                st_shared_v2_f32(
                    bk.base + L::Y + bk.acc_row(hr) * L::Y_STRIDE + 4 * col,
                    [yt[s], yt[s + 1]],
                );
            }
        }
    }
}

/// Phase C: the output-stage backward of the chunk's rows (warp w takes rows `ρ = w + 8k`, rank
/// `w mod 4`; lane l columns 2l, 2l+1): δ into `DL` and `e^{A}·δ` into `DLA` (bf16),
/// `∂gate·silu'·mimo_z` into `Y` in place of y, and the warp's mimo_o / mimo_z / norm / D partials
/// (`parts`, per column) in registers. Rows past the chunk have ∂L/∂out zero, hence δ = 0.
#[inline(always)]
unsafe fn phase_output(prm: &BackwardParams, bk: &Bk, bank: u32, parts: &mut [[f32; 2]; 4]) {
    let (w, l) = (bk.warp, bk.lane);
    let r = w % 4;
    let fused = prm.mode == output_mode::FUSED_NORM;
    let gated = prm.mode == output_mode::GATED;
    let has_z = prm.z != 0;
    let par = (bk.h * R as usize + r as usize) * P as usize + 2 * l as usize;
    let bank_at = bk.base + L::BANK + bank * L::BANK_BYTES;
    // SAFETY (whole body): (h, r, p) inside the (H,R,P) weights and (h, p) inside the norm
    // weight; rows < 64 inside Y, the bank and the tiles.
    unsafe {
        let two = |ptr: u64, i: usize, absent: f32| {
            if ptr != 0 {
                [ldg(ptr, i), ldg(ptr, i + 1)]
            } else {
                [absent; 2]
            }
        };
        let mo = two(prm.mimo_o, par, 1.0);
        let mz = two(prm.mimo_z, par, 0.0);
        let mv = two(prm.mimo_v, par, 0.0);
        let nw = two(prm.norm_weight, bk.h * P as usize + 2 * l as usize, 1.0);
        rolled!(group in 0, 2 => {
            let mut ys = [[0.0f32; 2]; 4];
            let mut words = [[0u32; 3]; 4];
            let mut ea = [0.0f32; 4];
            for k in 0..4usize {
                let rho = w + 8 * (4 * group + k as u32);
                let i = rho / 4;
                ys[k] = ld_shared_v2_f32(bk.base + L::Y + rho * L::Y_STRIDE + 8 * l);
                let drow = if bk.prereduce { rho } else { i };
                words[k] = [
                    ld_shared_u32(bank_at + L::BANK_DOUT + 128 * drow + 4 * l),
                    if has_z {
                        ld_shared_u32(bank_at + L::BANK_Z + 128 * i + 4 * l)
                    } else {
                        0
                    },
                    ld_shared_u32(bank_at + 128 * i + 4 * l),
                ];
                ea[k] = bk.ts(TOK_EA, i);
            }
            for k in 0..4usize {
                let rho = w + 8 * (4 * group + k as u32);
                let yv = ys[k];
                let (d0, d1) = unpack(words[k][0]);
                let d = [d0, d1];
                let (z0, z1) = unpack(words[k][1]);
                let (v0, v1) = unpack(words[k][2]);
                let x = [v0 * mv[0], v1 * mv[1]];
                let mut gates = [[1.0f32, 0.0]; 2];
                if has_z {
                    for (e, zv) in [z0, z1].iter().enumerate() {
                        let u = zv * mz[e];
                        let sg = sigmoid_rcp(u);
                        gates[e] = [u * sg, sg * fma_rn(u, 1.0 - sg, 1.0)];
                    }
                }
                let (mut rstd, mut md) = (1.0f32, 0.0f32);
                if fused {
                    let ss = warp_reduce::sum(fma_rn(yv[0], yv[0], yv[1] * yv[1]));
                    rstd = rsqrt_approx(ss / P as f32 + prm.norm_eps);
                    let mut part = 0.0f32;
                    for e in 0..2 {
                        part = fma_rn(d[e] * nw[e] * gates[e][0] * mo[e], yv[e] * rstd, part);
                    }
                    md = warp_reduce::sum(part) / P as f32;
                }
                let mut delta = [0.0f32; 2];
                let mut dgz = [0.0f32; 2];
                for e in 0..2 {
                    let [g, gp] = gates[e];
                    let (dl, dgate) = if fused {
                        let yhat = yv[e] * rstd;
                        let dyhat = d[e] * nw[e] * g * mo[e];
                        parts[2][e] = fma_rn(d[e] * yhat, g * mo[e], parts[2][e]);
                        parts[0][e] = fma_rn(d[e] * yhat, nw[e] * g, parts[0][e]);
                        (rstd * fma_rn(-yhat, md, dyhat), d[e] * yhat * nw[e] * mo[e])
                    } else if gated {
                        parts[0][e] = fma_rn(d[e] * yv[e], g, parts[0][e]);
                        (d[e] * mo[e] * g, d[e] * mo[e] * yv[e])
                    } else {
                        (d[e] * g, d[e] * yv[e])
                    };
                    let zv = if e == 0 { z0 } else { z1 };
                    parts[1][e] = fma_rn(dgate * gp, zv, parts[1][e]);
                    parts[3][e] = fma_rn(dl, x[e], parts[3][e]);
                    delta[e] = dl;
                    dgz[e] = dgate * gp * mz[e];
                }
                st_shared_v2_f32(bk.base + L::Y + rho * L::Y_STRIDE + 8 * l, dgz);
                let at = rho * L::X_STRIDE + 4 * l;
                st_shared_u32(bk.base + L::DL + at, pack_bf16x2(delta[0], delta[1]));
                st_shared_u32(
                    bk.base + L::DLA + at,
                    pack_bf16x2(delta[0] * ea[k], delta[1] * ea[k]),
                );
            }
        });
    }
}

/// Phase D1: ∂z of the chunk's tokens (the four ranks' `∂gate·silu'·mimo_z` summed).
#[inline(always)]
unsafe fn phase_dz(prm: &BackwardParams, bk: &Bk, t0: usize, len: u32) {
    if prm.z == 0 {
        return;
    }
    // SAFETY (whole body): rows < 64 of Y; (token < S, p) inside dz.
    unsafe {
        let mut e = bk.tid;
        while e < C * P / 2 {
            let (i, pp) = (e / 32, e % 32);
            let mut s = [0.0f32; 2];
            for r in 0..R {
                let v = ld_shared_v2_f32(bk.base + L::Y + (4 * i + r) * L::Y_STRIDE + 8 * pp);
                s[0] += v[0];
                s[1] += v[1];
            }
            if i < len {
                let at = bk.vz(t0 + i as usize) + 2 * pp as usize;
                st_global_u32(prm.dz + 2 * at as u64, pack_bf16x2(s[0], s[1]));
            }
            e += T;
        }
    }
}

/// Phase D2: `Dₛ = δxᵀ` of the warp's causal tiles, the token-pair sums `m(t, s)` of `q̂k̂ᵀ ⊙ Dₛ`
/// (over the 4×4 rank block of each pair) into `PM`, and `W ⊙ Dₛ` into `WD`.
#[inline(always)]
unsafe fn phase_ds(bk: &Bk, sc: &[[f32; 4]; 4]) {
    let (mt, ch, lane) = (bk.mt, bk.ch, bk.lane);
    let (g, q) = (lane / 4, lane % 4);
    // SAFETY (whole body): tile addresses inside the DL, X, WD, WT and PM regions.
    unsafe {
        let mut ds = [[0.0f32; 4]; 4];
        rolled!(kk in 0, 4 => {
            let a = ldmatrix_x4(bk.base + L::DL + ldsm_a(L::X_STRIDE, 16 * mt, 16 * kk, lane));
            for u in 0..2u32 {
                let jt = 2 * ch + u;
                if jt <= mt {
                    let b =
                        ldmatrix_x4(bk.base + L::X + ldsm_b(L::X_STRIDE, 16 * jt, 16 * kk, lane));
                    mma_m16n8k16_bf16_f32(&mut ds[2 * u as usize], a, [b[0], b[1]]);
                    mma_m16n8k16_bf16_f32(&mut ds[2 * u as usize + 1], a, [b[2], b[3]]);
                }
            }
        });
        let tt = [bk.row_tok(0), bk.row_tok(1)];
        // Σ over the lane's two columns (one rank pair each), then the other lane of the key token
        // (q xor 1), then the query token's four ranks (g bits 0–1); every shuffle before the
        // stores (see `unrotate`). Tiles past the diagonal hold zeros (no product ran): their sums
        // run all the same and are not stored.
        let mut m = [[0.0f32; 2]; 4];
        for (k, mk) in m.iter_mut().enumerate() {
            for (hr, v) in mk.iter_mut().enumerate() {
                let (a0, a1) = (2 * hr, 2 * hr + 1);
                *v = fma_rn(sc[k][a0], ds[k][a0], sc[k][a1] * ds[k][a1]);
                *v += shfl_xor_f32(*v, 1);
                *v += shfl_xor_f32(*v, 4);
                *v += shfl_xor_f32(*v, 8);
            }
        }
        for u in 0..2u32 {
            let jt = 2 * ch + u;
            if jt > mt {
                continue;
            }
            for nn in 0..2u32 {
                let k = (2 * u + nn) as usize;
                let s_tok = 4 * jt + 2 * nn + q / 2;
                let wn = [bk.w(tt[0], s_tok), bk.w(tt[1], s_tok)];
                for hr in 0..2usize {
                    if g % 4 == 0 && q % 2 == 0 {
                        st_shared_f32(bk.base + L::PM + 4 * (16 * tt[hr] + s_tok), m[k][hr]);
                    }
                    let col = 16 * jt + 8 * nn + 2 * q;
                    let at = bk.acc_row(hr as u32) * L::X_STRIDE + 2 * col;
                    st_shared_u32(
                        bk.base + L::WD + at,
                        pack_bf16x2(ds[k][2 * hr] * wn[hr], ds[k][2 * hr + 1] * wn[hr]),
                    );
                }
            }
        }
    }
}

/// Accumulates `A·B` into the warp's wide tile list (eight n8 tiles, see [`Bk::wide_col`]) over
/// depth steps `k_from .. k_to` (16 each): A from `a_tile` (`[m][k]`, or `[k][m]` when
/// `a_trans`, row stride `a_stride`), B from the 128-wide `[k][n]` tile `b_tile`.
#[inline(always)]
unsafe fn wide_product(
    bk: &Bk,
    acc: &mut [[f32; 4]; 8],
    (a_tile, a_stride, a_trans): (u32, u32, bool),
    b_tile: u32,
    (k_from, k_to): (u32, u32),
) {
    let (mt, ch, lane) = (bk.mt, bk.ch, bk.lane);
    // SAFETY: the caller's tiles hold the rows and columns addressed.
    unsafe {
        rolled!(kk in k_from, k_to => {
            let a = if a_trans {
                ldmatrix_x4_trans(a_tile + ldsm_a_trans(a_stride, 16 * mt, 16 * kk, lane))
            } else {
                ldmatrix_x4(a_tile + ldsm_a(a_stride, 16 * mt, 16 * kk, lane))
            };
            for u in 0..4u32 {
                let b = ldmatrix_x4_trans(
                    b_tile + ldsm_b_trans(L::QK_STRIDE, 16 * kk, wide_pair_col(ch, u), lane),
                );
                mma_m16n8k16_bf16_f32(&mut acc[2 * u as usize], a, [b[0], b[1]]);
                mma_m16n8k16_bf16_f32(&mut acc[2 * u as usize + 1], a, [b[2], b[3]]);
            }
        });
    }
}

/// Per accumulator row half: `Σ_n acc[row, n]·hat[row, n]` over the warp's 64 columns, summed over
/// the lane quad, stored by quad lane 0 into `region[row][ch]` (the inter part of ∂A against q̂,
/// the state-pass sums against k̂).
#[inline(always)]
unsafe fn row_dot(bk: &Bk, acc: &[[f32; 4]; 8], hat: u32, region: u32) {
    // SAFETY: rows < 64 of the 128-wide tile `hat` and of the (64, 2) region.
    unsafe {
        let sums = [0u32, 1].map(|hr| {
            let row = bk.acc_row(hr);
            let mut s = 0.0f32;
            for (t, at) in acc.iter().enumerate() {
                let col = bk.wide_col(t as u32, 0);
                let (h0, h1) = unpack(ld_shared_u32(hat + row * L::QK_STRIDE + 2 * col));
                s = fma_rn(
                    at[2 * hr as usize],
                    h0,
                    fma_rn(at[2 * hr as usize + 1], h1, s),
                );
            }
            warp_reduce::quad_sum(s)
        });
        if bk.lane % 4 == 0 {
            for (hr, s) in sums.iter().enumerate() {
                st_shared_f32(region + 4 * (2 * bk.acc_row(hr as u32) + bk.ch), *s);
            }
        }
    }
}

/// The inverse rotation of ∂q̂ (or ∂k̂, `first` false) in the warp's wide accumulators `acc`,
/// with `hat` the rotated tile: ∂q̃ into the per-head `out` as bf16 (tokens < `len`; see
/// `BackwardParams::qkh_bf16`), the bias partials of the row tile into `acc_region`, and this
/// side's ∂θ into `DTH` (stored when `first`, added otherwise; the same lane owns each (time,
/// angle) on both sides).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn unrotate(
    bk: &Bk,
    acc: &mut [[f32; 4]; 8],
    hat: u32,
    out: u64,
    acc_region: u32,
    t0: usize,
    len: u32,
    first: bool,
) {
    let (lane, ch) = (bk.lane, bk.ch);
    let g = lane / 4;
    let r = g % 4;
    let o = acc;
    let stage = qkh_stage(bk);
    // SAFETY (whole body): rows < 64 of `hat`, CS and DTH entries of chunk times and angles < 32;
    // global indices of tokens < S; the bias region (4, R, N).
    unsafe {
        // Every shuffle of the phase comes before its first conditional store: a store under a
        // lane condition leaves the warp diverged, and each shuffle after it would take the
        // reconverging slow path.
        let mut dths = [[0.0f32; 8]; 2];
        // Half-split: column half 1 holds no rotated pair and owns no ∂θ entry, so its warps skip
        // the rotation, ∂θ and their shuffles (a warp-uniform branch).
        let rotates = !bk.half_split || ch == 0;
        if rotates {
            for hr in 0..2u32 {
                let row = bk.acc_row(hr);
                let tt = bk.row_tok(hr);
                let s0 = 2 * hr as usize;
                let dth = &mut dths[hr as usize];
                if bk.half_split {
                    // Columns [0, 32) and [64, 96) (column half 0) hold every rotated pair
                    // (j, j + 64).
                    for t in 0..4u32 {
                        for e in 0..2u32 {
                            let j = bk.wide_col(t, e);
                            let [c, s] = ld_shared_v2_f32(bk.base + L::CS + 8 * (32 * tt + j % 32));
                            let (ha, _) = unpack_at(hat, row, j);
                            let (hb, _) = unpack_at(hat, row, j + 64);
                            let (du, dw) = (
                                o[t as usize][s0 + e as usize],
                                o[t as usize + 4][s0 + e as usize],
                            );
                            dth[(2 * t + e) as usize] = fms_rn(dw, ha, du * hb);
                            o[t as usize][s0 + e as usize] = fma_rn(du, c, dw * s);
                            o[t as usize + 4][s0 + e as usize] = fms_rn(dw, c, du * s);
                        }
                    }
                } else {
                    // Pairs (2j, 2j + 1), j < 32: the warp's first four tiles (columns below 64).
                    for t in 0..4u32 {
                        let a_col = bk.wide_col(t, 0);
                        let j = a_col / 2;
                        let [c, s] = ld_shared_v2_f32(bk.base + L::CS + 8 * (32 * tt + j));
                        let (ha, hb) = unpack_at(hat, row, a_col);
                        let (du, dw) = (o[t as usize][s0], o[t as usize][s0 + 1]);
                        dth[t as usize] = fms_rn(dw, ha, du * hb);
                        o[t as usize][s0] = fma_rn(du, c, dw * s);
                        o[t as usize][s0 + 1] = fms_rn(dw, c, du * s);
                    }
                }
                // ∂θ of the pair summed over the token's four ranks (g bits 0–1); lanes with g ≡ 0
                // (mod 4) own the (time, angle) entries.
                for (k, d) in dth.iter_mut().enumerate() {
                    if bk.half_split || k < 4 {
                        *d += shfl_xor_f32(*d, 4);
                        *d += shfl_xor_f32(*d, 8);
                    }
                }
            }
        }
        // Bias partials: rows g and g + 8 (one rank), then lanes g and g + 4 (the same rank).
        let mut bias = [[0.0f32; 2]; 8];
        for (b, ot) in bias.iter_mut().zip(o.iter()) {
            *b = [ot[0] + ot[2], ot[1] + ot[3]];
            for v in b.iter_mut() {
                *v += shfl_xor_f32(*v, 16);
            }
        }
        for hr in 0..2u32 {
            let tt = bk.row_tok(hr);
            let s0 = 2 * hr as usize;
            // Lanes with g ≡ 0 (mod 4) own the (time, angle) entries.
            if g % 4 == 0 && (!bk.half_split || ch == 0) {
                for (k, d) in dths[hr as usize].iter().enumerate() {
                    if bk.half_split || k < 4 {
                        let j = if bk.half_split {
                            bk.wide_col(k as u32 / 2, k as u32 % 2)
                        } else {
                            bk.wide_col(k as u32, 0) / 2
                        };
                        let at = bk.base + L::DTH + 4 * (32 * tt + j);
                        let v = if first { *d } else { ld_shared_f32(at) + *d };
                        st_shared_f32(at, v);
                    }
                }
            }
            // ∂q̃ into the warp's staging rows (all 16 rows; only those of tokens < len are
            // copied out below).
            let lrow = lane / 4 + 8 * hr;
            for (t, ot) in o.iter().enumerate() {
                let lc = 8 * t as u32 + 2 * (lane % 4);
                st_shared_u32(
                    stage + lrow * QKH_STAGE_STRIDE + 2 * lc,
                    pack_bf16x2(ot[s0], ot[s0 + 1]),
                );
            }
        }
        if lane < 16 {
            for (t, b) in bias.iter().enumerate() {
                let col = bk.wide_col(t as u32, 0);
                let at = acc_region + 4 * ((bk.mt * R + r) * N + col);
                let cur = ld_shared_v2_f32(at);
                st_shared_v2_f32(at, [cur[0] + b[0], cur[1] + b[1]]);
            }
        }
        copy_qkh(bk, stage, out, t0, len);
    }
}

/// Bytes per staging row of [`copy_qkh`]: 64 bf16 and 16 bytes of padding (the lanes of a 4-byte
/// store, eight rows by four columns, fall on 32 distinct banks).
const QKH_STAGE_STRIDE: u32 = 144;

/// Shared address of warp `warp`'s ∂q̃ / ∂k̃ staging rows: 16 rows of [`QKH_STAGE_STRIDE`] in the
/// `Y` region, which no phase reads from the gate gradients (phase D) to the next chunk's outputs.
#[inline(always)]
fn qkh_stage(bk: &Bk) -> u32 {
    bk.base + L::Y + bk.warp * 16 * QKH_STAGE_STRIDE
}

/// The warp's staged ∂q̃ (or ∂k̃) rows (its row tile, its two 32-column halves) to the per-head
/// `out` as 16-byte pieces, rows of tokens < `len` only. A warp barrier before (the lanes' staged
/// words) and after (the next staging overwrites what other lanes read here). As 4-byte stores
/// straight from the accumulators each instruction wrote half sectors of eight rows.
#[inline(always)]
unsafe fn copy_qkh(bk: &Bk, stage: u32, out: u64, t0: usize, len: u32) {
    // SAFETY (whole body): the warp's 16 staging rows; global rows of tokens < S, 16-byte aligned
    // (launch contract: `dqh` / `dkh` 16-byte aligned, N = 128).
    unsafe {
        sync_warp();
        for j in 0..4u32 {
            let k = bk.lane + 32 * j;
            let (lrow, piece) = (k / 8, k % 8);
            let tt = 4 * bk.mt + lrow / 4;
            let v = ld_shared_v4_f32(stage + lrow * QKH_STAGE_STRIDE + 16 * piece);
            if tt < len {
                let col = 64 * (piece / 4) + 32 * bk.ch + 8 * (piece % 4);
                let dst = bk.qkh(t0 + tt as usize, lrow % 4) + col as usize;
                st_global_v4_f32(out + 2 * dst as u64, v);
            }
        }
        sync_warp();
    }
}

/// The two bf16 values of the word holding columns `col & !1` and `col | 1` of row `row` of a
/// 128-wide tile, the one at `col` first.
#[inline(always)]
unsafe fn unpack_at(tile: u32, row: u32, col: u32) -> (f32, f32) {
    // SAFETY: forwarded to the caller (row < 64, col < 128).
    let (a, b) = unpack(unsafe { ld_shared_u32(tile + row * L::QK_STRIDE + 2 * (col & !1)) });
    if col % 2 == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// Phase E1: `∂Q̂ = e^{A}δ·H̃ + (W ⊙ Dₛ)·k̂`: the inter part's row sums against q̂ (∂A), then
/// the inverse rotation (see [`unrotate`]).
#[inline(always)]
unsafe fn phase_dq(prm: &BackwardParams, bk: &Bk, t0: usize, len: u32) {
    let mut acc = [[0.0f32; 4]; 8];
    // SAFETY: the tiles of the layout; the launch contract's dqh.
    unsafe {
        wide_product(
            bk,
            &mut acc,
            (bk.base + L::DLA, L::X_STRIDE, false),
            bk.base + L::HS,
            (0, 4),
        );
        row_dot(bk, &acc, bk.base + L::QH, bk.base + L::QI);
        wide_product(
            bk,
            &mut acc,
            (bk.base + L::WD, L::X_STRIDE, false),
            bk.base + L::KH,
            (0, bk.mt + 1),
        );
        unrotate(
            bk,
            &mut acc,
            bk.base + L::QH,
            prm.dqh,
            bk.base + L::ACC_QB,
            t0,
            len,
            true,
        );
    }
}

/// Phase E2: `∂K̂ = (W ⊙ Dₛ)ᵀ·q̂ + diag(c E(e,·))·xG`: the state part's row sums against k̂
/// (`sp`) before its scale, then the inverse rotation.
#[inline(always)]
unsafe fn phase_dk(prm: &BackwardParams, bk: &Bk, t0: usize, len: u32) {
    let mut acc = [[0.0f32; 4]; 8];
    // SAFETY: the tiles of the layout; the launch contract's dkh.
    unsafe {
        wide_product(
            bk,
            &mut acc,
            (bk.base + L::X, L::X_STRIDE, false),
            bk.base + L::GS,
            (0, 4),
        );
        row_dot(bk, &acc, bk.base + L::KH, bk.base + L::SP);
        scale_rows(bk, &mut acc, TOK_CE);
        wide_product(
            bk,
            &mut acc,
            (bk.base + L::WD, L::X_STRIDE, true),
            bk.base + L::QH,
            (bk.mt, 4),
        );
        unrotate(
            bk,
            &mut acc,
            bk.base + L::KH,
            prm.dkh,
            bk.base + L::ACC_KB,
            t0,
            len,
            false,
        );
    }
}

/// Phase E3: `∂X = diag(c E(e,·))·k̂Gᵀ + (W ⊙ q̂k̂ᵀ)ᵀ·δ + D·δ` of the warp's 16×32 tile; ∂v (the
/// four ranks' `∂x·mimo_v`) and the mimo_v partials `∂x·v` of the row tile.
#[inline(always)]
unsafe fn phase_dx(prm: &BackwardParams, bk: &Bk, bank: u32, t0: usize, len: u32) {
    let (mt, ch, lane) = (bk.mt, bk.ch, bk.lane);
    let (g, r) = (lane / 4, (lane / 4) % 4);
    let mut acc = [[0.0f32; 4]; 4];
    // SAFETY (whole body): tile addresses inside the layout; (h, r, p) inside mimo_v; dv indices
    // of tokens < S; the mimo_v region (4, R, P).
    unsafe {
        rolled!(kk in 0, 8 => {
            let a = ldmatrix_x4(bk.base + L::KH + ldsm_a(L::QK_STRIDE, 16 * mt, 16 * kk, lane));
            for v in 0..2u32 {
                let b = ldmatrix_x4(
                    bk.base + L::GS + ldsm_b(L::QK_STRIDE, 32 * ch + 16 * v, 16 * kk, lane),
                );
                mma_m16n8k16_bf16_f32(&mut acc[2 * v as usize], a, [b[0], b[1]]);
                mma_m16n8k16_bf16_f32(&mut acc[2 * v as usize + 1], a, [b[2], b[3]]);
            }
        });
        scale_rows(bk, &mut acc, TOK_CE);
        rolled!(kk in mt, 4 => {
            let a = ldmatrix_x4_trans(
                bk.base + L::WS + ldsm_a_trans(L::X_STRIDE, 16 * mt, 16 * kk, lane),
            );
            for v in 0..2u32 {
                let b = ldmatrix_x4_trans(
                    bk.base + L::DL + ldsm_b_trans(L::X_STRIDE, 16 * kk, 32 * ch + 16 * v, lane),
                );
                mma_m16n8k16_bf16_f32(&mut acc[2 * v as usize], a, [b[0], b[1]]);
                mma_m16n8k16_bf16_f32(&mut acc[2 * v as usize + 1], a, [b[2], b[3]]);
            }
        });
        let d_h = if prm.d != 0 { ldg(prm.d, bk.h) } else { 0.0 };
        let mv_at = (bk.h * R as usize + r as usize) * P as usize;
        let v_at = bk.base + L::BANK + bank * L::BANK_BYTES;
        // Every shuffle before the stores (see `unrotate`).
        let mut dv = [[[0.0f32; 2]; 2]; 4];
        let mut mvp = [[0.0f32; 2]; 4];
        for (t, at) in acc.iter_mut().enumerate() {
            let col = bk.narrow_col(t as u32, 0);
            let mv = [
                ldg(prm.mimo_v, mv_at + col as usize),
                ldg(prm.mimo_v, mv_at + col as usize + 1),
            ];
            for hr in 0..2u32 {
                let row = bk.acc_row(hr);
                let tt = bk.row_tok(hr);
                let s0 = 2 * hr as usize;
                let (d0, d1) = unpack(ld_shared_u32(bk.base + L::DL + row * L::X_STRIDE + 2 * col));
                at[s0] = fma_rn(d_h, d0, at[s0]);
                at[s0 + 1] = fma_rn(d_h, d1, at[s0 + 1]);
                let (v0, v1) = unpack(ld_shared_u32(v_at + 128 * tt + 2 * col));
                mvp[t][0] = fma_rn(at[s0], v0, mvp[t][0]);
                mvp[t][1] = fma_rn(at[s0 + 1], v1, mvp[t][1]);
                dv[t][hr as usize] = [at[s0] * mv[0], at[s0 + 1] * mv[1]];
                for x in dv[t][hr as usize].iter_mut() {
                    *x += shfl_xor_f32(*x, 4);
                    *x += shfl_xor_f32(*x, 8);
                }
            }
            for x in mvp[t].iter_mut() {
                *x += shfl_xor_f32(*x, 16);
            }
        }
        if g % 4 == 0 {
            for (t, dvt) in dv.iter().enumerate() {
                let col = bk.narrow_col(t as u32, 0);
                for (hr, d) in dvt.iter().enumerate() {
                    let tt = bk.row_tok(hr as u32);
                    if tt < len {
                        let o = bk.vz(t0 + tt as usize) + col as usize;
                        st_global_u32(prm.dv + 2 * o as u64, pack_bf16x2(d[0], d[1]));
                    }
                }
            }
        }
        if lane < 16 {
            for (t, m) in mvp.iter().enumerate() {
                let col = bk.narrow_col(t as u32, 0);
                let a = bk.base + L::ACC_MV + 4 * ((mt * R + r) * P + col);
                let cur = ld_shared_v2_f32(a);
                st_shared_v2_f32(a, [cur[0] + m[0], cur[1] + m[1]]);
            }
        }
    }
}

/// Phase E4: ⟨G, H̃⟩ of the warp's adjoint rows (partial into `MISC`), the adjoint update
/// `G ← e^{A_e}·G + (e^{A}δ)ᵀ·q̂`, and (c ≥ 1) the new adjoint's boundary sums of ∂θ for the
/// warp's rotated pairs into `BDT`.
#[inline(always)]
unsafe fn phase_adjoint(bk: &Bk, c: usize, len: u32, adj: &mut [[f32; 4]; 8]) {
    let lane = bk.lane;
    // SAFETY (whole body): tiles and regions of the layout.
    unsafe {
        let hs = load_state(bk);
        let mut gh = 0.0f32;
        for (gt, ht) in adj.iter().zip(hs.iter()) {
            for s in 0..4 {
                gh = fma_rn(gt[s], ht[s], gh);
            }
        }
        let gh = warp_reduce::sum(gh);
        if lane == 0 {
            st_shared_f32(bk.base + L::MISC + 4 * (RED + bk.warp), gh);
        }
        let decay = bk.ts(TOK_EA, len - 1);
        for gt in adj.iter_mut() {
            for v in gt.iter_mut() {
                *v *= decay;
            }
        }
        wide_product(
            bk,
            adj,
            (bk.base + L::DLA, L::X_STRIDE, true),
            bk.base + L::QH,
            (0, 4),
        );
        boundary_sums(bk, adj, &hs, c > 0);
    }
}

/// The warp's accumulator-layout view of the state tile `HS` (bf16, as f32).
#[inline(always)]
unsafe fn load_state(bk: &Bk) -> [[f32; 4]; 8] {
    let mut hs = [[0.0f32; 4]; 8];
    // SAFETY: the HS tile of the layout.
    unsafe {
        for (t, ht) in hs.iter_mut().enumerate() {
            let col = bk.wide_col(t as u32, 0);
            for hr in 0..2u32 {
                let p = bk.acc_row(hr);
                let (h0, h1) = unpack(ld_shared_u32(bk.base + L::HS + p * L::QK_STRIDE + 2 * col));
                ht[2 * hr as usize] = h0;
                ht[2 * hr as usize + 1] = h1;
            }
        }
    }
    hs
}

/// The boundary sums of ∂θ for the warp's rotated pairs, `Σ_p G[p, a]·H̃[p, b] − G[p, b]·H̃[p, a]`,
/// from the adjoint and the state at a chunk boundary; into `BDT` when `store`.
#[inline(always)]
unsafe fn boundary_sums(bk: &Bk, adj: &[[f32; 4]; 8], hs: &[[f32; 4]; 8], store: bool) {
    let lane = bk.lane;
    // Half-split: column half 1 holds no rotated pair, its warps have no sums to form (a
    // warp-uniform return, as is `store`).
    if !store || (bk.half_split && bk.ch != 0) {
        return;
    }
    // SAFETY: the BDT region of the layout.
    unsafe {
        let mut bd = [0.0f32; 8];
        if bk.half_split {
            for t in 0..4usize {
                for e in 0..2usize {
                    for hr in 0..2usize {
                        let s = 2 * hr + e;
                        bd[2 * t + e] = fma_rn(
                            adj[t][s],
                            hs[t + 4][s],
                            fma_rn(-adj[t + 4][s], hs[t][s], bd[2 * t + e]),
                        );
                    }
                }
            }
        } else {
            for t in 0..4usize {
                for hr in 0..2usize {
                    let s = 2 * hr;
                    bd[t] = fma_rn(
                        adj[t][s],
                        hs[t][s + 1],
                        fma_rn(-adj[t][s + 1], hs[t][s], bd[t]),
                    );
                }
            }
        }
        for (k, v) in bd.iter_mut().enumerate() {
            if bk.half_split || k < 4 {
                *v += shfl_xor_f32(*v, 4);
                *v += shfl_xor_f32(*v, 8);
                *v += shfl_xor_f32(*v, 16);
            }
        }
        if lane < 4 {
            for (k, v) in bd.iter().enumerate() {
                if bk.half_split || k < 4 {
                    let j = if bk.half_split {
                        bk.wide_col(k as u32 / 2, k as u32 % 2)
                    } else {
                        bk.wide_col(k as u32, 0) / 2
                    };
                    st_shared_f32(bk.base + L::BDT + 4 * (32 * bk.mt + j), *v);
                }
            }
        }
    }
}

/// Phase F1: the adjoint into `GS` (bf16) for the chunk before; per token `t` (a 16-lane group,
/// lane `s`, no loops: the pair sums of `m` over rows and columns, the row partials of `sp` and
/// of the inter part of ∂A summed by shuffles) ∂c, ∂A, ∂γ; warp 7: the running sum of ∂θ inside
/// the chunk into ∂angle-logits and the θ part of ∂Δ; warp 6: the running sum handed to the
/// chunk before.
#[inline(always)]
unsafe fn phase_scalars(prm: &BackwardParams, bk: &Bk, c: usize, len: u32, adj: &[[f32; 4]; 8]) {
    let (w, lane) = (bk.warp, bk.lane);
    let t0 = c * C as usize;
    // SAFETY (whole body): regions of the layout; token < S indices of dangles.
    unsafe {
        store_adjoint_tile(bk, adj);
        {
            let (t, s) = (bk.tid / 16, bk.tid % 16);
            let pair =
                |region: u32, a: u32, b: u32| ld_shared_f32(bk.base + region + 4 * (16 * a + b));
            // Entries above the diagonal of PM were never formed: selects, not products by 0.
            let (pm_ts, w_ts) = (pair(L::PM, t, s), pair(L::WT, t, s));
            let (pm_st, w_st, e_st) = (pair(L::PM, s, t), pair(L::WT, s, t), pair(L::ET, s, t));
            let (sp, qi) = if s < 8 {
                let at = 4 * (2 * (4 * t + s / 2) + s % 2);
                (
                    ld_shared_f32(bk.base + L::SP + at),
                    ld_shared_f32(bk.base + L::QI + at),
                )
            } else {
                (0.0, 0.0)
            };
            let dai =
                if s < t { w_ts * pm_ts } else { 0.0 } - if s > t { w_st * pm_st } else { 0.0 };
            let dci = if s > t { e_st * pm_st } else { 0.0 };
            let dg0 = if s == t { pm_ts } else { 0.0 };
            let [dai, dci, dg0, sp, inter] =
                [dai, dci, dg0, sp, qi].map(|v| warp_reduce::group_sum(v, 16));
            if s == 0 {
                let valid = t < len;
                let spt = if valid { bk.ts(TOK_EE, t) * sp } else { 0.0 };
                let dc = if valid { dci + spt } else { 0.0 };
                let da = if valid {
                    dai + inter - bk.ts(TOK_C, t) * spt
                } else {
                    0.0
                };
                st_shared_f32(bk.tok(TOK_SPT, t), spt);
                st_shared_f32(bk.tok(TOK_DC, t), dc);
                st_shared_f32(bk.tok(TOK_DA, t), da);
                st_shared_f32(bk.tok(TOK_DG, t), if valid { dg0 + dc } else { 0.0 });
            }
        }
        if w == 7 {
            // Every load first (the shared accesses keep their order), the running sum in
            // registers, then the stores.
            let j = lane;
            let mut dth = [0.0f32; 16];
            let mut th = [0.0f32; 16];
            let mut dts = [0.0f32; 16];
            for tt in 0..16u32 {
                dth[tt as usize] = ld_shared_f32(bk.base + L::DTH + 4 * (32 * tt + j));
                th[tt as usize] = ld_shared_f32(bk.base + L::DTHA + 4 * (32 * tt + j));
                dts[tt as usize] = bk.ts(TOK_DT, tt);
            }
            let mut suffix = ld_shared_f32(bk.base + L::SUFFIX + 4 * (32 * (c as u32 & 1) + j));
            let mut dang = [0.0f32; 16];
            let mut part = [0.0f32; 16];
            for tt in (0..16usize).rev() {
                if (tt as u32) < len {
                    suffix += dth[tt];
                    dang[tt] = suffix * PI * dts[tt] * fma_rn(-th[tt], th[tt], 1.0);
                    part[tt] = suffix * PI * th[tt];
                }
            }
            for tt in 0..16u32 {
                st_shared_f32(bk.base + L::DTHA + 4 * (32 * tt + j), part[tt as usize]);
                if tt < len {
                    stg(
                        prm.dangles,
                        bk.angle(t0 + tt as usize, j),
                        dang[tt as usize],
                    );
                }
            }
        }
        if w == 6 && c > 0 {
            hand_suffix(bk, c - 1);
        }
    }
}

/// The adjoint into `GS` (bf16), the operand of the products of the chunk before.
#[inline(always)]
unsafe fn store_adjoint_tile(bk: &Bk, adj: &[[f32; 4]; 8]) {
    // SAFETY: the GS tile of the layout.
    unsafe {
        for (t, gt) in adj.iter().enumerate() {
            let col = bk.wide_col(t as u32, 0);
            for hr in 0..2u32 {
                let p = bk.acc_row(hr);
                let s = 2 * hr as usize;
                st_shared_u32(
                    bk.base + L::GS + p * L::QK_STRIDE + 2 * col,
                    pack_bf16x2(gt[s], gt[s + 1]),
                );
            }
        }
    }
}

/// One warp: the boundary sums in `BDT` (over the row tiles) as the running ∂θ sum chunk `c`
/// starts from.
#[inline(always)]
unsafe fn hand_suffix(bk: &Bk, c: usize) {
    let j = bk.lane;
    // SAFETY: the BDT and SUFFIX regions of the layout.
    unsafe {
        let mut s = 0.0f32;
        for mt in 0..4u32 {
            s += ld_shared_f32(bk.base + L::BDT + 4 * (32 * mt + j));
        }
        st_shared_f32(bk.base + L::SUFFIX + 4 * (32 * (c as u32 & 1) + j), s);
    }
}

/// Phase F2, per token `u` (a 16-lane group, lane `s`; sums by shuffles): ∂a (the reverse
/// running sum of ∂A in the chunk plus the state pass's ∂A_e), ∂Δ and ∂trap; the first token
/// waits for ∂ε from the chunk before.
#[inline(always)]
unsafe fn phase_token_grads(prm: &BackwardParams, bk: &Bk, c: usize, len: u32, span: Span) {
    let (u, s) = (bk.tid / 16, bk.tid % 16);
    let t0 = c * C as usize;
    let last = len - 1;
    let misc = |k: u32| bk.base + L::MISC + 4 * k;
    // SAFETY (whole body): regions of the layout; (B,H,S) indices of tokens < S.
    unsafe {
        let da = if s >= u && s < len {
            bk.ts(TOK_DA, s)
        } else {
            0.0
        };
        let cs = if s < len {
            bk.ts(TOK_C, s) * bk.ts(TOK_SPT, s)
        } else {
            0.0
        };
        let ap = ld_shared_f32(bk.base + L::DTHA + 4 * (32 * u + s))
            + ld_shared_f32(bk.base + L::DTHA + 4 * (32 * u + s + 16));
        let gh = if s < WARPS {
            ld_shared_f32(misc(RED + s))
        } else {
            0.0
        };
        let [da, cs, angle_part, gh] = [da, cs, ap, gh].map(|v| warp_reduce::group_sum(v, 16));
        if s != 0 || u >= len {
            return;
        }
        let tg = t0 + u as usize;
        stg(prm.dadt, bk.row + tg, da + gh * bk.ts(TOK_EA, last) + cs);
        let (lam, dt) = (bk.ts(TOK_LAM, u), bk.ts(TOK_DT, u));
        let dg = bk.ts(TOK_DG, u);
        let ddt0 = fma_rn(dg, lam, angle_part);
        let dlam0 = dg * dt;
        let finish = |tg: usize, ddt0: f32, dlam0: f32, lam: f32, dt: f32, deps: f32| {
            stg(prm.ddt, bk.row + tg, ddt0 + deps * (1.0 - lam));
            let dlam = dlam0 - deps * dt;
            Bf16::store(prm.dtrap, bk.row + tg, dlam * lam * (1.0 - lam));
        };
        if u > 0 {
            finish(tg, ddt0, dlam0, lam, dt, bk.ts(TOK_DC, u - 1));
        } else if c == 0 {
            finish(tg, ddt0, dlam0, lam, dt, 0.0);
        } else if c == span.lo {
            // The segment before holds the ε term: the pieces go to the boundary's record.
            let at = split_token(prm, bk, span.seg - 1);
            for (k, v) in [ddt0, dlam0, lam, dt].into_iter().enumerate() {
                stg(prm.split_tokens, at + k, v);
            }
        } else {
            let o = PEND + 5 * (c as u32 & 1);
            st_shared_u32(misc(o), tg as u32);
            st_shared_f32(misc(o + 1), ddt0);
            st_shared_f32(misc(o + 2), dlam0);
            st_shared_f32(misc(o + 3), lam);
            st_shared_f32(misc(o + 4), dt);
        }
        if u == last && c + 1 == span.hi && span.hi < bk.nc {
            stg(
                prm.split_tokens,
                split_token(prm, bk, span.seg) + 4,
                bk.ts(TOK_DC, u),
            );
        } else if u == last {
            let o = PEND + 5 * ((c as u32 + 1) & 1);
            let tp = ld_shared_u32(misc(o));
            if tp != NONE {
                finish(
                    tp as usize,
                    ld_shared_f32(misc(o + 1)),
                    ld_shared_f32(misc(o + 2)),
                    ld_shared_f32(misc(o + 3)),
                    ld_shared_f32(misc(o + 4)),
                    bk.ts(TOK_DC, u),
                );
                st_shared_u32(misc(o), NONE);
            }
        }
    }
}

/// Zeroes `bytes` (a multiple of 16) of shared memory from `at`.
#[inline(always)]
unsafe fn zero_region(bk: &Bk, at: u32, bytes: u32) {
    let mut e = 16 * bk.tid;
    while e < bytes {
        // SAFETY: forwarded to the caller.
        unsafe { st_shared_v4_f32(at + e, [0.0; 4]) };
        e += 16 * T;
    }
}

/// This block's parameter-gradient slot (row `seg·B + b`): the bias and mimo_v partials summed
/// over the row tiles, the output-stage partials (`parts`, staged in the raw-q area) over the
/// warps, in fixed orders.
#[inline(always)]
unsafe fn write_slot(prm: &BackwardParams, bk: &Bk, parts: &[[f32; 2]; 4], seg: usize) {
    let sl = BackwardSlots::new(R, N, P);
    let base = (seg * bk.heads * prm.batch as usize + bk.bh) * sl.len as usize;
    let outs = bk.base + L::RAW_Q;
    // SAFETY (whole body): regions of the layout; the slot of this (b, h).
    unsafe {
        for (k, pk) in parts.iter().enumerate() {
            let at = outs + 4 * ((4 * bk.warp + k as u32) * P + 2 * bk.lane);
            st_shared_v2_f32(at, *pk);
        }
        sync_threads();
        for (region, off, len) in [
            (L::ACC_QB, sl.q_bias, R * N),
            (L::ACC_KB, sl.k_bias, R * N),
            (L::ACC_MV, sl.mimo_v, R * P),
        ] {
            let mut e = bk.tid;
            while e < len {
                let mut s = 0.0f32;
                for mt in 0..4u32 {
                    s += ld_shared_f32(bk.base + region + 4 * (mt * len + e));
                }
                stg(prm.slots, base + (off + e) as usize, s);
                e += T;
            }
        }
        let part = |w: u32, k: u32, p: u32| ld_shared_f32(outs + 4 * ((4 * w + k) * P + p));
        let mut e = bk.tid;
        while e < R * P {
            let (r, p) = (e / P, e % P);
            let mo = part(r, 0, p) + part(r + 4, 0, p);
            let mz = part(r, 1, p) + part(r + 4, 1, p);
            stg(prm.slots, base + (sl.mimo_o + e) as usize, mo);
            stg(prm.slots, base + (sl.mimo_z + e) as usize, mz);
            e += T;
        }
        if bk.tid < P {
            let p = bk.tid;
            let mut nw = 0.0f32;
            for w in 0..WARPS {
                nw += part(w, 2, p);
            }
            stg(prm.slots, base + (sl.norm + p) as usize, nw);
        }
        if bk.tid == 0 {
            let mut d = 0.0f32;
            for w in 0..WARPS {
                for p in 0..P {
                    d += part(w, 3, p);
                }
            }
            stg(prm.slots, base + sl.d as usize, d);
        }
    }
}

/// The tensor-core backward (see the module docs), for the launch's rotation convention.
///
/// # Safety
/// The module's launch contract.
#[inline(always)]
pub unsafe fn backward_mma(prm: &BackwardParams) {
    // SAFETY: forwarded launch contract.
    unsafe {
        if prm.rotation == rotation::HALF_SPLIT {
            backward_mma_body::<true>(prm)
        } else {
            backward_mma_body::<false>(prm)
        }
    }
}

/// [`backward_mma`] with the rotation convention compiled in (half-split when `HALF`): each
/// body carries one convention's rotation code only.
///
/// # Safety
/// The module's launch contract.
#[inline(always)]
unsafe fn backward_mma_body<const HALF: bool>(prm: &BackwardParams) {
    let bk = Bk::new::<HALF>(prm);
    let tid = bk.tid;
    let span = Span::new(prm, bk.nc);
    // SAFETY (whole body): the launch contract; phases are separated by block barriers and each
    // shared word written in a phase is touched by no other thread in it.
    unsafe {
        if tid == 0 {
            st_shared_v4_f32(bk.base + L::IDENT, [1.0, 0.0, 1.0, 0.0]);
            st_shared_u32(bk.base + L::MISC + 4 * PEND, NONE);
            st_shared_u32(bk.base + L::MISC + 4 * (PEND + 5), NONE);
        }
        zero_region(&bk, bk.base + L::GS, 64 * L::QK_STRIDE);
        zero_region(&bk, bk.base + L::SUFFIX, 2 * 32 * 4);
        zero_region(&bk, bk.base + L::ACC_QB, L::IDENT - L::ACC_QB);
        let mut adj = [[0.0f32; 4]; 8];
        if span.from_boundary {
            // The true adjoint at the segment's end, its bf16 tile, and the running ∂θ sum the
            // last chunk starts from (the boundary sums against the state entering the chunk
            // after, which the whole-sequence walk would have formed there).
            adj = end_adjoint(prm, &bk, span.seg);
            stage_state(prm, &bk, span.hi);
            commit_group();
            sync_threads();
            store_adjoint_tile(&bk, &adj);
            wait_group::<0>();
            sync_threads();
            boundary_sums(&bk, &adj, &load_state(&bk), true);
            sync_threads();
            if bk.warp == 6 {
                hand_suffix(&bk, span.hi - 1);
            }
        }
        let last = span.hi - 1;
        stage_chunk(prm, &bk, last, last as u32 & 1);
        stage_state(prm, &bk, last);
        commit_group();
        let mut pf = prefetch(prm, &bk, last);
        let mut parts = [[0.0f32; 2]; 4];
        let mut decay = 1.0f32;
        wait_group::<0>();
        sync_threads();

        let mut c = span.hi;
        while c > span.lo {
            c -= 1;
            let t0 = c * C as usize;
            let len = bk.len(c);
            let bank = c as u32 & 1;
            let more = c > span.lo;

            // Phase A: angles and token scalars, q̂ / k̂ / x.
            let loc = phase_increments(&Bk::new::<HALF>(prm), len, &pf);
            sync_threads();
            phase_angles(&Bk::new::<HALF>(prm), len, &pf, loc);
            sync_threads();
            phase_rotate(prm, &Bk::new::<HALF>(prm), bank);
            sync_threads();
            if more {
                stage_chunk(prm, &Bk::new::<HALF>(prm), c - 1, bank ^ 1);
                prefetch_state(prm, &Bk::new::<HALF>(prm), c - 1);
            }
            commit_group();

            // Phase B: the outputs again.
            let (sc, mut y) = phase_scores_inter(&Bk::new::<HALF>(prm));
            sync_threads();
            phase_intra_y(prm, &Bk::new::<HALF>(prm), bank, &mut y);
            sync_threads();

            // Phase C: the output-stage backward.
            phase_output(prm, &Bk::new::<HALF>(prm), bank, &mut parts);
            sync_threads();

            if !span.local {
                // Phase D: ∂z, Dₛ and the pair sums.
                phase_dz(prm, &Bk::new::<HALF>(prm), t0, len);
                phase_ds(&Bk::new::<HALF>(prm), &sc);
                sync_threads();

                // Phase E: ∂Q̂, ∂K̂, ∂X.
                phase_dq(prm, &Bk::new::<HALF>(prm), t0, len);
                phase_dk(prm, &Bk::new::<HALF>(prm), t0, len);
                phase_dx(prm, &Bk::new::<HALF>(prm), bank, t0, len);
            }
            // The adjoint.
            phase_adjoint(&Bk::new::<HALF>(prm), c, len, &mut adj);
            sync_threads();
            // The state entering the chunk before, into HS (free now), waited for with the
            // chunk's staging at the end of the chunk.
            if more {
                stage_state(prm, &Bk::new::<HALF>(prm), c - 1);
            }
            commit_group();

            if span.local {
                decay *= Bk::new::<HALF>(prm).ts(TOK_EA, len - 1);
            } else {
                // Phase F: the scalar chain.
                phase_scalars(prm, &Bk::new::<HALF>(prm), c, len, &adj);
                sync_threads();
                phase_token_grads(prm, &Bk::new::<HALF>(prm), c, len, span);
            }
            if more {
                pf = prefetch(prm, &Bk::new::<HALF>(prm), c - 1);
            }
            wait_group::<0>();
            sync_threads();
        }
        if let Some(j) = span.hand_off {
            let d = if span.local { Some(decay) } else { None };
            write_adjoint(prm, &Bk::new::<HALF>(prm), j, &adj, d);
        }
        if !span.local {
            write_slot(prm, &Bk::new::<HALF>(prm), &parts, span.seg);
        }
    }
}

/// Tensor-core backward entry point, bf16, R = 4, N = 128, P = 64, Na = 32, C = 16 (see the
/// module's launch contract).
///
/// # Safety
/// The module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn backward_mma_bf16_r4_n128_p64_na32_c16(params: BackwardParams) {
    // SAFETY: forwarded launch contract.
    unsafe { backward_mma(&params) }
}
