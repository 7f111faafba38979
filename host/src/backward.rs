//! Mamba-3 MIMO backward on the GPU (spec §5): the gradients of `L = Σ out ⊙ dout` with respect
//! to every input of [`forward`](crate::forward::forward), from the same inputs and `dout`.
//!
//! * [`backward`]: validates, then enqueues two or three kernels ([`dispatch_paths`]) on the
//!   caller's stream, writing into caller-provided gradient buffers ([`GradientsMut`]) and a
//!   caller-provided f32 workspace; it never allocates or synchronizes. The workspace needs
//!   [`workspace_len_on`] elements (the path the device takes; the tensor-core layout is about
//!   half the others) or [`workspace_len`] (enough for every path). [`backward_with_path`] pins
//!   the per-head kernel ([`BackwardPath`]; [`workspace_len_for`] that path).
//! * [`forward_for_backward`] then [`backward_with_checkpoints`]: a training step. The forward
//!   writes the tensor-core backward's checkpoints (the state and θ entering every chunk) into
//!   the backward's workspace as it runs, and the backward skips its checkpoint sweep (H200, bf16,
//!   H=64 S=2048: −0.35 ms at B=1, −0.6 ms at B=8; elsewhere the pair is the plain forward and
//!   [`backward`]).
//! * [`backward_alloc`] allocates the gradients and the workspace for you.
//! * [`validate_backward`]: every rule, as a pure function of the config and buffer lengths.
//!
//! Three per-head kernels ([`BackwardPath`]), the first that applies running:
//! * the tensor-core one ([`BackwardPath::TensorCore`]: a checkpoint sweep, then
//!   `backward_mma_*` with every product on bf16 tensor cores) for bf16 activations at the
//!   geometries of [`Kernel::backward_tensor_core`] (R = 4, N = 128, P = 64, Na = 32, chunks of
//!   16 tokens whatever the config's `chunk_size`), 16-byte aligned views, and a device with
//!   [`tensor_core_shared_memory_bytes`] of opt-in shared memory (H100, H200);
//! * the chunked one (`backward_chunked_*`, R ∈ {1, 2, 4, 8}, P ≤ 256, chunks of
//!   [`chunked_tokens`] tokens, memory ⌈S/C⌉·P·N f32 per (b, h) of carried states) whenever the
//!   geometry allows it and the device holds its shared memory;
//! * else the token-serial one (`backward_head_*`), for which the config's `chunk_size` is the
//!   segment length L between state checkpoints (any L ≥ 1; memory ≈ (⌈S/L⌉ + L)·P·N f32 per
//!   (b, h)).
//!
//! Gradient layouts are the inputs' layouts ([`forward`](crate::forward) module docs); dq, dk, dv,
//! dz and dtrap have the activation type `T`, every other gradient is f32. dq and dk are summed
//! over the H/G value heads of each group; dtrap is with respect to the raw (pre-sigmoid) logits,
//! dangles with respect to the raw (pre-tanh) logits, dadt with respect to the natural-log decay;
//! ddt holds both the decay/trapezoid path and the path through θ. An optional gradient is given
//! exactly when its input is (dz and dmimo_z with z, dmimo_o outside prereduce mode, dd with d,
//! dnorm with norm_weight).
//!
//! Gradients of the final states are not supported: the backward assumes `L` does not depend on
//! them (the forward's final states are decode hand-off values, detached as in upstream).
//!
//! # Determinism
//! No floating-point atomics: every gradient element is owned by one thread and accumulated in a
//! fixed order, the per-head q/k gradients and per-(b, h) parameter partials are reduced by a
//! second kernel in head / batch order. Repeated runs are bitwise identical.
//!
//! # Limits and cost
//! The forward's limits, and the per-head kernel's shared memory within the device's opt-in
//! maximum ([`Error::SharedMemory`] otherwise): [`tensor_core_shared_memory_bytes`] for the
//! tensor-core kernel, [`chunked_shared_memory_bytes`] for the chunked one,
//! [`backward_shared_memory_bytes`] (≈ 4·(2·P·(N+1) + 9·R·(N+P) + …) bytes) for the token-serial
//! one. Each runs one block per (b, h); the chunked kernel's products are on the tensor cores for
//! bf16 activations (operands split or TF32) and FMA tiles for f32, the token-serial kernel's on
//! FMA (see `notes/backward.md`). When `B·H` would leave at least two SMs per row idle, the
//! tensor-core backward splits each row's sequence into segments and runs in two launches
//! ([`backward_split`]); the result is the same up to the f32 rounding of the adjoint's sum.

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    LaunchConfig, SyncOnDrop,
};
use mamba3_abi::{
    backward_chunked_smem_bytes, backward_mma_smem, backward_smem_bytes, forward_mma_smem,
    split_launch, BackwardParams, BackwardSlots, BackwardWorkspace, ForwardParams,
    BACKWARD_CHUNK_ROWS, BACKWARD_MMA_THREADS, BACKWARD_THREADS, FORWARD_MMA_THREADS,
};

use crate::config::{Activation, Dtype, OutputMode};
use crate::device::Gpu;
use crate::error::{Error, Result};
use crate::forward::{overlap_check, validate, ForwardConfig, ForwardInputs, ForwardLens, Range};
use crate::kernel::{FixedBackwardGeometry, Kernel};

/// Element counts of the gradient buffers of one call (`None`: not given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GradientLens {
    /// dq.
    pub q: usize,
    /// dk.
    pub k: usize,
    /// dv.
    pub v: usize,
    /// dz.
    pub z: Option<usize>,
    /// dtrap.
    pub trap: usize,
    /// ddt.
    pub dt: usize,
    /// dadt.
    pub adt: usize,
    /// dangles.
    pub angles: usize,
    /// dq_bias.
    pub q_bias: usize,
    /// dk_bias.
    pub k_bias: usize,
    /// dmimo_v.
    pub mimo_v: usize,
    /// dmimo_z.
    pub mimo_z: Option<usize>,
    /// dmimo_o.
    pub mimo_o: Option<usize>,
    /// dd.
    pub d: Option<usize>,
    /// dnorm (norm weight).
    pub norm_weight: Option<usize>,
}

/// Caller-provided gradient buffers (see the module docs for layouts and presence).
pub struct GradientsMut<'a, T> {
    /// ∂L/∂q (B,S,R,G,N).
    pub q: CudaViewMut<'a, T>,
    /// ∂L/∂k (B,S,R,G,N).
    pub k: CudaViewMut<'a, T>,
    /// ∂L/∂v (B,S,H,P).
    pub v: CudaViewMut<'a, T>,
    /// ∂L/∂z (B,S,H,P), iff z is given.
    pub z: Option<CudaViewMut<'a, T>>,
    /// ∂L/∂trap logits (B,H,S).
    pub trap: CudaViewMut<'a, T>,
    /// ∂L/∂Δ (B,H,S).
    pub dt: CudaViewMut<'a, f32>,
    /// ∂L/∂a (B,H,S).
    pub adt: CudaViewMut<'a, f32>,
    /// ∂L/∂angle logits (B,S,H,Na).
    pub angles: CudaViewMut<'a, f32>,
    /// ∂L/∂q_bias (H,R,N).
    pub q_bias: CudaViewMut<'a, f32>,
    /// ∂L/∂k_bias (H,R,N).
    pub k_bias: CudaViewMut<'a, f32>,
    /// ∂L/∂mimo_v (H,R,P).
    pub mimo_v: CudaViewMut<'a, f32>,
    /// ∂L/∂mimo_z (H,R,P), iff z is given.
    pub mimo_z: Option<CudaViewMut<'a, f32>>,
    /// ∂L/∂mimo_o (H,R,P), iff the mode is not prereduce.
    pub mimo_o: Option<CudaViewMut<'a, f32>>,
    /// ∂L/∂D (H), iff d is given.
    pub d: Option<CudaViewMut<'a, f32>>,
    /// ∂L/∂norm weight (H,P), iff norm_weight is given.
    pub norm_weight: Option<CudaViewMut<'a, f32>>,
}

