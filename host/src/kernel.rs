//! The table of every kernel entry point in [`crate::PTX`].

/// One entry point of the PTX module. Every launch names its kernel through this table, so the
/// host can list what exists, check it against the PTX, and cache one function handle per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kernel {
    /// One `mma.m16n8k16` bf16→f32 (self-test).
    PrimMmaBf16M16n8k16,
    /// One `mma.m16n8k8` tf32→f32 (self-test).
    PrimMmaTf32M16n8k8,
    /// `ldmatrix .x4` / `.x4.trans` round trip (self-test).
    PrimLdmatrixX4,
    /// `cp.async` + `wait_group` round trip (self-test).
    PrimCpAsync,
    /// Warp inclusive scan of affine maps (self-test).
    PrimWarpScan,
    /// Range-reduced `sincos` (self-test).
    PrimSincos,
    /// Eight `wgmma.m64n128k16` bf16→f32 from swizzled shared tiles (self-test; compute
    /// capability 9.0 only).
    PrimWgmmaBf16M64n128k128,
    /// Eight k16 steps of `wgmma.m64n64k16` binary16 passes on f32 operands split into `hi` and
    /// `lo` (self-test and accumulation probe; compute capability 9.0 only).
    PrimWgmmaF16SplitM64n64k128,
    /// Decode, f32 activations, rank 1.
    DecodeF32R1,
    /// Decode, f32 activations, rank 2.
    DecodeF32R2,
    /// Decode, f32 activations, rank 4.
    DecodeF32R4,
    /// Decode, f32 activations, rank 8.
    DecodeF32R8,
    /// Decode, bf16 activations, rank 1.
    DecodeBf16R1,
    /// Decode, bf16 activations, rank 2.
    DecodeBf16R2,
    /// Decode, bf16 activations, rank 4.
    DecodeBf16R4,
    /// Decode, bf16 activations, rank 8.
    DecodeBf16R8,
    /// Register-resident decode, f32 activations, rank 1.
    DecodeRowsF32R1,
    /// Register-resident decode, f32 activations, rank 2.
    DecodeRowsF32R2,
    /// Register-resident decode, f32 activations, rank 4.
    DecodeRowsF32R4,
    /// Register-resident decode, f32 activations, rank 8.
    DecodeRowsF32R8,
    /// Register-resident decode, bf16 activations, rank 1.
    DecodeRowsBf16R1,
    /// Register-resident decode, bf16 activations, rank 2.
    DecodeRowsBf16R2,
    /// Register-resident decode, bf16 activations, rank 4.
    DecodeRowsBf16R4,
    /// Register-resident decode, bf16 activations, rank 8.
    DecodeRowsBf16R8,
    /// Streaming decode (one token, a warp per row range), f32 activations, rank 1.
    DecodeStreamF32R1,
    /// Streaming decode (one token, a warp per row range), f32 activations, rank 2.
    DecodeStreamF32R2,
    /// Streaming decode (one token, a warp per row range), f32 activations, rank 4.
    DecodeStreamF32R4,
    /// Streaming decode (one token, a warp per row range), f32 activations, rank 8.
    DecodeStreamF32R8,
    /// Streaming decode (one token, a warp per row range), bf16 activations, rank 1.
    DecodeStreamBf16R1,
    /// Streaming decode (one token, a warp per row range), bf16 activations, rank 2.
    DecodeStreamBf16R2,
    /// Streaming decode (one token, a warp per row range), bf16 activations, rank 4.
    DecodeStreamBf16R4,
    /// Streaming decode (one token, a warp per row range), bf16 activations, rank 8.
    DecodeStreamBf16R8,
    /// Decode (state tile in shared memory) instantiated for one geometry (R=4, N=128, P=64, Na=32), f32 activations.
    DecodeFixedF32R4N128P64Na32,
    /// Decode (state tile in shared memory) instantiated for one geometry (R=4, N=128, P=64, Na=32), bf16 activations.
    DecodeFixedBf16R4N128P64Na32,
    /// Tensor-core decode of one token (the state as `mma` accumulators), bf16 activations,
    /// R=4, N=128, P=64, any Na ≤ 64.
    DecodeMmaBf16R4N128P64,
    /// [`Kernel::DecodeMmaBf16R4N128P64`] whose blocks ask L2 for their call's inputs and state
    /// before the dependent-launch wait (grids that fit the GPU at once).
    DecodeMmaPrefetchBf16R4N128P64,
    /// Tensor-core decode of 1–8 tokens in chunk form (one chunk of the SSD decomposition
    /// started from the state held as `mma` accumulators), bf16, R = 4, N = 128, P = 64.
    DecodeMmaChunkBf16R4N128P64,
    /// Tensor-core decode over T ≥ 1 tokens, the state held in the accumulators across them
    /// (bf16, R = 4, N = 128, P = 64).
    DecodeMmaTokensBf16R4N128P64,
    /// Register-resident decode instantiated for one geometry (R=4, N=128, P=64, Na=32), f32 activations.
    DecodeRowsFixedF32R4N128P64Na32,
    /// Register-resident decode instantiated for one geometry (R=4, N=128, P=64, Na=32), bf16 activations.
    DecodeRowsFixedBf16R4N128P64Na32,
    /// Streaming decode instantiated for one geometry (R=4, N=128, P=64, Na=32), bf16 activations.
    DecodeStreamFixedBf16R4N128P64Na32,
    /// Chunked forward, FMA path, f32 activations, rank 1.
    ForwardFmaF32R1,
    /// Chunked forward, FMA path, f32 activations, rank 2.
    ForwardFmaF32R2,
    /// Chunked forward, FMA path, f32 activations, rank 4.
    ForwardFmaF32R4,
    /// Chunked forward, FMA path, f32 activations, rank 8.
    ForwardFmaF32R8,
    /// Chunked forward, FMA path, bf16 activations, rank 1.
    ForwardFmaBf16R1,
    /// Chunked forward, FMA path, bf16 activations, rank 2.
    ForwardFmaBf16R2,
    /// Chunked forward, FMA path, bf16 activations, rank 4.
    ForwardFmaBf16R4,
    /// Chunked forward, FMA path, bf16 activations, rank 8.
    ForwardFmaBf16R8,
    /// Chunked forward instantiated for one geometry (R=4, N=128, P=64, Na=32, C=16), f32
    /// activations.
    ForwardFixedF32R4N128P64Na32C16,
    /// Chunked forward instantiated for one geometry (R=4, N=128, P=64, Na=32, C=16), bf16
    /// activations.
    ForwardFixedBf16R4N128P64Na32C16,
    /// Chunked forward on bf16 tensor cores (`mma.m16n8k16`, state in registers), bf16, R=4,
    /// N=128, P=64, Na=32, C=16.
    ForwardMmaBf16R4N128P64Na32C16,
    /// [`Kernel::ForwardMmaBf16R4N128P64Na32C16`] with its score and state products on `wgmma`
    /// (compute capability 9.0 only; [`Kernel::wgmma_twin`]).
    ForwardWgBf16R4N128P64Na32C16,
    /// The warp-specialized bf16 forward (compute capability 9.0 only: `wgmma`, `setmaxnreg`):
    /// three warpgroups per block, a producer staging and rotating the operands of two heads and a
    /// consumer per head running its products on `wgmma` with the state as accumulators; R=4,
    /// N=128, P=64, Na=32, C=16, half-split rotation, gated output ([`FixedForward::warp_specialized`]).
    ForwardWsBf16R4N128P64Na32C16,
    /// [`Kernel::ForwardWsBf16R4N128P64Na32C16`] that also writes the tensor-core backward's
    /// checkpoints (the state and θ entering every chunk): a training step's forward, with the
    /// plain kernel's outputs bit for bit ([`FixedForward::warp_specialized_ckpt`]).
    ForwardWsCkptBf16R4N128P64Na32C16,
    /// The split forward's segment-state pass on the warp-specialized kernel's roles (compute
    /// capability 9.0 only): the producer fills k̂ alone, each consumer runs its head's state pass
    /// alone and writes the segment's hand-off slot ([`FixedForward::warp_specialized_segment_state`]).
    SegmentStateWsBf16R4N128P64Na32C16,
    /// The warp-specialized f32 forward (compute capability 9.0 only: `wgmma`): two warpgroups
    /// per block, a producer staging, rotating and splitting one head's q̂ and k̂ into binary16
    /// `hi`/`lo` tiles and a consumer running every product as three `wgmma` passes at float32
    /// accuracy; R=4, N=128, P=64, Na=32, C=16, half-split rotation, gated output
    /// ([`FixedForward::warp_specialized`]).
    ForwardWsF32R4N128P64Na32C16,
    /// The tensor-core forward's instantiation for calls shorter than one chunk (a decode call of
    /// a few tokens: its state pass and epilogue skip the empty 16-row tiles too), bf16, R=4,
    /// N=128, P=64, Na=32, C=16.
    ForwardMmaShortBf16R4N128P64Na32C16,
    /// The short-call instantiation walking the batch: each block runs the (b, h) units of
    /// its head for every `unit_stride`-th batch row, a unit's loads issued during the previous
    /// unit (a decode call of fewer than C tokens from its state), bf16, R=4, N=128, P=64, Na=32,
    /// C=16.
    ForwardMmaUnitsBf16R4N128P64Na32C16,
    /// Segment-state pass of the split tensor-core forward, bf16, R=4, N=128, P=64, Na=32, C=16.
    SegmentStateMmaBf16R4N128P64Na32C16,
    /// [`Kernel::SegmentStateMmaBf16R4N128P64Na32C16`] with its state pass on `wgmma` (compute
    /// capability 9.0 only; [`Kernel::wgmma_twin`]).
    SegmentStateWgBf16R4N128P64Na32C16,
    /// Chunked forward on TF32 tensor cores at float32 accuracy (three passes per product, state
    /// in registers), f32, R=4, N=128, P=64, Na=32, C=16.
    ForwardMmaF32R4N128P64Na32C16,
    /// Segment-state pass of the split f32 tensor-core forward, R=4, N=128, P=64, Na=32, C=16.
    SegmentStateMmaF32R4N128P64Na32C16,
    /// Segment-state pass instantiated for one geometry (R=4, N=128, P=64, Na=32, C=16), f32
    /// activations.
    SegmentStateFixedF32R4N128P64Na32C16,
    /// Segment-state pass instantiated for one geometry (R=4, N=128, P=64, Na=32, C=16), bf16
    /// activations.
    SegmentStateFixedBf16R4N128P64Na32C16,
    /// Segment-state pass of the split forward, f32 activations, rank 1.
    SegmentStateF32R1,
    /// Segment-state pass of the split forward, f32 activations, rank 2.
    SegmentStateF32R2,
    /// Segment-state pass of the split forward, f32 activations, rank 4.
    SegmentStateF32R4,
    /// Segment-state pass of the split forward, f32 activations, rank 8.
    SegmentStateF32R8,
    /// Segment-state pass of the split forward, bf16 activations, rank 1.
    SegmentStateBf16R1,
    /// Segment-state pass of the split forward, bf16 activations, rank 2.
    SegmentStateBf16R2,
    /// Segment-state pass of the split forward, bf16 activations, rank 4.
    SegmentStateBf16R4,
    /// Segment-state pass of the split forward, bf16 activations, rank 8.
    SegmentStateBf16R8,
    /// Combine pass of the split forward (segment hand-off states, f32).
    SegmentCombineF32,
    /// Backward, per-(head, batch row) reverse sweep, f32 activations.
    BackwardHeadF32,
    /// Backward, per-(head, batch row) reverse sweep, bf16 activations.
    BackwardHeadBf16,
    /// Backward by chunks, per-(head, batch row) reverse sweep over chunks, f32 activations.
    BackwardChunkedF32,
    /// Backward by chunks, per-(head, batch row) reverse sweep over chunks, bf16 activations.
    BackwardChunkedBf16,
    /// Backward by chunks compiled for R = 4, N = 128, P = 64, Na = 32, f32 activations.
    BackwardChunkedFixedF32R4N128P64Na32,
    /// Backward by chunks compiled for R = 4, N = 128, P = 64, Na = 32, bf16 activations.
    BackwardChunkedFixedBf16R4N128P64Na32,
    /// Checkpoint sweep of the tensor-core backward (the state pass of the tensor-core forward
    /// writing the state and θ entering every chunk), bf16, R = 4, N = 128, P = 64, Na = 32,
    /// C = 16.
    BackwardCkptMmaBf16R4N128P64Na32C16,
    /// [`Kernel::BackwardCkptMmaBf16R4N128P64Na32C16`] with its state pass on `wgmma` (compute
    /// capability 9.0 only; [`Kernel::wgmma_twin`]).
    BackwardCkptWgBf16R4N128P64Na32C16,
    /// Backward on bf16 tensor cores (`mma.m16n8k16`, operand tiles by `ldmatrix`, the state
    /// adjoint in registers), bf16, R = 4, N = 128, P = 64, Na = 32, C = 16.
    BackwardMmaBf16R4N128P64Na32C16,
    /// The tensor-core forward that also writes the tensor-core backward's checkpoints (the
    /// state and θ entering every chunk), bf16, R = 4, N = 128, P = 64, Na = 32, C = 16.
    ForwardCkptMmaBf16R4N128P64Na32C16,
    /// Backward, fixed-order reduction of q/k over heads and parameters over the batch, f32.
    BackwardReduceF32,
    /// Backward, fixed-order reduction of q/k over heads and parameters over the batch, bf16.
    BackwardReduceBf16,
}

