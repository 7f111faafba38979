//! Mamba-3 MIMO chunked forward on bf16 tensor cores (spec §2.2, §2.3) for one geometry:
//! R = 4, N = 128, P = 64, Na = 32, C = 16 (upstream's tuned geometry), bf16 activations.
//!
//! One block of four warps per (head, batch row, segment) walks its chunks in order. A chunk's
//! 64 rank-flattened rows `ρ = 4i + r` are three bf16 GEMM operands in shared memory (q̂, k̂:
//! 64×128; x: 64×64); every contraction is `mma.m16n8k16` with f32 accumulation:
//!
//! * **state** `H` (P×N, f32) lives in registers as accumulators: warp w owns rows
//!   `p ∈ [16w, 16w+16)`, all 128 columns (16 tiles × 4 = 64 registers per lane);
//! * **scores** `q̂·k̂ᵀ`: warp w computes rows `[16w, 16w+16)` up to the diagonal tile, multiplies
//!   each by the weight `w(i,i')` (`c_{i'}·exp(A_i − A_{i'})` below the diagonal time, `γ_i` on
//!   it, 0 above) and stores them as bf16;
//! * **outputs** for the warp's 16 columns p, all 64 rows: `exp(A_i)·q̂·Hᵀ` with the B operand
//!   packed straight from the state accumulators (the accumulator layout of a (p, n) tile is the
//!   B-fragment layout of the (n, p) operand), then the weighted scores times x;
//! * **state pass** `H ← exp(A_last)·H + x_wᵀ·k̂` with `x_w = exp(Ā_i)·c_i·x`, both operands
//!   through `ldmatrix .trans`.
//!
//! The per-chunk scalar work: token scalars by warp 0 (prefix sums by shuffles); the angle
//! increments by every thread (angle = lane, four times per warp; formed in f32, summed in f64),
//! prefixed across warps through shared memory, then one `sin.approx`/`cos.approx` pair per (time,
//! angle) of the angle reduced by an f64 multiple of 2π; the biased rotation of q and k by warp r
//! for the rows of rank r (a lane owns two word pairs of a row, columns c, c+1 and c+64, c+65,
//! which hold both halves of their rotation pairs in either convention; in the half-split
//! convention each lane rotates one pair, of q or of k, and only biases the other, see
//! [`lane_words`]; the k-only segment pass gives the lanes whose columns no pair rotates an
//! identity rotation, so the row loop has no branch). The next chunk's raw q, k, v, z rows are copied with
//! `cp.async` while the current chunk runs its GEMMs (rows past the sequence zero-filled, so the
//! elementwise work needs no length tests); a short chunk (the last one, a decode call of a few
//! tokens) takes instantiations that rotate and multiply only the 16-row tiles holding its times
//! (see [`tiles`]); its scalars and angle logits are loaded into registers one chunk ahead, and
//! its angle increments and token scalars (double-banked) are formed beside the current chunk's
//! state pass: four barriers per chunk.
//!
//! Angle precision: the angles' errors (f32 increments ~1e-7 relative, `sin.approx` ~5e-7
//! absolute) sit far below the bf16 rounding of q̂ and k̂ (4e-3 relative) that follows them; the
//! f32 kernels keep the f64 increments and the range-reduced `sincos` of [`crate::angles`].
//!
//! bf16 rounding points: q̂, k̂, x, x_w, the weighted scores and the state as read by the output
//! GEMM (upstream rounds the same operands); the state itself, all sums and the D, gate, norm and
//! contraction epilogue stay f32.
//!
//! # Launch contract
//! Grid `(H, B·K)` (K segments, see [`ForwardParams::segments`]), block [`FORWARD_MMA_THREADS`],
//! dynamic shared memory [`forward_mma_smem::BYTES`]; the geometry above with bf16 activations;
//! q, k, v, z and the initial k̂ (when present) 16-byte aligned, the initial, final and hand-off
//! SSM states 8-byte aligned; every pointer of [`ForwardParams`] valid for its documented shape
//! (the host validates). Segments other than the first start from the hand-off slots that the
//! segment-state and combine passes of `chunked_forward` wrote; the first from the initial state
//! when [`ForwardParams::init_ssm`] is set.

use mamba3_abi::{
    forward_mma_smem as L, output_mode, rotation, swizzle128_offset, ForwardParams,
    FORWARD_MMA_THREADS,
};

use crate::angles::{
    angle_increment, angle_increment_f32, reduced_near_f32, rotate_pair, stored_f32,
    wrap_two_pi_f64,
};
use crate::arch::cp_async::{
    commit_group, cp_async_ca_4_zfill, cp_async_cg_16, cp_async_cg_16_zfill, wait_group,
};
use crate::arch::float::{fma_rn, pack_bf16x2, sincos_approx};
use crate::arch::global::{ld_global_v2_f32, st_global_u32, st_global_v2_f32, st_global_v4_f32};
use crate::arch::ldmatrix::{ldmatrix_x4, ldmatrix_x4_trans};
use crate::arch::mma::mma_m16n8k16_bf16_f32;
use crate::arch::sreg::{
    block_x, block_y, fresh_u32, ld_shared_f32, ld_shared_u32, ld_shared_v2_f32, ld_shared_v4_f32,
    opaque_u32, shfl_idx_f32, shfl_up_f32, shfl_xor_f32, smem_base, smem_base_fresh, st_shared_f32,
    st_shared_u32, st_shared_v2_f32, st_shared_v4_f32, sync_threads, sync_warp, thread_x,
};
use crate::arch::wgmma;
use crate::chunked_forward::split_f64;
use crate::elem::{ldg, stg, Bf16, Elem};
use crate::math::{exp, mul_silu_tanh_approx, rsqrt, sigmoid_rcp, sincos};
use crate::smem::{ld_shared_f64, st_shared_f64};

const R: u32 = 4;
const N: u32 = 128;
const P: u32 = 64;
const NA: u32 = 32;
const C: u32 = 16;
const T: u32 = FORWARD_MMA_THREADS;

/// The layout's base: the dynamic shared base `raw`, rounded up to [`L::ALIGN`] in the `wgmma`
/// kernel (`WG`: the swizzle group of its operand tiles; [`L::BYTES`] holds the slack).
#[inline(always)]
fn layout_base<const WG: bool>(raw: u32) -> u32 {
    if WG {
        (raw + L::ALIGN - 1) & !(L::ALIGN - 1)
    } else {
        raw
    }
}

/// Address of element `(row0 + lr, col0 + lc)` of a swizzled 64-row tile at `tile`
/// (`mamba3_abi::swizzle128_offset`), from the lane's part `lane_part = swizzle128_offset(64,
/// lr, lc)`: valid when `row0` is a multiple of 8, and `col0` is a multiple of 64 or the pieces
/// `(col0 mod 64) / 8` and `lc / 8` (with `lc < 64`) share no bit (then the sum is an XOR, and
/// the XOR with the row's pattern distributes). The lane's part goes through [`fresh_u32`] where
/// a phase starts, so that the step addresses are formed from it there, not hoisted out of the
/// chunk loop and held in registers.
#[inline(always)]
fn swizzled_at(tile: u32, lane_part: u32, row0: u32, col0: u32) -> u32 {
    tile + (col0 / 64) * 64 * 128 + row0 * 128 + (lane_part ^ (2 * (col0 % 64)))
}

/// Rows of a token-scalar bank ([`L::SCAL`]).
const S_A: u32 = 0;
const S_C: u32 = 1;
const S_GAMMA: u32 = 2;
pub(crate) const S_EXPA: u32 = 3;
pub(crate) const S_KSCALE: u32 = 4;

/// The offsets of the regions that the scalar phases use in one tensor-core kernel's layout (this
/// kernel's [`L`], and `forward_tf32_smem` of the f32 kernel in `chunked_forward_tf32`), and the
/// angle precision that kernel needs.
pub(crate) trait Regions {
    /// Two banks of token scalars (`L::SCAL_BYTES` each).
    const SCAL: u32;
    /// Carried angle totals `(32)` f64.
    const THETA: u32;
    /// Per-warp angle-increment totals `(4, 32)` f64.
    const TOT: u32;
    /// Score weights `(16, 16)` f32.
    const WT: u32;
    /// `(cos θ, sin θ)` `(16 times, 32 angles)` f32 pairs.
    const CS: u32;
    /// The identity rotation `(1, 0, 1, 0)` f32.
    const IDENT: u32;
    /// f32 activations: angle increments in f64 and the range-reduced `sincos` of
    /// [`crate::math`], errors below f32 rounding; bf16: the cheaper forms of the module docs.
    const F32_ANGLES: bool;
}

/// This kernel's [`Regions`].
pub(crate) struct Bf16Regions;

impl Regions for Bf16Regions {
    const SCAL: u32 = L::SCAL;
    const THETA: u32 = L::THETA;
    const TOT: u32 = L::TOT;
    const WT: u32 = L::WT;
    const CS: u32 = L::CS;
    const IDENT: u32 = L::IDENT;
    const F32_ANGLES: bool = false;
}

/// Shared address of token scalar `row` of time `i` in bank `bank` (chunk parity) of layout `G`.
#[inline(always)]
pub(crate) fn scal_in<G: Regions>(bk: &Blk, bank: u32, row: u32, i: u32) -> u32 {
    bk.base + G::SCAL + bank * L::SCAL_BYTES + 64 * row + 4 * i
}

/// [`scal_in`] of this kernel's layout.
#[inline(always)]
fn scal(bk: &Blk, bank: u32, row: u32, i: u32) -> u32 {
    scal_in::<Bf16Regions>(bk, bank, row, i)
}

/// The score weights `w(i, i')` and `w(i + 2, i')` of layout `G` (row times `ia`, `ia + 2` of a
/// lane's accumulator rows g, g + 8; column time `ip`).
///
/// # Safety
/// `ia + 2 < C`, `ip < C`; inside a phase that reads the weights (after the barrier that
/// publishes them).
#[inline(always)]
unsafe fn score_weight_pair<G: Regions>(bk: &Blk, ia: u32, ip: u32) -> [f32; 2] {
    // SAFETY: inside the (C, C) weights (the caller's contract).
    unsafe {
        [
            ld_shared_f32(bk.base + G::WT + 4 * (ia * C + ip)),
            ld_shared_f32(bk.base + G::WT + 4 * ((ia + 2) * C + ip)),
        ]
    }
}

/// Weights the score n8 tiles `sc` of row tile `w` (those on or below the diagonal, when `scores`)
/// with the weights of layout `G` and hands each to `store(jt, tile, wa, wb)` (`wa` for the
/// lane's accumulator row g, `wb` for g + 8). The weights go four tiles at a time, loaded before
/// those tiles' stores (a store would otherwise hold each next load back, see `phase_rotate`);
/// the row index goes through an opaque move so that the 16 addresses are formed here each
/// chunk rather than hoisted out of the chunk loop.
///
/// # Safety
/// `w < 4`; inside a phase that reads the weights (after the barrier that publishes them).
#[inline(always)]
pub(crate) unsafe fn weigh_row_tile_scores<G: Regions>(
    bk: &Blk,
    w: u32,
    scores: bool,
    sc: &[[f32; 4]; 8],
    mut store: impl FnMut(u32, &[f32; 4], f32, f32),
) {
    let (g, t4) = (bk.lane / 4, bk.lane % 4);
    let ia = opaque_u32(4 * w + g / 4);
    for half in 0..2u32 {
        let mut weights = [[0.0f32; 2]; 4];
        for (d, wt) in weights.iter_mut().enumerate() {
            let ip = 2 * (4 * half + d as u32) + t4 / 2;
            // SAFETY: row times ia, ia + 2 < 16 (w < 4), column times < 16.
            *wt = unsafe { score_weight_pair::<G>(bk, ia, ip) };
        }
        for (d, &[wa, wb]) in weights.iter().enumerate() {
            let jt = 4 * half + d as u32;
            if scores && jt < 2 * w + 2 {
                store(jt, &sc[jt as usize], wa, wb);
            }
        }
    }
}

/// The low and high bf16 halves of a packed word, as f32.
#[inline(always)]
pub(crate) fn unpack(w: u32) -> (f32, f32) {
    (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000))
}

/// Per-block constants.
#[derive(Clone, Copy)]
pub(crate) struct Blk {
    /// Shared-memory base.
    pub(crate) base: u32,
    /// Thread, warp and lane index.
    pub(crate) tid: u32,
    pub(crate) warp: u32,
    pub(crate) lane: u32,
    /// Batch row, head and its group.
    pub(crate) b: usize,
    pub(crate) h: usize,
    pub(crate) g: usize,
    /// S, H, G.
    pub(crate) s_len: usize,
    pub(crate) heads: usize,
    pub(crate) groups: usize,
    /// Start of this (b, h) row in the (B,H,S) tensors.
    pub(crate) row: usize,
}

/// The next chunk's raw inputs that live in registers until its scalar phase.
#[derive(Clone, Copy)]
pub(crate) struct Prefetch {
    /// Warp 0, lane u ≤ 16: adt (u < len), Δ and the trap logit of chunk token u (zeros past S).
    scalars: [f32; 3],
    /// Every thread: angle logit and Δ of times 4·warp + u, angle `lane`.
    logits: [f32; 4],
    dts: [f32; 4],
}

/// Loads chunk `[c0, c0 + len)`'s registers of [`Prefetch`].
#[inline(always)]
pub(crate) unsafe fn prefetch<X: Elem>(
    prm: &ForwardParams,
    bk: &Blk,
    c0: u32,
    len: u32,
) -> Prefetch {
    let mut pf = Prefetch {
        scalars: [0.0; 3],
        logits: [0.0; 4],
        dts: [0.0; 4],
    };
    // SAFETY (whole body): every index is checked against the token range and lies inside the
    // (B,H,S) and (B,S,H,Na) tensors of the launch contract.
    unsafe {
        let t = c0 as usize + bk.lane as usize;
        if bk.warp == 0 && bk.lane <= C && t < bk.s_len {
            if bk.lane < len {
                pf.scalars[0] = ldg(prm.adt, bk.row + t);
            }
            pf.scalars[1] = ldg(prm.dt, bk.row + t);
            pf.scalars[2] = X::load(prm.trap, bk.row + t);
        }
        for u in 0..4 {
            let i = 4 * bk.warp + u as u32;
            if i < len {
                let t = c0 as usize + i as usize;
                pf.logits[u] = ldg(
                    prm.angles,
                    ((bk.b * bk.s_len + t) * bk.heads + bk.h) * NA as usize + bk.lane as usize,
                );
                pf.dts[u] = ldg(prm.dt, bk.row + t);
            }
        }
    }
    pf
}

