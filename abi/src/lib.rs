//! The host↔kernel contract of mamba3-rs, compiled both for the host and for nvptx64.
//!
//! Parameter structs are `#[repr(C)]` and passed to kernels by value; device pointers are `u64`
//! (0 = absent optional tensor), sizes are in elements.
#![no_std]
#![warn(missing_docs)]

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

pub mod backward;
pub use backward::{
    backward_chunked_smem_bytes, backward_chunked_sp_slots, backward_chunked_sp_strips,
    backward_chunked_sp_warps, backward_mma_smem, backward_smem_bytes, split_launch,
    BackwardChunkedSmem, BackwardParams, BackwardSlots, BackwardSmem, BackwardWorkspace,
    BACKWARD_CHUNK_ROWS, BACKWARD_MMA_THREADS, BACKWARD_THREADS, BACKWARD_TOKEN_SCALARS,
};

/// The comment a kernel's inline assembly emits where `griddepcontrol.wait;` belongs (PTX ISA 7.8,
/// sm_90): the `sm_80` module keeps it as a comment, the host's rewrite for compute capability
/// 9.0 and newer replaces it by the instruction.
pub const GRIDDEPCONTROL_WAIT_MARKER: &str = "// mamba3-griddepcontrol: wait";
/// The comment a kernel's inline assembly emits where `griddepcontrol.launch_dependents;` belongs
/// (see [`GRIDDEPCONTROL_WAIT_MARKER`]).
pub const GRIDDEPCONTROL_LAUNCH_DEPENDENTS_MARKER: &str =
    "// mamba3-griddepcontrol: launch_dependents";

/// The prefix of a comment a kernel's inline assembly emits in place of an instruction that needs
/// PTX ISA 8.0 and `sm_90` (e.g. `cp.async.bulk.prefetch.L2.global`): the rest of the line is the
/// instruction with its operands, which the `sm_80` module keeps as a comment and the host's
/// rewrite for compute capability 9.0 and newer turns back into the instruction.
pub const SM90_INSTRUCTION_MARKER: &str = "// mamba3-sm90: ";

/// The prefix of a comment a kernel's inline assembly emits in place of an instruction that needs
/// the architecture-specific target `sm_90a` (`wgmma`, and the `fence.proxy.async` its operands
/// need): as [`SM90_INSTRUCTION_MARKER`], but the host turns it back into the instruction only in
/// the module for compute capability 9.0 exactly (`.target sm_90a`), where those instructions run.
pub const SM90A_INSTRUCTION_MARKER: &str = "// mamba3-sm90a: ";

/// The comment that ends an instruction a kernel's inline assembly emits for every module but
/// compute capability 9.0's: the host's rewrite for 9.0 (`.target sm_90a`) drops the line. A
/// kernel that runs only there opens with `exit;` so marked, so that the other modules, which
/// never launch it, compile it to nothing (its register budget assumes `setmaxnreg`).
pub const NOT_SM90A_INSTRUCTION_MARKER: &str = "// mamba3-not-sm90a";

/// Dynamic shared memory of the `wgmma` self-test kernel `prim_wgmma_bf16_m64n128k128`: its A
/// (16 KB) and B (32 KB) tiles plus the slack that aligns them to the 1024-byte swizzle group.
pub const WGMMA_TEST_SMEM: u32 = 48 * 1024 + 1024;

/// Dynamic shared memory of the split-operand self-test kernel `prim_wgmma_f16_split_m64n64k128`:
/// the `hi` and `lo` tiles of A (64×128 binary16, 16 KB each) and of B (64×128, 16 KB each) plus
/// the slack that aligns them to the 1024-byte swizzle group.
pub const WGMMA_SPLIT_TEST_SMEM: u32 = 64 * 1024 + 1024;

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
    /// `(B,H)` u32 arrival counters, zero between launches, or 0. The register-resident kernel
    /// splits the rows of a (b, h) over several blocks when this is given; the last block to
    /// arrive writes θ and k back (and resets the counter).
    pub arrivals: u64,
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
    /// State rows per warp of the register-resident kernel, 1 ..= [`decode_rows_max_per_warp`]
    /// (ignored by the shared-memory kernel).
    pub rows_per_warp: u32,
}

/// Warps per block of the register-resident decode kernel (`decode_rows_*`).
pub const DECODE_ROWS_WARPS: u32 = 8;

/// Most state rows one warp of the register-resident decode kernel holds (a lane holds four
/// columns of each, for every token of the call, next to its k̂ vectors): 4 at every rank.
pub const fn decode_rows_max_per_warp(rank: u32) -> u32 {
    let _ = rank;
    4
}

/// Largest state size `N` of the register-resident decode kernel: a warp covers a row with one
/// 16-byte quad per lane.
pub const DECODE_ROWS_MAX_N: u32 = 128;

/// Warps per block of the streaming decode kernel (`decode_stream_*`); each warp streams its rows
/// alone (the four share the prologue when they split one (b, h), see the kernel module).
pub const DECODE_STREAM_WARPS: u32 = 4;

/// Blocks per SM the streaming decode kernel of rank `r` is built for (its launch bounds): four
/// of [`DECODE_STREAM_WARPS`] warps (≤ 128 registers), two at rank 8 (twice the per-lane vectors).
pub const fn decode_stream_blocks_per_sm(r: u32) -> u32 {
    if r > 4 {
        2
    } else {
        4
    }
}

/// State rows one warp of the streaming decode kernel keeps in flight (copied into shared memory
/// ahead of the row being updated).
pub const DECODE_STREAM_DEPTH: u32 = 8;

/// State rows of one group of the streaming decode kernel: their weights are staged before and
/// their outputs formed after the group's rows stream (two rows per lane, so that each phase's
/// loads are in flight together).
pub const DECODE_STREAM_GROUP: u32 = 64;

/// Largest state size `N` of the streaming decode kernel: a warp covers a row with one 16-byte
/// quad per lane.
pub const DECODE_STREAM_MAX_N: u32 = 128;

/// Shared-memory regions of one warp of the streaming decode kernel, offsets in f32 elements from
/// the warp's own region (each region 16-byte aligned); a block holds [`DECODE_STREAM_WARPS`] of
/// them back to back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeStreamSmem {
    /// Per-row weights `β·v_prev·mimo_v` (R) then `γ·v·mimo_v` (R) of a group of
    /// [`DECODE_STREAM_GROUP`] rows, rows [`decode_rows_weight_stride`] apart.
    pub weights: u32,
    /// Per-rank read-outs of the group's rows `(R,DECODE_STREAM_GROUP)`.
    pub y: u32,
    /// One word: non-zero when this warp writes θ and k back.
    pub owner: u32,
    /// Rotated q of the warp's lanes `(R,32,4)`: lane `l` holds its quad of columns of each rank.
    pub q_rot: u32,
    /// Rotated k of the current token, same layout.
    pub k_rot: u32,
    /// New angles `(Na)` (`Na ≤ 64`) in the state format, written back by the owner at the end.
    pub theta: u32,
    /// The lanes' copies of the next [`DECODE_STREAM_DEPTH`] state rows
    /// `(DEPTH,32,4)`, filled by `cp.async`.
    pub ring: u32,
    /// Size of one warp's region in f32 elements.
    pub total: u32,
}

impl DecodeStreamSmem {
    /// The per-warp layout for rank `r`.
    pub const fn new(r: u32) -> Self {
        let weights = 0;
        let y = weights + DECODE_STREAM_GROUP * decode_rows_weight_stride(r);
        let owner = y + DECODE_STREAM_GROUP * r;
        let q_rot = owner + 4;
        let k_rot = q_rot + 128 * r;
        let theta = k_rot + 128 * r;
        let ring = theta + 128;
        let total = ring + DECODE_STREAM_DEPTH * 128;
        DecodeStreamSmem {
            weights,
            y,
            owner,
            q_rot,
            k_rot,
            theta,
            ring,
            total,
        }
    }

    /// Bytes of dynamic shared memory of one block.
    pub const fn block_bytes(&self) -> u32 {
        4 * self.total * DECODE_STREAM_WARPS
    }
}

/// Warps per block of the tensor-core decode kernel (`decode_mma_*`): one (b, h) per block, warp
/// `w` holding state rows `16w .. 16w + 16` as `mma` accumulators.
pub const DECODE_MMA_WARPS: u32 = 4;

/// Blocks per SM the tensor-core decode kernel is built for (its launch bounds: ≤ 128 registers,
/// 64 of them the state).
pub const DECODE_MMA_BLOCKS_PER_SM: u32 = 4;

/// Blocks per SM of the tensor-core decode's token-loop entry (`decode_mma_tokens_*`): ≤ 168
/// registers, for the state and what the loop carries from one token to the next.
pub const DECODE_MMA_TOKENS_BLOCKS_PER_SM: u32 = 3;

/// The one geometry of the tensor-core decode kernel, `[R, N, P]` (any `Na ≤ N/2`): the rank
/// packing of its update (`2R` weights and their low parts fill one 16-deep `mma` step) needs
/// R = 4, the accumulators N = 128, and the warps P = 16·[`DECODE_MMA_WARPS`].
pub const DECODE_MMA_GEOMETRY: [u32; 3] = [4, 128, 16 * DECODE_MMA_WARPS];

/// Shared-memory layout of the tensor-core decode kernel's one-token entry, byte offsets from the dynamic shared
/// base. The three bf16 tiles hold rank vectors as rows of N elements in the kernel's column
/// order (`decode_mma::logical_column`); a row is padded by 16 bytes so that the eight row
/// addresses of an `ldmatrix` fall in distinct banks.
pub mod decode_mma_smem {
    /// Bytes from one tile row to the next (N = 128 bf16 and 16 bytes of padding).
    pub const ROW_STRIDE: u32 = 2 * 128 + 16;
    /// Read-out operand: rows `r` = q̂ of rank `r` rounded to bf16, rows `4 + r` = the rounding
    /// remainders of q̂ (bf16).
    pub const Q: u32 = 0;
    /// Update operand: rows `r` = the previous token's k̂ (the state's bf16 k), rows `4 + r` = this
    /// token's k̂ rounded to bf16.
    pub const K: u32 = Q + 8 * ROW_STRIDE;
    /// Rows `r` = the rounding remainders of this token's k̂ (bf16).
    pub const K_LO: u32 = K + 8 * ROW_STRIDE;
    /// Fused-norm mode: each warp's sums of squared outputs per rank, `(warps, 4)` f32.
    pub const NORM: u32 = K_LO + 4 * ROW_STRIDE;
    /// Bytes of dynamic shared memory of one block.
    pub const BYTES: u32 = NORM + 4 * 4 * super::DECODE_MMA_WARPS;
}

