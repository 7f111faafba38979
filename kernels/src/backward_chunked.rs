//! Mamba-3 MIMO backward by chunks (spec §5 on the chunked form of §2.2): one block per
//! (head, batch row) walks the sequence's chunks from the last to the first, carrying the adjoint
//! of the chunk state instead of a per-token adjoint.
//!
//! A chunk of C tokens is M = C·R rows `i = t·R + r` (q̂, k̂: M×N; x, δ: M×P). With `A_t` the
//! chunk-local cumulative log decay, `E(t, s) = exp(A_t − A_s)`, the key scale
//! `c_s = γ_s + ε_{s+1}` and the weights `W(t, s) = E(t, s)·c_s` (s < t), `W(t, t) = γ_t`, the
//! forward of a chunk entering with state `H̃` (P×N, the carried state of spec §2.2) is
//!
//! * `y_i = e^{A_t}·H̃ q̂_i + Σ_j W(t_i, t_j)(q̂_i·k̂_j) x_j + D x_i`,
//! * `H̃' = e^{A_e}·H̃ + Σ_j E(e, t_j) c_{t_j} x_j k̂_jᵀ` (e the chunk's last token),
//!
//! so with `G` = ∂L/∂H̃' carried from the chunk after, `S = Q̂K̂ᵀ` and `Dₛ = ΔXᵀ` (δ = ∂L/∂y):
//!
//! * `∂Q̂ = diag(e^{A})·ΔH̃ + (W ⊙ Dₛ)K̂`,
//! * `∂K̂ = (W ⊙ Dₛ)ᵀQ̂ + diag(c E(e,·))·XG`,
//! * `∂X = (W ⊙ S)ᵀΔ + diag(c E(e,·))·K̂Gᵀ + D·Δ`,
//! * `∂H̃ = e^{A_e}·G + Σ_i e^{A_{t_i}} δ_i q̂_iᵀ` (the adjoint handed to the chunk before),
//! * the scalars from the token-pair sums `m(t, s) = Σ_{r,r'} S ⊙ Dₛ` and the state terms
//!   `sp(s) = Σ_r x_{s,r}ᵀ G k̂_{s,r}`: `∂c_s`, `∂γ_t`, `∂A_t` (then `∂a` by the reverse running
//!   sum inside the chunk, `∂ε_{s+1} = ∂c_s` across the chunk boundary).
//!
//! Passes of [`backward_chunked`]:
//! 1. **forward sweep** over the chunks ([`forward_sweep`]): θ (the angle increments of every
//!    (token, angle) in parallel, f64 running sums by one thread per angle; cos/sin to the `cs`
//!    workspace) and the carried state `H̃` entering every chunk (the `ckpt` workspace, one slot
//!    per chunk; slot 0 unused);
//! 2. **reverse sweep**, chunk by chunk from the last, thirteen barrier-separated phases (numbered
//!    in the body): staging (q̂, k̂, x, H̃, the token scalars and pair tables), scores and inter
//!    outputs, the outputs y, the output-stage backward (δ, the mimo_o / mimo_z / norm / D
//!    partials), ∂z, `Dₛ`, the pair sums m, the weighting of `Dₛ` and the intra-chunk scalar
//!    parts, ∂Q̂, ∂K̂ and ∂X, the adjoint update with the inverse rotation and ∂v, the bias /
//!    mimo_v partials with the reverse running sum of ∂θ inside the chunk and the per-token ∂c,
//!    ∂A, ∂γ, and the chain rule to ∂a, ∂Δ, ∂trap with the running sum handed to the chunk
//!    before, formed from the state entering the chunk and its adjoint ([`boundary_dtheta`])
//!    rather than carried (carried, the per-token terms' roundings added up over S). The next
//!    chunk's inputs are prefetched into L2 while the current one runs.
//!
//! Products work on f32 operands in shared memory: for bf16 activations on the tensor cores
//! ([`crate::tile_mma`]: those that recompute the outputs y with each operand split into two bf16
//! parts, three `mma` per product, about 16 bits; the state pass and the adjoint products in one
//! TF32 pass, 11 bits, see [`SPLIT_Y`]), for f32 activations as
//! [`crate::tile_mac`] FMA tiles, which hold float32 accuracy (a 3×TF32 version measured 6%
//! slower than them: the phases are latency-bound at one block of 8 warps per SM; see
//! `notes/backward.md`).
//!
//! Outputs are those of the token-serial kernel (`crate::backward_recurrent`): token gradients
//! written directly, ∂q̃/∂k̃ per value head to `dqh`/`dkh`, parameter partials to this block's
//! slot; its `backward_reduce` finishes. No atomics; every sum has a fixed order.
//!
//! # Launch contract
//! Grid `(H, B)`, block [`BACKWARD_THREADS`], dynamic shared memory
//! `BackwardChunkedSmem::new(C, R, N, P, Na).bytes()` with `C = seg_len`; R ∈ {1, 2, 4, 8},
//! P ≤ 256, Na ≤ 256; `ckpt` holds `(B, H, ⌈S/C⌉, P, N)` f32; the other pointers as for
//! `backward_head`. The `backward_chunked_fixed_*` entry points ([`FixedBackward`]) take only
//! R = 4, N = 128, P = 64, Na = 32.

use mamba3_abi::{
    backward_chunked_sp_strips, backward_chunked_sp_warps, output_mode, rotation,
    BackwardChunkedSmem, BackwardParams, BackwardSlots, BACKWARD_THREADS,
};

use crate::angles::{angle_increment, angle_increment_f32, reduced_f32, rotate_pair};
use crate::arch::global::prefetch_l2;
use crate::arch::sreg::{
    block_x, block_y, fresh_u32, ld_shared_f32, ld_shared_u32, smem_base_fresh, st_shared_f32,
    st_shared_u32, sync_threads, thread_x,
};
use crate::backward_recurrent::{boundary_lanes, pair_cross_partial};
#[cfg(target_arch = "nvptx64")]
use crate::elem::Bf16;
use crate::elem::{ldg, stg, Elem};
use crate::frag::acc_m16n8;
#[cfg(target_arch = "nvptx64")]
use crate::geometry::AnyGeometry;
use crate::geometry::{FixedRankGeometry, Geometry};
use crate::math::{exp, rsqrt, sigmoid, sincos, tanh};
use crate::smem::{ld_shared_f64, st_shared_f64};
use crate::tile_mac::{self, for_each_tile, mac_term, plain, Operand, RowSpan, Summed, Term};
use crate::tile_mma::{self, mma_term, MmaTile};
use crate::warp_reduce;

const T: u32 = BACKWARD_THREADS;
const WARPS: u32 = T / 32;
const PI: f32 = core::f32::consts::PI;
/// Most head-dim elements per lane in the output-stage backward (P ≤ 256).
const MAX_PU: usize = 8;

// Per-token scalar arrays (`BackwardChunkedSmem::tok`, C words each).
/// Δ_t.
const DTV: u32 = 0;
/// λ_t = σ(trap_t).
const LAM: u32 = 1;
/// Key scale c_t = γ_t + ε_{t+1}.
const CKEY: u32 = 2;
/// e^{A_t}.
const EA: u32 = 3;
/// E(e, t) = e^{A_e − A_t}; in the forward sweep the key weight E(e, t)·c_t.
const EE: u32 = 4;
/// γ_t = λ_t Δ_t.
const GAM: u32 = 5;
/// ∂A_t.
const DA: u32 = 6;
/// ∂c_t.
const DC: u32 = 7;
/// State-pass part of ∂c_t: E(e, t)·sp(t).
const SPT: u32 = 8;
/// Intra-chunk part of ∂A_t.
const DAI: u32 = 9;
/// Intra-chunk part of ∂c_t.
const DCI: u32 = 10;
/// ∂γ_t.
const DG: u32 = 11;

// Words of the `misc` region.
/// Per-warp partials of a block reduction (8 words).
const RED: u32 = 0;
/// ⟨G, H̃⟩ of the current chunk.
const GH: u32 = 8;
/// Pending first token of the chunk after (two slots by chunk parity, 5 words each): its token
/// index (u32; `u32::MAX` for none), ∂Δ and ∂λ without the ε term, λ, Δ.
const PEND: u32 = 16;
const NONE: u32 = u32::MAX;

/// Rebinds the block constants from fresh copies (see [`Cx::new`]) at the start of a phase; the
/// geometry type `G` of the enclosing function decides which of them are constants.
macro_rules! fresh {
    ($prm:ident, $cx:ident, $lay:ident, $m:ident, $n:ident, $p:ident, $r:ident, $tid:ident) => {
        let $cx = Cx::new::<G>($prm);
        #[allow(unused_variables)]
        let $lay = $cx.lay;
        #[allow(unused_variables)]
        let ($m, $n, $p, $r, $tid) = ($lay.rows, $cx.n, $cx.p, $cx.r, $cx.tid);
    };
}

/// Per-block constants.
#[derive(Clone, Copy)]
struct Cx {
    base: u32,
    lay: BackwardChunkedSmem,
    tid: u32,
    warp: u32,
    lane: u32,
    b: usize,
    h: usize,
    g: usize,
    s_len: usize,
    heads: usize,
    groups: usize,
    r: u32,
    /// log2 R.
    rs: u32,
    n: u32,
    p: u32,
    na: u32,
    /// Tokens per chunk C and chunks.
    c: u32,
    nc: usize,
    bh: usize,
    /// Start of this (b, h) row in the (B,H,S) tensors.
    row: usize,
    half_split: bool,
    d_h: f32,
}

impl Cx {
    /// Shared byte address of f32 element `i` of `region`.
    #[inline(always)]
    fn sm(&self, region: u32, i: u32) -> u32 {
        self.base + 4 * (region + i)
    }