impl Kernel {
    /// Every kernel, in table order.
    pub const ALL: [Kernel; 86] = [
        Kernel::PrimMmaBf16M16n8k16,
        Kernel::PrimMmaTf32M16n8k8,
        Kernel::PrimLdmatrixX4,
        Kernel::PrimCpAsync,
        Kernel::PrimWarpScan,
        Kernel::PrimSincos,
        Kernel::PrimWgmmaBf16M64n128k128,
        Kernel::PrimWgmmaF16SplitM64n64k128,
        Kernel::DecodeF32R1,
        Kernel::DecodeF32R2,
        Kernel::DecodeF32R4,
        Kernel::DecodeF32R8,
        Kernel::DecodeBf16R1,
        Kernel::DecodeBf16R2,
        Kernel::DecodeBf16R4,
        Kernel::DecodeBf16R8,
        Kernel::DecodeRowsF32R1,
        Kernel::DecodeRowsF32R2,
        Kernel::DecodeRowsF32R4,
        Kernel::DecodeRowsF32R8,
        Kernel::DecodeRowsBf16R1,
        Kernel::DecodeRowsBf16R2,
        Kernel::DecodeRowsBf16R4,
        Kernel::DecodeRowsBf16R8,
        Kernel::DecodeStreamF32R1,
        Kernel::DecodeStreamF32R2,
        Kernel::DecodeStreamF32R4,
        Kernel::DecodeStreamF32R8,
        Kernel::DecodeStreamBf16R1,
        Kernel::DecodeStreamBf16R2,
        Kernel::DecodeStreamBf16R4,
        Kernel::DecodeStreamBf16R8,
        Kernel::DecodeFixedF32R4N128P64Na32,
        Kernel::DecodeFixedBf16R4N128P64Na32,
        Kernel::DecodeRowsFixedF32R4N128P64Na32,
        Kernel::DecodeRowsFixedBf16R4N128P64Na32,
        Kernel::DecodeStreamFixedBf16R4N128P64Na32,
        Kernel::DecodeMmaBf16R4N128P64,
        Kernel::DecodeMmaPrefetchBf16R4N128P64,
        Kernel::DecodeMmaChunkBf16R4N128P64,
        Kernel::DecodeMmaTokensBf16R4N128P64,
        Kernel::ForwardFmaF32R1,
        Kernel::ForwardFmaF32R2,
        Kernel::ForwardFmaF32R4,
        Kernel::ForwardFmaF32R8,
        Kernel::ForwardFmaBf16R1,
        Kernel::ForwardFmaBf16R2,
        Kernel::ForwardFmaBf16R4,
        Kernel::ForwardFmaBf16R8,
        Kernel::ForwardFixedF32R4N128P64Na32C16,
        Kernel::ForwardFixedBf16R4N128P64Na32C16,
        Kernel::ForwardMmaBf16R4N128P64Na32C16,
        Kernel::ForwardWgBf16R4N128P64Na32C16,
        Kernel::ForwardWsBf16R4N128P64Na32C16,
        Kernel::ForwardWsCkptBf16R4N128P64Na32C16,
        Kernel::SegmentStateWsBf16R4N128P64Na32C16,
        Kernel::ForwardWsF32R4N128P64Na32C16,
        Kernel::ForwardMmaShortBf16R4N128P64Na32C16,
        Kernel::ForwardMmaUnitsBf16R4N128P64Na32C16,
        Kernel::SegmentStateMmaBf16R4N128P64Na32C16,
        Kernel::SegmentStateWgBf16R4N128P64Na32C16,
        Kernel::ForwardMmaF32R4N128P64Na32C16,
        Kernel::SegmentStateMmaF32R4N128P64Na32C16,
        Kernel::SegmentStateFixedF32R4N128P64Na32C16,
        Kernel::SegmentStateFixedBf16R4N128P64Na32C16,
        Kernel::SegmentStateF32R1,
        Kernel::SegmentStateF32R2,
        Kernel::SegmentStateF32R4,
        Kernel::SegmentStateF32R8,
        Kernel::SegmentStateBf16R1,
        Kernel::SegmentStateBf16R2,
        Kernel::SegmentStateBf16R4,
        Kernel::SegmentStateBf16R8,
        Kernel::SegmentCombineF32,
        Kernel::BackwardHeadF32,
        Kernel::BackwardHeadBf16,
        Kernel::BackwardChunkedF32,
        Kernel::BackwardChunkedBf16,
        Kernel::BackwardChunkedFixedF32R4N128P64Na32,
        Kernel::BackwardChunkedFixedBf16R4N128P64Na32,
        Kernel::BackwardCkptMmaBf16R4N128P64Na32C16,
        Kernel::BackwardCkptWgBf16R4N128P64Na32C16,
        Kernel::BackwardMmaBf16R4N128P64Na32C16,
        Kernel::ForwardCkptMmaBf16R4N128P64Na32C16,
        Kernel::BackwardReduceF32,
        Kernel::BackwardReduceBf16,
    ];

