//! Mamba-3 MIMO decode: [`DecodeState`], [`step`] / [`step_tokens`] and CUDA-graph replay
//! ([`DecodeGraph`]).
//!
//! The recurrence of spec §2.1 one token at a time, with the forward's conventions: raw angle and
//! trap logits, bias and rotation fused into the step, both rotations, every output mode, optional z
//! and D, GQA. The state per sequence is θ `(H,Na)` f32 kept in [0, 2π) every step (upstream lets it
//! grow), the SSM state `(H,P,N)` f32, the previous rotated+biased k `(R,H,N)` and the previous raw
//! v `(H,P)` in the activation dtype.
//!
//! [`step_tokens`] is one kernel launch for `T ≥ 1` tokens: the state is read once and written once.
//! From [`CHUNKED_MIN_TOKENS`] tokens (bf16 at the tensor-core forward's geometry) that launch is
//! the chunked forward over the call's tokens started from the state ([`DecodePath::Chunked`]),
//! or, up to eight tokens at many sequence-heads, the chunk-form tensor-core step
//! ([`DecodePath::TensorCoreChunk`]: the tokens as one chunk in a block per (b, h) holding the
//! state in `mma` accumulators); below that, bf16 calls at R = 4, N = 128, P = 64 run the tensor-core step
//! ([`DecodePath::TensorCore`]), whose blocks keep the state in `mma` accumulators across the
//! call's tokens.
//! Launches validate first, then neither allocate nor synchronize, so they can be captured.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaGraph, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, SyncOnDrop,
};
use mamba3_abi::{
    decode_mma_chunk_smem, decode_mma_smem, decode_mma_tokens_smem, decode_rows_max_per_warp,
    decode_stream_blocks_per_sm, DecodeParams, DecodeRowsSmem, DecodeSmem, DecodeStreamSmem,
    ForwardParams, DECODE_MMA_CHUNK_MAX_TOKENS, DECODE_MMA_GEOMETRY, DECODE_MMA_WARPS,
    DECODE_ROWS_MAX_N, DECODE_ROWS_WARPS, DECODE_STREAM_MAX_N, DECODE_STREAM_WARPS, DECODE_WARPS,
};

use crate::config::{Activation, Dtype, OutputMode, Rotation};
use crate::device::Gpu;
use crate::error::{Error, Result};
use crate::forward::{self, ForwardArgs, ForwardConfig};
use crate::kernel::{FixedDecodeGeometry, Kernel};

/// Most sequence-heads B·H for which a call runs the register-resident kernel.
///
/// Measured on the H200 (H=64 P=64 N=128 R=4, bf16, graph-replayed, µs per token): at B = 1 the
/// register-resident kernel takes 10.2 (T = 1) and 4.2 (T = 8) against the shared-memory kernel's
/// 15.5 and 7.1, whose 64 blocks leave half the SMs idle; from B = 8 (512 blocks) the
/// shared-memory kernel is faster (24.8 against 34.8 at T = 1). Up to 128 sequence-heads the
/// shared-memory grid is at most one block per SM, so the split rows still win there. Rechecked
/// with the fixed-geometry kernels (2026-11-30): at B = 8 the register-resident kernel takes 31.0
/// (T = 1, streaming 18.7) and 15.8 per token (T = 8, shared tile 7.8); at B = 64, 212 and 118
/// against 94 and 59.
pub const REGISTER_RESIDENT_MAX_SEQUENCE_HEADS: usize = 128;

/// Fewest tokens per call for which [`DecodeConfig::path`] picks [`DecodePath::Chunked`] (where
/// the forward runs on the tensor cores, see [`DecodeConfig::prefers_chunked`]).
///
/// Measured on the H200 (H=64 P=64 N=128 R=4, bf16, graph-replayed µs per call): the chunked
/// forward costs about the same for any T ≤ 16 (one chunk): 13.1 µs at B = 1 up to 860 at
/// B = 256, while the per-token kernels grow with T. At T = 3 the chunked call is already faster
/// (B = 1: 13.2 against 15.0 for the register-resident kernel; B = 8: 31.6 against 34.0 for the
/// shared tile; B = 256: 862 against 918), at T = 8 by 1.5–2.2× (B = 1: 13.1 against 28.9;
/// B = 256: 857 against 1727 for the shared tile), and at T = 1 it is slower (B = 1: 13.1
/// against 9.3; B = 256: 862 against 351 streaming). T = 2 is left to the per-token kernels
/// (interpolated: B = 1 about 12 against 13; B = 256 about 760 against 860).
///
/// Rechecked against the tensor-core step (2026-12-02, H200, graph µs per token, the units
/// kernel's chunked figures against `decode_mma_tokens_*`): T = 2 is the step's at every batch
/// (B = 1 4.91 against 4.50, B = 64 75.6 against 58.8, B = 256 293.3 against 221.5); T = 3 is
/// about even (B = 1 3.29 against 3.88, B = 32 26.4 against 27.1, B = 64 50.2 against 49.7,
/// B = 256 193.7 against 185.4); from T = 8 the chunked call wins by 1.8× (B = 64 20.9 against
/// 37.9, B = 256 80.0 against 141.7): the step runs each token's prologue, update and read-out
/// one after another in every block, the chunked call shares them as chunk GEMMs.
pub const CHUNKED_MIN_TOKENS: usize = 3;

/// Fewest sequence-heads B·H per SM and token for which a call of [`CHUNKED_MIN_TOKENS`] to
/// `mamba3_abi::DECODE_MMA_CHUNK_MAX_TOKENS` tokens runs [`DecodePath::TensorCoreChunk`]
/// (see [`DecodeConfig::prefers_tensor_core_chunk`]).
///
/// Measured on the H200 (H = 64, graph µs per call, chunk form against the units kernel of
/// [`DecodePath::Chunked`], 2026-12-02): its advantage shrinks with T and grows with the batch.
/// T = 3: B = 16 40.2 against 42.2, B = 32 74.7 against 79.2, B = 256 507 against 580; T = 8:
/// B = 16 48.3 against 45.8, B = 32 90.9 against 86.9, B = 64 164.6 against 166.3, B = 256
/// 587 against 641. Four per SM and token puts the crossover at B ≈ 25 for T = 3 and B ≈ 66
/// for T = 8 at H = 64 on 132 SMs.
pub const TENSOR_CORE_CHUNK_MIN_SEQUENCE_HEADS_PER_SM_PER_TOKEN: usize = 4;

/// Chunk size of [`DecodePath::Chunked`]: the chunk of the fixed-geometry and tensor-core
/// forward instantiations, so a call of up to 16 tokens is one chunk.
pub const DECODE_FORWARD_CHUNK: usize = 16;

/// Fewest sequence-heads B·H for which a one-token call runs the streaming kernel.
///
/// Measured on the H200 (H=64 P=64 N=128 R=4, bf16, fixed-geometry kernels, graph-replayed µs
/// per token): at B = 4 (256 sequence-heads) streaming with 16 rows per warp takes 13.1 against
/// the shared-tile kernel's 15.7; at B = 8 (512) 17.6 against 22.0, at B = 32 (2048) 48.1 against
/// 80, at B = 256 314 against 601; at B = 3 (192) 11.3 against 14.8 (2026-11-30, tenth stop). At
/// B = 2 (128) the register-resident kernel (9.3) beats streaming's best split (10.1) and keeps
/// those calls, so streaming starts right above its range.
pub const STREAMING_MIN_SEQUENCE_HEADS: usize = REGISTER_RESIDENT_MAX_SEQUENCE_HEADS + 1;

/// Warps per SM the streaming kernel's row split aims for: below it a warp's rows are halved
/// (down to [`STREAMING_MIN_ROWS_PER_WARP`]) so that few sequence-heads still fill the GPU. Fewer,
/// longer warps repeat the per-(b, h) prologue less often, and the splits that give 4–8 of the 16
/// resident warp slots measured faster than twice as many warps: B = 4, 16 rows (1024 warps) 13.1
/// µs against 8 rows 13.8; B = 8, 32 rows 17.6–17.8 against 16 rows 17.8–18.0; B = 3, 16 rows
/// (768 warps) 11.3 against 8 rows 11.7; B = 2, 16 rows (512) 10.1 against 8 rows 10.3; B = 32,
/// 64 rows (2048 warps) 51.1 against 32 rows 55.4. Halving stops below 32 rows at B = 4 (512
/// warps: 13.4). (Figures of the tenth stop, before the shared prologue, which now takes the
/// calls whose blocks fit one wave: see [`DecodeConfig::streaming_rows_per_warp`].)
pub const STREAMING_WARPS_PER_SM: usize = 4;