    /// Shared byte address of token scalar `slot` of chunk token `t`.
    #[inline(always)]
    fn tok(&self, slot: u32, t: u32) -> u32 {
        self.sm(self.lay.tok, slot * self.c + t)
    }

    #[inline(always)]
    unsafe fn ts(&self, slot: u32, t: u32) -> f32 {
        // SAFETY: forwarded to the caller (t < C).
        unsafe { ld_shared_f32(self.tok(slot, t)) }
    }

    /// The coordinates `(a, b)` of rotation pair `j` (spec §3).
    #[inline(always)]
    fn pair(&self, j: u32) -> (u32, u32) {
        if self.half_split {
            (j, j + self.n / 2)
        } else {
            (2 * j, 2 * j + 1)
        }
    }

    /// Start of q/k row (t, r) of this block's group, (B,S,R,G,N).
    #[inline(always)]
    fn qk_src(&self, t: usize, r: u32) -> usize {
        (((self.b * self.s_len + t) * self.r as usize + r as usize) * self.groups + self.g)
            * self.n as usize
    }

    /// Start of row (t, r) of the (B,S,R,H,N) per-head q/k gradients.
    #[inline(always)]
    fn qkh(&self, t: usize, r: u32) -> usize {
        (((self.b * self.s_len + t) * self.r as usize + r as usize) * self.heads + self.h)
            * self.n as usize
    }

    /// Element (t, p) of a (B,S,H,P) tensor.
    #[inline(always)]
    fn vz(&self, t: usize, pp: u32) -> usize {
        ((self.b * self.s_len + t) * self.heads + self.h) * self.p as usize + pp as usize
    }

    /// `cos θ_{t,j}` in the `cs` workspace (`sin` follows Na elements later).
    #[inline(always)]
    fn cs(&self, t: usize, j: u32) -> usize {
        (self.bh * self.s_len + t) * 2 * self.na as usize + j as usize
    }

    /// Element (t, j) of the (B,S,H,Na) angle tensors.
    #[inline(always)]
    fn angle(&self, t: usize, j: u32) -> usize {
        ((self.b * self.s_len + t) * self.heads + self.h) * self.na as usize + j as usize
    }

    /// Start of the carried state entering chunk `c` in the `ckpt` workspace.
    #[inline(always)]
    fn ckpt(&self, c: usize) -> usize {
        (self.bh * self.nc + c) * (self.p * self.n) as usize
    }

    /// Chunk token of row `i`.
    #[inline(always)]
    fn row_tok(&self, i: u32) -> u32 {
        i >> self.rs
    }

    /// The pair weight W(t, s) (0 for s > t or past the chunk).
    #[inline(always)]
    unsafe fn w(&self, t: u32, s: u32) -> f32 {
        // SAFETY: forwarded to the caller (t, s < C).
        unsafe { ld_shared_f32(self.sm(self.lay.wt, t * self.c + s)) }
    }

    /// The pair decay E(t, s) (0 for s > t or past the chunk).
    #[inline(always)]
    unsafe fn e(&self, t: u32, s: u32) -> f32 {
        // SAFETY: forwarded to the caller (t, s < C).
        unsafe { ld_shared_f32(self.sm(self.lay.et, t * self.c + s)) }
    }

    /// Stores element (i, j) of an M×M token-pair region: `v` where row j's token is not after
    /// row i's, else 0 (the causal mask).
    #[inline(always)]
    unsafe fn store_causal(&self, region: u32, i: u32, j: u32, v: f32) {
        let v = if self.row_tok(j) <= self.row_tok(i) {
            v
        } else {
            0.0
        };
        // SAFETY: forwarded to the caller (i, j < M).
        unsafe { st_shared_f32(self.sm(region, i * self.lay.sm + j), v) };
    }

    /// This thread's (warp, warps per block, lane), for the tile loops.
    #[inline(always)]
    fn warps(&self) -> (u32, u32, u32) {
        (self.warp, WARPS, self.lane)
    }

    /// Operand view of a row-major region with row stride `stride`: `(i, k)` = element (i, k).
    #[inline(always)]
    fn rows(&self, region: u32, stride: u32) -> Operand {
        Operand {
            base: self.sm(region, 0),
            s_i: stride,
            s_k: 1,
        }
    }

    /// Operand view of a row-major region with row stride `stride`, transposed: `(i, k)` =
    /// element (k, i).
    #[inline(always)]
    fn cols(&self, region: u32, stride: u32) -> Operand {
        Operand {
            base: self.sm(region, 0),
            s_i: 1,
            s_k: stride,
        }
    }

    /// One past the last row whose token is at most the token of the tile's last row.
    #[inline(always)]
    fn causal_end(&self, span: RowSpan) -> u32 {
        ((self.row_tok(span.last) + 1) << self.rs).min(self.lay.rows)
    }

    /// The first row of the token of the tile's first row.
    #[inline(always)]
    fn causal_start(&self, span: RowSpan) -> u32 {
        self.row_tok(span.first) << self.rs
    }
}

impl Cx {
    /// The block's constants, derived from [`fresh_u32`] copies of the launch parameters and a
    /// fresh shared base: built at the start of every phase, so that the compiler recomputes the
    /// few values each phase needs there instead of holding all of them in registers through
    /// the chunk loop.
    /// Under a fixed geometry `G` the dimensions (and chunk size, log2 R) are constants instead, so
    /// the layout offsets, strides and divisions by them fold at compile time.
    #[inline(always)]
    fn new<G: Geometry>(prm: &BackwardParams) -> Self {
        let heads = fresh_u32(prm.heads) as usize;
        let groups = fresh_u32(prm.groups) as usize;
        let s_len = fresh_u32(prm.seq_len) as usize;
        let (n, p, na) = match G::DIMS {
            Some([n, p, na]) => (n, p, na),
            None => (fresh_u32(prm.n), fresh_u32(prm.p), fresh_u32(prm.na)),
        };
        let c = match G::CHUNK {
            Some(c) => c,
            None => fresh_u32(prm.seg_len),
        };
        // A fixed rank only makes log2 R a constant (row ↔ token shifts); the loops over ranks
        // keep the launch's R: unrolled to a constant count they pushed the bf16 kernel into
        // spills on every architecture.
        let r = fresh_u32(prm.rank);
        let rs = G::rank(r).trailing_zeros();
        let h = block_x() as usize;
        let b = block_y() as usize;
        let tid = thread_x();
        Cx {
            base: smem_base_fresh(),
            lay: BackwardChunkedSmem::new(c, r, n, p, na),
            tid,
            warp: tid / 32,
            lane: tid % 32,
            b,
            h,
            g: h / (heads / groups),
            s_len,
            heads,
            groups,
            r,
            rs,
            n,
            p,
            na,
            c,
            nc: s_len.div_ceil(c as usize),
            bh: b * heads + h,
            row: (b * heads + h) * s_len,
            half_split: prm.rotation == rotation::HALF_SPLIT,
            // SAFETY: h < H.
            d_h: if prm.d != 0 {
                unsafe { ldg(prm.d, h) }
            } else {
                0.0
            },
        }
    }
}

/// Whether activations of type `X` take the products on the tensor cores ([`crate::tile_mma`]:
/// bf16-split or TF32 operands, see [`SPLIT_Y`]) rather than the f32 FMA tiles
/// ([`crate::tile_mac`], which hold float32 accuracy).
#[inline(always)]
const fn tensor_products<X: Elem>() -> bool {
    X::BYTES == 2
}

/// [`tile_mac::product`] (tiles of 4 rows × 32·CU columns) or [`tile_mma::product`] (16 × 8·NB,
/// operands bf16-split or TF32 by `SPLIT`), by [`tensor_products`].
///
/// # Safety
/// As for both.
#[inline(always)]
unsafe fn prod<X: Elem, const CU: usize, const NB: usize, const SPLIT: bool>(
    dims: (u32, u32),
    warps: (u32, u32, u32),
    t: &impl Summed,
    out: impl FnMut(u32, u32, f32),
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        if tensor_products::<X>() {
            tile_mma::product::<NB, SPLIT>(dims, warps, t, out)
        } else {
            tile_mac::product::<CU>(dims, warps, t, out)
        }
    }
}

/// As [`prod`] for two terms ([`tile_mac::product2`] or [`tile_mma::product2`]).
///
/// # Safety
/// As for both.
#[inline(always)]
unsafe fn prod2<X: Elem, const CU: usize, const NB: usize, const SPLIT: bool>(
    dims: (u32, u32),
    warps: (u32, u32, u32),
    t1: &impl Summed,
    t2: &impl Summed,
    out: impl FnMut(u32, u32, f32, f32),
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        if tensor_products::<X>() {
            tile_mma::product2::<NB, SPLIT>(dims, warps, t1, t2, out)
        } else {
            tile_mac::product2::<CU>(dims, warps, t1, t2, out)
        }
    }
}

/// Whether the tensor-core products that recompute the outputs y (the scores, the inter- and
/// intra-chunk outputs) split their operands into bf16 `hi + lo` (three passes, ~16 bits) rather
/// than take one TF32 pass (11 bits; see [`crate::tile_mma`]): the output-stage backward and ∂D
/// are sums of y-dependent terms that cancel, and with TF32 here a random small geometry's ∂D
/// came to 1.6e-2 (bound 2e-2) in the CPU emulation against 2.3e-3 with the split.
const SPLIT_Y: bool = true;

/// As [`SPLIT_Y`] for the forward sweep's state pass (the checkpoints): one TF32 pass. The state
/// enters y only through the inter-chunk term, and the error stays flat in S (H200: ∂angles
/// 7.1e-3 at S = 2048, 7.3e-3 at S = 16384 with [`SPLIT_ADJOINTS`] as below).
const SPLIT_STATES: bool = false;