    /// Whether the kernel starts with the dependent-launch prologue (`griddepcontrol.wait`, then
    /// `.launch_dependents`, in the module for compute capability 9.0 and newer): every decode
    /// kernel and the batch-walking short-call forward that decode calls of a few tokens run.
    /// Only these may be launched with programmatic stream serialization.
    pub fn waits_for_prerequisite_grids(self) -> bool {
        self.symbol().starts_with("decode_") || self == Kernel::ForwardMmaUnitsBf16R4N128P64Na32C16
    }

    /// Whether the kernel issues `wgmma` (the `sm_90a` instructions of `kernels/src/arch/wgmma.rs`),
    /// so that it runs only on compute capability 9.0 ([`crate::has_wgmma`]); elsewhere those lines
    /// are comments and [`crate::Gpu`] refuses the launch.
    pub fn needs_wgmma(self) -> bool {
        matches!(
            self,
            Kernel::PrimWgmmaBf16M64n128k128
                | Kernel::PrimWgmmaF16SplitM64n64k128
                | Kernel::ForwardWgBf16R4N128P64Na32C16
                | Kernel::ForwardWsBf16R4N128P64Na32C16
                | Kernel::ForwardWsCkptBf16R4N128P64Na32C16
                | Kernel::SegmentStateWsBf16R4N128P64Na32C16
                | Kernel::ForwardWsF32R4N128P64Na32C16
                | Kernel::SegmentStateWgBf16R4N128P64Na32C16
                | Kernel::BackwardCkptWgBf16R4N128P64Na32C16
        )
    }

    /// The kernel that computes the same thing with `wgmma`, which the host launches instead of
    /// this one on compute capability 9.0 while [`crate::Gpu::wgmma_kernels`] is on.
    pub fn wgmma_twin(self) -> Option<Kernel> {
        match self {
            Kernel::ForwardMmaBf16R4N128P64Na32C16 => Some(Kernel::ForwardWgBf16R4N128P64Na32C16),
            Kernel::SegmentStateMmaBf16R4N128P64Na32C16 => {
                Some(Kernel::SegmentStateWgBf16R4N128P64Na32C16)
            }
            Kernel::BackwardCkptMmaBf16R4N128P64Na32C16 => {
                Some(Kernel::BackwardCkptWgBf16R4N128P64Na32C16)
            }
            _ => None,
        }
    }

