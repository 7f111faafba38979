//! Mamba-3 MIMO chunked forward on the GPU (spec §2.2, §2.3, §4).
//!
//! One call runs the whole forward from a zero state: cumulative angles, rotary + bias, the
//! chunked SSD recurrence, D skip, gate / fused RMSNorm / rank contraction (or prereduce), and,
//! when asked, the decode hand-off states. [`forward`] is one kernel launch ([`dispatch_paths`]
//! names it): one block per (head, batch row) walks the chunks, forming the cumulative angles
//! itself, so it needs no workspace.
//!
//! When the (head, batch) rows do not fill the GPU (B·H below the SM count),
//! [`forward_with_workspace`] splits each sequence into [`sequence_segments`] segments of whole
//! chunks (spec performance.md §3.3): a segment-state pass computes every segment's end state
//! from a zero start, a combine pass chains them in order (decay, and the rotation that moves a
//! segment's local angle frame to the true one), and the forward then runs every segment from its
//! true start state. The caller supplies the hand-off buffer ([`workspace_len`] f32 elements);
//! [`dispatch_paths_with_workspace`] names the three kernels. Same results as [`forward`] to f32
//! rounding, deterministic (no atomics).
//!
//! * [`ForwardConfig`]: sizes, chunk size, activation dtype, rotation, output mode, options.
//! * [`validate`]: every rule, as a pure function of the config and the buffer lengths
//!   ([`ForwardLens`]), so it runs (and is tested) without a GPU.
//! * [`forward`]: validates, then enqueues on the caller's stream into caller-provided buffers;
//!   it never allocates or synchronizes. [`forward_alloc`] allocates the outputs for you.
//!
//! Layouts (row-major; `X` = the activation type `T`, f32 or bf16):
//!
//! | tensor | shape | type |
//! |---|---|---|
//! | q, k | (B,S,R,G,N) | X |
//! | v, z | (B,S,H,P) | X |
//! | trap | (B,H,S) | X (raw logits) |
//! | dt, adt | (B,H,S) | f32 |
//! | angles | (B,S,H,Na) | f32 (raw logits) |
//! | q_bias, k_bias | (H,R,N) | f32 |
//! | mimo_v, mimo_z, mimo_o | (H,R,P) | f32 |
//! | d | (H) | f32 |
//! | norm_weight | (H,P) | f32 |
//! | out | (B,S,H,P), or (B,S,R,H,P) in prereduce mode | X |
//! | final θ | (B,H,Na) | f32 in [0, 2π) |
//! | final ssm | (B,H,P,N) | f32 |
//! | final k | (B,R,H,N) | X (rotated, biased k̂ of token S−1) |
//! | final v | (B,H,P) | X (raw v of token S−1) |
//!
//! # Limits
//! R ∈ {1, 2, 4, 8} (one kernel per rank); N even; Na ≤ N/2; G divides H; B ≤ 65 535; any S ≥ 1
//! and C ≥ 1. The `chunked_forward` kernel's shared memory, [`ForwardConfig::shared_memory_bytes`]
//! (≈ 4·(P·(N+4) + 2·C·R·(N+4) + 2·C·R·P + (C·R)² + …) bytes), grows with (C·R)²: at N=128,
//! P=64 the upstream geometries (C·R = 64) need about 152 KiB, C·R = 128 about 291 KiB. When C
//! does not fit the device's opt-in limit (227 KB on H100/H200, 163 KB on A100, 99 KB on
//! sm_86/sm_89), the kernels run the largest divisor of C that does ([`kernel_chunk_size`]; same
//! result up to rounding); only a geometry whose one-token chunk does not fit (P·N alone near the
//! limit) returns [`Error::SharedMemory`].
//!
//! # Precision
//! Activations are read in their storage type and all arithmetic is f32 (angle totals f64), so
//! the f32 path tracks the float64 golden model to a few 1e-7 relative to the output's largest
//! magnitude; the bf16 path is limited by its own input and output rounding.

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    LaunchConfig, SyncOnDrop,
};
use mamba3_abi::{
    forward_mma_smem, forward_smem_bytes, forward_stage_bytes, forward_tf32_smem,
    forward_ws_f32_smem, forward_ws_smem, segment_combine_smem_bytes, ForwardParams,
    SegmentCombineParams, FORWARD_MMA_THREADS, FORWARD_THREADS, FORWARD_WS_F32_THREADS,
    FORWARD_WS_THREADS, SEGMENT_COMBINE_THREADS,
};

use crate::config::{OutputMode, Rotation};
use crate::device::Gpu;
use crate::error::{Error, Result};
use crate::kernel::{FixedForwardGeometry, Kernel};

pub use crate::config::{Activation, Dtype};

/// Everything that fixes the shapes and the kernel of one forward call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForwardConfig {
    /// B, batch size (≤ 65 535).
    pub batch: usize,
    /// S, number of tokens (≥ 1).
    pub seq_len: usize,
    /// R, MIMO rank: 1, 2, 4 or 8.
    pub rank: usize,
    /// G, number of q/k groups; divides H.
    pub groups: usize,
    /// H, number of value heads.
    pub heads: usize,
    /// N, state dimension; even.
    pub state_dim: usize,
    /// P, value head dimension.
    pub head_dim: usize,
    /// Na, rotary angles per head; at most N/2 (0 disables rotation).
    pub num_angles: usize,
    /// C, chunk size (≥ 1; bounded by shared memory, see the module docs).
    pub chunk_size: usize,
    /// Storage type of the activations.
    pub dtype: Dtype,
    /// Rotary convention.
    pub rotation: Rotation,
    /// Output mode (decides whether `mimo_o` and `norm_weight` are used).
    pub mode: OutputMode,
    /// Whether `z` and `mimo_z` are given (gating).
    pub has_z: bool,
    /// Whether `d` is given (skip).
    pub has_d: bool,
    /// RMSNorm epsilon (fused-norm mode; finite and > 0).
    pub norm_eps: f32,
}

impl ForwardConfig {
    /// Elements per token and head of the output: P, or R·P in prereduce mode.
    pub fn output_width(&self) -> usize {
        match self.mode {
            OutputMode::Prereduce => self.rank * self.head_dim,
            _ => self.head_dim,
        }
    }

    /// The launch parameters' shape and option fields (every pointer 0, one segment), with the
    /// staging region used when `staged`.
    pub(crate) fn scalar_params(&self, staged: bool) -> ForwardParams {
        ForwardParams {
            batch: self.batch as u32,
            seq_len: self.seq_len as u32,
            rank: self.rank as u32,
            heads: self.heads as u32,
            groups: self.groups as u32,
            n: self.state_dim as u32,
            p: self.head_dim as u32,
            na: self.num_angles as u32,
            chunk: self.chunk_size as u32,
            mode: self.mode.code(),
            rotation: self.rotation.code(),
            norm_eps: self.norm_eps,
            staged: u32::from(staged),
            ..ForwardParams::default()
        }
    }

    /// Dynamic shared memory of the kernel this config selects, in bytes (saturating).
    pub fn shared_memory_bytes(&self) -> u64 {
        let u = |x: usize| x as u64;
        forward_smem_bytes(
            u(self.rank),
            u(self.state_dim),
            u(self.head_dim),
            u(self.num_angles),
            u(self.chunk_size),
        )
    }