impl<T> GradientsMut<'_, T> {
    fn lens(&self) -> GradientLens {
        GradientLens {
            q: self.q.len(),
            k: self.k.len(),
            v: self.v.len(),
            z: self.z.as_ref().map(|x| x.len()),
            trap: self.trap.len(),
            dt: self.dt.len(),
            adt: self.adt.len(),
            angles: self.angles.len(),
            q_bias: self.q_bias.len(),
            k_bias: self.k_bias.len(),
            mimo_v: self.mimo_v.len(),
            mimo_z: self.mimo_z.as_ref().map(|x| x.len()),
            mimo_o: self.mimo_o.as_ref().map(|x| x.len()),
            d: self.d.as_ref().map(|x| x.len()),
            norm_weight: self.norm_weight.as_ref().map(|x| x.len()),
        }
    }
}

/// Gradients allocated by [`backward_alloc`] or [`Gradients::alloc`] (same fields as
/// [`GradientsMut`]).
pub struct Gradients<T> {
    /// ∂L/∂q (B,S,R,G,N).
    pub q: CudaSlice<T>,
    /// ∂L/∂k (B,S,R,G,N).
    pub k: CudaSlice<T>,
    /// ∂L/∂v (B,S,H,P).
    pub v: CudaSlice<T>,
    /// ∂L/∂z (B,S,H,P), iff z is given.
    pub z: Option<CudaSlice<T>>,
    /// ∂L/∂trap logits (B,H,S).
    pub trap: CudaSlice<T>,
    /// ∂L/∂Δ (B,H,S).
    pub dt: CudaSlice<f32>,
    /// ∂L/∂a (B,H,S).
    pub adt: CudaSlice<f32>,
    /// ∂L/∂angle logits (B,S,H,Na).
    pub angles: CudaSlice<f32>,
    /// ∂L/∂q_bias (H,R,N).
    pub q_bias: CudaSlice<f32>,
    /// ∂L/∂k_bias (H,R,N).
    pub k_bias: CudaSlice<f32>,
    /// ∂L/∂mimo_v (H,R,P).
    pub mimo_v: CudaSlice<f32>,
    /// ∂L/∂mimo_z (H,R,P), iff z is given.
    pub mimo_z: Option<CudaSlice<f32>>,
    /// ∂L/∂mimo_o (H,R,P), iff the mode is not prereduce.
    pub mimo_o: Option<CudaSlice<f32>>,
    /// ∂L/∂D (H), iff d is given.
    pub d: Option<CudaSlice<f32>>,
    /// ∂L/∂norm weight (H,P), iff norm_weight is given.
    pub norm_weight: Option<CudaSlice<f32>>,
}

impl<T: Activation> Gradients<T> {
    /// Zeroed gradient buffers for `config` on `stream` (`with_norm_weight`: the call passes a
    /// norm weight, so ∂norm_weight is allocated). Allocates; never synchronizes.
    ///
    /// Errors: [`Error::InvalidArgument`] for an invalid config or sizes that overflow `usize`;
    /// driver errors from the allocations.
    pub fn alloc(
        stream: &std::sync::Arc<CudaStream>,
        config: &ForwardConfig,
        with_norm_weight: bool,
    ) -> Result<Gradients<T>> {
        crate::forward::validate_config(config)?;
        let g = expected_gradient_lens(config, with_norm_weight).ok_or_else(|| {
            Error::invalid("seq_len", config.seq_len, "tensor sizes overflow usize")
        })?;
        let e = || Error::driver("allocating backward gradients");
        let act = |n: usize| stream.alloc_zeros::<T>(n).map_err(e());
        let f32s = |n: usize| stream.alloc_zeros::<f32>(n).map_err(e());
        Ok(Gradients {
            q: act(g.q)?,
            k: act(g.k)?,
            v: act(g.v)?,
            z: g.z.map(act).transpose()?,
            trap: act(g.trap)?,
            dt: f32s(g.dt)?,
            adt: f32s(g.adt)?,
            angles: f32s(g.angles)?,
            q_bias: f32s(g.q_bias)?,
            k_bias: f32s(g.k_bias)?,
            mimo_v: f32s(g.mimo_v)?,
            mimo_z: g.mimo_z.map(f32s).transpose()?,
            mimo_o: g.mimo_o.map(f32s).transpose()?,
            d: g.d.map(f32s).transpose()?,
            norm_weight: g.norm_weight.map(f32s).transpose()?,
        })
    }
}

impl<T> Gradients<T> {
    /// Mutable views of every buffer, for [`backward`].
    pub fn as_views_mut(&mut self) -> GradientsMut<'_, T> {
        GradientsMut {
            q: self.q.as_view_mut(),
            k: self.k.as_view_mut(),
            v: self.v.as_view_mut(),
            z: self.z.as_mut().map(|x| x.as_view_mut()),
            trap: self.trap.as_view_mut(),
            dt: self.dt.as_view_mut(),
            adt: self.adt.as_view_mut(),
            angles: self.angles.as_view_mut(),
            q_bias: self.q_bias.as_view_mut(),
            k_bias: self.k_bias.as_view_mut(),
            mimo_v: self.mimo_v.as_view_mut(),
            mimo_z: self.mimo_z.as_mut().map(|x| x.as_view_mut()),
            mimo_o: self.mimo_o.as_mut().map(|x| x.as_view_mut()),
            d: self.d.as_mut().map(|x| x.as_view_mut()),
            norm_weight: self.norm_weight.as_mut().map(|x| x.as_view_mut()),
        }
    }
}

/// The per-head backward kernel of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackwardPath {
    /// `backward_ckpt_mma_*` (a checkpoint sweep: the tensor-core forward's state pass, writing
    /// the state and θ entering every chunk) then `backward_mma_*`: the backward on bf16 tensor
    /// cores, for bf16 activations at the geometries of [`Kernel::backward_tensor_core`]
    /// (R = 4, N = 128, P = 64, Na = 32), chunks of [`TENSOR_CORE_CHUNK`] tokens whatever the
    /// config's `chunk_size`; q, k, v, z, `dout` and the workspace 16-byte aligned.
    TensorCore,
    /// `backward_chunked_*`: a reverse sweep over chunks of [`chunked_tokens`] tokens with the
    /// state adjoint carried between chunks (R ∈ {1, 2, 4, 8}, P ≤ 256).
    Chunked,
    /// `backward_head_*`: a reverse sweep token by token, segments of `chunk_size` tokens
    /// between state checkpoints (every geometry).
    TokenSerial,
}

/// Shared memory the chunked layout may use when [`chunked_tokens`] picks the chunk length:
/// the opt-in maximum of sm_90 (H100, H200). On a device with less, [`backward`] runs the
/// token-serial kernel (the workspace covers both).
pub const CHUNKED_SHARED_MEMORY_BUDGET: u64 = 232_448;

/// Tokens per chunk of the chunked kernel for `config`: `M/R` for the largest M ∈ {64, 32, 16}
/// rows whose layout fits [`CHUNKED_SHARED_MEMORY_BUDGET`]; `None` when the geometry is outside
/// the kernel (R ∉ {1, 2, 4, 8}, P > 256, Na > 256) or no M fits.
pub fn chunked_tokens(config: &ForwardConfig) -> Option<usize> {
    let r = config.rank;
    if !matches!(r, 1 | 2 | 4 | 8) || config.head_dim > 256 || config.num_angles > 256 {
        return None;
    }
    let mut rows = BACKWARD_CHUNK_ROWS as usize;
    while rows >= 16 {
        if rows >= r && chunked_smem(config, rows / r) <= CHUNKED_SHARED_MEMORY_BUDGET {
            return Some(rows / r);
        }
        rows /= 2;
    }
    None
}

fn chunked_smem(config: &ForwardConfig, chunk: usize) -> u64 {
    let u = |x: usize| x as u64;
    backward_chunked_smem_bytes(
        u(chunk),
        u(config.rank),
        u(config.state_dim),
        u(config.head_dim),
        u(config.num_angles),
    )
}

/// Dynamic shared memory of the chunked backward kernel for `config` in bytes (`None` when the
/// geometry is outside the kernel).
pub fn chunked_shared_memory_bytes(config: &ForwardConfig) -> Option<u64> {
    chunked_tokens(config).map(|c| chunked_smem(config, c))
}

/// Tokens per chunk of the tensor-core backward ([`BackwardPath::TensorCore`]).
pub const TENSOR_CORE_CHUNK: usize = 16;

