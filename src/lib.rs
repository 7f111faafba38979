//! Mamba-3 MIMO GPU kernels (forward, backward, decode) written in Rust; the Mamba-1 selective scan
//! is planned, not yet here.
//!
//! This facade re-exports [`mamba3_host`], the library that builds, loads and launches the kernels
//! and holds the CPU golden model. See the README for requirements and the supported GPUs.

#![warn(missing_docs)]

pub use mamba3_host::*;