/// As [`SPLIT_Y`] for the adjoint products (Dₛ, ∂Q̂, ∂K̂, ∂X, the adjoint update): one TF32 pass,
/// 7–8% faster over the whole backward at the benchmark geometry; the gradients returned in f32
/// then carry ~5e-3 (∂angles, the difference of its q and k sides, is the largest) where the
/// split left ~1e-4, under the bf16 bound of 2e-2 and near the bf16 rounding of the returned
/// activation gradients (~3.6e-3).
const SPLIT_ADJOINTS: bool = false;

/// Column blocks of the tensor-core tiles of the ∂K̂ product.
const SP_NB: usize = 4;

/// How many partials of the state-pass sums `sp` phase 9 leaves per row: one per 128-column strip
/// for the FMA tiles, one per warp of a 16-row group for the tensor-core tiles (the layout's `row`
/// region holds [`mamba3_abi::backward_chunked_sp_slots`] of them).
#[inline(always)]
fn sp_slots<X: Elem>(m: u32, n: u32) -> u32 {
    if tensor_products::<X>() {
        backward_chunked_sp_warps(m)
    } else {
        backward_chunked_sp_strips(n)
    }
}

/// Sums one value per thread over the block in a fixed order (warp butterflies, then the warp
/// partials in warp order by thread 0 after the caller's next barrier): writes the warp partials.
#[inline(always)]
unsafe fn block_partials(cx: &Cx, v: f32) {
    let s = warp_reduce::sum(v);
    if cx.lane == 0 {
        // SAFETY: RED holds WARPS words.
        unsafe { st_shared_f32(cx.sm(cx.lay.misc, RED + cx.warp), s) };
    }
}

/// The total of [`block_partials`], after a barrier.
#[inline(always)]
unsafe fn block_total(cx: &Cx) -> f32 {
    let mut s = 0.0f32;
    let mut w = 0;
    while w < WARPS {
        // SAFETY: RED holds WARPS words.
        s += unsafe { ld_shared_f32(cx.sm(cx.lay.misc, RED + w)) };
        w += 1;
    }
    s
}

/// Items per thread whose global loads are issued together before any of their shared stores
/// (the stores are `asm!` with memory effects, so a load after one waits for it).
const BATCH: usize = 4;

/// Where [`stage`] takes the cosines and sines of θ from.
#[derive(Clone, Copy)]
enum Angles {
    /// The `cs` workspace.
    Global,
    /// The shared `(cos, sin)` pairs of the forward sweep (`dth` region, `(C, Na, 2)`).
    Shared,
}

/// Stages k̂ (and q̂ when `with_q`) and x of chunk rows `i < M` (tokens `t0 ..`, `len` of them;
/// rows past the chunk are zero).
///
/// A work item is `GROUP` consecutive rotation pairs (or head-dim columns) of one row, so the
/// 64-bit row offsets are formed once per item and the loads take constant offsets from them;
/// `GROUP` is 4 when N/2 and P are multiples of 4, else 1.
#[inline(always)]
unsafe fn stage<X: Elem>(
    prm: &BackwardParams,
    cx: &Cx,
    t0: usize,
    len: u32,
    with_q: bool,
    angles: Angles,
) {
    // SAFETY: forwarded to the caller.
    unsafe {
        if (cx.n / 2) % 4 == 0 && cx.p % 4 == 0 {
            stage_groups::<X, 4, 1>(prm, cx, t0, len, with_q, angles);
        } else {
            stage_groups::<X, 1, BATCH>(prm, cx, t0, len, with_q, angles);
        }
    }
}

/// [`stage`] with items of `GROUP` pairs or columns, `ITEMS` items per thread in flight.
#[inline(always)]
unsafe fn stage_groups<X: Elem, const GROUP: usize, const ITEMS: usize>(
    prm: &BackwardParams,
    cx: &Cx,
    t0: usize,
    len: u32,
    with_q: bool,
    angles: Angles,
) {
    let lay = &cx.lay;
    let m = lay.rows;
    let valid = len << cx.rs;
    let half = cx.n / 2;
    let g = GROUP as u32;
    let per_row = half / g;
    let items = m * per_row;
    // Pair j's coordinates are (oa + step·u, ob + step·u) for u = j − j0 of its item.
    let (step, b_off) = if cx.half_split { (1, half) } else { (2, 1) };
    // SAFETY (whole body): rows < M, pairs < N/2, p < P and tokens < S stay inside the launch
    // contract's shapes and the layout.
    unsafe {
        let mut first = cx.tid;
        while first < items {
            // Per pair: k (a, b), q (a, b), cos, sin.
            let mut raw = [[[0.0f32; 6]; GROUP]; ITEMS];
            for (k, item) in raw.iter_mut().enumerate() {
                let e = first + k as u32 * T;
                let i = e / per_row;
                if e < items && i < valid {
                    let j0 = (e - i * per_row) * g;
                    let oa = if cx.half_split { j0 } else { 2 * j0 };
                    let tt = cx.row_tok(i);
                    let t = t0 + tt as usize;
                    let r = i & (cx.r - 1);
                    let src = cx.qk_src(t, r) + oa as usize;
                    let bias = (cx.h * cx.r as usize + r as usize) * cx.n as usize + oa as usize;
                    let ci = cx.cs(t, j0);
                    let so = 2 * (tt * cx.na + j0);
                    for (u, v) in item.iter_mut().enumerate() {
                        let (a, b) = (
                            (step * u as u32) as usize,
                            (step * u as u32 + b_off) as usize,
                        );
                        v[0] = X::load(prm.k, src + a) + ldg(prm.k_bias, bias + a);
                        v[1] = X::load(prm.k, src + b) + ldg(prm.k_bias, bias + b);
                        if with_q {
                            v[2] = X::load(prm.q, src + a) + ldg(prm.q_bias, bias + a);
                            v[3] = X::load(prm.q, src + b) + ldg(prm.q_bias, bias + b);
                        }
                        (v[4], v[5]) = (1.0, 0.0);
                        if j0 + (u as u32) < cx.na {
                            (v[4], v[5]) = match angles {
                                Angles::Global => {
                                    (ldg(prm.cs, ci + u), ldg(prm.cs, ci + u + cx.na as usize))
                                }
                                Angles::Shared => (
                                    ld_shared_f32(cx.sm(lay.dth, so + 2 * u as u32)),
                                    ld_shared_f32(cx.sm(lay.dth, so + 2 * u as u32 + 1)),
                                ),
                            };
                        }
                    }
                }
            }
            for (k, item) in raw.iter().enumerate() {
                let e = first + k as u32 * T;
                if e < items {
                    let i = e / per_row;
                    let j0 = (e - i * per_row) * g;
                    let oa = if cx.half_split { j0 } else { 2 * j0 };
                    let (ka, qa) = (
                        cx.sm(lay.kh, i * lay.sn + oa),
                        cx.sm(lay.qh, i * lay.sn + oa),
                    );
                    for (u, v) in item.iter().enumerate() {
                        let (a, b) = (4 * step * u as u32, 4 * (step * u as u32 + b_off));
                        let (k_a, k_b) = rotate_pair(v[0], v[1], v[4], v[5]);
                        st_shared_f32(ka + a, k_a);
                        st_shared_f32(ka + b, k_b);
                        if with_q {
                            let (q_a, q_b) = rotate_pair(v[2], v[3], v[4], v[5]);
                            st_shared_f32(qa + a, q_a);
                            st_shared_f32(qa + b, q_b);
                        }
                    }
                }
            }
            first += ITEMS as u32 * T;
        }
        let per_row = cx.p / g;
        let items = m * per_row;
        let mut first = cx.tid;
        while first < items {
            let mut xs = [[0.0f32; GROUP]; ITEMS];
            for (k, item) in xs.iter_mut().enumerate() {
                let e = first + k as u32 * T;
                let i = e / per_row;
                if e < items && i < valid {
                    let p0 = (e - i * per_row) * g;
                    let t = t0 + cx.row_tok(i) as usize;
                    let r = i & (cx.r - 1);
                    let mv = (cx.h * cx.r as usize + r as usize) * cx.p as usize + p0 as usize;
                    let src = cx.vz(t, p0);
                    for (u, xv) in item.iter_mut().enumerate() {
                        *xv = X::load(prm.v, src + u) * ldg(prm.mimo_v, mv + u);
                    }
                }
            }
            for (k, item) in xs.iter().enumerate() {
                let e = first + k as u32 * T;
                if e < items {
                    let i = e / per_row;
                    let p0 = (e - i * per_row) * g;
                    let dst = cx.sm(lay.x, i * lay.sp + p0);
                    for (u, xv) in item.iter().enumerate() {
                        st_shared_f32(dst + 4 * u as u32, *xv);
                    }
                }
            }
            first += ITEMS as u32 * T;
        }
    }
}