/// Most segment boundaries a split tensor-core backward uses over all (b, h) rows,
/// `(K − 1)·B·H ≤ SPLIT_SLOTS`: it bounds the split's workspace by the config alone (a GPU with
/// more SMs than this splits less than it could).
pub const SPLIT_SLOTS: usize = 256;

/// Fewest chunks in each of the first `K − 1` segments of a split tensor-core backward.
pub const SPLIT_MIN_CHUNKS: usize = 4;

/// The sequence split of a tensor-core backward call (see [`backward_split`]): `segments`
/// segments, the first `segments − 1` of `chunks` chunks of [`TENSOR_CORE_CHUNK`] tokens each,
/// the last of `last_chunks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardSplit {
    /// Segments K (≥ 3).
    pub segments: usize,
    /// Chunks of each segment but the last.
    pub chunks: usize,
    /// Chunks of the last segment (≥ 1).
    pub last_chunks: usize,
}

/// Boundaries `K − 1` the workspace of `config` has room for: `SPLIT_SLOTS / (B·H)`, at most one
/// per [`SPLIT_MIN_CHUNKS`] chunks; 0 when the tensor-core backward does not take the config or
/// fewer than two fit.
fn split_capacity(config: &ForwardConfig) -> usize {
    if tensor_core_kernels(config).is_none() {
        return 0;
    }
    let rows = config.batch.saturating_mul(config.heads).max(1);
    let chunks = config.seq_len.div_ceil(TENSOR_CORE_CHUNK);
    let k1 = (SPLIT_SLOTS / rows).min(chunks.saturating_sub(1) / SPLIT_MIN_CHUNKS);
    if k1 >= 2 {
        k1
    } else {
        0
    }
}

/// The sequence split the tensor-core backward uses for `config` on a GPU of `sm_count` SMs, or
/// `None` (a single launch of one block per (b, h)).
///
/// The backward kernel runs one block per SM; when `B·H` leaves at least two blocks' room per
/// row (`⌊sm_count / (B·H)⌋ = n ≥ 2`, bounded by [`SPLIT_SLOTS`]), each row is cut into
/// `K = n + 1` segments and the backward runs in two launches of `n` blocks per row: the last
/// segment's backward beside the middle segments' local adjoint passes, then every other
/// segment's backward from its true end adjoint (`mamba3_abi::split_launch`). A local pass costs
/// about half a full one (H200: splits planned with 0.4, 0.5 and 0.3 measured best with 0.5), so
/// the segment length `m` minimises `m + max(last, m/2)` (in chunks of full-pass work, `last`
/// the last segment's chunks): about `(n + 0.5) / 1.5` times faster than one block per row.
pub fn backward_split(config: &ForwardConfig, sm_count: usize) -> Option<BackwardSplit> {
    if crate::forward::validate_config(config).is_err() {
        return None;
    }
    let rows = config.batch.saturating_mul(config.heads).max(1);
    let nc = config.seq_len.div_ceil(TENSOR_CORE_CHUNK);
    let k1 = (sm_count / rows).min(split_capacity(config));
    if k1 < 2 {
        return None;
    }
    // Twice the modelled time of segment length m (the last segment is nc − k1·m ≥ 1 chunks).
    let cost = |m: usize| 2 * m + (2 * (nc - k1 * m)).max(m);
    let m = (SPLIT_MIN_CHUNKS..=(nc - 1) / k1).min_by_key(|&m| (cost(m), m))?;
    Some(BackwardSplit {
        segments: k1 + 1,
        chunks: m,
        last_chunks: nc - k1 * m,
    })
}

/// Segments K of the tensor-core backward's checkpoint sweep for `config` on a GPU of `sm_count`
/// SMs (1: one block per (b, h) over the whole sequence).
///
/// The sweep is the forward's state pass, which holds two blocks per SM; when `B·H` leaves room
/// for at least three blocks per row it runs split like the forward: a segment-state pass over
/// the first `K − 1` segments from zero, the combine pass, then the sweep of every segment from
/// its true entering state (`2/K` of the whole sweep's chunk steps, at up to two blocks per SM).
/// The hand-off slots use the backward split's adjoint region, so `K − 1` is bounded by its
/// capacity ([`SPLIT_SLOTS`]` / (B·H)` boundaries per row).
pub fn checkpoint_sweep_segments(config: &ForwardConfig, sm_count: usize) -> usize {
    if crate::forward::validate_config(config).is_err() {
        return 1;
    }
    let capacity = split_capacity(config);
    if capacity == 0 {
        return 1;
    }
    let run = ForwardConfig {
        chunk_size: TENSOR_CORE_CHUNK,
        ..*config
    };
    let rows = config.batch.saturating_mul(config.heads).max(1);
    let chunks = config.seq_len.div_ceil(TENSOR_CORE_CHUNK);
    let wanted = (crate::forward::blocks_per_sm(&run).saturating_mul(sm_count) / rows)
        .min(capacity + 1)
        .min(chunks / crate::forward::MIN_SEGMENT_CHUNKS);
    // Two segments would run as many chunk steps as the whole sweep, at two blocks per SM.
    if wanted < 3 {
        return 1;
    }
    let per = chunks.div_ceil(wanted);
    let segments = chunks.div_ceil(per);
    // θ and decay hand-off words go at the start of the per-head ∂k̃ region (see `backward_impl`).
    let slots = ((segments - 1) * rows) as u64;
    let handoff_fits = workspace_parts(config, BackwardPath::TensorCore)
        .is_some_and(|ws| slots * (2 * config.num_angles as u64 + 1) <= ws.dqkh);
    if segments < 3 || !handoff_fits {
        1
    } else {
        segments
    }
}

/// The geometry the fixed-geometry backward instantiations are keyed by.
fn fixed_geometry(config: &ForwardConfig) -> FixedBackwardGeometry {
    FixedBackwardGeometry {
        rank: config.rank,
        state_dim: config.state_dim,
        head_dim: config.head_dim,
        num_angles: config.num_angles,
    }
}

/// The tensor-core backward's (checkpoint sweep, per-head kernel) for `config`, if its dtype and
/// geometry have one.
fn tensor_core_kernels(config: &ForwardConfig) -> Option<(Kernel, Kernel)> {
    Kernel::backward_tensor_core(config.dtype, fixed_geometry(config))
}

/// Dynamic shared memory of the tensor-core backward in bytes (its per-head kernel; the
/// checkpoint sweep takes the tensor-core forward's, which is less).
pub fn tensor_core_shared_memory_bytes() -> u64 {
    backward_mma_smem::BYTES.max(forward_mma_smem::BYTES) as u64
}

/// The per-head kernel [`backward`] runs for `config` on a device whose opt-in shared memory is
/// `max_shared_memory` bytes, given 16-byte aligned views (a call with a misaligned one runs
/// the chunked or token-serial kernel instead, see [`backward`]).
pub fn backward_path(config: &ForwardConfig, max_shared_memory: usize) -> BackwardPath {
    if tensor_core_kernels(config).is_some()
        && tensor_core_shared_memory_bytes() <= max_shared_memory as u64
    {
        return BackwardPath::TensorCore;
    }
    fallback_path(config, max_shared_memory)
}

/// [`backward_path`] without the tensor-core kernel.
fn fallback_path(config: &ForwardConfig, max_shared_memory: usize) -> BackwardPath {
    match chunked_shared_memory_bytes(config) {
        Some(b) if b <= max_shared_memory as u64 => BackwardPath::Chunked,
        _ => BackwardPath::TokenSerial,
    }
}