/// Fewest state rows a warp of the streaming kernel is given (each warp forms q̂ and k̂ of its
/// columns itself, so very short row ranges would repeat that work for little state).
pub const STREAMING_MIN_ROWS_PER_WARP: usize = 4;

/// The kernel family that runs a decode call, with its row split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodePath {
    /// `decode_*`: a block per (b, h), the state tile in shared memory; every geometry, T ≥ 1.
    SharedTile,
    /// `decode_rows_*`: the rows of a (b, h) in registers, split over blocks of
    /// [`DECODE_ROWS_WARPS`] warps holding `rows_per_warp` rows each; T ≥ 1.
    RegisterResident {
        /// State rows per warp, 1 ..= 4.
        rows_per_warp: u32,
    },
    /// `decode_stream_*`: one token; every warp streams `rows_per_warp` rows of one (b, h) on
    /// its own, through a `cp.async` ring in shared memory.
    Streaming {
        /// State rows per warp, ≥ 1.
        rows_per_warp: u32,
    },
    /// `decode_mma_*`: bf16 activations at R = 4, N = 128, P = 64 (any Na), T ≥ 1: a block per
    /// (b, h) whose four warps hold its state rows as tensor-core accumulators across the call's
    /// tokens; each token's rank-8 update and read-out are `mma` products whose operands are split
    /// into bf16 `hi + lo` pairs, so the state keeps about 2^-16 of each update's size. One token
    /// runs `decode_mma_bf16_*`, more the token-loop entry `decode_mma_tokens_bf16_*`.
    TensorCore,
    /// `decode_mma_prefetch_*`: [`DecodePath::TensorCore`] for one token, its blocks first asking
    /// L2 for their call's inputs and state (`cp.async.bulk.prefetch` and `prefetch.global.L2`,
    /// before the dependent-launch wait; the `sm_90` module only). A grid that fits the GPU at
    /// once is resident while the previous kernel finishes, and finds its data in L2 after the
    /// wait; see [`DecodeConfig::prefers_tensor_core_prefetching`].
    TensorCorePrefetching,
    /// `decode_mma_chunk_*`: bf16 activations at R = 4, N = 128, P = 64 (any Na), 1 ≤ T ≤
    /// `mamba3_abi::DECODE_MMA_CHUNK_MAX_TOKENS`: the call's tokens as one chunk of the SSD
    /// decomposition (read-out from the state, weighted scores, intra term and state update as
    /// bf16 `mma` products, the chunked forward's roundings) in a block per (b, h) that holds the
    /// state as tensor-core accumulators, three blocks per SM.
    TensorCoreChunk,
    /// The chunked forward (`forward_mma_*` where the dtype and geometry have the tensor-core
    /// kernel, else `forward_fma_*`, see [`crate::forward::kernel_for`]) over the call's T tokens
    /// as one sequence in chunks of [`DECODE_FORWARD_CHUNK`], started from the state and writing
    /// it back in place (`ForwardParams::init_*`): a block per (b, h), every token's update and
    /// read-out as chunk GEMMs; T ≥ 1. A call shorter than a chunk at the tensor-core geometry
    /// runs `forward_mma_units_*`: one wave of blocks, each walking the batch rows of its head
    /// and loading the next (b, h) while it computes the current one.
    Chunked,
}

impl DecodePath {
    /// The entry point this path launches for activation type `X`, `config`'s geometry and a
    /// call of `tokens` tokens, if instantiated: the fixed-geometry instantiation when one
    /// matches exactly ([`Kernel::decode_fixed`]), else the rank's general kernel; for the
    /// chunked path the forward kernel of a `tokens`-long sequence (shorter than a chunk: the
    /// tensor-core forward's batch-walking short-call instantiation, which runs one wave of
    /// blocks, each walking the batch rows of its head).
    pub fn kernel<X: Activation>(&self, config: &DecodeConfig, tokens: usize) -> Option<Kernel> {
        let rank = config.rank;
        let fixed = Kernel::decode_fixed(
            X::DTYPE,
            FixedDecodeGeometry {
                rank,
                state_dim: config.state_dim,
                head_dim: config.head_dim,
                num_angles: config.num_angles,
            },
        );
        match (self, fixed) {
            (DecodePath::SharedTile, Some(f)) => Some(f.shared_tile),
            (DecodePath::RegisterResident { .. }, Some(f)) => Some(f.register_resident),
            (DecodePath::Streaming { .. }, Some(f)) => Some(f.streaming),
            (DecodePath::SharedTile, None) => Kernel::decode(X::DTYPE, rank),
            (DecodePath::RegisterResident { .. }, None) => Kernel::decode_rows(X::DTYPE, rank),
            (DecodePath::Streaming { .. }, None) => Kernel::decode_stream(X::DTYPE, rank),
            (DecodePath::TensorCore, _) => Kernel::decode_tensor_core(
                X::DTYPE,
                rank,
                config.state_dim,
                config.head_dim,
                tokens,
            ),
            (DecodePath::TensorCorePrefetching, _) => Kernel::decode_tensor_core_prefetching(
                X::DTYPE,
                rank,
                config.state_dim,
                config.head_dim,
                tokens,
            ),
            (DecodePath::TensorCoreChunk, _) => Kernel::decode_tensor_core_chunk(
                X::DTYPE,
                rank,
                config.state_dim,
                config.head_dim,
                tokens,
            ),
            (DecodePath::Chunked, _) => {
                let forward = config.forward_config(tokens, X::DTYPE);
                forward::units_kernel(&forward).or_else(|| forward::kernel_for(&forward))
            }
        }
    }

    /// State rows per warp (0 for the shared-tile kernel, which takes none).
    pub fn rows_per_warp(&self) -> u32 {
        match *self {
            DecodePath::SharedTile
            | DecodePath::Chunked
            | DecodePath::TensorCore
            | DecodePath::TensorCorePrefetching
            | DecodePath::TensorCoreChunk => 0,
            DecodePath::RegisterResident { rows_per_warp }
            | DecodePath::Streaming { rows_per_warp } => rows_per_warp,
        }
    }
}

/// Shapes and options of a decode: everything except the tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeConfig {
    /// Batch rows (sequences) B.
    pub batch: usize,
    /// Value heads H.
    pub heads: usize,
    /// q/k groups G (G divides H; head h reads group h / (H/G)).
    pub groups: usize,
    /// MIMO rank R ∈ {1, 2, 4, 8}.
    pub rank: usize,
    /// State size N (even).
    pub state_dim: usize,
    /// Head dim P.
    pub head_dim: usize,
    /// Rotary angles Na ≤ N/2.
    pub num_angles: usize,
    /// Rotary convention.
    pub rotation: Rotation,
    /// Output mode; [`OutputMode::FusedNorm`] needs a norm weight and `mimo_o`,
    /// [`OutputMode::Prereduce`] takes no `mimo_o`.
    pub mode: OutputMode,
    /// Whether z (and `mimo_z`) are given.
    pub has_z: bool,
    /// Whether D is given.
    pub has_d: bool,
    /// RMSNorm epsilon (fused-norm mode).
    pub norm_eps: f32,
}

impl DecodeConfig {
    /// Checks the geometry; the error names the field, its value and the rule.
    pub fn validate(&self) -> Result<()> {
        for (arg, v) in [
            ("batch", self.batch),
            ("heads", self.heads),
            ("groups", self.groups),
            ("state_dim", self.state_dim),
            ("head_dim", self.head_dim),
        ] {
            if v == 0 {
                return Err(Error::invalid(arg, v, "must be at least 1"));
            }
        }
        if !self.heads.is_multiple_of(self.groups) {
            return Err(Error::invalid(
                "groups",
                self.groups,
                format!("must divide heads = {}", self.heads),
            ));
        }
        if !matches!(self.rank, 1 | 2 | 4 | 8) {
            return Err(Error::invalid("rank", self.rank, "must be 1, 2, 4 or 8"));
        }
        if !self.state_dim.is_multiple_of(2) {
            return Err(Error::invalid(
                "state_dim",
                self.state_dim,
                "must be even (rotary pairs)",
            ));
        }
        if self.num_angles > self.state_dim / 2 {
            return Err(Error::invalid(
                "num_angles",
                self.num_angles,
                format!("must be at most state_dim / 2 = {}", self.state_dim / 2),
            ));
        }
        if self.batch > 65_535 {
            return Err(Error::invalid(
                "batch",
                self.batch,
                "must be at most 65535 (grid y)",
            ));
        }
        if self.mode == OutputMode::FusedNorm && !(self.norm_eps > 0.0 && self.norm_eps.is_finite())
        {
            return Err(Error::invalid(
                "norm_eps",
                self.norm_eps,
                "must be positive and finite",
            ));
        }
        let largest = self
            .sequence_heads()
            .saturating_mul(self.head_dim)
            .saturating_mul(self.state_dim.max(self.rank.saturating_mul(64)));
        if largest > u32::MAX as usize / 2 {
            return Err(Error::invalid(
                "batch",
                self.batch,
                "tensor sizes must stay below 2^31 elements",
            ));
        }
        Ok(())
    }