/// The token scalar inputs of a batch-walking unit (warp 0, lane u ≤ 16: token u's adt (u <
/// len), Δ and trap logit, zeros past S), the trap logit as its raw bf16 bits: widened where phase
/// S1 uses it ([`UnitScalars::widen`]), so that no warp waits for these loads where they are
/// issued (the angle-logit staging and the rows' copies of the next unit go out beside them).
#[derive(Clone, Copy, Default)]
struct UnitScalars {
    adt: f32,
    dt: f32,
    trap: <Bf16 as Elem>::Raw,
}

impl UnitScalars {
    /// `[adt, Δ, trap logit]` as [`Prefetch::scalars`] holds them.
    #[inline(always)]
    fn widen(self) -> [f32; 3] {
        [self.adt, self.dt, Bf16::widen(self.trap)]
    }
}

/// Loads the [`UnitScalars`] of the unit of `bk` (tokens `[0, len)`): the scalar loads of
/// [`prefetch`] with the trap logit left raw. A near-copy on purpose: routing `prefetch` through
/// this loader and its widening changes the chunk loop's control flow in the full-chunk kernels
/// (one more predicate, moved blocks in their PTX), whose timing was not re-measured.
#[inline(always)]
unsafe fn token_scalar_inputs(prm: &ForwardParams, bk: &Blk, len: u32) -> UnitScalars {
    let mut sc = UnitScalars::default();
    let t = bk.lane as usize;
    // SAFETY: token indices checked against the sequence; (B,H,S) tensors of the launch contract.
    unsafe {
        if bk.warp == 0 && bk.lane <= C && t < bk.s_len {
            if bk.lane < len {
                sc.adt = ldg(prm.adt, bk.row + t);
            }
            sc.dt = ldg(prm.dt, bk.row + t);
            sc.trap = Bf16::load_raw(prm.trap, bk.row + t);
        }
    }
    sc
}

/// Issues the `cp.async` copies of chunk `[c0, c0 + len)`'s raw q and k rows into the staging
/// area and its v and z rows into bank `bank`. Rows of times ≥ `len` are zero-filled (their
/// source address is time `c0`'s, never read), so the phases after it run on all 16 times
/// without a branch: zero rows give finite q̂/k̂ (the biases, rotated) and zero x, and the score
/// weights and key scales of those times are zero.
#[inline(always)]
unsafe fn stage_chunk<const STATES_ONLY: bool>(
    prm: &ForwardParams,
    bk: &Blk,
    c0: u32,
    len: u32,
    bank: u32,
) {
    // Thread tid copies piece tid mod 16 of rows ρ = tid/16 + 8j, j < 8: rank (tid/16) mod 4,
    // times tid/64 + 2j.
    let piece = (bk.tid % 16) as usize;
    let rank = ((bk.tid / 16) % R) as usize;
    let time0 = bk.tid / 64;
    let token_bytes = R as usize * bk.groups * N as usize * 2;
    let qk_first = ((((bk.b * bk.s_len + c0 as usize) * R as usize + rank) * bk.groups + bk.g)
        * N as usize
        + 8 * piece)
        * 2;
    // SAFETY (whole body): every source is a 16-byte piece of a token < S (time c0 for the
    // zero-filled rows) of the 16-byte aligned tensors of the launch contract; destinations are
    // inside the staging regions of the layout.
    unsafe {
        for j in 0..8u32 {
            let i = time0 + 2 * j;
            let (src, size) = if i < len {
                (qk_first + i as usize * token_bytes, 16)
            } else {
                (qk_first, 0)
            };
            let dst = (bk.tid / 16 + 8 * j) * 256 + 16 * piece as u32;
            if !STATES_ONLY {
                cp_async_cg_16_zfill(
                    bk.base + L::RAW_Q + dst,
                    (prm.q as usize + src) as *const u8,
                    size,
                );
            }
            cp_async_cg_16_zfill(
                bk.base + L::RAW_K + dst,
                (prm.k as usize + src) as *const u8,
                size,
            );
        }
        let i = bk.tid / 8;
        let piece = (bk.tid % 8) as usize;
        let t = c0 as usize + if i < len { i as usize } else { 0 };
        let size = if i < len { 16 } else { 0 };
        let src = (((bk.b * bk.s_len + t) * bk.heads + bk.h) * P as usize + 8 * piece) * 2;
        let dst = bk.base + L::BANK + bank * L::BANK_BYTES + i * 128 + 16 * piece as u32;
        cp_async_cg_16_zfill(dst, (prm.v as usize + src) as *const u8, size);
        if !STATES_ONLY && prm.z != 0 {
            cp_async_cg_16_zfill(dst + 2048, (prm.z as usize + src) as *const u8, size);
        }
    }
}

/// Phase S1: angle increments and their per-warp prefix (returned, with the carried total read
/// before anyone overwrites it), the warp totals into shared memory; warp 0 forms the token
/// scalars.
#[inline(always)]
pub(crate) unsafe fn phase_increments<G: Regions>(
    bk: &Blk,
    len: u32,
    pf: &Prefetch,
    bank: u32,
) -> (f64, [f64; 4]) {
    // SAFETY: forwarded to the caller.
    unsafe { phase_increments_carried::<G, false>(bk, len, pf, bank, 0.0) }
}

/// [`phase_increments`] from a carried angle total `carry` (this lane's angle) held in a
/// register rather than in the THETA region.
#[inline(always)]
unsafe fn phase_increments_from<G: Regions>(
    bk: &Blk,
    len: u32,
    pf: &Prefetch,
    bank: u32,
    carry: f64,
) -> (f64, [f64; 4]) {
    // SAFETY: forwarded to the caller.
    unsafe { phase_increments_carried::<G, true>(bk, len, pf, bank, carry) }
}

/// Phase S1 with the carry read from the THETA region, or (`GIVEN`) the one given.
#[inline(always)]
unsafe fn phase_increments_carried<G: Regions, const GIVEN: bool>(
    bk: &Blk,
    len: u32,
    pf: &Prefetch,
    bank: u32,
    given: f64,
) -> (f64, [f64; 4]) {
    let mut loc = [0.0f64; 4];
    // SAFETY (whole body): indices inside the THETA, TOT and SCAL regions.
    unsafe {
        let carry = if GIVEN {
            given
        } else {
            ld_shared_f64(bk.base + G::THETA + 8 * bk.lane)
        };
        let mut acc = 0.0f64;
        // Times past `len` have logit and Δ zero from the prefetch, so their increment is an
        // exact zero; unconditional, the four increments' dependency chains interleave.
        for (u, l) in loc.iter_mut().enumerate() {
            acc += if G::F32_ANGLES {
                angle_increment(pf.logits[u], pf.dts[u])
            } else {
                angle_increment_f32(pf.logits[u], pf.dts[u]) as f64
            };
            *l = acc;
        }
        st_shared_f64(bk.base + G::TOT + 8 * (32 * bk.warp + bk.lane), acc);
        if bk.warp == 0 {
            token_scalars::<G>(bk, len, pf.scalars, bank);
        }
        (carry, loc)
    }
}

/// A chunk's token scalars, one time per lane of a warp (`sc` = adt, Δ, trap logit of chunk time
/// `lane`, lanes ≤ 16, zeros past S): `(A_i, Ā_i, γ_i, c_i)`, the inclusive prefix and exclusive
/// suffix of adt over the chunk's `len` times, `γ_i = σ(trap)·Δ` and `c_i = γ_i + ε_{i+1}` (zero
/// past `len`). Every lane of the warp calls it together.
#[inline(always)]
pub(crate) fn chunk_token_scalars(lane: u32, len: u32, sc: [f32; 3]) -> [f32; 4] {
    let a = if lane < len { sc[0] } else { 0.0 };
    let mut pre = a;
    let mut rev = shfl_idx_f32(a, 15u32.wrapping_sub(lane));
    for d in [1u32, 2, 4, 8] {
        let o = shfl_up_f32(pre, d);
        let orev = shfl_up_f32(rev, d);
        if lane >= d {
            pre += o;
            rev += orev;
        }
    }
    // rev at lane k sums times ≥ 15 − k, so Ā_i = Σ_{u > i} sits at lane 14 − i.
    let suf = shfl_idx_f32(rev, 14u32.wrapping_sub(lane));
    let suf = if lane < 15 { suf } else { 0.0 };
    let (dt, tr) = (sc[1], sc[2]);
    let gamma = if lane < len {
        sigmoid_rcp(tr) * dt
    } else {
        0.0
    };
    // Zero past S (the prefetch left Δ = 0 there).
    let eps = dt * sigmoid_rcp(-tr);
    let eps_next = shfl_idx_f32(eps, lane + 1);
    let c_s = if lane < len { gamma + eps_next } else { 0.0 };
    [pre, suf, gamma, c_s]
}

/// Warp 0: `A_i` (inclusive prefix of adt), `Ā_i` (exclusive suffix), `γ_i`, `c_i = γ_i + ε_{i+1}`
/// and the derived `exp(A_i)`, `exp(Ā_i)·c_i`, one time per lane.
#[inline(always)]
unsafe fn token_scalars<G: Regions>(bk: &Blk, len: u32, sc: [f32; 3], bank: u32) {
    let lane = bk.lane;
    let [pre, suf, gamma, c_s] = chunk_token_scalars(lane, len, sc);
    if lane < C {
        // SAFETY: lane < 16 indexes the SCAL rows.
        unsafe {
            st_shared_f32(scal_in::<G>(bk, bank, S_A, lane), pre);
            st_shared_f32(scal_in::<G>(bk, bank, S_C, lane), c_s);
            st_shared_f32(scal_in::<G>(bk, bank, S_GAMMA, lane), gamma);
            st_shared_f32(scal_in::<G>(bk, bank, S_EXPA, lane), exp(pre));
            st_shared_f32(scal_in::<G>(bk, bank, S_KSCALE, lane), exp(suf) * c_s);
        }
    }
}

/// Phase S2: θ of each (time, angle) from the carry and the warp totals, its cosine and sine;
/// the new carry; the score weights.
#[inline(always)]
pub(crate) unsafe fn phase_angles_weights<G: Regions, const STATES_ONLY: bool>(
    bk: &Blk,
    len: u32,
    carry: f64,
    loc: [f64; 4],
    bank: u32,
) {
    // SAFETY (whole body): indices inside the TOT, CS, THETA, SCAL and WT regions.
    unsafe {
        // Branch-free (selects and unconditional work): divergent branches here cost more than
        // the work they skip; times past `len` get a finite θ (their increments are zero) and
        // cos/sin entries nobody reads. Every shared load of the phase comes first (a store would
        // hold each later load back, see `phase_rotate`): the warp totals, and the score weights'
        // token scalars (the segment-state pass has no scores).
        let totals = [0u32, 1, 2].map(|w| ld_shared_f64(bk.base + G::TOT + 8 * (32 * w + bk.lane)));
        let pairs = [0u32, 1].map(|m| {
            let e = bk.tid + m * T;
            (e, e / C, e % C)
        });
        let scalars = pairs.map(|(_, i, ip)| {
            if STATES_ONLY {
                [0.0; 4]
            } else {
                [
                    ld_shared_f32(scal_in::<G>(bk, bank, S_A, i)),
                    ld_shared_f32(scal_in::<G>(bk, bank, S_A, ip)),
                    ld_shared_f32(scal_in::<G>(bk, bank, S_C, ip)),
                    ld_shared_f32(scal_in::<G>(bk, bank, S_GAMMA, i)),
                ]
            }
        });
        if !STATES_ONLY {
            for m in 0..2 {
                let ((e, i, ip), [a_i, a_ip, c_ip, gamma]) = (pairs[m], scalars[m]);
                let w = if ip < i {
                    exp(a_i - a_ip) * c_ip
                } else if ip == i {
                    gamma
                } else {
                    0.0
                };
                st_shared_f32(bk.base + G::WT + 4 * e, w);
            }
        }
        let mut th0 = carry;
        for (w, total) in totals.iter().enumerate() {
            th0 += if (w as u32) < bk.warp { *total } else { 0.0 };
        }
        for (u, l) in loc.iter().enumerate() {
            let i = 4 * bk.warp + u as u32;
            let th = th0 + *l;
            let (s, c) = if G::F32_ANGLES {
                sincos(reduced_near_f32(th))
            } else {
                sincos_approx(reduced_near_f32(th))
            };
            st_shared_v2_f32(bk.base + G::CS + 8 * (32 * i + bk.lane), [c, s]);
            if i == len - 1 {
                st_shared_f64(bk.base + G::THETA + 8 * bk.lane, wrap_two_pi_f64(th));
            }
        }
    }
}

/// Per-lane constants of phase R (warp = rank r): the biases of the lane's two raw word pairs
/// (see [`lane_words`]) and mimo_v of columns 2l, 2l+1 of x.
#[derive(Clone, Copy)]
pub(crate) struct RankParams {
    pub(crate) bias: [[f32; 4]; 2],
    pub(crate) mimo_v: [f32; 2],
}

/// The two word pairs of a raw q/k row that lane `lane` transforms in phase R, as
/// `(is k, first column c)`: a pair is the words of columns c, c+1 and c+64, c+65. By default
/// (pairwise rotation, and the k-only segment pass) pair 0 is q's and pair 1 k's, both at column
/// 2·lane. `balanced` (the half-split rotation of q and k, whose pairs (j, j+64) rotate only for
/// j < 32): lanes 0–15 rotate q's words of columns 2m (m = lane mod 16) and bias k's of columns
/// 32 + 2m, lanes 16–31 the other way round, so that every lane rotates one pair and none runs the
/// rotation on an identity (the layout's 64-byte offsets of k̂ and raw k keep the two halves'
/// loads and stores in different banks).
#[inline(always)]
pub(crate) fn lane_words(lane: u32, balanced: bool) -> [(bool, u32); 2] {
    if balanced {
        let (m, upper) = (lane % 16, lane >= 16);
        [(upper, 2 * m), (!upper, 32 + 2 * m)]
    } else {
        [(false, 2 * lane), (true, 2 * lane)]
    }
}

/// This thread's [`RankParams`] for the word assignment of [`lane_words`].
#[inline(always)]
pub(crate) unsafe fn rank_params(prm: &ForwardParams, bk: &Blk, balanced: bool) -> RankParams {
    let hr = bk.h * R as usize + bk.warp as usize;
    let l = bk.lane as usize;
    let bias = |(is_k, c): (bool, u32)| {
        let c = c as usize;
        let src = if is_k { prm.k_bias } else { prm.q_bias };
        // SAFETY: (h, r, column) inside the (H,R,N) biases.
        [c, c + 1, c + 64, c + 65].map(|c| unsafe { ldg(src, hr * N as usize + c) })
    };
    let words = lane_words(bk.lane, balanced);
    // SAFETY: (h, r, column) inside the (H,R,P) mimo_v.
    unsafe {
        RankParams {
            bias: [bias(words[0]), bias(words[1])],
            mimo_v: [
                ldg(prm.mimo_v, hr * P as usize + 2 * l),
                ldg(prm.mimo_v, hr * P as usize + 2 * l + 1),
            ],
        }
    }
}