    /// Its symbol in the PTX (`.entry` name).
    pub const fn symbol(self) -> &'static str {
        match self {
            Kernel::PrimMmaBf16M16n8k16 => "prim_mma_bf16_m16n8k16",
            Kernel::PrimMmaTf32M16n8k8 => "prim_mma_tf32_m16n8k8",
            Kernel::PrimLdmatrixX4 => "prim_ldmatrix_x4",
            Kernel::PrimCpAsync => "prim_cp_async",
            Kernel::PrimWarpScan => "prim_warp_scan",
            Kernel::PrimSincos => "prim_sincos",
            Kernel::PrimWgmmaBf16M64n128k128 => "prim_wgmma_bf16_m64n128k128",
            Kernel::PrimWgmmaF16SplitM64n64k128 => "prim_wgmma_f16_split_m64n64k128",
            Kernel::DecodeF32R1 => "decode_f32_r1",
            Kernel::DecodeF32R2 => "decode_f32_r2",
            Kernel::DecodeF32R4 => "decode_f32_r4",
            Kernel::DecodeF32R8 => "decode_f32_r8",
            Kernel::DecodeBf16R1 => "decode_bf16_r1",
            Kernel::DecodeBf16R2 => "decode_bf16_r2",
            Kernel::DecodeBf16R4 => "decode_bf16_r4",
            Kernel::DecodeBf16R8 => "decode_bf16_r8",
            Kernel::DecodeRowsF32R1 => "decode_rows_f32_r1",
            Kernel::DecodeRowsF32R2 => "decode_rows_f32_r2",
            Kernel::DecodeRowsF32R4 => "decode_rows_f32_r4",
            Kernel::DecodeRowsF32R8 => "decode_rows_f32_r8",
            Kernel::DecodeRowsBf16R1 => "decode_rows_bf16_r1",
            Kernel::DecodeRowsBf16R2 => "decode_rows_bf16_r2",
            Kernel::DecodeRowsBf16R4 => "decode_rows_bf16_r4",
            Kernel::DecodeRowsBf16R8 => "decode_rows_bf16_r8",
            Kernel::DecodeStreamF32R1 => "decode_stream_f32_r1",
            Kernel::DecodeStreamF32R2 => "decode_stream_f32_r2",
            Kernel::DecodeStreamF32R4 => "decode_stream_f32_r4",
            Kernel::DecodeStreamF32R8 => "decode_stream_f32_r8",
            Kernel::DecodeStreamBf16R1 => "decode_stream_bf16_r1",
            Kernel::DecodeStreamBf16R2 => "decode_stream_bf16_r2",
            Kernel::DecodeStreamBf16R4 => "decode_stream_bf16_r4",
            Kernel::DecodeStreamBf16R8 => "decode_stream_bf16_r8",
            Kernel::DecodeFixedF32R4N128P64Na32 => "decode_fixed_f32_r4_n128_p64_na32",
            Kernel::DecodeFixedBf16R4N128P64Na32 => "decode_fixed_bf16_r4_n128_p64_na32",
            Kernel::DecodeRowsFixedF32R4N128P64Na32 => "decode_rows_fixed_f32_r4_n128_p64_na32",
            Kernel::DecodeMmaBf16R4N128P64 => "decode_mma_bf16_r4_n128_p64",
            Kernel::DecodeMmaPrefetchBf16R4N128P64 => "decode_mma_prefetch_bf16_r4_n128_p64",
            Kernel::DecodeMmaChunkBf16R4N128P64 => "decode_mma_chunk_bf16_r4_n128_p64",
            Kernel::DecodeMmaTokensBf16R4N128P64 => "decode_mma_tokens_bf16_r4_n128_p64",
            Kernel::DecodeRowsFixedBf16R4N128P64Na32 => "decode_rows_fixed_bf16_r4_n128_p64_na32",
            Kernel::DecodeStreamFixedBf16R4N128P64Na32 => {
                "decode_stream_fixed_bf16_r4_n128_p64_na32"
            }
            Kernel::ForwardFmaF32R1 => "forward_fma_f32_r1",
            Kernel::ForwardFmaF32R2 => "forward_fma_f32_r2",
            Kernel::ForwardFmaF32R4 => "forward_fma_f32_r4",
            Kernel::ForwardFmaF32R8 => "forward_fma_f32_r8",
            Kernel::ForwardFmaBf16R1 => "forward_fma_bf16_r1",
            Kernel::ForwardFmaBf16R2 => "forward_fma_bf16_r2",
            Kernel::ForwardFmaBf16R4 => "forward_fma_bf16_r4",
            Kernel::ForwardFmaBf16R8 => "forward_fma_bf16_r8",
            Kernel::ForwardFixedF32R4N128P64Na32C16 => "forward_fixed_f32_r4_n128_p64_na32_c16",
            Kernel::ForwardFixedBf16R4N128P64Na32C16 => "forward_fixed_bf16_r4_n128_p64_na32_c16",
            Kernel::ForwardMmaBf16R4N128P64Na32C16 => "forward_mma_bf16_r4_n128_p64_na32_c16",
            Kernel::ForwardWgBf16R4N128P64Na32C16 => "forward_wg_bf16_r4_n128_p64_na32_c16",
            Kernel::ForwardWsBf16R4N128P64Na32C16 => "forward_ws_bf16_r4_n128_p64_na32_c16",
            Kernel::ForwardWsCkptBf16R4N128P64Na32C16 => {
                "forward_ws_ckpt_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::SegmentStateWsBf16R4N128P64Na32C16 => {
                "segment_state_ws_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::ForwardWsF32R4N128P64Na32C16 => "forward_ws_f32_r4_n128_p64_na32_c16",
            Kernel::ForwardMmaShortBf16R4N128P64Na32C16 => {
                "forward_mma_short_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::ForwardMmaUnitsBf16R4N128P64Na32C16 => {
                "forward_mma_units_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::SegmentStateMmaBf16R4N128P64Na32C16 => {
                "segment_state_mma_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::SegmentStateWgBf16R4N128P64Na32C16 => {
                "segment_state_wg_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::ForwardMmaF32R4N128P64Na32C16 => "forward_mma_f32_r4_n128_p64_na32_c16",
            Kernel::SegmentStateMmaF32R4N128P64Na32C16 => {
                "segment_state_mma_f32_r4_n128_p64_na32_c16"
            }
            Kernel::SegmentStateFixedF32R4N128P64Na32C16 => {
                "segment_state_fixed_f32_r4_n128_p64_na32_c16"
            }
            Kernel::SegmentStateFixedBf16R4N128P64Na32C16 => {
                "segment_state_fixed_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::SegmentStateF32R1 => "segment_state_f32_r1",
            Kernel::SegmentStateF32R2 => "segment_state_f32_r2",
            Kernel::SegmentStateF32R4 => "segment_state_f32_r4",
            Kernel::SegmentStateF32R8 => "segment_state_f32_r8",
            Kernel::SegmentStateBf16R1 => "segment_state_bf16_r1",
            Kernel::SegmentStateBf16R2 => "segment_state_bf16_r2",
            Kernel::SegmentStateBf16R4 => "segment_state_bf16_r4",
            Kernel::SegmentStateBf16R8 => "segment_state_bf16_r8",
            Kernel::SegmentCombineF32 => "segment_combine_f32",
            Kernel::BackwardHeadF32 => "backward_head_f32",
            Kernel::BackwardHeadBf16 => "backward_head_bf16",
            Kernel::BackwardChunkedF32 => "backward_chunked_f32",
            Kernel::BackwardChunkedBf16 => "backward_chunked_bf16",
            Kernel::BackwardChunkedFixedF32R4N128P64Na32 => {
                "backward_chunked_fixed_f32_r4_n128_p64_na32"
            }
            Kernel::BackwardChunkedFixedBf16R4N128P64Na32 => {
                "backward_chunked_fixed_bf16_r4_n128_p64_na32"
            }
            Kernel::BackwardCkptMmaBf16R4N128P64Na32C16 => {
                "backward_ckpt_mma_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::BackwardCkptWgBf16R4N128P64Na32C16 => {
                "backward_ckpt_wg_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::BackwardMmaBf16R4N128P64Na32C16 => "backward_mma_bf16_r4_n128_p64_na32_c16",
            Kernel::ForwardCkptMmaBf16R4N128P64Na32C16 => {
                "forward_ckpt_mma_bf16_r4_n128_p64_na32_c16"
            }
            Kernel::BackwardReduceF32 => "backward_reduce_f32",
            Kernel::BackwardReduceBf16 => "backward_reduce_bf16",
        }
    }

    /// The decode kernel (state tile in shared memory) for an activation dtype and rank, if
    /// instantiated.
    pub fn decode(dtype: crate::Dtype, rank: usize) -> Option<Kernel> {
        ranked(&DECODE, dtype, rank)
    }

    /// The register-resident decode kernel for an activation dtype and rank, if instantiated.
    pub fn decode_rows(dtype: crate::Dtype, rank: usize) -> Option<Kernel> {
        ranked(&DECODE_ROWS, dtype, rank)
    }

    /// The streaming decode kernel for an activation dtype and rank, if instantiated.
    pub fn decode_stream(dtype: crate::Dtype, rank: usize) -> Option<Kernel> {
        ranked(&DECODE_STREAM, dtype, rank)
    }

    /// The tensor-core decode kernel for an activation dtype, rank, state size, head dim and a
    /// call of `tokens` tokens, if instantiated (bf16 at `mamba3_abi::DECODE_MMA_GEOMETRY`, any
    /// Na ≤ N/2): the one-token entry for one token, the token-loop entry for more.
    pub fn decode_tensor_core(
        dtype: crate::Dtype,
        rank: usize,
        state_dim: usize,
        head_dim: usize,
        tokens: usize,
    ) -> Option<Kernel> {
        let [r, n, p] = mamba3_abi::DECODE_MMA_GEOMETRY.map(|d| d as usize);
        let kernel = if tokens == 1 {
            Kernel::DecodeMmaBf16R4N128P64
        } else {
            Kernel::DecodeMmaTokensBf16R4N128P64
        };
        (dtype == crate::Dtype::Bf16 && (rank, state_dim, head_dim) == (r, n, p)).then_some(kernel)
    }

    /// The prefetching one-token tensor-core decode kernel for an activation dtype, rank, state
    /// size, head dim and a call of `tokens` tokens, if instantiated (as
    /// [`Kernel::decode_tensor_core`], one token only).
    pub fn decode_tensor_core_prefetching(
        dtype: crate::Dtype,
        rank: usize,
        state_dim: usize,
        head_dim: usize,
        tokens: usize,
    ) -> Option<Kernel> {
        Kernel::decode_tensor_core(dtype, rank, state_dim, head_dim, tokens)
            .filter(|_| tokens == 1)
            .map(|_| Kernel::DecodeMmaPrefetchBf16R4N128P64)
    }

    /// The chunk-form tensor-core decode kernel for an activation dtype, rank, state size, head
    /// dim and a call of `tokens` tokens, if instantiated (bf16 at
    /// `mamba3_abi::DECODE_MMA_GEOMETRY`, any Na ≤ N/2, 1 ≤ tokens ≤
    /// `mamba3_abi::DECODE_MMA_CHUNK_MAX_TOKENS`).
    pub fn decode_tensor_core_chunk(
        dtype: crate::Dtype,
        rank: usize,
        state_dim: usize,
        head_dim: usize,
        tokens: usize,
    ) -> Option<Kernel> {
        let max = mamba3_abi::DECODE_MMA_CHUNK_MAX_TOKENS as usize;
        Kernel::decode_tensor_core(dtype, rank, state_dim, head_dim, 1)
            .filter(|_| (1..=max).contains(&tokens))
            .map(|_| Kernel::DecodeMmaChunkBf16R4N128P64)
    }

    /// The chunked-forward kernel for an activation dtype and rank, if instantiated.
    pub fn forward_fma(dtype: crate::Dtype, rank: usize) -> Option<Kernel> {
        ranked(&FORWARD_FMA, dtype, rank)
    }

    /// The chunked-forward kernel and the segment-state kernel instantiated for exactly this
    /// geometry, if any (see the table `FIXED_FORWARD` in this module): loop bounds and shared-memory offsets are
    /// compile-time constants there, so they run fewer instructions than
    /// [`Kernel::forward_fma`]'s and [`Kernel::segment_state`]'s.
    pub fn forward_fixed(
        dtype: crate::Dtype,
        geometry: FixedForwardGeometry,
    ) -> Option<(Kernel, Kernel)> {
        fixed_forward_row(dtype, geometry).map(|row| (row.forward, row.segment_state))
    }

    /// The tensor-core forward and its segment-state pass for exactly this dtype and geometry,
    /// if any (see [`FixedForward::tensor_core`]).
    pub fn forward_tensor_core(
        dtype: crate::Dtype,
        geometry: FixedForwardGeometry,
    ) -> Option<(Kernel, Kernel)> {
        fixed_forward_row(dtype, geometry).and_then(|row| row.tensor_core)
    }

    /// The tensor-core forward's short-call instantiation for exactly this dtype and geometry,
    /// if any (see [`FixedForward::tensor_core_short`]).
    pub fn forward_tensor_core_short(
        dtype: crate::Dtype,
        geometry: FixedForwardGeometry,
    ) -> Option<Kernel> {
        fixed_forward_row(dtype, geometry).and_then(|row| row.tensor_core_short)
    }

    /// The warp-specialized forward for exactly this dtype and geometry, if any (see
    /// [`FixedForward::warp_specialized`]).
    pub fn forward_warp_specialized(
        dtype: crate::Dtype,
        geometry: FixedForwardGeometry,
    ) -> Option<Kernel> {
        fixed_forward_row(dtype, geometry).and_then(|row| row.warp_specialized)
    }

    /// The warp-specialized forward writing the backward's checkpoints for exactly this dtype and
    /// geometry, if any (see [`FixedForward::warp_specialized_ckpt`]).
    pub fn forward_warp_specialized_ckpt(
        dtype: crate::Dtype,
        geometry: FixedForwardGeometry,
    ) -> Option<Kernel> {
        fixed_forward_row(dtype, geometry).and_then(|row| row.warp_specialized_ckpt)
    }

    /// The warp-specialized forward's segment-state pass for exactly this dtype and geometry, if
    /// any (see [`FixedForward::warp_specialized_segment_state`]).
    pub fn segment_state_warp_specialized(
        dtype: crate::Dtype,
        geometry: FixedForwardGeometry,
    ) -> Option<Kernel> {
        fixed_forward_row(dtype, geometry).and_then(|row| row.warp_specialized_segment_state)
    }

    /// The batch-walking short-call instantiation for exactly this dtype and geometry, if any
    /// (see [`FixedForward::tensor_core_units`]).
    pub fn forward_tensor_core_units(
        dtype: crate::Dtype,
        geometry: FixedForwardGeometry,
    ) -> Option<Kernel> {
        fixed_forward_row(dtype, geometry).and_then(|row| row.tensor_core_units)
    }

    /// The decode kernels (shared tile, register resident, streaming) instantiated for exactly
    /// this geometry, if any (see the table `FIXED_DECODE` in this module).
    pub fn decode_fixed(dtype: crate::Dtype, geometry: FixedDecodeGeometry) -> Option<FixedDecode> {
        FIXED_DECODE
            .iter()
            .find(|row| row.dtype == dtype && row.geometry == geometry)
            .copied()
    }

    /// The chunked backward instantiated for exactly this rank, state size, head dim and angle
    /// count (any chunk length), if any (see the table `FIXED_BACKWARD` in this module): its
    /// shared-memory offsets, strides and divisions by N, P and Na are compile-time constants.
    pub fn backward_chunked_fixed(
        dtype: crate::Dtype,
        geometry: FixedBackwardGeometry,
    ) -> Option<Kernel> {
        FIXED_BACKWARD
            .iter()
            .find(|row| row.dtype == dtype && row.geometry == geometry)
            .map(|row| row.kernel)
    }

    /// The row of `TENSOR_CORE_BACKWARD` (this module) for an activation dtype and geometry, if
    /// instantiated.
    fn tensor_core_backward_row(
        dtype: crate::Dtype,
        geometry: FixedBackwardGeometry,
    ) -> Option<&'static TensorCoreBackward> {
        TENSOR_CORE_BACKWARD
            .iter()
            .find(|row| row.dtype == dtype && row.geometry == geometry)
    }

    /// The tensor-core backward's (checkpoint sweep, per-head kernel) for an activation dtype and
    /// geometry, if instantiated (the table `TENSOR_CORE_BACKWARD` in this module; chunks of 16
    /// tokens whatever the call's chunk size).
    pub fn backward_tensor_core(
        dtype: crate::Dtype,
        geometry: FixedBackwardGeometry,
    ) -> Option<(Kernel, Kernel)> {
        Self::tensor_core_backward_row(dtype, geometry).map(|row| (row.ckpt, row.kernel))
    }

    /// The segment-state pass that precedes the tensor-core backward's checkpoint sweep when the
    /// sweep is split along the sequence, for an activation dtype and geometry, if instantiated
    /// (`TENSOR_CORE_BACKWARD`).
    pub fn backward_sweep_segment_state(
        dtype: crate::Dtype,
        geometry: FixedBackwardGeometry,
    ) -> Option<Kernel> {
        Self::tensor_core_backward_row(dtype, geometry).map(|row| row.sweep_segment_state)
    }

    /// The tensor-core forward that writes the tensor-core backward's checkpoints for an
    /// activation dtype and geometry, if instantiated (`TENSOR_CORE_BACKWARD`; the forward's chunk
    /// of 16 tokens).
    pub fn forward_with_checkpoints(
        dtype: crate::Dtype,
        geometry: FixedBackwardGeometry,
    ) -> Option<Kernel> {
        Self::tensor_core_backward_row(dtype, geometry).map(|row| row.forward)
    }

    /// The split forward's segment-state kernel for an activation dtype and rank, if
    /// instantiated.
    pub fn segment_state(dtype: crate::Dtype, rank: usize) -> Option<Kernel> {
        ranked(&SEGMENT_STATE, dtype, rank)
    }

    /// Position in [`Kernel::ALL`] (index of its cached function handle).
    pub(crate) fn index(self) -> usize {
        Kernel::ALL
            .iter()
            .position(|k| *k == self)
            .expect("every kernel is in ALL")
    }
}

/// The row of [`FIXED_FORWARD`] for exactly this dtype and geometry, if any.
fn fixed_forward_row(
    dtype: crate::Dtype,
    geometry: FixedForwardGeometry,
) -> Option<&'static FixedForward> {
    FIXED_FORWARD
        .iter()
        .find(|row| row.dtype == dtype && row.geometry == geometry)
}

/// The geometry a fixed forward instantiation is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedForwardGeometry {
    /// Rank R.
    pub rank: usize,
    /// State size N.
    pub state_dim: usize,
    /// Head dim P.
    pub head_dim: usize,
    /// Rotation angles Na.
    pub num_angles: usize,
    /// Chunk size C.
    pub chunk: usize,
}