    /// Whether the register-resident kernel (`decode_rows_*`) runs this call: few sequence-heads
    /// (B·H ≤ [`REGISTER_RESIDENT_MAX_SEQUENCE_HEADS`], where the shared-memory kernel's grid of
    /// B·H blocks leaves SMs idle), `N` a multiple of 4 up to 128 and, in fused-norm mode (the
    /// norm spans all of P in one block), P within one block (32 rows). Other calls run the
    /// shared-memory kernel (`decode_*`).
    pub fn register_resident(&self) -> bool {
        let rows_max = (DECODE_ROWS_WARPS * self.max_rows_per_warp()) as usize;
        self.sequence_heads() <= REGISTER_RESIDENT_MAX_SEQUENCE_HEADS
            && self.state_dim.is_multiple_of(4)
            && self.state_dim <= DECODE_ROWS_MAX_N as usize
            && (self.mode != OutputMode::FusedNorm || self.head_dim <= rows_max)
    }

    /// Whether the streaming kernel (`decode_stream_*`) can run a call over `tokens` tokens: one
    /// token, `N` a multiple of 4 up to 128, gated or prereduce output.
    pub fn streamable(&self, tokens: usize) -> bool {
        tokens == 1
            && self.state_dim.is_multiple_of(4)
            && self.state_dim <= DECODE_STREAM_MAX_N as usize
            && self.mode != OutputMode::FusedNorm
    }

    /// State rows per warp of the streaming kernel on a GPU of `sm_count` SMs: the split whose
    /// four warps of a block share the per-rank prologue
    /// ([`DecodeConfig::streaming_shared_prologue_rows`]) when its B·H blocks are resident at
    /// once; otherwise all of P (one warp per (b, h)) when B·H warps reach
    /// [`STREAMING_WARPS_PER_SM`] per SM, else halved until they do or a warp is down to
    /// [`STREAMING_MIN_ROWS_PER_WARP`] rows.
    ///
    /// Measured on the H200 (H=64 P=64 N=128 R=4, bf16, graph µs, 2026-12-01): batch 8 (512
    /// blocks) 15.3–15.5 with the shared prologue against 16.5–16.9 at 32 rows per warp; batch
    /// 16 (1024 blocks, two waves) 29.6 against 27.4–27.8 at 64 rows.
    pub fn streaming_rows_per_warp(&self, sm_count: usize) -> u32 {
        let one_wave = decode_stream_blocks_per_sm(self.rank as u32) as usize * sm_count;
        if let Some(rows) = self.streaming_shared_prologue_rows() {
            if self.sequence_heads() <= one_wave {
                return rows;
            }
        }
        let target = STREAMING_WARPS_PER_SM * sm_count;
        let warps = |rows: usize| {
            self.sequence_heads()
                .saturating_mul(self.head_dim.div_ceil(rows))
        };
        let mut rows = self.head_dim;
        while rows > STREAMING_MIN_ROWS_PER_WARP && warps(rows) < target {
            rows = rows.div_ceil(2).max(STREAMING_MIN_ROWS_PER_WARP);
        }
        rows as u32
    }

    /// Sequence-heads B·H of a call (saturating: the dispatch queries answer geometries that
    /// validation would reject).
    fn sequence_heads(&self) -> usize {
        self.batch.saturating_mul(self.heads)
    }

    /// Rows per warp of the streaming kernel at which the four warps of a block are the four
    /// row ranges of one (b, h) and share its per-rank prologue (each forms the rotated q̂ and k̂
    /// of a quarter of the ranks; one barrier, no arrival counter): `⌈P/4⌉` where that splits P
    /// into exactly four ranges, else `None` (also for P = 0).
    pub fn streaming_shared_prologue_rows(&self) -> Option<u32> {
        let warps = DECODE_STREAM_WARPS as usize;
        let rows = self.head_dim.div_ceil(warps);
        (rows > 0 && self.head_dim.div_ceil(rows) == warps).then_some(rows as u32)
    }

    /// The kernel a call over `tokens` tokens with activations `X` runs on a GPU of `sm_count`
    /// SMs and `max_shared_memory` bytes of opt-in shared memory per block: the chunked forward
    /// where [`DecodeConfig::prefers_chunked`]; a one-token call with bf16 activations at its
    /// geometry the tensor-core kernel (see [`DecodeConfig::prefers_tensor_core`]); from
    /// [`STREAMING_MIN_SEQUENCE_HEADS`] sequence-heads another one-token call streams (where
    /// [`DecodeConfig::streamable`]); few
    /// sequence-heads run the register-resident kernel (see
    /// [`DecodeConfig::register_resident`]); the shared-tile kernel runs the rest.
    pub fn path<X: Activation>(
        &self,
        tokens: usize,
        sm_count: usize,
        max_shared_memory: usize,
    ) -> DecodePath {
        let many = self.sequence_heads() >= STREAMING_MIN_SEQUENCE_HEADS;
        if self.prefers_tensor_core_chunk::<X>(tokens, sm_count, max_shared_memory) {
            DecodePath::TensorCoreChunk
        } else if self.prefers_chunked::<X>(tokens, max_shared_memory) {
            DecodePath::Chunked
        } else if self.prefers_tensor_core_prefetching::<X>(tokens, sm_count) {
            DecodePath::TensorCorePrefetching
        } else if self.prefers_tensor_core::<X>(tokens) {
            DecodePath::TensorCore
        } else if many && self.streamable(tokens) {
            DecodePath::Streaming {
                rows_per_warp: self.streaming_rows_per_warp(sm_count),
            }
        } else if self.register_resident() {
            DecodePath::RegisterResident {
                rows_per_warp: self.rows_per_warp(sm_count),
            }
        } else {
            DecodePath::SharedTile
        }
    }

    /// Whether [`DecodeConfig::path`] picks [`DecodePath::TensorCoreChunk`] for a call over
    /// `tokens` tokens with activations `X` on a GPU of `sm_count` SMs whose opt-in shared
    /// memory per block is `max_shared_memory` bytes: bf16 at the tensor-core geometry, from
    /// [`CHUNKED_MIN_TOKENS`] to `mamba3_abi::DECODE_MMA_CHUNK_MAX_TOKENS` tokens, and at least
    /// [`TENSOR_CORE_CHUNK_MIN_SEQUENCE_HEADS_PER_SM_PER_TOKEN`]·T sequence-heads per SM, where
    /// its three blocks per SM beat the units kernel's batch walk.
    pub fn prefers_tensor_core_chunk<X: Activation>(
        &self,
        tokens: usize,
        sm_count: usize,
        max_shared_memory: usize,
    ) -> bool {
        tokens >= CHUNKED_MIN_TOKENS
            && self.check_path(DecodePath::TensorCoreChunk, tokens).is_ok()
            && DecodePath::TensorCoreChunk
                .kernel::<X>(self, tokens)
                .is_some()
            && decode_mma_chunk_smem::BYTES as usize <= max_shared_memory
            && self.sequence_heads()
                >= TENSOR_CORE_CHUNK_MIN_SEQUENCE_HEADS_PER_SM_PER_TOKEN
                    .saturating_mul(tokens)
                    .saturating_mul(sm_count)
    }

    /// Whether [`DecodeConfig::path`] picks [`DecodePath::Chunked`] for a call over `tokens`
    /// tokens with activations `X` on a GPU whose opt-in shared memory per block is
    /// `max_shared_memory` bytes: from [`CHUNKED_MIN_TOKENS`] tokens, with bf16 activations,
    /// where the forward has a tensor-core kernel for the geometry and the GPU holds its shared
    /// memory. Its `chunked_forward` fallback is slower than the per-token kernels (f32, T = 8,
    /// H200: 138 against 63 µs at B = 8, 4129 against 1715 at B = 256), so it runs only when
    /// pinned; so does f32's three-pass TF32 forward, which beat the per-token kernels in one
    /// cell of the H200's table only (T ∈ {3, 4, 8}, B = 1–256; H = 64: 40 against 49 µs at
    /// B = 4, T = 8; 35 against 13 µs at B = 1, T = 3; 2628 against 1766 at B = 256, T = 8).
    pub fn prefers_chunked<X: Activation>(&self, tokens: usize, max_shared_memory: usize) -> bool {
        let config = self.forward_config(tokens, X::DTYPE);
        tokens >= CHUNKED_MIN_TOKENS
            && X::DTYPE == Dtype::Bf16
            && forward::validate_config(&config).is_ok()
            && forward::tensor_core_fits(&config, max_shared_memory)
    }