/// Biases, rotates and packs one raw q or k word pair (columns c, c+1 and c+64, c+65 of
/// [`lane_words`]; `cs` from [`cs_source`]).
#[inline(always)]
pub(crate) fn rotate_row(
    lo: u32,
    hi: u32,
    bias: [f32; 4],
    cs: [f32; 4],
    half_split: bool,
) -> (u32, u32) {
    pack_pairs(<[f32; 2]>::rotated(
        unpack_pair(lo),
        unpack_pair(hi),
        bias,
        cs,
        half_split,
    ))
}

/// The two bf16 halves of a packed word as an f32 pair (low half first).
#[inline(always)]
fn unpack_pair(w: u32) -> [f32; 2] {
    let (a, b) = unpack(w);
    [a, b]
}

/// Two f32 pairs rounded and packed into two bf16 words.
#[inline(always)]
fn pack_pairs((lo, hi): ([f32; 2], [f32; 2])) -> (u32, u32) {
    (pack_bf16x2(lo[0], lo[1]), pack_bf16x2(hi[0], hi[1]))
}

/// A lane's word pair of a q or k row as phase R holds it (columns c, c+1 and c+64, c+65 of
/// [`lane_words`]): two f32 pairs (the TF32 kernel) or two packed bf16 words (the bf16
/// kernels, transformed in f32).
pub(crate) trait PairWords: Copy {
    /// The pair biased and rotated by the (c, s) of [`cs_source`].
    fn rotated(lo: Self, hi: Self, bias: [f32; 4], cs: [f32; 4], half_split: bool) -> (Self, Self);
    /// The pair biased only (no pair of its columns rotates).
    fn biased(lo: Self, hi: Self, bias: [f32; 4]) -> (Self, Self);
}

impl PairWords for [f32; 2] {
    #[inline(always)]
    fn rotated(
        lo: [f32; 2],
        hi: [f32; 2],
        bias: [f32; 4],
        cs: [f32; 4],
        half_split: bool,
    ) -> ([f32; 2], [f32; 2]) {
        let ([a0, a1], [b0, b1]) = Self::biased(lo, hi, bias);
        if half_split {
            let (a0, b0) = rotate_pair(a0, b0, cs[0], cs[1]);
            let (a1, b1) = rotate_pair(a1, b1, cs[2], cs[3]);
            ([a0, a1], [b0, b1])
        } else {
            let (a0, a1) = rotate_pair(a0, a1, cs[0], cs[1]);
            ([a0, a1], [b0, b1])
        }
    }

    #[inline(always)]
    fn biased(lo: [f32; 2], hi: [f32; 2], bias: [f32; 4]) -> ([f32; 2], [f32; 2]) {
        (
            [lo[0] + bias[0], lo[1] + bias[1]],
            [hi[0] + bias[2], hi[1] + bias[3]],
        )
    }
}

impl PairWords for u32 {
    #[inline(always)]
    fn rotated(lo: u32, hi: u32, bias: [f32; 4], cs: [f32; 4], half_split: bool) -> (u32, u32) {
        rotate_row(lo, hi, bias, cs, half_split)
    }

    #[inline(always)]
    fn biased(lo: u32, hi: u32, bias: [f32; 4]) -> (u32, u32) {
        pack_pairs(<[f32; 2]>::biased(unpack_pair(lo), unpack_pair(hi), bias))
    }
}

/// Phase R's transform of a row's two word pairs (see [`lane_words`]): pair 0 rotated (passed
/// through in the k-only segment pass, `states_only`, which has no q), pair 1 rotated or, in the
/// balanced half-split assignment (q rotated too), biased only.
#[inline(always)]
pub(crate) fn transform_pairs<W: PairWords>(
    words: [[W; 2]; 2],
    rp: &RankParams,
    cs: [f32; 4],
    half_split: bool,
    states_only: bool,
) -> [(W, W); 2] {
    let [[a, b], [c, d]] = words;
    let first = if states_only {
        (a, b)
    } else {
        W::rotated(a, b, rp.bias[0], cs, half_split)
    };
    let second = if half_split && !states_only {
        W::biased(c, d, rp.bias[1])
    } else {
        W::rotated(c, d, rp.bias[1], cs, half_split)
    };
    [first, second]
}

/// Where lane `l` reads the cosines and sines of phase R: `(address of time 0, bytes per time)`.
/// Half-split: lanes 0–15 read the (c, s) pairs of angles 2l, 2l+1; lanes 16–31 read those of
/// angles 2(l − 16), 2(l − 16) + 1 when the word assignment is `balanced` (see [`lane_words`]),
/// else they hold columns that no pair rotates and read the identity (1, 0, 1, 0) at
/// [`L::IDENT`] for every time, so the row loop has no lane-dependent branch. Pairwise: lane l
/// reads angle l.
#[inline(always)]
pub(crate) fn cs_source<G: Regions>(bk: &Blk, half_split: bool, balanced: bool) -> (u32, u32) {
    let l = bk.lane;
    if !half_split {
        (bk.base + G::CS + 8 * l, 256)
    } else if balanced || l < 16 {
        (bk.base + G::CS + 16 * (l % 16), 256)
    } else {
        (bk.base + G::IDENT, 0)
    }
}

/// Phase R: q̂, k̂, x and x_w of the chunk as bf16 tiles: all 16 times of a full chunk (rows past
/// the sequence come from zero-filled staging, see [`stage_chunk`]); of a short one (`!FULL`) the
/// row groups holding its `len` times, past them only zeroed k̂ and x_w rows (see [`tiles`]).
#[inline(always)]
unsafe fn phase_rotate<
    const STATES_ONLY: bool,
    const HALF_SPLIT: bool,
    const FULL: bool,
    const WG: bool,
>(
    bk: &Blk,
    len: u32,
    bank: u32,
    rp: &RankParams,
    cs_at: (u32, u32),
) {
    let l = bk.lane;
    let r = bk.warp;
    let balanced = HALF_SPLIT && !STATES_ONLY;
    // Byte offsets of the lane's two word pairs in a raw staging row and in a q̂/k̂ tile row.
    let words = lane_words(l, balanced);
    let raw_at = words.map(|(is_k, c)| if is_k { L::RAW_K } else { L::RAW_Q } + 2 * c);
    let tile_at = words.map(|(is_k, c)| if is_k { L::K } else { L::Q } + 2 * c);
    // The `wgmma` kernel's swizzled q̂, k̂ and x_w: the lane's word offsets within a row, XORed
    // with the warp's part of the row pattern (row ρ = 4i + r: ρ mod 8 = 4(i mod 2) ^ r); each
    // row XORs in the rest, 64·(i mod 2). The tiles are 1024-byte aligned, so the XOR (bits 4–6)
    // leaves the tile offsets alone.
    let warp_pattern = fresh_u32(16 * r) & 0x30;
    let swizzled_word =
        words.map(|(is_k, c)| (if is_k { L::K_SWIZZLED } else { L::Q } + 2 * c) ^ warp_pattern);
    let swizzled_xw = L::XW + ((4 * l) ^ warp_pattern);
    // SAFETY (whole body): rows < 64 and columns < 128 (q, k) or < 64 (x) of the layout's tiles;
    // the staging rows read are those the last `cp.async` group wrote.
    unsafe {
        let v_at = bk.base + L::BANK + bank * L::BANK_BYTES;
        // Rows in groups of ROTATE_GROUP, every load of a group issued before its first store:
        // the loads and stores are `asm!` with memory effects, so neither LLVM nor ptxas moves a
        // later row's loads above an earlier row's stores, and row by row each shared-memory
        // latency would be waited out alone.
        for i0 in (0..C).step_by(ROTATE_GROUP) {
            // Groups wholly past the chunk only zero the k̂ and x_w rows that the full-chunk
            // kernel's state pass reads on a short last chunk (its k-steps all run there: skipping
            // them made ptxas spill; the short-call kernel's state pass skips them); the other
            // GEMMs skip these tiles (see [`tiles`]).
            if !FULL && i0 >= len {
                for di in 0..ROTATE_GROUP as u32 {
                    let rho = 4 * (i0 + di) + r;
                    if WG {
                        let k_at = bk.base + L::K_SWIZZLED + swizzle128_offset(64, rho, 2 * l);
                        st_shared_u32(k_at, 0);
                        st_shared_u32(k_at + 64 * 128, 0);
                        st_shared_u32(bk.base + L::XW + swizzle128_offset(64, rho, 2 * l), 0);
                    } else {
                        let qk_at = bk.base + rho * L::QK_STRIDE + 4 * l;
                        st_shared_u32(qk_at + L::K, 0);
                        st_shared_u32(qk_at + L::K + 128, 0);
                        st_shared_u32(bk.base + rho * L::X_STRIDE + 4 * l + L::XW, 0);
                    }
                }
                continue;
            }
            let mut rows = [RawRow::default(); ROTATE_GROUP];
            for (di, row) in rows.iter_mut().enumerate() {
                let i = i0 + di as u32;
                let raw = bk.base + (4 * i + r) * 256;
                row.cs = if HALF_SPLIT {
                    ld_shared_v4_f32(cs_at.0 + cs_at.1 * i)
                } else {
                    let [c, s] = ld_shared_v2_f32(cs_at.0 + cs_at.1 * i);
                    [c, s, 1.0, 0.0]
                };
                for (j, (words, &src)) in row.words.iter_mut().zip(&raw_at).enumerate() {
                    if !STATES_ONLY || j == 1 {
                        *words = [ld_shared_u32(raw + src), ld_shared_u32(raw + src + 128)];
                    }
                }
                row.v = ld_shared_u32(v_at + 128 * i + 4 * l);
                row.ks = ld_shared_f32(scal(bk, bank, S_KSCALE, i));
            }
            for (di, row) in rows.iter().enumerate() {
                let i = i0 + di as u32;
                let rho = 4 * i + r;
                let qk_at = bk.base + rho * L::QK_STRIDE;
                let x_at = bk.base + rho * L::X_STRIDE + 4 * l;
                // (Word j's two addresses: columns c and c + 64.)
                let word_at = |j: usize| {
                    if WG {
                        let at = bk.base + rho * 128 + (swizzled_word[j] ^ (64 * (i % 2)));
                        (at, at + 64 * 128)
                    } else {
                        (qk_at + tile_at[j], qk_at + tile_at[j] + 128)
                    }
                };
                let [first, second] =
                    transform_pairs(row.words, rp, row.cs, HALF_SPLIT, STATES_ONLY);
                if !STATES_ONLY {
                    let (lo, hi) = word_at(0);
                    st_shared_u32(lo, first.0);
                    st_shared_u32(hi, first.1);
                }
                let (lo, hi) = word_at(1);
                st_shared_u32(lo, second.0);
                st_shared_u32(hi, second.1);
                let (v0, v1) = unpack(row.v);
                let (x0, x1) = (v0 * rp.mimo_v[0], v1 * rp.mimo_v[1]);
                if !STATES_ONLY {
                    st_shared_u32(x_at + L::X, pack_bf16x2(x0, x1));
                }
                let xw_at = if WG {
                    bk.base + rho * 128 + (swizzled_xw ^ (64 * (i % 2)))
                } else {
                    x_at + L::XW
                };
                st_shared_u32(xw_at, pack_bf16x2(x0 * row.ks, x1 * row.ks));
            }
        }
        if WG {
            // The tiles just written are `wgmma` operands after the next barrier.
            wgmma::fence_proxy_async_shared();
        }
    }
}

/// Rows of phase R whose shared-memory loads are issued together: four times, one 16-row tile.
const ROTATE_GROUP: usize = 4;

/// The 16-row tiles (four times each) that hold a chunk's `len` times. For a short chunk
/// (`!FULL`: the last one, or a decode call of a few tokens) phase R rotates only these rows
/// (past them it zeroes k̂ and x_w) and the score, output and intra GEMMs skip the tiles past
/// them; in the short-call kernel (`SHORT`, calls of fewer than C tokens) the state pass and the
/// epilogue skip them too. Full chunks take separate instantiations with the bound a constant, so
/// their code is what it was without the bound (a runtime bound there cost 3%).
#[inline(always)]
fn tiles<const FULL: bool>(len: u32) -> u32 {
    if FULL {
        C / ROTATE_GROUP as u32
    } else {
        len.div_ceil(ROTATE_GROUP as u32)
    }
}

/// One row's inputs of phase R: its (c, s) pairs, the lane's two raw word pairs (see
/// [`lane_words`]; pair 0 unused in the k-only segment pass), its v word and its key scale.
#[derive(Clone, Copy, Default)]
struct RawRow {
    cs: [f32; 4],
    words: [[u32; 2]; 2],
    v: u32,
    ks: f32,
}

/// `ldmatrix` row address of lane `lane` for the A operand (rows `row0..row0+16`, k columns
/// `col0..col0+16` in bf16 elements) of a row-major bf16 tile with row stride `stride` bytes.
#[inline(always)]
fn a_addr(tile: u32, stride: u32, row0: u32, col0: u32, lane: u32) -> u32 {
    tile + (row0 + lane % 16) * stride + 2 * (col0 + 8 * (lane / 16))
}