/// Most tokens a call of the chunk-form tensor-core decode (`decode_mma_chunk_*`) takes.
pub const DECODE_MMA_CHUNK_MAX_TOKENS: u32 = 8;

/// Blocks per SM of the chunk-form tensor-core decode (≤ 168 registers: the state's 64, the
/// read-out's 16 and the score tiles').
pub const DECODE_MMA_CHUNK_BLOCKS_PER_SM: u32 = 3;

/// Shared-memory layout of the chunk-form tensor-core decode (`decode_mma_chunk_*`), byte offsets
/// from the dynamic shared base. Key rows `j` are the carried k̂ (`j = 0`, ranks in rows 0–3) and
/// the call's tokens (`j = t + 1`, rows `4(t + 1) + r`), padded with zero rows to three 16-row
/// `mma` depth steps; query rows are `4t + r`. The q̂ and k̂ tiles hold N = 128 bf16 columns in
/// the tensor-core decode's column order (`decode_mma::logical_column`), each row padded by 16
/// bytes so that the eight row addresses of an `ldmatrix` fall in distinct banks.
pub mod decode_mma_chunk_smem {
    use super::DECODE_MMA_CHUNK_MAX_TOKENS as T;
    /// Bytes from one q̂ / k̂ row to the next (128 bf16 and 16 bytes).
    pub const QK_STRIDE: u32 = 2 * 128 + 16;
    /// Key rows of the k̂, x and scaled-x tiles: the carried k̂ and T tokens, four ranks each,
    /// padded to a multiple of 16.
    pub const KEY_ROWS: u32 = (4 * (T + 1)).div_ceil(16) * 16;
    /// Query rows: T tokens, four ranks each.
    pub const QUERY_ROWS: u32 = 4 * T;
    /// Bytes from one x / scaled-x row to the next (P = 64 bf16 and 16 bytes).
    pub const X_STRIDE: u32 = 2 * 64 + 16;
    /// Bytes from one weighted-score row to the next (32 query columns bf16 and 16 bytes).
    pub const W_STRIDE: u32 = 2 * QUERY_ROWS + 16;
    /// Rotated, biased q̂ `(QUERY_ROWS, 128)` bf16.
    pub const Q: u32 = 0;
    /// Rotated, biased k̂ `(KEY_ROWS, 128)` bf16.
    pub const K: u32 = Q + QUERY_ROWS * QK_STRIDE;
    /// Up-projected x `(KEY_ROWS, 64)` bf16: row `4j + r` = v_j · mimo_v_r (v of the carried key:
    /// the state's raw v).
    pub const X: u32 = K + KEY_ROWS * QK_STRIDE;
    /// x scaled by each key's weight in the state after the call `(KEY_ROWS, 64)` bf16.
    pub const XW: u32 = X + KEY_ROWS * X_STRIDE;
    /// Weighted scores `(KEY_ROWS, QUERY_ROWS)` bf16: `w(t, j)·(k̂_j · q̂_t)`.
    pub const W: u32 = XW + KEY_ROWS * X_STRIDE;
    /// Raw q rows `(QUERY_ROWS, 128)` bf16 as the input holds them (`cp.async` staging).
    pub const RAW_Q: u32 = W + KEY_ROWS * W_STRIDE;
    /// Raw k rows `(QUERY_ROWS, 128)` bf16 (staging).
    pub const RAW_K: u32 = RAW_Q + QUERY_ROWS * 256;
    /// Raw v rows `(T, 64)` bf16 (staging).
    pub const V: u32 = RAW_K + QUERY_ROWS * 256;
    /// Raw z rows `(T, 64)` bf16 (staging).
    pub const Z: u32 = V + T * 128;
    /// `(cos θ, sin θ)` of every token and angle `(T, 64)` f32 pairs.
    pub const CS: u32 = Z + T * 128;
    /// Per-key and per-token scalars, rows of 16 f32 (see the kernel module).
    pub const SCAL: u32 = CS + T * 64 * 8;
    /// Rows of [`SCAL`].
    pub const SCAL_ROWS: u32 = 6;
    /// Fused-norm mode: each warp's sums of squared outputs per (token, rank), `(4, T, 4)` f32.
    pub const NORM: u32 = SCAL + SCAL_ROWS * 64;
    /// The head's mimo_v, mimo_z, mimo_o rows `(3, R = 4, P = 64)` f32 (staging).
    pub const MIMO: u32 = NORM + 4 * T * 4 * 4;
    /// The head's q and k biases `(2, R = 4, N = 128)` f32 (staging).
    pub const BIAS: u32 = MIMO + 3 * 4 * 64 * 4;
    /// The head's norm weights `(P = 64)` f32 (staging, fused-norm mode).
    pub const NORM_WEIGHT: u32 = BIAS + 2 * 4 * 128 * 4;
    /// Bytes of dynamic shared memory of one block.
    pub const BYTES: u32 = NORM_WEIGHT + 64 * 4;
}

/// Shared-memory layout of the tensor-core decode kernel's token loop (`decode_mma_tokens_*`),
/// byte offsets from the dynamic shared base. The bf16 tiles hold rank vectors as rows of N elements in the kernel's column order
/// (`decode_mma::logical_column`); a row is padded by 16 bytes so that the eight row addresses of
/// an `ldmatrix` fall in distinct banks. Token `t` of a call writes its q̂ into read-out slot
/// `t mod 2` and its k̂ into key slot `(t + 1) mod 4` (slot 0 holds the carried k̂ of the call's
/// first token), so one block barrier per token orders every write after the reads it replaces;
/// the update's eight key rows come from two consecutive key slots, whose rows lie in different
/// halves of the eight bank groups.
pub mod decode_mma_tokens_smem {
    /// Bytes from one tile row to the next (N = 128 bf16 and 16 bytes of padding).
    pub const ROW_STRIDE: u32 = 2 * 128 + 16;
    /// Read-out operand, two slots of eight rows: rows `r` = q̂ of rank `r` rounded to bf16, rows
    /// `4 + r` = the rounding remainders of q̂ (bf16).
    pub const Q: u32 = 0;
    /// Bytes from one read-out slot to the next.
    pub const Q_SLOT: u32 = 8 * ROW_STRIDE;
    /// Update operand, [`K_SLOTS`] slots of four rows: row `r` of a slot = one token's k̂ of rank
    /// `r` rounded to bf16 (the state's bf16 k in the first token's previous slot).
    pub const K: u32 = Q + 2 * Q_SLOT;
    /// Key slots of the ring.
    pub const K_SLOTS: u32 = 4;
    /// Bytes from one key slot to the next.
    pub const K_SLOT: u32 = 4 * ROW_STRIDE;
    /// The rounding remainders of the key slots' rows (bf16; none for the carried k̂'s slot,
    /// which the first token does not read).
    pub const K_LO: u32 = K + K_SLOTS * K_SLOT;
    /// Fused-norm mode, two slots (token parity): each warp's sums of squared outputs per rank,
    /// `(warps, 4)` f32.
    pub const NORM: u32 = K_LO + K_SLOTS * K_SLOT;
    /// Bytes from one norm slot to the next.
    pub const NORM_SLOT: u32 = 4 * 4 * super::DECODE_MMA_WARPS;
    /// Bytes of dynamic shared memory of one block.
    pub const BYTES: u32 = NORM + 2 * NORM_SLOT;
}

/// Shared-memory regions of the register-resident decode kernel for a block of `rows` state rows,
/// offsets in f32 elements (each region 16-byte aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeRowsSmem {
    /// Rotated q of the current token `(R,N)`.
    pub q_rot: u32,
    /// Rotated k, two buffers `(2,R,N)`: current and previous token alternate.
    pub k_rot: u32,
    /// `sin θ` of the current token `(Na)`.
    pub sin: u32,
    /// `cos θ` of the current token `(Na)`.
    pub cos: u32,
    /// Per-row weights `β·v_prev·mimo_v` (R) then `γ·v·mimo_v` (R), rows
    /// [`decode_rows_weight_stride`] apart.
    pub weights: u32,
    /// Per-rank read-outs of the block's rows `(R,rows)`.
    pub y: u32,
    /// Raw v of the current token for the block's rows `(rows)`.
    pub v: u32,
    /// z of the current token for the block's rows `(rows)`.
    pub z: u32,
    /// Per-rank inverse RMS `(R)`.
    pub rstd: u32,
    /// This head's q and k biases `(2,R,N)`, staged once per call.
    pub bias: u32,
    /// This head's `mimo_v`, `mimo_z` and `mimo_o`·norm weight of the block's rows `(3,R,rows)`,
    /// staged once per call.
    pub row_params: u32,
    /// One word: non-zero when this block writes θ and k back.
    pub owner: u32,
    /// Total size in f32 elements.
    pub total: u32,
}

/// Row stride (floats) of [`DecodeRowsSmem::weights`]: `2R` rounded up to a 16-byte multiple.
pub const fn decode_rows_weight_stride(r: u32) -> u32 {
    align4(2 * r)
}

impl DecodeRowsSmem {
    /// The layout for rank `r`, state size `n`, `rows` state rows per block, angles `na`.
    pub const fn new(r: u32, n: u32, rows: u32, na: u32) -> Self {
        let q_rot = 0;
        let k_rot = q_rot + align4(r * n);
        let sin = k_rot + 2 * align4(r * n);
        let cos = sin + align4(na);
        let weights = cos + align4(na);
        let y = weights + rows * decode_rows_weight_stride(r);
        let v = y + align4(r * rows);
        let z = v + align4(rows);
        let rstd = z + align4(rows);
        let bias = rstd + align4(r);
        let row_params = bias + 2 * align4(r * n);
        let owner = row_params + align4(3 * r * rows);
        let total = owner + 4;
        DecodeRowsSmem {
            q_rot,
            k_rot,
            sin,
            cos,
            weights,
            y,
            v,
            z,
            rstd,
            bias,
            row_params,
            owner,
            total,
        }
    }