    /// Whether [`DecodeConfig::path`] can pick [`DecodePath::TensorCore`] for a call over `tokens`
    /// tokens with activations `X`: bf16 and the kernel's geometry
    /// (`mamba3_abi::DECODE_MMA_GEOMETRY`), at every batch; `path` asks
    /// [`DecodeConfig::prefers_chunked`] first, which takes calls from [`CHUNKED_MIN_TOKENS`]
    /// tokens where the GPU holds the chunked forward's shared memory.
    ///
    /// Measured on the H200 (H=64 P=64 N=128 R=4, Na=32, gated, graph-replayed µs, 2026-12-02)
    /// against the best of the other kernels: one token, batch 1 5.90 against 7.37
    /// (register-resident), batch 2 6.62 against 8.86, batch 4 9.05 against 10.79 (streaming),
    /// batch 8 12.78 against 15.12, batch 64 77.8 against 87.5, batch 256 289.7 against 309.2;
    /// two tokens (per call), batch 1 9.00 against 9.82 (chunked), batch 8 21.8 against 23.0,
    /// batch 64 117.6 against 151.2, batch 256 442.9 against 586.6.
    pub fn prefers_tensor_core<X: Activation>(&self, tokens: usize) -> bool {
        self.check_path(DecodePath::TensorCore, tokens).is_ok()
            && DecodePath::TensorCore.kernel::<X>(self, tokens).is_some()
    }

    /// Whether [`DecodeConfig::path`] picks [`DecodePath::TensorCorePrefetching`]: one token
    /// where [`DecodeConfig::prefers_tensor_core`], and B·H blocks no more than `sm_count`.
    ///
    /// Measured on the H200 (H=64 P=64 N=128 R=4, one token, same session, 2026-12-03; graph µs
    /// per call / one graph of calls / the same with inputs in L2, against
    /// [`DecodePath::TensorCore`]): batch 1 6.20–6.23 / 3.79–3.80 / 3.67 against 5.66–5.88 /
    /// 4.18–4.20 / 4.16–4.21; batch 2 6.85–6.86 / 4.52–4.55 / 4.38–4.42 against 6.55–6.58 /
    /// 4.87–4.93 / 4.85–4.89; batch 4 (256 blocks) 9.00–9.04 / 7.24–7.39 / 7.46–7.53 against
    /// 8.71–8.83 / 7.03–7.12 / 7.04–7.17. A call in a graph of calls, or after any kernel that
    /// lets it start early, gains; a lone call pays 0.3–0.6 µs.
    pub fn prefers_tensor_core_prefetching<X: Activation>(
        &self,
        tokens: usize,
        sm_count: usize,
    ) -> bool {
        tokens == 1 && self.prefers_tensor_core::<X>(tokens) && self.sequence_heads() <= sm_count
    }

    /// Checks that `path` can run a call over `tokens` tokens with this geometry; the error names
    /// the path and the rule (the tensor-core path's dtype is checked at the launch).
    pub fn check_path(&self, path: DecodePath, tokens: usize) -> Result<()> {
        let broken = match path {
            DecodePath::SharedTile => None,
            DecodePath::Chunked => {
                forward::validate_config(&self.forward_config(tokens, Dtype::F32))
                    .err()
                    .map(|e| format!("the chunked forward rejects this call: {e}"))
            }
            DecodePath::RegisterResident { rows_per_warp } => {
                let max = self.max_rows_per_warp();
                let rows_max = (DECODE_ROWS_WARPS * max) as usize;
                if !(1..=max).contains(&rows_per_warp) {
                    Some(format!("rows_per_warp must be 1 ..= {max}"))
                } else if !self.state_dim.is_multiple_of(4)
                    || self.state_dim > DECODE_ROWS_MAX_N as usize
                {
                    Some(format!("needs N a multiple of 4 up to {DECODE_ROWS_MAX_N}"))
                } else if self.mode == OutputMode::FusedNorm
                    && (self.head_dim > rows_max
                        || self.head_dim > (DECODE_ROWS_WARPS * rows_per_warp) as usize)
                {
                    Some("fused-norm mode needs all of P in one block".to_string())
                } else {
                    None
                }
            }
            DecodePath::TensorCore => {
                let [r, n, p] = DECODE_MMA_GEOMETRY.map(|d| d as usize);
                (tokens == 0 || (self.rank, self.state_dim, self.head_dim) != (r, n, p)).then(
                    || {
                        format!(
                            "needs at least one token and (R, N, P) = ({r}, {n}, {p}) with bf16 \
                             activations"
                        )
                    },
                )
            }
            DecodePath::TensorCorePrefetching => {
                let [r, n, p] = DECODE_MMA_GEOMETRY.map(|d| d as usize);
                (tokens != 1 || (self.rank, self.state_dim, self.head_dim) != (r, n, p)).then(
                    || {
                        format!(
                            "needs one token and (R, N, P) = ({r}, {n}, {p}) with bf16 activations"
                        )
                    },
                )
            }
            DecodePath::TensorCoreChunk => {
                let [r, n, p] = DECODE_MMA_GEOMETRY.map(|d| d as usize);
                let max = DECODE_MMA_CHUNK_MAX_TOKENS as usize;
                (!(1..=max).contains(&tokens)
                    || (self.rank, self.state_dim, self.head_dim) != (r, n, p))
                    .then(|| {
                        format!(
                            "needs 1 ..= {max} tokens and (R, N, P) = ({r}, {n}, {p}) with bf16 \
                             activations"
                        )
                    })
            }
            DecodePath::Streaming { rows_per_warp } => {
                if rows_per_warp == 0 {
                    Some("rows_per_warp must be at least 1".to_string())
                } else if !self.streamable(tokens) {
                    Some(format!(
                        "needs one token, N a multiple of 4 up to {DECODE_STREAM_MAX_N} and gated \
                         or prereduce output"
                    ))
                } else {
                    None
                }
            }
        };
        match broken {
            None => Ok(()),
            Some(rule) => Err(Error::invalid("path", format!("{path:?}"), rule)),
        }
    }

    /// The forward configuration of [`DecodePath::Chunked`] for a call over `tokens` tokens with
    /// activations in `dtype`: the same geometry and options, S = T, C = [`DECODE_FORWARD_CHUNK`].
    pub fn forward_config(&self, tokens: usize, dtype: Dtype) -> ForwardConfig {
        ForwardConfig {
            batch: self.batch,
            seq_len: tokens,
            rank: self.rank,
            groups: self.groups,
            heads: self.heads,
            state_dim: self.state_dim,
            head_dim: self.head_dim,
            num_angles: self.num_angles,
            chunk_size: DECODE_FORWARD_CHUNK,
            dtype,
            rotation: self.rotation,
            mode: self.mode,
            has_z: self.has_z,
            has_d: self.has_d,
            norm_eps: self.norm_eps,
        }
    }

    fn max_rows_per_warp(&self) -> u32 {
        decode_rows_max_per_warp(self.rank as u32)
    }

    /// State rows per warp of the register-resident kernel on a GPU of `sm_count` SMs: all of P
    /// in one block per (b, h) (at most 4 rows per warp), halved while the grid stays within two
    /// blocks per SM, so that a small batch spreads its rows over the SMs. Fused-norm mode keeps
    /// one block per (b, h).
    pub fn rows_per_warp(&self, sm_count: usize) -> u32 {
        let warps = DECODE_ROWS_WARPS as usize;
        let mut rows = self
            .head_dim
            .div_ceil(warps)
            .min(self.max_rows_per_warp() as usize);
        let blocks = |rows: usize| {
            self.sequence_heads()
                .saturating_mul(self.head_dim.div_ceil(warps * rows))
        };
        if self.mode != OutputMode::FusedNorm {
            while rows > 1 && blocks(rows / 2) <= 2 * sm_count {
                rows /= 2;
            }
        }
        rows as u32
    }

    /// Shared memory of one block of the kernel a multi-token call runs, in bytes: for the
    /// register-resident kernel, its largest block (all of P in one block; blocks of a split
    /// batch hold fewer rows). The streaming kernel (one token) needs only
    /// `DecodeStreamSmem::new(R).block_bytes()`, a few KB. `usize::MAX` when R, N, P or Na is
    /// above 8192 (far past any GPU's shared memory; the layouts are sized in u32).
    pub fn shared_memory_bytes(&self) -> usize {
        let dims = [self.rank, self.state_dim, self.head_dim, self.num_angles];
        if dims.iter().any(|&d| d > 1 << 13) {
            return usize::MAX;
        }
        let (r, n) = (self.rank as u32, self.state_dim as u32);
        let (p, na) = (self.head_dim as u32, self.num_angles as u32);
        if self.register_resident() {
            let rows = p.div_ceil(DECODE_ROWS_WARPS).min(self.max_rows_per_warp());
            DecodeRowsSmem::new(r, n, DECODE_ROWS_WARPS * rows, na).bytes() as usize
        } else {
            DecodeSmem::new(r, n, p, na).bytes() as usize
        }
    }

