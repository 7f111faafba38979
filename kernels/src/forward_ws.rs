//! Mamba-3 MIMO chunked forward (spec §2.2, §2.3) on Hopper's warpgroup tensor cores, warp
//! specialized, for the tensor-core geometry: R = 4, N = 128, P = 64, Na = 32, C = 16, bf16
//! activations, the half-split rotation, the gated output (`output_mode::GATED`).
//!
//! A block of three warpgroups runs two units (heads `2x`, `2x + 1` of one batch row and
//! sequence segment; both in one q/k group, so they read the same raw q and k rows):
//!
//! * **the producer** (warpgroup 0) stages each chunk's raw rows with `cp.async` (q and k
//!   double-buffered, v in three slots; one chunk ahead) and writes each unit's q̂ and k̂ tiles
//!   (biased, rotated; bf16, 128-byte swizzled);
//! * **two consumers** (warpgroups 1 and 2, one per unit) hold the unit's state `H` (P×N, f32) as
//!   `wgmma` accumulators and run each chunk's products as warpgroup `wgmma`: the scores
//!   `q̂·k̂ᵀ` (while they run, the consumer writes its own x = v·mimo_v and x_w = x·exp(Ā_i)·c_i
//!   tiles from the staged v rows), the inter-chunk outputs `H·q̂ᵀ` with `H` itself (rounded to
//!   bf16) as the register A operand, the state pass `H ← exp(A_last)·H + x_wᵀ·k̂`, then the
//!   intra-chunk outputs `xᵀ·Sᵀ` from the weighted scores; then the gate and the rank
//!   contraction; then, two chunks ahead, the unit's per-chunk tables: the token scalars, the
//!   score weights, the key scales, and the angles' cosines and sines that the producer's
//!   rotation reads (θ summed through the chunk in f64 across the four warps' time groups).
//!
//! The outputs are formed transposed, `Yᵀ` (P × 64 rows of the chunk), and the chunk's rows are
//! ordered by `forward_ws_smem::tile_row`, so that each consumer thread's accumulator columns hold
//! all four ranks of four times: the rank contraction is in-thread, with no exchange. D·x enters
//! as D on the diagonal of the weighted scores (x's own row of the intra product).
//!
//! Hand-offs: for each unit a `full` named barrier (the producer arrives once the unit's tiles of
//! a chunk are written and fenced for the async proxy; the consumer waits) and an `empty` one (the
//! consumer arrives once its products have read them, and once before the first chunk; the
//! producer waits before each fill, which also orders the chunk's cosines and sines before it).
//! The per-chunk tables are double-banked by chunk parity: the consumer writes chunk k + 2's in
//! chunk k's epilogue, after its own last read of chunk k's and after the producer's fill of
//! chunk k (before `full`). The two consumers are half a chunk apart: while one runs its
//! products, the other runs its epilogue and the producer fills the first's next tiles.
//!
//! Checkpoints (the `_ckpt_` instantiation, a training step's forward): each consumer stores the
//! state entering each chunk (as bf16, the inter-chunk product's rounding) at the end of the
//! previous chunk's iteration, and θ entering each chunk as it forms that chunk's tables.
//!
//! The segment-state pass of a split call (`segment_state_ws_*`, `STATES`): the same roles and
//! hand-offs with the producer staging and filling k̂ alone (each half-warp two of a row's four
//! times) and each consumer running its head's state pass alone (x_w, the decay, the state
//! product, the tables without the score weights), from a zero state and zero angles; it writes
//! each segment's end state, angle total and decay into the hand-off slots that the combine pass
//! reads (the format of `chunked_forward_mma`'s pass, which it replaces for the calls this kernel
//! runs).
//!
//! Precision: as the `mma.sync` tensor-core kernel (`chunked_forward_mma`): q̂ and k̂ biased and
//! rotated in f32 and rounded once (biases rounded to bf16 first, as upstream casts them, added
//! the same error to every token of a head, which the state accumulates: 1.01e-2 at S = 1000
//! against 2.8e-3), with D rounded into the diagonal of the weighted scores.
//!
//! Status: correct (CPU emulation with happens-before race checks; H100 GPU suite) and on an H100
//! 20–38% faster than the tensor-core forward's `wgmma` twin (H=64 B=8 S=2048: 1067–1069 against
//! ~1720 µs), bound by the consumers (their epilogue is two thirds of their time) and close to
//! issue-bound (an IPC of 2.35 of 4): instruction count is what moves it, hence the load addresses
//! formed once per row and stepped by a token stride, the 16-byte fill and `stmatrix`. The host
//! runs it by default on compute capability 9.0 (`Gpu::set_warp_specialized_kernels`), a training
//! forward through the `_ckpt_` instantiation, so that both give the same outputs bit for bit; see
//! `notes/forward-fma.md`, v16–v19.
//!
//! # Launch contract
//! Grid `(H/2, B, K)` (K segments, [`ForwardParams::segments`]), block
//! `mamba3_abi::FORWARD_WS_THREADS`, dynamic shared memory `forward_ws_smem::BYTES`, compute
//! capability 9.0 (the `sm_90a` module); the geometry, dtype, rotation and mode above, H/G even,
//! B·S·H < 2^32 (token and token-head indices are formed in 32-bit arithmetic),
//! no initial state, checkpoint pointers only for the `_ckpt_` kernel; q, k, v, the angle logits,
//! the output, the final k̂ and v 16-byte aligned, the final and hand-off SSM states 8-byte
//! aligned; every pointer valid for its documented shape (the host validates). Segments other
//! than the first start from the hand-off slots of the segment-state and combine passes.

use mamba3_abi::{forward_ws_smem as L, ForwardParams};

use crate::angles::{
    angle_increment_f32, reduced_near_f32, rotate_pair, stored_f32, wrap_two_pi_f64,
};
use crate::arch::barrier::{bar_arrive, bar_sync, setmaxnreg_dec, setmaxnreg_inc};
use crate::arch::cp_async::{commit_group, cp_async_cg_16_zfill, wait_group};
use crate::arch::float::{fma_rn, pack_bf16x2, sincos_approx};
use crate::arch::global::{ld_global_v2_f32, st_global_v2_f32, st_global_v4_f32};
use crate::arch::ldmatrix::stmatrix_x4;
use crate::arch::sreg::{
    block_and_thread_fresh, block_x, block_y, block_z, fresh_u32, ld_shared_f32, ld_shared_u32,
    ld_shared_v4_f32, shfl_idx_f32, shfl_xor_f32, smem_base, st_shared_f32, st_shared_u32,
    st_shared_v2_f32, st_shared_v4_f32, thread_x,
};
use crate::arch::wgmma;
use crate::elem::{ldg, stg, Bf16, Elem};
use crate::math::{exp, mul_silu_half_tanh_approx};

/// [`bar_sync`] (`sync`) or [`bar_arrive`] (`arrive`) on named barrier `$id` for unit 0 and
/// `$id + 1` for unit 1 (`$unit`): each unit (a consumer and its share of the producer) owns one
/// of each pair. A macro, so that the id stays an immediate (a const generic `ID + 1` needs an
/// unstable feature) and the branch stays the caller's, as written out by hand.
macro_rules! bar_unit {
    (sync, $id:expr, $threads:expr, $unit:expr) => {
        if $unit == 0 {
            bar_sync::<{ $id }, { $threads }>()
        } else {
            bar_sync::<{ $id + 1 }, { $threads }>()
        }
    };
    (arrive, $id:expr, $threads:expr, $unit:expr) => {
        if $unit == 0 {
            bar_arrive::<{ $id }, { $threads }>()
        } else {
            bar_arrive::<{ $id + 1 }, { $threads }>()
        }
    };
}

/// A bf16 element as loaded (its bits), converted where it is used.
type Bf16Bits = <Bf16 as Elem>::Raw;

/// A value as loaded, passed through an opaque copy where it is used, so that nothing derived
/// from it (a conversion) is moved up to the load, where the warp would wait for it.
trait KeptAsLoaded: Copy {
    fn kept(self) -> Self;
}

impl KeptAsLoaded for u32 {
    #[inline(always)]
    fn kept(self) -> u32 {
        fresh_u32(self)
    }
}

impl KeptAsLoaded for f32 {
    #[inline(always)]
    fn kept(self) -> f32 {
        f32::from_bits(fresh_u32(self.to_bits()))
    }
}

