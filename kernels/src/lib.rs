//! Device code of mamba3-rs.
//!
//! Built only for `nvptx64-nvidia-cuda` by `host/build.rs` (nested cargo, `-Zbuild-std=core`,
//! `-C target-cpu=sm_80`). Inline PTX lives in [`arch`]; everything above it is plain Rust.
//! Every `extern "ptx-kernel"` entry point is listed in [`primitives`] (self-test kernels) and the
//! kernel-family modules.
#![no_std]
#![feature(abi_ptx, asm_experimental_arch, core_intrinsics, stdarch_nvptx)]
#![allow(internal_features)]
#![warn(missing_docs)]

pub mod angles;
pub mod arch;
pub mod backward_chunked;
pub mod backward_mma;
pub mod backward_recurrent;
pub mod chunked_forward;
pub mod chunked_forward_mma;
pub mod chunked_forward_tf32;
pub mod decode;
pub mod decode_mma;
pub mod decode_mma_chunk;
pub mod decode_mma_tokens;
pub mod decode_rows;
pub mod decode_stream;
pub mod elem;
pub mod f16_split;
pub mod forward_ws;
pub mod forward_ws_f32;
pub mod frag;
pub mod geometry;
pub mod math;
pub mod primitives;
pub mod segment_state;
pub mod smem;
pub mod tf32x3;
pub mod tile_mac;
pub mod tile_mma;
pub mod warp_reduce;
pub mod warp_scan;

/// Kernels never unwind; a panic (out-of-range index in a debug build) traps the whole grid.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    arch::sreg::trap()
}