    /// The kernels a call over `tokens` tokens with activation type `X` launches on a GPU of
    /// `sm_count` SMs whose opt-in shared memory per block is `max_shared_memory` bytes, by
    /// symbol (the SM count decides the row splits and whether a call of a few tokens runs the
    /// chunk-form tensor-core kernel, see [`DecodeConfig::prefers_tensor_core_chunk`]).
    pub fn dispatch_paths<X: Activation>(
        &self,
        tokens: usize,
        sm_count: usize,
        max_shared_memory: usize,
    ) -> Vec<&'static str> {
        self.path::<X>(tokens, sm_count, max_shared_memory)
            .kernel::<X>(self, tokens)
            .map(|k| vec![k.symbol()])
            .unwrap_or_default()
    }

    /// Elements of the output for `tokens` tokens: (B,T,H,P), or (B,T,R,H,P) in prereduce mode
    /// (saturating at `usize::MAX`).
    pub fn output_len(&self, tokens: usize) -> usize {
        let ranks = if self.mode == OutputMode::Prereduce {
            self.rank
        } else {
            1
        };
        product(&[self.batch, tokens, ranks, self.heads, self.head_dim])
    }

    /// Bytes one call over `tokens` tokens must move at least (spec performance.md §3.5):
    /// the state read and written once, the per-token inputs and outputs once, with `elem` bytes
    /// per activation (saturating at `usize::MAX`).
    pub fn min_bytes(&self, tokens: usize, elem: usize) -> usize {
        let (b, h, r, g, n, p, na) = (
            self.batch,
            self.heads,
            self.rank,
            self.groups,
            self.state_dim,
            self.head_dim,
            self.num_angles,
        );
        let sum = |xs: &[usize]| xs.iter().fold(0usize, |a, &x| a.saturating_add(x));
        let state = product(&[
            b,
            h,
            sum(&[
                product(&[4, p, n]),
                product(&[4, na]),
                product(&[elem, r, n]),
                product(&[elem, p]),
            ]),
        ]);
        let per_token = product(&[
            b,
            sum(&[
                product(&[elem, 2, r, g, n]),
                product(&[elem, h, p, 1 + self.has_z as usize]),
                product(&[h, sum(&[elem, 8, product(&[4, na])])]),
            ]),
        ]);
        let out = product(&[elem, self.output_len(1)]);
        sum(&[
            product(&[2, state]),
            product(&[tokens, sum(&[per_token, out])]),
        ])
    }
}

/// The product of `factors`, saturating at `usize::MAX`.
fn product(factors: &[usize]) -> usize {
    factors.iter().fold(1usize, |a, &x| a.saturating_mul(x))
}

/// Per-head parameters (f32, device): the same for every step.
#[derive(Debug)]
pub struct DecodeWeights<'a> {
    /// q bias (H,R,N).
    pub q_bias: &'a CudaSlice<f32>,
    /// k bias (H,R,N).
    pub k_bias: &'a CudaSlice<f32>,
    /// v up-projection (H,R,P).
    pub mimo_v: &'a CudaSlice<f32>,
    /// z up-projection (H,R,P), with z.
    pub mimo_z: Option<&'a CudaSlice<f32>>,
    /// Down-projection (H,R,P); absent in prereduce mode.
    pub mimo_o: Option<&'a CudaSlice<f32>>,
    /// Skip weight (H).
    pub d: Option<&'a CudaSlice<f32>>,
    /// RMSNorm weight (H,P), fused-norm mode.
    pub norm_weight: Option<&'a CudaSlice<f32>>,
}

/// Inputs of `T` consecutive tokens (device).
#[derive(Debug)]
pub struct DecodeInputs<'a, X: Activation> {
    /// q (B,T,R,G,N).
    pub q: &'a CudaSlice<X>,
    /// k (B,T,R,G,N).
    pub k: &'a CudaSlice<X>,
    /// v (B,T,H,P).
    pub v: &'a CudaSlice<X>,
    /// z (B,T,H,P), when the config has z.
    pub z: Option<&'a CudaSlice<X>>,
    /// Raw trap logits (B,H,T).
    pub trap: &'a CudaSlice<X>,
    /// Step sizes Δ > 0 (B,H,T).
    pub dt: &'a CudaSlice<f32>,
    /// Natural-log decays (B,H,T).
    pub adt: &'a CudaSlice<f32>,
    /// Raw angle logits (B,T,H,Na).
    pub angles: &'a CudaSlice<f32>,
}

/// The recurrent state of `B` sequences on the device.
#[derive(Debug)]
pub struct DecodeState<X: Activation> {
    config: DecodeConfig,
    /// θ (B,H,Na) f32 in [0, 2π).
    pub theta: CudaSlice<f32>,
    /// SSM state (B,H,P,N) f32.
    pub ssm: CudaSlice<f32>,
    /// Previous rotated+biased k (B,R,H,N).
    pub k: CudaSlice<X>,
    /// Previous raw v (B,H,P).
    pub v: CudaSlice<X>,
    /// Per-(b, h) arrival counters (B,H) of the split kernels' rows; zero between launches.
    arrivals: CudaSlice<u32>,
    /// The kernel every call runs, when pinned by [`DecodeState::pin_path`].
    pinned: Option<DecodePath>,
}

/// Host copy of a [`DecodeState`] (same layouts), e.g. the forward's final states.
#[derive(Debug, Clone, PartialEq)]
pub struct HostDecodeState<X> {
    /// θ (B,H,Na).
    pub theta: Vec<f32>,
    /// SSM state (B,H,P,N).
    pub ssm: Vec<f32>,
    /// k (B,R,H,N).
    pub k: Vec<X>,
    /// v (B,H,P).
    pub v: Vec<X>,
}

fn expect_len(arg: &'static str, len: usize, want: usize, shape: &str) -> Result<()> {
    if len == want {
        Ok(())
    } else {
        Err(Error::invalid(
            arg,
            format!("{len} elements"),
            format!("must have shape {shape} = {want} elements"),
        ))
    }
}

impl<X: Activation> DecodeState<X> {
    fn lens(c: &DecodeConfig) -> [usize; 4] {
        let (b, h) = (c.batch, c.heads);
        [
            b * h * c.num_angles,
            b * h * c.head_dim * c.state_dim,
            b * c.rank * h * c.state_dim,
            b * h * c.head_dim,
        ]
    }

    /// A zero state (no token seen) for `config.batch` sequences.
    pub fn new(stream: &Arc<CudaStream>, config: DecodeConfig) -> Result<Self> {
        config.validate()?;
        let [t, s, k, v] = Self::lens(&config);
        let alloc = || Error::driver("allocating the decode state");
        Ok(DecodeState {
            config,
            theta: stream.alloc_zeros(t.max(1)).map_err(alloc())?,
            ssm: stream.alloc_zeros(s).map_err(alloc())?,
            k: stream.alloc_zeros(k).map_err(alloc())?,
            v: stream.alloc_zeros(v).map_err(alloc())?,
            arrivals: stream
                .alloc_zeros(config.batch * config.heads)
                .map_err(alloc())?,
            pinned: None,
        })
    }

    /// A state holding `host` (e.g. the forward's final states: θ, SSM state, last rotated k,
    /// last raw v). θ is reduced into [0, 2π) on the way in.
    pub fn from_host(
        stream: &Arc<CudaStream>,
        config: DecodeConfig,
        host: &HostDecodeState<X>,
    ) -> Result<Self> {
        config.validate()?;
        let [t, s, k, v] = Self::lens(&config);
        expect_len("theta", host.theta.len(), t, "(B,H,Na)")?;
        expect_len("ssm", host.ssm.len(), s, "(B,H,P,N)")?;
        expect_len("k", host.k.len(), k, "(B,R,H,N)")?;
        expect_len("v", host.v.len(), v, "(B,H,P)")?;
        let mut theta: Vec<f32> = host
            .theta
            .iter()
            .map(|x| x.rem_euclid(std::f32::consts::TAU))
            .collect();
        if theta.is_empty() {
            theta.push(0.0);
        }
        let copy = || Error::driver("copying the decode state to the device");
        Ok(DecodeState {
            config,
            theta: stream.clone_htod(&theta).map_err(copy())?,
            ssm: stream.clone_htod(&host.ssm).map_err(copy())?,
            k: stream.clone_htod(&host.k).map_err(copy())?,
            v: stream.clone_htod(&host.v).map_err(copy())?,
            arrivals: stream
                .alloc_zeros(config.batch * config.heads)
                .map_err(copy())?,
            pinned: None,
        })
    }