const R: u32 = 4;
const N: u32 = 128;
const P: u32 = 64;
const NA: u32 = 32;
const C: u32 = 16;

/// Named barriers: `FULL + u` and `EMPTY + u` (producer and consumer `u`, 256 threads), the
/// consumer's own `CONSUMER + u` (128) and the producer's own [`PRODUCER`] (128).
const FULL: u32 = 1;
const EMPTY: u32 = 3;
const CONSUMER: u32 = 5;
const PRODUCER: u32 = 7;

/// Registers per thread after `setmaxnreg`: the producer releases to the two consumers. A block
/// only redistributes what it was launched with, 168 per thread (`.maxntid 384`,
/// `.minnctapersm 1`): asking for more makes the consumers' `setmaxnreg.inc` wait forever.
const PRODUCER_REGS: u32 = 104;
const CONSUMER_REGS: u32 = 200;
const _: () = assert!(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * 168);

/// A 16-byte aligned shared-memory base: the dynamic base rounded up to `L::ALIGN`.
#[inline(always)]
pub(crate) fn layout_base() -> u32 {
    (smem_base() + L::ALIGN - 1) & !(L::ALIGN - 1)
}

/// What every warpgroup knows of the block's work (also the f32 kernel's, `crate::forward_ws_f32`,
/// whose block runs one head).
#[derive(Clone, Copy)]
pub(crate) struct Work {
    /// Batch row, segment, segments.
    pub(crate) b: usize,
    pub(crate) seg: usize,
    pub(crate) segments: usize,
    /// The block's first head (its units' heads `h0`, `h0 + 1`, …) and their q/k group.
    pub(crate) h0: usize,
    pub(crate) g: usize,
    /// S, H, G.
    pub(crate) s_len: usize,
    pub(crate) heads: usize,
    pub(crate) groups: usize,
    /// The segment's tokens `[t_begin, t_end)`.
    pub(crate) t_begin: u32,
    pub(crate) t_end: u32,
}

impl Work {
    #[inline(always)]
    fn new(prm: &ForwardParams) -> Self {
        Self::of_block(prm, block_x(), block_y(), block_z())
    }

    /// The work of block `(x, y, z)`: heads `2x`, `2x + 1`, batch row `y`, segment `z`.
    #[inline(always)]
    fn of_block(prm: &ForwardParams, x: u32, y: u32, z: u32) -> Self {
        Self::of_block_heads::<2>(prm, x, y, z)
    }

    /// The work of block `(x, y, z)` of a kernel whose blocks run `HEADS` heads each: heads
    /// `HEADS·x …`, batch row `y`, segment `z`.
    #[inline(always)]
    pub(crate) fn of_block_heads<const HEADS: usize>(
        prm: &ForwardParams,
        x: u32,
        y: u32,
        z: u32,
    ) -> Self {
        let (heads, groups) = (prm.heads as usize, prm.groups as usize);
        let h0 = HEADS * x as usize;
        // Fresh copies: each role forms its work after `setmaxnreg`, so nothing derived from the
        // parameters is computed once before it and held across.
        let segments = fresh_u32(prm.segments).max(1) as usize;
        let (b, seg) = (y as usize, z as usize);
        let (t_begin, t_end) = if segments > 1 {
            let span = fresh_u32(prm.seg_chunks) * C;
            (
                (seg as u32 * span).min(prm.seq_len),
                ((seg as u32 + 1) * span).min(prm.seq_len),
            )
        } else {
            (0, prm.seq_len)
        };
        Work {
            b,
            seg,
            segments,
            h0,
            g: h0 / (heads / groups),
            s_len: prm.seq_len as usize,
            heads,
            groups,
            t_begin,
            t_end,
        }
    }

    /// Chunks of the segment.
    #[inline(always)]
    pub(crate) fn chunks(&self) -> u32 {
        (self.t_end - self.t_begin).div_ceil(C)
    }

    /// First token and length of chunk `k`.
    #[inline(always)]
    pub(crate) fn chunk(&self, k: u32) -> (u32, u32) {
        let c0 = self.t_begin + k * C;
        (c0, (self.t_end - c0).min(C))
    }

    /// Start of unit `u`'s (b, h) row in the (B,H,S) tensors.
    #[inline(always)]
    pub(crate) fn row(&self, u: u32) -> u32 {
        (self.b as u32 * self.heads as u32 + self.h0 as u32 + u) * self.s_len as u32
    }

    /// The token index `b·S + t` of the batch row's time `t` in the (B,S,…) tensors.
    #[inline(always)]
    pub(crate) fn token(&self, t: u32) -> u32 {
        self.b as u32 * self.s_len as u32 + t
    }

    /// The token-head index `(b·S + t)·H + h` in the (B,S,H,…) tensors.
    #[inline(always)]
    pub(crate) fn token_head(&self, t: u32, h: u32) -> u32 {
        self.token(t) * self.heads as u32 + h
    }
}

/// `base + index·bytes`: the per-chunk addresses take their token and token-head indices in 32-bit
/// arithmetic (the host runs this kernel only where B·S·H < 2^32) and widen once, in the multiply
/// by the row's bytes.
#[inline(always)]
pub(crate) fn row_address(base: u64, index: u32, bytes: u32) -> u64 {
    base + index as u64 * bytes as u64
}

/// Address of unit `u`'s operand tile at offset `tile` (`L::Q`, …).
#[inline(always)]
fn unit_tile(base: u32, u: u32, tile: u32) -> u32 {
    base + u * L::UNIT_BYTES + tile
}

/// The kernel body (see the module docs).
///
/// # Safety
/// The launch contract of the module docs.
#[inline(always)]
pub unsafe fn forward_ws<const CKPT: bool, const STATES: bool>(prm: &ForwardParams) {
    // Through a broadcast from lane 0, so that the compiler knows the warpgroup index (and every
    // tile address and descriptor derived from it) is uniform across the warp.
    let wg = shfl_idx_f32(f32::from_bits(thread_x() / 128), 0).to_bits();
    // SAFETY: the launch contract; each warpgroup takes one branch as a whole. Nothing but the
    // warpgroup index is live across `setmaxnreg` (the rest is formed after it, in the role's
    // own register budget).
    unsafe {
        if wg == 0 {
            setmaxnreg_dec::<PRODUCER_REGS>();
            producer::<STATES>(prm, &Work::new(prm), thread_x());
        } else {
            setmaxnreg_inc::<CONSUMER_REGS>();
            let tid = thread_x();
            if STATES {
                consumer_states(prm, &Work::new(prm), wg - 1, tid - 128 * wg);
            } else {
                consumer::<CKPT>(prm, &Work::new(prm), wg - 1, tid - 128 * wg);
            }
        }
    }
}

/// Issues the `cp.async` copies of chunk `k`'s raw rows into staging buffer `k mod 2`: raw q and
/// k of the block's group (16 pieces of each of 64 rows per tensor, rows of times ≥ len
/// zero-filled), and per unit (into v slot `k mod 3`) its v rows. `STATES` (the segment-state
/// pass) stages no q.
#[inline(always)]
unsafe fn stage_chunk<const STATES: bool>(
    prm: &ForwardParams,
    work: &Work,
    base: u32,
    k: u32,
    tid: u32,
) {
    let (c0, len) = work.chunk(k);
    let buf = base + L::RAW + (k & 1) * L::RAW_BYTES;
    let piece = tid % 16;
    let token_bytes = 2 * R * work.groups as u32 * N;
    // SAFETY (whole body): sources are 16-byte pieces of tokens < S of the 16-byte aligned
    // tensors of the launch contract (a token of the chunk for zero-filled rows, never read);
    // destinations inside the staging buffer.
    unsafe {
        // Row ρ = tid/16 + 8j is time tid/64 + 2j of rank (tid/16) mod 4: one source offset for
        // j = 0, then two tokens' stride (the 64-bit index arithmetic formed once). Rows past the
        // chunk read nothing, from that first row (a token of the chunk even when time tid/64 is
        // past it).
        let r = (tid / 16) % 4;
        let t0 = tid / 64;
        let first = row_address(
            (2 * ((r * work.groups as u32 + work.g as u32) * N + 8 * piece)) as u64,
            work.token(c0 + t0.min(len - 1)),
            token_bytes,
        );
        let stride = 2 * token_bytes as u64;
        for j in 0..8u32 {
            let rho = tid / 16 + 8 * j;
            let (off, size) = if t0 + 2 * j < len {
                (first + stride * j as u64, 16)
            } else {
                (first, 0)
            };
            let dst = buf + rho * 256 + 16 * L::raw_piece(rho, piece);
            if !STATES {
                cp_async_cg_16_zfill(dst, (prm.q + off) as *const u8, size);
            }
            cp_async_cg_16_zfill(dst + L::RAW_K, (prm.k + off) as *const u8, size);
        }
        let (t, piece) = (tid / 8, tid % 8);
        let (src_t, size) = if t < len { (c0 + t, 16) } else { (c0, 0) };
        let v_slot = base + L::V + (k % 3) * L::V_SLOT_BYTES;
        for u in 0..2u32 {
            let bth = work.token_head(src_t, work.h0 as u32 + u);
            let v_src = row_address(prm.v + 16 * piece as u64, bth, 2 * P);
            cp_async_cg_16_zfill(
                v_slot + u * 2048 + t * 128 + 16 * piece,
                v_src as *const u8,
                size,
            );
        }
    }
}

