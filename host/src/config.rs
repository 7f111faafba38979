//! Choices shared by every operator: rotary convention, output mode, activation dtype.

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

/// Which coordinates of an N-vector form the rotated pairs (spec §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Rotation {
    /// Kernel / MIMO convention: pair `(n, n + N/2)` rotated by `θ_n` for `n < Na`.
    #[default]
    HalfSplit,
    /// Interleaved convention: pair `(2j, 2j + 1)` rotated by `θ_j` for `j < Na`.
    Pairwise,
}

impl Rotation {
    /// The code the kernels take (`mamba3_abi::rotation`).
    pub(crate) fn code(self) -> u32 {
        match self {
            Rotation::HalfSplit => mamba3_abi::rotation::HALF_SPLIT,
            Rotation::Pairwise => mamba3_abi::rotation::PAIRWISE,
        }
    }
}

/// How per-rank outputs `y_{t,r}` become the returned tensor (spec §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OutputMode {
    /// `out_t = Σ_r y_{t,r} ⊙ gate_{t,r} ⊙ mimo_o_r`, shape (…,H,P).
    #[default]
    Gated,
    /// `out_t = Σ_r y_{t,r}·rstd_{t,r} ⊙ norm_weight_h ⊙ gate_{t,r} ⊙ mimo_o_r`, shape (…,H,P).
    FusedNorm,
    /// No `mimo_o`: `out[…,r,h,:] = y_{t,r} ⊙ gate_{t,r}`, shape (…,R,H,P).
    Prereduce,
}

impl OutputMode {
    /// The code the kernels take (`mamba3_abi::output_mode`).
    pub(crate) fn code(self) -> u32 {
        match self {
            OutputMode::Gated => mamba3_abi::output_mode::GATED,
            OutputMode::FusedNorm => mamba3_abi::output_mode::FUSED_NORM,
            OutputMode::Prereduce => mamba3_abi::output_mode::PREREDUCE,
        }
    }
}

/// Storage type of activations (q, k, v, z, trap, outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE float32.
    F32,
    /// bfloat16.
    Bf16,
}

impl Dtype {
    /// Bytes per element.
    pub const fn bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }
}

/// A Rust type usable as an activation element on the device.
pub trait Activation:
    DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + 'static
{
    /// Its [`Dtype`].
    const DTYPE: Dtype;
    /// Conversion from f64 (round to nearest).
    fn from_f64(x: f64) -> Self;
    /// Conversion to f64 (exact).
    fn to_f64(self) -> f64;
}

impl Activation for f32 {
    const DTYPE: Dtype = Dtype::F32;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Activation for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
}