/// Prefetches into L2 what phase 0 (`reverse`) or the forward sweep's staging (`!reverse`) of
/// chunk `c` will load: its token rows of q (reverse only), k, v, z, ∂L/∂out, cos/sin and angle
/// logits, its scalars, and (reverse) the carried state entering it. Issued one chunk ahead, so
/// those loads hit L2 instead of waiting for HBM on the block's critical path.
#[inline(always)]
unsafe fn prefetch_chunk<X: Elem>(prm: &BackwardParams, cx: &Cx, c: usize, reverse: bool) {
    const LINE: u64 = 128;
    let t0 = c * cx.c as usize;
    let len = (cx.s_len - t0).min(cx.c as usize) as u32;
    let esz = X::BYTES as u64;
    let (n, p, r, na) = (cx.n as u64, cx.p as u64, cx.r, cx.na as u64);
    let dout_rows = if prm.mode == output_mode::PREREDUCE {
        r
    } else {
        1
    };
    // Row kinds per token: q (R), k (R), v, z, ∂L/∂out (1 or R), cos/sin, angle logits.
    let kinds = 3 * r + 4;
    let row_lines = (n * esz).max(p * esz).max(2 * na * 4).div_ceil(LINE) as u32 + 1;
    let items = len * kinds * row_lines;
    // SAFETY (whole body): every address lies inside the tensor it is formed from (prefetches
    // of a row's lines stop at its last byte).
    unsafe {
        let mut e = cx.tid;
        while e < items {
            let tt = e / (kinds * row_lines);
            let rest = e - tt * kinds * row_lines;
            let kind = rest / row_lines;
            let line = (rest - kind * row_lines) as u64;
            let t = t0 + tt as usize;
            let (base, bytes) = if kind < 2 * r {
                let rr = kind % r;
                let src = if kind < r { prm.q } else { prm.k };
                (
                    src + esz * cx.qk_src(t, rr) as u64,
                    if kind < r && !reverse { 0 } else { n * esz },
                )
            } else if kind == 2 * r {
                (prm.v + esz * cx.vz(t, 0) as u64, p * esz)
            } else if kind == 2 * r + 1 {
                (
                    prm.z + esz * cx.vz(t, 0) as u64,
                    if prm.z != 0 && reverse { p * esz } else { 0 },
                )
            } else if kind < 3 * r + 2 {
                let rr = kind - (2 * r + 2);
                let i = prm.dout_index(cx.b, t, rr.min(dout_rows - 1), cx.h, 0);
                (
                    prm.dout + esz * i as u64,
                    if rr < dout_rows && reverse {
                        p * esz
                    } else {
                        0
                    },
                )
            } else if kind == 3 * r + 2 {
                (
                    prm.cs + 4 * cx.cs(t, 0) as u64,
                    if reverse { 2 * na * 4 } else { 0 },
                )
            } else {
                (prm.angles + 4 * cx.angle(t, 0) as u64, na * 4)
            };
            if line * LINE < bytes {
                prefetch_l2(base + line * LINE);
            } else if line * LINE < bytes + LINE && bytes > 0 {
                prefetch_l2(base + bytes - 1);
            }
            e += T;
        }
        if cx.tid < 3 {
            let (src, sz) = match cx.tid {
                0 => (prm.trap, esz),
                1 => (prm.dt, 4),
                _ => (prm.adt, 4),
            };
            prefetch_l2(src + sz * (cx.row + t0) as u64);
            prefetch_l2(src + sz * (cx.row + t0 + len as usize) as u64 - 1);
        }
        if reverse && c > 0 {
            let base = prm.ckpt + 4 * cx.ckpt(c) as u64;
            let lines = (4 * n * p).div_ceil(LINE) as u32;
            let mut l = cx.tid;
            while l < lines {
                prefetch_l2(base + l as u64 * LINE);
                l += T;
            }
        }
    }
}

/// Copies `count` f32 from global `src` (element `e`) into shared `region` at element
/// `(e / width)·stride + e % width`, eight loads per thread in flight.
#[inline(always)]
unsafe fn copy_rows(cx: &Cx, src: u64, count: u32, width: u32, region: u32, stride: u32) {
    // SAFETY (whole body): forwarded to the caller (src holds `count` elements, the region
    // `count / width` rows of `stride`).
    unsafe {
        let mut first = cx.tid;
        while first < count {
            let mut v = [0.0f32; 8];
            for (k, x) in v.iter_mut().enumerate() {
                let e = first + k as u32 * T;
                if e < count {
                    *x = ldg(src, e as usize);
                }
            }
            for (k, x) in v.iter().enumerate() {
                let e = first + k as u32 * T;
                if e < count {
                    let row = e / width;
                    st_shared_f32(cx.sm(region, row * stride + (e - row * width)), *x);
                }
            }
            first += 8 * T;
        }
    }
}

