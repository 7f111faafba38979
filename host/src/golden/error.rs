//! Typed errors for every argument check of the public API.

use thiserror::Error;

/// Why a golden-model call rejected its arguments: names the argument, its value and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Mamba3Error {
    /// A geometry dimension that must be at least 1 is 0.
    #[error("geometry.{name} = 0, but it must be at least 1")]
    ZeroDimension {
        /// Name of the geometry field.
        name: &'static str,
    },
    /// The state dimension N is odd, so it cannot be split into rotation pairs.
    #[error(
        "geometry.state_dim = {state_dim} is odd, but rotation pairs need an even state dimension"
    )]
    OddStateDim {
        /// The offending N.
        state_dim: usize,
    },
    /// More rotary angles than rotation pairs.
    #[error("geometry.num_angles = {num_angles} exceeds state_dim / 2 = {max}")]
    TooManyAngles {
        /// The offending Na.
        num_angles: usize,
        /// The largest allowed Na (N/2).
        max: usize,
    },
    /// The value heads cannot be split evenly among the q/k groups.
    #[error("geometry.heads = {heads} is not a multiple of geometry.groups = {groups}")]
    HeadsNotMultipleOfGroups {
        /// H.
        heads: usize,
        /// G.
        groups: usize,
    },
    /// Chunk size 0 for the chunked form.
    #[error("chunk_size = 0, but it must be at least 1")]
    ZeroChunkSize,
    /// A flat buffer does not have the element count its shape needs.
    #[error("`{name}` has {actual} elements, but shape {shape} needs {expected}")]
    ShapeMismatch {
        /// Name of the argument.
        name: &'static str,
        /// The required shape, with its values, e.g. `(B,H,S)=(1,2,3)`.
        shape: String,
        /// Required element count.
        expected: usize,
        /// Element count supplied.
        actual: usize,
    },
    /// A buffer meant to hold whole rows of `seq_len` elements does not.
    #[error(
        "`{name}` has {len} elements, which is not a positive multiple of seq_len = {seq_len}"
    )]
    RowLength {
        /// Name of the argument.
        name: &'static str,
        /// Element count supplied.
        len: usize,
        /// Row length required.
        seq_len: usize,
    },
    /// Some tensor would need more elements than a `Vec<f64>` can hold (isize::MAX bytes).
    #[error("`{name}` would need more than isize::MAX bytes")]
    SizeOverflow {
        /// Name of the tensor.
        name: &'static str,
    },
    /// `z` is present but `mimo_z` is not.
    #[error("`z` is given but `mimo_z` is not; the gate silu(z * mimo_z) needs both")]
    ZWithoutMimoZ,
    /// `mimo_z` is present but `z` is not.
    #[error("`mimo_z` is given but `z` is not; mimo_z only scales z inside the gate")]
    MimoZWithoutZ,
    /// Fused RMSNorm requested without `mimo_o` (the norm only exists in the contracted output mode).
    #[error("`norm` is given but `mimo_o` is not; the fused head-wise RMSNorm requires the mimo_o contraction")]
    NormWithoutMimoO,
    /// RMSNorm epsilon is not a finite positive number.
    #[error("norm.eps = {eps}, but it must be finite and > 0")]
    InvalidNormEps {
        /// The offending epsilon.
        eps: f64,
    },
    /// A token range is empty or leaves the sequence.
    #[error("token range {start}..{end} is empty or not inside 0..{seq_len}")]
    InvalidTokenRange {
        /// First token requested.
        start: usize,
        /// One past the last token requested.
        end: usize,
        /// Sequence length available.
        seq_len: usize,
    },
}