    /// The buffer lengths (in elements) a call with this config expects; optional buffers are
    /// present exactly when the config uses them, final states when `with_states`.
    /// `None` when a size overflows `usize`.
    pub fn expected_lens(&self, with_states: bool) -> Option<ForwardLens> {
        let m = |dims: &[usize]| dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let (b, s, r, g, h, n, p, na) = (
            self.batch,
            self.seq_len,
            self.rank,
            self.groups,
            self.heads,
            self.state_dim,
            self.head_dim,
            self.num_angles,
        );
        let qk = m(&[b, s, r, g, n])?;
        let vz = m(&[b, s, h, p])?;
        let scalar = m(&[b, h, s])?;
        let mimo = m(&[h, r, p])?;
        let states = if with_states {
            Some(StateLens {
                theta: m(&[b, h, na])?,
                ssm: m(&[b, h, p, n])?,
                k: m(&[b, r, h, n])?,
                v: m(&[b, h, p])?,
            })
        } else {
            None
        };
        Some(ForwardLens {
            q: qk,
            k: qk,
            v: vz,
            z: self.has_z.then_some(vz),
            trap: scalar,
            dt: scalar,
            adt: scalar,
            angles: m(&[b, s, h, na])?,
            q_bias: m(&[h, r, n])?,
            k_bias: m(&[h, r, n])?,
            mimo_v: mimo,
            mimo_z: self.has_z.then_some(mimo),
            mimo_o: (self.mode != OutputMode::Prereduce).then_some(mimo),
            d: self.has_d.then_some(h),
            norm_weight: (self.mode == OutputMode::FusedNorm).then_some(m(&[h, p])?),
            out: m(&[b, s, h, self.output_width()])?,
            states,
        })
    }
}

/// Element counts of the four final-state buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLens {
    /// θ, (B,H,Na).
    pub theta: usize,
    /// SSM state, (B,H,P,N).
    pub ssm: usize,
    /// k̂ of the last token, (B,R,H,N).
    pub k: usize,
    /// Raw v of the last token, (B,H,P).
    pub v: usize,
}

/// Element counts of the buffers of one call (`None`: not given), the input of [`validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardLens {
    /// q.
    pub q: usize,
    /// k.
    pub k: usize,
    /// v.
    pub v: usize,
    /// z.
    pub z: Option<usize>,
    /// trap.
    pub trap: usize,
    /// dt.
    pub dt: usize,
    /// adt.
    pub adt: usize,
    /// angles.
    pub angles: usize,
    /// q_bias.
    pub q_bias: usize,
    /// k_bias.
    pub k_bias: usize,
    /// mimo_v.
    pub mimo_v: usize,
    /// mimo_z.
    pub mimo_z: Option<usize>,
    /// mimo_o.
    pub mimo_o: Option<usize>,
    /// d.
    pub d: Option<usize>,
    /// norm_weight (optional in fused-norm mode: weight 1 when absent).
    pub norm_weight: Option<usize>,
    /// out.
    pub out: usize,
    /// Final states, when asked for.
    pub states: Option<StateLens>,
}

/// Largest batch the launch grid allows (grid y).
pub const MAX_BATCH: usize = 65_535;

/// Checks the config alone: sizes, rank, divisibility, options, epsilon.
pub fn validate_config(c: &ForwardConfig) -> Result<()> {
    let dims = [
        ("batch", c.batch),
        ("seq_len", c.seq_len),
        ("rank", c.rank),
        ("groups", c.groups),
        ("heads", c.heads),
        ("state_dim", c.state_dim),
        ("head_dim", c.head_dim),
        ("chunk_size", c.chunk_size),
    ];
    for (name, v) in dims {
        if v == 0 {
            return Err(Error::invalid(name, v, "must be at least 1"));
        }
    }
    for (name, v) in dims.iter().copied().chain([("num_angles", c.num_angles)]) {
        if u32::try_from(v).is_err() {
            return Err(Error::invalid(name, v, "must be below 2^32"));
        }
    }
    if !matches!(c.rank, 1 | 2 | 4 | 8) {
        return Err(Error::invalid(
            "rank",
            c.rank,
            "must be 1, 2, 4 or 8 (the ranks with a compiled kernel)",
        ));
    }
    if !c.state_dim.is_multiple_of(2) {
        return Err(Error::invalid(
            "state_dim",
            c.state_dim,
            "must be even (rotary pairs)",
        ));
    }
    if c.num_angles > c.state_dim / 2 {
        return Err(Error::invalid(
            "num_angles",
            c.num_angles,
            format!("must be at most state_dim/2 = {}", c.state_dim / 2),
        ));
    }
    if !c.heads.is_multiple_of(c.groups) {
        return Err(Error::invalid(
            "groups",
            c.groups,
            format!("must divide heads = {}", c.heads),
        ));
    }
    if c.batch > MAX_BATCH {
        return Err(Error::invalid(
            "batch",
            c.batch,
            format!("must be at most {MAX_BATCH} (launch grid limit)"),
        ));
    }
    if c.mode == OutputMode::FusedNorm && !(c.norm_eps.is_finite() && c.norm_eps > 0.0) {
        return Err(Error::invalid(
            "norm_eps",
            c.norm_eps,
            "must be finite and > 0 in fused-norm mode",
        ));
    }
    Ok(())
}

fn shape_rule(letters: &str, dims: &[usize], expected: usize) -> String {
    let values: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!(
        "must hold {letters}=({}) = {expected} elements",
        values.join(",")
    )
}

fn check_len(
    arg: &'static str,
    actual: usize,
    expected: usize,
    letters: &str,
    dims: &[usize],
) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(Error::invalid(
            arg,
            format!("{actual} elements"),
            shape_rule(letters, dims, expected),
        ))
    }
}

fn check_opt(
    arg: &'static str,
    actual: Option<usize>,
    expected: Option<usize>,
    letters: &str,
    dims: &[usize],
    why_present: &str,
    why_absent: &str,
) -> Result<()> {
    match (actual, expected) {
        (Some(a), Some(e)) => check_len(arg, a, e, letters, dims),
        (None, None) => Ok(()),
        (None, Some(_)) => Err(Error::invalid(arg, "absent", why_present)),
        (Some(a), None) => Err(Error::invalid(arg, format!("{a} elements"), why_absent)),
    }
}

/// Checks a config and the lengths of the buffers given for it: every rule of [`forward`] that
/// does not need the device. Errors name the argument, its value and the rule.
pub fn validate(c: &ForwardConfig, lens: &ForwardLens) -> Result<()> {
    validate_config(c)?;
    let want = c
        .expected_lens(lens.states.is_some())
        .ok_or_else(|| Error::invalid("seq_len", c.seq_len, "tensor sizes overflow usize"))?;
    let (b, s, r, g, h, n, p, na) = (
        c.batch,
        c.seq_len,
        c.rank,
        c.groups,
        c.heads,
        c.state_dim,
        c.head_dim,
        c.num_angles,
    );
    check_len("q", lens.q, want.q, "(B,S,R,G,N)", &[b, s, r, g, n])?;
    check_len("k", lens.k, want.k, "(B,S,R,G,N)", &[b, s, r, g, n])?;
    check_len("v", lens.v, want.v, "(B,S,H,P)", &[b, s, h, p])?;
    check_opt(
        "z",
        lens.z,
        want.z,
        "(B,S,H,P)",
        &[b, s, h, p],
        "must be given: config.has_z is true",
        "must be absent: config.has_z is false",
    )?;
    check_len("trap", lens.trap, want.trap, "(B,H,S)", &[b, h, s])?;
    check_len("dt", lens.dt, want.dt, "(B,H,S)", &[b, h, s])?;
    check_len("adt", lens.adt, want.adt, "(B,H,S)", &[b, h, s])?;
    check_len(
        "angles",
        lens.angles,
        want.angles,
        "(B,S,H,Na)",
        &[b, s, h, na],
    )?;
    check_len("q_bias", lens.q_bias, want.q_bias, "(H,R,N)", &[h, r, n])?;
    check_len("k_bias", lens.k_bias, want.k_bias, "(H,R,N)", &[h, r, n])?;
    check_len("mimo_v", lens.mimo_v, want.mimo_v, "(H,R,P)", &[h, r, p])?;
    check_opt(
        "mimo_z",
        lens.mimo_z,
        want.mimo_z,
        "(H,R,P)",
        &[h, r, p],
        "must be given: config.has_z is true",
        "must be absent: config.has_z is false",
    )?;
    check_opt(
        "mimo_o",
        lens.mimo_o,
        want.mimo_o,
        "(H,R,P)",
        &[h, r, p],
        "must be given in gated and fused-norm modes",
        "must be absent in prereduce mode (no rank contraction)",
    )?;
    check_opt(
        "d",
        lens.d,
        want.d,
        "(H)",
        &[h],
        "must be given: config.has_d is true",
        "must be absent: config.has_d is false",
    )?;
    match (lens.norm_weight, want.norm_weight) {
        (Some(a), Some(e)) => check_len("norm_weight", a, e, "(H,P)", &[h, p])?,
        (Some(a), None) => {
            return Err(Error::invalid(
                "norm_weight",
                format!("{a} elements"),
                "must be absent outside fused-norm mode",
            ))
        }
        // Absent in fused-norm mode: weight 1.
        _ => {}
    }
    let out_dims: &[usize] = if c.mode == OutputMode::Prereduce {
        &[b, s, r, h, p]
    } else {
        &[b, s, h, p]
    };
    let out_letters = if c.mode == OutputMode::Prereduce {
        "(B,S,R,H,P)"
    } else {
        "(B,S,H,P)"
    };
    check_len("out", lens.out, want.out, out_letters, out_dims)?;
    if let (Some(got), Some(st)) = (lens.states, want.states) {
        let names = ["states.theta", "states.ssm", "states.k", "states.v"];
        check_state_lens(c, names, &got, &st)?;
    }
    Ok(())
}

