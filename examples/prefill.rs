//! A bf16 prefill at the benchmark geometry (R=4, N=128, P=64, Na=32, C=16), which runs the
//! tensor-core forward: prints the kernels the call selects, its time, and its error against the
//! CPU golden model run on the same bf16-rounded inputs.
//! Run with `cargo run --release --example prefill`; without a GPU it says so and exits.

// The upload, rounding and config helpers of the GPU tests.
#[path = "../tests/common/mod.rs"]
mod common;

use half::bf16;
use mamba3::forward;
use mamba3::golden::{self, Mamba3Geometry, Mamba3Inputs, RandomOptions};
use mamba3::{Gpu, OutputMode, Rotation};

use common::device::{config_of, down_act, DeviceInputs};
use common::{quantize, rel_err};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no GPU here ({e}); nothing to run");
            return Ok(());
        }
    };
    let geometry = Mamba3Geometry {
        batch: 1,
        seq_len: 1000,
        rank: 4,
        groups: 1,
        heads: 8,
        state_dim: 128,
        head_dim: 64,
        num_angles: 32,
    };
    let options = RandomOptions {
        rotation: Rotation::HalfSplit,
        mode: OutputMode::Gated,
        has_z: true,
        has_d: true,
    };
    let mut inputs = Mamba3Inputs::random(geometry, options, 5)?;
    // The golden model sees exactly what the kernel reads: bf16 activations, f32 parameters.
    quantize::<bf16>(&mut inputs);

    let stream = gpu.context().new_stream()?;
    let device_inputs = DeviceInputs::<bf16>::upload(&stream, &inputs);
    let config = config_of::<bf16>(&inputs, 16);
    println!("{}", gpu.name());
    println!(
        "forward kernels: {:?}",
        forward::dispatch_paths_on_gpu(&gpu, &config)
    );

    // The first call loads the module's functions; time the second.
    forward::forward_alloc(&gpu, &stream, &config, &device_inputs.views(), false)?;
    stream.synchronize()?;
    let start = std::time::Instant::now();
    let (out, _) = forward::forward_alloc(&gpu, &stream, &config, &device_inputs.views(), false)?;
    stream.synchronize()?;
    println!(
        "B={} H={} S={}: {:.0} µs (including the output and workspace allocations)",
        geometry.batch,
        geometry.heads,
        geometry.seq_len,
        start.elapsed().as_secs_f64() * 1e6
    );

    let reference = golden::forward_recurrent(&inputs)?;
    println!(
        "out error vs golden: {:.2e} (bf16 target 1e-2)",
        rel_err(&down_act(&stream, &out), &reference.out)
    );
    Ok(())
}