/// A consumer thread's inputs of one chunk's token scalars and angles, loaded before the work
/// that hides their latency: adt, Δ and the raw trap logit of chunk time `lane` (lanes ≤ 16, zeros
/// past S), and the angle logits of its angle `8·warp + lane mod 8` at times `4·(lane / 8) + i`
/// (zeros past the chunk).
#[derive(Clone, Copy, Default)]
struct ChunkInputs {
    adt: f32,
    dt: f32,
    trap: Bf16Bits,
    logits: [f32; 4],
}

/// Loads consumer thread `ct`'s [`ChunkInputs`] of chunk `k` of head `h` (unit `u`).
#[inline(always)]
unsafe fn load_chunk_inputs(
    prm: &ForwardParams,
    work: &Work,
    k: u32,
    u: u32,
    ct: u32,
) -> ChunkInputs {
    let mut a = ChunkInputs::default();
    if k >= work.chunks() {
        return a;
    }
    let (w, lane) = (ct / 32, ct % 32);
    let (c0, len) = work.chunk(k);
    let t = c0 + lane;
    let row = work.row(u);
    // SAFETY: token indices checked against the chunk and the sequence; (B,H,S) and (B,S,H,Na)
    // tensors of the launch contract.
    unsafe {
        if lane <= C && t < work.s_len as u32 {
            let at = (row + t) as usize;
            if lane < len {
                a.adt = ldg(prm.adt, at);
            }
            a.dt = ldg(prm.dt, at);
            a.trap = Bf16::load_raw(prm.trap, at);
        }
        // The thread's four times are consecutive tokens: one address, then a token's stride
        // (the 64-bit index arithmetic formed once, not under each load's condition).
        let angle = 8 * w + lane % 8;
        let t0 = 4 * (lane / 8);
        let bth0 = work.token_head(c0 + t0, work.h0 as u32 + u);
        let first = row_address(prm.angles + 4 * angle as u64, bth0, 4 * NA);
        let stride = (4 * work.heads as u32 * NA) as u64;
        for (i, l) in a.logits.iter_mut().enumerate() {
            if t0 + (i as u32) < len {
                *l = ldg(first + stride * i as u64, 0);
            }
        }
    }
    a
}

/// An f64 from lane `src` of the warp (every lane calls it together).
#[inline(always)]
pub(crate) fn shfl_idx_f64(value: f64, src: u32) -> f64 {
    let bits = value.to_bits();
    let lo = shfl_idx_f32(f32::from_bits(bits as u32), src).to_bits();
    let hi = shfl_idx_f32(f32::from_bits((bits >> 32) as u32), src).to_bits();
    f64::from_bits(((hi as u64) << 32) | lo as u64)
}

/// Consumer `u`'s share (thread `ct`) of chunk `k`'s per-chunk tables, from its [`ChunkInputs`]:
/// the score weights `w(i, i')` (`c_{i'}·exp(A_i − A_{i'})` below the diagonal, `γ_i` on it) of
/// rows `lane / 16 + 2j`, `j ∈ {2·warp, 2·warp + 1}`; from warp 0 `exp(A_i)`, the decay
/// `exp(A_last)` and the key scales `exp(Ā_i)·c_i` (bank `2u + k mod 2`); and the cosines and
/// sines of angle `8·warp + lane mod 8` at times `4·(lane / 8) + i` (cos/sin bank `2u + k mod 2`),
/// θ from `carry` (the angle entering the chunk, f64 in [0, 2π)). Returns the angle leaving the
/// chunk, reduced. Every thread of the consumer calls it together. `STATES` (the segment-state
/// pass, which has no scores and no outputs) writes neither the weights nor `exp(A_i)`.
#[inline(always)]
unsafe fn chunk_tables<const STATES: bool>(
    base: u32,
    u: u32,
    k: u32,
    len: u32,
    ct: u32,
    x: ChunkInputs,
    carry: f64,
) -> f64 {
    let (w, lane) = (ct / 32, ct % 32);
    // The trap logit converted only here, through an opaque copy: LLVM otherwise moves the
    // conversion into the branch that loads it, where the warp waits out the load.
    let [pre, suf, gamma, c_s] = crate::chunked_forward_mma::chunk_token_scalars(
        lane,
        len,
        [x.adt, x.dt, Bf16::widen(x.trap.kept())],
    );
    let bank = 2 * u + (k & 1);
    let wt = base + L::WT + bank * 1024;
    let ea = base + L::EXPA + bank * 128;
    // The weights: entry e = lane + 32j is (i, i') = (e / 16, e mod 16).
    let ip = lane % 16;
    let (a_ip, c_ip) = (shfl_idx_f32(pre, ip), shfl_idx_f32(c_s, ip));
    // Angle increments of the thread's four times, summed in f64 through the chunk: this
    // thread's running sums, then the totals of the four time groups (lanes of one angle).
    let (angle, group) = (8 * w + lane % 8, lane / 8);
    let mut run = 0.0f64;
    let mut part = [0.0f64; 4];
    for (i, p) in part.iter_mut().enumerate() {
        let dt = shfl_idx_f32(x.dt, 4 * group + i as u32);
        // Times past `len` have logit and Δ zero: their increment is an exact zero.
        run += angle_increment_f32(x.logits[i], dt) as f64;
        *p = run;
    }
    let (mut before, mut total) = (0.0f64, 0.0f64);
    for j in 0..4u32 {
        let tj = shfl_idx_f64(run, lane % 8 + 8 * j);
        if j < group {
            before += tj;
        }
        total += tj;
    }
    let cs = base + L::CS + bank * 16 * L::CS_STRIDE + L::cs_offset(angle);
    // SAFETY (whole body): indices inside the WT, EXPA, KSCALE and CS regions.
    unsafe {
        for jj in 0..if STATES { 0 } else { 2u32 } {
            let j = 2 * w + jj;
            let wv = score_weight(pre, gamma, (a_ip, c_ip), lane, j);
            st_shared_f32(wt + 4 * (lane + 32 * j), wv);
        }
        let exp_a = exp(pre);
        let decay = shfl_idx_f32(exp_a, len - 1);
        if w == 0 && lane < C {
            if !STATES {
                st_shared_f32(ea + 4 * lane, exp_a);
            }
            st_shared_f32(base + L::KSCALE + 64 * bank + 4 * lane, exp(suf) * c_s);
        }
        if w == 0 && lane == C {
            st_shared_f32(ea + 4 * C, decay);
        }
        for (i, p) in part.iter().enumerate() {
            let t = 4 * group + i as u32;
            let (s, c) = sincos_approx(reduced_near_f32(carry + (before + p)));
            st_shared_v2_f32(cs + t * L::CS_STRIDE, [c, s]);
        }
    }
    wrap_two_pi_f64(carry + total)
}