/// Phase M1: weighted scores into the W tile, then the inter-chunk outputs `exp(A_i)·q̂·Hᵀ` of
/// the warp's 16 columns (all 64 rows). The scores go by row tile (warp w those of row tile w up
/// to the diagonal, so that warp 3 of a full chunk does four times warp 0's products) or, in the
/// short-call kernels (`SPREAD`), spread over the warps (see [`scores_spread`]). The multi-chunk
/// kernels keep the row tiles for their last, short chunk too: spread there, ptxas spills 4–8 B
/// of those 255-register kernels on sm_90.
#[inline(always)]
unsafe fn phase_scores_inter<const FULL: bool, const SPREAD: bool, const WG: bool>(
    bk: &Blk,
    len: u32,
    bank: u32,
    state: &[[f32; 4]; 16],
) -> [[[f32; 4]; 2]; 4] {
    let (w, lane) = (bk.warp, bk.lane);
    let tiles = tiles::<FULL>(len);
    let (g, t4) = (lane / 4, lane % 4);
    let q_tile = bk.base + L::Q;
    let k_tile = bk.base + L::K;
    // SAFETY (whole body): tile addresses inside the Q, K, W, WT and SCAL regions.
    unsafe {
        if SPREAD {
            scores_spread(bk, tiles);
        } else if WG {
            // The whole 64×64 score tile as one warpgroup product (the tiles above the diagonal
            // too: `wgmma` has no causal shape, and they are not stored). The descriptors are
            // formed here each chunk from fresh tile addresses: hoisted out of the chunk loop,
            // the sixteen 64-bit values would be held across it.
            let mut sc = [[0.0f32; 4]; 8];
            let (q_at, k_at) = (fresh_u32(q_tile), fresh_u32(bk.base + L::K_SWIZZLED));
            wgmma::fence();
            for kk in 0..8u32 {
                let a = wgmma::k_major_desc(q_at, 64, 16 * kk);
                let b = wgmma::k_major_desc(k_at, 64, 16 * kk);
                wgmma::mma_m64n64k16_bf16::<false, false>(&mut sc, a, b, kk > 0);
            }
            wgmma::commit_group();
            wgmma::wait_all_m64n64(&mut sc);
            weigh_row_tile_scores::<Bf16Regions>(bk, w, w < tiles, &sc, |jt, s, wa, wb| {
                store_weighted_scores(bk, (g, t4), (w, jt), s, [wa, wb]);
            });
        } else {
            let mut sc = [[0.0f32; 4]; 8];
            // A warp whose rows lie past the chunk has no scores to form (nor does anyone read its
            // rows of the W tile).
            let scores = w < tiles;
            for kk in 0..8u32 {
                let a = if scores {
                    ldmatrix_x4(a_addr(q_tile, L::QK_STRIDE, 16 * w, 16 * kk, lane))
                } else {
                    [0; 4]
                };
                for jj in 0..4u32 {
                    if scores && jj <= w {
                        let row = 16 * jj + lane % 8 + 8 * (lane / 16);
                        let col = 16 * kk + 8 * ((lane / 8) % 2);
                        let b = ldmatrix_x4(k_tile + row * L::QK_STRIDE + 2 * col);
                        mma_m16n8k16_bf16_f32(&mut sc[2 * jj as usize], a, [b[0], b[1]]);
                        mma_m16n8k16_bf16_f32(&mut sc[2 * jj as usize + 1], a, [b[2], b[3]]);
                    }
                }
            }
            weigh_row_tile_scores::<Bf16Regions>(bk, w, scores, &sc, |jt, s, wa, wb| {
                store_weighted_scores(bk, (g, t4), (w, jt), s, [wa, wb]);
            });
        }
        let mut y = [[[0.0f32; 4]; 2]; 4];
        let q_lane = fresh_u32(swizzle128_offset(64, lane % 16, 8 * (lane / 16)));
        for kk in 0..8usize {
            let (s0, s1) = (&state[2 * kk], &state[2 * kk + 1]);
            let b0 = [pack_bf16x2(s0[0], s0[1]), pack_bf16x2(s1[0], s1[1])];
            let b1 = [pack_bf16x2(s0[2], s0[3]), pack_bf16x2(s1[2], s1[3])];
            for (mt, ym) in y.iter_mut().enumerate() {
                if (mt as u32) < tiles {
                    let a = ldmatrix_x4(if WG {
                        swizzled_at(q_tile, q_lane, 16 * mt as u32, 16 * kk as u32)
                    } else {
                        a_addr(q_tile, L::QK_STRIDE, 16 * mt as u32, 16 * kk as u32, lane)
                    });
                    mma_m16n8k16_bf16_f32(&mut ym[0], a, b0);
                    mma_m16n8k16_bf16_f32(&mut ym[1], a, b1);
                }
            }
        }
        for (mt, ym) in y.iter_mut().enumerate() {
            let i = 4 * mt as u32 + g / 4;
            let ea = ld_shared_f32(scal(bk, bank, S_EXPA, i));
            let eb = ld_shared_f32(scal(bk, bank, S_EXPA, i + 2));
            for yj in ym.iter_mut() {
                yj[0] *= ea;
                yj[1] *= ea;
                yj[2] *= eb;
                yj[3] *= eb;
            }
        }
        y
    }
}

/// Stores the weighted score n8 tile `s` of row tile `mt`, column tile `jt` into the W tile as
/// bf16 (`wa` weighs the lane's accumulator row g, `wb` row g + 8; `(g, t4)` = `(lane / 4,
/// lane % 4)`, as the caller already holds them).
///
/// # Safety
/// `mt < 4`, `jt < 8`; no other thread touches those W elements before the next barrier.
#[inline(always)]
unsafe fn store_weighted_scores(
    bk: &Blk,
    (g, t4): (u32, u32),
    (mt, jt): (u32, u32),
    s: &[f32; 4],
    [wa, wb]: [f32; 2],
) {
    let at = bk.base + L::W + (16 * mt + g) * L::X_STRIDE + 2 * (8 * jt + 2 * t4);
    // SAFETY: inside the W tile (the caller's contract).
    unsafe {
        st_shared_u32(at, pack_bf16x2(s[0] * wa, s[1] * wa));
        st_shared_u32(at + 8 * L::X_STRIDE, pack_bf16x2(s[2] * wb, s[3] * wb));
    }
}

/// Score items of a warp in [`scores_spread`]: the most n8 tiles one warp forms (⌈20 / 4⌉).
const SCORE_ITEMS: u32 = 5;

/// The row tile of score item `i` (items enumerated row tile by row tile, row tile m holding
/// the 2m + 2 n8 tiles on or below the diagonal, so m(m + 1) items precede it).
#[inline(always)]
fn score_item_row_tile(i: u32) -> u32 {
    (i >= 2) as u32 + (i >= 6) as u32 + (i >= 12) as u32
}

/// Phase M1's weighted scores of a short chunk (`tiles` 16-row tiles): the `tiles·(tiles + 1)`
/// n8 tiles on or below the diagonal, dealt to the four warps in runs of ⌈items / 4⌉ (at four
/// tiles five each, where the row tiles give warp 3 eight; at two tiles, a decode call of 5–8
/// tokens, two each, where the row tiles give warp 1 four and warps 2–3 none). A run covers at
/// most two row tiles, and only from three tiles on. Items past the last are clamped onto it
/// and not stored, so that every branch around the warp-wide `ldmatrix`/`mma` depends on the
/// tile count alone (uniform across the block: no divergence handling around them).
#[inline(always)]
unsafe fn scores_spread(bk: &Blk, tiles: u32) {
    let lane = bk.lane;
    let (g, t4) = (lane / 4, lane % 4);
    let items = tiles * (tiles + 1);
    let per = items.div_ceil(4);
    // Through an opaque move: formed here each chunk, not hoisted out of a unit loop and held.
    let first = opaque_u32(bk.warp) * per;
    let mt0 = score_item_row_tile(first.min(items - 1));
    let q_tile = bk.base + L::Q;
    let k_tile = bk.base + L::K;
    let mut item = [(0u32, 0u32, false); SCORE_ITEMS as usize];
    for (j, it) in item.iter_mut().enumerate() {
        let i = (first + j as u32).min(items - 1);
        let mt = score_item_row_tile(i);
        *it = (mt, i - mt * (mt + 1), mt != mt0);
    }
    // SAFETY (whole body): tile addresses inside the Q, K, W and WT regions (row tiles < 4,
    // n8 tiles < 8).
    unsafe {
        let mut sc = [[0.0f32; 4]; SCORE_ITEMS as usize];
        for kp in 0..4u32 {
            let mut a_lo = [[0u32; 4]; 2];
            let mut a_hi = [[0u32; 4]; 2];
            for e in 0..2u32 {
                let col = 32 * kp + 16 * e;
                a_lo[e as usize] = ldmatrix_x4(a_addr(q_tile, L::QK_STRIDE, 16 * mt0, col, lane));
                if per > 2 {
                    let mt1 = (mt0 + 1).min(3);
                    a_hi[e as usize] =
                        ldmatrix_x4(a_addr(q_tile, L::QK_STRIDE, 16 * mt1, col, lane));
                }
            }
            for (j, &(_, jt, hi)) in item.iter().enumerate() {
                if (j as u32) < per {
                    // Matrix m of the x4 load: rows 8jt.., depth columns 32kp + 8m: the B
                    // fragments of depth steps 2kp (m = 0, 1) and 2kp + 1 (m = 2, 3).
                    let row = 8 * jt + lane % 8;
                    let b =
                        ldmatrix_x4(k_tile + row * L::QK_STRIDE + 2 * (32 * kp + 8 * (lane / 8)));
                    for e in 0..2usize {
                        let a = if hi { a_hi[e] } else { a_lo[e] };
                        mma_m16n8k16_bf16_f32(&mut sc[j], a, [b[2 * e], b[2 * e + 1]]);
                    }
                }
            }
        }
        // Every weight loaded before the first store (see `weigh_row_tile_scores`).
        let mut weights = [[0.0f32; 2]; SCORE_ITEMS as usize];
        for (wt, &(mt, jt, _)) in weights.iter_mut().zip(item.iter()) {
            *wt = score_weight_pair::<Bf16Regions>(bk, 4 * mt + g / 4, 2 * jt + t4 / 2);
        }
        for (j, (&[wa, wb], &(mt, jt, _))) in weights.iter().zip(item.iter()).enumerate() {
            if (j as u32) < per && first + (j as u32) < items {
                store_weighted_scores(bk, (g, t4), (mt, jt), &sc[j], [wa, wb]);
            }
        }
    }
}

/// Phase M2, first part: the intra-chunk outputs (weighted scores times x, causal tiles only).
#[inline(always)]
unsafe fn phase_intra<const FULL: bool>(bk: &Blk, len: u32, y: &mut [[[f32; 4]; 2]; 4]) {
    let (w, lane) = (bk.warp, bk.lane);
    let tiles = tiles::<FULL>(len);
    // SAFETY (whole body): tile addresses inside the X and W regions.
    unsafe {
        for kk in 0..4u32 {
            let row = 16 * kk + lane % 16;
            let col = 16 * w + 8 * (lane / 16);
            let bx = if kk < tiles {
                ldmatrix_x4_trans(bk.base + L::X + row * L::X_STRIDE + 2 * col)
            } else {
                [0; 4]
            };
            for (mt, ym) in y.iter_mut().enumerate() {
                if kk <= mt as u32 && (mt as u32) < tiles {
                    let a = ldmatrix_x4(a_addr(
                        bk.base + L::W,
                        L::X_STRIDE,
                        16 * mt as u32,
                        16 * kk,
                        lane,
                    ));
                    mma_m16n8k16_bf16_f32(&mut ym[0], a, [bx[0], bx[1]]);
                    mma_m16n8k16_bf16_f32(&mut ym[1], a, [bx[2], bx[3]]);
                }
            }
        }
    }
}

/// Per-lane constants of the epilogue: the lane's rank `r = (lane/4) mod 4` and its four columns
/// `p = 16w + 8j + 2(lane mod 4) + e`.
#[derive(Clone, Copy)]
pub(crate) struct ColumnParams {
    /// `D_h·mimo_v[r, p]` (x = v·mimo_v enters the output as `D·x`).
    pub(crate) d_mimo_v: [[f32; 2]; 2],
    pub(crate) mimo_z: [[f32; 2]; 2],
    pub(crate) mimo_o: [[f32; 2]; 2],
}

/// This thread's [`ColumnParams`].
#[inline(always)]
pub(crate) unsafe fn column_params(prm: &ForwardParams, bk: &Blk) -> ColumnParams {
    let r = ((bk.lane / 4) % 4) as usize;
    let hr = (bk.h * R as usize + r) * P as usize;
    let d_h = if prm.d != 0 {
        // SAFETY: h < H.
        unsafe { ldg(prm.d, bk.h) }
    } else {
        0.0
    };
    let mut cp = ColumnParams {
        d_mimo_v: [[0.0; 2]; 2],
        mimo_z: [[0.0; 2]; 2],
        mimo_o: [[1.0; 2]; 2],
    };
    // SAFETY (whole body): (h, r, p) inside the (H,R,P) weights, (h, p) inside the norm weight.
    unsafe {
        for j in 0..2 {
            for e in 0..2 {
                let p = (16 * bk.warp + 8 * j as u32 + 2 * (bk.lane % 4)) as usize + e;
                cp.d_mimo_v[j][e] = d_h * ldg(prm.mimo_v, hr + p);
                if prm.z != 0 {
                    cp.mimo_z[j][e] = ldg(prm.mimo_z, hr + p);
                }
                if prm.mode != output_mode::PREREDUCE {
                    cp.mimo_o[j][e] = ldg(prm.mimo_o, hr + p);
                }
            }
        }
    }
    cp
}

/// The norm weights of the lane's columns `p = 16w + 8j + 2(lane mod 4) + e`, e ∈ {0, 1}, read
/// where they are applied (L1 hits after the first chunk) rather than held in registers.
#[inline(always)]
pub(crate) fn norm_weights(prm: &ForwardParams, bk: &Blk, j: usize) -> [f32; 2] {
    if prm.norm_weight == 0 {
        return [1.0; 2];
    }
    let p = (16 * bk.warp + 8 * j as u32 + 2 * (bk.lane % 4)) as usize;
    // SAFETY: (h, p) inside the (H,P) norm weight.
    unsafe {
        [
            ldg(prm.norm_weight, bk.h * P as usize + p),
            ldg(prm.norm_weight, bk.h * P as usize + p + 1),
        ]
    }
}

/// How a tensor-core kernel's epilogue reads its staged v and z rows and writes its outputs:
/// bf16 words (this kernel) or f32 pairs (`chunked_forward_tf32`).
pub(crate) trait EpilogueIo {
    /// Bytes per element of the staged rows (each bank row holds P elements) and the output.
    const ELEM: u32;
    /// Offset of the z rows within a bank.
    const Z: u32;
    /// The two consecutive staged elements at shared address `addr`.
    unsafe fn pair(addr: u32) -> [f32; 2];
    /// Stores two consecutive output elements at element index `at` of `out`.
    unsafe fn store(out: u64, at: usize, v: [f32; 2]);
    /// `y·silu(x)`, the gate, to this output dtype's precision.
    fn gated(y: f32, x: f32) -> f32;
}

/// This kernel's [`EpilogueIo`]: packed bf16 words.
pub(crate) struct Bf16Io;

impl EpilogueIo for Bf16Io {
    const ELEM: u32 = 2;
    const Z: u32 = 2048;
    #[inline(always)]
    unsafe fn pair(addr: u32) -> [f32; 2] {
        // SAFETY: the caller's address is inside the bank.
        let (a, b) = unpack(unsafe { ld_shared_u32(addr) });
        [a, b]
    }
    #[inline(always)]
    unsafe fn store(out: u64, at: usize, v: [f32; 2]) {
        // SAFETY: the caller's index is inside the output (4-byte aligned: `at` is even).
        unsafe { st_global_u32(out + 2 * at as u64, pack_bf16x2(v[0], v[1])) };
    }
    #[inline(always)]
    fn gated(y: f32, x: f32) -> f32 {
        // One `MUFU` where `silu_rcp` takes two, on the chain that bounds this phase; its error
        // is far below the bf16 output's rounding.
        mul_silu_tanh_approx(y, x)
    }
}