/// Checks the four state buffers `got` (named by `names`: θ, ssm, k, v) against `want`.
fn check_state_lens(
    c: &ForwardConfig,
    names: [&'static str; 4],
    got: &StateLens,
    want: &StateLens,
) -> Result<()> {
    let (b, r, h, n, p, na) = (
        c.batch,
        c.rank,
        c.heads,
        c.state_dim,
        c.head_dim,
        c.num_angles,
    );
    check_len(names[0], got.theta, want.theta, "(B,H,Na)", &[b, h, na])?;
    check_len(names[1], got.ssm, want.ssm, "(B,H,P,N)", &[b, h, p, n])?;
    check_len(names[2], got.k, want.k, "(B,R,H,N)", &[b, r, h, n])?;
    check_len(names[3], got.v, want.v, "(B,H,P)", &[b, h, p])
}

/// Checks the lengths of the initial-state buffers of [`forward_from_states`] against `c`
/// (the final-state layouts); errors name `initial.theta`, `initial.ssm`, `initial.k` or
/// `initial.v`.
pub fn validate_initial(c: &ForwardConfig, got: &StateLens) -> Result<()> {
    validate_config(c)?;
    let want = c
        .expected_lens(true)
        .and_then(|l| l.states)
        .ok_or_else(|| Error::invalid("seq_len", c.seq_len, "tensor sizes overflow usize"))?;
    let names = ["initial.theta", "initial.ssm", "initial.k", "initial.v"];
    check_state_lens(c, names, got, &want)
}

/// The geometry of `config` as the fixed-instantiation table spells it.
fn fixed_geometry(config: &ForwardConfig) -> FixedForwardGeometry {
    FixedForwardGeometry {
        rank: config.rank,
        state_dim: config.state_dim,
        head_dim: config.head_dim,
        num_angles: config.num_angles,
        chunk: config.chunk_size,
    }
}

/// The fixed-geometry instantiations (forward, segment state) for `config`, if one matches.
fn fixed_kernels(config: &ForwardConfig) -> Option<(Kernel, Kernel)> {
    Kernel::forward_fixed(config.dtype, fixed_geometry(config))
}

/// The tensor-core forward and its segment-state pass for `config`, if its dtype and geometry
/// have them ([`Kernel::forward_tensor_core`]); a call shorter than one chunk (never split) runs
/// the short-call instantiation ([`Kernel::forward_tensor_core_short`]).
fn tensor_core_kernels(config: &ForwardConfig) -> Option<(Kernel, Kernel)> {
    let geometry = fixed_geometry(config);
    let (forward, segment_state) = Kernel::forward_tensor_core(config.dtype, geometry)?;
    let forward = match Kernel::forward_tensor_core_short(config.dtype, geometry) {
        Some(short) if config.seq_len < config.chunk_size => short,
        _ => forward,
    };
    Some((forward, segment_state))
}

/// Whether the forward of `config` has a tensor-core kernel ([`Kernel::forward_tensor_core`])
/// whose shared memory fits a GPU with `max_shared_memory` bytes of opt-in shared memory per
/// block (it then runs unless a view is misaligned, see [`kernel_for`]).
pub fn tensor_core_fits(config: &ForwardConfig, max_shared_memory: usize) -> bool {
    tensor_core_kernels(config).is_some()
        && tensor_core_shared_memory(config.dtype) as usize <= max_shared_memory
}

/// Dynamic shared memory of the tensor-core forward for activations of `dtype` (bf16: 109 KB;
/// f32, three-pass TF32 with f32 tiles: 109 KB).
pub fn tensor_core_shared_memory(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::Bf16 => forward_mma_smem::BYTES,
        Dtype::F32 => forward_tf32_smem::BYTES,
    }
}

/// The forward kernel for `config`: the tensor-core kernel for exactly its dtype and geometry
/// when there is one ([`Kernel::forward_tensor_core`]; a call whose q, k, v or z view is not
/// 16-byte aligned, or on a GPU whose shared-memory opt-in limit is below the kernel's 109 KB,
/// falls back to the next choice), else the fixed-geometry instantiation
/// ([`Kernel::forward_fixed`]), else the one for its activation dtype and rank, if any.
pub fn kernel_for(config: &ForwardConfig) -> Option<Kernel> {
    tensor_core_kernels(config)
        .map(|(forward, _)| forward)
        .or_else(|| chunked_kernel_for(config))
}

/// [`kernel_for`] without the tensor-core kernel: the `chunked_forward` instantiation.
fn chunked_kernel_for(config: &ForwardConfig) -> Option<Kernel> {
    fixed_kernels(config)
        .map(|(forward, _)| forward)
        .or_else(|| Kernel::forward_fma(config.dtype, config.rank))
}

/// The segment-state kernel of the split forward for `config`, chosen like [`kernel_for`].
pub fn segment_state_kernel_for(config: &ForwardConfig) -> Option<Kernel> {
    tensor_core_kernels(config)
        .map(|(_, segment_state)| segment_state)
        .or_else(|| chunked_segment_state_kernel_for(config))
}

/// [`segment_state_kernel_for`] without the tensor-core kernel.
fn chunked_segment_state_kernel_for(config: &ForwardConfig) -> Option<Kernel> {
    fixed_kernels(config)
        .map(|(_, segment_state)| segment_state)
        .or_else(|| Kernel::segment_state(config.dtype, config.rank))
}

/// The forward kernel and its segment-state pass that run `config` on a GPU with
/// `max_shared_memory` bytes of opt-in shared memory per block: those of its chunk as run
/// ([`kernel_chunk_size`]), the tensor-core pair only where its shared memory fits.
fn run_kernels(config: &ForwardConfig, max_shared_memory: usize) -> Option<(Kernel, Kernel)> {
    let run = ForwardConfig {
        chunk_size: kernel_chunk_size(config, max_shared_memory),
        ..*config
    };
    if tensor_core_fits(&run, max_shared_memory) {
        Some((kernel_for(&run)?, segment_state_kernel_for(&run)?))
    } else {
        Some((
            chunked_kernel_for(&run)?,
            chunked_segment_state_kernel_for(&run)?,
        ))
    }
}