/// One fixed-geometry instantiation of the forward: its dtype and geometry, the forward kernel
/// and the split forward's segment-state kernel.
#[derive(Debug, Clone, Copy)]
pub struct FixedForward {
    /// Activation dtype.
    pub dtype: crate::Dtype,
    /// Geometry it is compiled for.
    pub geometry: FixedForwardGeometry,
    /// The forward kernel.
    pub forward: Kernel,
    /// The segment-state kernel.
    pub segment_state: Kernel,
    /// The tensor-core forward and its segment-state pass
    /// ([`Kernel::ForwardMmaBf16R4N128P64Na32C16`], [`Kernel::SegmentStateMmaBf16R4N128P64Na32C16`];
    /// f32: [`Kernel::ForwardMmaF32R4N128P64Na32C16`], three-pass TF32), where they exist for this
    /// dtype and geometry: the host prefers them to `forward` and `segment_state` when q, k, v and
    /// z are 16-byte aligned and the kernel's shared memory fits the GPU.
    pub tensor_core: Option<(Kernel, Kernel)>,
    /// The tensor-core forward's instantiation for a call shorter than one chunk
    /// ([`Kernel::ForwardMmaShortBf16R4N128P64Na32C16`]), run instead of the first kernel of
    /// `tensor_core` there: it also skips the empty tiles of the state pass and the epilogue,
    /// which the full-chunk kernel keeps (skipping them there cost full chunks 2–3%).
    pub tensor_core_short: Option<Kernel>,
    /// The short-call instantiation that walks the batch
    /// ([`Kernel::ForwardMmaUnitsBf16R4N128P64Na32C16`]): a decode call of fewer than C tokens
    /// from its state runs one wave of blocks, each walking the batch rows of its head and
    /// loading its next unit while it computes the current one.
    pub tensor_core_units: Option<Kernel>,
    /// The warp-specialized forward ([`Kernel::ForwardWsBf16R4N128P64Na32C16`]), run instead of
    /// the tensor-core forward on compute capability 9.0 while
    /// [`crate::Gpu::warp_specialized_kernels`] is on (the default) for calls it covers: the
    /// half-split rotation, the gated output, an even number of heads per q/k group, no initial
    /// state.
    pub warp_specialized: Option<Kernel>,
    /// The warp-specialized forward that also writes the tensor-core backward's checkpoints
    /// ([`Kernel::ForwardWsCkptBf16R4N128P64Na32C16`]): a training step's forward runs it where
    /// an inference forward of the same call would run `warp_specialized`, so that both give the
    /// same outputs.
    pub warp_specialized_ckpt: Option<Kernel>,
    /// The segment-state pass that a split call of the warp-specialized forward runs
    /// ([`Kernel::SegmentStateWsBf16R4N128P64Na32C16`]; grid `(H/2, B, K − 1)`, the forward's
    /// block and shared memory), with the combine pass and the forward after it.
    pub warp_specialized_segment_state: Option<Kernel>,
}