/// The score weight `w(i, i')` of entry `lane + 32j` of a chunk's `(16, 16)` table, `(i, i') =
/// (lane / 16 + 2j, lane mod 16)`: `c_{i'}·exp(A_i − A_{i'})` below the diagonal, `γ_i` on it,
/// zero above, from the warp's token scalars (`pre` = A, `gamma` = γ of the lane's time) and
/// `(A_{i'}, c_{i'})` of the lane's column. Every lane of the warp calls it together.
#[inline(always)]
pub(crate) fn score_weight(
    pre: f32,
    gamma: f32,
    (a_ip, c_ip): (f32, f32),
    lane: u32,
    j: u32,
) -> f32 {
    let (i, ip) = (lane / 16 + 2 * j, lane % 16);
    let a_i = shfl_idx_f32(pre, i);
    let g_i = shfl_idx_f32(gamma, i);
    if ip < i {
        exp(a_i - a_ip) * c_ip
    } else if ip == i {
        g_i
    } else {
        0.0
    }
}

/// The producer warpgroup (thread `tid` < 128); `STATES` (the segment-state pass) fills k̂ only.
#[inline(always)]
unsafe fn producer<const STATES: bool>(prm: &ForwardParams, work: &Work, tid: u32) {
    let base = layout_base();
    let chunks = work.chunks();
    // SAFETY (whole body): the launch contract; shared addresses inside the layout.
    unsafe {
        // Per-unit tables: the biases, four columns per 16-byte unit (`L::bias_column`).
        for e in [0u32, 128, 256, 384].map(|o| tid + o) {
            let (u, r, x, i) = (e / 256, (e / 64) % 4, (e / 32) % 2, e % 32);
            let src = if x == 0 { prm.q_bias } else { prm.k_bias };
            let col = ((work.h0 + u as usize) * R as usize + r as usize) * N as usize
                + L::bias_column(i) as usize;
            let v = [0, 1, 2, 3].map(|c| ldg(src, col + c));
            st_shared_v4_f32(base + L::BIAS + ((4 * u + r) * 2 + x) * 512 + 16 * i, v);
        }
        if chunks > 0 {
            stage_chunk::<STATES>(prm, work, base, 0, tid);
        }
        commit_group();
        for k in 0..chunks {
            wait_group::<0>();
            // Chunk k's rows have landed for every producer thread, and every thread is done
            // with chunk k − 1's, whose buffer the next copies take.
            bar_sync::<PRODUCER, 128>();
            if k + 1 < chunks {
                stage_chunk::<STATES>(prm, work, base, k + 1, tid);
            }
            commit_group();
            for u in 0..2u32 {
                // The consumer has written the chunk's angles (and, from the second chunk on,
                // read the previous chunk's tiles).
                bar_unit!(sync, EMPTY, 256, u);
                if STATES {
                    fill_unit::<true>(base, u, k, tid);
                } else {
                    fill_unit::<false>(base, u, k, tid);
                }
                wgmma::fence_proxy_async_shared();
                bar_unit!(arrive, FULL, 256, u);
            }
        }
        if STATES || chunks == 0 || work.t_end != work.s_len as u32 {
            return;
        }
        // k̂ and raw v of the last token.
        let bh0 = work.b * work.heads + work.h0;
        bar_sync::<PRODUCER, 128>();
        let (_, last_len) = work.chunk(chunks - 1);
        let last = last_len - 1;
        for u in 0..2u32 {
            let bh = bh0 + u as usize;
            if prm.final_k != 0 && tid < 64 {
                let (r, piece) = (tid / 16, tid % 16);
                let row = L::tile_row(last, r);
                let v = ld_shared_v4_f32(
                    unit_tile(base, u, L::K) + mamba3_abi::swizzle128_offset(64, row, 8 * piece),
                );
                let at = ((work.b * R as usize + r as usize) * work.heads + work.h0 + u as usize)
                    * N as usize;
                st_global_v4_f32(prm.final_k + 2 * at as u64 + 16 * piece as u64, v);
            }
            let piece = tid.wrapping_sub(64);
            if prm.final_v != 0 && piece < P / 8 {
                let row =
                    base + L::V + ((chunks - 1) % 3) * L::V_SLOT_BYTES + 2048 * u + last * 128;
                let v = ld_shared_v4_f32(row + 16 * piece);
                st_global_v4_f32(
                    prm.final_v + 2 * (bh * P as usize) as u64 + 16 * piece as u64,
                    v,
                );
            }
        }
    }
}

/// Writes unit `u`'s q̂ and k̂ tiles of chunk `k` (staged rows in buffer `k mod 2`). Producer
/// thread `tid` owns rank `tid / 32`, tensor `(tid / 16) mod 2` (q, k) and piece `p = tid mod 4`
/// of its rows at times `t₀ + 4j`, `t₀ = (tid / 8) mod 2 + 2·((tid / 4) mod 2)`: the 16-byte
/// pieces of columns `8p..8p + 8` rotated with their partners `64 + 8p..`, and the biased-only
/// pieces `32 + 8p..`, `96 + 8p..`. Each access is 16 bytes; the eight threads of a
/// shared-memory phase (four pieces, times two apart) hit distinct bank groups in the staged
/// rows, the tiles, the cos/sin table and the biases. `K_ONLY` (the segment-state pass) writes
/// k̂ alone, each half-warp taking two of the four times: `tensor` (bit 4 of `tid`) then picks
/// the times `t₀ + 8·tensor + 4j`, j < 2, instead of q or k.
#[inline(always)]
unsafe fn fill_unit<const K_ONLY: bool>(base: u32, u: u32, k: u32, tid: u32) {
    // Every address below is formed here at each call from fresh copies of the thread's
    // constants: hoisted out of the chunk loop, the row addresses of both units would be held
    // across it (and spilled).
    let (base, tid) = (fresh_u32(base), fresh_u32(tid));
    let (r, tensor, p) = (tid / 32, (tid / 16) % 2, tid % 4);
    let (x, times) = if K_ONLY {
        (1, 2 * tensor..2 * tensor + 2)
    } else {
        (tensor, 0..4)
    };
    let t0 = (tid / 8) % 2 + 2 * ((tid / 4) % 2);
    // The rows' swizzle (the staged rows' `raw_piece` and the tiles' 128-byte swizzle agree):
    // `2·(t mod 4) + r mod 2`, the same at each of the thread's times.
    let sw = 2 * t0 + r % 2;
    let (lo, mid) = (16 * (p ^ sw), 16 * ((4 + p) ^ sw));
    let raw = base + L::RAW + (k & 1) * L::RAW_BYTES + x * L::RAW_K + (4 * t0 + r) * 256;
    let tile = base + u * L::UNIT_BYTES + x * L::K + L::tile_row(t0, r) * 128;
    let cs = base
        + L::CS
        + (2 * u + (k & 1)) * 16 * L::CS_STRIDE
        + t0 * L::CS_STRIDE
        + L::cs_offset(8 * p);
    let cs_units = [0, 2, 4, 6].map(|a| L::cs_offset(8 * p + a) - L::cs_offset(8 * p));
    // SAFETY (whole body): indices inside the layout's regions.
    unsafe {
        // The f32 biases of the thread's 32 columns, held for its four times. They are added in
        // f32 and each element rounded once, as the rotation's output: rounding the biases to
        // bf16 first would add the same error to every token of the head, which the state then
        // accumulates.
        let bias_at = base + L::BIAS + ((4 * u + r) * 2 + x) * 512 + 16 * p;
        let bias = [0u32, 1, 2, 3].map(|g| {
            let [b0, b1, b2, b3] = ld_shared_v4_f32(bias_at + 128 * g);
            let [b4, b5, b6, b7] = ld_shared_v4_f32(bias_at + 128 * g + 64);
            [b0, b1, b2, b3, b4, b5, b6, b7]
        });
        for j in times {
            // Time t₀ + 4j: staged rows 16j further on, tile rows 16j, table rows 4j. Every
            // read of the time before its first write (the `asm!` reads and writes keep their
            // order).
            let row = raw + 4096 * j;
            let words = [lo, mid, 128 + lo, 128 + mid].map(|o| ld_shared_v4_f32(row + o));
            let cs_row = cs + 4 * j * L::CS_STRIDE;
            let cs_j = cs_units.map(|o| ld_shared_v4_f32(cs_row + o));
            let mut out = [[0.0f32; 4]; 4];
            for e in 0..4usize {
                // Word e of each piece: columns 2e, 2e + 1 of the piece; angles 8p + 2e, + 1.
                let [c0, s0, c1, s1] = cs_j[e];
                let (a0, a1) = crate::chunked_forward_mma::unpack(words[0][e].to_bits());
                let (b0, b1) = crate::chunked_forward_mma::unpack(words[2][e].to_bits());
                let (ra0, rb0) = rotate_pair(a0 + bias[0][2 * e], b0 + bias[1][2 * e], c0, s0);
                let (ra1, rb1) =
                    rotate_pair(a1 + bias[0][2 * e + 1], b1 + bias[1][2 * e + 1], c1, s1);
                out[0][e] = f32::from_bits(pack_bf16x2(ra0, ra1));
                out[2][e] = f32::from_bits(pack_bf16x2(rb0, rb1));
                for (o, g) in [(1usize, 2usize), (3, 3)] {
                    let (v0, v1) = crate::chunked_forward_mma::unpack(words[o][e].to_bits());
                    out[o][e] =
                        f32::from_bits(pack_bf16x2(v0 + bias[g][2 * e], v1 + bias[g][2 * e + 1]));
                }
            }
            let at = tile + 2048 * j;
            for (o, piece) in [lo, mid, 8192 + lo, 8192 + mid].iter().enumerate() {
                st_shared_v4_f32(at + piece, out[o]);
            }
        }
    }
}