    /// Size in bytes.
    pub const fn bytes(&self) -> u32 {
        4 * self.total
    }
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

/// Column splits of the decode state update: a warp owns 64 rows (two per lane) of one split, and
/// the splits of `P.div_ceil(64)` row sets fill the block's warps.
pub const fn decode_column_splits(p: u32) -> u32 {
    let row_sets = p.div_ceil(64);
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
    /// Angles `(Na)` as f64 (two words each), then their sines and cosines `(Na,2)`.
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
        let rstd = theta + align4(4 * na);
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
    // The tensor-core forward, its `wgmma` twin and their segment-state passes: two blocks per SM
    // (shared memory). These rows come before the chunked kernels' `forward_` and
    // `segment_state_` rows, which would otherwise claim the twins.
    // The warp-specialized forward and its segment-state pass: one block of three warpgroups per
    // SM (shared memory); its warpgroups move registers between them with `setmaxnreg` from the
    // 168 these rows leave each.
    // The f32 warp-specialized forward: one block of two warpgroups per SM (shared memory), no
    // register moves: each thread may take 255. Before `forward_ws_`, which would claim it.
    LaunchBounds {
        prefix: "forward_ws_f32_",
        max_threads: FORWARD_WS_F32_THREADS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "forward_ws_",
        max_threads: FORWARD_WS_THREADS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "segment_state_ws_",
        max_threads: FORWARD_WS_THREADS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "forward_mma_",
        max_threads: FORWARD_MMA_THREADS,
        min_blocks_per_sm: 2,
    },
    LaunchBounds {
        prefix: "forward_wg_",
        max_threads: FORWARD_MMA_THREADS,
        min_blocks_per_sm: 2,
    },
    LaunchBounds {
        prefix: "segment_state_mma_",
        max_threads: FORWARD_MMA_THREADS,
        min_blocks_per_sm: 2,
    },
    LaunchBounds {
        prefix: "segment_state_wg_",
        max_threads: FORWARD_MMA_THREADS,
        min_blocks_per_sm: 2,
    },
    // The tensor-core forward writing the backward's checkpoints, and the backward's checkpoint
    // sweeps (the forward's state pass, both forms), as the forward; before the `backward_` row.
    LaunchBounds {
        prefix: "forward_ckpt_mma_",
        max_threads: FORWARD_MMA_THREADS,
        min_blocks_per_sm: 2,
    },
    LaunchBounds {
        prefix: "backward_ckpt_",
        max_threads: FORWARD_MMA_THREADS,
        min_blocks_per_sm: 2,
    },
    // The chunked forward and its segment-state pass: one block per SM is the shared-memory limit
    // anyway; the bound only fixes the block size.
    LaunchBounds {
        prefix: "segment_state_",
        max_threads: FORWARD_THREADS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "forward_",
        max_threads: FORWARD_THREADS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "segment_combine",
        max_threads: SEGMENT_COMBINE_THREADS,
        min_blocks_per_sm: 1,
    },
    // The register-resident decode streams the state through registers: two blocks (16 warps)
    // per SM keep 64 KB of state loads in flight (≤ 128 registers); rank 8 holds twice the
    // per-lane vectors and gets one block (≤ 255).
    LaunchBounds {
        prefix: "decode_rows_f32_r8",
        max_threads: 32 * DECODE_ROWS_WARPS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "decode_rows_bf16_r8",
        max_threads: 32 * DECODE_ROWS_WARPS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "decode_rows_",
        max_threads: 32 * DECODE_ROWS_WARPS,
        min_blocks_per_sm: 2,
    },
    // The streaming decode: each warp keeps eight rows in flight (in shared memory); four
    // blocks of four warps per SM (≤ 128 registers) keep 64 KB outstanding to cover HBM latency;
    // rank 8 holds twice the per-lane vectors and gets two (≤ 255).
    LaunchBounds {
        prefix: "decode_stream_f32_r8",
        max_threads: 32 * DECODE_STREAM_WARPS,
        min_blocks_per_sm: decode_stream_blocks_per_sm(8),
    },
    LaunchBounds {
        prefix: "decode_stream_bf16_r8",
        max_threads: 32 * DECODE_STREAM_WARPS,
        min_blocks_per_sm: decode_stream_blocks_per_sm(8),
    },
    LaunchBounds {
        prefix: "decode_stream_",
        max_threads: 32 * DECODE_STREAM_WARPS,
        min_blocks_per_sm: decode_stream_blocks_per_sm(4),
    },
    // The tensor-core decode holds a (b, h)'s state in registers (64 per thread): four blocks
    // per SM keep 128 KB of state loads in flight; the token loop also carries its angles, biases
    // and the next token's inputs, and gets three (≤ 168 registers).
    LaunchBounds {
        prefix: "decode_mma_chunk_",
        max_threads: 32 * DECODE_MMA_WARPS,
        min_blocks_per_sm: DECODE_MMA_CHUNK_BLOCKS_PER_SM,
    },
    LaunchBounds {
        prefix: "decode_mma_tokens_",
        max_threads: 32 * DECODE_MMA_WARPS,
        min_blocks_per_sm: DECODE_MMA_TOKENS_BLOCKS_PER_SM,
    },
    LaunchBounds {
        prefix: "decode_mma_",
        max_threads: 32 * DECODE_MMA_WARPS,
        min_blocks_per_sm: DECODE_MMA_BLOCKS_PER_SM,
    },
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
    // The backward's per-head kernel runs one block per (head, batch row); its shared memory
    // (≥ 64 KiB at the upstream sizes) already limits residency, so only the block size is fixed.
    LaunchBounds {
        prefix: "backward_",
        max_threads: BACKWARD_THREADS,
        min_blocks_per_sm: 1,
    },
    LaunchBounds {
        prefix: "decode_",
        max_threads: 32 * DECODE_WARPS,
        min_blocks_per_sm: 5,
    },
];
/// Threads per block of the chunked forward kernels.
pub const FORWARD_THREADS: u32 = 256;

/// Threads per block of the tensor-core forward (`forward_mma_*`): four warps.
pub const FORWARD_MMA_THREADS: u32 = 128;

/// Threads per block of the warp-specialized forward (`forward_ws_*`): three warpgroups, one
/// producer and two consumers.
pub const FORWARD_WS_THREADS: u32 = 384;

/// Threads per block of the f32 warp-specialized forward (`forward_ws_f32_*`): two warpgroups, a
/// producer and a consumer.
pub const FORWARD_WS_F32_THREADS: u32 = 256;

/// Byte offset of bf16 element `(row, col)` in a tile of `rows` rows (a multiple of 8) stored in the
/// tensor cores' 128-byte swizzle mode (PTX ISA §9.7.15.5.1.2): rows of 128 bytes (64 columns) in
/// 64-column blocks, block `col / 64` after every row of the block before; within each 8-row,
/// 1024-byte group the 16-byte piece `q` of row `r` sits at piece `q ^ (r % 8)`. The tile must
/// start 1024-byte aligned for `wgmma` to read it (the pattern is a function of the address). The
/// eight 16-byte rows of an `ldmatrix` matrix, and a warp's 32 words along one row, fall on 32
/// distinct banks.
pub const fn swizzle128_offset(rows: u32, row: u32, col: u32) -> u32 {
    (col / 64) * rows * 128 + row * 128 + (((col % 64) / 8) ^ (row % 8)) * 16 + (col % 8) * 2
}

/// `wgmma` shared-memory matrix descriptors for tiles laid out by [`swizzle128_offset`] (PTX ISA
/// §9.7.15.5.1.2.1, "Matrix Descriptor Format"). The same tile bytes serve as a K-major operand
/// (tile rows = M or N, columns = K) and as an M-/N-major one (tile rows = K, columns = M or N);
/// the GPU self-test `wgmma_bf16_reads_every_swizzled_operand_layout` checks all four forms.
pub mod swizzle128 {
    /// Bytes of one swizzled row (64 bf16).
    pub const ROW_BYTES: u32 = 128;
    /// Bytes of one 8-row swizzle group (the repeat of the pattern; tiles align to it).
    pub const GROUP_BYTES: u32 = 1024;

    /// A descriptor in the 128-byte swizzle mode: start address, leading-dimension and
    /// stride-dimension byte offsets (each stored >> 4 in 14 bits), base offset 0 (tiles are
    /// 1024-byte aligned), mode 1 in bits 62–63.
    pub const fn desc(start: u32, leading_bytes: u32, stride_bytes: u32) -> u64 {
        ((start as u64 >> 4) & 0x3fff)
            | (((leading_bytes as u64 >> 4) & 0x3fff) << 16)
            | (((stride_bytes as u64 >> 4) & 0x3fff) << 32)
            | (1u64 << 62)
    }

    /// The descriptor of a K-major operand for the 16 columns (K) from `k0` (a multiple of 16) of
    /// the tile at `tile` with `rows` rows (M or N): the start moves 32 bytes per step inside a
    /// 128-byte row and to the next column block every four steps; the stride between 8-row
    /// groups is [`GROUP_BYTES`]; the leading offset is unused in the swizzled K-major modes (1
    /// by convention).
    pub const fn k_major(tile: u32, rows: u32, k0: u32) -> u64 {
        desc(tile + k_major_offset(rows, k0), 16, GROUP_BYTES)
    }

    /// The start of [`k_major`]'s 16 columns from `k0` relative to the tile's start.
    pub const fn k_major_offset(rows: u32, k0: u32) -> u32 {
        (k0 / 64) * rows * ROW_BYTES + (k0 % 64) * 2
    }