    /// A state continuing from the forward's final states (θ in [0, 2π), SSM state, last rotated
    /// k, last raw v), copied on `stream` device to device: the prefill → decode hand-off.
    pub fn from_forward(
        stream: &Arc<CudaStream>,
        config: DecodeConfig,
        states: &crate::forward::FinalStates<X>,
    ) -> Result<Self> {
        config.validate()?;
        let [t, s, k, v] = Self::lens(&config);
        expect_len("states.theta", states.theta.len(), t, "(B,H,Na)")?;
        expect_len("states.ssm", states.ssm.len(), s, "(B,H,P,N)")?;
        expect_len("states.k", states.k.len(), k, "(B,R,H,N)")?;
        expect_len("states.v", states.v.len(), v, "(B,H,P)")?;
        let copy = || Error::driver("copying the forward's final states");
        let theta = if t == 0 {
            stream.alloc_zeros(1).map_err(copy())?
        } else {
            stream.clone_dtod(&states.theta).map_err(copy())?
        };
        Ok(DecodeState {
            config,
            theta,
            ssm: stream.clone_dtod(&states.ssm).map_err(copy())?,
            k: stream.clone_dtod(&states.k).map_err(copy())?,
            v: stream.clone_dtod(&states.v).map_err(copy())?,
            arrivals: stream
                .alloc_zeros(config.batch * config.heads)
                .map_err(copy())?,
            pinned: None,
        })
    }

    /// Copies the state to the host (synchronizes `stream`).
    pub fn to_host(&self, stream: &Arc<CudaStream>) -> Result<HostDecodeState<X>> {
        let copy = || Error::driver("copying the decode state to the host");
        let mut theta = stream.clone_dtoh(&self.theta).map_err(copy())?;
        theta.truncate(self.config.batch * self.config.heads * self.config.num_angles);
        Ok(HostDecodeState {
            theta,
            ssm: stream.clone_dtoh(&self.ssm).map_err(copy())?,
            k: stream.clone_dtoh(&self.k).map_err(copy())?,
            v: stream.clone_dtoh(&self.v).map_err(copy())?,
        })
    }

    /// The configuration the state was made for.
    pub fn config(&self) -> &DecodeConfig {
        &self.config
    }

    /// Pins the kernel every later call on this state runs (`None`: the automatic choice of
    /// [`DecodeConfig::path`]), e.g. to compare kernels; a call its path cannot run returns an
    /// error naming the path and the rule.
    pub fn pin_path(&mut self, path: Option<DecodePath>) {
        self.pinned = path;
    }

    /// Zeroes the state of the chosen batch rows (continuous batching: a finished sequence's slot
    /// is reused). Enqueued on `stream`; no allocation, no synchronization.
    pub fn reset_rows(&mut self, stream: &Arc<CudaStream>, rows: &[usize]) -> Result<()> {
        let c = self.config;
        let per_row = Self::lens(&DecodeConfig { batch: 1, ..c });
        for &row in rows {
            if row >= c.batch {
                return Err(Error::invalid(
                    "rows",
                    row,
                    format!("every row must be below batch = {}", c.batch),
                ));
            }
        }
        let zero = || Error::driver("zeroing decode state rows");
        for &row in rows {
            if per_row[0] > 0 {
                stream
                    .memset_zeros(
                        &mut self
                            .theta
                            .slice_mut(row * per_row[0]..(row + 1) * per_row[0]),
                    )
                    .map_err(zero())?;
            }
            stream
                .memset_zeros(&mut self.ssm.slice_mut(row * per_row[1]..(row + 1) * per_row[1]))
                .map_err(zero())?;
            stream
                .memset_zeros(&mut self.k.slice_mut(row * per_row[2]..(row + 1) * per_row[2]))
                .map_err(zero())?;
            stream
                .memset_zeros(&mut self.v.slice_mut(row * per_row[3]..(row + 1) * per_row[3]))
                .map_err(zero())?;
        }
        Ok(())
    }
}

/// An optional tensor that must be given exactly when `required`: errors name the argument and
/// say why (`need` when missing, `forbid` when given but not taken).
fn presence<'a, T>(
    arg: &'static str,
    tensor: Option<&'a CudaSlice<T>>,
    required: bool,
    need: &str,
    forbid: &str,
) -> Result<Option<&'a CudaSlice<T>>> {
    match (required, tensor) {
        (true, None) => Err(Error::invalid(arg, "None", need)),
        (false, Some(_)) => Err(Error::invalid(arg, "Some", forbid)),
        (_, tensor) => Ok(tensor),
    }
}

/// Checks every tensor of a `tokens`-token call against the config (before any launch).
fn validate_call<X: Activation>(
    c: &DecodeConfig,
    weights: &DecodeWeights,
    inputs: &DecodeInputs<X>,
    tokens: usize,
    out_len: usize,
) -> Result<()> {
    if tokens == 0 {
        return Err(Error::invalid("tokens", tokens, "must be at least 1"));
    }
    let (b, h, g, r, n, p, na) = (
        c.batch,
        c.heads,
        c.groups,
        c.rank,
        c.state_dim,
        c.head_dim,
        c.num_angles,
    );
    expect_len("q", inputs.q.len(), b * tokens * r * g * n, "(B,T,R,G,N)")?;
    expect_len("k", inputs.k.len(), b * tokens * r * g * n, "(B,T,R,G,N)")?;
    expect_len("v", inputs.v.len(), b * tokens * h * p, "(B,T,H,P)")?;
    expect_len("trap", inputs.trap.len(), b * h * tokens, "(B,H,T)")?;
    expect_len("dt", inputs.dt.len(), b * h * tokens, "(B,H,T)")?;
    expect_len("adt", inputs.adt.len(), b * h * tokens, "(B,H,T)")?;
    if na > 0 {
        expect_len(
            "angles",
            inputs.angles.len(),
            b * tokens * h * na,
            "(B,T,H,Na)",
        )?;
    }
    expect_len("q_bias", weights.q_bias.len(), h * r * n, "(H,R,N)")?;
    expect_len("k_bias", weights.k_bias.len(), h * r * n, "(H,R,N)")?;
    expect_len("mimo_v", weights.mimo_v.len(), h * r * p, "(H,R,P)")?;
    let prereduce = c.mode == OutputMode::Prereduce;
    let fused_norm = c.mode == OutputMode::FusedNorm;
    let z_need = "config.has_z is true: z is required";
    let z_forbid = "config.has_z is false: pass None";
    if let Some(z) = presence("z", inputs.z, c.has_z, z_need, z_forbid)? {
        expect_len("z", z.len(), b * tokens * h * p, "(B,T,H,P)")?;
    }
    let mz_need = "config.has_z is true: mimo_z is required";
    if let Some(mz) = presence("mimo_z", weights.mimo_z, c.has_z, mz_need, z_forbid)? {
        expect_len("mimo_z", mz.len(), h * r * p, "(H,R,P)")?;
    }
    let d_need = "config.has_d is true: D is required";
    if let Some(d) = presence(
        "d",
        weights.d,
        c.has_d,
        d_need,
        "config.has_d is false: pass None",
    )? {
        expect_len("d", d.len(), h, "(H)")?;
    }
    let o_need = "gated and fused-norm modes need mimo_o";
    if let Some(o) = presence(
        "mimo_o",
        weights.mimo_o,
        !prereduce,
        o_need,
        "prereduce mode takes no mimo_o",
    )? {
        expect_len("mimo_o", o.len(), h * r * p, "(H,R,P)")?;
    }
    let w_need = "fused-norm mode needs the norm weight";
    let w_forbid = "only fused-norm mode takes a norm weight";
    if let Some(w) = presence(
        "norm_weight",
        weights.norm_weight,
        fused_norm,
        w_need,
        w_forbid,
    )? {
        expect_len("norm_weight", w.len(), h * p, "(H,P)")?;
    }
    let shape = if prereduce {
        "(B,T,R,H,P)"
    } else {
        "(B,T,H,P)"
    };
    expect_len("out", out_len, c.output_len(tokens), shape)
}

/// The kernel's argument, passed by value.
#[repr(transparent)]
struct DecodeArgs(DecodeParams);

// SAFETY: `DecodeParams` is `#[repr(C)]` plain data (integers and a float) matching the kernel's
// parameter struct, which is compiled from the same definition.
unsafe impl DeviceRepr for DecodeArgs {}

