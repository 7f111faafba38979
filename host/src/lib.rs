//! Host library of mamba3-rs: Mamba-3 MIMO kernels written in Rust (the Mamba-1 selective scan is
//! planned, not yet here).
//!
//! | CPU concept | here |
//! |---|---|
//! | the device code | [`PTX`], built from `kernels/` by rustc's nvptx64 backend and embedded at build time |
//! | a GPU and its loaded module | [`Gpu`] (one per device ordinal per process) |
//! | one compiled kernel | a row of [`Kernel`], the table every launch goes through |
//! | the Mamba-3 MIMO forward | [`forward`]: config, validation, launch into caller buffers |
//! | its gradients | [`backward`]: same inputs plus `dout`, gradients into caller buffers |
//! | "what is correct" | [`golden`], the float64 CPU model of the spec |
//! | a failure | [`Error`]: typed, naming the argument, its value and the rule |
//!
//! The crate builds and its CPU parts run on machines without CUDA: the driver is loaded
//! dynamically, and [`Gpu::new`] returns [`Error::NoDriver`] / [`Error::NoDevice`] instead of
//! panicking.

#![warn(missing_docs)]

pub mod backward;
mod config;
pub mod decode;
mod device;
mod error;
pub mod forward;
pub mod golden;
mod kernel;
pub mod primitives;

pub use config::{Activation, Dtype, OutputMode, Rotation};
pub use device::Gpu;
pub use error::{Error, Result};
pub use kernel::{
    ptx_entry_points, FixedBackward, FixedBackwardGeometry, FixedDecode, FixedDecodeGeometry,
    FixedForward, FixedForwardGeometry, Kernel, TensorCoreBackward,
};

/// The PTX module of every kernel (PTX ISA 7.0, `sm_80`; the driver JIT-compiles it for sm_80
/// through sm_120).
pub static PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/mamba3_kernels.ptx"));

/// Re-export of the driver bindings the API exposes (streams, slices, contexts).
pub use cudarc::driver as cuda;