/// Phase M2, second part: D, norm, gate, contraction (or prereduce) and the output stores, the
/// staged rows at `bank_at` and the norm's partial sums at `norm_at` (shared addresses) read and
/// written through `Io`. `!FULL` (the short-call kernel only) skips the 16-row tiles past the
/// chunk's times.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn phase_epilogue<Io: EpilogueIo, const FULL: bool>(
    prm: &ForwardParams,
    bk: &Blk,
    c0: u32,
    len: u32,
    bank_at: u32,
    norm_at: u32,
    y: &mut [[[f32; 4]; 2]; 4],
    cp: &ColumnParams,
) {
    let (w, lane) = (bk.warp, bk.lane);
    let (g, t4) = (lane / 4, lane % 4);
    let r = g % 4;
    let row_bytes = P * Io::ELEM;
    let has_z = prm.z != 0;
    let norm = prm.mode == output_mode::FUSED_NORM;
    let past = |mt: usize| !FULL && mt >= tiles::<FULL>(len) as usize;
    // SAFETY (whole body): bank rows < len (written by the chunk's `cp.async` group), tile and
    // NORM addresses inside the layout; output indices of times < len inside the output tensor.
    unsafe {
        // D·x (every time of the tiles it runs: the bank's rows past `len` are zero-filled).
        for (mt, ym) in y.iter_mut().enumerate() {
            if past(mt) {
                continue;
            }
            for half in 0..2u32 {
                let i = 4 * mt as u32 + g / 4 + 2 * half;
                for (j, yj) in ym.iter_mut().enumerate() {
                    let col = 16 * w + 8 * j as u32 + 2 * t4;
                    let [v0, v1] = Io::pair(bank_at + row_bytes * i + Io::ELEM * col);
                    let s = 2 * half as usize;
                    yj[s] += v0 * cp.d_mimo_v[j][0];
                    yj[s + 1] += v1 * cp.d_mimo_v[j][1];
                }
            }
        }
        if norm {
            for (mt, ym) in y.iter().enumerate() {
                if past(mt) {
                    continue;
                }
                for half in 0..2usize {
                    let s = 2 * half;
                    let mut ss = 0.0f32;
                    for yj in ym.iter() {
                        ss += yj[s] * yj[s] + yj[s + 1] * yj[s + 1];
                    }
                    ss += shfl_xor_f32(ss, 1);
                    ss += shfl_xor_f32(ss, 2);
                    if t4 == 0 {
                        let row = 16 * mt as u32 + g + 8 * half as u32;
                        st_shared_f32(norm_at + 4 * (64 * w + row), ss);
                    }
                }
            }
            sync_threads();
            for (mt, ym) in y.iter_mut().enumerate() {
                if past(mt) {
                    continue;
                }
                for half in 0..2usize {
                    let row = 16 * mt as u32 + g + 8 * half as u32;
                    let mut total = 0.0f32;
                    for ww in 0..4u32 {
                        total += ld_shared_f32(norm_at + 4 * (64 * ww + row));
                    }
                    let rstd = rsqrt(total / P as f32 + prm.norm_eps);
                    for (j, yj) in ym.iter_mut().enumerate() {
                        let nw = norm_weights(prm, bk, j);
                        yj[2 * half] *= rstd * nw[0];
                        yj[2 * half + 1] *= rstd * nw[1];
                    }
                }
            }
        }
        // The gate, z read where it is applied (rows past `len` are zero-filled, never stored).
        if has_z {
            for (mt, ym) in y.iter_mut().enumerate() {
                if past(mt) {
                    continue;
                }
                for half in 0..2u32 {
                    let i = 4 * mt as u32 + g / 4 + 2 * half;
                    for (j, yj) in ym.iter_mut().enumerate() {
                        let col = 16 * w + 8 * j as u32 + 2 * t4;
                        let [z0, z1] = Io::pair(bank_at + Io::Z + row_bytes * i + Io::ELEM * col);
                        let s = 2 * half as usize;
                        yj[s] = Io::gated(yj[s], z0 * cp.mimo_z[j][0]);
                        yj[s + 1] = Io::gated(yj[s + 1], z1 * cp.mimo_z[j][1]);
                    }
                }
            }
        }
        let tok0 = bk.b * bk.s_len + c0 as usize;
        if prm.mode == output_mode::PREREDUCE {
            for (mt, ym) in y.iter().enumerate() {
                if past(mt) {
                    continue;
                }
                for half in 0..2u32 {
                    let i = 4 * mt as u32 + g / 4 + 2 * half;
                    if i < len {
                        for (j, yj) in ym.iter().enumerate() {
                            let col = 16 * w + 8 * j as u32 + 2 * t4;
                            let s = 2 * half as usize;
                            let at = (((tok0 + i as usize) * R as usize + r as usize) * bk.heads
                                + bk.h)
                                * P as usize
                                + col as usize;
                            Io::store(prm.out, at, [yj[s], yj[s + 1]]);
                        }
                    }
                }
            }
        } else {
            // Σ_r y_r·mimo_o_r over the four rank lanes (lane bits 2 and 3) as a reduce-scatter:
            // the lane of rank r ends with the sums of row half `r >> 1`, column tile `r & 1`.
            // Lane-dependent choices are selects, never register-array indices (which would put
            // the accumulators in local memory).
            let (half, j) = (r >> 1, r & 1);
            let (upper, odd) = (half == 1, j == 1);
            // The row tiles' outputs are 4 tokens apart: one base index, a multiple added per tile.
            let i0 = g / 4 + 2 * half;
            let col = 16 * w + 8 * j + 2 * t4;
            let at0 = ((tok0 + i0 as usize) * bk.heads + bk.h) * P as usize + col as usize;
            let tile_step = 4 * bk.heads * P as usize;
            for (mt, ym) in y.iter().enumerate() {
                if past(mt) {
                    continue;
                }
                let mut by_j = [[0.0f32; 2]; 2];
                for (jj, yj) in ym.iter().enumerate() {
                    for e in 0..2 {
                        let (lo, hi) = (yj[e] * cp.mimo_o[jj][e], yj[2 + e] * cp.mimo_o[jj][e]);
                        let (keep, send) = if upper { (hi, lo) } else { (lo, hi) };
                        by_j[jj][e] = keep + shfl_xor_f32(send, 8);
                    }
                }
                let mut o = [0.0f32; 2];
                for (e, oe) in o.iter_mut().enumerate() {
                    let (keep, send) = if odd {
                        (by_j[1][e], by_j[0][e])
                    } else {
                        (by_j[0][e], by_j[1][e])
                    };
                    *oe = keep + shfl_xor_f32(send, 4);
                }
                if 4 * mt as u32 + i0 < len {
                    Io::store(prm.out, at0 + mt * tile_step, o);
                }
            }
        }
    }
}

/// Phase M3: `H ← exp(A_last)·H + x_wᵀ·k̂` for the warp's 16 state rows. `!FULL` (the
/// short-call kernel only) sums over the 16-row tiles holding the chunk's times alone (phase R
/// zeroed k̂ and x_w past them). `WG` (compute capability 9.0): the block's four warps as one
/// warpgroup, `wgmma` with both operands read from the swizzled tiles (x_w M-major, k̂ N-major)
/// and the state as its accumulators (their lane map is the `mma` one).
#[inline(always)]
unsafe fn phase_state<const FULL: bool, const WG: bool>(
    bk: &Blk,
    len: u32,
    bank: u32,
    state: &mut [[f32; 4]; 16],
) {
    let (w, lane) = (bk.warp, bk.lane);
    // SAFETY (whole body): tile addresses inside the XW and K regions, len − 1 < 16.
    unsafe {
        let decay = ld_shared_f32(scal(bk, bank, S_EXPA, len - 1));
        for st in state.iter_mut() {
            for v in st.iter_mut() {
                *v *= decay;
            }
        }
        if WG {
            // Fresh tile addresses, as for the scores in `phase_scores_inter`.
            let (xw_at, k_at) = (
                fresh_u32(bk.base + L::XW),
                fresh_u32(bk.base + L::K_SWIZZLED),
            );
            wgmma::fence();
            for kk in 0..tiles::<FULL>(len) {
                let a = wgmma::mn_major_desc(xw_at, 64, 16 * kk);
                let b = wgmma::mn_major_desc(k_at, 64, 16 * kk);
                wgmma::mma_m64n128k16_bf16::<true, true>(state, a, b, true);
            }
            wgmma::commit_group();
            wgmma::wait_all_m64n128(state);
            return;
        }
        for kk in 0..tiles::<FULL>(len) {
            let row = 16 * kk + lane % 8 + 8 * (lane / 16);
            let col = 16 * w + 8 * ((lane / 8) % 2);
            let a = ldmatrix_x4_trans(bk.base + L::XW + row * L::X_STRIDE + 2 * col);
            for np in 0..8u32 {
                let row = 16 * kk + lane % 16;
                let col = 16 * np + 8 * (lane / 16);
                let b = ldmatrix_x4_trans(bk.base + L::K + row * L::QK_STRIDE + 2 * col);
                mma_m16n8k16_bf16_f32(&mut state[2 * np as usize], a, [b[0], b[1]]);
                mma_m16n8k16_bf16_f32(&mut state[2 * np as usize + 1], a, [b[2], b[3]]);
            }
        }
    }
}

/// Index of the lane's state element `(tile nt, slot s)` in a row-major (P, N) f32 matrix.
#[inline(always)]
pub(crate) fn state_index(w: u32, lane: u32, nt: usize, s: usize) -> usize {
    let p = 16 * w + lane / 4 + 8 * (s as u32 / 2);
    let n = 8 * nt as u32 + 2 * (lane % 4) + s as u32 % 2;
    (p * N + n) as usize
}

/// The state and θ entering the block's first chunk, shared by both tensor-core kernels: a later
/// segment's from the segment-state slots (hand-off θ as an f32 pair) when `from_slots` (every
/// pass but the segment-state pass, whose segments all start from zero), segment 0's from the
/// caller's initial state when there is one (returning its trapezoidal weights, see
/// [`load_initial_state`]), else zero. Every thread calls it; the caller waits for the copies
/// and syncs before the state is used.
///
/// # Safety
/// The launch contract of the calling kernel.
#[inline(always)]
pub(crate) unsafe fn entering_state<X: Elem, G: Regions>(
    prm: &ForwardParams,
    bk: &Blk,
    (seg, segments): (usize, usize),
    init: bool,
    from_slots: bool,
    state: &mut [[f32; 4]; 16],
) -> [[f32; R as usize]; 2] {
    let tid = bk.tid;
    let mut init_weights = [[0.0f32; R as usize]; 2];
    // SAFETY (whole body): slots and tiles inside the launch's workspaces and shared memory.
    unsafe {
        if from_slots && seg > 0 {
            let slot = (bk.b * bk.heads + bk.h) * (segments - 1) + seg - 1;
            *state = load_state_tile(bk, prm.seg_state, slot * (P * N) as usize);
            if tid < NA {
                let at = 2 * (slot * NA as usize + tid as usize);
                let theta = ldg(prm.seg_theta, at) as f64 + ldg(prm.seg_theta, at + 1) as f64;
                st_shared_f64(bk.base + G::THETA + 8 * tid, theta);
            }
        } else if init {
            init_weights = load_initial_state::<X, G>(prm, bk, state);
        } else if tid < NA {
            st_shared_f64(bk.base + G::THETA + 8 * tid, 0.0);
        }
    }
    init_weights
}

/// The block's state accumulators from the `(P,N)` f32 tile at element `at` of `base`, a pair
/// of columns per 8-byte load (the tile and `base` 8-byte aligned: launch contract).
#[inline(always)]
pub(crate) unsafe fn load_state_tile(bk: &Blk, base: u64, at: usize) -> [[f32; 4]; 16] {
    let mut state = [[0.0f32; 4]; 16];
    for (nt, st) in state.iter_mut().enumerate() {
        for pair in 0..2 {
            let e = at + state_index(bk.warp, bk.lane, nt, 2 * pair);
            // SAFETY: inside the tile (launch contract); `e` is even.
            let [x, y] = unsafe { ld_global_v2_f32(base + 4 * e as u64) };
            st[2 * pair] = x;
            st[2 * pair + 1] = y;
        }
    }
    state
}

/// Stores the state accumulators into the `(P,N)` f32 tile at element `at` of `base` (see
/// [`load_state_tile`]).
#[inline(always)]
pub(crate) unsafe fn store_state_tile(bk: &Blk, base: u64, at: usize, state: &[[f32; 4]; 16]) {
    for (nt, st) in state.iter().enumerate() {
        for pair in 0..2 {
            let e = at + state_index(bk.warp, bk.lane, nt, 2 * pair);
            // SAFETY: inside the tile (launch contract); `e` is even.
            unsafe { st_global_v2_f32(base + 4 * e as u64, [st[2 * pair], st[2 * pair + 1]]) };
        }
    }
}

/// Bytes per row of a warp's staging rows in [`store_state_tile_staged`]: 128 f32 and 32 bytes
/// of padding, so that the 8-byte stores of a half warp (four rows, four column pairs) fall on 32
/// distinct banks.
const STATE_STAGE_STRIDE: u32 = 4 * N + 32;

/// [`store_state_tile`] in 16-byte pieces: each warp stages its 16 state rows in its own
/// `16 × STATE_STAGE_STRIDE` bytes of the q̂ tile (warps 0–1) or the x, x_w and score tiles
/// (warps 2–3), then copies whole rows out. The accumulators are free as soon as their 8-byte
/// shared stores have read them, rather than when the global stores drain (the next unit's state
/// loads into them waited on that), and the global stores are half as many. The caller's
/// contract: no thread reads those tiles until the next barrier (the final k̂ lives in the k̂ tile,
/// which the staging does not touch).
#[inline(always)]
unsafe fn store_state_tile_staged(bk: &Blk, base: u64, at: usize, state: &[[f32; 4]; 16]) {
    let (w, lane) = (bk.warp, bk.lane);
    let stage = if w < 2 {
        bk.base + L::Q + w * 16 * STATE_STAGE_STRIDE
    } else {
        bk.base + L::X + (w - 2) * 16 * STATE_STAGE_STRIDE
    };
    // SAFETY (whole body): the warp's staging rows lie inside the Q tile (warps 0–1) or the X, XW
    // and W tiles (warps 2–3: 2 × 8.5 KB within their 27 KB); `base + at` is the (P,N) f32 tile
    // of the launch contract, 16-byte aligned.
    unsafe {
        let (g, t4) = (lane / 4, lane % 4);
        for (nt, st) in state.iter().enumerate() {
            let col = 8 * nt as u32 + 2 * t4;
            for half in 0..2u32 {
                let s = 2 * half as usize;
                st_shared_v2_f32(
                    stage + (g + 8 * half) * STATE_STAGE_STRIDE + 4 * col,
                    [st[s], st[s + 1]],
                );
            }
        }
        sync_warp();
        for row in 0..16u32 {
            let v = ld_shared_v4_f32(stage + row * STATE_STAGE_STRIDE + 16 * lane);
            let e = at + ((16 * w + row) * N + 4 * lane) as usize;
            st_global_v4_f32(base + 4 * e as u64, v);
        }
    }
}