/// Device addresses of a launch's buffers. The guards record cudarc's read/write events when
/// dropped, so they live until the kernel is enqueued.
struct Pointers<'a> {
    stream: &'a CudaStream,
    guards: Vec<SyncOnDrop<'a>>,
}

impl<'a> Pointers<'a> {
    fn read<T>(&mut self, slice: &'a CudaSlice<T>) -> u64 {
        let (ptr, guard) = slice.device_ptr(self.stream);
        self.guards.push(guard);
        ptr
    }

    fn read_opt<T>(&mut self, slice: Option<&'a CudaSlice<T>>) -> u64 {
        slice.map_or(0, |s| self.read(s))
    }

    fn write<T>(&mut self, slice: &'a mut CudaSlice<T>) -> u64 {
        let (ptr, guard) = slice.device_ptr_mut(self.stream);
        self.guards.push(guard);
        ptr
    }
}

/// Advances `state` over `tokens` consecutive tokens in one launch and writes their outputs to
/// `out` ((B,T,H,P), or (B,T,R,H,P) in prereduce mode). Validates everything first; then enqueues
/// one kernel on `stream` without allocating or synchronizing.
pub fn step_tokens<X: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    state: &mut DecodeState<X>,
    weights: &DecodeWeights,
    inputs: &DecodeInputs<X>,
    tokens: usize,
    out: &mut CudaSlice<X>,
) -> Result<()> {
    let c = state.config;
    validate_call(&c, weights, inputs, tokens, out.len())?;
    let path = state
        .pinned
        .unwrap_or_else(|| c.path::<X>(tokens, gpu.sm_count(), gpu.max_shared_memory_optin()));
    c.check_path(path, tokens)?;
    let (r, n, p) = (c.rank as u32, c.state_dim as u32, c.head_dim as u32);
    let cfg = match path {
        DecodePath::SharedTile => LaunchConfig {
            grid_dim: (c.heads as u32, c.batch as u32, 1),
            block_dim: (32 * DECODE_WARPS, 1, 1),
            shared_mem_bytes: DecodeSmem::new(r, n, p, c.num_angles as u32).bytes(),
        },
        DecodePath::RegisterResident { rows_per_warp } => {
            let block_rows = DECODE_ROWS_WARPS * rows_per_warp;
            LaunchConfig {
                grid_dim: (c.heads as u32 * p.div_ceil(block_rows), c.batch as u32, 1),
                block_dim: (32 * DECODE_ROWS_WARPS, 1, 1),
                shared_mem_bytes: DecodeRowsSmem::new(r, n, block_rows, c.num_angles as u32)
                    .bytes(),
            }
        }
        DecodePath::Chunked => {
            return step_chunked(gpu, stream, state, weights, inputs, tokens, out);
        }
        DecodePath::TensorCoreChunk => LaunchConfig {
            grid_dim: ((c.batch * c.heads) as u32, 1, 1),
            block_dim: (32 * DECODE_MMA_WARPS, 1, 1),
            shared_mem_bytes: decode_mma_chunk_smem::BYTES,
        },
        DecodePath::TensorCorePrefetching => LaunchConfig {
            grid_dim: ((c.batch * c.heads) as u32, 1, 1),
            block_dim: (32 * DECODE_MMA_WARPS, 1, 1),
            shared_mem_bytes: decode_mma_smem::BYTES,
        },
        DecodePath::TensorCore => LaunchConfig {
            grid_dim: ((c.batch * c.heads) as u32, 1, 1),
            block_dim: (32 * DECODE_MMA_WARPS, 1, 1),
            shared_mem_bytes: if tokens == 1 {
                decode_mma_smem::BYTES
            } else {
                decode_mma_tokens_smem::BYTES
            },
        },
        DecodePath::Streaming { rows_per_warp } => {
            let warps = (c.batch * c.heads) as u32 * p.div_ceil(rows_per_warp);
            LaunchConfig {
                grid_dim: (warps.div_ceil(DECODE_STREAM_WARPS), 1, 1),
                block_dim: (32 * DECODE_STREAM_WARPS, 1, 1),
                shared_mem_bytes: DecodeStreamSmem::new(r).block_bytes(),
            }
        }
    };
    let kernel = path.kernel::<X>(&c, tokens).ok_or_else(|| match path {
        DecodePath::TensorCore
        | DecodePath::TensorCorePrefetching
        | DecodePath::TensorCoreChunk => {
            Error::invalid("path", format!("{path:?}"), "needs bf16 activations")
        }
        _ => Error::invalid("rank", c.rank, "must be 1, 2, 4 or 8"),
    })?;
    let rows_per_warp = path.rows_per_warp();
    let mut ptrs = Pointers {
        stream,
        guards: Vec::with_capacity(21),
    };
    let params = decode_params(
        &mut ptrs,
        state,
        weights,
        inputs,
        out,
        tokens,
        rows_per_warp,
    );
    let args = DecodeArgs(params);
    let launch = gpu.launch(stream, kernel)?;
    // SAFETY: every pointer was validated against the config's shapes above, `check_path` holds,
    // and the launch shape is the chosen kernel's contract (register-resident: grid (H·splits, B),
    // DECODE_ROWS_WARPS warps, DecodeRowsSmem bytes, N % 4 == 0, N ≤ 128, one block per (b, h) in
    // fused-norm mode, the state's zeroed arrival counters; streaming: one token, a warp per row
    // range in blocks of DECODE_STREAM_WARPS, DecodeStreamSmem bytes, N % 4 == 0, N ≤ 128, no
    // fused norm, the zeroed counters; shared tile: grid (H,B), DECODE_WARPS warps, DecodeSmem;
    // tensor core: grid B·H, DECODE_MMA_WARPS warps, bf16, the kernel's geometry, the one-token
    // entries (plain or prefetching) with decode_mma_smem bytes for one token, else the token loop with
    // decode_mma_tokens_smem bytes; chunk form: 1 ≤ T ≤ DECODE_MMA_CHUNK_MAX_TOKENS, the same
    // grid and warps, decode_mma_chunk_smem bytes; q, k, v, z whole allocations, so 16-byte
    // aligned).
    // Decode kernels start with the dependent-launch prologue, so `run_with_params` may let this
    // one be scheduled while the previous kernel of the stream finishes.
    let launched = unsafe { launch.run_with_params(cfg, &args) };
    drop(ptrs);
    launched
}

/// The decode kernels' parameters of a call over `tokens` tokens (addresses through `ptrs`, whose
/// guards must live until the launch is enqueued).
fn decode_params<'p, X: Activation>(
    ptrs: &mut Pointers<'p>,
    state: &'p mut DecodeState<X>,
    weights: &DecodeWeights<'p>,
    inputs: &DecodeInputs<'p, X>,
    out: &'p mut CudaSlice<X>,
    tokens: usize,
    rows_per_warp: u32,
) -> DecodeParams {
    let c = state.config;
    DecodeParams {
        q: ptrs.read(inputs.q),
        k: ptrs.read(inputs.k),
        v: ptrs.read(inputs.v),
        z: ptrs.read_opt(inputs.z),
        trap: ptrs.read(inputs.trap),
        dt: ptrs.read(inputs.dt),
        adt: ptrs.read(inputs.adt),
        angles: ptrs.read(inputs.angles),
        q_bias: ptrs.read(weights.q_bias),
        k_bias: ptrs.read(weights.k_bias),
        mimo_v: ptrs.read(weights.mimo_v),
        mimo_z: ptrs.read_opt(weights.mimo_z),
        mimo_o: ptrs.read_opt(weights.mimo_o),
        d: ptrs.read_opt(weights.d),
        norm_weight: ptrs.read_opt(weights.norm_weight),
        theta: ptrs.write(&mut state.theta),
        ssm: ptrs.write(&mut state.ssm),
        k_state: ptrs.write(&mut state.k),
        v_state: ptrs.write(&mut state.v),
        out: ptrs.write(out),
        arrivals: ptrs.write(&mut state.arrivals),
        batch: c.batch as u32,
        tokens: tokens as u32,
        heads: c.heads as u32,
        groups: c.groups as u32,
        n: c.state_dim as u32,
        p: c.head_dim as u32,
        na: c.num_angles as u32,
        mode: c.mode.code(),
        rotation: c.rotation.code(),
        norm_eps: c.norm_eps,
        rows_per_warp,
    }
}