/// The kernels (PTX symbols, in launch order) that [`forward`] runs for `config` on a GPU with
/// `max_shared_memory` bytes of opt-in shared memory per block (`Gpu::max_shared_memory_optin`),
/// given 16-byte aligned views (see [`kernel_for`]); empty when the config is invalid. On a GPU
/// whose [`Gpu::wgmma_kernels`] is on, a kernel with a `wgmma` twin runs as that twin
/// ([`Kernel::wgmma_twin`]; [`dispatch_paths_on_gpu`] names it).
pub fn dispatch_paths(config: &ForwardConfig, max_shared_memory: usize) -> Vec<&'static str> {
    if validate_config(config).is_err() {
        return Vec::new();
    }
    run_kernels(config, max_shared_memory)
        .map(|(k, _)| vec![k.symbol()])
        .unwrap_or_default()
}

/// [`dispatch_paths_with_workspace`] for `gpu` as it stands (its SM count, shared-memory limit,
/// [`Gpu::wgmma_kernels`] and [`Gpu::warp_specialized_kernels`]), for a call from a zero state with
/// aligned views.
pub fn dispatch_paths_on_gpu(gpu: &Gpu, config: &ForwardConfig) -> Vec<&'static str> {
    let mut paths = gpu.preferred_symbols(dispatch_paths_with_workspace(
        config,
        gpu.sm_count(),
        gpu.max_shared_memory_optin(),
    ));
    let run = kernel_config(gpu, config);
    let forward = tensor_core_kernels(&run).map(|(tc, _)| gpu.preferred(tc).symbol());
    if let (Some(ws), Some(last)) = (warp_specialized_kernel(gpu, &run), paths.last_mut()) {
        if Some(*last) == forward {
            *last = ws.symbol();
            // A split call runs the warp-specialized segment-state pass first.
            let split = tensor_core_kernels(&run).map(|(_, ss)| gpu.preferred(ss).symbol());
            let ws_split = Kernel::segment_state_warp_specialized(run.dtype, fixed_geometry(&run));
            if let (Some(first), Some(ws_split)) = (paths.first_mut(), ws_split) {
                if Some(*first) == split {
                    *first = ws_split.symbol();
                }
            }
        }
    }
    paths
}

/// The warp-specialized forward ([`Kernel::forward_warp_specialized`]) where it runs `config` on
/// `gpu`: compute capability 9.0 with [`Gpu::warp_specialized_kernels`] on, its dtype and
/// geometry, the half-split rotation, the gated output, an even number of heads per q/k group,
/// fewer than 2^32 token-heads B·S·H (its per-chunk addresses index tokens in 32-bit
/// arithmetic), its shared memory within the GPU's opt-in limit (the call's own conditions,
/// initial state and alignment, are [`warp_specialized_plan`]'s).
fn warp_specialized_kernel(gpu: &Gpu, config: &ForwardConfig) -> Option<Kernel> {
    let kernel = Kernel::forward_warp_specialized(config.dtype, fixed_geometry(config))?;
    let shape = WsShape::of(config.dtype);
    let fits = shape.smem as usize <= gpu.max_shared_memory_optin();
    let heads_per_group = config.heads / config.groups.max(1);
    (gpu.warp_specialized_kernels()
        && fits
        && config.rotation == Rotation::HalfSplit
        && config.mode == OutputMode::Gated
        && heads_per_group.is_multiple_of(shape.heads_per_block)
        && token_heads_fit_u32(config)
        && config.seq_len >= config.chunk_size)
        .then_some(kernel)
}

/// The warp-specialized forward's own segment-state pass and its launch shape (the forward's
/// `ws_cfg` with grid `(H/2, B, K − 1)`: segment K − 1's end state is never handed off) for a
/// call of `config` in `segments` segments, where its fixed geometry has one.
fn warp_specialized_segment_state(
    config: &ForwardConfig,
    ws_cfg: LaunchConfig,
    segments: usize,
) -> Option<(Kernel, LaunchConfig)> {
    let kernel = Kernel::segment_state_warp_specialized(config.dtype, fixed_geometry(config))?;
    let (x, y, _) = ws_cfg.grid_dim;
    Some((
        kernel,
        LaunchConfig {
            grid_dim: (x, y, segments.saturating_sub(1).max(1) as u32),
            ..ws_cfg
        },
    ))
}

/// Whether B·S·H token-heads are indexable in 32 bits (the warp-specialized forward's addressing).
fn token_heads_fit_u32(config: &ForwardConfig) -> bool {
    [config.batch, config.seq_len, config.heads]
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .is_some_and(|n| n <= u32::MAX as usize)
}

/// The warp-specialized forward and its launch shape (grid `(H/2, B, K)`, three warpgroups) for
/// the tensor-core forward `kernel` of a call (`params`, `segments` segments), where
/// [`warp_specialized_kernel`] covers it and the call has no initial state, and q, k, v, the angle
/// logits, the output and the final k̂ and v are 16-byte aligned, the final and hand-off SSM
/// states and the state checkpoints 8-byte aligned. With checkpoints in `params`, its
/// instantiation that writes them.
fn warp_specialized_plan(
    gpu: &Gpu,
    config: &ForwardConfig,
    params: &ForwardParams,
    kernel: Kernel,
    segments: usize,
) -> Option<(Kernel, LaunchConfig)> {
    let plain = warp_specialized_kernel(gpu, config)?;
    let shape = WsShape::of(config.dtype);
    let ws = match params.ckpt_state {
        0 => plain,
        _ => Kernel::forward_warp_specialized_ckpt(config.dtype, fixed_geometry(config))?,
    };
    let tensor_core = tensor_core_kernels(config).is_some_and(|(tc, _)| tc == kernel);
    let aligned = [
        params.q,
        params.k,
        params.v,
        params.angles,
        params.out,
        params.final_k,
        params.final_v,
    ]
    .iter()
    .all(|p| p.is_multiple_of(16))
        && [params.final_ssm, params.seg_state, params.ckpt_state]
            .iter()
            .all(|p| p.is_multiple_of(8));
    (tensor_core && aligned && params.init_ssm == 0).then_some((
        ws,
        LaunchConfig {
            grid_dim: (
                (config.heads / shape.heads_per_block) as u32,
                config.batch as u32,
                segments as u32,
            ),
            block_dim: (shape.threads, 1, 1),
            shared_mem_bytes: shape.smem,
        },
    ))
}

/// The launch shape of a dtype's warp-specialized forward: the bf16 kernel runs two heads per
/// block on three warpgroups, the f32 kernel (binary16 split tiles, twice the bytes) one head on
/// two.
#[derive(Clone, Copy)]
struct WsShape {
    heads_per_block: usize,
    threads: u32,
    smem: u32,
}

impl WsShape {
    fn of(dtype: Dtype) -> Self {
        match dtype {
            Dtype::Bf16 => WsShape {
                heads_per_block: 2,
                threads: FORWARD_WS_THREADS,
                smem: forward_ws_smem::BYTES,
            },
            Dtype::F32 => WsShape {
                heads_per_block: 1,
                threads: FORWARD_WS_F32_THREADS,
                smem: forward_ws_f32_smem::BYTES,
            },
        }
    }
}

/// Most segments one (head, batch) row is split into.
pub const MAX_SEGMENTS: usize = 64;

/// Fewest chunks per segment: shorter segments would spend more on the hand-off than they gain.
pub const MIN_SEGMENT_CHUNKS: usize = 2;

/// Blocks of the forward that one SM holds at once: 2 for the tensor-core kernel (109 KB of
/// shared memory, 128 threads), 1 for `chunked_forward`'s (up to 227 KB, 256 threads). Decided by
/// the config alone: a call that falls back from the tensor-core kernel (unaligned views) keeps the
/// same segment count, which is still correct (its segments then take two waves).
pub fn blocks_per_sm(config: &ForwardConfig) -> usize {
    if tensor_core_kernels(config).is_some() {
        2
    } else {
        1
    }
}