/// Consumer `u` (thread `ct` < 128 of warpgroup `u + 1`); with `CKPT`, it also writes the
/// backward's checkpoints, the state and θ entering every chunk.
#[inline(always)]
unsafe fn consumer<const CKPT: bool>(prm: &ForwardParams, work: &Work, u: u32, ct: u32) {
    let base = layout_base();
    let (w, lane) = (ct / 32, ct % 32);
    let (g, q) = (lane / 4, lane % 4);
    let h = work.h0 + u as usize;
    let bh = work.b * work.heads + h;
    let chunks = work.chunks();
    // State rows p0 and p0 + 8 of the thread (and output columns).
    let p0 = 16 * w + g;
    let tiles = base + u * L::UNIT_BYTES;
    let has_z = prm.z != 0;
    // SAFETY (whole body): the launch contract; shared addresses inside the layout.
    unsafe {
        let d = if prm.d != 0 { ldg(prm.d, h) } else { 0.0 };
        // mimo_z (halved: the gate takes half its argument) and mimo_o of column ct / 2 (lanes
        // ct, ct + 1: ranks 0–1 and 2–3), into the consumer's own table (read after the first
        // chunk's barriers).
        let zo = base + L::MIMO_ZO + 2048 * u;
        {
            let (p, r0) = (ct / 2, 2 * (ct % 2));
            for r in r0..r0 + 2 {
                let at = (h * R as usize + r as usize) * P as usize + p as usize;
                let mzv = if has_z {
                    0.5 * ldg(prm.mimo_z, at)
                } else {
                    0.0
                };
                st_shared_f32(zo + 32 * p + 4 * r, mzv);
                st_shared_f32(zo + 32 * p + 16 + 4 * r, ldg(prm.mimo_o, at));
            }
        }
        let mut state = [[0.0f32; 4]; 16];
        if work.seg > 0 {
            let slot = bh * (work.segments - 1) + work.seg - 1;
            state = load_state_f32(prm.seg_state + 4 * (slot * (P * N) as usize) as u64, ct);
        }
        // mimo_v of the thread's x columns 2·lane, 2·lane + 1 (every rank) into the consumer's
        // own table.
        {
            let at = (h * R as usize + (ct / 32) as usize) * P as usize + 2 * lane as usize;
            let mv = [ldg(prm.mimo_v, at), ldg(prm.mimo_v, at + 1)];
            st_shared_v2_f32(base + L::MIMO_V + 1024 * u + 32 * lane + 8 * (ct / 32), mv);
        }
        // θ entering the segment of the thread's angle; the first two chunks' tables, then the
        // first hand-off to the producer (which fills a chunk once its angles are written).
        let mut carry = 0.0f64;
        if work.seg > 0 {
            let slot = bh * (work.segments - 1) + work.seg - 1;
            let at = 2 * (slot * NA as usize + (8 * w + lane % 8) as usize);
            carry = ldg(prm.seg_theta, at) as f64 + ldg(prm.seg_theta, at + 1) as f64;
        }
        for k in 0..chunks.min(2) {
            let x = load_chunk_inputs(prm, work, k, u, ct);
            if CKPT {
                store_checkpoint_theta(prm, k, carry);
            }
            carry = chunk_tables::<false>(base, u, k, work.chunk(k).1, ct, x, carry);
        }
        if CKPT && chunks > 0 {
            store_checkpoint_state(prm, 0, &state);
        }
        if chunks > 0 {
            bar_unit!(arrive, EMPTY, 256, u);
        }
        let mut z = load_z(prm, work, 0, h, (p0, q), has_z);
        for k in 0..chunks {
            bar_unit!(sync, FULL, 256, u);
            let bank = 2 * u + (k & 1);
            let decay = ld_shared_f32(base + L::EXPA + bank * 128 + 4 * C);
            let (q_at, k_at) = (tiles + L::Q, tiles + L::K);
            // Scores q̂·k̂ᵀ first, weighted and stored before the other products are issued: their
            // accumulators and the inter-chunk product's A registers are never live together (the
            // other consumer keeps the tensor cores busy meanwhile).
            wgmma::fence();
            // Each operand's descriptor formed once and advanced per step (`advance_desc`).
            let (q_desc, k_desc) = (
                wgmma::k_major_desc(q_at, 64, 0),
                wgmma::k_major_desc(k_at, 64, 0),
            );
            let mut s = wgmma::mma_m64n64k16_bf16_fresh::<false, false>(q_desc, k_desc);
            for kk in 1..8u32 {
                let step = wgmma::k_major_offset(64, 16 * kk);
                wgmma::mma_m64n64k16_bf16::<false, false>(
                    &mut s,
                    wgmma::advance_desc(q_desc, step),
                    wgmma::advance_desc(k_desc, step),
                    true,
                );
            }
            wgmma::commit_group();
            // The row time's weights of the column times 4kk + q, read while the scores run.
            let wt = fresh_u32(base) + L::WT + bank * 1024 + 4 * (16 * (4 * w + g / 2) + q);
            let weights = [0u32, 1, 2, 3].map(|kk| ld_shared_f32(wt + 16 * kk));
            // The chunk's x and x_w (the products before this chunk's are retired), while
            // the scores run.
            let base = fresh_u32(base);
            write_x::<false>(
                base + u * L::UNIT_BYTES,
                base + L::KSCALE + 64 * bank,
                base + L::MIMO_V + 1024 * u,
                base + L::V + (k % 3) * L::V_SLOT_BYTES + 2048 * u,
                ct,
            );
            wgmma::wait_m64n64::<0>(&mut s);
            // Weighted scores (time weights; D on the diagonal) as bf16 into the S tile, four 8×8
            // tiles per `stmatrix`: store i takes n-tiles 2i, 2i + 1, row halves 0 and 1 (tile
            // m = 2·(n-tile − 2i) + half), lane l giving row l mod 8 of tile l/8. Addresses from
            // a fresh read of the thread index: ptxas otherwise hoists them out of the chunk
            // loop and holds them across it.
            let (w, lane, own_tiles) = {
                let tx = block_and_thread_fresh().3;
                (
                    (tx % 128) / 32,
                    tx % 32,
                    layout_base() + (tx / 128 - 1) * L::UNIT_BYTES,
                )
            };
            let (g, q) = (lane / 4, lane % 4);
            let diag = g / 2 == q;
            // Store i's piece `(2i + lane/16) ^ (lane mod 8)` is `2i ^ x` with `x = lane/16 ^
            // lane mod 8` (2i has bit 0 clear): the row address with piece x, bits 5–6 flipped
            // (the rows are 128-byte aligned).
            let row = 16 * w + 8 * ((lane / 8) % 2) + lane % 8;
            let row_at = own_tiles + L::S + 128 * row + 16 * ((lane / 16) ^ (lane % 8));
            // The later products' descriptors from the tile base formed before the loop, which
            // ptxas keeps in uniform registers (from `own_tiles` each takes a vector-to-uniform
            // move per descriptor); the checkpointing instantiation has no registers to spare for
            // it and takes `own_tiles`.
            let tiles = if CKPT { own_tiles } else { tiles };
            for i in 0..4u32 {
                let wv = weights[i as usize];
                let words = [0u32, 1, 2, 3].map(|m| {
                    let (jj, hh) = (2 * i + m / 2, (m % 2) as usize);
                    let sj = &s[jj as usize];
                    let on_diag = diag && jj == 2 * w + hh as u32;
                    let (d0, d1) = if on_diag {
                        if g % 2 == 0 {
                            (d, 0.0)
                        } else {
                            (0.0, d)
                        }
                    } else {
                        (0.0, 0.0)
                    };
                    pack_bf16x2(fma_rn(sj[2 * hh], wv, d0), fma_rn(sj[2 * hh + 1], wv, d1))
                });
                stmatrix_x4(row_at ^ (32 * i), words);
            }
            // The state before this chunk as the inter-chunk product's A operand (bf16), then
            // decayed for the state pass; the inter-chunk product, then (once every thread's x,
            // x_w and score writes are in) the state pass, as two groups.
            let mut hb = [[0u32; 4]; 8];
            for (kk, a) in hb.iter_mut().enumerate() {
                let (s0, s1) = (&state[2 * kk], &state[2 * kk + 1]);
                *a = [
                    pack_bf16x2(s0[0], s0[1]),
                    pack_bf16x2(s0[2], s0[3]),
                    pack_bf16x2(s1[0], s1[1]),
                    pack_bf16x2(s1[2], s1[3]),
                ];
            }
            for st in state.iter_mut() {
                for v in st.iter_mut() {
                    *v *= decay;
                }
            }
            wgmma::fence();
            let q_desc = wgmma::k_major_desc(q_at, 64, 0);
            let mut y = wgmma::mma_m64n64k16_bf16_rs_fresh::<false>(hb[0], q_desc);
            for (kk, a) in hb.iter().enumerate().skip(1) {
                wgmma::mma_m64n64k16_bf16_rs::<false>(
                    &mut y,
                    *a,
                    wgmma::advance_desc(q_desc, wgmma::k_major_offset(64, 16 * kk as u32)),
                    true,
                );
            }
            wgmma::commit_group();
            wgmma::fence_proxy_async_shared();
            let ea_at = fresh_u32(base) + L::EXPA + bank * 128 + 4 * q;
            let ea = [0u32, 1, 2, 3].map(|kk| ld_shared_f32(ea_at + 16 * kk));
            bar_unit!(sync, CONSUMER, 128, u);
            for kk in 0..4u32 {
                wgmma::mma_m64n128k16_bf16::<true, true>(
                    &mut state,
                    wgmma::mn_major_desc(tiles + L::XW, 64, 16 * kk),
                    wgmma::mn_major_desc(k_at, 64, 16 * kk),
                    true,
                );
            }
            wgmma::commit_group();
            wgmma::wait_m64n64::<1>(&mut y);
            wgmma::keep_a_m64k128(&mut hb);
            for (jj, yj) in y.iter_mut().enumerate() {
                for v in yj.iter_mut() {
                    *v *= ea[jj / 2];
                }
            }
            // The intra-chunk outputs xᵀ·Sᵀ.
            wgmma::fence();
            for kk in 0..4u32 {
                wgmma::mma_m64n64k16_bf16::<true, false>(
                    &mut y,
                    wgmma::mn_major_desc(tiles + L::X, 64, 16 * kk),
                    wgmma::k_major_desc(tiles + L::S, 64, 16 * kk),
                    true,
                );
            }
            wgmma::commit_group();
            wgmma::wait_m64n64::<0>(&mut y);
            wgmma::wait_m64n128::<0>(&mut state);
            if k + 1 < chunks {
                bar_unit!(arrive, EMPTY, 256, u);
            }
            // The block's work re-formed (held across the products, it would spill); chunk
            // k + 2's inputs, loaded while the epilogue runs and used after it.
            let (bx, by, bz, _) = block_and_thread_fresh();
            let work = &Work::of_block(prm, bx, by, bz);
            let (c0, len) = work.chunk(k);
            let ahead = load_chunk_inputs(prm, work, k + 2, u, ct);
            // Gate and rank contraction: column 8j + 2q + e of y is time 4(j/2) + q, rank
            // 2(j mod 2) + e.
            let zc = z;
            z = load_z(prm, work, k + 1, h, (p0, q), has_z);
            let base = fresh_u32(base);
            let out_rows = base + u * L::UNIT_BYTES + L::OUT;
            let zo = base + L::MIMO_ZO + 2048 * u + 32 * p0;
            let zo = [zo, zo + 32 * 8].map(|at| {
                let [z0, z1, z2, z3] = ld_shared_v4_f32(at);
                let [o0, o1, o2, o3] = ld_shared_v4_f32(at + 16);
                ([z0, z1, z2, z3], [o0, o1, o2, o3])
            });
            let mut o = [[0.0f32; 2]; 4];
            for (kk, ok) in o.iter_mut().enumerate() {
                for (hh, out) in ok.iter_mut().enumerate() {
                    let zv = Bf16::widen(zc[kk][hh]);
                    let (mz, mo) = &zo[hh];
                    for jr in 0..2usize {
                        for e in 0..2usize {
                            let r = 2 * jr + e;
                            let yv = y[2 * kk + jr][2 * hh + e];
                            let gated = if has_z {
                                mul_silu_half_tanh_approx(yv, zv * mz[r])
                            } else {
                                yv
                            };
                            *out = fma_rn(gated, mo[r], *out);
                        }
                    }
                }
            }
            // The output rows share the score tile: every warp's slice of the intra-chunk
            // product (which reads all of it) has retired only once every warp is past its wait.
            bar_unit!(sync, CONSUMER, 128, u);
            // Column pairs (p, p + 1) through lanes g, g ^ 1: the even lane keeps times q and
            // 4 + q, the odd one 8 + q and 12 + q; one 4-byte store each.
            let odd = g % 2 == 1;
            for j in 0..2usize {
                for hh in 0..2usize {
                    let (keep, give) = if odd {
                        (o[2 + j][hh], o[j][hh])
                    } else {
                        (o[j][hh], o[2 + j][hh])
                    };
                    let other = shfl_xor_f32(give, 4);
                    let (lo, hi) = if odd { (other, keep) } else { (keep, other) };
                    let t = 4 * (j as u32 + 2 * odd as u32) + q;
                    let p = (p0 & !1) + 8 * hh as u32;
                    st_shared_u32(out_rows + t * L::OUT_STRIDE + 2 * p, pack_bf16x2(lo, hi));
                }
            }
            bar_unit!(sync, CONSUMER, 128, u);
            let (t, piece) = (ct / 8, ct % 8);
            if t < len {
                let v = ld_shared_v4_f32(out_rows + t * L::OUT_STRIDE + 16 * piece);
                let bth = work.token_head(c0 + t, h as u32);
                st_global_v4_f32(row_address(prm.out + 16 * piece as u64, bth, 2 * P), v);
            }
            // Chunk k + 2's tables (into the banks chunk k's products no longer read; the
            // producer fills chunk k + 2 only after this consumer's next hand-off).
            if k + 2 < chunks {
                if CKPT {
                    store_checkpoint_theta(prm, k + 2, carry);
                }
                let base = fresh_u32(base);
                carry =
                    chunk_tables::<false>(base, u, k + 2, work.chunk(k + 2).1, ct, ahead, carry);
            }
            if CKPT && k + 1 < chunks {
                store_checkpoint_state(prm, k + 1, &state);
            }
        }
        // The block's work and the thread's place re-formed: held across the chunk loop, they
        // would spill.
        let (work, u, ct) = consumer_place_fresh(prm);
        let bh = work.b * work.heads + work.h0 + u as usize;
        let at_end = work.chunks() > 0 && work.t_end == work.s_len as u32;
        if at_end && prm.final_theta != 0 && ct % 32 < 8 {
            let angle = 8 * (ct / 32) + ct % 32;
            stg(
                prm.final_theta,
                bh * NA as usize + angle as usize,
                stored_f32(carry),
            );
        }
        if at_end && prm.final_ssm != 0 {
            store_state_f32(
                prm.final_ssm + 4 * (bh * (P * N) as usize) as u64,
                ct,
                &state,
            );
        }
    }
}