/// The benchmark's (and upstream's tuned) geometry.
const GEOMETRY_R4_N128_P64_NA32_C16: FixedForwardGeometry = FixedForwardGeometry {
    rank: 4,
    state_dim: 128,
    head_dim: 64,
    num_angles: 32,
    chunk: 16,
};

/// Every fixed-geometry forward instantiation (the host picks a row whose dtype and geometry
/// match a call exactly; every other geometry runs the rank's general kernels).
pub const FIXED_FORWARD: [FixedForward; 2] = [
    FixedForward {
        dtype: crate::Dtype::F32,
        geometry: GEOMETRY_R4_N128_P64_NA32_C16,
        forward: Kernel::ForwardFixedF32R4N128P64Na32C16,
        segment_state: Kernel::SegmentStateFixedF32R4N128P64Na32C16,
        tensor_core: Some((
            Kernel::ForwardMmaF32R4N128P64Na32C16,
            Kernel::SegmentStateMmaF32R4N128P64Na32C16,
        )),
        tensor_core_short: None,
        tensor_core_units: None,
        warp_specialized: Some(Kernel::ForwardWsF32R4N128P64Na32C16),
        warp_specialized_ckpt: None,
        warp_specialized_segment_state: None,
    },
    FixedForward {
        dtype: crate::Dtype::Bf16,
        geometry: GEOMETRY_R4_N128_P64_NA32_C16,
        forward: Kernel::ForwardFixedBf16R4N128P64Na32C16,
        segment_state: Kernel::SegmentStateFixedBf16R4N128P64Na32C16,
        tensor_core: Some((
            Kernel::ForwardMmaBf16R4N128P64Na32C16,
            Kernel::SegmentStateMmaBf16R4N128P64Na32C16,
        )),
        tensor_core_short: Some(Kernel::ForwardMmaShortBf16R4N128P64Na32C16),
        tensor_core_units: Some(Kernel::ForwardMmaUnitsBf16R4N128P64Na32C16),
        warp_specialized: Some(Kernel::ForwardWsBf16R4N128P64Na32C16),
        warp_specialized_ckpt: Some(Kernel::ForwardWsCkptBf16R4N128P64Na32C16),
        warp_specialized_segment_state: Some(Kernel::SegmentStateWsBf16R4N128P64Na32C16),
    },
];

