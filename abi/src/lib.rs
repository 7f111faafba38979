//! The host↔kernel contract of mamba3-rs, compiled both for the host and for nvptx64.
//!
//! Parameter structs are `#[repr(C)]` and passed to kernels by value; device pointers are `u64`
//! (0 = absent optional tensor), sizes are in elements.
#![no_std]

/// Output mode of the Mamba-3 MIMO forward and decode (spec §4.1).
pub mod output_mode {
    /// `Σ_r y_r ⊙ gate_r ⊙ mimo_o_r` → (…, H, P).
    pub const GATED: u32 = 0;
    /// Head-wise RMSNorm of each rank over P, then as [`GATED`] with the norm weight.
    pub const FUSED_NORM: u32 = 1;
    /// No contraction: `y_r ⊙ gate_r` → (…, R, H, P).
    pub const PREREDUCE: u32 = 2;
}

/// Rotary convention (spec §3).
pub mod rotation {
    /// Pair `(n, n + N/2)` rotated by `θ_n`, `n < Na`.
    pub const HALF_SPLIT: u32 = 0;
    /// Pair `(2j, 2j + 1)` rotated by `θ_j`, `j < Na`.
    pub const PAIRWISE: u32 = 1;
}

/// Warps per block of the decode kernel.
pub const DECODE_WARPS: u32 = 4;

/// Parameters of one decode call over `tokens` consecutive tokens (spec §2.1 step by step).
///
/// Layouts (row-major; `X` = the input dtype, bf16 or f32):
/// q, k `(B,T,R,G,N)` X; v, z `(B,T,H,P)` X; trap `(B,H,T)` X; dt, adt `(B,H,T)` f32;
/// angles `(B,T,H,Na)` f32 raw logits; q_bias, k_bias `(H,R,N)`, mimo_v/z/o `(H,R,P)`, d `(H)`,
/// norm_weight `(H,P)` f32. State: theta `(B,H,Na)` f32 in [0, 2π); ssm `(B,H,P,N)` f32;
/// k_state `(B,R,H,N)` X (rotated, biased); v_state `(B,H,P)` X (raw). Output `(B,T,H,P)` X, or
/// `(B,T,R,H,P)` in prereduce mode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecodeParams {
    /// q `(B,T,R,G,N)`.
    pub q: u64,
    /// k `(B,T,R,G,N)`.
    pub k: u64,
    /// v `(B,T,H,P)`.
    pub v: u64,
    /// z `(B,T,H,P)` or 0.
    pub z: u64,
    /// Raw trap logits `(B,H,T)`.
    pub trap: u64,
    /// Step sizes `(B,H,T)`, f32.
    pub dt: u64,
    /// Log decays `(B,H,T)`, f32.
    pub adt: u64,
    /// Raw angle logits `(B,T,H,Na)`, f32.
    pub angles: u64,
    /// `(H,R,N)` f32.
    pub q_bias: u64,
    /// `(H,R,N)` f32.
    pub k_bias: u64,
    /// `(H,R,P)` f32.
    pub mimo_v: u64,
    /// `(H,R,P)` f32 or 0.
    pub mimo_z: u64,
    /// `(H,R,P)` f32, or 0 in prereduce mode.
    pub mimo_o: u64,
    /// `(H)` f32 or 0.
    pub d: u64,
    /// `(H,P)` f32 or 0 (fused-norm mode only).
    pub norm_weight: u64,
    /// `(B,H,Na)` f32, read and written.
    pub theta: u64,
    /// `(B,H,P,N)` f32, read and written.
    pub ssm: u64,
    /// `(B,R,H,N)` X, read and written.
    pub k_state: u64,
    /// `(B,H,P)` X, read and written.
    pub v_state: u64,
    /// Output, see the struct docs.
    pub out: u64,
    /// Batch rows B.
    pub batch: u32,
    /// Tokens T in this call.
    pub tokens: u32,
    /// Value heads H.
    pub heads: u32,
    /// q/k groups G.
    pub groups: u32,
    /// State size N.
    pub n: u32,
    /// Head dim P.
    pub p: u32,
    /// Rotary angles Na.
    pub na: u32,
    /// One of [`output_mode`].
    pub mode: u32,
    /// One of [`rotation`].
    pub rotation: u32,
    /// RMSNorm epsilon (fused-norm mode).
    pub norm_eps: f32,
}