/// The workspace regions of `config` on `path` (f32 elements each), `None` when a size
/// overflows or the path does not take the geometry.
fn workspace_parts(config: &ForwardConfig, path: BackwardPath) -> Option<BackwardWorkspace> {
    let u = |x: usize| x as u64;
    let seg_len = match path {
        BackwardPath::TensorCore => {
            tensor_core_kernels(config)?;
            TENSOR_CORE_CHUNK
        }
        BackwardPath::Chunked => chunked_tokens(config)?,
        BackwardPath::TokenSerial => config.chunk_size,
    };
    let mut ws = BackwardWorkspace::new(
        u(config.batch),
        u(config.seq_len),
        u(config.rank),
        u(config.heads),
        u(config.state_dim),
        u(config.head_dim),
        u(config.num_angles),
        u(seg_len),
    );
    if path != BackwardPath::TokenSerial {
        ws.seg = 0;
    }
    if path == BackwardPath::TensorCore {
        // What the tensor-core kernels store: the states entering each chunk and the per-head
        // q/k gradients as bf16 (two per f32 element), θ entering each chunk (not each token) as
        // (hi, lo) pairs; each region a multiple of four elements, so every region starts
        // 16-byte aligned.
        let whole = |x: u64| x.div_ceil(4).saturating_mul(4);
        let chunks = u(config.seq_len.div_ceil(TENSOR_CORE_CHUNK));
        ws.ckpt = whole(ws.ckpt.div_ceil(2));
        ws.cs = whole(
            u(config.batch)
                .saturating_mul(u(config.heads))
                .saturating_mul(chunks)
                .saturating_mul(2 * u(config.num_angles)),
        );
        ws.dqkh = whole(ws.dqkh.div_ceil(2));
        let (adj, decay, tokens) = split_parts(config);
        ws.split = adj + decay + tokens;
        ws.slots = ws.slots.saturating_mul(split_capacity(config) as u64 + 1);
    }
    // The sum of [`total`], checked for overflow.
    let len = [ws.ckpt, ws.seg, ws.cs, ws.dqkh, ws.dqkh, ws.split, ws.slots]
        .iter()
        .try_fold(0u64, |a, &x| a.checked_add(x))?;
    (len < u64::MAX / 8 && usize::try_from(len).is_ok()).then_some(ws)
}

/// f32 elements of one path's workspace layout (the regions [`backward_impl`] lays out in order).
fn total(ws: BackwardWorkspace) -> u64 {
    ws.ckpt + ws.seg + ws.cs + 2 * ws.dqkh + ws.split + ws.slots
}

/// f32 elements of the split regions `split_adj`, `split_decay`, `split_tokens` of `config`'s
/// tensor-core workspace (room for [`split_capacity`] boundaries per row; saturating).
fn split_parts(config: &ForwardConfig) -> (u64, u64, u64) {
    let slots = (config.batch as u64)
        .saturating_mul(config.heads as u64)
        .saturating_mul(split_capacity(config) as u64);
    (
        slots.saturating_mul((config.head_dim * config.state_dim) as u64),
        slots,
        slots.saturating_mul(split_launch::TOKEN_WORDS as u64),
    )
}

/// f32 elements of the workspace [`backward`] needs for `config` on any path (state
/// checkpoints, cos/sin of every θ, per-head q/k gradients, per-(b, h) parameter partials);
/// `None` when a size overflows `usize`. The largest of [`workspace_len_for`] over the paths:
/// enough whatever path a call takes (e.g. a tensor-core call whose views turn out misaligned
/// runs the chunked or token-serial backward).
pub fn workspace_len(config: &ForwardConfig) -> Option<usize> {
    let serial = total(workspace_parts(config, BackwardPath::TokenSerial)?);
    let chunked = workspace_parts(config, BackwardPath::Chunked).map_or(0, total);
    let tensor_core = workspace_parts(config, BackwardPath::TensorCore).map_or(0, total);
    usize::try_from(serial.max(chunked).max(tensor_core)).ok()
}

/// f32 elements of the workspace a backward of `config` on `path` needs; `None` when a size
/// overflows `usize` or the path does not take the geometry. The tensor-core path stores its
/// checkpoints and per-head partials as bf16 and θ once per chunk, so its workspace is about
/// half the token-serial one (benchmark geometry H = 64, B = 8, S = 2048: 3.24 GB against 6.98 GB).
pub fn workspace_len_for(config: &ForwardConfig, path: BackwardPath) -> Option<usize> {
    usize::try_from(total(workspace_parts(config, path)?)).ok()
}

/// [`workspace_len_for`] the path [`backward`] takes on `gpu` for `config` with 16-byte aligned
/// views ([`backward_path`]): the least workspace such a call accepts. A call whose views are
/// misaligned for the tensor-core path falls back to another path and then needs that path's
/// workspace ([`workspace_len`] covers every path).
pub fn workspace_len_on(gpu: &Gpu, config: &ForwardConfig) -> Option<usize> {
    workspace_len_for(config, backward_path(config, gpu.max_shared_memory_optin()))
}

/// Dynamic shared memory of the token-serial backward kernel for `config`, in bytes (saturating).
pub fn backward_shared_memory_bytes(config: &ForwardConfig) -> u64 {
    let u = |x: usize| x as u64;
    backward_smem_bytes(
        u(config.rank),
        u(config.state_dim),
        u(config.head_dim),
        u(config.num_angles),
    )
}

/// The gradient lengths `config` expects, given whether a norm weight is passed.
pub fn expected_gradient_lens(
    config: &ForwardConfig,
    with_norm_weight: bool,
) -> Option<GradientLens> {
    let want = config.expected_lens(false)?;
    Some(GradientLens {
        q: want.q,
        k: want.k,
        v: want.v,
        z: want.z,
        trap: want.trap,
        dt: want.dt,
        adt: want.adt,
        angles: want.angles,
        q_bias: want.q_bias,
        k_bias: want.k_bias,
        mimo_v: want.mimo_v,
        mimo_z: want.mimo_z,
        mimo_o: want.mimo_o,
        d: want.d,
        norm_weight: if with_norm_weight {
            want.norm_weight
        } else {
            None
        },
    })
}

fn grad_rule(arg: &'static str, actual: Option<usize>, expected: Option<usize>) -> Result<()> {
    match (actual, expected) {
        (Some(a), Some(e)) if a == e => Ok(()),
        (Some(a), Some(e)) => Err(Error::invalid(
            arg,
            format!("{a} elements"),
            format!("must hold {e} elements (the shape of its input)"),
        )),
        (None, None) => Ok(()),
        (None, Some(_)) => Err(Error::invalid(
            arg,
            "absent",
            "must be given: its input is given",
        )),
        (Some(a), None) => Err(Error::invalid(
            arg,
            format!("{a} elements"),
            "must be absent: its input is absent",
        )),
    }
}

/// Checks a config, the input lengths (`inputs.out` is ignored), `dout`, the gradient lengths and
/// the workspace length (at least [`workspace_len`], enough for every path): every rule of
/// [`backward`] that does not need the device. Errors name the argument, its value and the rule.
pub fn validate_backward(
    config: &ForwardConfig,
    inputs: &ForwardLens,
    dout: usize,
    grads: &GradientLens,
    workspace: usize,
) -> Result<()> {
    validate_backward_lens(config, inputs, dout, grads)?;
    require_workspace(config, workspace, workspace_len(config), |ws| {
        format!("must hold at least workspace_len(config) = {ws} f32 elements")
    })
}

/// The workspace rule of a call on `path`: at least [`workspace_len_for`] that path.
fn validate_workspace_for(
    config: &ForwardConfig,
    path: BackwardPath,
    workspace: usize,
) -> Result<()> {
    require_workspace(config, workspace, workspace_len_for(config, path), |ws| {
        format!(
            "must hold at least workspace_len_for(config, {path:?}) = {ws} f32 elements (the \
             {path:?} backward's layout; a tensor-core call whose views are not 16-byte aligned \
             runs another path: workspace_len(config) covers every path)"
        )
    })
}

/// `workspace` elements against the `need` of a layout (`None`: its size overflows), the rule
/// worded by `rule(need)`.
fn require_workspace(
    config: &ForwardConfig,
    workspace: usize,
    need: Option<usize>,
    rule: impl FnOnce(usize) -> String,
) -> Result<()> {
    let need = need.ok_or_else(|| {
        Error::invalid("seq_len", config.seq_len, "workspace size overflows usize")
    })?;
    if workspace < need {
        return Err(Error::invalid(
            "workspace",
            format!("{workspace} elements"),
            rule(need),
        ));
    }
    Ok(())
}

