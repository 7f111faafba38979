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

/// The PTX module loaded on a GPU of compute capability `(major, minor)`.
///
/// Below 9.0 this is [`PTX`] itself. From 9.0 on (Hopper and newer) it is [`PTX`] rewritten to
/// PTX ISA 8.0 for `sm_90` with the decode kernels' `griddepcontrol` markers
/// ([`mamba3_abi::GRIDDEPCONTROL_WAIT_MARKER`], [`mamba3_abi::GRIDDEPCONTROL_LAUNCH_DEPENDENTS_MARKER`])
/// turned into the instructions, so that those kernels can be launched with programmatic
/// dependent launch (see [`Gpu::set_programmatic_launch`]), and every line that starts with
/// [`mamba3_abi::SM90_INSTRUCTION_MARKER`] turned into the instruction it carries (the one-token
/// decode's L2 prefetch of its state before the wait). On 9.0 exactly the target is `sm_90a` and
/// the lines behind [`mamba3_abi::SM90A_INSTRUCTION_MARKER`] (`wgmma`) become instructions too
/// ([`has_wgmma`]), and those ending in [`mamba3_abi::NOT_SM90A_INSTRUCTION_MARKER`] (the early
/// exit of kernels that run only there) become comments; newer devices keep them as they are. Nothing else in the text changes. Takes
/// what [`Gpu::compute_capability`] returns.
pub fn ptx_for_compute_capability((major, minor): (i32, i32)) -> std::borrow::Cow<'static, str> {
    if major < 9 {
        return std::borrow::Cow::Borrowed(PTX);
    }
    let wgmma = has_wgmma((major, minor));
    let mut out = String::with_capacity(PTX.len() + 4096);
    for line in PTX.lines() {
        let trimmed = line.trim();
        let replaced = if let Some(version) = trimmed.strip_prefix(".version ") {
            let (major, minor) = version.split_once('.').unwrap_or((version, "0"));
            let older = (major.parse().unwrap_or(0u32), minor.parse().unwrap_or(0u32)) < (8, 0);
            older.then(|| ".version 8.0".to_string())
        } else if trimmed.starts_with(".target sm_") {
            Some(
                if wgmma {
                    ".target sm_90a"
                } else {
                    ".target sm_90"
                }
                .to_string(),
            )
        } else if trimmed == mamba3_abi::GRIDDEPCONTROL_WAIT_MARKER {
            Some("\tgriddepcontrol.wait;".to_string())
        } else if trimmed == mamba3_abi::GRIDDEPCONTROL_LAUNCH_DEPENDENTS_MARKER {
            Some("\tgriddepcontrol.launch_dependents;".to_string())
        } else if let Some(instruction) = trimmed.strip_prefix(mamba3_abi::SM90_INSTRUCTION_MARKER)
        {
            Some(format!("\t{instruction}"))
        } else if wgmma && trimmed.ends_with(mamba3_abi::NOT_SM90A_INSTRUCTION_MARKER) {
            Some(format!("\t// {trimmed}"))
        } else if wgmma {
            trimmed
                .strip_prefix(mamba3_abi::SM90A_INSTRUCTION_MARKER)
                .map(|instruction| format!("\t{instruction}"))
        } else {
            None
        };
        match replaced {
            Some(text) => out.push_str(&text),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    std::borrow::Cow::Owned(out)
}

/// Whether the module for compute capability `(major, minor)` carries the `sm_90a` instructions
/// (`wgmma`): 9.0 only, the one architecture they exist on.
pub fn has_wgmma(compute_capability: (i32, i32)) -> bool {
    compute_capability == (9, 0)
}

/// Re-export of the driver bindings the API exposes (streams, slices, contexts).
pub use cudarc::driver as cuda;