    /// `desc` with its start address moved by `bytes` (a multiple of 16). The start field holds
    /// bits 4–17 of a shared address, and shared addresses stay below 2^18 (256 KB), so the add
    /// never carries into the other fields. A kernel that forms one descriptor per tile and
    /// advances it per step lets ptxas keep the constant upper word in place, where forming each
    /// step's descriptor afresh costs a move of both words per operand.
    pub const fn advance(desc: u64, bytes: u32) -> u64 {
        desc + (bytes >> 4) as u64
    }

    /// The descriptor of an M-/N-major operand for the 16 rows (K) from `k0` (a multiple of 16)
    /// of the tile at `tile` with `k_rows` rows: the start moves 16 rows; the leading offset is
    /// the distance between 64-column blocks (`k_rows` rows), the stride offset the one between
    /// 8-row groups.
    pub const fn mn_major(tile: u32, k_rows: u32, k0: u32) -> u64 {
        desc(tile + mn_major_offset(k0), k_rows * ROW_BYTES, GROUP_BYTES)
    }

    /// The start of [`mn_major`]'s 16 rows from `k0` relative to the tile's start.
    pub const fn mn_major_offset(k0: u32) -> u32 {
        k0 * ROW_BYTES
    }
}

/// Shared-memory layout of the tensor-core forward for its one geometry (R = 4, N = 128, P = 64,
/// Na = 32, C = 16: 64 rank-flattened rows per chunk), byte offsets from the dynamic shared base
/// (rounded up to [`forward_mma_smem::ALIGN`] in the `wgmma` kernels). bf16 tiles carry 8 extra
/// elements per row so that the 8 row addresses of an `ldmatrix` fall in different banks, except
/// in the `wgmma` kernels (`*_wg_*`), which store q̂, k̂ and x_w swizzled
/// ([`swizzle128_offset`]; q̂ at [`Q`], k̂ at [`K_SWIZZLED`], x_w at [`XW`], each 1024-byte
/// aligned) in the same regions.
///
/// [`Q`]: forward_mma_smem::Q
/// [`K_SWIZZLED`]: forward_mma_smem::K_SWIZZLED
/// [`XW`]: forward_mma_smem::XW
pub mod forward_mma_smem {
    /// The alignment the `wgmma` kernels round the layout's base up to (the swizzle group of their
    /// operand tiles); [`BYTES`] includes the slack.
    pub const ALIGN: u32 = 1024;
    /// Row stride in bytes of the q̂ and k̂ tiles (128 bf16 + 8 padding).
    pub const QK_STRIDE: u32 = 272;
    /// Row stride in bytes of the x, scaled x and weighted score tiles (64 bf16 + 8 padding).
    pub const X_STRIDE: u32 = 144;
    /// Rotated, biased q̂ `(64 rows, 128)` bf16.
    pub const Q: u32 = 0;
    /// Rotated, biased k̂ `(64, 128)` bf16, 64 bytes past the end of q̂ so that a warp whose two
    /// halves store q̂ and k̂ words of the same row offset (the half-split rotation) hits all 32
    /// banks.
    pub const K: u32 = Q + 64 * QK_STRIDE + 64;
    /// k̂ of the `wgmma` kernel, swizzled (16 KB from the first 1024-byte boundary in the region).
    pub const K_SWIZZLED: u32 = K.div_ceil(ALIGN) * ALIGN;
    /// Up-projected x `(64, 64)` bf16 (past both forms of k̂).
    pub const X: u32 = K + 64 * QK_STRIDE;
    /// x scaled by the state-pass key scale `exp(Ā_i)·c_i` `(64, 64)` bf16 (swizzled in the
    /// `wgmma` kernel: 1024-byte aligned).
    pub const XW: u32 = (X + 64 * X_STRIDE).div_ceil(ALIGN) * ALIGN;
    /// Weighted scores `(64, 64)` bf16.
    pub const W: u32 = XW + 64 * X_STRIDE;

    // The swizzled q̂ (at Q), k̂ and x_w tiles of the `wgmma` kernel start on the swizzle group
    // and stay inside their regions, beside the padded forms of the other kernels; two blocks
    // still fit an H100/H200 SM (228 KB, 1 KB reserved per block).
    const _: () = {
        assert!(
            Q.is_multiple_of(ALIGN) && K_SWIZZLED.is_multiple_of(ALIGN) && XW.is_multiple_of(ALIGN)
        );
        assert!(Q + 64 * 256 <= K && K_SWIZZLED + 64 * 256 <= X);
        assert!(K + 64 * QK_STRIDE <= X && X + 64 * X_STRIDE <= XW);
        assert!(XW + 64 * 128 <= W && XW + 64 * X_STRIDE <= W);
        assert!(2 * (BYTES + 1024) <= 228 * 1024);
    };
    /// Raw q rows of the next chunk `(64, 128)` bf16, unpadded (the `cp.async` staging area).
    pub const RAW_Q: u32 = W + 64 * X_STRIDE;
    /// Raw k rows of the next chunk `(64, 128)` bf16, 64 bytes past the end of the raw q rows (as
    /// k̂ past q̂, for the half-split rotation's loads).
    pub const RAW_K: u32 = RAW_Q + 64 * 256 + 64;
    /// Two banks (chunk parity) of raw v and z rows `(16, 64)` bf16 each: v at +0, z at +2048.
    pub const BANK: u32 = RAW_K + 64 * 256;
    /// Bytes of one bank.
    pub const BANK_BYTES: u32 = 4096;
    /// `(cos θ, sin θ)` of the chunk `(16 times, 32 angles)` f32 pairs.
    pub const CS: u32 = BANK + 2 * BANK_BYTES;
    /// Carried angle totals `(32)` f64.
    pub const THETA: u32 = CS + 16 * 32 * 8;
    /// Per-warp angle-increment totals `(4, 32)` f64.
    pub const TOT: u32 = THETA + 32 * 8;
    /// Two banks (chunk parity) of token scalars `(5, 16)` f32: `A_i`, `c_i`, `γ_i`, `exp(A_i)`,
    /// `exp(Ā_i)·c_i`.
    pub const SCAL: u32 = TOT + 4 * 32 * 8;
    /// Bytes of one bank of token scalars.
    pub const SCAL_BYTES: u32 = 5 * 16 * 4;
    /// Score weights `(16, 16)` f32 (see the kernel module).
    pub const WT: u32 = SCAL + 2 * SCAL_BYTES;
    /// Per-warp partial sums of squares `(4, 64 rows)` f32 (fused-norm mode).
    pub const NORM: u32 = WT + 16 * 16 * 4;
    /// The identity rotation `(1, 0, 1, 0)` f32, read by the lanes whose columns no pair rotates.
    pub const IDENT: u32 = NORM + 4 * 64 * 4;
    /// Total dynamic shared memory with the `wgmma` kernel's alignment slack (two blocks fit one
    /// H100/H200 SM).
    pub const BYTES: u32 = IDENT + 16 + ALIGN;
    /// k̂₀ of the caller's initial state `(R, N)` bf16 (the batch-walking short-call kernel
    /// only, `forward_mma_units_*`: it holds a unit's k̂₀ from its loads, issued during the
    /// previous unit, to its trapezoidal term after the rotation).
    pub const K0: u32 = IDENT + 16;
    /// The initial raw v `(P)` bf16 of the same unit (batch-walking kernel only).
    pub const V0: u32 = K0 + 4 * 128 * 2;
    /// `ε₀ = Δ₀(1 − σ(trap₀))` of the unit, f32 (batch-walking kernel only).
    pub const EPS0: u32 = V0 + 64 * 2;
    /// θ₀ `(Na)` f32 of the unit (batch-walking kernel only).
    pub const THETA0: u32 = EPS0 + 16;
    /// 16 zero bytes, the `ldmatrix` rows past R of k̂₀ (batch-walking kernel only).
    pub const ZERO: u32 = THETA0 + 32 * 4;
    /// Dynamic shared memory of the batch-walking short-call kernel (still two blocks per SM).
    pub const UNITS_BYTES: u32 = ZERO + 16;
    /// The unit's angle logits `(16 times, 32 angles)` f32 in the batch-walking kernel, staged in
    /// the CS region (free from the previous unit's rotation to this unit's angle phase).
    pub const LOGITS: u32 = CS;
    /// The unit's Δ `(16 times)` f32 in the batch-walking kernel, after the logits.
    pub const DTS: u32 = CS + 16 * 32 * 4;
}

/// Shared-memory layout of the warp-specialized forward (`forward_ws_*`, compute capability 9.0)
/// for the tensor-core geometry (R = 4, N = 128, P = 64, Na = 32, C = 16, bf16), byte offsets from
/// the dynamic shared base rounded up to [`forward_ws_smem::ALIGN`]. A block runs two units
/// (heads `2x` and `2x + 1` of one batch row and segment); per unit, the operand tiles its consumer
/// warpgroup's `wgmma` read (q̂ and k̂: written by the producer warpgroup, handed over and back
/// through named barriers; x and x_w: written by the consumer itself) and that consumer's own
/// score and output tiles; the producer's raw
/// staging is double-buffered by chunk parity and shared by both units (their q and k rows are the
/// same: both heads lie in one group), and so are the per-unit score weights and decays the
/// consumers read.
pub mod forward_ws_smem {
    /// Alignment of the layout's base and of every operand tile (the 128-byte swizzle group).
    pub const ALIGN: u32 = 1024;
    /// Offset of unit `u`'s tiles: `u · UNIT_BYTES`.
    pub const UNIT_BYTES: u32 = 57344;
    /// Rotated, biased q̂ `(64 rows, 128)` bf16, swizzled (within a unit's tiles).
    pub const Q: u32 = 0;
    /// Rotated, biased k̂ `(64, 128)` bf16, swizzled.
    pub const K: u32 = 16384;
    /// Up-projected x `(64, 64)` bf16, swizzled (the consumer's own).
    pub const X: u32 = 32768;
    /// x scaled by the state-pass key scale `exp(Ā_i)·c_i` `(64, 64)` bf16, swizzled (the
    /// consumer's own).
    pub const XW: u32 = 40960;
    /// Weighted scores `(64, 64)` bf16, swizzled (the consumer's own).
    pub const S: u32 = 49152;
    /// Raw staging, two buffers of [`RAW_BYTES`] (chunk parity): raw q rows `(64, 128)` bf16 at
    /// +0 and raw k rows at [`RAW_K`], 16-byte pieces swizzled by [`raw_piece`].
    pub const RAW: u32 = 2 * UNIT_BYTES;
    /// Offset of the raw k rows in a staging buffer.
    pub const RAW_K: u32 = 16384;
    /// Bytes of one staging buffer.
    pub const RAW_BYTES: u32 = 2 * RAW_K;
    /// Score weights `(16, 16)` f32 per unit and chunk parity, at `WT + (2u + parity)·1024`
    /// (this and the other per-chunk tables are the consumer's: it forms them two chunks ahead).
    pub const WT: u32 = RAW + 2 * RAW_BYTES;
    /// `exp(A_i)` `(16)` f32 and the chunk decay `exp(A_last)` at `[16]`, per unit and chunk
    /// parity, at `EXPA + (2u + parity)·128`.
    pub const EXPA: u32 = WT + 4 * 1024;
    /// Each consumer's output rows `(16, 64)` bf16 at a row stride of [`OUT_STRIDE`], in its
    /// unit's score tile ([`S`] within the unit's tiles): the epilogue writes them once every
    /// consumer warp is past the wait for the intra-chunk product (the last reader of the scores),
    /// and the next chunk's scores are written after the next `full` hand-off, which every
    /// consumer thread reaches only once done with the rows.
    pub const OUT: u32 = S;
    /// Row stride of the output rows (64 bf16 and 16 bytes of padding).
    pub const OUT_STRIDE: u32 = 144;
    /// `(cos θ, sin θ)` of angle `a` as 8 bytes at `CS + (2u + parity)·16·CS_STRIDE +
    /// t·CS_STRIDE +` [`cs_offset`]`(a)`, per unit and chunk parity: written by the consumer two
    /// chunks ahead, read by the producer as it rotates q and k.
    pub const CS: u32 = EXPA + 4 * 128;
    /// Row stride of the cos/sin table (16 pairs of angles and 16 bytes of padding).
    pub const CS_STRIDE: u32 = 272;
    /// The key scales `exp(Ā_i)·c_i` `(16)` f32 per unit and chunk parity, at `KSCALE + (2u +
    /// parity)·64` (read by the consumer as it forms x_w).
    pub const KSCALE: u32 = CS + 4 * 16 * CS_STRIDE;
    /// The f32 biases per unit, rank and tensor (q, k), 512 bytes at `BIAS + ((4u + r)·2 +
    /// tensor)·512`: the four columns from [`bias_column`]`(i)` at `+16i` (producer only).
    pub const BIAS: u32 = KSCALE + 4 * 64;
    /// mimo_z (halved) and mimo_o of each consumer's output columns, per unit `u` at `MIMO_ZO +
    /// 2048u`: for column `p` (< 64) the 8 f32 `mimo_z[r][p]/2` (r < 4) then `mimo_o[r][p]`, 32
    /// bytes at `32p` (the consumer's own: it reads them where it applies them).
    pub const MIMO_ZO: u32 = BIAS + 2 * 4 * 2 * 512;
    /// mimo_v of each consumer's x columns, per unit `u` at `MIMO_V + 1024u`: for the column
    /// pair `2l`, `2l + 1` (l < 32) the 8 f32 `mimo_v[r][2l + e]` at `32l + 8r + 4e` (the
    /// consumer's own).
    pub const MIMO_V: u32 = MIMO_ZO + 2 * 2048;
    /// Raw v rows `(16, 64)` bf16 per unit `u` in three slots (chunk mod 3), at `V +
    /// slot·V_SLOT_BYTES + 2048u`: staged by the producer with the chunk's other rows, read by
    /// the consumer after the chunk's `full` hand-off; the third slot lets the producer stage
    /// chunk k + 1 while a consumer may still be reading chunk k − 1's.
    pub const V: u32 = MIMO_V + 2 * 1024;
    /// Bytes of one v slot (both units).
    pub const V_SLOT_BYTES: u32 = 4096;
    /// Total dynamic shared memory, alignment slack included.
    pub const BYTES: u32 = V + 3 * V_SLOT_BYTES + ALIGN;