/// [`validate_backward`] without the workspace rule.
fn validate_backward_lens(
    config: &ForwardConfig,
    inputs: &ForwardLens,
    dout: usize,
    grads: &GradientLens,
) -> Result<()> {
    let want = config
        .expected_lens(false)
        .ok_or_else(|| Error::invalid("seq_len", config.seq_len, "tensor sizes overflow usize"))?;
    validate(
        config,
        &ForwardLens {
            out: want.out,
            states: None,
            ..*inputs
        },
    )?;
    if dout != want.out {
        let letters = if config.mode == OutputMode::Prereduce {
            "(B,S,R,H,P)"
        } else {
            "(B,S,H,P)"
        };
        return Err(Error::invalid(
            "dout",
            format!("{dout} elements"),
            format!(
                "must hold {letters} = {} elements (the output's shape)",
                want.out
            ),
        ));
    }
    let g = expected_gradient_lens(config, inputs.norm_weight.is_some())
        .ok_or_else(|| Error::invalid("seq_len", config.seq_len, "tensor sizes overflow usize"))?;
    grad_rule("grads.q", Some(grads.q), Some(g.q))?;
    grad_rule("grads.k", Some(grads.k), Some(g.k))?;
    grad_rule("grads.v", Some(grads.v), Some(g.v))?;
    grad_rule("grads.z", grads.z, g.z)?;
    grad_rule("grads.trap", Some(grads.trap), Some(g.trap))?;
    grad_rule("grads.dt", Some(grads.dt), Some(g.dt))?;
    grad_rule("grads.adt", Some(grads.adt), Some(g.adt))?;
    grad_rule("grads.angles", Some(grads.angles), Some(g.angles))?;
    grad_rule("grads.q_bias", Some(grads.q_bias), Some(g.q_bias))?;
    grad_rule("grads.k_bias", Some(grads.k_bias), Some(g.k_bias))?;
    grad_rule("grads.mimo_v", Some(grads.mimo_v), Some(g.mimo_v))?;
    grad_rule("grads.mimo_z", grads.mimo_z, g.mimo_z)?;
    grad_rule("grads.mimo_o", grads.mimo_o, g.mimo_o)?;
    grad_rule("grads.d", grads.d, g.d)?;
    grad_rule("grads.norm_weight", grads.norm_weight, g.norm_weight)?;
    Ok(())
}

/// The kernels of a call on `path`, in launch order: the checkpoint sweep (tensor-core path
/// only), the per-head kernel (on the chunked path the fixed-geometry instantiation when one
/// matches the call, `Kernel::backward_chunked_fixed`) and the reduce kernel.
fn kernels_for(config: &ForwardConfig, path: BackwardPath) -> (Option<Kernel>, Kernel, Kernel) {
    let reduce = match config.dtype {
        Dtype::F32 => Kernel::BackwardReduceF32,
        Dtype::Bf16 => Kernel::BackwardReduceBf16,
    };
    if path == BackwardPath::TensorCore {
        if let Some((ckpt, head)) = tensor_core_kernels(config) {
            return (Some(ckpt), head, reduce);
        }
    }
    let fixed = Kernel::backward_chunked_fixed(config.dtype, fixed_geometry(config));
    let head = match (config.dtype, path, fixed) {
        (_, BackwardPath::Chunked, Some(kernel)) => kernel,
        (Dtype::F32, BackwardPath::Chunked | BackwardPath::TensorCore, _) => {
            Kernel::BackwardChunkedF32
        }
        (Dtype::Bf16, BackwardPath::Chunked | BackwardPath::TensorCore, _) => {
            Kernel::BackwardChunkedBf16
        }
        (Dtype::F32, BackwardPath::TokenSerial, _) => Kernel::BackwardHeadF32,
        (Dtype::Bf16, BackwardPath::TokenSerial, _) => Kernel::BackwardHeadBf16,
    };
    (None, head, reduce)
}

/// The kernels (PTX symbols, in launch order) that [`backward`] runs for `config` on a device
/// with `max_shared_memory` bytes of opt-in shared memory, given 16-byte aligned views, without
/// a sequence split (see [`dispatch_paths_on`]); empty when the config is invalid.
pub fn dispatch_paths(config: &ForwardConfig, max_shared_memory: usize) -> Vec<&'static str> {
    dispatch_paths_on(config, max_shared_memory, 0)
}

/// [`dispatch_paths`] on a device of `sm_count` SMs: a call that [`backward_split`] splits runs
/// the tensor-core kernel twice (its two launches), and one whose checkpoint sweep
/// [`checkpoint_sweep_segments`] splits runs the segment-state and combine passes before it.
pub fn dispatch_paths_on(
    config: &ForwardConfig,
    max_shared_memory: usize,
    sm_count: usize,
) -> Vec<&'static str> {
    if crate::forward::validate_config(config).is_err() {
        return Vec::new();
    }
    let path = backward_path(config, max_shared_memory);
    let (ckpt, head, reduce) = kernels_for(config, path);
    let tensor_core = path == BackwardPath::TensorCore;
    let split = tensor_core && backward_split(config, sm_count).is_some();
    let sweep_split = ckpt
        .filter(|_| tensor_core && checkpoint_sweep_segments(config, sm_count) > 1)
        .and_then(|_| Kernel::backward_sweep_segment_state(config.dtype, fixed_geometry(config)));
    let sweep_prelude = sweep_split
        .into_iter()
        .flat_map(|segment_state| [segment_state, Kernel::SegmentCombineF32]);
    sweep_prelude
        .chain(ckpt)
        .chain(split.then_some(head))
        .chain([head, reduce])
        .map(Kernel::symbol)
        .collect()
}

/// [`dispatch_paths_on`] for `gpu` as it stands: its SM count and shared-memory limit, and the
/// `wgmma` twins of the checkpoint sweep and its segment-state pass where
/// [`Gpu::wgmma_kernels`] is on (the kernels the device actually runs).
pub fn dispatch_paths_on_gpu(gpu: &Gpu, config: &ForwardConfig) -> Vec<&'static str> {
    gpu.preferred_symbols(dispatch_paths_on(
        config,
        gpu.max_shared_memory_optin(),
        gpu.sm_count(),
    ))
}

/// The first of the views the tensor-core backward copies with 16-byte `cp.async` (q, k, v, z,
/// `dout`) or reads in 16-byte vectors (the workspace's checkpoints) that is not 16-byte
/// aligned, or of the gradients it stores as bf16 pairs (∂v, ∂z) that is not 4-byte aligned,
/// by name.
fn misaligned_for_tensor_core<T>(
    inputs: &ForwardInputs<'_, T>,
    dout: &CudaView<'_, T>,
    grads: &mut GradientsMut<'_, T>,
    workspace: &mut CudaViewMut<'_, f32>,
    stream: &CudaStream,
) -> Option<&'static str> {
    fn addr<V: DevicePtr<U>, U>(view: &V, stream: &CudaStream) -> u64 {
        let (p, _guard) = view.device_ptr(stream);
        p
    }
    fn addr_mut<V: DevicePtrMut<U>, U>(view: &mut V, stream: &CudaStream) -> u64 {
        let (p, _guard) = view.device_ptr_mut(stream);
        p
    }
    let mut views = vec![
        ("q", addr(&inputs.q, stream), 16),
        ("k", addr(&inputs.k, stream), 16),
        ("v", addr(&inputs.v, stream), 16),
        ("dout", addr(dout, stream), 16),
        ("workspace", addr_mut(workspace, stream), 16),
        ("grads.v", addr_mut(&mut grads.v, stream), 4),
    ];
    if let Some(z) = inputs.z.as_ref() {
        views.push(("z", addr(z, stream), 16));
    }
    if let Some(dz) = grads.z.as_mut() {
        views.push(("grads.z", addr_mut(dz, stream), 4));
    }
    views
        .into_iter()
        .find(|&(_, p, align)| !p.is_multiple_of(align))
        .map(|(name, _, _)| name)
}

/// The per-head kernel a call runs: [`backward_path`], except that a tensor-core call with a
/// misaligned view falls back to the next path.
fn call_path<T>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    dout: &CudaView<'_, T>,
    grads: &mut GradientsMut<'_, T>,
    workspace: &mut CudaViewMut<'_, f32>,
) -> BackwardPath {
    let max = gpu.max_shared_memory_optin();
    let path = backward_path(config, max);
    if path == BackwardPath::TensorCore
        && misaligned_for_tensor_core(inputs, dout, grads, workspace, stream).is_some()
    {
        fallback_path(config, max)
    } else {
        path
    }
}

/// Launch argument: the params struct by value.
#[repr(transparent)]
struct Args(BackwardParams);