/// Rounds a float count up to a multiple of 4 (16-byte alignment of each shared region).
pub const fn align4(x: u32) -> u32 {
    x.div_ceil(4) * 4
}

/// Row stride of the decode kernel's shared state tile: `N + 4` floats when `N` is a multiple of 4,
/// so that lane-per-row `ld.shared.v4` accesses of a warp fall in distinct banks and stay 16-byte
/// aligned; `N` otherwise (scalar accesses).
pub const fn decode_state_stride(n: u32) -> u32 {
    if n.is_multiple_of(4) {
        n + 4
    } else {
        n
    }
}

/// Column splits of the decode state update: a warp owns 32 rows (one per lane) of one split, and
/// the splits of `P.div_ceil(32)` row sets fill the block's warps.
pub const fn decode_column_splits(p: u32) -> u32 {
    let row_sets = p.div_ceil(32);
    if row_sets >= DECODE_WARPS {
        1
    } else {
        DECODE_WARPS / row_sets
    }
}

/// Shared-memory regions of the decode kernel, offsets in f32 elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeSmem {
    /// State tile `(P,N)`, rows [`decode_state_stride`] floats apart.
    pub state: u32,
    /// Rotated q of the current token `(R,N)`.
    pub q_rot: u32,
    /// Rotated k, two buffers `(2,R,N)`: current and previous token alternate.
    pub k_rot: u32,
    /// Raw v, two buffers `(2,P)`: current and previous token alternate.
    pub v: u32,
    /// z of the current token `(P)`.
    pub z: u32,
    /// Per-rank outputs `(R,P)`.
    pub y: u32,
    /// Partial read-outs of the column splits `(splits,R,P)`.
    pub y_part: u32,
    /// Angles `(Na)`.
    pub theta: u32,
    /// Per-rank inverse RMS `(R)`.
    pub rstd: u32,
    /// This head's `mimo_v`, `mimo_z`, `mimo_o` `(3,R,P)` and norm weight `(P)`.
    pub weights: u32,
    /// Per-token row weights `β·v_prev·mimo_v` then `γ·v·mimo_v`, `(2,R,P)`.
    pub row_weights: u32,
    /// Total size in f32 elements.
    pub total: u32,
}

impl DecodeSmem {
    /// The layout for rank `r`, state size `n`, head dim `p`, angles `na`.
    pub const fn new(r: u32, n: u32, p: u32, na: u32) -> Self {
        let state = 0;
        let q_rot = state + align4(p * decode_state_stride(n));
        let k_rot = q_rot + align4(r * n);
        let v = k_rot + 2 * align4(r * n);
        let z = v + 2 * align4(p);
        let y = z + align4(p);
        let y_part = y + align4(r * p);
        let theta = y_part + align4(decode_column_splits(p) * r * p);
        let rstd = theta + align4(na);
        let weights = rstd + align4(r);
        let row_weights = weights + align4(3 * r * p + p);
        let total = row_weights + align4(2 * r * p);
        DecodeSmem {
            state,
            q_rot,
            k_rot,
            v,
            z,
            y,
            y_part,
            theta,
            rstd,
            weights,
            row_weights,
            total,
        }
    }

    /// Size in bytes.
    pub const fn bytes(&self) -> u32 {
        4 * self.total
    }
}

/// PTX performance directives for a family of entry points (rustc has no attribute for them, so
/// the host build script writes them into the PTX).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchBounds {
    /// Entry points whose name starts with this.
    pub prefix: &'static str,
    /// `.maxntid`: the block size every launch uses.
    pub max_threads: u32,
    /// `.minnctapersm`: blocks that must fit on one SM at once (caps registers per thread).
    pub min_blocks_per_sm: u32,
}

/// Launch bounds of every kernel family that declares them (first matching row wins).
pub const LAUNCH_BOUNDS: &[LaunchBounds] = &[
    // Decode at one token is bound by each block's chain of dependent loads, so throughput comes
    // from many resident blocks: five per SM (≤ 102 registers); rank 8 needs three (≤ 168).
    LaunchBounds {
        prefix: "decode_f32_r8",
        max_threads: 32 * DECODE_WARPS,
        min_blocks_per_sm: 3,
    },
    LaunchBounds {
        prefix: "decode_bf16_r8",
        max_threads: 32 * DECODE_WARPS,
        min_blocks_per_sm: 3,
    },
    LaunchBounds {
        prefix: "decode_",
        max_threads: 32 * DECODE_WARPS,
        min_blocks_per_sm: 5,
    },
];