/// The batch-walking short-call kernel ([`Kernel::forward_tensor_core_units`]) for a call of
/// `config` from an initial state, where it exists: the tensor-core geometry and dtype, a call
/// shorter than one chunk.
pub(crate) fn units_kernel(config: &ForwardConfig) -> Option<Kernel> {
    (config.seq_len < config.chunk_size)
        .then(|| Kernel::forward_tensor_core_units(config.dtype, fixed_geometry(config)))
        .flatten()
}

/// Batch rows between the units of one block of the batch-walking kernel on a GPU with
/// `sm_count` SMs: one wave of resident blocks ([`blocks_per_sm`] per SM) spread over the heads,
/// at least 1 and at most B (then every block runs one unit).
pub fn unit_stride(config: &ForwardConfig, sm_count: usize) -> usize {
    let resident = blocks_per_sm(config).saturating_mul(sm_count);
    (resident / config.heads.max(1)).clamp(1, config.batch.max(1))
}

/// Turns the launch of `launch_plan`'s short-call tensor-core kernel (`kernel`, `cfg`) of a call
/// from an initial state into the batch-walking kernel's (grid `(H, unit_stride)`, its shared
/// memory, `params.unit_stride` set), where that kernel exists for `config` and its contract
/// holds (16-byte aligned `init_v`, `init_theta`, angle logits, `final_ssm`, `final_k` and
/// `final_v`, its shared memory within the GPU's opt-in limit); else leaves them as they are.
pub(crate) fn walk_batch(
    gpu: &Gpu,
    config: &ForwardConfig,
    params: &mut ForwardParams,
    kernel: &mut Kernel,
    cfg: &mut LaunchConfig,
) {
    let Some(units) = units_kernel(config) else {
        return;
    };
    let short = Kernel::forward_tensor_core_short(config.dtype, fixed_geometry(config));
    let aligned = [
        params.init_v,
        params.init_theta,
        params.angles,
        params.final_ssm,
        params.final_k,
        params.final_v,
    ]
    .iter()
    .all(|p| p.is_multiple_of(16));
    if Some(*kernel) != short
        || params.init_ssm == 0
        || !aligned
        || forward_mma_smem::UNITS_BYTES as usize > gpu.max_shared_memory_optin()
    {
        return;
    }
    let stride = unit_stride(config, gpu.sm_count());
    params.unit_stride = stride as u32;
    *kernel = units;
    cfg.grid_dim.1 = stride as u32;
    cfg.shared_mem_bytes = forward_mma_smem::UNITS_BYTES;
}

/// Segments K per (head, batch) row that [`forward_with_workspace`] uses on a GPU with
/// `sm_count` SMs: 1 (no split) when B·H rows already fill the SMs, else as many as fit one wave
/// (`⌊blocks_per_sm · sm_count / (B·H)⌋`, see [`blocks_per_sm`]), at most [`MAX_SEGMENTS`] and
/// at least [`MIN_SEGMENT_CHUNKS`] chunks each; every segment holds whole chunks and none is
/// empty. 1 for an invalid config.
pub fn sequence_segments(config: &ForwardConfig, sm_count: usize) -> usize {
    if validate_config(config).is_err() {
        return 1;
    }
    let rows = config.batch.saturating_mul(config.heads);
    let chunks = config.seq_len.div_ceil(config.chunk_size);
    let wanted = (blocks_per_sm(config).saturating_mul(sm_count) / rows)
        .min(MAX_SEGMENTS)
        .min(chunks / MIN_SEGMENT_CHUNKS);
    if wanted <= 1 {
        return 1;
    }
    let per = chunks.div_ceil(wanted);
    chunks.div_ceil(per)
}

/// Elements per hand-off slot: state `P·N`, θ `2·Na` words (f64), decay 1.
fn slot_parts(config: &ForwardConfig) -> (usize, usize, usize) {
    (
        config.head_dim.saturating_mul(config.state_dim),
        2 * config.num_angles,
        1,
    )
}

/// f32 elements of the workspace [`forward_with_workspace`] needs for `config` on a GPU with
/// `sm_count` SMs (0 when it does not split: any buffer, even an empty one, will do).
pub fn workspace_len(config: &ForwardConfig, sm_count: usize) -> usize {
    let k = sequence_segments(config, sm_count);
    if k <= 1 {
        return 0;
    }
    let (st, th, dc) = slot_parts(config);
    (k - 1)
        .saturating_mul(config.batch)
        .saturating_mul(config.heads)
        .saturating_mul(st.saturating_add(th).saturating_add(dc))
}

/// The kernels (PTX symbols, in launch order) that [`forward_with_workspace`] runs for `config`
/// on a GPU with `sm_count` SMs and `max_shared_memory` bytes of opt-in shared memory per block
/// (as [`dispatch_paths`]); empty when the config is invalid.
pub fn dispatch_paths_with_workspace(
    config: &ForwardConfig,
    sm_count: usize,
    max_shared_memory: usize,
) -> Vec<&'static str> {
    let single = dispatch_paths(config, max_shared_memory);
    if single.is_empty() || sequence_segments(config, sm_count) <= 1 {
        return single;
    }
    match run_kernels(config, max_shared_memory) {
        Some((_, k)) => vec![k.symbol(), Kernel::SegmentCombineF32.symbol(), single[0]],
        None => Vec::new(),
    }
}

/// The chunk length the forward kernels run for `config` on a GPU with `max_shared_memory` bytes
/// of opt-in shared memory per block: `config.chunk_size` when its kernel fits, else the largest
/// divisor of it whose `chunked_forward` tiles ([`ForwardConfig::shared_memory_bytes`]) fit, and
/// `config.chunk_size` again when not even a chunk of one token fits (the launch then fails with
/// [`Error::SharedMemory`]). The chunked decomposition is exact for any chunk length, so this
/// changes only rounding; a divisor keeps every chunk boundary of `config` a chunk boundary of
/// the run, so the split forward's segments (whole chunks of `config`) stay whole chunks.
pub fn kernel_chunk_size(config: &ForwardConfig, max_shared_memory: usize) -> usize {
    let c = config.chunk_size;
    let fits = |chunk: usize| {
        let run = ForwardConfig {
            chunk_size: chunk,
            ..*config
        };
        tensor_core_fits(&run, max_shared_memory)
            || run.shared_memory_bytes() <= max_shared_memory as u64
    };
    if c == 0 || fits(c) {
        return c;
    }
    let mut divisors: Vec<usize> = (1..)
        .take_while(|d| d * d <= c)
        .filter(|d| c.is_multiple_of(*d))
        .flat_map(|d| [d, c / d])
        .collect();
    divisors.sort_unstable_by(|a, b| b.cmp(a));
    divisors.into_iter().find(|&d| fits(d)).unwrap_or(c)
}

/// `config` with the chunk length its kernels run on `gpu` ([`kernel_chunk_size`]).
pub(crate) fn kernel_config(gpu: &Gpu, config: &ForwardConfig) -> ForwardConfig {
    ForwardConfig {
        chunk_size: kernel_chunk_size(config, gpu.max_shared_memory_optin()),
        ..*config
    }
}