// SAFETY: `BackwardParams` is `#[repr(C)]` plain data (u64, u32, f32 fields), the layout both
// kernels declare for their single parameter.
unsafe impl DeviceRepr for Args {}

/// Launch argument of the checkpoint sweep: the forward's params struct by value.
#[repr(transparent)]
struct ForwardArgs(ForwardParams);

// SAFETY: `ForwardParams` is `#[repr(C)]` plain data, the sweep's single parameter.
unsafe impl DeviceRepr for ForwardArgs {}

/// Validates everything, then enqueues the backward of `config` on `stream`: `grads` receives
/// every gradient, `workspace` (at least [`workspace_len_for`] the path the call takes, e.g.
/// [`workspace_len_on`] with aligned views; [`workspace_len`] always suffices) is scratch. Never
/// allocates and never synchronizes.
///
/// Errors (before any launch): [`Error::InvalidArgument`] naming the argument, its value and the
/// rule (shapes, dtype, options, overlapping outputs, workspace too small);
/// [`Error::SharedMemory`] naming both figures when the per-head kernel needs more shared memory
/// than the device allows; driver errors from the launches.
pub fn backward<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    dout: &CudaView<'_, T>,
    grads: &mut GradientsMut<'_, T>,
    workspace: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    let path = call_path(gpu, stream, config, inputs, dout, grads, workspace);
    backward_with_path(gpu, stream, config, path, inputs, dout, grads, workspace)
}

/// [`backward`] on a chosen per-head kernel. [`BackwardPath::Chunked`] on a geometry outside that
/// kernel is an [`Error::InvalidArgument`] naming `path`; one whose shared memory exceeds the
/// device's is an [`Error::SharedMemory`].
#[allow(clippy::too_many_arguments)]
pub fn backward_with_path<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    path: BackwardPath,
    inputs: &ForwardInputs<'_, T>,
    dout: &CudaView<'_, T>,
    grads: &mut GradientsMut<'_, T>,
    workspace: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    backward_impl(
        gpu, stream, config, path, inputs, dout, grads, workspace, false,
    )
}