    /// The 16-byte piece at which piece `piece` (of 16) of raw staging row `row` (`4t + r`) is
    /// stored: the low three bits XORed with `2·(t mod 4) + (r mod 2)`, so that the producer's
    /// word loads (eight rows of distinct `(t mod 4, r mod 2)`, four words of one piece) fall on
    /// 32 distinct banks.
    pub const fn raw_piece(row: u32, piece: u32) -> u32 {
        piece ^ (2 * ((row / 4) % 4) + row % 2)
    }

    /// Byte offset of angle `a`'s `(cos, sin)` pair (`a < 32`) within a row of the cos/sin
    /// table: the producer thread of piece `p = a / 8` reads angles `8p..8p + 8` of a time as
    /// four 16-byte units `i = (a mod 8) / 2`, unit `(p, i)` at `16·(p mod 2 + 2·(i mod 2) +
    /// 4·(p / 2) + 8·(i / 2))`, so that the eight producer threads of one shared-memory phase
    /// (the four pieces at two times two apart, whose rows lie 34 units, 2 mod 8, apart) read
    /// eight distinct 16-byte bank groups.
    pub const fn cs_offset(a: u32) -> u32 {
        let (p, i) = (a / 8, (a % 8) / 2);
        16 * (p % 2 + 2 * (i % 2) + 4 * (p / 2) + 8 * (i / 2)) + 8 * (a % 2)
    }

    /// The first of the four columns whose biases lie at 16-byte unit `i` (< 32) of a
    /// [`BIAS`] entry: unit `i = 8g + 4h + p` holds columns `[0, 64, 32, 96][g] + 8p + 4h ..
    /// + 4` (`g < 2`: the rotated pairs `(c, 64 + c)`; `g ≥ 2`: biased only), so that the four
    /// pieces `p` a shared-memory phase reads fall on distinct bank groups.
    pub const fn bias_column(i: u32) -> u32 {
        let (g, h, p) = (i / 8, (i / 4) % 2, i % 4);
        64 * (g % 2) + 32 * (g / 2) + 8 * p + 4 * h
    }

    /// The row of the operand tiles that holds rank `r` of chunk time `t`: `16·(t/4) + 8·(r/2) +
    /// 2·(t mod 4) + (r mod 2)`. In an `m64n64` accumulator whose columns are such rows, each
    /// thread then holds all four ranks of four times (columns `8j + 2q + e`: time `4(j/2) + q`,
    /// rank `2(j mod 2) + e`), so the rank contraction needs no exchange between threads.
    pub const fn tile_row(t: u32, r: u32) -> u32 {
        16 * (t / 4) + 8 * (r / 2) + 2 * (t % 4) + r % 2
    }

    const _: () = {
        assert!(UNIT_BYTES.is_multiple_of(ALIGN) && S + 64 * 128 == UNIT_BYTES);
        assert!(16 * OUT_STRIDE <= 64 * 128);
        assert!(RAW.is_multiple_of(ALIGN) && RAW_BYTES.is_multiple_of(16));
        assert!(BYTES <= 227 * 1024);
    };
}

/// Shared-memory layout of the f32 warp-specialized forward (`forward_ws_f32_*`, compute
/// capability 9.0) for the tensor-core geometry (R = 4, N = 128, P = 64, Na = 32, C = 16, f32
/// activations), byte offsets from the dynamic shared base rounded up to [`forward_ws_f32_smem::ALIGN`].
/// A block runs one head of one batch row and segment. Each operand tile is a pair of binary16
/// tiles, `hi` and `lo` (`x = hi + 2⁻¹¹·lo`, the kernels' `f16_split`), laid out as the bf16
/// kernel's tiles ([`swizzle128_offset`]): the pair takes the bytes of one f32 tile. The raw f32 q
/// and k rows are staged once per chunk (single buffer: the producer stages chunk k + 1 once it
/// has filled chunk k's tiles); the cos/sin table is the producer's own, the per-chunk weights and
/// decays the consumer's.
pub mod forward_ws_f32_smem {
    /// Alignment of the layout's base and of every operand tile (the 128-byte swizzle group).
    pub const ALIGN: u32 = 1024;
    /// Rotated, biased q̂ `(64 rows, 128)`: `hi` binary16 tile, swizzled.
    pub const Q_HI: u32 = 0;
    /// q̂'s `lo` tile.
    pub const Q_LO: u32 = 16384;
    /// Rotated, biased k̂ `(64, 128)`: `hi` tile.
    pub const K_HI: u32 = 32768;
    /// k̂'s `lo` tile.
    pub const K_LO: u32 = 49152;
    /// Up-projected x `(64, 64)`: `hi` tile (the consumer's own).
    pub const X_HI: u32 = 65536;
    /// x's `lo` tile.
    pub const X_LO: u32 = 73728;
    /// x scaled by the state-pass key scale `exp(Ā_i)·c_i` `(64, 64)`: `hi` tile.
    pub const XW_HI: u32 = 81920;
    /// x_w's `lo` tile.
    pub const XW_LO: u32 = 90112;
    /// Weighted scores `(64, 64)`: `hi` tile.
    pub const S_HI: u32 = 98304;
    /// The weighted scores' `lo` tile.
    pub const S_LO: u32 = 106496;
    /// The consumer's output rows `(16, 64)` f32 at a row stride of [`OUT_STRIDE`], in the
    /// score tiles (written once every consumer warp is past the intra-chunk product's wait).
    pub const OUT: u32 = S_HI;
    /// Row stride of the output rows (64 f32 and 16 bytes of padding).
    pub const OUT_STRIDE: u32 = 272;
    /// Raw staging (one buffer): raw q rows `(64, 128)` f32 at +0 and raw k rows at [`RAW_K`],
    /// row `4t + r`, 16-byte pieces placed by [`raw_piece`].
    pub const RAW: u32 = 114688;
    /// Offset of the raw k rows in the staging buffer.
    pub const RAW_K: u32 = 32768;
    /// Raw v rows `(16, 64)` f32 in three slots (chunk mod 3), at `V + slot·V_SLOT_BYTES`.
    pub const V: u32 = RAW + 2 * RAW_K;
    /// Bytes of one v slot.
    pub const V_SLOT_BYTES: u32 = 4096;
    /// Score weights `(16, 16)` f32 per chunk parity, at `WT + parity·1024` (the consumer's).
    pub const WT: u32 = V + 3 * V_SLOT_BYTES;
    /// `exp(A_i)` `(16)` f32 and the chunk decay `exp(A_last)` at `[16]`, at `EXPA + parity·128`.
    pub const EXPA: u32 = WT + 2 * 1024;
    /// The key scales `exp(Ā_i)·c_i` `(16)` f32 at `KSCALE + parity·64`.
    pub const KSCALE: u32 = EXPA + 2 * 128;
    /// `(cos θ, sin θ)` of angle `a` as 8 bytes at `CS + parity·16·CS_STRIDE + t·CS_STRIDE +`
    /// `forward_ws_smem::cs_offset(a)` (the producer's own: it forms a chunk's angles and then
    /// rotates that chunk's rows).
    pub const CS: u32 = KSCALE + 2 * 64;
    /// Row stride of the cos/sin table.
    pub const CS_STRIDE: u32 = super::forward_ws_smem::CS_STRIDE;
    /// The f32 biases per rank and tensor (q, k), 512 bytes at `BIAS + (2r + tensor)·512`, the
    /// four columns of `forward_ws_smem::bias_column(i)` at `+16i` (producer only).
    pub const BIAS: u32 = CS + 2 * 16 * CS_STRIDE;
    /// mimo_z and mimo_o of the output columns: for column `p` the 8 f32 `mimo_z[r][p]` (r < 4)
    /// then `mimo_o[r][p]`, 32 bytes at `MIMO_ZO + 32p`.
    pub const MIMO_ZO: u32 = BIAS + 8 * 512;
    /// mimo_v of the consumer's x columns: for the column pair `2l`, `2l + 1` the 8 f32
    /// `mimo_v[r][2l + e]` at `MIMO_V + 32l + 8r + 4e`.
    pub const MIMO_V: u32 = MIMO_ZO + 2048;
    /// Total dynamic shared memory, alignment slack included.
    pub const BYTES: u32 = MIMO_V + 1024 + ALIGN;