/// [`step_tokens`] on [`DecodePath::Chunked`] (everything validated): one forward launch over the
/// T tokens, from the state and back into it.
fn step_chunked<X: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    state: &mut DecodeState<X>,
    weights: &DecodeWeights,
    inputs: &DecodeInputs<X>,
    tokens: usize,
    out: &mut CudaSlice<X>,
) -> Result<()> {
    let config = forward::kernel_config(gpu, &state.config.forward_config(tokens, X::DTYPE));
    let (smem, staged) = forward::chunked_shared_memory(gpu, &config)?;
    let mut ptrs = Pointers {
        stream,
        guards: Vec::with_capacity(21),
    };
    let d = decode_params(&mut ptrs, state, weights, inputs, out, tokens, 0);
    let mut params = ForwardParams {
        q: d.q,
        k: d.k,
        v: d.v,
        z: d.z,
        trap: d.trap,
        dt: d.dt,
        adt: d.adt,
        angles: d.angles,
        q_bias: d.q_bias,
        k_bias: d.k_bias,
        mimo_v: d.mimo_v,
        mimo_z: d.mimo_z,
        mimo_o: d.mimo_o,
        d: d.d,
        norm_weight: d.norm_weight,
        out: d.out,
        final_theta: d.theta,
        final_ssm: d.ssm,
        final_k: d.k_state,
        final_v: d.v_state,
        init_theta: d.theta,
        init_ssm: d.ssm,
        init_k: d.k_state,
        init_v: d.v_state,
        ..config.scalar_params(staged)
    };
    let (mut kernel, _, mut cfg) = forward::launch_plan(gpu, &config, &params, 1, smem)?;
    forward::walk_batch(gpu, &config, &mut params, &mut kernel, &mut cfg);
    let args = ForwardArgs(params);
    let launch = gpu.launch(stream, kernel)?;
    // SAFETY: one by-value `ForwardParams` is the forward kernel's parameter list; the decode
    // tensors were validated against the config's shapes, which are the forward's layouts with
    // S = T; one segment, so each block reads its (b, h) of the state before writing it back
    // (the in-place contract of `ForwardParams::init_theta`); `launch_plan` gave the kernel's
    // launch shape and checked the tensor-core kernel's alignment and shared memory, and
    // `walk_batch` the batch-walking kernel's (grid (H, unit_stride), the alignment of its
    // staged views, its shared memory).
    // The batch-walking kernel starts with the dependent-launch prologue (see `step`).
    let launched = unsafe { launch.run_with_params(cfg, &args) };
    drop(ptrs);
    launched
}

/// [`step_tokens`] for one token: `out` is (B,H,P), or (B,R,H,P) in prereduce mode.
pub fn step<X: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    state: &mut DecodeState<X>,
    weights: &DecodeWeights,
    inputs: &DecodeInputs<X>,
    out: &mut CudaSlice<X>,
) -> Result<()> {
    step_tokens(gpu, stream, state, weights, inputs, 1, out)
}

/// Device buffers of a captured step's inputs and output: write new tokens here, then replay.
#[derive(Debug)]
pub struct GraphBuffers<X: Activation> {
    /// q (B,T,R,G,N).
    pub q: CudaSlice<X>,
    /// k (B,T,R,G,N).
    pub k: CudaSlice<X>,
    /// v (B,T,H,P).
    pub v: CudaSlice<X>,
    /// z (B,T,H,P) when the config has z.
    pub z: Option<CudaSlice<X>>,
    /// Raw trap logits (B,H,T).
    pub trap: CudaSlice<X>,
    /// Δ (B,H,T).
    pub dt: CudaSlice<f32>,
    /// Log decays (B,H,T).
    pub adt: CudaSlice<f32>,
    /// Raw angle logits (B,T,H,Na).
    pub angles: CudaSlice<f32>,
    /// Output of the last replay.
    pub out: CudaSlice<X>,
}

/// A `T`-token step captured once into a CUDA graph and replayed with new inputs.
///
/// The graph owns the state and its input/output buffers (their addresses are baked into the
/// graph) and borrows the weights for `'w`. Each [`DecodeGraph::replay`] advances the state by `T`
/// tokens reading [`DecodeGraph::buffers`].
pub struct DecodeGraph<'w, X: Activation> {
    graph: CudaGraph,
    state: DecodeState<X>,
    buffers: GraphBuffers<X>,
    tokens: usize,
    _weights: PhantomData<&'w CudaSlice<f32>>,
}

impl<'w, X: Activation> DecodeGraph<'w, X> {
    /// Allocates the input/output buffers for `tokens` tokens and captures one
    /// [`step_tokens`] on `stream` (which must not be the legacy default stream). The state is
    /// not advanced by the capture.
    pub fn capture(
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        state: DecodeState<X>,
        weights: &DecodeWeights<'w>,
        tokens: usize,
    ) -> Result<Self> {
        let c = state.config;
        if tokens == 0 {
            return Err(Error::invalid("tokens", tokens, "must be at least 1"));
        }
        let (b, h, g, r, n, p, na) = (
            c.batch,
            c.heads,
            c.groups,
            c.rank,
            c.state_dim,
            c.head_dim,
            c.num_angles,
        );
        let alloc = || Error::driver("allocating the graph's buffers");
        let buffers = GraphBuffers {
            q: stream
                .alloc_zeros(b * tokens * r * g * n)
                .map_err(alloc())?,
            k: stream
                .alloc_zeros(b * tokens * r * g * n)
                .map_err(alloc())?,
            v: stream.alloc_zeros(b * tokens * h * p).map_err(alloc())?,
            z: if c.has_z {
                Some(stream.alloc_zeros(b * tokens * h * p).map_err(alloc())?)
            } else {
                None
            },
            trap: stream.alloc_zeros(b * h * tokens).map_err(alloc())?,
            dt: stream.alloc_zeros(b * h * tokens).map_err(alloc())?,
            adt: stream.alloc_zeros(b * h * tokens).map_err(alloc())?,
            angles: stream
                .alloc_zeros((b * tokens * h * na).max(1))
                .map_err(alloc())?,
            out: stream.alloc_zeros(c.output_len(tokens)).map_err(alloc())?,
        };
        let mut state = state;
        let mut buffers = buffers;
        let graph = Self::record(gpu, stream, &mut state, &mut buffers, weights, tokens)?;
        graph
            .upload()
            .map_err(Error::driver("uploading the graph"))?;
        Ok(DecodeGraph {
            graph,
            state,
            buffers,
            tokens,
            _weights: PhantomData,
        })
    }

    fn record(
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        state: &mut DecodeState<X>,
        buffers: &mut GraphBuffers<X>,
        weights: &DecodeWeights,
        tokens: usize,
    ) -> Result<CudaGraph> {
        let GraphBuffers {
            q,
            k,
            v,
            z,
            trap,
            dt,
            adt,
            angles,
            out,
        } = buffers;
        let inputs = DecodeInputs {
            q,
            k,
            v,
            z: z.as_ref(),
            trap,
            dt,
            adt,
            angles,
        };
        // Validate outside the capture so that a bad call leaves the stream usable.
        validate_call(&state.config, weights, &inputs, tokens, out.len())?;
        // cudarc's cross-stream event tracking would make captured work wait on events recorded
        // outside the capture (an isolation error); the graph's one kernel needs no such ordering.
        let ctx = stream.context();
        let tracking = ctx.is_event_tracking();
        // SAFETY: only this capture runs while tracking is off; the previous setting is restored.
        unsafe { ctx.disable_event_tracking() };
        let begun = stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(Error::driver("beginning the graph capture"));
        let graph = begun.and_then(|()| {
            let launched = step_tokens(gpu, stream, state, weights, &inputs, tokens, out);
            // End the capture whatever happened, so the stream leaves capture mode.
            let ended = stream
                .end_capture(CUgraphInstantiate_flags(0))
                .map_err(Error::driver("ending the graph capture"));
            launched?;
            ended?
                .ok_or_else(|| Error::invalid("stream", "capture", "the capture recorded no graph"))
        });
        if tracking {
            // SAFETY: restores the context's previous setting.
            unsafe { ctx.enable_event_tracking() };
        }
        graph
    }

    /// Runs the captured step once: advances the state by `T` tokens reading
    /// [`DecodeGraph::buffers_mut`]'s inputs and writing its `out`. Enqueued on the capture stream.
    pub fn replay(&mut self) -> Result<()> {
        self.graph
            .launch()
            .map_err(Error::driver("launching the graph"))
    }

    /// The input/output buffers the graph reads and writes.
    pub fn buffers_mut(&mut self) -> &mut GraphBuffers<X> {
        &mut self.buffers
    }

    /// The input/output buffers the graph reads and writes.
    pub fn buffers(&self) -> &GraphBuffers<X> {
        &self.buffers
    }

    /// The state the graph advances.
    pub fn state(&self) -> &DecodeState<X> {
        &self.state
    }

    /// Tokens per replay.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Ends the graph and returns the state.
    pub fn into_state(self) -> DecodeState<X> {
        self.state
    }
}