/// Dynamic shared memory of the `chunked_forward` kernel for `config` on `gpu`, and whether its
/// staging region (raw q, k, v of the next chunk) fits beside the kernel's own regions (without
/// it the kernel reads those inputs from global memory directly).
pub(crate) fn chunked_shared_memory(gpu: &Gpu, config: &ForwardConfig) -> Result<(u32, bool)> {
    let chunked = chunked_kernel_for(config)
        .ok_or_else(|| Error::invalid("rank", config.rank, "must be 1, 2, 4 or 8"))?;
    let base_smem = config.shared_memory_bytes();
    let stage = forward_stage_bytes(
        config.rank as u64,
        config.state_dim as u64,
        config.head_dim as u64,
        config.chunk_size as u64,
        config.dtype.bytes() as u64,
    );
    let with_stage = base_smem.saturating_add(stage);
    let staged = with_stage <= gpu.max_shared_memory_optin() as u64;
    let smem = if staged { with_stage } else { base_smem };
    let smem = u32::try_from(smem).map_err(|_| Error::SharedMemory {
        kernel: chunked.symbol(),
        needed: usize::try_from(smem).unwrap_or(usize::MAX),
        max: gpu.max_shared_memory_optin(),
    })?;
    Ok((smem, staged))
}

/// The forward kernel, its segment-state pass and the launch shape for a call of `config` in
/// `segments` segments whose pointers are in `params`; `smem` from [`chunked_shared_memory`].
/// The tensor-core kernel runs where [`tensor_core_kernels`] has one, q, k, v, z and the initial
/// k̂ are 16-byte aligned (its `cp.async` row copies), the SSM state tiles (initial, final,
/// hand-off) 8-byte aligned (it moves them in column pairs), and the GPU's opt-in limit holds its
/// shared memory (not on sm_86 and sm_89: 99 KB).
pub(crate) fn launch_plan(
    gpu: &Gpu,
    config: &ForwardConfig,
    params: &ForwardParams,
    segments: usize,
    smem: u32,
) -> Result<(Kernel, Kernel, LaunchConfig)> {
    let unsupported = || Error::invalid("rank", config.rank, "must be 1, 2, 4 or 8");
    let chunked = chunked_kernel_for(config).ok_or_else(unsupported)?;
    let chunked_segment_state = chunked_segment_state_kernel_for(config).ok_or_else(unsupported)?;
    let cfg = LaunchConfig {
        grid_dim: (config.heads as u32, (config.batch * segments) as u32, 1),
        block_dim: (FORWARD_THREADS, 1, 1),
        shared_mem_bytes: smem,
    };
    let aligned = [params.q, params.k, params.v, params.z, params.init_k]
        .iter()
        .all(|p| p.is_multiple_of(16))
        && [params.final_ssm, params.init_ssm, params.seg_state]
            .iter()
            .all(|p| p.is_multiple_of(8));
    let fits = tensor_core_fits(config, gpu.max_shared_memory_optin());
    Ok(match tensor_core_kernels(config) {
        Some((tc, tc_segment_state)) if aligned && fits => (
            tc,
            tc_segment_state,
            LaunchConfig {
                block_dim: (FORWARD_MMA_THREADS, 1, 1),
                shared_mem_bytes: tensor_core_shared_memory(config.dtype),
                ..cfg
            },
        ),
        _ => (chunked, chunked_segment_state, cfg),
    })
}

/// The inputs of one call, as device views (`T`: the activation type). Views of a
/// [`CudaSlice`] come from `slice.as_view()` or `slice.slice(range)`.
pub struct ForwardInputs<'a, T> {
    /// q (B,S,R,G,N).
    pub q: CudaView<'a, T>,
    /// k (B,S,R,G,N).
    pub k: CudaView<'a, T>,
    /// v (B,S,H,P).
    pub v: CudaView<'a, T>,
    /// z (B,S,H,P), iff `config.has_z`.
    pub z: Option<CudaView<'a, T>>,
    /// Raw trap logits (B,H,S).
    pub trap: CudaView<'a, T>,
    /// Δ (B,H,S).
    pub dt: CudaView<'a, f32>,
    /// a = A·Δ (B,H,S).
    pub adt: CudaView<'a, f32>,
    /// Raw angle logits (B,S,H,Na).
    pub angles: CudaView<'a, f32>,
    /// q bias (H,R,N).
    pub q_bias: CudaView<'a, f32>,
    /// k bias (H,R,N).
    pub k_bias: CudaView<'a, f32>,
    /// v up-projection (H,R,P).
    pub mimo_v: CudaView<'a, f32>,
    /// z up-projection (H,R,P), iff `config.has_z`.
    pub mimo_z: Option<CudaView<'a, f32>>,
    /// Rank down-projection (H,R,P), iff the mode is not prereduce.
    pub mimo_o: Option<CudaView<'a, f32>>,
    /// Skip weight (H), iff `config.has_d`.
    pub d: Option<CudaView<'a, f32>>,
    /// RMSNorm weight (H,P), fused-norm mode only (absent: 1).
    pub norm_weight: Option<CudaView<'a, f32>>,
}

/// Caller-provided final-state buffers (decode hand-off layouts, see the module docs).
pub struct FinalStatesMut<'a, T> {
    /// θ (B,H,Na), f32 in [0, 2π).
    pub theta: CudaViewMut<'a, f32>,
    /// SSM state (B,H,P,N), f32.
    pub ssm: CudaViewMut<'a, f32>,
    /// k̂ of the last token (B,R,H,N).
    pub k: CudaViewMut<'a, T>,
    /// Raw v of the last token (B,H,P).
    pub v: CudaViewMut<'a, T>,
}

/// The state a forward starts from instead of zero ([`forward_from_states`]), in the final-state
/// layouts: e.g. the final states of a forward over the sequence's earlier tokens, or a decode
/// state's buffers.
pub struct InitialStates<'a, T> {
    /// θ (B,H,Na), f32 (any real; a final state's is in [0, 2π)).
    pub theta: CudaView<'a, f32>,
    /// SSM state (B,H,P,N), f32.
    pub ssm: CudaView<'a, f32>,
    /// Rotated, biased k̂ of the token before the first (B,R,H,N).
    pub k: CudaView<'a, T>,
    /// Raw v of the token before the first (B,H,P).
    pub v: CudaView<'a, T>,
}

/// Final states allocated by [`forward_alloc`].
pub struct FinalStates<T> {
    /// θ (B,H,Na), f32 in [0, 2π).
    pub theta: CudaSlice<f32>,
    /// SSM state (B,H,P,N), f32.
    pub ssm: CudaSlice<f32>,
    /// k̂ of the last token (B,R,H,N).
    pub k: CudaSlice<T>,
    /// Raw v of the last token (B,H,P).
    pub v: CudaSlice<T>,
}

impl<'a, T> ForwardInputs<'a, T> {
    /// The lengths of the given buffers (final states and out as given separately).
    fn lens(&self, out: usize, states: Option<StateLens>) -> ForwardLens {
        ForwardLens {
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
            out,
            states,
        }
    }
}

/// Launch argument: the params struct by value.
#[repr(transparent)]
pub(crate) struct ForwardArgs(pub(crate) ForwardParams);

// SAFETY: `ForwardParams` is `#[repr(C)]` plain data (u64, u32, f32 fields), the layout the
// kernel declares for its single parameter.
unsafe impl DeviceRepr for ForwardArgs {}

/// Launch argument of the combine pass.
#[repr(transparent)]
struct CombineArgs(SegmentCombineParams);

// SAFETY: `SegmentCombineParams` is `#[repr(C)]` plain data (u64, u32 fields), the layout the
// combine kernel declares for its single parameter.
unsafe impl DeviceRepr for CombineArgs {}