    /// The 16-byte piece at which piece `piece` (of 32) of raw staging row `row` (`4t + r`) is
    /// stored: bit 0 flipped on rows whose `(row / 8)` is odd, so that the producer's loads (four
    /// pieces of rows 8 apart per shared-memory phase) fall on 8 distinct bank groups.
    pub const fn raw_piece(row: u32, piece: u32) -> u32 {
        piece ^ ((row / 8) % 2)
    }

    const _: () = {
        assert!(S_LO + 8192 == RAW && RAW.is_multiple_of(ALIGN));
        assert!(16 * OUT_STRIDE <= 8192 && OUT_STRIDE.is_multiple_of(16));
        assert!(BYTES <= 227 * 1024);
    };
}

/// Shared-memory layout of the f32 tensor-core forward (`forward_mma_f32_*`, three-pass TF32) for
/// the same geometry as [`forward_mma_smem`], byte offsets from the dynamic shared base. The q̂
/// and k̂ tiles also receive the next chunk's raw q and k rows (rotated in place), and x and the
/// state-pass x are formed from the raw v rows as the products read them, so two blocks still fit
/// one SM. Row strides: q̂/k̂ 136 f32 (a multiple of 8 words past 128: the 8-byte fragment loads of
/// a half-warp fall on 32 distinct banks), weighted scores 68 f32 (4 words past 64: the scalar
/// fragment loads of a warp fall on 32 distinct banks).
pub mod forward_tf32_smem {
    /// Row stride in bytes of the q̂ and k̂ tiles.
    pub const QK_STRIDE: u32 = 136 * 4;
    /// Row stride in bytes of the weighted score tile.
    pub const W_STRIDE: u32 = 68 * 4;
    /// Rotated, biased q̂ `(64 rows, 128)` f32; the next chunk's raw q rows once the chunk's
    /// products are done.
    pub const Q: u32 = 0;
    /// Rotated, biased k̂ `(64, 128)` f32; the next chunk's raw k rows likewise.
    pub const K: u32 = Q + 64 * QK_STRIDE;
    /// Weighted scores `(64, 64)` f32.
    pub const W: u32 = K + 64 * QK_STRIDE;
    /// Two banks (chunk parity) of raw v and z rows `(16, 64)` f32 each: v at +0, z at +4096.
    pub const BANK: u32 = W + 64 * W_STRIDE;
    /// Bytes of one bank.
    pub const BANK_BYTES: u32 = 8192;
    /// `(cos θ, sin θ)` of the chunk `(16 times, 32 angles)` f32 pairs; the epilogue's per-warp
    /// partial sums of squares `(4, 64 rows)` f32 in fused-norm mode (after the rotation).
    pub const CS: u32 = BANK + 2 * BANK_BYTES;
    /// Per-warp partial sums of squares (fused-norm mode), sharing [`CS`]'s bytes.
    pub const NORM: u32 = CS;
    /// Carried angle totals `(32)` f64.
    pub const THETA: u32 = CS + 16 * 32 * 8;
    /// Per-warp angle-increment totals `(4, 32)` f64.
    pub const TOT: u32 = THETA + 32 * 8;
    /// Two banks (chunk parity) of token scalars `(5, 16)` f32, as in [`forward_mma_smem::SCAL`].
    pub const SCAL: u32 = TOT + 4 * 32 * 8;
    /// Bytes of one bank of token scalars.
    pub const SCAL_BYTES: u32 = 5 * 16 * 4;
    /// Score weights `(16, 16)` f32; k̂₀ of an initial state `(R, N)` f32 occupies it and the 1 KB
    /// after it ([`INIT_K`]) until the first chunk's weights.
    pub const WT: u32 = SCAL + 2 * SCAL_BYTES;
    /// k̂₀ of an initial state `(4, 128)` f32 (2 KB from [`WT`]).
    pub const INIT_K: u32 = WT;
    /// The identity rotation `(1, 0, 1, 0)` f32.
    pub const IDENT: u32 = WT + 2 * 16 * 16 * 4;
    /// Total dynamic shared memory (two blocks fit one H100/H200 SM).
    pub const BYTES: u32 = IDENT + 16;
}

/// Parameters of one chunked forward call (spec §2.2) over `seq_len` tokens from a zero state, or
/// from the initial state of [`ForwardParams::init_theta`] and the three pointers after it.
///
/// Layouts (row-major; `X` = the input dtype, bf16 or f32):
/// q, k `(B,S,R,G,N)` X; v, z `(B,S,H,P)` X; trap `(B,H,S)` X; dt, adt `(B,H,S)` f32;
/// angles `(B,S,H,Na)` f32 raw logits (the kernel forms the cumulative angles itself);
/// q_bias, k_bias `(H,R,N)`, mimo_v/z/o `(H,R,P)`, d `(H)`, norm_weight `(H,P)` f32.
/// Output `(B,S,H,P)` X, or `(B,S,R,H,P)` in prereduce mode.
/// Final states, each written only when its pointer is non-zero: theta `(B,H,Na)` f32 in
/// [0, 2π); ssm `(B,H,P,N)` f32; k `(B,R,H,N)` X (rotated, biased k̂ of token S−1); v `(B,H,P)`
/// X (raw v of token S−1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ForwardParams {
    /// q `(B,S,R,G,N)`.
    pub q: u64,
    /// k `(B,S,R,G,N)`.
    pub k: u64,
    /// v `(B,S,H,P)`.
    pub v: u64,
    /// z `(B,S,H,P)` or 0.
    pub z: u64,
    /// Raw trap logits `(B,H,S)`.
    pub trap: u64,
    /// Step sizes `(B,H,S)`, f32.
    pub dt: u64,
    /// Log decays `(B,H,S)`, f32.
    pub adt: u64,
    /// Raw angle logits `(B,S,H,Na)`, f32.
    pub angles: u64,
    /// `(H,R,N)` f32.
    pub q_bias: u64,
    /// `(H,R,N)` f32.
    pub k_bias: u64,
    /// `(H,R,P)` f32.
    pub mimo_v: u64,
    /// `(H,R,P)` f32 or 0 (must be set iff z is).
    pub mimo_z: u64,
    /// `(H,R,P)` f32, or 0 in prereduce mode.
    pub mimo_o: u64,
    /// `(H)` f32 or 0.
    pub d: u64,
    /// `(H,P)` f32 or 0 (weight 1; fused-norm mode only).
    pub norm_weight: u64,
    /// Output, see the struct docs.
    pub out: u64,
    /// Final θ `(B,H,Na)` f32, or 0.
    pub final_theta: u64,
    /// Final SSM state `(B,H,P,N)` f32, or 0.
    pub final_ssm: u64,
    /// Final k̂ `(B,R,H,N)` X, or 0.
    pub final_k: u64,
    /// Final raw v `(B,H,P)` X, or 0.
    pub final_v: u64,
    /// Batch rows B.
    pub batch: u32,
    /// Tokens S (≥ 1).
    pub seq_len: u32,
    /// MIMO rank R (must equal the kernel's compile-time rank).
    pub rank: u32,
    /// Value heads H.
    pub heads: u32,
    /// q/k groups G (divides H).
    pub groups: u32,
    /// State size N (even).
    pub n: u32,
    /// Head dim P.
    pub p: u32,
    /// Rotary angles Na (≤ N/2).
    pub na: u32,
    /// Chunk size C (≥ 1).
    pub chunk: u32,
    /// One of [`output_mode`].
    pub mode: u32,
    /// One of [`rotation`].
    pub rotation: u32,
    /// RMSNorm epsilon (fused-norm mode).
    pub norm_eps: f32,
    /// 1 when the dynamic shared memory also holds the staging region of [`ForwardStage`] (raw
    /// q, k, v of the next chunk, copied while the current one computes), 0 when it does not fit.
    pub staged: u32,
    /// Sequence segments K per (b, h) row: grid y is `B·K`, block y covers batch row `y / K` and
    /// segment `y % K` (the warp-specialized forward: grid `(H/2, B, K)`, batch row `y`, segment
    /// `z`), the chunks `[s·seg_chunks, (s+1)·seg_chunks)` of the sequence. 1 (or 0):
    /// one block walks the whole sequence from a zero state (no hand-off buffers).
    pub segments: u32,
    /// Chunks per segment (used when `segments > 1`).
    pub seg_chunks: u32,
    /// Batch rows between the units one block walks (the batch-walking short-call kernel
    /// `forward_mma_units_*` only: grid y is this stride, block y runs batch rows y, y + stride,
    /// … < B in turn). 0 elsewhere.
    pub unit_stride: u32,
    /// Segment hand-off states `(B,H,K−1,P,N)` f32 (when `segments > 1`): the segment-state pass
    /// writes segment s's end state from a zero start in its local angle frame into slot s;
    /// [`SegmentCombineParams`]'s pass turns slot s into the true state at the end of segment s,
    /// which the forward's segment s+1 starts from.
    pub seg_state: u64,
    /// Segment angle totals `(B,H,K−1,Na)`, each as the f32 pair `(hi, lo)` with value `hi + lo`
    /// (~2^-48 relative), reduced into [0, 2π): the local total of segment s, then (after the
    /// combine pass) the true θ at its end.
    pub seg_theta: u64,
    /// Segment decays `(B,H,K−1)` f32: the product of segment s's chunk decays `exp(A_last)`.
    pub seg_decay: u64,
    /// Initial θ `(B,H,Na)` f32 (any real; a decode state keeps it in [0, 2π)), or 0 for a
    /// sequence that starts from a zero state. The four `init_*` pointers are all set or all 0;
    /// they are read only by the blocks of segment 0 and must not overlap the final states when
    /// `segments > 1` (with one segment each block reads its (b, h) before writing it, so a
    /// decode state may be advanced in place).
    pub init_theta: u64,
    /// Initial SSM state `(B,H,P,N)` f32 (with `init_theta`).
    pub init_ssm: u64,
    /// Rotated, biased k̂ of the token before the first `(B,R,H,N)` X (with `init_theta`): its
    /// trapezoidal term `(1 − σ(trap₀))·Δ₀·Σ_r (v₀·mimo_v_r) k̂_r` enters the first update.
    pub init_k: u64,
    /// Raw v of the token before the first `(B,H,P)` X (with `init_theta`).
    pub init_v: u64,
    /// Backward checkpoints (tensor-core kernels with checkpoints only, else 0): the state
    /// entering every chunk of C tokens, `(B,H,⌈S/C⌉,P,N)` bf16, 16-byte aligned.
    pub ckpt_state: u64,
    /// Backward checkpoints: θ entering every chunk, `(B,H,⌈S/C⌉,Na,2)` f32 `(hi, lo)` pairs.
    pub ckpt_theta: u64,
}