/// Copies k̂₀ of the caller's initial state (`(R,N)` bf16 of this (b, h), 1 KB) into the score
/// weight region, which is free until the first chunk's weights (one 16-byte `cp.async` for each
/// of the first 64 threads; [`add_initial_trapezoid`] reads it after the first barrier).
#[inline(always)]
unsafe fn stage_initial_k(prm: &ForwardParams, bk: &Blk) {
    // SAFETY: forwarded to the caller; WT holds R·N bf16.
    unsafe { stage_initial_k_at(prm, bk, L::WT) }
}

/// [`stage_initial_k`] into the 1 KB region at offset `region` of the layout.
#[inline(always)]
unsafe fn stage_initial_k_at(prm: &ForwardParams, bk: &Blk, region: u32) {
    if bk.tid < R * N / 8 {
        let (r, chunk) = (bk.tid / 16, bk.tid % 16);
        let src =
            ((bk.b * R as usize + r as usize) * bk.heads + bk.h) * N as usize + 8 * chunk as usize;
        // SAFETY: R·N bf16 fill the 1 KB WT region; `init_k` is 16-byte aligned and each rank's
        // row of N = 128 bf16 is 256 bytes (launch contract).
        unsafe {
            cp_async_cg_16(
                bk.base + region + 16 * bk.tid,
                (prm.init_k + 2 * src as u64) as *const u8,
            )
        };
    }
}

/// Starts the block from the caller's initial state ([`ForwardParams::init_theta`] and the three
/// pointers after it): h₀ into the state accumulators and θ₀ into THETA. Returns the weights
/// `ε₀·v₀[p]·mimo_v_r[p]` of this thread's two state rows, where `ε₀ = Δ₀(1 − σ(trap₀))` is the
/// trapezoidal weight of the token before the first (the chunked keys carry it one token ahead,
/// and no key of this call precedes token 0); [`add_initial_trapezoid`] adds that term.
#[inline(always)]
pub(crate) unsafe fn load_initial_state<X: Elem, G: Regions>(
    prm: &ForwardParams,
    bk: &Blk,
    state: &mut [[f32; 4]; 16],
) -> [[f32; R as usize]; 2] {
    let bh = bk.b * bk.heads + bk.h;
    // SAFETY (whole body): indices inside the initial-state tensors and the (B,H,S) token
    // scalars of the launch contract, and the THETA region.
    unsafe {
        *state = load_state_tile(bk, prm.init_ssm, bh * (P * N) as usize);
        let eps = ldg(prm.dt, bk.row) * sigmoid_rcp(-X::load(prm.trap, bk.row));
        let p0 = 16 * bk.warp + bk.lane / 4;
        let mut u = [[0.0f32; R as usize]; 2];
        for (i, ur) in u.iter_mut().enumerate() {
            let p = (p0 + 8 * i as u32) as usize;
            let v0 = eps * X::load(prm.init_v, bh * P as usize + p);
            for (r, x) in ur.iter_mut().enumerate() {
                *x = v0 * ldg(prm.mimo_v, (bk.h * R as usize + r) * P as usize + p);
            }
        }
        if bk.tid < NA {
            let theta = ldg(prm.init_theta, bh * NA as usize + bk.tid as usize) as f64;
            st_shared_f64(bk.base + G::THETA + 8 * bk.tid, theta);
        }
        u
    }
}

/// The two state rows `p` of this thread's accumulators (see [`state_index`]), whose initial
/// raw v the trapezoidal term weighs.
#[inline(always)]
fn initial_v_rows(bk: &Blk) -> [usize; 2] {
    let p0 = (16 * bk.warp + bk.lane / 4) as usize;
    [p0, p0 + 8]
}

/// Adds the trapezoidal term `Σ_r u_r[p]·k̂₀_r[n]` of the token before the first to the state
/// (`u` from [`load_initial_state`], k̂₀ staged by [`stage_initial_k`]; after the first barrier).
#[inline(always)]
unsafe fn add_initial_trapezoid(bk: &Blk, u: &[[f32; R as usize]; 2], state: &mut [[f32; 4]; 16]) {
    for (nt, st) in state.iter_mut().enumerate() {
        let n = 8 * nt as u32 + 2 * (bk.lane % 4);
        for r in 0..R {
            // SAFETY: inside the WT region, which holds k̂₀ until the first chunk's weights.
            let (k0, k1) = unpack(unsafe { ld_shared_u32(bk.base + L::WT + 2 * (r * N + n)) });
            let r = r as usize;
            st[0] = fma_rn(u[0][r], k0, st[0]);
            st[1] = fma_rn(u[0][r], k1, st[1]);
            st[2] = fma_rn(u[1][r], k0, st[2]);
            st[3] = fma_rn(u[1][r], k1, st[3]);
        }
    }
}

/// Final θ, SSM state, last k̂ and last raw v (the block that ends at S; `bank` is its last
/// chunk's, whose raw v rows are still staged). `WIDE`: k̂ and v in 16-byte pieces (`final_k`
/// and `final_v` 16-byte aligned), the state too when `staged` (through shared memory, see
/// [`store_state_tile_staged`]; `final_ssm` 16-byte aligned), else element by element; θ not at
/// all (the caller writes it, see [`write_final_theta`]).
#[inline(always)]
unsafe fn write_final_states<const WIDE: bool, const WG: bool>(
    prm: &ForwardParams,
    bk: &Blk,
    (last_len, bank): (u32, u32),
    state: &[[f32; 4]; 16],
    staged: bool,
) {
    let bh = bk.b * bk.heads + bk.h;
    // SAFETY (whole body): indices inside the final-state tensors of the launch contract, the
    // THETA region and the k̂ tile.
    unsafe {
        if !WIDE {
            write_final_theta(prm, bk);
        }
        if prm.final_ssm != 0 {
            if WIDE && staged {
                store_state_tile_staged(bk, prm.final_ssm, bh * (P * N) as usize, state);
            } else {
                store_state_tile(bk, prm.final_ssm, bh * (P * N) as usize, state);
            }
        }
        if WIDE {
            if prm.final_k != 0 && bk.tid < R * N / 8 {
                let (r, piece) = (bk.tid / 16, bk.tid % 16);
                let rho = 4 * (last_len - 1) + r;
                let v = ld_shared_v4_f32(if WG {
                    bk.base + L::K_SWIZZLED + swizzle128_offset(64, rho, 8 * piece)
                } else {
                    bk.base + L::K + rho * L::QK_STRIDE + 16 * piece
                });
                let at = ((bk.b * R as usize + r as usize) * bk.heads + bk.h) * N as usize;
                st_global_v4_f32(prm.final_k + 2 * at as u64 + 16 * piece as u64, v);
            }
            let piece = bk.tid.wrapping_sub(R * N / 8);
            if prm.final_v != 0 && piece < P / 8 {
                let row = bk.base + L::BANK + bank * L::BANK_BYTES + (last_len - 1) * 128;
                let v = ld_shared_v4_f32(row + 16 * piece);
                st_global_v4_f32(
                    prm.final_v + 2 * (bh * P as usize) as u64 + 16 * piece as u64,
                    v,
                );
            }
            return;
        }
        if prm.final_k != 0 {
            let mut e = bk.tid;
            while e < R * N {
                let (r, n) = (e / N, e % N);
                let rho = 4 * (last_len - 1) + r;
                let word = ld_shared_u32(if WG {
                    bk.base + L::K_SWIZZLED + swizzle128_offset(64, rho, n & !1)
                } else {
                    bk.base + L::K + rho * L::QK_STRIDE + 4 * (n / 2)
                });
                let (lo, hi) = unpack(word);
                let v = if n % 2 == 0 { lo } else { hi };
                Bf16::store(
                    prm.final_k,
                    ((bk.b * R as usize + r as usize) * bk.heads + bk.h) * N as usize + n as usize,
                    v,
                );
                e += T;
            }
        }
        if prm.final_v != 0 && bk.tid < P {
            let p = bk.tid;
            let row = bk.base + L::BANK + bank * L::BANK_BYTES + (last_len - 1) * 128;
            let (lo, hi) = unpack(ld_shared_u32(row + 4 * (p / 2)));
            Bf16::store(
                prm.final_v,
                bh * P as usize + p as usize,
                if p % 2 == 0 { lo } else { hi },
            );
        }
    }
}

/// The final θ of this block's (b, h) from the THETA region.
#[inline(always)]
unsafe fn write_final_theta(prm: &ForwardParams, bk: &Blk) {
    let bh = bk.b * bk.heads + bk.h;
    // SAFETY: (b, h, angle) inside the final θ of the launch contract; the THETA region.
    unsafe {
        if prm.final_theta != 0 && bk.tid < NA {
            let th = stored_f32(ld_shared_f64(bk.base + L::THETA + 8 * bk.tid));
            stg(prm.final_theta, bh * NA as usize + bk.tid as usize, th);
        }
    }
}

/// Writes this block's segment end state, angle total and decay into hand-off slot `slot` (the
/// segment-state pass; the format of `chunked_forward`'s).
#[inline(always)]
pub(crate) unsafe fn store_segment_end<G: Regions>(
    prm: &ForwardParams,
    bk: &Blk,
    slot: usize,
    decay: f32,
    state: &[[f32; 4]; 16],
) {
    // SAFETY (whole body): slot < (B,H,K−1) slots of the hand-off buffers of the launch contract.
    unsafe {
        store_state_tile(bk, prm.seg_state, slot * (P * N) as usize, state);
        if bk.tid < NA {
            let at = 2 * (slot * NA as usize + bk.tid as usize);
            let (hi, lo) = split_f64(ld_shared_f64(bk.base + G::THETA + 8 * bk.tid));
            stg(prm.seg_theta, at, hi);
            stg(prm.seg_theta, at + 1, lo);
        }
        if bk.tid == 0 {
            stg(prm.seg_decay, slot, decay);
        }
    }
}

/// The checkpoint sweep's per-chunk record, first half: the state entering chunk `chunk` of this
/// (b, h) as bf16 into the q̂ tile (unused by the state pass), for [`copy_checkpoint`] after the
/// next barrier, and (see [`store_checkpoint_theta`]) θ entering it.
#[inline(always)]
unsafe fn store_checkpoint(
    prm: &ForwardParams,
    bk: &Blk,
    chunk: usize,
    theta: f64,
    state: &[[f32; 4]; 16],
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        stage_checkpoint_state(bk, state);
        store_checkpoint_theta(prm, bk, chunk, theta);
    }
}

/// Checkpoint slot of chunk `chunk` of this (b, h), formed where it is used: through an opaque
/// copy of the batch row, so that LLVM does not hoist the row's slot base out of the chunk loop
/// (held there, it made the forward with checkpoints spill).
#[inline(always)]
fn checkpoint_slot(bk: &Blk, chunk: usize) -> usize {
    let b = fresh_u32(bk.b as u32) as usize;
    (b * bk.heads + bk.h) * bk.s_len.div_ceil(C as usize) + chunk
}

/// The state half of [`store_checkpoint`]: the accumulators as bf16 into the q̂ tile.
#[inline(always)]
unsafe fn stage_checkpoint_state(bk: &Blk, state: &[[f32; 4]; 16]) {
    // SAFETY: state rows and columns inside the Q tile.
    unsafe {
        for (nt, st) in state.iter().enumerate() {
            for pair in 0..2 {
                let e = state_index(bk.warp, bk.lane, nt, 2 * pair) as u32;
                let (p, n) = (e / N, e % N);
                let word = pack_bf16x2(st[2 * pair], st[2 * pair + 1]);
                st_shared_u32(bk.base + L::Q + p * L::QK_STRIDE + 2 * n, word);
            }
        }
    }
}

/// The θ half of [`store_checkpoint`]: θ entering chunk `chunk` (`theta`, this lane's angle) as
/// an f32 `(hi, lo)` pair into `(B,H,⌈S/C⌉,Na,2)` at [`ForwardParams::ckpt_theta`].
#[inline(always)]
unsafe fn store_checkpoint_theta(prm: &ForwardParams, bk: &Blk, chunk: usize, theta: f64) {
    let slot = checkpoint_slot(bk, chunk);
    // SAFETY: slot < B·H·⌈S/C⌉ slots of the θ buffer (launch contract).
    unsafe {
        if bk.tid < NA {
            let at = 2 * (slot * NA as usize + bk.tid as usize);
            let (hi, lo) = split_f64(theta);
            stg(prm.ckpt_theta, at, hi);
            stg(prm.ckpt_theta, at + 1, lo);
        }
    }
}

/// The checkpoint record, second half (after a barrier): the bf16 state tile staged in the q̂
/// tile by [`store_checkpoint`] into `(B,H,⌈S/C⌉,P,N)` bf16 at [`ForwardParams::ckpt_state`] in
/// 16-byte pieces (the backward copies it back the same way; as the accumulators' 4-byte words
/// the stores half-filled their sectors).
#[inline(always)]
unsafe fn copy_checkpoint(prm: &ForwardParams, bk: &Blk, chunk: usize) {
    let dst = checkpoint_state_at(prm, bk, chunk);
    // SAFETY: rows < 64 of the Q tile; the slot of the 16-byte aligned state buffer.
    unsafe {
        for j in 0..8u32 {
            copy_checkpoint_piece(bk, dst, bk.tid / 16 + 8 * j, bk.tid % 16);
        }
    }
}

/// Address of chunk `chunk`'s bf16 state checkpoint of this (b, h) in
/// [`ForwardParams::ckpt_state`].
#[inline(always)]
fn checkpoint_state_at(prm: &ForwardParams, bk: &Blk, chunk: usize) -> u64 {
    prm.ckpt_state + 2 * (checkpoint_slot(bk, chunk) * (P * N) as usize) as u64
}