/// Launches the combine pass of a split run: the `(B, H, K − 1, …)` hand-off slots of `params`
/// (written by a segment-state pass of `segments` segments) become the states and θ entering
/// segments 1 … K − 1. Shared by the split forward and the backward's split checkpoint sweep.
pub(crate) fn launch_segment_combine(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    params: &ForwardParams,
    segments: usize,
) -> Result<()> {
    let combine = CombineArgs(SegmentCombineParams {
        seg_state: params.seg_state,
        seg_theta: params.seg_theta,
        seg_decay: params.seg_decay,
        heads: config.heads as u32,
        segments: segments as u32,
        n: config.state_dim as u32,
        p: config.head_dim as u32,
        na: config.num_angles as u32,
        rotation: config.rotation.code(),
    });
    let cfg = LaunchConfig {
        grid_dim: (config.heads as u32, config.batch as u32, 1),
        block_dim: (SEGMENT_COMBINE_THREADS, 1, 1),
        shared_mem_bytes: segment_combine_smem_bytes(segments as u32, config.num_angles as u32),
    };
    let mut launch = gpu.launch(stream, Kernel::SegmentCombineF32)?;
    launch.arg(&combine);
    // SAFETY: one by-value `SegmentCombineParams`, the kernel's parameter list; its pointers are
    // the caller's (B,H,K−1,…) hand-off regions inside a checked workspace.
    unsafe { launch.run(cfg) }?;
    Ok(())
}

/// A device address range `[start, end)` with the argument it belongs to.
pub(crate) type Range = (u64, u64, &'static str);

/// Fails naming the first output range that overlaps another (differently named) range.
pub(crate) fn overlap_check(outputs: &[Range], all: &[Range]) -> Result<()> {
    for &(s0, e0, name0) in outputs {
        for &(s1, e1, name1) in all {
            if name0 != name1 && s0 < e1 && s1 < e0 {
                return Err(Error::invalid(
                    name0,
                    format!("device range {s0:#x}..{e0:#x}"),
                    format!("must not overlap `{name1}` ({s1:#x}..{e1:#x})"),
                ));
            }
        }
    }
    Ok(())
}

/// Validates everything, then enqueues the forward of `config` on `stream`: `out` receives the
/// output, `states` (when given) the final states. Never allocates and never synchronizes.
///
/// Errors (before any launch): [`Error::InvalidArgument`] naming the argument, its value and the
/// rule (shapes, dtype, options, overlapping outputs); [`Error::SharedMemory`] when not even a
/// one-token chunk fits the device's shared memory ([`kernel_chunk_size`]); driver errors from
/// the launch.
pub fn forward<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    out: &mut CudaViewMut<'_, T>,
    states: Option<&mut FinalStatesMut<'_, T>>,
) -> Result<()> {
    forward_impl(gpu, stream, config, inputs, out, states, None, None, None).map(|_| ())
}

/// [`forward`] with the sequence split into [`sequence_segments`] segments when B·H leaves SMs
/// idle (three launches, see the module docs; one launch, as [`forward`], otherwise). `workspace`
/// holds the segment hand-off states: at least [`workspace_len`]`(config, gpu.sm_count())` f32
/// elements, not overlapping any other buffer; its contents need no initialization and are
/// scratch afterwards. Never allocates and never synchronizes.
///
/// Errors: those of [`forward`], and [`Error::InvalidArgument`] naming `workspace` when it is too
/// small or overlaps another buffer.
pub fn forward_with_workspace<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    out: &mut CudaViewMut<'_, T>,
    states: Option<&mut FinalStatesMut<'_, T>>,
    workspace: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    forward_impl(
        gpu,
        stream,
        config,
        inputs,
        out,
        states,
        Some(workspace),
        None,
        None,
    )
    .map(|_| ())
}

/// [`forward`] (or, with a `workspace`, [`forward_with_workspace`]) continuing a sequence from
/// `initial` instead of a zero state: the outputs and final states are those of a forward over
/// the earlier tokens and these together (chunked prefill in pieces, or a prompt appended to a
/// decode state). The first token's trapezoidal term uses `initial.k` and `initial.v`. Never
/// allocates and never synchronizes.
///
/// Errors: those of [`forward`] and [`forward_with_workspace`], and [`Error::InvalidArgument`]
/// naming `initial.theta`, `initial.ssm`, `initial.k` or `initial.v` for a wrong length, or an
/// output that overlaps one of them.
#[allow(clippy::too_many_arguments)]
pub fn forward_from_states<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    initial: &InitialStates<'_, T>,
    inputs: &ForwardInputs<'_, T>,
    out: &mut CudaViewMut<'_, T>,
    states: Option<&mut FinalStatesMut<'_, T>>,
    workspace: Option<&mut CudaViewMut<'_, f32>>,
) -> Result<()> {
    forward_impl(
        gpu,
        stream,
        config,
        inputs,
        out,
        states,
        workspace,
        Some(initial),
        None,
    )
    .map(|_| ())
}

/// Where a forward also writes the tensor-core backward's checkpoints
/// (`backward::forward_for_backward`): the kernel that does, and the two regions of the backward
/// workspace (already validated and overlap-checked by the caller).
#[derive(Clone, Copy)]
pub(crate) struct CheckpointTarget {
    /// The tensor-core forward with checkpoints for the call's dtype and geometry.
    pub kernel: Kernel,
    /// `(B,H,⌈S/16⌉,P,N)` bf16, 16-byte aligned.
    pub state: u64,
    /// `(B,H,⌈S/16⌉,Na,2)` f32.
    pub theta: u64,
    /// The backward workspace's device range, an output of this call.
    pub range: Range,
}