/// The geometry a fixed decode instantiation is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedDecodeGeometry {
    /// Rank R.
    pub rank: usize,
    /// State size N.
    pub state_dim: usize,
    /// Head dim P.
    pub head_dim: usize,
    /// Rotation angles Na.
    pub num_angles: usize,
}

/// One fixed-geometry instantiation of the three decode kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedDecode {
    /// Activation dtype.
    pub dtype: crate::Dtype,
    /// Geometry it is compiled for.
    pub geometry: FixedDecodeGeometry,
    /// The shared-tile kernel.
    pub shared_tile: Kernel,
    /// The register-resident kernel.
    pub register_resident: Kernel,
    /// The streaming kernel (the rank's general one where a fixed instantiation does not fit
    /// its register budget).
    pub streaming: Kernel,
}

/// The decode benchmark's geometry.
const DECODE_GEOMETRY_R4_N128_P64_NA32: FixedDecodeGeometry = FixedDecodeGeometry {
    rank: 4,
    state_dim: 128,
    head_dim: 64,
    num_angles: 32,
};

/// Every fixed-geometry decode instantiation (a call whose dtype and geometry match a row
/// exactly runs that row's kernels; every other call the rank's general ones).
pub const FIXED_DECODE: [FixedDecode; 2] = [
    FixedDecode {
        dtype: crate::Dtype::F32,
        geometry: DECODE_GEOMETRY_R4_N128_P64_NA32,
        shared_tile: Kernel::DecodeFixedF32R4N128P64Na32,
        register_resident: Kernel::DecodeRowsFixedF32R4N128P64Na32,
        // The fixed f32 streaming instantiation needs more than its 128 registers (spills on
        // sm_80–89): this row keeps the general kernel.
        streaming: Kernel::DecodeStreamF32R4,
    },
    FixedDecode {
        dtype: crate::Dtype::Bf16,
        geometry: DECODE_GEOMETRY_R4_N128_P64_NA32,
        shared_tile: Kernel::DecodeFixedBf16R4N128P64Na32,
        register_resident: Kernel::DecodeRowsFixedBf16R4N128P64Na32,
        streaming: Kernel::DecodeStreamFixedBf16R4N128P64Na32,
    },
];

/// The geometry a fixed chunked-backward instantiation is compiled for (its chunk length stays a
/// launch parameter: fixing it too made the kernel spill).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedBackwardGeometry {
    /// Rank R.
    pub rank: usize,
    /// State size N.
    pub state_dim: usize,
    /// Head dim P.
    pub head_dim: usize,
    /// Rotation angles Na.
    pub num_angles: usize,
}

/// The benchmark's backward geometry.
const BACKWARD_GEOMETRY_R4_N128_P64_NA32: FixedBackwardGeometry = FixedBackwardGeometry {
    rank: 4,
    state_dim: 128,
    head_dim: 64,
    num_angles: 32,
};

/// One fixed-geometry instantiation of the chunked backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedBackward {
    /// Activation dtype.
    pub dtype: crate::Dtype,
    /// Geometry it is compiled for.
    pub geometry: FixedBackwardGeometry,
    /// The per-head kernel.
    pub kernel: Kernel,
}

/// Every fixed-geometry chunked-backward instantiation (the host launches a row's kernel for a
/// chunked call whose dtype and geometry match it exactly).
pub const FIXED_BACKWARD: [FixedBackward; 2] = [
    FixedBackward {
        dtype: crate::Dtype::F32,
        geometry: BACKWARD_GEOMETRY_R4_N128_P64_NA32,
        kernel: Kernel::BackwardChunkedFixedF32R4N128P64Na32,
    },
    FixedBackward {
        dtype: crate::Dtype::Bf16,
        geometry: BACKWARD_GEOMETRY_R4_N128_P64_NA32,
        kernel: Kernel::BackwardChunkedFixedBf16R4N128P64Na32,
    },
];

/// One instantiation of the tensor-core backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorCoreBackward {
    /// Activation dtype.
    pub dtype: crate::Dtype,
    /// Geometry it is compiled for.
    pub geometry: FixedBackwardGeometry,
    /// The checkpoint sweep launched before it.
    pub ckpt: Kernel,
    /// The segment-state pass that runs before a split checkpoint sweep (the tensor-core
    /// forward's, see `backward::checkpoint_sweep_segments`).
    pub sweep_segment_state: Kernel,
    /// The per-head kernel.
    pub kernel: Kernel,
    /// The tensor-core forward writing the same checkpoints beside its outputs (a training
    /// step's forward, after which the backward skips the sweep).
    pub forward: Kernel,
}

/// Every tensor-core backward instantiation (the host launches a row's kernels for a call whose
/// dtype and geometry match it exactly, see `backward::BackwardPath::TensorCore`).
pub const TENSOR_CORE_BACKWARD: [TensorCoreBackward; 1] = [TensorCoreBackward {
    dtype: crate::Dtype::Bf16,
    geometry: BACKWARD_GEOMETRY_R4_N128_P64_NA32,
    ckpt: Kernel::BackwardCkptMmaBf16R4N128P64Na32C16,
    sweep_segment_state: Kernel::SegmentStateMmaBf16R4N128P64Na32C16,
    kernel: Kernel::BackwardMmaBf16R4N128P64Na32C16,
    forward: Kernel::ForwardCkptMmaBf16R4N128P64Na32C16,
}];

/// A kernel family instantiated for both activation types and R ∈ {1, 2, 4, 8}, in the order
/// f32 R1, R2, R4, R8, then bf16 R1, R2, R4, R8 (see [`ranked`]).
type RankedFamily = [Kernel; 8];

const DECODE: RankedFamily = [
    Kernel::DecodeF32R1,
    Kernel::DecodeF32R2,
    Kernel::DecodeF32R4,
    Kernel::DecodeF32R8,
    Kernel::DecodeBf16R1,
    Kernel::DecodeBf16R2,
    Kernel::DecodeBf16R4,
    Kernel::DecodeBf16R8,
];