/// 16-byte piece `piece` (of 16) of state row `p` staged in the q̂ tile, to the checkpoint at
/// `dst`.
///
/// # Safety
/// `p < 64`, `piece < 16`; `dst` a 16-byte aligned checkpoint slot.
#[inline(always)]
unsafe fn copy_checkpoint_piece(bk: &Blk, dst: u64, p: u32, piece: u32) {
    // SAFETY: forwarded to the caller.
    unsafe {
        let v = ld_shared_v4_f32(bk.base + L::Q + p * L::QK_STRIDE + 16 * piece);
        st_global_v4_f32(dst + (p * 256 + 16 * piece) as u64, v);
    }
}

/// The forward proper's checkpoint of the state entering chunk `chunk`: each warp stages its
/// own 16 state rows as bf16 in the q̂ tile (free from the chunk's scores to the next chunk's
/// rotation) and, after a warp barrier, copies those rows out in 16-byte pieces (as the sweep
/// does for the whole tile). No block barrier: a warp reads back only what it wrote. Stored from
/// the accumulators directly, the 4-byte pieces of eight rows per instruction cost the forward
/// a third more time at B = 8.
#[inline(always)]
unsafe fn store_checkpoint_warp(
    prm: &ForwardParams,
    bk: &Blk,
    chunk: usize,
    state: &[[f32; 4]; 16],
) {
    let dst = checkpoint_state_at(prm, bk, chunk);
    // SAFETY: the warp's rows of the Q tile; the slot of the 16-byte aligned state buffer.
    unsafe {
        stage_checkpoint_state(bk, state);
        sync_warp();
        for j in 0..8u32 {
            copy_checkpoint_piece(bk, dst, 16 * bk.warp + bk.lane / 16 + 2 * j, bk.lane % 16);
        }
    }
}

/// The forward body (see the module docs and launch contract). `STATES_ONLY = false` is the
/// forward proper: it starts from the true state of its segment (zero, or hand-off slot s−1
/// after the combine pass) and writes the outputs, and the last segment the final states.
/// `STATES_ONLY = true` is the segment-state pass: from a zero state and zero angles it forms only
/// k̂, x_w and the state, and writes the segment's end state, angle total and decay into slot s;
/// the last segment's block has nothing to do. `SHORT` makes every chunk take the short-chunk
/// path, state pass and epilogue included (see [`tiles`]): the kernel for calls shorter than C.
/// `CKPT` writes the state and θ entering every chunk for the backward: with `STATES_ONLY` (one
/// segment) it is the backward's checkpoint sweep, the state pass over the whole sequence from
/// zero (see [`backward_ckpt_mma_bf16_r4_n128_p64_na32_c16`]); without, the forward proper writes
/// them beside its outputs (see [`forward_ckpt_mma_bf16_r4_n128_p64_na32_c16`]).
///
/// # Safety
/// The module's launch contract.
#[inline(always)]
pub unsafe fn chunked_forward_mma<
    const STATES_ONLY: bool,
    const SHORT: bool,
    const CKPT: bool,
    const WG: bool,
>(
    prm: &ForwardParams,
) {
    let (heads, groups) = (prm.heads as usize, prm.groups as usize);
    let h = block_x() as usize;
    let segments = prm.segments.max(1) as usize;
    let y = block_y() as usize;
    let b = y / segments;
    let seg = y - b * segments;
    if STATES_ONLY && !CKPT && seg + 1 >= segments {
        return;
    }
    let (t_begin, t_end) = if segments > 1 {
        let span = prm.seg_chunks * C;
        (
            (seg as u32 * span).min(prm.seq_len),
            ((seg as u32 + 1) * span).min(prm.seq_len),
        )
    } else {
        (0, prm.seq_len)
    };
    let tid = thread_x();
    let bk = Blk {
        base: layout_base::<WG>(smem_base()),
        tid,
        warp: tid / 32,
        lane: tid % 32,
        b,
        h,
        g: h / (heads / groups),
        s_len: prm.seq_len as usize,
        heads,
        groups,
        row: (b * heads + h) * prm.seq_len as usize,
    };
    let half_split = prm.rotation == rotation::HALF_SPLIT;
    // SAFETY (whole body): the launch contract; phases are separated by block barriers.
    unsafe {
        let balanced = half_split && !STATES_ONLY;
        let rp = rank_params(prm, &bk, balanced);
        let cs_at = cs_source::<Bf16Regions>(&bk, half_split, balanced);
        if tid == 0 {
            st_shared_v4_f32(bk.base + L::IDENT, [1.0, 0.0, 1.0, 0.0]);
        }
        let cp = column_params(prm, &bk);
        let mut state = [[0.0f32; 4]; 16];
        if t_begin < t_end {
            stage_chunk::<STATES_ONLY>(prm, &bk, t_begin, (t_end - t_begin).min(C), 0);
        }
        // Both passes start segment 0 from the initial state when there is one: the
        // segment-state pass's slot 0 then holds the true end state of segment 0 and its
        // absolute angle, which the combine pass takes as they are.
        let init = seg == 0 && prm.init_ssm != 0;
        if init {
            stage_initial_k(prm, &bk);
        }
        commit_group();
        let mut pf = prefetch::<Bf16>(prm, &bk, t_begin, (t_end - t_begin).min(C));
        // The checkpoint sweep (states only, with checkpoints) starts a later segment from the
        // combined hand-off like the forward proper.
        let init_weights = entering_state::<Bf16, Bf16Regions>(
            prm,
            &bk,
            (seg, segments),
            init,
            !STATES_ONLY || CKPT,
            &mut state,
        );
        wait_group::<0>();
        sync_threads();
        if init {
            add_initial_trapezoid(&bk, &init_weights, &mut state);
        }

        if CKPT && !STATES_ONLY && t_begin < t_end {
            store_checkpoint_warp(prm, &bk, (t_begin / C) as usize, &state);
        }

        // Phase S1 of chunk c+1 runs at the end of chunk c, beside the state pass, so its f64
        // work fills the slots the tensor-core phase leaves idle and saves a barrier.
        let mut s1 = phase_increments::<Bf16Regions>(&bk, (t_end - t_begin).min(C), &pf, 0);
        sync_threads();
        let mut c0 = t_begin;
        let mut last_len = 1u32;
        let mut bank = 0u32;
        let mut decay = 1.0f32;
        while c0 < t_end {
            let len = (t_end - c0).min(C);
            last_len = len;
            if CKPT && STATES_ONLY {
                store_checkpoint(prm, &bk, (c0 / C) as usize, s1.0, &state);
            }
            if CKPT && !STATES_ONLY {
                store_checkpoint_theta(prm, &bk, (c0 / C) as usize, s1.0);
            }
            phase_angles_weights::<Bf16Regions, STATES_ONLY>(&bk, len, s1.0, s1.1, bank);
            sync_threads();
            if CKPT && STATES_ONLY {
                copy_checkpoint(prm, &bk, (c0 / C) as usize);
            }
            let next = c0 + C;
            if next < t_end {
                pf = prefetch::<Bf16>(prm, &bk, next, (t_end - next).min(C));
            }
            let full = (len == C) & !SHORT;
            match (half_split, full) {
                (true, true) => {
                    phase_rotate::<STATES_ONLY, true, true, WG>(&bk, len, bank, &rp, cs_at)
                }
                (true, false) => {
                    phase_rotate::<STATES_ONLY, true, false, WG>(&bk, len, bank, &rp, cs_at)
                }
                (false, true) => {
                    phase_rotate::<STATES_ONLY, false, true, WG>(&bk, len, bank, &rp, cs_at)
                }
                (false, false) => {
                    phase_rotate::<STATES_ONLY, false, false, WG>(&bk, len, bank, &rp, cs_at)
                }
            }
            sync_threads();
            if next < t_end {
                stage_chunk::<STATES_ONLY>(prm, &bk, next, (t_end - next).min(C), bank ^ 1);
            }
            commit_group();
            if STATES_ONLY {
                decay *= ld_shared_f32(scal(&bk, bank, S_EXPA, len - 1));
            } else {
                let mut y = if full {
                    phase_scores_inter::<true, false, WG>(&bk, len, bank, &state)
                } else {
                    phase_scores_inter::<false, SHORT, WG>(&bk, len, bank, &state)
                };
                sync_threads();
                if full {
                    phase_intra::<true>(&bk, len, &mut y);
                } else {
                    phase_intra::<false>(&bk, len, &mut y);
                }
                let bank_at = bk.base + L::BANK + bank * L::BANK_BYTES;
                let norm_at = bk.base + L::NORM;
                if SHORT {
                    phase_epilogue::<Bf16Io, false>(
                        prm, &bk, c0, len, bank_at, norm_at, &mut y, &cp,
                    );
                } else {
                    phase_epilogue::<Bf16Io, true>(
                        prm, &bk, c0, len, bank_at, norm_at, &mut y, &cp,
                    );
                }
            }
            if SHORT {
                phase_state::<false, WG>(&bk, len, bank, &mut state);
            } else {
                phase_state::<true, WG>(&bk, len, bank, &mut state);
            }
            if next < t_end {
                s1 = phase_increments::<Bf16Regions>(&bk, (t_end - next).min(C), &pf, bank ^ 1);
                if CKPT && !STATES_ONLY {
                    store_checkpoint_warp(prm, &bk, (next / C) as usize, &state);
                }
            }
            wait_group::<0>();
            sync_threads();
            c0 = next;
            bank ^= 1;
        }
        if STATES_ONLY {
            if !CKPT {
                let slot = (b * heads + h) * (segments - 1) + seg;
                store_segment_end::<Bf16Regions>(prm, &bk, slot, decay, &state);
            }
        } else if t_end == prm.seq_len && t_begin < t_end {
            // The shared-memory base re-derived here rather than kept alive through the loop
            // (ptxas spills that copy); in the `wgmma` kernel, whose accumulators want contiguous
            // registers, the block's indices too.
            let bk = if WG {
                let h = fresh_u32(block_x()) as usize;
                let b = fresh_u32(block_y()) as usize / segments;
                Blk {
                    base: layout_base::<WG>(smem_base_fresh()),
                    b,
                    h,
                    g: h / (heads / groups),
                    row: (b * heads + h) * prm.seq_len as usize,
                    ..bk
                }
            } else {
                Blk {
                    base: layout_base::<WG>(smem_base_fresh()),
                    ..bk
                }
            };
            write_final_states::<false, WG>(prm, &bk, (last_len, bank ^ 1), &state, false);
        }
    }
}

/// Issues the `cp.async` copies of the angle inputs of the unit of `bk` (a call of `len` < C
/// tokens from the initial state): its angle logits into [`L::LOGITS`] and Δ into [`L::DTS`]
/// (zero past `len`, as [`prefetch`] leaves them), θ₀ into [`L::THETA0`].
#[inline(always)]
unsafe fn stage_unit_angles(prm: &ForwardParams, bk: &Blk, len: u32) {
    let (i, piece) = (bk.tid / 8, bk.tid % 8);
    let t = if i < len { i as usize } else { 0 };
    let size = |live: bool| if live { 16 } else { 0 };
    let bh = bk.b * bk.heads + bk.h;
    // SAFETY (whole body): sources inside the (B,S,H,Na) logits, (B,H,S) Δ and (B,H,Na) θ₀
    // (token 0 for the zero-filled times; the logit rows and θ₀ rows of Na = 32 f32 are 128
    // bytes, 16-byte aligned with their tensors, launch contract); destinations inside LOGITS,
    // DTS and THETA0.
    unsafe {
        let logits = ((bk.b * bk.s_len + t) * bk.heads + bk.h) * NA as usize + 4 * piece as usize;
        cp_async_cg_16_zfill(
            bk.base + L::LOGITS + 16 * bk.tid,
            (prm.angles + 4 * logits as u64) as *const u8,
            size(i < len),
        );
        if bk.tid < C {
            let t = if bk.tid < len { bk.tid as usize } else { 0 };
            cp_async_ca_4_zfill(
                bk.base + L::DTS + 4 * bk.tid,
                (prm.dt + 4 * (bk.row + t) as u64) as *const u8,
                if bk.tid < len { 4 } else { 0 },
            );
        }
        if bk.tid < NA / 4 {
            let at = bh * NA as usize + 4 * bk.tid as usize;
            cp_async_cg_16(
                bk.base + L::THETA0 + 16 * bk.tid,
                (prm.init_theta + 4 * at as u64) as *const u8,
            );
        }
    }
}

/// The unit's [`Prefetch`] from its token scalars (registers) and its staged angle logits and Δ
/// (see [`stage_unit_angles`]), and the carried angle θ₀ of the lane's angle.
#[inline(always)]
unsafe fn staged_unit_inputs(bk: &Blk, scalars: [f32; 3]) -> (Prefetch, f64) {
    let mut pf = Prefetch {
        scalars,
        logits: [0.0; 4],
        dts: [0.0; 4],
    };
    // SAFETY: times < 16 and angles < 32 inside LOGITS, DTS and THETA0.
    unsafe {
        for u in 0..4u32 {
            let i = 4 * bk.warp + u;
            pf.logits[u as usize] = ld_shared_f32(bk.base + L::LOGITS + 4 * (32 * i + bk.lane));
            pf.dts[u as usize] = ld_shared_f32(bk.base + L::DTS + 4 * i);
        }
        (pf, ld_shared_f32(bk.base + L::THETA0 + 4 * bk.lane) as f64)
    }
}

/// Copies the initial raw v `(P)` bf16 of the unit of `bk` into [`L::V0`] (threads 64–71, one
/// 16-byte `cp.async` each).
#[inline(always)]
unsafe fn stage_initial_v(prm: &ForwardParams, bk: &Blk) {
    let piece = bk.tid.wrapping_sub(R * N / 8);
    if piece < P / 8 {
        let src = (bk.b * bk.heads + bk.h) * P as usize + 8 * piece as usize;
        // SAFETY: P bf16 fill the V0 region; `init_v` is 16-byte aligned (this kernel's launch
        // contract) and each (b, h) row of P = 64 bf16 is 128 bytes.
        unsafe {
            cp_async_cg_16(
                bk.base + L::V0 + 16 * piece,
                (prm.init_v + 2 * src as u64) as *const u8,
            )
        };
    }
}