/// The forward of every public entry point. With `ckpt`, a call the tensor-core forward runs
/// takes its checkpoint-writing instantiation instead; returns whether it did (another kernel
/// writes no checkpoints).
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_impl<T: Activation>(
    gpu: &Gpu,
    stream: &CudaStream,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    out: &mut CudaViewMut<'_, T>,
    states: Option<&mut FinalStatesMut<'_, T>>,
    workspace: Option<&mut CudaViewMut<'_, f32>>,
    initial: Option<&InitialStates<'_, T>>,
    ckpt: Option<CheckpointTarget>,
) -> Result<bool> {
    if T::DTYPE != config.dtype {
        return Err(Error::invalid(
            "dtype",
            format!("{:?}", config.dtype),
            format!("must match the buffers' element type ({:?})", T::DTYPE),
        ));
    }
    let state_lens = states.as_ref().map(|s| StateLens {
        theta: s.theta.len(),
        ssm: s.ssm.len(),
        k: s.k.len(),
        v: s.v.len(),
    });
    validate(config, &inputs.lens(out.len(), state_lens))?;
    if let Some(init) = initial {
        let lens = StateLens {
            theta: init.theta.len(),
            ssm: init.ssm.len(),
            k: init.k.len(),
            v: init.v.len(),
        };
        validate_initial(config, &lens)?;
    }
    let run = kernel_config(gpu, config);
    let (smem, staged) = chunked_shared_memory(gpu, &run)?;

    let mut guards: Vec<SyncOnDrop<'_>> = Vec::with_capacity(24);
    let mut inputs_ranges: Vec<Range> = Vec::with_capacity(20);
    let esz = std::mem::size_of::<T>() as u64;
    macro_rules! ptr {
        ($view:expr, $name:literal, $size:expr) => {{
            let view = $view;
            let (p, g) = view.device_ptr(stream);
            guards.push(g);
            inputs_ranges.push((p, p + view.len() as u64 * $size, $name));
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
    let params = ForwardParams {
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
        ..run.scalar_params(staged)
    };
    let mut params = params;
    if let Some(init) = initial {
        params.init_theta = ptr!(&init.theta, "initial.theta", 4);
        params.init_ssm = ptr!(&init.ssm, "initial.ssm", 4);
        params.init_k = ptr!(&init.k, "initial.k", esz);
        params.init_v = ptr!(&init.v, "initial.v", esz);
    }
    let mut outputs: Vec<Range> = Vec::with_capacity(5);
    let out_len = out.len() as u64;
    let (p_out, g_out) = out.device_ptr_mut(stream);
    outputs.push((p_out, p_out + out_len * esz, "out"));
    params.out = p_out;
    let mut out_guards = vec![g_out];
    if let Some(st) = states {
        let lens = (
            st.theta.len() as u64,
            st.ssm.len() as u64,
            st.k.len() as u64,
            st.v.len() as u64,
        );
        let (p, g) = st.theta.device_ptr_mut(stream);
        outputs.push((p, p + 4 * lens.0, "states.theta"));
        params.final_theta = p;
        out_guards.push(g);
        let (p, g) = st.ssm.device_ptr_mut(stream);
        outputs.push((p, p + 4 * lens.1, "states.ssm"));
        params.final_ssm = p;
        out_guards.push(g);
        let (p, g) = st.k.device_ptr_mut(stream);
        outputs.push((p, p + esz * lens.2, "states.k"));
        params.final_k = p;
        out_guards.push(g);
        let (p, g) = st.v.device_ptr_mut(stream);
        outputs.push((p, p + esz * lens.3, "states.v"));
        params.final_v = p;
        out_guards.push(g);
    }
    let segments = match workspace {
        Some(_) => sequence_segments(config, gpu.sm_count()),
        None => 1,
    };
    if let (Some(ws), true) = (workspace, segments > 1) {
        let need = workspace_len(config, gpu.sm_count());
        if ws.len() < need {
            return Err(Error::invalid(
                "workspace",
                format!("{} elements", ws.len()),
                format!("must hold at least workspace_len = {need} f32 elements"),
            ));
        }
        let (p, g) = ws.device_ptr_mut(stream);
        outputs.push((p, p + 4 * need as u64, "workspace"));
        out_guards.push(g);
        let slots = (segments - 1) * config.batch * config.heads;
        let (st, th, _) = slot_parts(config);
        params.segments = segments as u32;
        // Segments hold whole chunks of `config`, each `C / C_run` chunks of the run.
        let seg_chunks = config
            .seq_len
            .div_ceil(config.chunk_size)
            .div_ceil(segments);
        params.seg_chunks = (seg_chunks * (config.chunk_size / run.chunk_size)) as u32;
        params.seg_state = p;
        params.seg_theta = p + 4 * (slots * st) as u64;
        params.seg_decay = p + 4 * (slots * (st + th)) as u64;
    }
    if let Some(c) = ckpt {
        outputs.push(c.range);
    }
    let all: Vec<Range> = inputs_ranges.iter().chain(&outputs).copied().collect();
    overlap_check(&outputs, &all)?;

    let (kernel, segment_state, cfg) = launch_plan(gpu, &run, &params, segments, smem)?;
    let tensor_core = tensor_core_kernels(&run).is_some_and(|(tc, _)| tc == kernel);
    let ckpt_kernel = match ckpt {
        Some(c) if tensor_core && initial.is_none() => {
            params.ckpt_state = c.state;
            params.ckpt_theta = c.theta;
            Some(c.kernel)
        }
        _ => None,
    };
    let wrote_checkpoints = ckpt_kernel.is_some();
    // The warp-specialized forward where it covers the call, with or without checkpoints: a
    // training forward and an inference forward of the same call run the same products.
    let ws_plan = warp_specialized_plan(gpu, &run, &params, kernel, segments);
    let (segment_state, segment_state_cfg) = ws_plan
        .and_then(|(_, ws_cfg)| warp_specialized_segment_state(&run, ws_cfg, segments))
        .unwrap_or((gpu.preferred(segment_state), cfg));
    let (forward_kernel, forward_cfg) =
        ws_plan.unwrap_or((gpu.preferred(ckpt_kernel.unwrap_or(kernel)), cfg));
    let args = ForwardArgs(params);
    let result = (|| {
        if segments > 1 {
            let mut launch = gpu.launch(stream, segment_state)?;
            launch.arg(&args);
            // SAFETY: as for the forward launch below; the segment-state pass takes the same
            // parameters and writes only hand-off slots 0..K−1 of the checked workspace.
            unsafe { launch.run(segment_state_cfg) }?;
            launch_segment_combine(gpu, stream, config, &params, segments)?;
        }
        let mut launch = gpu.launch(stream, forward_kernel)?;
        launch.arg(&args);
        // SAFETY: one by-value `ForwardParams` is the kernel's parameter list; every pointer was
        // checked against its documented shape by `validate`, outputs (and the workspace) do not
        // overlap anything, the tensor-core kernel gets 16-byte aligned q, k, v and z, and the
        // guards keep the buffers' event tracking alive until the launch is enqueued; with
        // checkpoints, their regions lie in the caller's checked backward workspace.
        unsafe { launch.run(forward_cfg) }
    })();
    drop(out_guards);
    drop(guards);
    result.map(|()| wrote_checkpoints)
}

/// [`forward_with_workspace`] with the output (and, with `with_states`, the final states) and the
/// workspace allocated on `stream`. Allocates; never synchronizes.
pub fn forward_alloc<T: Activation>(
    gpu: &Gpu,
    stream: &std::sync::Arc<CudaStream>,
    config: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    with_states: bool,
) -> Result<(CudaSlice<T>, Option<FinalStates<T>>)> {
    validate_config(config)?;
    let want = config
        .expected_lens(with_states)
        .ok_or_else(|| Error::invalid("seq_len", config.seq_len, "tensor sizes overflow usize"))?;
    let alloc_err = Error::driver("allocating forward outputs");
    let mut out = stream.alloc_zeros::<T>(want.out).map_err(alloc_err)?;
    let mut states = match want.states {
        Some(st) => Some(FinalStates {
            theta: stream
                .alloc_zeros::<f32>(st.theta)
                .map_err(Error::driver("allocating final states"))?,
            ssm: stream
                .alloc_zeros::<f32>(st.ssm)
                .map_err(Error::driver("allocating final states"))?,
            k: stream
                .alloc_zeros::<T>(st.k)
                .map_err(Error::driver("allocating final states"))?,
            v: stream
                .alloc_zeros::<T>(st.v)
                .map_err(Error::driver("allocating final states"))?,
        }),
        None => None,
    };
    {
        let mut out_view = out.as_view_mut();
        let mut views = states.as_mut().map(|s| FinalStatesMut {
            theta: s.theta.as_view_mut(),
            ssm: s.ssm.as_view_mut(),
            k: s.k.as_view_mut(),
            v: s.v.as_view_mut(),
        });
        let ws_len = workspace_len(config, gpu.sm_count());
        let mut workspace = stream
            .alloc_zeros::<f32>(ws_len.max(1))
            .map_err(Error::driver("allocating the forward workspace"))?;
        forward_with_workspace(
            gpu,
            stream,
            config,
            inputs,
            &mut out_view,
            views.as_mut(),
            &mut workspace.as_view_mut(),
        )?;
    }
    Ok((out, states))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(batch: usize, seq_len: usize, heads: usize) -> ForwardConfig {
        ForwardConfig {
            batch,
            seq_len,
            rank: 4,
            groups: 1,
            heads,
            state_dim: 128,
            head_dim: 64,
            num_angles: 32,
            chunk_size: 16,
            dtype: Dtype::Bf16,
            rotation: Rotation::HalfSplit,
            mode: OutputMode::Gated,
            has_z: true,
            has_d: true,
            norm_eps: 1e-5,
        }
    }

    /// The warp-specialized forward's 32-bit token-head indices: B·S·H up to 2^32 − 1 (whose
    /// largest index, 2^32 − 2, still fits) is covered, 2^32 and beyond is not.
    #[test]
    fn token_head_bound_is_exactly_the_u32_range() {
        // 3·5·17·257·65537 = 2^32 − 1.
        assert!(token_heads_fit_u32(&config(3 * 5, 17 * 257, 65537)));
        assert!(!token_heads_fit_u32(&config(1 << 8, 1 << 18, 1 << 6)));
        assert!(!token_heads_fit_u32(&config(65535, usize::MAX / 2, 64)));
        assert!(token_heads_fit_u32(&config(8, 8192, 64)));
    }
}