/// Consumer `u` (thread `ct` < 128 of warpgroup `u + 1`) of the segment-state pass: from a zero
/// state and zero angles, each chunk's state update `H ← exp(A_last)·H + x_wᵀ·k̂` alone (x_w
/// written while the producer fills the other unit, no scores or outputs), then the segment's
/// end state, angle total and decay into its hand-off slot (`ForwardParams::seg_state`,
/// `seg_theta`, `seg_decay`, the format of every segment-state pass). The chunk's tables are
/// formed as in [`consumer`] (two chunks ahead), so that the state matches the forward's own.
#[inline(always)]
unsafe fn consumer_states(prm: &ForwardParams, work: &Work, u: u32, ct: u32) {
    let base = layout_base();
    let lane = ct % 32;
    let h = work.h0 + u as usize;
    let chunks = work.chunks();
    let tiles = base + u * L::UNIT_BYTES;
    // SAFETY (whole body): the launch contract; shared addresses inside the layout, global ones
    // inside the hand-off slot of this unit's segment.
    unsafe {
        {
            let at = (h * R as usize + (ct / 32) as usize) * P as usize + 2 * lane as usize;
            let mv = [ldg(prm.mimo_v, at), ldg(prm.mimo_v, at + 1)];
            st_shared_v2_f32(base + L::MIMO_V + 1024 * u + 32 * lane + 8 * (ct / 32), mv);
        }
        let mut carry = 0.0f64;
        for k in 0..chunks.min(2) {
            let x = load_chunk_inputs(prm, work, k, u, ct);
            carry = chunk_tables::<true>(base, u, k, work.chunk(k).1, ct, x, carry);
        }
        if chunks > 0 {
            bar_unit!(arrive, EMPTY, 256, u);
        }
        // The inputs of the chunk whose tables the loop forms next: each iteration loads the
        // chunk after that one while its product runs, so no load's latency stands in front of
        // its tables (the pass has no epilogue to hide it, as the forward's does).
        let mut ahead = load_chunk_inputs(prm, work, 2, u, ct);
        let mut state = [[0.0f32; 4]; 16];
        let mut seg_decay = 1.0f32;
        for k in 0..chunks {
            bar_unit!(sync, FULL, 256, u);
            let bank = 2 * u + (k & 1);
            let decay = ld_shared_f32(base + L::EXPA + bank * 128 + 4 * C);
            seg_decay *= decay;
            let base = fresh_u32(base);
            write_x::<true>(
                base + u * L::UNIT_BYTES,
                base + L::KSCALE + 64 * bank,
                base + L::MIMO_V + 1024 * u,
                base + L::V + (k % 3) * L::V_SLOT_BYTES + 2048 * u,
                ct,
            );
            for st in state.iter_mut() {
                for v in st.iter_mut() {
                    *v *= decay;
                }
            }
            wgmma::fence_proxy_async_shared();
            // Every thread's x_w words are in before any warp's product reads them.
            bar_unit!(sync, CONSUMER, 128, u);
            wgmma::fence();
            for kk in 0..4u32 {
                wgmma::mma_m64n128k16_bf16::<true, true>(
                    &mut state,
                    wgmma::mn_major_desc(tiles + L::XW, 64, 16 * kk),
                    wgmma::mn_major_desc(tiles + L::K, 64, 16 * kk),
                    true,
                );
            }
            wgmma::commit_group();
            let (bx, by, bz, _) = block_and_thread_fresh();
            let work = &Work::of_block(prm, bx, by, bz);
            let next = load_chunk_inputs(prm, work, k + 3, u, ct);
            wgmma::wait_m64n128::<0>(&mut state);
            if k + 1 < chunks {
                bar_unit!(arrive, EMPTY, 256, u);
            }
            if k + 2 < chunks {
                let base = fresh_u32(base);
                carry = chunk_tables::<true>(base, u, k + 2, work.chunk(k + 2).1, ct, ahead, carry);
            }
            ahead = next;
        }
        let (work, u, ct) = consumer_place_fresh(prm);
        if work.chunks() == 0 {
            return;
        }
        let bh = work.b * work.heads + work.h0 + u as usize;
        let slot = bh * (work.segments - 1) + work.seg;
        store_state_f32(
            prm.seg_state + 4 * (slot * (P * N) as usize) as u64,
            ct,
            &state,
        );
        if ct % 32 < 8 {
            let angle = 8 * (ct / 32) + ct % 32;
            let (hi, lo) = crate::chunked_forward::split_f64(carry);
            let at = 2 * (slot * NA as usize + angle as usize);
            stg(prm.seg_theta, at, hi);
            stg(prm.seg_theta, at + 1, lo);
        }
        if ct == 0 {
            stg(prm.seg_decay, slot, seg_decay);
        }
    }
}