/// [`backward_with_path`]; with `checkpointed`, the tensor-core path skips its checkpoint sweep
/// (the workspace already holds the checkpoints, see [`forward_for_backward`]).
#[allow(clippy::too_many_arguments)]
fn backward_impl<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    path: BackwardPath,
    inputs: &ForwardInputs<'_, T>,
    dout: &CudaView<'_, T>,
    grads: &mut GradientsMut<'_, T>,
    workspace: &mut CudaViewMut<'_, f32>,
    checkpointed: bool,
) -> Result<()> {
    if T::DTYPE != config.dtype {
        return Err(Error::invalid(
            "dtype",
            format!("{:?}", config.dtype),
            format!("must match the buffers' element type ({:?})", T::DTYPE),
        ));
    }
    let input_lens = ForwardLens {
        q: inputs.q.len(),
        k: inputs.k.len(),
        v: inputs.v.len(),
        z: inputs.z.as_ref().map(|x| x.len()),
        trap: inputs.trap.len(),
        dt: inputs.dt.len(),
        adt: inputs.adt.len(),
        angles: inputs.angles.len(),
        q_bias: inputs.q_bias.len(),
        k_bias: inputs.k_bias.len(),
        mimo_v: inputs.mimo_v.len(),
        mimo_z: inputs.mimo_z.as_ref().map(|x| x.len()),
        mimo_o: inputs.mimo_o.as_ref().map(|x| x.len()),
        d: inputs.d.as_ref().map(|x| x.len()),
        norm_weight: inputs.norm_weight.as_ref().map(|x| x.len()),
        out: 0,
        states: None,
    };
    validate_backward_lens(config, &input_lens, dout.len(), &grads.lens())?;
    let (ckpt_kernel, head, reduce) = kernels_for(config, path);
    let (smem, seg_len) = match path {
        BackwardPath::TensorCore => {
            if tensor_core_kernels(config).is_none() {
                return Err(Error::invalid(
                    "path",
                    "TensorCore",
                    "the tensor-core backward needs bf16 activations and R = 4, N = 128, P = 64, \
                     Na = 32",
                ));
            }
            if let Some(name) = misaligned_for_tensor_core(inputs, dout, grads, workspace, stream) {
                return Err(Error::invalid(
                    name,
                    "a misaligned view",
                    "must be 16-byte aligned on the TensorCore path (4-byte for grads.v and \
                     grads.z): its row copies and paired stores",
                ));
            }
            (backward_mma_smem::BYTES as u64, TENSOR_CORE_CHUNK)
        }
        BackwardPath::TokenSerial => (backward_shared_memory_bytes(config), config.chunk_size),
        BackwardPath::Chunked => {
            let chunk = chunked_tokens(config).ok_or_else(|| {
                Error::invalid(
                    "path",
                    "Chunked",
                    "the chunked backward needs R ∈ {1, 2, 4, 8}, P ≤ 256 and Na ≤ 256",
                )
            })?;
            (chunked_smem(config, chunk), chunk)
        }
    };
    validate_workspace_for(config, path, workspace.len())?;
    let smem = u32::try_from(smem).map_err(|_| Error::SharedMemory {
        kernel: head.symbol(),
        needed: usize::try_from(smem).unwrap_or(usize::MAX),
        max: gpu.max_shared_memory_optin(),
    })?;
    let parts = workspace_parts(config, path).ok_or_else(|| {
        Error::invalid("seq_len", config.seq_len, "workspace size overflows usize")
    })?;

    let mut guards: Vec<SyncOnDrop<'_>> = Vec::with_capacity(40);
    let mut ins: Vec<Range> = Vec::with_capacity(20);
    let mut outs: Vec<Range> = Vec::with_capacity(20);
    let esz = std::mem::size_of::<T>() as u64;
    macro_rules! ptr {
        ($view:expr, $name:literal, $size:expr) => {{
            let view = $view;
            let (p, g) = view.device_ptr(stream);
            guards.push(g);
            ins.push((p, p + view.len() as u64 * $size, $name));
            p
        }};
    }
    macro_rules! opt_ptr {
        ($view:expr, $name:literal, $size:expr) => {
            match $view {
                Some(v) => ptr!(v, $name, $size),
                None => 0,
            }
        };
    }
    macro_rules! out_ptr {
        ($view:expr, $name:literal, $size:expr) => {{
            let view = $view;
            let len = view.len() as u64;
            let (p, g) = view.device_ptr_mut(stream);
            guards.push(g);
            outs.push((p, p + len * $size, $name));
            p
        }};
    }
    macro_rules! opt_out {
        ($view:expr, $name:literal, $size:expr) => {
            match $view {
                Some(v) => out_ptr!(v, $name, $size),
                None => 0,
            }
        };
    }
    let mut params = BackwardParams {
        q: ptr!(&inputs.q, "q", esz),
        k: ptr!(&inputs.k, "k", esz),
        v: ptr!(&inputs.v, "v", esz),
        z: opt_ptr!(inputs.z.as_ref(), "z", esz),
        trap: ptr!(&inputs.trap, "trap", esz),
        dt: ptr!(&inputs.dt, "dt", 4),
        adt: ptr!(&inputs.adt, "adt", 4),
        angles: ptr!(&inputs.angles, "angles", 4),
        q_bias: ptr!(&inputs.q_bias, "q_bias", 4),
        k_bias: ptr!(&inputs.k_bias, "k_bias", 4),
        mimo_v: ptr!(&inputs.mimo_v, "mimo_v", 4),
        mimo_z: opt_ptr!(inputs.mimo_z.as_ref(), "mimo_z", 4),
        mimo_o: opt_ptr!(inputs.mimo_o.as_ref(), "mimo_o", 4),
        d: opt_ptr!(inputs.d.as_ref(), "d", 4),
        norm_weight: opt_ptr!(inputs.norm_weight.as_ref(), "norm_weight", 4),
        dout: ptr!(dout, "dout", esz),
        batch: config.batch as u32,
        seq_len: config.seq_len as u32,
        rank: config.rank as u32,
        heads: config.heads as u32,
        groups: config.groups as u32,
        n: config.state_dim as u32,
        p: config.head_dim as u32,
        na: config.num_angles as u32,
        seg_len: seg_len as u32,
        mode: config.mode.code(),
        rotation: config.rotation.code(),
        norm_eps: config.norm_eps,
        ..BackwardParams::default()
    };
    params.dq = out_ptr!(&mut grads.q, "grads.q", esz);
    params.dk = out_ptr!(&mut grads.k, "grads.k", esz);
    params.dv = out_ptr!(&mut grads.v, "grads.v", esz);
    params.dz = opt_out!(grads.z.as_mut(), "grads.z", esz);
    params.dtrap = out_ptr!(&mut grads.trap, "grads.trap", esz);
    params.ddt = out_ptr!(&mut grads.dt, "grads.dt", 4);
    params.dadt = out_ptr!(&mut grads.adt, "grads.adt", 4);
    params.dangles = out_ptr!(&mut grads.angles, "grads.angles", 4);
    params.dq_bias = out_ptr!(&mut grads.q_bias, "grads.q_bias", 4);
    params.dk_bias = out_ptr!(&mut grads.k_bias, "grads.k_bias", 4);
    params.dmimo_v = out_ptr!(&mut grads.mimo_v, "grads.mimo_v", 4);
    params.dmimo_z = opt_out!(grads.mimo_z.as_mut(), "grads.mimo_z", 4);
    params.dmimo_o = opt_out!(grads.mimo_o.as_mut(), "grads.mimo_o", 4);
    params.dd = opt_out!(grads.d.as_mut(), "grads.d", 4);
    params.dnorm = opt_out!(grads.norm_weight.as_mut(), "grads.norm_weight", 4);
    let ws_base = out_ptr!(workspace, "workspace", 4);
    let mut offset = ws_base;
    let (adj_len, decay_len, tokens_len) = if path == BackwardPath::TensorCore {
        split_parts(config)
    } else {
        (0, 0, 0)
    };
    for (field, len) in [
        (&mut params.ckpt, parts.ckpt),
        (&mut params.seg, parts.seg),
        (&mut params.cs, parts.cs),
        (&mut params.dqh, parts.dqkh),
        (&mut params.dkh, parts.dqkh),
        (&mut params.split_adj, adj_len),
        (&mut params.split_decay, decay_len),
        (&mut params.split_tokens, tokens_len),
        (&mut params.slots, parts.slots),
    ] {
        *field = offset;
        offset += 4 * len;
    }
    let split = (path == BackwardPath::TensorCore)
        .then(|| backward_split(config, gpu.sm_count()))
        .flatten();
    if let Some(sp) = split {
        params.split_boundaries = (sp.segments - 1) as u32;
        params.split_chunks = sp.chunks as u32;
    }
    let all: Vec<Range> = ins.iter().chain(&outs).copied().collect();
    overlap_check(&outs, &all)?;

    let threads = BACKWARD_THREADS as u64;
    let slot_len = BackwardSlots::len_saturating(
        config.rank as u64,
        config.state_dim as u64,
        config.head_dim as u64,
    );
    let reduce_items = 2 * parts.dqkh / config.heads as u64 * config.groups as u64
        + config.heads as u64 * slot_len
        + (config.batch * config.heads) as u64 * params.split_boundaries as u64;
    let reduce_blocks = reduce_items
        .div_ceil(threads)
        .clamp(1, 8 * gpu.sm_count() as u64) as u32;
    params.reduce_blocks = reduce_blocks;
    params.qkh_bf16 = u32::from(path == BackwardPath::TensorCore);

    let grid_dim = (config.heads as u32, config.batch as u32, 1);
    if let Some(ckpt) = ckpt_kernel.filter(|_| !checkpointed) {
        let sweep = ForwardArgs(ForwardParams {
            q: params.q,
            k: params.k,
            v: params.v,
            z: params.z,
            trap: params.trap,
            dt: params.dt,
            adt: params.adt,
            angles: params.angles,
            q_bias: params.q_bias,
            k_bias: params.k_bias,
            mimo_v: params.mimo_v,
            mimo_z: params.mimo_z,
            mimo_o: params.mimo_o,
            d: params.d,
            norm_weight: params.norm_weight,
            batch: params.batch,
            seq_len: params.seq_len,
            rank: params.rank,
            heads: params.heads,
            groups: params.groups,
            n: params.n,
            p: params.p,
            na: params.na,
            chunk: TENSOR_CORE_CHUNK as u32,
            mode: params.mode,
            rotation: params.rotation,
            norm_eps: params.norm_eps,
            segments: 1,
            ckpt_state: params.ckpt,
            ckpt_theta: params.cs,
            ..ForwardParams::default()
        });
        // The sweep and its segment-state pass: the tensor-core forward's launch shape, one
        // block per (h, b, segment).
        let sweep_cfg = |segments: usize| LaunchConfig {
            grid_dim: (grid_dim.0, grid_dim.1 * segments as u32, 1),
            block_dim: (FORWARD_MMA_THREADS, 1, 1),
            shared_mem_bytes: forward_mma_smem::BYTES,
        };
        let segments = checkpoint_sweep_segments(config, gpu.sm_count());
        let slots = (segments - 1) * config.batch * config.heads;
        let theta_words = 2 * config.num_angles;
        // The hand-off: states in the split adjoint region (room for `split_capacity` slots per
        // row, 16-byte aligned), θ and decays at the start of the per-head ∂k̃ region (both
        // sized by `checkpoint_sweep_segments`); the backward kernel writes them only after the
        // sweep, in stream order.
        let (sweep, segments) =
            match Kernel::backward_sweep_segment_state(config.dtype, fixed_geometry(config)) {
                Some(segment_state) if segments > 1 => {
                    let sweep = ForwardArgs(ForwardParams {
                        segments: segments as u32,
                        seg_chunks: config
                            .seq_len
                            .div_ceil(TENSOR_CORE_CHUNK)
                            .div_ceil(segments) as u32,
                        seg_state: params.split_adj,
                        seg_theta: params.dkh,
                        seg_decay: params.dkh + 4 * (slots * theta_words) as u64,
                        ..sweep.0
                    });
                    let mut launch = gpu.launch(stream, gpu.preferred(segment_state))?;
                    launch.arg(&sweep);
                    let cfg = sweep_cfg(segments);
                    // SAFETY: as for the sweep below; the segment-state pass writes only the
                    // hand-off slots 0..K−1 per row, inside the workspace regions named above.
                    unsafe { launch.run(cfg) }?;
                    crate::forward::launch_segment_combine(
                        gpu, stream, config, &sweep.0, segments,
                    )?;
                    (sweep, segments)
                }
                _ => (sweep, 1),
            };
        let mut launch = gpu.launch(stream, gpu.preferred(ckpt))?;
        launch.arg(&sweep);
        let cfg = sweep_cfg(segments);
        // SAFETY: one by-value `ForwardParams` is the sweep's parameter list; its pointers are the
        // validated inputs, the checkpoint regions of the validated workspace (16-byte aligned,
        // checked above) and, split, the combined hand-off slots, which the backward kernel then
        // reads or overwrites, ordered by the stream.
        unsafe { launch.run(cfg) }?;
    }
    let block_dim = (
        if path == BackwardPath::TensorCore {
            BACKWARD_MMA_THREADS
        } else {
            BACKWARD_THREADS
        },
        1,
        1,
    );
    let head_launches: &[u32] = if split.is_some() {
        &[split_launch::FIRST, split_launch::SECOND]
    } else {
        &[split_launch::WHOLE]
    };
    for &which in head_launches {
        let args = Args(BackwardParams {
            split: which,
            ..params
        });
        let mut launch = gpu.launch(stream, head)?;
        launch.arg(&args);
        let cfg = LaunchConfig {
            grid_dim: (grid_dim.0, grid_dim.1, params.split_boundaries.max(1)),
            block_dim,
            shared_mem_bytes: smem,
        };
        // SAFETY: one by-value `BackwardParams` is the kernel's parameter list; every pointer
        // was checked against its documented shape by `validate_backward`, the workspace
        // regions (the split's sized for `split_capacity ≥ split_boundaries` per row) lie inside
        // the workspace, outputs overlap nothing, and the guards keep the buffers' event
        // tracking alive until the launches are enqueued. The second split launch reads what
        // the first wrote, ordered by the stream.
        unsafe { launch.run(cfg) }?;
    }
    let args = Args(BackwardParams {
        split: if split.is_some() {
            split_launch::SECOND
        } else {
            split_launch::WHOLE
        },
        ..params
    });
    let mut launch = gpu.launch(stream, reduce)?;
    launch.arg(&args);
    let cfg = LaunchConfig {
        grid_dim: (reduce_blocks, 1, 1),
        block_dim: (BACKWARD_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: as above; the reduce kernel reads the workspace the first kernel wrote, ordered by
    // the stream.
    let result = unsafe { launch.run(cfg) };
    drop(guards);
    result
}

/// What [`forward_for_backward`] left in a backward workspace for [`backward_with_checkpoints`]:
/// the call it ran and whether its kernel wrote the tensor-core backward's checkpoints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackwardCheckpoints {
    config: ForwardConfig,
    workspace: (u64, usize),
    written: bool,
}

impl BackwardCheckpoints {
    /// Whether the forward wrote the checkpoints (the tensor-core forward ran, or on compute
    /// capability 9.0 the warp-specialized one: bf16 at the tensor-core backward's geometry,
    /// chunks of 16, aligned views); without them
    /// [`backward_with_checkpoints`] runs the checkpoint sweep itself, as [`backward`] does.
    pub fn written(&self) -> bool {
        self.written
    }
}

/// Whether two configs describe the same problem for the backward: every field but the chunk
/// size (the forward's C, the backward's segment length on the token-serial path).
fn same_problem(a: &ForwardConfig, b: &ForwardConfig) -> bool {
    a == &ForwardConfig {
        chunk_size: a.chunk_size,
        ..*b
    }
}

/// The forward of a training step: [`forward_with_workspace`](crate::forward::forward_with_workspace)
/// (or [`forward`](crate::forward::forward) when `forward_workspace` is `None`), which where the
/// tensor-core backward will run also writes that backward's checkpoints (the bf16 state and θ
/// entering every chunk of 16 tokens) into `workspace`, the backward's workspace (at least
/// [`workspace_len`] f32 elements). [`backward_with_checkpoints`] with the returned record, the
/// same inputs and the same, untouched workspace then skips the checkpoint sweep. Outputs and
/// final states are those of the plain forward, bitwise. Never allocates and never synchronizes.
///
/// Errors: those of the forward (where `workspace` names `forward_workspace`), and
/// [`Error::InvalidArgument`] naming `workspace` when it is smaller than the tensor-core
/// backward's layout (where that backward runs; [`workspace_len`] is always enough), or
/// `workspace (the backward's)` when it overlaps another buffer.
#[allow(clippy::too_many_arguments)]
pub fn forward_for_backward<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    out: &mut CudaViewMut<'_, T>,
    states: Option<&mut crate::forward::FinalStatesMut<'_, T>>,
    forward_workspace: Option<&mut CudaViewMut<'_, f32>>,
    workspace: &mut CudaViewMut<'_, f32>,
) -> Result<BackwardCheckpoints> {
    crate::forward::validate_config(config)?;
    let tensor_core =
        backward_path(config, gpu.max_shared_memory_optin()) == BackwardPath::TensorCore;
    let parts = workspace_parts(config, BackwardPath::TensorCore).filter(|_| tensor_core);
    if let Some(parts) = parts {
        // The tensor-core backward's layout (`workspace_len_for`; the backward checks the
        // same figure for its own config).
        let need = total(parts);
        if (workspace.len() as u64) < need {
            return Err(Error::invalid(
                "workspace",
                format!("{} elements", workspace.len()),
                format!(
                    "must hold at least the tensor-core backward's {need} f32 elements \
                     (backward::workspace_len_for)"
                ),
            ));
        }
    }
    let ws_len = workspace.len();
    let (ws_base, guard) = workspace.device_ptr_mut(stream);
    let kernel = Kernel::forward_with_checkpoints(config.dtype, fixed_geometry(config));
    let target = match (parts, kernel) {
        (Some(parts), Some(kernel)) if ws_base.is_multiple_of(16) => {
            Some(crate::forward::CheckpointTarget {
                kernel,
                state: ws_base,
                theta: ws_base + 4 * (parts.ckpt + parts.seg),
                // Named apart from the forward's own `workspace` range, so that an overlap of
                // the two is reported.
                range: (
                    ws_base,
                    ws_base + 4 * ws_len as u64,
                    "workspace (the backward's)",
                ),
            })
        }
        _ => None,
    };
    let written = crate::forward::forward_impl(
        gpu,
        stream,
        config,
        inputs,
        out,
        states,
        forward_workspace,
        None,
        target,
    )?;
    drop(guard);
    Ok(BackwardCheckpoints {
        config: *config,
        workspace: (ws_base, ws_len),
        written,
    })
}