/// Threads per block of the segment combine kernel.
pub const SEGMENT_COMBINE_THREADS: u32 = 256;

/// Parameters of the segment combine pass (one block per (head, batch row), grid `(H, B)`,
/// [`SEGMENT_COMBINE_THREADS`] threads, dynamic shared memory
/// [`segment_combine_smem_bytes`]`(K, Na)`): walks the K−1 hand-off slots of [`ForwardParams`] in
/// order, `S_end(s) = decay(s)·S_end(s−1) + Rot(θ_end(s−1))·S_local(s)` and
/// `θ_end(s) = θ_end(s−1) + θ_local(s)` (mod 2π), in place.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SegmentCombineParams {
    /// [`ForwardParams::seg_state`].
    pub seg_state: u64,
    /// [`ForwardParams::seg_theta`].
    pub seg_theta: u64,
    /// [`ForwardParams::seg_decay`].
    pub seg_decay: u64,
    /// Value heads H.
    pub heads: u32,
    /// Segments K (≥ 2; the buffers hold K−1 slots per row).
    pub segments: u32,
    /// State size N (even).
    pub n: u32,
    /// Head dim P.
    pub p: u32,
    /// Rotary angles Na.
    pub na: u32,
    /// One of [`rotation`].
    pub rotation: u32,
}

/// Dynamic shared memory of the segment combine kernel: `cos`, `sin` of every slot's start angle,
/// `(K−1, Na)` f32 each.
pub const fn segment_combine_smem_bytes(segments: u32, na: u32) -> u32 {
    8 * segments.saturating_sub(1) * na
}

/// The forward kernel pads the chunk to a multiple of this many time steps for rank `r`, so that
/// the rank-flattened rows `cp·r` are a whole number of its 4-row score tiles.
pub const fn forward_tile_times(r: u32) -> u32 {
    if r >= 4 || r == 0 {
        1
    } else {
        4 / r
    }
}

/// Shared-memory regions of the chunked forward kernel, offsets in f32 elements (each region
/// 16-byte aligned), with the padded sizes and row strides the kernel uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardSmem {
    /// N rounded up to a multiple of 4 (padding columns are zero).
    pub n4: u32,
    /// P rounded up to a multiple of 4 (padding columns are zero).
    pub p4: u32,
    /// C rounded up to a multiple of [`forward_tile_times`] (padding rows are zero).
    pub cp: u32,
    /// Rank-flattened rows of a chunk, `cp·R`.
    pub rows: u32,
    /// Row stride of q̂, k̂ and the state: `n4 + 4` (keeps 16-byte row reads conflict-free).
    pub n_stride: u32,
    /// Row stride of the scores: `rows + 4` (keeps `ldmatrix` row reads conflict-free).
    pub w_stride: u32,
    /// Carried state `Sᵀ` `(p4, n_stride)`, p-major.
    pub state: u32,
    /// Rotated, biased q̂ of the chunk `(rows, n_stride)`.
    pub q: u32,
    /// Rotated, biased k̂ of the chunk `(rows, n_stride)`.
    pub k: u32,
    /// Up-projected values x `(rows, p4)`.
    pub x: u32,
    /// Raw per-rank outputs y `(rows, p4)`.
    pub y: u32,
    /// Raw scores `q̂·k̂` `(rows, w_stride)`.
    pub w: u32,
    /// Score weights per pair of times `(cp, cp)`: `c_{i'}·exp(A_i − A_{i'})` below the
    /// diagonal, `γ_i` on it, 0 above.
    pub seg: u32,
    /// Chunk-local inclusive log-decay prefix `A_i` `(cp)`.
    pub a_cs: u32,
    /// `exp(A_i)` `(cp)`.
    pub exp_a: u32,
    /// `γ_i` `(cp)`.
    pub gamma: u32,
    /// Key scale `c_i = γ_i + ε_{i+1}` `(cp)`.
    pub c_scale: u32,
    /// State-pass key scale `exp(Ā_i)·c_i` `(cp)`.
    pub k_scale: u32,
    /// Raw log decays `adt` of the chunk `(cp)`.
    pub adt: u32,
    /// `ε_u = Δ_u·σ(−trap_u)` of chunk token u for u in 1..=len `(cp + 1)`.
    pub eps: u32,
    /// Per-row inverse RMS `(rows)` (fused-norm mode).
    pub rstd: u32,
    /// `cos θ` `(cp, Na)`.
    pub cos: u32,
    /// `sin θ` `(cp, Na)`.
    pub sin: u32,
    /// Carried angle totals, f64 bit patterns `(Na)` (two f32 slots each).
    pub theta: u32,
    /// Total size in f32 elements.
    pub total: u32,
}

impl ForwardSmem {
    /// The layout for rank `r`, state size `n`, head dim `p`, angles `na`, chunk size `chunk`.
    /// Callers keep the sizes small enough that no offset overflows (the host checks the byte
    /// count against the device limit, far below `u32::MAX`).
    pub const fn new(r: u32, n: u32, p: u32, na: u32, chunk: u32) -> Self {
        let tt = forward_tile_times(r);
        let n4 = align4(n);
        let p4 = align4(p);
        let cp = chunk.div_ceil(tt) * tt;
        let rows = cp * r;
        let n_stride = n4 + 4;
        let w_stride = rows + 4;
        let state = 0;
        let q = state + align4(p4 * n_stride);
        let k = q + align4(rows * n_stride);
        let x = k + align4(rows * n_stride);
        let y = x + align4(rows * p4);
        let w = y + align4(rows * p4);
        let seg = w + align4(rows * w_stride);
        let a_cs = seg + align4(cp * cp);
        let exp_a = a_cs + align4(cp);
        let gamma = exp_a + align4(cp);
        let c_scale = gamma + align4(cp);
        let k_scale = c_scale + align4(cp);
        let adt = k_scale + align4(cp);
        let eps = adt + align4(cp);
        let rstd = eps + align4(cp + 1);
        let cos = rstd + align4(rows);
        let sin = cos + align4(cp * na);
        let theta = sin + align4(cp * na);
        let total = theta + align4(2 * na);
        ForwardSmem {
            n4,
            p4,
            cp,
            rows,
            n_stride,
            w_stride,
            state,
            q,
            k,
            x,
            y,
            w,
            seg,
            a_cs,
            exp_a,
            gamma,
            c_scale,
            k_scale,
            adt,
            eps,
            rstd,
            cos,
            sin,
            theta,
            total,
        }
    }

    /// Size in bytes.
    pub const fn bytes(&self) -> u32 {
        4 * self.total
    }
}