/// The f32 `(P, N)` state at `at` into consumer thread `ct`'s accumulators: `state[j][2hh + e]`
/// is row `p0 + 8hh`, column `8j + 2q + e`, with `p0 = 16·(ct / 32) + (ct mod 32) / 4` and
/// `q = ct mod 4` (the `wgmma.m64n128` accumulator fragment of a state stored transposed).
///
/// # Safety
/// `at` is an 8-byte aligned global `(P, N)` f32 state.
#[inline(always)]
pub(crate) unsafe fn load_state_f32(at: u64, ct: u32) -> [[f32; 4]; 16] {
    let mut state = [[0.0f32; 4]; 16];
    for (j, st) in state.iter_mut().enumerate() {
        for hh in 0..2usize {
            // SAFETY: inside the state (the caller's contract).
            let [x, y] = unsafe { ld_global_v2_f32(at + 4 * state_element(ct, j, hh)) };
            st[2 * hh] = x;
            st[2 * hh + 1] = y;
        }
    }
    state
}

/// Consumer thread `ct`'s accumulators into the f32 `(P, N)` state at `at` (the layout of
/// [`load_state_f32`]).
///
/// # Safety
/// As [`load_state_f32`].
#[inline(always)]
pub(crate) unsafe fn store_state_f32(at: u64, ct: u32, state: &[[f32; 4]; 16]) {
    for (j, st) in state.iter().enumerate() {
        for hh in 0..2usize {
            // SAFETY: inside the state (the caller's contract).
            unsafe {
                st_global_v2_f32(
                    at + 4 * state_element(ct, j, hh),
                    [st[2 * hh], st[2 * hh + 1]],
                )
            };
        }
    }
}

/// The element index in a `(P, N)` state of consumer thread `ct`'s accumulator pair
/// `state[j][2hh..2hh + 2]` ([`load_state_f32`]).
#[inline(always)]
fn state_element(ct: u32, j: usize, hh: usize) -> u64 {
    let (p0, q) = (16 * (ct / 32) + (ct % 32) / 4, ct % 4);
    ((p0 as usize + 8 * hh) * N as usize + 8 * j + 2 * q as usize) as u64
}

/// The consumer thread's place formed afresh from the block and thread indices (held across the
/// chunk loop, its pieces would spill): the block's work, the consumer `u` and the thread's index
/// `ct` in it.
#[inline(always)]
fn consumer_place_fresh(prm: &ForwardParams) -> (Work, u32, u32) {
    let (bx, by, bz, tx) = block_and_thread_fresh();
    (Work::of_block(prm, bx, by, bz), tx / 128 - 1, tx % 128)
}

/// The consumer thread's place for a checkpoint store ([`consumer_place_fresh`]): the slot of
/// chunk `k` of its unit's segment in the checkpoint buffers (`(b, h, c)` of `(B, H, ⌈S/C⌉)`,
/// `c` the chunk's index in the sequence) and the thread's index `ct` in its consumer.
#[inline(always)]
fn checkpoint_place(prm: &ForwardParams, k: u32) -> (usize, u32) {
    let (work, u, ct) = consumer_place_fresh(prm);
    let chunk = (work.t_begin / C + k) as usize;
    let bh = work.b * work.heads + work.h0 + u as usize;
    (bh * work.s_len.div_ceil(C as usize) + chunk, ct)
}