/// Adds the trapezoidal term of the token before the first (see [`add_initial_trapezoid`]) of
/// the unit whose k̂₀, v₀ and ε₀ sit in [`L::K0`], [`L::V0`] and [`L::EPS0`] as one tensor-core
/// k-step per state tile: A holds the weights `ε₀·v₀[p]·mimo_v_r[p]` (rows p of the warp, k = r;
/// k ≥ R zero), B holds k̂₀ (k = r, n), both rounded to bf16 like the state pass's operands.
/// B comes through `ldmatrix .trans` with the rows k ≥ R pointed at [`L::ZERO`]. 16 `mma` in
/// place of 256 FMA and 64 shared loads per thread.
#[inline(always)]
unsafe fn add_staged_trapezoid_mma(bk: &Blk, mimo_v: &[[f32; 2]; 2], state: &mut [[f32; 4]; 16]) {
    let (lane, t4) = (bk.lane, bk.lane % 4);
    // SAFETY (whole body): rows < P inside V0, EPS0, k̂₀ rows < R inside K0 and the zero row
    // (the caller's contract: all written before a barrier).
    unsafe {
        let a = if t4 < R / 2 {
            let eps = ld_shared_f32(bk.base + L::EPS0);
            let rows = initial_v_rows(bk);
            let v0 = rows.map(|p| {
                let (lo, hi) = unpack(ld_shared_u32(bk.base + L::V0 + 4 * (p as u32 / 2)));
                if p % 2 == 0 {
                    lo
                } else {
                    hi
                }
            });
            let weight = |i: usize, e: usize| eps * v0[i] * mimo_v[i][e];
            [
                pack_bf16x2(weight(0, 0), weight(0, 1)),
                pack_bf16x2(weight(1, 0), weight(1, 1)),
                0,
                0,
            ]
        } else {
            [0; 4]
        };
        let (k, j) = (lane % 8, lane / 8);
        for quad in 0..4u32 {
            let row = if k < R {
                bk.base + L::K0 + k * 2 * N + 16 * (4 * quad + j)
            } else {
                bk.base + L::ZERO
            };
            let b = ldmatrix_x4_trans(row);
            for (jj, &bj) in b.iter().enumerate() {
                mma_m16n8k16_bf16_f32(&mut state[(4 * quad) as usize + jj], a, [bj, 0]);
            }
        }
    }
}

/// The `mimo_v_r[p]` factors of this thread's A elements in [`add_staged_trapezoid_mma`] (rows
/// `p` of [`initial_v_rows`], ranks `r = 2(lane mod 4) + e`; zero on the lanes whose A elements
/// are the zero ranks k ≥ R): the head's, the same for every unit, loaded once per block rather
/// than at each unit's trapezoid (where the loads' latency was waited out).
#[inline(always)]
unsafe fn trapezoid_mimo_v(prm: &ForwardParams, bk: &Blk) -> [[f32; 2]; 2] {
    let t4 = bk.lane % 4;
    let mut mv = [[0.0f32; 2]; 2];
    if t4 < R / 2 {
        let rows = initial_v_rows(bk);
        for (i, row) in mv.iter_mut().enumerate() {
            for (e, x) in row.iter_mut().enumerate() {
                let r = 2 * t4 as usize + e;
                // SAFETY: (h, r, p) inside the (H,R,P) mimo_v of the launch contract.
                *x = unsafe { ldg(prm.mimo_v, (bk.h * R as usize + r) * P as usize + rows[i]) };
            }
        }
    }
    mv
}

/// The batch-walking short-call forward: block `(h, y)` runs the units `(b, h)` for
/// `b = y, y + unit_stride, …` in turn, each a call of `S < C` tokens from its initial state
/// (a decode step of a few tokens, `init_*` set, one segment), as
/// [`chunked_forward_mma`]`::<false, true, false>` runs one. A unit's loads are issued during
/// the previous unit: its raw rows and k̂₀ by `cp.async` (the raw staging area is free from the
/// rotation on, its v and z go to the other bank, k̂₀ and v₀ to [`L::K0`] and [`L::V0`] after
/// the scores), its angle logits, Δ and θ₀ by `cp.async` into the CS region (free from the
/// rotation to the next angle phase) and [`L::THETA0`], its token scalars into registers before
/// the state pass, its state into the accumulators right after the previous
/// unit's final states are stored; the state is first needed by the trapezoidal term after the
/// rotation, so its latency overlaps the unit's scalar, angle and rotation phases, and the
/// previous unit's final-state stores drain behind them. One block per (b, h) instead would
/// wait out those loads and stores at every block's start and end with nothing to hide them
/// (about 40% of a block's life at batch 256).
///
/// # Safety
/// The module's launch contract with grid `(H, unit_stride)`, `unit_stride ≤ B`, `S < C`, one
/// segment, the `init_*` pointers set (the initial and final states may be the same buffers;
/// `init_v`, `init_theta`, the angle logits, `final_ssm`, `final_k` and `final_v` 16-byte
/// aligned) and dynamic shared memory [`L::UNITS_BYTES`].
#[inline(always)]
pub unsafe fn chunked_forward_mma_units(prm: &ForwardParams) {
    let (heads, groups) = (prm.heads as usize, prm.groups as usize);
    let (batch, s_len) = (prm.batch as usize, prm.seq_len as usize);
    let stride = prm.unit_stride.max(1) as usize;
    let len = prm.seq_len;
    let h = block_x() as usize;
    let tid = thread_x();
    let row_of = |b: usize| (b * heads + h) * s_len;
    let b0 = block_y() as usize;
    let mut bk = Blk {
        base: smem_base(),
        tid,
        warp: tid / 32,
        lane: tid % 32,
        b: b0,
        h,
        g: h / (heads / groups),
        s_len,
        heads,
        groups,
        row: row_of(b0),
    };
    if b0 >= batch {
        return;
    }
    let half_split = prm.rotation == rotation::HALF_SPLIT;
    let state_at = |bk: &Blk| (bk.b * heads + h) * (P * N) as usize;
    // SAFETY (whole body): the launch contract; phases are separated by block barriers, and
    // each region a unit's loads fill is free when they are issued (see the docs above).
    unsafe {
        let rp = rank_params(prm, &bk, half_split);
        let cs_at = cs_source::<Bf16Regions>(&bk, half_split, half_split);
        if tid == 0 {
            st_shared_v4_f32(bk.base + L::ZERO, [0.0; 4]);
        }
        let cp = column_params(prm, &bk);
        let trap_mimo_v = trapezoid_mimo_v(prm, &bk);
        stage_chunk::<false>(prm, &bk, 0, len, 0);
        stage_unit_angles(prm, &bk, len);
        stage_initial_k_at(prm, &bk, L::K0);
        stage_initial_v(prm, &bk);
        commit_group();
        let mut scalars = token_scalar_inputs(prm, &bk, len);
        let mut state = load_state_tile(&bk, prm.init_ssm, state_at(&bk));
        wait_group::<0>();
        sync_threads();
        let s1 = unit_increments(&bk, len, scalars, 0);
        sync_threads();
        phase_angles_weights::<Bf16Regions, false>(&bk, len, s1.0, s1.1, 0);
        let mut bank = 0u32;
        loop {
            // Re-derived each unit: the lane addresses formed from a base held through the loop
            // would be hoisted out of it and held in registers (ptxas then spills).
            bk.base = smem_base_fresh();
            bk.tid = fresh_u32(tid);
            bk.warp = bk.tid / 32;
            bk.lane = bk.tid % 32;
            sync_threads();
            if half_split {
                phase_rotate::<false, true, false, false>(&bk, len, bank, &rp, cs_at);
            } else {
                phase_rotate::<false, false, false, false>(&bk, len, bank, &rp, cs_at);
            }
            sync_threads();
            let next = Blk {
                b: bk.b + stride,
                row: row_of(bk.b + stride),
                ..bk
            };
            let has_next = next.b < batch;
            // Two groups: the next unit's angle inputs, waited for before the scores' barrier
            // (its increments run in this unit's epilogue), then its rows.
            if has_next {
                stage_unit_angles(prm, &next, len);
            }
            commit_group();
            if has_next {
                stage_chunk::<false>(prm, &next, 0, len, bank ^ 1);
            }
            commit_group();
            if has_next {
                scalars = token_scalar_inputs(prm, &next, len);
            }
            add_staged_trapezoid_mma(&bk, &trap_mimo_v, &mut state);
            let mut y = phase_scores_inter::<false, true, false>(&bk, len, bank, &state);
            wait_group::<1>();
            sync_threads();
            if has_next {
                stage_initial_k_at(prm, &next, L::K0);
                stage_initial_v(prm, &next);
            }
            commit_group();
            phase_intra::<false>(&bk, len, &mut y);
            let bank_at = bk.base + L::BANK + bank * L::BANK_BYTES;
            phase_epilogue::<Bf16Io, false>(
                prm,
                &bk,
                0,
                len,
                bank_at,
                bk.base + L::NORM,
                &mut y,
                &cp,
            );
            // The next unit's phase S1 beside this unit's state pass (as the multi-chunk kernel
            // runs the next chunk's): its TOT and scalar bank are free, its inputs arrived.
            let s1 = if has_next {
                unit_increments(&next, len, scalars, bank ^ 1)
            } else {
                (0.0, [0.0; 4])
            };
            phase_state::<false, false>(&bk, len, bank, &mut state);
            // θ before the barrier: the next unit's angle phase, right after this unit's final
            // states with no barrier between them, overwrites the THETA region.
            write_final_theta(prm, &bk);
            wait_group::<0>();
            sync_threads();
            // Staged when the next unit's state loads follow (they reuse the accumulators); a
            // block's last unit stores straight from them (batch 1: 10.6 against 11.0 µs).
            write_final_states::<true, false>(prm, &bk, (len, bank), &state, has_next);
            if !has_next {
                break;
            }
            state = load_state_tile(&next, prm.init_ssm, state_at(&next));
            bk = next;
            bank ^= 1;
            // Its inputs (TOT, the scalar bank) were formed before the barrier above; the
            // regions it writes (CS, WT, THETA) are no longer read by this unit.
            phase_angles_weights::<Bf16Regions, false>(&bk, len, s1.0, s1.1, bank);
        }
    }
}

/// Phase S1 of the batch-walking kernel's unit of `bk` (see [`phase_increments`]) from its token
/// scalars and its staged angle inputs, and its `ε₀` into [`L::EPS0`] (warp 0's lane 0 holds
/// token 0's Δ and trap logit; formed as `load_initial_state` forms it).
#[inline(always)]
unsafe fn unit_increments(bk: &Blk, len: u32, scalars: UnitScalars, bank: u32) -> (f64, [f64; 4]) {
    // SAFETY: the staged inputs arrived before a barrier (the caller's contract); EPS0 is free.
    unsafe {
        let scalars = scalars.widen();
        let (pf, theta0) = staged_unit_inputs(bk, scalars);
        let s1 = phase_increments_from::<Bf16Regions>(bk, len, &pf, bank, theta0);
        if bk.tid == 0 {
            let [_, dt0, trap0] = scalars;
            st_shared_f32(bk.base + L::EPS0, dt0 * sigmoid_rcp(-trap0));
        }
        s1
    }
}

/// Tensor-core forward entry point for bf16, R = 4, N = 128, P = 64, Na = 32, C = 16 (see the
/// module's launch contract).
///
/// # Safety
/// The module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_mma_bf16_r4_n128_p64_na32_c16(params: ForwardParams) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<false, false, false, false>(&params) }
}

/// [`forward_mma_bf16_r4_n128_p64_na32_c16`] with the score and state products on `wgmma`
/// (compute capability 9.0 only: elsewhere its `wgmma` lines are comments).
///
/// # Safety
/// The module's launch contract, on a device of compute capability 9.0.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_wg_bf16_r4_n128_p64_na32_c16(params: ForwardParams) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<false, false, false, true>(&params) }
}

/// Tensor-core forward entry point for calls whose chunks are all shorter than C (S < 16: a
/// decode call of a few tokens), bf16, R = 4, N = 128, P = 64, Na = 32, C = 16: the state pass and
/// the epilogue, too, skip the 16-row tiles past the chunk's times (see [`tiles`]). Correct for
/// any call; a separate entry point so that full chunks keep their code (see [`tiles`]).
///
/// # Safety
/// The module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_mma_short_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<false, true, false, false>(&params) }
}

/// The batch-walking short-call forward (see [`chunked_forward_mma_units`]), bf16, R = 4,
/// N = 128, P = 64, Na = 32, C = 16: a decode call of fewer than C tokens from its state (with
/// one wave of blocks at any batch; at a stride of B each block runs one unit).
///
/// # Safety
/// The launch contract of [`chunked_forward_mma_units`].
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_mma_units_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    crate::arch::grid_dependency::dependent_launch_prologue();
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma_units(&params) }
}

/// Segment-state pass of the split tensor-core forward, bf16, R = 4, N = 128, P = 64, Na = 32,
/// C = 16 (see [`chunked_forward_mma`] and the module's launch contract).
///
/// # Safety
/// The module's launch contract.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn segment_state_mma_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<true, false, false, false>(&params) }
}

/// Checkpoint sweep of the tensor-core backward (`backward_mma`), bf16, R = 4, N = 128, P = 64,
/// Na = 32, C = 16: the state pass (no outputs, zero initial state) writing, for every chunk, the
/// state entering it and θ entering it (see [`store_checkpoint`]; `ckpt_state` and `ckpt_theta`
/// are those two buffers). Whole (`segments = 1`, grid `(H, B)`) or split like the forward
/// (grid `(H, B·K)`): each segment then starts from the combined hand-off slots that
/// [`segment_state_mma_bf16_r4_n128_p64_na32_c16`] and the combine pass wrote. Otherwise the
/// module's launch contract.
///
/// # Safety
/// The module's launch contract, with the two checkpoint buffers above and, split, the combined
/// hand-off slots; `init_*` all 0.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn backward_ckpt_mma_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<true, false, true, false>(&params) }
}

/// [`forward_mma_bf16_r4_n128_p64_na32_c16`] that also writes the backward's checkpoints (the
/// state and θ entering every chunk, as [`backward_ckpt_mma_bf16_r4_n128_p64_na32_c16`] does) to
/// `ckpt_state` / `ckpt_theta`, so that a training step's backward needs no checkpoint sweep.
/// Whole or split (each segment writes the checkpoints of its chunks, from its true entering
/// state); no initial state.
///
/// # Safety
/// The module's launch contract, with the two checkpoint buffers above (16-byte aligned state)
/// and `init_*` all 0.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_ckpt_mma_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<false, false, true, false>(&params) }
}

/// [`segment_state_mma_bf16_r4_n128_p64_na32_c16`] with the state pass on `wgmma` (compute
/// capability 9.0 only).
///
/// # Safety
/// As for that kernel, on a device of compute capability 9.0.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn segment_state_wg_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<true, false, false, true>(&params) }
}

/// [`backward_ckpt_mma_bf16_r4_n128_p64_na32_c16`] with the state pass on `wgmma` (compute
/// capability 9.0 only).
///
/// # Safety
/// As for that kernel, on a device of compute capability 9.0.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn backward_ckpt_wg_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    // SAFETY: forwarded launch contract.
    unsafe { chunked_forward_mma::<true, false, true, true>(&params) }
}