/// Dynamic shared memory of the chunked forward kernel in bytes, computed in u64 so that any
/// sizes give a finite answer (compare it with the device's opt-in limit before launching).
pub const fn forward_smem_bytes(r: u64, n: u64, p: u64, na: u64, chunk: u64) -> u64 {
    const fn a4(x: u64) -> u64 {
        x.saturating_add(3) / 4 * 4
    }
    const fn mul(a: u64, b: u64) -> u64 {
        a.saturating_mul(b)
    }
    let tt = if r >= 4 || r == 0 { 1 } else { 4 / r };
    let n4 = a4(n);
    let p4 = a4(p);
    let cp = mul(chunk.div_ceil(tt), tt);
    let rows = mul(cp, r);
    let ns = n4.saturating_add(4);
    let parts = [
        a4(mul(p4, ns)),
        mul(2, a4(mul(rows, ns))),
        mul(2, a4(mul(rows, p4))),
        a4(mul(rows, rows.saturating_add(4))),
        a4(mul(cp, cp)),
        mul(6, a4(cp)),
        a4(cp.saturating_add(1)),
        a4(rows),
        mul(2, a4(mul(cp, na))),
        a4(mul(2, na)),
    ];
    let mut floats = 0u64;
    let mut i = 0;
    while i < parts.len() {
        floats = floats.saturating_add(parts[i]);
        i += 1;
    }
    mul(4, floats)
}

/// The optional staging region of the chunked forward kernel, after the [`ForwardSmem`] regions:
/// the raw (unbiased, unrotated) q and k rows `(cp·R, N)` and v rows `(cp, P)` of a chunk in the
/// activation dtype, each row padded to 16 bytes so that it is filled by 16-byte `cp.async`
/// copies. Offsets in bytes from the start of the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardStage {
    /// Bytes per q / k row: `N·elem_bytes` rounded up to 16.
    pub n_row: u32,
    /// Bytes per v row: `P·elem_bytes` rounded up to 16.
    pub p_row: u32,
    /// Raw q rows.
    pub q: u32,
    /// Raw k rows.
    pub k: u32,
    /// Raw v rows.
    pub v: u32,
    /// Size in bytes.
    pub bytes: u32,
}

impl ForwardStage {
    /// The staging region for rank `r`, state size `n`, head dim `p`, chunk size `chunk` and
    /// activations of `elem_bytes` bytes (same overflow caveat as [`ForwardSmem::new`]).
    pub const fn new(r: u32, n: u32, p: u32, chunk: u32, elem_bytes: u32) -> Self {
        let lay = ForwardSmem::new(r, n, p, 0, chunk);
        let n_row = (n * elem_bytes).div_ceil(16) * 16;
        let p_row = (p * elem_bytes).div_ceil(16) * 16;
        let q = 0;
        let k = q + lay.rows * n_row;
        let v = k + lay.rows * n_row;
        let bytes = v + lay.cp * p_row;
        ForwardStage {
            n_row,
            p_row,
            q,
            k,
            v,
            bytes,
        }
    }
}

/// Bytes of the staging region ([`ForwardStage`]) in u64, saturating like [`forward_smem_bytes`].
pub const fn forward_stage_bytes(r: u64, n: u64, p: u64, chunk: u64, elem_bytes: u64) -> u64 {
    let tt = if r >= 4 || r == 0 { 1 } else { 4 / r };
    let cp = chunk.div_ceil(tt).saturating_mul(tt);
    let rows = cp.saturating_mul(r);
    let n_row = n.saturating_mul(elem_bytes).saturating_add(15) / 16 * 16;
    let p_row = p.saturating_mul(elem_bytes).saturating_add(15) / 16 * 16;
    rows.saturating_mul(n_row)
        .saturating_mul(2)
        .saturating_add(cp.saturating_mul(p_row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_core_backward_layout_keeps_vector_alignment() {
        use backward_mma_smem as L;
        // Regions read or written in 16-byte pieces (`ldmatrix` rows, `cp.async`, v4 stores).
        for (name, at) in [
            ("QH", L::QH),
            ("KH", L::KH),
            ("HS", L::HS),
            ("GS", L::GS),
            ("X", L::X),
            ("DL", L::DL),
            ("DLA", L::DLA),
            ("WS", L::WS),
            ("WD", L::WD),
            ("RAW_Q", L::RAW_Q),
            ("RAW_K", L::RAW_K),
            ("BANK", L::BANK),
            ("Y", L::Y),
            ("CS", L::CS),
            ("TOT", L::TOT),
            ("ACC_QB", L::ACC_QB),
            ("IDENT", L::IDENT),
        ] {
            assert_eq!(at % 16, 0, "{name} at {at}");
        }
        for stride in [L::QK_STRIDE, L::X_STRIDE, L::Y_STRIDE, L::BANK_BYTES] {
            assert_eq!(stride % 16, 0);
        }
        // ldmatrix: the eight 16-byte rows of a matrix on distinct banks.
        for stride in [L::QK_STRIDE, L::X_STRIDE] {
            let mut seen = [false; 8];
            for r in 0..8 {
                seen[((r * stride / 16) % 8) as usize] = true;
            }
            assert!(seen.iter().all(|&s| s), "stride {stride}");
        }
    }

    #[test]
    fn backward_slots_saturating_length_matches_layout() {
        for r in [1u32, 2, 4, 8] {
            for n in [2u32, 16, 130, 512] {
                for p in [1u32, 3, 64, 256] {
                    assert_eq!(
                        backward::BackwardSlots::len_saturating(r as u64, n as u64, p as u64),
                        backward::BackwardSlots::new(r, n, p).len as u64
                    );
                }
            }
        }
        assert_eq!(
            backward::BackwardSlots::len_saturating(u64::MAX, 2, 2),
            u64::MAX
        );
    }

    #[test]
    fn advanced_descriptors_equal_the_ones_formed_afresh() {
        use swizzle128::*;
        // Every 1024-byte aligned tile start of a 228 KB shared window (and the top of the
        // 256 KB the start field can address), every K step of the kernels' operands.
        let tiles = (0..228 * 1024u32)
            .step_by(1024)
            .chain([(1 << 18) - 64 * 1024]);
        for tile in tiles {
            for rows in [64u32, 128] {
                for k0 in (0..128u32).step_by(16) {
                    assert_eq!(
                        advance(k_major(tile, rows, 0), k_major_offset(rows, k0)),
                        k_major(tile, rows, k0),
                        "K-major tile {tile} rows {rows} k0 {k0}"
                    );
                }
            }
            for k0 in (0..64u32).step_by(16) {
                assert_eq!(
                    advance(mn_major(tile, 64, 0), mn_major_offset(k0)),
                    mn_major(tile, 64, k0),
                    "MN-major tile {tile} k0 {k0}"
                );
            }
        }
    }

    #[test]
    fn swizzled_rows_and_ldmatrix_rows_fall_on_distinct_banks() {
        // (The placement of the swizzled tiles is checked at compile time in the layout.)
        // The swizzle: a warp's 32 words along a row, and the eight 16-byte rows of an
        // `ldmatrix` matrix (rows r0..r0+8, one logical piece), each on distinct banks.
        let bank = |addr: u32| (addr / 4) % 32;
        for row in 0..64u32 {
            let mut seen = [false; 32];
            for word in 0..32u32 {
                seen[bank(swizzle128_offset(64, row, 2 * word)) as usize] = true;
            }
            assert!(seen.iter().all(|&s| s), "row {row}");
        }
        for r0 in (0..64u32).step_by(8) {
            for piece in 0..16u32 {
                let mut seen = [false; 8];
                for r in r0..r0 + 8 {
                    seen[(bank(swizzle128_offset(64, r, 8 * piece)) / 4) as usize] = true;
                }
                assert!(seen.iter().all(|&s| s), "rows {r0}.. piece {piece}");
            }
        }
    }

    #[test]
    fn tensor_core_forward_half_split_words_fall_on_distinct_banks() {
        use forward_mma_smem as L;
        // Phase R's balanced half-split assignment: lane l (m = l mod 16) rotates the words of
        // columns 2m and 64 + 2m of q (lanes 0–15) or k (lanes 16–31) and biases those of
        // columns 32 + 2m and 96 + 2m of the other; every 4-byte load and store of a row is one
        // instruction across the warp and should touch each bank once, in the raw staging rows
        // and in the q̂/k̂ tiles.
        let bank = |addr: u32| (addr / 4) % 32;
        for rho in 0..64u32 {
            for (tile_q, tile_k, stride) in [(L::Q, L::K, L::QK_STRIDE), (L::RAW_Q, L::RAW_K, 256)]
            {
                for pair in 0..2u32 {
                    for hi in [0u32, 128] {
                        let mut seen = [false; 32];
                        for lane in 0..32u32 {
                            let (m, upper) = (lane % 16, lane >= 16);
                            let is_k = if pair == 0 { upper } else { !upper };
                            let col = 2 * m + 32 * pair;
                            let tile = if is_k { tile_k } else { tile_q };
                            seen[bank(tile + rho * stride + 2 * col + hi) as usize] = true;
                        }
                        assert!(seen.iter().all(|&s| s), "row {rho} pair {pair} +{hi}");
                    }
                }
            }
        }
    }

    #[test]
    fn forward_smem_formula_matches_layout() {
        for r in [1u32, 2, 4, 8] {
            for n in [2u32, 6, 16, 64, 128, 256] {
                for p in [1u32, 3, 32, 64, 128] {
                    for chunk in [1u32, 3, 8, 16, 64] {
                        let na = n / 4;
                        let lay = ForwardSmem::new(r, n, p, na, chunk);
                        for eb in [2u32, 4] {
                            assert_eq!(
                                ForwardStage::new(r, n, p, chunk, eb).bytes as u64,
                                forward_stage_bytes(
                                    r as u64,
                                    n as u64,
                                    p as u64,
                                    chunk as u64,
                                    eb as u64
                                )
                            );
                        }
                        assert_eq!(
                            lay.bytes() as u64,
                            forward_smem_bytes(
                                r as u64,
                                n as u64,
                                p as u64,
                                na as u64,
                                chunk as u64
                            )
                        );
                        assert_eq!(
                            lay.rows % 4,
                            0,
                            "rows keep 16-byte row alignment of the scores"
                        );
                    }
                }
            }
        }
        // Upstream's tuned geometry: N=128, P=64, R=4, C=16, Na=32.
        assert_eq!(
            forward_smem_bytes(4, 128, 64, 32, 16),
            ForwardSmem::new(4, 128, 64, 32, 16).bytes() as u64
        );
        assert_eq!(
            forward_smem_bytes(u64::MAX, u64::MAX, u64::MAX, u64::MAX, u64::MAX),
            u64::MAX
        );
    }
}