/// The checkpoint of the state entering chunk `k` into `(B,H,⌈S/C⌉,P,N)` bf16 at
/// [`ForwardParams::ckpt_state`]: the thread's accumulators (state rows `p0`, `p0 + 8`; columns
/// `8j + 2q`, `+ 1`) rounded as the inter-chunk product's A operand rounds them. Lanes `q` and
/// `q ^ 1` trade a word of each column-group pair, so that each lane stores 8 contiguous bytes
/// and each store instruction fills whole 32-byte sectors.
#[inline(always)]
unsafe fn store_checkpoint_state(prm: &ForwardParams, k: u32, state: &[[f32; 4]; 16]) {
    let (slot, ct) = checkpoint_place(prm, k);
    let (p0, q) = (16 * (ct / 32) + (ct % 32) / 4, ct % 4);
    let at = prm.ckpt_state + 2 * (slot * (P * N) as usize) as u64;
    let odd = q % 2 == 1;
    // SAFETY: the slot of the 8-byte aligned checkpoint buffer (launch contract).
    unsafe {
        for i in 0..8usize {
            for hh in 0..2usize {
                let [w0, w1] =
                    [2 * i, 2 * i + 1].map(|j| pack_bf16x2(state[j][2 * hh], state[j][2 * hh + 1]));
                let (keep, give) = if odd { (w1, w0) } else { (w0, w1) };
                let other = shfl_xor_f32(f32::from_bits(give), 1).to_bits();
                let (lo, hi) = if odd { (other, keep) } else { (keep, other) };
                let col = 8 * (2 * i as u32 + odd as u32) + 2 * (q & !1);
                let e = (p0 + 8 * hh as u32) * N + col;
                st_global_v2_f32(at + 2 * e as u64, [f32::from_bits(lo), f32::from_bits(hi)]);
            }
        }
    }
}

/// The checkpoint of θ entering chunk `k` (`theta`, the thread's angle `8·warp + lane mod 8`) as
/// an f32 `(hi, lo)` pair into `(B,H,⌈S/C⌉,Na,2)` at [`ForwardParams::ckpt_theta`], from the
/// lanes of the first time group.
#[inline(always)]
unsafe fn store_checkpoint_theta(prm: &ForwardParams, k: u32, theta: f64) {
    let (slot, ct) = checkpoint_place(prm, k);
    let (w, lane) = (ct / 32, ct % 32);
    if lane < 8 {
        let at = 2 * (slot * NA as usize + (8 * w + lane) as usize);
        let (hi, lo) = crate::chunked_forward::split_f64(theta);
        // SAFETY: the slot of the checkpoint angle buffer (launch contract).
        unsafe {
            stg(prm.ckpt_theta, at, hi);
            stg(prm.ckpt_theta, at + 1, lo);
        }
    }
}

/// z of chunk `k` at the thread's outputs, as loaded (bf16 bits; converted where used, so that no
/// instruction waits on the loads before then): times `4kk + q`, columns `p0` and `p0 + 8`; zeros
/// past the chunk (or without z).
#[inline(always)]
unsafe fn load_z(
    prm: &ForwardParams,
    work: &Work,
    k: u32,
    h: usize,
    (p0, q): (u32, u32),
    has_z: bool,
) -> [[Bf16Bits; 2]; 4] {
    let mut z: [[Bf16Bits; 2]; 4] = Default::default();
    if !has_z || k >= work.chunks() {
        return z;
    }
    let (c0, len) = work.chunk(k);
    // Time q's address, then four tokens' stride.
    let first = row_address(
        prm.z + 2 * p0 as u64,
        work.token_head(c0 + q, h as u32),
        2 * P,
    );
    let stride = (2 * 4 * work.heads as u32 * P) as u64;
    // SAFETY: tokens < len of the chunk, inside the (B,S,H,P) z of the launch contract.
    unsafe {
        for (kk, zw) in z.iter_mut().enumerate() {
            if 4 * kk as u32 + q < len {
                let row = first + stride * kk as u64;
                *zw = [Bf16::load_raw(row, 0), Bf16::load_raw(row, 8)];
            }
        }
    }
    z
}

/// Writes consumer thread `ct`'s words of its unit's x and x_w tiles (at `tiles`): rows of times
/// `4·(ct / 32) + i` (every rank), columns `2·(ct mod 32)`, `+ 1`, from the staged raw v rows
/// at `v_rows`, the unit's mimo_v table at `mimo_v` and the key scales at `kscale`. Each warp
/// writes whole rows. `XW_ONLY` (the segment-state pass) writes x_w alone.
#[inline(always)]
unsafe fn write_x<const XW_ONLY: bool>(tiles: u32, kscale: u32, mimo_v: u32, v_rows: u32, ct: u32) {
    // From a fresh copy: the sixteen row offsets below would otherwise be hoisted out of the
    // chunk loop and held across it.
    let ct = fresh_u32(ct);
    let (w, lane) = (ct / 32, ct % 32);
    // SAFETY (whole body): indices inside the unit's tiles and tables.
    unsafe {
        let v = [0u32, 1, 2, 3].map(|i| ld_shared_u32(v_rows + 128 * (4 * w + i) + 4 * lane));
        let ks = ld_shared_v4_f32(kscale + 16 * w);
        let [a0, a1, a2, a3] = ld_shared_v4_f32(mimo_v + 32 * lane);
        let [a4, a5, a6, a7] = ld_shared_v4_f32(mimo_v + 32 * lane + 16);
        let mv = [[a0, a1], [a2, a3], [a4, a5], [a6, a7]];
        for (i, &vw) in v.iter().enumerate() {
            let t = 4 * w + i as u32;
            let (v0, v1) = crate::chunked_forward_mma::unpack(vw);
            for (r, mr) in mv.iter().enumerate() {
                let at = mamba3_abi::swizzle128_offset(64, L::tile_row(t, r as u32), 2 * lane);
                let (x0, x1) = (v0 * mr[0], v1 * mr[1]);
                if !XW_ONLY {
                    st_shared_u32(tiles + L::X + at, pack_bf16x2(x0, x1));
                }
                st_shared_u32(tiles + L::XW + at, pack_bf16x2(x0 * ks[i], x1 * ks[i]));
            }
        }
    }
}

/// The warp-specialized bf16 forward at R = 4, N = 128, P = 64, Na = 32, C = 16 (module docs).
///
/// # Safety
/// The launch contract of the module docs.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_ws_bf16_r4_n128_p64_na32_c16(params: ForwardParams) {
    crate::arch::barrier::exit_unless_sm90a();
    // SAFETY: forwarded to the caller.
    unsafe { forward_ws::<false, false>(&params) }
}

/// [`forward_ws_bf16_r4_n128_p64_na32_c16`] that also writes the tensor-core backward's
/// checkpoints (the state and θ entering every chunk, as `forward_ckpt_mma_*` writes them) to
/// [`ForwardParams::ckpt_state`] and [`ForwardParams::ckpt_theta`]: a training step's forward,
/// with outputs bitwise those of the plain kernel.
///
/// # Safety
/// The launch contract of the module docs, with `ckpt_state` (8-byte aligned) and `ckpt_theta`
/// valid for `(B,H,⌈S/C⌉,P,N)` bf16 and `(B,H,⌈S/C⌉,Na,2)` f32.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn forward_ws_ckpt_bf16_r4_n128_p64_na32_c16(params: ForwardParams) {
    crate::arch::barrier::exit_unless_sm90a();
    // SAFETY: forwarded to the caller.
    unsafe { forward_ws::<true, false>(&params) }
}

/// The split forward's segment-state pass on the warp-specialized kernel's layout and roles
/// (bf16, R = 4, N = 128, P = 64, Na = 32, C = 16): segments `0..K−1` from a zero state and zero
/// angles, each block's two units writing their end states, angle totals and decays into the
/// hand-off slots, which the combine pass then turns into the states the forward's segments start
/// from. The producer stages and fills k̂ alone; the consumers run the state pass alone.
///
/// # Safety
/// The launch contract of the module docs with grid `(H/2, B, K − 1)` and `segments = K ≥ 2`
/// (no outputs, final states or checkpoints are written; the hand-off slots of segments
/// `0..K−1` are), q, z and the output unread.
#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn segment_state_ws_bf16_r4_n128_p64_na32_c16(
    params: ForwardParams,
) {
    crate::arch::barrier::exit_unless_sm90a();
    // SAFETY: forwarded to the caller.
    unsafe { forward_ws::<false, true>(&params) }
}