const DECODE_ROWS: RankedFamily = [
    Kernel::DecodeRowsF32R1,
    Kernel::DecodeRowsF32R2,
    Kernel::DecodeRowsF32R4,
    Kernel::DecodeRowsF32R8,
    Kernel::DecodeRowsBf16R1,
    Kernel::DecodeRowsBf16R2,
    Kernel::DecodeRowsBf16R4,
    Kernel::DecodeRowsBf16R8,
];

const DECODE_STREAM: RankedFamily = [
    Kernel::DecodeStreamF32R1,
    Kernel::DecodeStreamF32R2,
    Kernel::DecodeStreamF32R4,
    Kernel::DecodeStreamF32R8,
    Kernel::DecodeStreamBf16R1,
    Kernel::DecodeStreamBf16R2,
    Kernel::DecodeStreamBf16R4,
    Kernel::DecodeStreamBf16R8,
];

const FORWARD_FMA: RankedFamily = [
    Kernel::ForwardFmaF32R1,
    Kernel::ForwardFmaF32R2,
    Kernel::ForwardFmaF32R4,
    Kernel::ForwardFmaF32R8,
    Kernel::ForwardFmaBf16R1,
    Kernel::ForwardFmaBf16R2,
    Kernel::ForwardFmaBf16R4,
    Kernel::ForwardFmaBf16R8,
];

const SEGMENT_STATE: RankedFamily = [
    Kernel::SegmentStateF32R1,
    Kernel::SegmentStateF32R2,
    Kernel::SegmentStateF32R4,
    Kernel::SegmentStateF32R8,
    Kernel::SegmentStateBf16R1,
    Kernel::SegmentStateBf16R2,
    Kernel::SegmentStateBf16R4,
    Kernel::SegmentStateBf16R8,
];

/// The member of `family` for an activation type and rank; `None` for a rank not instantiated.
fn ranked(family: &RankedFamily, dtype: crate::Dtype, rank: usize) -> Option<Kernel> {
    let slot = match rank {
        1 => 0,
        2 => 1,
        4 => 2,
        8 => 3,
        _ => return None,
    };
    let half = match dtype {
        crate::Dtype::F32 => 0,
        crate::Dtype::Bf16 => 4,
    };
    Some(family[half + slot])
}

/// The `.entry` names declared in a PTX text, in order.
pub fn ptx_entry_points(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|line| line.trim_start().strip_prefix(".visible .entry "))
        .map(|rest| rest.split('(').next().unwrap_or(rest).trim())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_ptx_entry_points() {
        let mut in_ptx = ptx_entry_points(crate::PTX);
        in_ptx.sort_unstable();
        let mut in_table: Vec<_> = Kernel::ALL.iter().map(|k| k.symbol()).collect();
        in_table.sort_unstable();
        assert_eq!(
            in_ptx, in_table,
            "Kernel::ALL and the PTX's .entry set differ"
        );
    }

    #[test]
    fn ptx_targets_sm80() {
        assert!(
            crate::PTX.contains(".target sm_80"),
            "PTX not built for sm_80"
        );
        assert!(crate::PTX.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
        assert!(crate::PTX.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
        assert!(
            !crate::PTX.contains(".local"),
            "PTX uses local memory (stack)"
        );
    }

    /// How entry-point symbols spell an activation dtype.
    fn symbol_dtype(dtype: crate::Dtype) -> &'static str {
        match dtype {
            crate::Dtype::F32 => "f32",
            crate::Dtype::Bf16 => "bf16",
        }
    }

    #[test]
    fn fixed_forward_rows_name_their_geometry_and_match_only_it() {
        for row in FIXED_FORWARD {
            let g = row.geometry;
            let dtype = symbol_dtype(row.dtype);
            let suffix = format!(
                "{dtype}_r{}_n{}_p{}_na{}_c{}",
                g.rank, g.state_dim, g.head_dim, g.num_angles, g.chunk
            );
            assert_eq!(row.forward.symbol(), format!("forward_fixed_{suffix}"));
            assert_eq!(
                row.segment_state.symbol(),
                format!("segment_state_fixed_{suffix}")
            );
            assert_eq!(
                Kernel::forward_fixed(row.dtype, g),
                Some((row.forward, row.segment_state))
            );
            let other = FixedForwardGeometry {
                chunk: g.chunk + 1,
                ..g
            };
            assert_eq!(Kernel::forward_fixed(row.dtype, other), None);
            if let Some((tc, tc_seg)) = row.tensor_core {
                assert_eq!(tc.symbol(), format!("forward_mma_{suffix}"));
                assert_eq!(tc_seg.symbol(), format!("segment_state_mma_{suffix}"));
                assert_eq!(
                    Kernel::forward_tensor_core(row.dtype, g),
                    Some((tc, tc_seg))
                );
            }
            if let Some(short) = row.tensor_core_short {
                assert!(row.tensor_core.is_some());
                assert_eq!(short.symbol(), format!("forward_mma_short_{suffix}"));
                assert_eq!(Kernel::forward_tensor_core_short(row.dtype, g), Some(short));
            }
            if let Some(units) = row.tensor_core_units {
                assert!(row.tensor_core_short.is_some());
                assert_eq!(units.symbol(), format!("forward_mma_units_{suffix}"));
                assert_eq!(Kernel::forward_tensor_core_units(row.dtype, g), Some(units));
            }
            assert_eq!(Kernel::forward_tensor_core(row.dtype, other), None);
        }
    }

    #[test]
    fn fixed_decode_rows_name_their_geometry_and_match_only_it() {
        for row in FIXED_DECODE {
            let g = row.geometry;
            let dtype = symbol_dtype(row.dtype);
            let suffix = format!(
                "fixed_{dtype}_r{}_n{}_p{}_na{}",
                g.rank, g.state_dim, g.head_dim, g.num_angles
            );
            assert_eq!(row.shared_tile.symbol(), format!("decode_{suffix}"));
            assert_eq!(
                row.register_resident.symbol(),
                format!("decode_rows_{suffix}")
            );
            let general = Kernel::decode_stream(row.dtype, g.rank);
            assert!(
                row.streaming.symbol() == format!("decode_stream_{suffix}")
                    || Some(row.streaming) == general,
                "{:?}",
                row.streaming
            );
            assert_eq!(Kernel::decode_fixed(row.dtype, g), Some(row));
            let other = FixedDecodeGeometry {
                num_angles: g.num_angles - 1,
                ..g
            };
            assert_eq!(Kernel::decode_fixed(row.dtype, other), None);
        }
    }

    #[test]
    fn ranked_families_pick_the_entry_named_for_dtype_and_rank() {
        use crate::Dtype;
        type Pick = fn(Dtype, usize) -> Option<Kernel>;
        let families: [(&str, Pick); 5] = [
            ("decode", Kernel::decode),
            ("decode_rows", Kernel::decode_rows),
            ("decode_stream", Kernel::decode_stream),
            ("forward_fma", Kernel::forward_fma),
            ("segment_state", Kernel::segment_state),
        ];
        for (prefix, pick) in families {
            for (dtype, name) in [(Dtype::F32, "f32"), (Dtype::Bf16, "bf16")] {
                for rank in [1, 2, 4, 8] {
                    let kernel = pick(dtype, rank).expect("instantiated rank");
                    assert_eq!(kernel.symbol(), format!("{prefix}_{name}_r{rank}"));
                }
                for rank in [0, 3, 5, 16] {
                    assert_eq!(pick(dtype, rank), None, "{prefix} rank {rank}");
                }
            }
        }
    }
}