/// Token scalars of the chunk starting at `t0` with `len` tokens: Δ, λ, γ, the key scale c, e^{A_t}
/// and E(e, t) (zero past the chunk), and the pair tables W and E.
#[inline(always)]
unsafe fn token_scalars<X: Elem>(prm: &BackwardParams, cx: &Cx, t0: usize, len: u32) {
    let c = cx.c;
    // SAFETY (whole body): tokens < S, slots < C.
    unsafe {
        let mut i = cx.tid;
        while i < c {
            let (mut dt, mut lam, mut gam, mut key, mut ea, mut ee) =
                (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
            if i < len {
                let t = t0 + i as usize;
                dt = ldg(prm.dt, cx.row + t);
                lam = sigmoid(X::load(prm.trap, cx.row + t));
                gam = lam * dt;
                let eps_next = if t + 1 < cx.s_len {
                    ldg(prm.dt, cx.row + t + 1) * (1.0 - sigmoid(X::load(prm.trap, cx.row + t + 1)))
                } else {
                    0.0
                };
                key = gam + eps_next;
                let mut a_to = 0.0f32;
                let mut u = 0;
                while u <= i {
                    a_to += ldg(prm.adt, cx.row + t0 + u as usize);
                    u += 1;
                }
                let mut a_after = 0.0f32;
                let mut u = i + 1;
                while u < len {
                    a_after += ldg(prm.adt, cx.row + t0 + u as usize);
                    u += 1;
                }
                ea = exp(a_to);
                ee = exp(a_after);
            }
            st_shared_f32(cx.tok(DTV, i), dt);
            st_shared_f32(cx.tok(LAM, i), lam);
            st_shared_f32(cx.tok(GAM, i), gam);
            st_shared_f32(cx.tok(CKEY, i), key);
            st_shared_f32(cx.tok(EA, i), ea);
            st_shared_f32(cx.tok(EE, i), ee);
            i += T;
        }
        let mut e = cx.tid;
        while e < c * c {
            let t = e / c;
            let s = e - t * c;
            let (mut w, mut d) = (0.0, 0.0);
            if s <= t && t < len {
                let mut a = 0.0f32;
                let mut u = s + 1;
                while u <= t {
                    a += ldg(prm.adt, cx.row + t0 + u as usize);
                    u += 1;
                }
                d = exp(a);
                w = if s == t {
                    let ts = t0 + t as usize;
                    sigmoid(X::load(prm.trap, cx.row + ts)) * ldg(prm.dt, cx.row + ts)
                } else {
                    let ss = t0 + s as usize;
                    let gam = sigmoid(X::load(prm.trap, cx.row + ss)) * ldg(prm.dt, cx.row + ss);
                    let eps_next = ldg(prm.dt, cx.row + ss + 1)
                        * (1.0 - sigmoid(X::load(prm.trap, cx.row + ss + 1)));
                    d * (gam + eps_next)
                };
            }
            st_shared_f32(cx.sm(cx.lay.wt, e), w);
            st_shared_f32(cx.sm(cx.lay.et, e), d);
            e += T;
        }
    }
}

/// ∂L/∂out of (t, r, p) (see [`BackwardParams::dout_index`]).
#[inline(always)]
unsafe fn dout<X: Elem>(prm: &BackwardParams, cx: &Cx, t: usize, r: u32, pp: u32) -> f32 {
    // SAFETY: indices inside dout's layout.
    unsafe { X::load(prm.dout, prm.dout_index(cx.b, t, r, cx.h, pp)) }
}

/// ∂L/∂out and z of row `i` (chunk token `tt`), this lane's head-dim elements: loaded together,
/// ahead of the row before it being processed.
#[inline(always)]
unsafe fn row_inputs<X: Elem>(
    prm: &BackwardParams,
    cx: &Cx,
    t: usize,
    r: u32,
) -> ([f32; MAX_PU], [f32; MAX_PU]) {
    let (mut d, mut z) = ([0.0f32; MAX_PU], [0.0f32; MAX_PU]);
    for u in 0..MAX_PU {
        let pp = cx.lane + 32 * u as u32;
        if pp < cx.p {
            // SAFETY: (t, r, p) inside dout and z.
            unsafe {
                d[u] = dout::<X>(prm, cx, t, r, pp);
                if prm.z != 0 {
                    z[u] = X::load(prm.z, cx.vz(t, pp));
                }
            }
        }
    }
    (d, z)
}

/// Output-stage backward of the chunk's valid rows (warp `w` takes rows `i ≡ w mod 8`, so its
/// rank `i mod R` is fixed): from y (in `dl`) and the inter outputs (in `ds`) computes δ (into
/// `dl`), ∂gate·silu' (into `ds`), the inter part of ∂A per row, and this warp's mimo_o / mimo_z /
/// norm / D partials. The rank's parameters are loaded once, and each row's ∂L/∂out and z while
/// the row before it is processed; the partials are summed over the warp's rows in registers and
/// added to the warp's region once (a shared read-modify-write per row and element was a chain
/// of dependent shared accesses).
#[inline(always)]
unsafe fn output_backward<X: Elem>(prm: &BackwardParams, cx: &Cx, t0: usize, len: u32) {
    let lay = &cx.lay;
    let fused = prm.mode == output_mode::FUSED_NORM;
    let gated = prm.mode == output_mode::GATED;
    let valid = len << cx.rs;
    let acc = lay.acc_w + cx.warp * 4 * cx.p;
    let r = cx.warp & (cx.r - 1);
    if cx.warp >= valid {
        return;
    }
    // SAFETY (whole body): rows < M, p < P; the warp's partial region is its own.
    unsafe {
        let (mut mo, mut mz, mut nw) = ([1.0f32; MAX_PU], [0.0f32; MAX_PU], [1.0f32; MAX_PU]);
        let par = (cx.h * cx.r as usize + r as usize) * cx.p as usize;
        for u in 0..MAX_PU {
            let pp = cx.lane + 32 * u as u32;
            if pp < cx.p {
                if prm.mimo_o != 0 {
                    mo[u] = ldg(prm.mimo_o, par + pp as usize);
                }
                if prm.z != 0 {
                    mz[u] = ldg(prm.mimo_z, par + pp as usize);
                }
                if prm.norm_weight != 0 {
                    nw[u] = ldg(prm.norm_weight, cx.h * cx.p as usize + pp as usize);
                }
            }
        }
        // Per element: the mimo_o, mimo_z, norm-weight and D partials of the warp's rows.
        let mut part = [[0.0f32; 4]; MAX_PU];
        let mut i = cx.warp;
        let mut cur = row_inputs::<X>(prm, cx, t0 + cx.row_tok(i) as usize, r);
        while i < valid {
            let tt = cx.row_tok(i);
            let next_i = i + WARPS;
            let next = if next_i < valid {
                row_inputs::<X>(prm, cx, t0 + cx.row_tok(next_i) as usize, r)
            } else {
                ([0.0; MAX_PU], [0.0; MAX_PU])
            };
            let (dv, zv) = cur;
            let mut ys = [0.0f32; MAX_PU];
            let mut gates = [[1.0f32, 0.0]; MAX_PU];
            let mut ss = 0.0f32;
            for u in 0..MAX_PU {
                let pp = cx.lane + 32 * u as u32;
                if pp < cx.p {
                    ys[u] = ld_shared_f32(cx.sm(lay.dl, i * lay.sp + pp));
                    ss += ys[u] * ys[u];
                    if prm.z != 0 {
                        let x = zv[u] * mz[u];
                        let sg = sigmoid(x);
                        gates[u] = [x * sg, sg * (1.0 + x * (1.0 - sg))];
                    }
                }
            }
            let (mut rstd, mut md) = (1.0f32, 0.0f32);
            if fused {
                rstd = rsqrt(warp_reduce::sum(ss) / cx.p as f32 + prm.norm_eps);
                let mut part = 0.0f32;
                for u in 0..MAX_PU {
                    if cx.lane + 32 * (u as u32) < cx.p {
                        part += dv[u] * nw[u] * gates[u][0] * mo[u] * (ys[u] * rstd);
                    }
                }
                md = warp_reduce::sum(part) / cx.p as f32;
            }
            let ea = cx.ts(EA, tt);
            let mut inter = 0.0f32;
            for u in 0..MAX_PU {
                let pp = cx.lane + 32 * u as u32;
                if pp < cx.p {
                    let (yv, d, [g, gp]) = (ys[u], dv[u], gates[u]);
                    let [p_mo, p_mz, p_nw, p_d] = &mut part[u];
                    let (delta, dgate) = if fused {
                        let yhat = yv * rstd;
                        let dyhat = d * nw[u] * g * mo[u];
                        *p_nw += d * yhat * g * mo[u];
                        *p_mo += d * yhat * nw[u] * g;
                        (rstd * (dyhat - yhat * md), d * yhat * nw[u] * mo[u])
                    } else if gated {
                        *p_mo += d * yv * g;
                        (d * mo[u] * g, d * mo[u] * yv)
                    } else {
                        (d * g, d * yv)
                    };
                    let yi_addr = cx.sm(lay.ds, i * lay.sp + pp);
                    inter += delta * ld_shared_f32(yi_addr);
                    st_shared_f32(yi_addr, dgate * gp);
                    if prm.z != 0 {
                        *p_mz += dgate * gp * zv[u];
                    }
                    *p_d += delta * ld_shared_f32(cx.sm(lay.x, i * lay.sp + pp));
                    st_shared_f32(cx.sm(lay.dl, i * lay.sp + pp), delta);
                }
            }
            let inter = warp_reduce::sum(inter) * ea;
            if cx.lane == 0 {
                st_shared_f32(cx.sm(lay.row, i), inter);
            }
            cur = next;
            i = next_i;
        }
        for (u, sums) in part.iter().enumerate() {
            let pp = cx.lane + 32 * u as u32;
            if pp < cx.p {
                for (k, v) in sums.iter().enumerate() {
                    let a = cx.sm(acc, k as u32 * cx.p + pp);
                    st_shared_f32(a, ld_shared_f32(a) + v);
                }
            }
        }
    }
}

/// The forward sweep: θ and the `cs` workspace for every token, the carried state entering every
/// chunk into `ckpt`; leaves the state entering the last chunk in `hs`.
///
/// Per chunk: the angle increments of every (token, angle) in parallel (f64, into the `dth` /
/// `dtha` regions as one f64 per pair), the running sums by one thread per angle, then cos/sin of
/// every (token, angle) in parallel (in place, and to `cs`); k̂ and x staged from those; the state
/// pass `H̃ ← e^{A_e}·H̃ + Σ_i E(e, t_i) c_{t_i} x_i k̂_iᵀ`.
#[inline(always)]
unsafe fn forward_sweep<X: Elem, G: Geometry>(prm: &BackwardParams) {
    fresh!(prm, cx, lay, m, n, p, r, tid);
    let nc = cx.nc;
    // SAFETY (whole body): the launch contract; phases separated by barriers.
    unsafe {
        let mut e = tid;
        while e < p * lay.sn {
            st_shared_f32(cx.sm(lay.hs, e), 0.0);
            e += T;
        }
        // Angle j's running total is owned by thread j for the whole sweep.
        let mut theta = 0.0f64;
        let mut c = 0;
        while c < nc {
            fresh!(prm, cx, lay, m, n, p, r, tid);
            let t0 = c * cx.c as usize;
            let len = (cx.s_len - t0).min(cx.c as usize) as u32;
            let last = c + 1 == nc;
            let mut e = tid;
            while e < len * cx.na {
                let tt = e / cx.na;
                let j = e - tt * cx.na;
                let t = t0 + tt as usize;
                let (logit, dt) = (ldg(prm.angles, cx.angle(t, j)), ldg(prm.dt, cx.row + t));
                // bf16 activations: the f32 increment (summed in f64), as the bf16 tensor-core
                // forward forms it (its error sits far below the bf16 rounding of q̂ and k̂).
                let inc = if tensor_products::<X>() {
                    angle_increment_f32(logit, dt) as f64
                } else {
                    angle_increment(logit, dt)
                };
                st_shared_f64(cx.sm(lay.dth, 2 * e), inc);
                e += T;
            }
            if !last {
                token_scalars::<X>(prm, &cx, t0, len);
            }
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            if !last {
                prefetch_chunk::<X>(prm, &cx, c + 1, false);
            }
            if tid < cx.na {
                let mut tt = 0;
                while tt < len {
                    let a = cx.sm(lay.dth, 2 * (tt * cx.na + tid));
                    theta += ld_shared_f64(a);
                    st_shared_f64(a, theta);
                    tt += 1;
                }
            }
            if !last && tid < len {
                let a = cx.tok(EE, tid);
                st_shared_f32(a, ld_shared_f32(a) * cx.ts(CKEY, tid));
            }
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            let mut e = tid;
            while e < len * cx.na {
                let tt = e / cx.na;
                let j = e - tt * cx.na;
                let a = cx.sm(lay.dth, 2 * e);
                let (si, co) = sincos(reduced_f32(ld_shared_f64(a)));
                st_shared_f32(a, co);
                st_shared_f32(a + 4, si);
                let ci = cx.cs(t0 + tt as usize, j);
                stg(prm.cs, ci, co);
                stg(prm.cs, ci + cx.na as usize, si);
                e += T;
            }
            sync_threads();
            if last {
                break;
            }

            fresh!(prm, cx, lay, m, n, p, r, tid);
            stage::<X>(prm, &cx, t0, len, false, Angles::Shared);
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            let decay = cx.ts(EA, len - 1);
            let slot = cx.ckpt(c + 1);
            prod::<X, 4, 4, SPLIT_STATES>(
                (p, n),
                cx.warps(),
                &Term {
                    a: cx.cols(lay.x, lay.sp),
                    b: cx.cols(lay.kh, lay.sn),
                    ks: |_: RowSpan| 0..m,
                    wa: |_, _| 1.0,
                    wb: |k| cx.ts(EE, cx.row_tok(k)),
                },
                |pp, nn, v| {
                    let addr = cx.sm(lay.hs, pp * lay.sn + nn);
                    let v = decay * ld_shared_f32(addr) + v;
                    st_shared_f32(addr, v);
                    stg(prm.ckpt, slot + (pp * n + nn) as usize, v);
                },
            );
            sync_threads();
            c += 1;
        }
    }
}

/// `Σ_{s ≥ t0} ∂θ_s` for chunk `c` (first token `t0`) into the `suffix` region, the running sum the
/// chunk before starts from. The sum over every later token is the loss's derivative under one
/// common shift of θ_s for all s ≥ t0, which only moves the interactions of those tokens' queries
/// with the keys before t0, i.e. with the state entering the chunk: `Σ_p G[p, a]·H̃[p, b] −
/// G[p, b]·H̃[p, a]` over the pair (a, b) of each angle, `G` the state's adjoint. Carrying the sum of
/// the per-token terms instead lets their roundings add up over the sequence while the sum itself
/// stays the size of a few tokens' terms: the f32 ∂angles error grew with S that way.
///
/// # Safety
/// The launch contract; `c ≥ 1`, `Na ≥ 1`; `G` is the adjoint of the state entering chunk `c`
/// (after phase 10), whose `H̃` is slot `c` of `ckpt`; no other thread touches `suffix` until the
/// next barrier. Every thread of the block calls it.
#[inline(always)]
unsafe fn boundary_dtheta(prm: &BackwardParams, cx: &Cx, c: usize) {
    let lay = &cx.lay;
    let (n, p, tid) = (cx.n, cx.p, cx.tid);
    let lanes = boundary_lanes(cx.na);
    let slot = cx.ckpt(c);
    // Na·lanes ≤ T: one item per thread; the lanes of an angle are one aligned group of a warp.
    let j = tid / lanes;
    let g = tid - j * lanes;
    let acc = if j < cx.na {
        // SAFETY: slot c of `ckpt` holds (P, N) words; G holds (P, N) at row stride sn.
        unsafe {
            pair_cross_partial(
                prm.ckpt + 4 * slot as u64,
                n,
                |pp, col| cx.sm(lay.g, pp * lay.sn + col),
                p,
                cx.pair(j),
                g,
                lanes,
            )
        }
    } else {
        0.0
    };
    let total = warp_reduce::group_sum(acc, lanes);
    if j < cx.na && g == 0 {
        // SAFETY: `suffix` holds Na words.
        unsafe { st_shared_f32(cx.sm(lay.suffix, j), total) };
    }
}

/// The chunked backward for activation type `X` (see the module docs).
///
/// # Safety
/// See the module's launch contract.
#[inline(always)]
pub unsafe fn backward_chunked<X: Elem, G: Geometry>(prm: &BackwardParams) {
    fresh!(prm, cx, lay, m, n, p, r, tid);
    let (chunk, s_len, nc) = (cx.c, cx.s_len, cx.nc);
    // SAFETY (whole body): the launch contract; phases are separated by block barriers and each
    // shared word written in a phase is touched by no other thread in it.
    unsafe {
        forward_sweep::<X, G>(prm);
        fresh!(prm, cx, lay, m, n, p, r, tid);

        let mut e = tid;
        while e < p * lay.sn {
            st_shared_f32(cx.sm(lay.g, e), 0.0);
            e += T;
        }
        for (region, len) in [
            (lay.suffix, cx.na),
            (lay.acc_qk, 2 * r * n),
            (lay.acc_mv, r * p),
            (lay.acc_w, WARPS * 4 * p),
        ] {
            let mut e = tid;
            while e < len {
                st_shared_f32(cx.sm(region, e), 0.0);
                e += T;
            }
        }
        if tid == 0 {
            st_shared_u32(cx.sm(lay.misc, PEND), NONE);
            st_shared_u32(cx.sm(lay.misc, PEND + 5), NONE);
        }

        let mut c = nc;
        while c > 0 {
            c -= 1;
            let t0 = c * chunk as usize;
            let len = (s_len - t0).min(chunk as usize) as u32;
            let valid = len << cx.rs;
            let h = cx.h;

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 0: the state entering the chunk, q̂ / k̂ / x, the token scalars.
            if c == 0 && cx.nc > 1 {
                let mut e = tid;
                while e < p * lay.sn {
                    st_shared_f32(cx.sm(lay.hs, e), 0.0);
                    e += T;
                }
            } else if c + 1 != cx.nc {
                copy_rows(
                    &cx,
                    prm.ckpt + 4 * cx.ckpt(c) as u64,
                    p * n,
                    n,
                    lay.hs,
                    lay.sn,
                );
            }
            stage::<X>(prm, &cx, t0, len, true, Angles::Global);
            token_scalars::<X>(prm, &cx, t0, len);
            // tanh of the angle logits, for the reverse running sum of ∂θ (phase 11).
            let mut e = tid;
            while e < len * cx.na {
                let tt = e / cx.na;
                let j = e - tt * cx.na;
                let th = tanh(ldg(prm.angles, cx.angle(t0 + tt as usize, j)));
                st_shared_f32(cx.sm(lay.dtha, e), th);
                e += T;
            }
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 1: raw scores, inter outputs q̂·H̃ᵀ (into ds), ⟨G, H̃⟩.
            if c > 0 {
                prefetch_chunk::<X>(prm, &cx, c - 1, true);
            }
            prod::<X, 2, 4, SPLIT_Y>(
                (m, m),
                cx.warps(),
                &plain(
                    cx.rows(lay.qh, lay.sn),
                    cx.rows(lay.kh, lay.sn),
                    |_: RowSpan| 0..n,
                ),
                |i, j, v| cx.store_causal(lay.sc, i, j, v),
            );
            prod::<X, 2, 4, SPLIT_Y>(
                (m, p),
                cx.warps(),
                &plain(
                    cx.rows(lay.qh, lay.sn),
                    cx.rows(lay.hs, lay.sn),
                    |_: RowSpan| 0..n,
                ),
                |i, pp, v| st_shared_f32(cx.sm(lay.ds, i * lay.sp + pp), v),
            );
            let mut gh = 0.0f32;
            let mut e = tid;
            while e < p * n {
                let pp = e / n;
                let nn = e - pp * n;
                let o = pp * lay.sn + nn;
                gh += ld_shared_f32(cx.sm(lay.g, o)) * ld_shared_f32(cx.sm(lay.hs, o));
                e += T;
            }
            block_partials(&cx, gh);
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 2: y = e^{A_t}·(q̂·H̃ᵀ) + (W ⊙ S)·X + D·x into dl.
            if tid == 0 {
                st_shared_f32(cx.sm(lay.misc, GH), block_total(&cx));
            }
            prod::<X, 2, 4, SPLIT_Y>(
                (m, p),
                cx.warps(),
                &Term {
                    a: cx.rows(lay.sc, lay.sm),
                    b: cx.cols(lay.x, lay.sp),
                    ks: |span: RowSpan| 0..cx.causal_end(span),
                    wa: |i, j| cx.w(cx.row_tok(i), cx.row_tok(j)),
                    wb: |_| 1.0,
                },
                |i, pp, v| {
                    let o = i * lay.sp + pp;
                    let y = cx.ts(EA, cx.row_tok(i)) * ld_shared_f32(cx.sm(lay.ds, o))
                        + v
                        + cx.d_h * ld_shared_f32(cx.sm(lay.x, o));
                    st_shared_f32(cx.sm(lay.dl, o), y);
                },
            );
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 3: the output-stage backward.
            output_backward::<X>(prm, &cx, t0, len);
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 4: ∂z.
            if prm.z != 0 {
                let mut e = tid;
                while e < len * p {
                    let tt = e / p;
                    let pp = e - tt * p;
                    let mut dz = 0.0f32;
                    let mut rr = 0;
                    while rr < r {
                        let mz = ldg(
                            prm.mimo_z,
                            (h * r as usize + rr as usize) * p as usize + pp as usize,
                        );
                        dz += ld_shared_f32(cx.sm(lay.ds, ((tt << cx.rs) + rr) * lay.sp + pp)) * mz;
                        rr += 1;
                    }
                    X::store(prm.dz, cx.vz(t0 + tt as usize, pp), dz);
                    e += T;
                }
                sync_threads();
            }

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 5: Dₛ = Δ·Xᵀ (raw, causal).
            prod::<X, 2, 4, SPLIT_ADJOINTS>(
                (m, m),
                cx.warps(),
                &plain(
                    cx.rows(lay.dl, lay.sp),
                    cx.rows(lay.x, lay.sp),
                    |_: RowSpan| 0..p,
                ),
                |i, j, v| cx.store_causal(lay.ds, i, j, v),
            );
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 6: m(t, s) = Σ_{r, r'} S ⊙ Dₛ over each token pair.
            let mut e = tid;
            while e < chunk * chunk {
                let tt = e / chunk;
                let ss = e - tt * chunk;
                let mut acc = 0.0f32;
                if ss <= tt && tt < len {
                    let mut ra = 0;
                    while ra < r {
                        let i = (tt << cx.rs) + ra;
                        let mut rb = 0;
                        while rb < r {
                            let o = i * lay.sm + (ss << cx.rs) + rb;
                            acc +=
                                ld_shared_f32(cx.sm(lay.sc, o)) * ld_shared_f32(cx.sm(lay.ds, o));
                            rb += 1;
                        }
                        ra += 1;
                    }
                }
                st_shared_f32(cx.sm(lay.pm, e), acc);
                e += T;
            }
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 7: Dₛ ← W ⊙ Dₛ; the intra-chunk parts of ∂A and ∂c per token.
            let mut e = tid;
            while e < m * m {
                let i = e / m;
                let j = e - i * m;
                let a = cx.sm(lay.ds, i * lay.sm + j);
                st_shared_f32(a, ld_shared_f32(a) * cx.w(cx.row_tok(i), cx.row_tok(j)));
                e += T;
            }
            if tid < len {
                let t = tid;
                let pm = |a: u32, bb: u32| ld_shared_f32(cx.sm(lay.pm, a * chunk + bb));
                let (mut row_sum, mut col_sum, mut dci) = (0.0f32, 0.0f32, 0.0f32);
                let mut s = 0;
                while s < t {
                    row_sum += cx.w(t, s) * pm(t, s);
                    s += 1;
                }
                let mut u = t + 1;
                while u < len {
                    col_sum += cx.w(u, t) * pm(u, t);
                    dci += cx.e(u, t) * pm(u, t);
                    u += 1;
                }
                st_shared_f32(cx.tok(DAI, t), row_sum - col_sum);
                st_shared_f32(cx.tok(DCI, t), dci);
                st_shared_f32(cx.tok(DG, t), pm(t, t));
            }
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 8: ∂Q̂ = diag(e^{A})·Δ·H̃ + (W ⊙ Dₛ)·K̂ to dqh.
            prod2::<X, 4, 4, SPLIT_ADJOINTS>(
                (m, n),
                cx.warps(),
                &plain(
                    cx.rows(lay.dl, lay.sp),
                    cx.cols(lay.hs, lay.sn),
                    |_: RowSpan| 0..p,
                ),
                &plain(
                    cx.rows(lay.ds, lay.sm),
                    cx.cols(lay.kh, lay.sn),
                    |span: RowSpan| 0..cx.causal_end(span),
                ),
                |i, nn, inter, intra| {
                    if i < valid {
                        let tt = cx.row_tok(i);
                        let dst = cx.qkh(t0 + tt as usize, i & (r - 1));
                        stg(prm.dqh, dst + nn as usize, cx.ts(EA, tt) * inter + intra);
                    }
                },
            );
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 9: ∂K̂ to dkh with the state-pass partials sp; ∂X into hs.
            let intra_term = plain(
                cx.cols(lay.ds, lay.sm),
                cx.cols(lay.qh, lay.sn),
                |span: RowSpan| cx.causal_start(span)..m,
            );
            let xg_term = plain(
                cx.rows(lay.x, lay.sp),
                cx.cols(lay.g, lay.sn),
                |_: RowSpan| 0..p,
            );
            if tensor_products::<X>() {
                // Warp w takes row group w mod G (G = ⌈M/16⌉) and every (WARPS/G)-th column
                // strip from w div G, so its state-pass partials of a row sum over its strips in
                // registers: one partial per (row, warp of the group), slot w div G.
                let groups = m.div_ceil(16);
                let per_group = sp_slots::<X>(m, n);
                let (group, slot) = (cx.warp % groups, cx.warp / groups);
                let strips = n.div_ceil(8 * SP_NB as u32);
                let mut sp_half = [0.0f32; 2];
                let mut strip = if slot < per_group { slot } else { strips };
                while strip < strips {
                    let tile = &MmaTile {
                        row0: 16 * group,
                        col0: strip * 8 * SP_NB as u32,
                        rows: m,
                        cols: n,
                        strip,
                    };
                    strip += per_group;
                    let mut intra = [[0.0f32; 4]; SP_NB];
                    let mut xg = [[0.0f32; 4]; SP_NB];
                    mma_term::<SP_NB, SPLIT_ADJOINTS>(&mut intra, tile, cx.lane, &intra_term);
                    mma_term::<SP_NB, SPLIT_ADJOINTS>(&mut xg, tile, cx.lane, &xg_term);
                    // Accumulator slots 2·half and 2·half + 1 hold row `g + 8·half`.
                    for (half, sp) in sp_half.iter_mut().enumerate() {
                        let (j, _, _) = tile.at(cx.lane, 0, 2 * half);
                        let jc = j.min(m - 1);
                        let tt = cx.row_tok(jc);
                        let coef = cx.ts(CKEY, tt) * cx.ts(EE, tt);
                        let dst = cx.qkh(t0 + tt as usize, jc & (r - 1));
                        for nb in 0..SP_NB {
                            for s in 2 * half..2 * half + 2 {
                                let (_, col, inside) = tile.at(cx.lane, nb, s);
                                if inside {
                                    let kh = ld_shared_f32(cx.sm(lay.kh, jc * lay.sn + col));
                                    *sp += xg[nb][s] * kh;
                                    if j < valid {
                                        stg(
                                            prm.dkh,
                                            dst + col as usize,
                                            intra[nb][s] + coef * xg[nb][s],
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
                if slot < per_group {
                    for (half, v) in sp_half.iter().enumerate() {
                        let sp = warp_reduce::quad_sum(*v);
                        let (row, col) = acc_m16n8(cx.lane, 2 * half as u32);
                        let j = 16 * group + row;
                        if j < m && col == 0 {
                            st_shared_f32(cx.sm(lay.row, (1 + slot) * m + j), sp);
                        }
                    }
                }
            } else {
                for_each_tile::<4>(m, n, cx.warp, WARPS, cx.lane, |tile| {
                    let mut intra = [[0.0f32; 4]; 4];
                    let mut xg = [[0.0f32; 4]; 4];
                    mac_term(&mut intra, tile, &intra_term);
                    mac_term(&mut xg, tile, &xg_term);
                    for a in 0..4 {
                        let j = tile.rows[a];
                        let tt = cx.row_tok(j);
                        let coef = cx.ts(CKEY, tt) * cx.ts(EE, tt);
                        let mut sp = 0.0f32;
                        for u in 0..4 {
                            if tile.col_ok[u] {
                                sp += xg[a][u]
                                    * ld_shared_f32(cx.sm(lay.kh, j * lay.sn + tile.cols[u]));
                            }
                        }
                        let sp = warp_reduce::sum(sp);
                        if tile.row_ok[a] && j < valid {
                            if cx.lane == 0 {
                                st_shared_f32(cx.sm(lay.row, (1 + tile.strip) * m + j), sp);
                            }
                            let dst = cx.qkh(t0 + tt as usize, j & (r - 1));
                            for u in 0..4 {
                                if tile.col_ok[u] {
                                    stg(
                                        prm.dkh,
                                        dst + tile.cols[u] as usize,
                                        intra[a][u] + coef * xg[a][u],
                                    );
                                }
                            }
                        }
                    }
                });
            }
            prod2::<X, 2, 4, SPLIT_ADJOINTS>(
                (m, p),
                cx.warps(),
                &Term {
                    a: cx.cols(lay.sc, lay.sm),
                    b: cx.cols(lay.dl, lay.sp),
                    ks: |span: RowSpan| cx.causal_start(span)..m,
                    wa: |j, i| cx.w(cx.row_tok(i), cx.row_tok(j)),
                    wb: |_| 1.0,
                },
                &plain(
                    cx.rows(lay.kh, lay.sn),
                    cx.rows(lay.g, lay.sn),
                    |_: RowSpan| 0..n,
                ),
                |j, pp, intra, kg| {
                    let tt = cx.row_tok(j);
                    let coef = cx.ts(CKEY, tt) * cx.ts(EE, tt);
                    let o = j * lay.sp + pp;
                    let dx = intra + coef * kg + cx.d_h * ld_shared_f32(cx.sm(lay.dl, o));
                    st_shared_f32(cx.sm(lay.hs, o), dx);
                },
            );
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 10: G ← e^{A_e}·G + Σ_i e^{A_t} δ_i q̂_iᵀ; the inverse rotation of ∂q̂ / ∂k̂
            // with ∂θ; ∂v and ∂mimo_v.
            let decay = cx.ts(EA, len - 1);
            prod::<X, 4, 4, SPLIT_ADJOINTS>(
                (p, n),
                cx.warps(),
                &Term {
                    a: cx.cols(lay.dl, lay.sp),
                    b: cx.cols(lay.qh, lay.sn),
                    ks: |_: RowSpan| 0..valid,
                    wa: |_, i| cx.ts(EA, cx.row_tok(i)),
                    wb: |_| 1.0,
                },
                |pp, nn, v| {
                    let addr = cx.sm(lay.g, pp * lay.sn + nn);
                    st_shared_f32(addr, decay * ld_shared_f32(addr) + v);
                },
            );
            // One thread per (token, rotation pair): every rank of q and k, ∂θ of the pair.
            let half = n / 2;
            let mut e = tid;
            while e < len * half {
                let tt = e / half;
                let j = e - tt * half;
                let t = t0 + tt as usize;
                let (ia, ib) = cx.pair(j);
                let rotated = j < cx.na;
                let (co, si) = if rotated {
                    let ci = cx.cs(t, j);
                    (ldg(prm.cs, ci), ldg(prm.cs, ci + cx.na as usize))
                } else {
                    (1.0, 0.0)
                };
                // ∂q̂ then ∂k̂ of the pair for every rank, loaded before any store. Ranks of a
                // (B,S,R,H,N) token are H·N elements apart.
                let (o0, rank_stride) = (cx.qkh(t, 0), cx.heads * n as usize);
                let mut d = [[0.0f32; 4]; 8];
                for (rr, dr) in d.iter_mut().enumerate() {
                    if (rr as u32) < r {
                        let o = o0 + rr * rank_stride;
                        *dr = [
                            ldg(prm.dqh, o + ia as usize),
                            ldg(prm.dqh, o + ib as usize),
                            ldg(prm.dkh, o + ia as usize),
                            ldg(prm.dkh, o + ib as usize),
                        ];
                    }
                }
                let mut dtheta = 0.0f32;
                for (rr, dr) in d.iter().enumerate() {
                    if (rr as u32) < r {
                        let i = (tt << cx.rs) + rr as u32;
                        let o = o0 + rr * rank_stride;
                        for (hat, out, du, dw) in [
                            (lay.qh, prm.dqh, dr[0], dr[1]),
                            (lay.kh, prm.dkh, dr[2], dr[3]),
                        ] {
                            let (da, db) = if rotated {
                                let ha = ld_shared_f32(cx.sm(hat, i * lay.sn + ia));
                                let hb = ld_shared_f32(cx.sm(hat, i * lay.sn + ib));
                                dtheta += dw * ha - du * hb;
                                (du * co + dw * si, dw * co - du * si)
                            } else {
                                (du, dw)
                            };
                            stg(out, o + ia as usize, da);
                            stg(out, o + ib as usize, db);
                        }
                    }
                }
                if rotated {
                    st_shared_f32(cx.sm(lay.dth, tt * cx.na + j), dtheta);
                }
                e += T;
            }
            let mut e = tid;
            while e < len * p {
                let tt = e / p;
                let pp = e - tt * p;
                let mut dv = 0.0f32;
                let mut rr = 0;
                while rr < r {
                    let dx = ld_shared_f32(cx.sm(lay.hs, ((tt << cx.rs) + rr) * lay.sp + pp));
                    dv += dx * ldg(prm.mimo_v, h * (r * p) as usize + (rr * p + pp) as usize);
                    rr += 1;
                }
                X::store(prm.dv, cx.vz(t0 + tt as usize, pp), dv);
                e += T;
            }
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 11: the bias and mimo_v partials of the chunk (one thread per element, tokens
            // in order).
            // Consecutive tokens of a (B,S,R,H,N) row are R·H·N elements apart.
            let token_stride = r as usize * cx.heads * n as usize;
            for (src, region) in [(prm.dqh, lay.acc_qk), (prm.dkh, lay.acc_qk + r * n)] {
                let mut e = tid;
                while e < r * n {
                    let rr = e / n;
                    let nn = e - rr * n;
                    let mut acc = 0.0f32;
                    let mut o = cx.qkh(t0, rr) + nn as usize;
                    let mut tt = 0;
                    while tt < len {
                        acc += ldg(src, o);
                        o += token_stride;
                        tt += 1;
                    }
                    let a = cx.sm(region, e);
                    st_shared_f32(a, ld_shared_f32(a) + acc);
                    e += T;
                }
            }
            let mut e = tid;
            while e < r * p {
                let rr = e / p;
                let pp = e - rr * p;
                let mut acc = 0.0f32;
                // Consecutive tokens of a (B,S,H,P) row are H·P elements apart.
                let token_stride = cx.heads * p as usize;
                let mut o = cx.vz(t0, pp);
                let mut tt = 0;
                while tt < len {
                    let dx = ld_shared_f32(cx.sm(lay.hs, ((tt << cx.rs) + rr) * lay.sp + pp));
                    acc += dx * X::load(prm.v, o);
                    o += token_stride;
                    tt += 1;
                }
                let a = cx.sm(lay.acc_mv, e);
                st_shared_f32(a, ld_shared_f32(a) + acc);
                e += T;
            }
            fresh!(prm, cx, lay, m, n, p, r, tid);
            // The reverse running sum of ∂θ into the angle-logit gradient and the θ part of ∂Δ
            // (dtha holds tanh of the logits from phase 0); the per-token ∂c, ∂A, ∂γ.
            if tid < cx.na {
                let j = tid;
                let a = cx.sm(lay.suffix, j);
                let mut suffix = ld_shared_f32(a);
                let mut tt = len;
                while tt > 0 {
                    tt -= 1;
                    let t = t0 + tt as usize;
                    suffix += ld_shared_f32(cx.sm(lay.dth, tt * cx.na + j));
                    let a_th = cx.sm(lay.dtha, tt * cx.na + j);
                    let th = ld_shared_f32(a_th);
                    stg(
                        prm.dangles,
                        cx.angle(t, j),
                        suffix * PI * cx.ts(DTV, tt) * (1.0 - th * th),
                    );
                    st_shared_f32(a_th, suffix * PI * th);
                }
            }
            if tid < len {
                let t = tid;
                let mut sp = 0.0f32;
                let mut inter = 0.0f32;
                let mut rr = 0;
                while rr < r {
                    let i = (t << cx.rs) + rr;
                    inter += ld_shared_f32(cx.sm(lay.row, i));
                    let mut s = 0;
                    while s < sp_slots::<X>(m, n) {
                        sp += ld_shared_f32(cx.sm(lay.row, (1 + s) * m + i));
                        s += 1;
                    }
                    rr += 1;
                }
                let spt = cx.ts(EE, t) * sp;
                let dc = cx.ts(DCI, t) + spt;
                st_shared_f32(cx.tok(SPT, t), spt);
                st_shared_f32(cx.tok(DC, t), dc);
                st_shared_f32(cx.tok(DA, t), cx.ts(DAI, t) + inter - cx.ts(CKEY, t) * spt);
                st_shared_f32(cx.tok(DG, t), cx.ts(DG, t) + dc);
            }
            sync_threads();

            fresh!(prm, cx, lay, m, n, p, r, tid);
            // Phase 12: ∂a (reverse running sum of ∂A in the chunk, plus the state pass's ∂A_e),
            // ∂Δ and ∂trap; the first token waits for ∂ε from the chunk before. The running sum of
            // ∂θ for the chunk before.
            if c > 0 && cx.na > 0 {
                boundary_dtheta(prm, &cx, c);
            }
            if tid < len {
                let u = tid;
                let last = len - 1;
                let mut dadt = 0.0f32;
                let mut t = u;
                while t < len {
                    dadt += cx.ts(DA, t);
                    t += 1;
                }
                let mut dae = ld_shared_f32(cx.sm(lay.misc, GH)) * cx.ts(EA, last);
                let mut s = 0;
                while s < len {
                    dae += cx.ts(CKEY, s) * cx.ts(SPT, s);
                    s += 1;
                }
                dadt += dae;
                let tg = t0 + u as usize;
                stg(prm.dadt, cx.row + tg, dadt);
                let (lam, dt) = (cx.ts(LAM, u), cx.ts(DTV, u));
                let mut angle_part = 0.0f32;
                let mut jj = 0;
                while jj < cx.na {
                    angle_part += ld_shared_f32(cx.sm(lay.dtha, u * cx.na + jj));
                    jj += 1;
                }
                let dg = cx.ts(DG, u);
                let ddt0 = dg * lam + angle_part;
                let dlam0 = dg * dt;
                let finish = |tg: usize, ddt0: f32, dlam0: f32, lam: f32, dt: f32, deps: f32| {
                    stg(prm.ddt, cx.row + tg, ddt0 + deps * (1.0 - lam));
                    let dlam = dlam0 - deps * dt;
                    X::store(prm.dtrap, cx.row + tg, dlam * lam * (1.0 - lam));
                };
                if u > 0 {
                    finish(tg, ddt0, dlam0, lam, dt, cx.ts(DC, u - 1));
                } else if c == 0 {
                    finish(tg, ddt0, dlam0, lam, dt, 0.0);
                } else {
                    let o = PEND + 5 * (c as u32 & 1);
                    st_shared_u32(cx.sm(lay.misc, o), tg as u32);
                    st_shared_f32(cx.sm(lay.misc, o + 1), ddt0);
                    st_shared_f32(cx.sm(lay.misc, o + 2), dlam0);
                    st_shared_f32(cx.sm(lay.misc, o + 3), lam);
                    st_shared_f32(cx.sm(lay.misc, o + 4), dt);
                }
                if u == last {
                    let o = PEND + 5 * ((c as u32 + 1) & 1);
                    let tp = ld_shared_u32(cx.sm(lay.misc, o));
                    if tp != NONE {
                        finish(
                            tp as usize,
                            ld_shared_f32(cx.sm(lay.misc, o + 1)),
                            ld_shared_f32(cx.sm(lay.misc, o + 2)),
                            ld_shared_f32(cx.sm(lay.misc, o + 3)),
                            ld_shared_f32(cx.sm(lay.misc, o + 4)),
                            cx.ts(DC, u),
                        );
                        st_shared_u32(cx.sm(lay.misc, o), NONE);
                    }
                }
            }
            sync_threads();
        }

        // This block's parameter-gradient slot.
        let sl = BackwardSlots::new(r, n, p);
        let base = cx.bh * sl.len as usize;
        for (region, off, len) in [
            (lay.acc_qk, sl.q_bias, r * n),
            (lay.acc_qk + r * n, sl.k_bias, r * n),
            (lay.acc_mv, sl.mimo_v, r * p),
        ] {
            let mut e = tid;
            while e < len {
                stg(
                    prm.slots,
                    base + (off + e) as usize,
                    ld_shared_f32(cx.sm(region, e)),
                );
                e += T;
            }
        }
        // Output-stage partials: warp w holds rank w mod R; summed in warp order.
        let mut e = tid;
        while e < r * p {
            let rr = e / p;
            let pp = e - rr * p;
            let (mut mo, mut mz) = (0.0f32, 0.0f32);
            let mut w = rr;
            while w < WARPS {
                let a = lay.acc_w + w * 4 * p;
                mo += ld_shared_f32(cx.sm(a, pp));
                mz += ld_shared_f32(cx.sm(a, p + pp));
                w += r;
            }
            stg(prm.slots, base + (sl.mimo_o + e) as usize, mo);
            stg(prm.slots, base + (sl.mimo_z + e) as usize, mz);
            e += T;
        }
        let mut pp = tid;
        while pp < p {
            let mut nw = 0.0f32;
            let mut w = 0;
            while w < WARPS {
                nw += ld_shared_f32(cx.sm(lay.acc_w + w * 4 * p, 2 * p + pp));
                w += 1;
            }
            stg(prm.slots, base + (sl.norm + pp) as usize, nw);
            pp += T;
        }
        if tid == 0 {
            let mut dd = 0.0f32;
            let mut w = 0;
            while w < WARPS {
                let mut pp = 0;
                while pp < p {
                    dd += ld_shared_f32(cx.sm(lay.acc_w + w * 4 * p, 3 * p + pp));
                    pp += 1;
                }
                w += 1;
            }
            stg(prm.slots, base + sl.d as usize, dd);
        }
    }
}

// Every global access above goes through `Elem`, and the entry points exist only on the device, so
// that the host test `tests/backward_emulated.rs` can compile this file against emulated
// primitives.
macro_rules! backward_chunked_entries {
    ($name:ident, $x:ty, $geometry:ty) => {
        /// Chunked backward entry point (see the module's launch contract).
        ///
        /// # Safety
        /// The module's launch contract.
        #[cfg(target_arch = "nvptx64")]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(params: BackwardParams) {
            // SAFETY: forwarded launch contract.
            unsafe { backward_chunked::<$x, $geometry>(&params) }
        }
    };
}

backward_chunked_entries!(backward_chunked_f32, f32, AnyGeometry);
backward_chunked_entries!(backward_chunked_bf16, Bf16, AnyGeometry);
/// The fixed instantiation: the benchmark's R = 4, N = 128, P = 64, Na = 32 (any chunk length),
/// launched only for calls with exactly these (host `Kernel::backward_chunked_fixed`). A fixed
/// chunk length too made the kernel spill.
pub type FixedBackward = FixedRankGeometry<4, 128, 64, 32, 0>;

backward_chunked_entries!(
    backward_chunked_fixed_f32_r4_n128_p64_na32,
    f32,
    FixedBackward
);
backward_chunked_entries!(
    backward_chunked_fixed_bf16_r4_n128_p64_na32,
    Bf16,
    FixedBackward
);