/// [`backward`] after [`forward_for_backward`]: where the tensor-core backward runs and the
/// forward wrote its checkpoints, it skips the checkpoint sweep (one kernel fewer, the state pass
/// over the whole sequence); otherwise it is [`backward`]. `config` must describe the forward's
/// problem (every field but `chunk_size`), `workspace` must be the one the forward wrote, not
/// written since, and the inputs the forward's; the first two are checked, the last is the
/// caller's contract. Never allocates and never synchronizes.
///
/// Errors: those of [`backward`], and [`Error::InvalidArgument`] naming `checkpoints` for a
/// different problem or `workspace` for a different workspace.
#[allow(clippy::too_many_arguments)]
pub fn backward_with_checkpoints<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    checkpoints: &BackwardCheckpoints,
    inputs: &ForwardInputs<'_, T>,
    dout: &CudaView<'_, T>,
    grads: &mut GradientsMut<'_, T>,
    workspace: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    if !same_problem(config, &checkpoints.config) {
        return Err(Error::invalid(
            "checkpoints",
            format!("{:?}", checkpoints.config),
            "must come from the forward of this config (every field but chunk_size equal)",
        ));
    }
    let ws_len = workspace.len();
    let ws = {
        let (p, _guard) = workspace.device_ptr_mut(stream);
        (p, ws_len)
    };
    if ws != checkpoints.workspace {
        return Err(Error::invalid(
            "workspace",
            format!("{:#x} ({} elements)", ws.0, ws.1),
            format!(
                "must be the workspace forward_for_backward wrote ({:#x}, {} elements)",
                checkpoints.workspace.0, checkpoints.workspace.1
            ),
        ));
    }
    let path = call_path(gpu, stream, config, inputs, dout, grads, workspace);
    let checkpointed = checkpoints.written && path == BackwardPath::TensorCore;
    backward_impl(
        gpu,
        stream,
        config,
        path,
        inputs,
        dout,
        grads,
        workspace,
        checkpointed,
    )
}

/// [`backward`] with the gradients and the workspace allocated on `stream` (the workspace is
/// freed when this returns, stream-ordered). Allocates; never synchronizes.
pub fn backward_alloc<T: Activation>(
    gpu: &Gpu,
    stream: &std::sync::Arc<CudaStream>,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    dout: &CudaView<'_, T>,
) -> Result<Gradients<T>> {
    let mut grads = Gradients::<T>::alloc(stream, config, inputs.norm_weight.is_some())?;
    // The layout of the path the call takes: `workspace_len_on`'s, unless a misaligned input
    // sends a tensor-core call down another path.
    let overflow = || Error::invalid("seq_len", config.seq_len, "workspace size overflows usize");
    let alloc = |len: usize| {
        stream
            .alloc_zeros::<f32>(len)
            .map_err(Error::driver("allocating the backward workspace"))
    };
    let ws_len = workspace_len_on(gpu, config).ok_or_else(overflow)?;
    let mut workspace = alloc(ws_len)?;
    let path = {
        let mut views = grads.as_views_mut();
        let mut ws = workspace.as_view_mut();
        call_path(gpu, stream, config, inputs, dout, &mut views, &mut ws)
    };
    if workspace_len_for(config, path).is_none_or(|need| need > ws_len) {
        workspace = alloc(workspace_len(config).ok_or_else(overflow)?)?;
    }
    {
        let mut views = grads.as_views_mut();
        let mut ws = workspace.as_view_mut();
        backward(gpu, stream, config, inputs, dout, &mut views, &mut ws)?;
    }
    drop(workspace);
    Ok(grads)
}
