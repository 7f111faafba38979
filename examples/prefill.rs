//! A bf16 prefill at the benchmark geometry (R=4, N=128, P=64, Na=32, C=16), which runs the
//! tensor-core forward: prints the kernels the call selects, its time, and its error against the
//! CPU golden model run on the same bf16-rounded inputs.
//! Run with `cargo run --release --example prefill`; without a GPU it says so and exits.

use half::bf16;
use mamba3::cuda::CudaSlice;
use mamba3::forward::{self, ForwardConfig, ForwardInputs};
use mamba3::golden::{self, Mamba3Geometry, Mamba3Inputs, RandomOptions};
use mamba3::{Dtype, Gpu, OutputMode, Rotation};

/// `max|ours − reference| / max|reference|`.
fn normalized_error(ours: &[bf16], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0f64, |m, r| m.max(r.abs()));
    let worst = ours
        .iter()
        .zip(reference)
        .fold(0f64, |m, (o, r)| m.max((o.to_f64() - r).abs()));
    worst / scale.max(f64::MIN_POSITIVE)
}

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
    let to_bf16 = |x: &mut Vec<f64>| x.iter_mut().for_each(|v| *v = bf16::from_f64(*v).to_f64());
    let to_f32 = |x: &mut Vec<f64>| x.iter_mut().for_each(|v| *v = *v as f32 as f64);
    for x in [
        &mut inputs.q,
        &mut inputs.k,
        &mut inputs.v,
        &mut inputs.trap,
    ] {
        to_bf16(x);
    }
    to_bf16(inputs.z.as_mut().expect("drawn with z"));
    for x in [
        &mut inputs.dt,
        &mut inputs.adt,
        &mut inputs.angle_logits,
        &mut inputs.q_bias,
        &mut inputs.k_bias,
        &mut inputs.mimo_v,
    ] {
        to_f32(x);
    }
    for x in [&mut inputs.mimo_z, &mut inputs.mimo_o, &mut inputs.d] {
        to_f32(x.as_mut().expect("drawn with z, D and gated mode"));
    }

    let stream = gpu.context().new_stream()?;
    let upload_bf16 = |v: &[f64]| -> Result<CudaSlice<bf16>, Box<dyn std::error::Error>> {
        Ok(stream.clone_htod(&v.iter().map(|x| bf16::from_f64(*x)).collect::<Vec<_>>())?)
    };
    let upload_f32 = |v: &[f64]| -> Result<CudaSlice<f32>, Box<dyn std::error::Error>> {
        Ok(stream.clone_htod(&v.iter().map(|x| *x as f32).collect::<Vec<_>>())?)
    };
    let (q, k, v, trap) = (
        upload_bf16(&inputs.q)?,
        upload_bf16(&inputs.k)?,
        upload_bf16(&inputs.v)?,
        upload_bf16(&inputs.trap)?,
    );
    let z = upload_bf16(inputs.z.as_deref().expect("drawn with z"))?;
    let (dt, adt, angles) = (
        upload_f32(&inputs.dt)?,
        upload_f32(&inputs.adt)?,
        upload_f32(&inputs.angle_logits)?,
    );
    let (q_bias, k_bias, mimo_v) = (
        upload_f32(&inputs.q_bias)?,
        upload_f32(&inputs.k_bias)?,
        upload_f32(&inputs.mimo_v)?,
    );
    let mimo_z = upload_f32(inputs.mimo_z.as_deref().expect("drawn with z"))?;
    let mimo_o = upload_f32(inputs.mimo_o.as_deref().expect("gated mode"))?;
    let d = upload_f32(inputs.d.as_deref().expect("drawn with D"))?;
    let device_inputs = ForwardInputs {
        q: q.as_view(),
        k: k.as_view(),
        v: v.as_view(),
        z: Some(z.as_view()),
        trap: trap.as_view(),
        dt: dt.as_view(),
        adt: adt.as_view(),
        angles: angles.as_view(),
        q_bias: q_bias.as_view(),
        k_bias: k_bias.as_view(),
        mimo_v: mimo_v.as_view(),
        mimo_z: Some(mimo_z.as_view()),
        mimo_o: Some(mimo_o.as_view()),
        d: Some(d.as_view()),
        norm_weight: None,
    };
    let config = ForwardConfig {
        batch: geometry.batch,
        seq_len: geometry.seq_len,
        rank: geometry.rank,
        groups: geometry.groups,
        heads: geometry.heads,
        state_dim: geometry.state_dim,
        head_dim: geometry.head_dim,
        num_angles: geometry.num_angles,
        chunk_size: 16,
        dtype: Dtype::Bf16,
        rotation: options.rotation,
        mode: options.mode,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    };
    println!("{}", gpu.name());
    println!(
        "forward kernels: {:?}",
        forward::dispatch_paths_with_workspace(&config, gpu.sm_count())
    );

    // The first call loads the module's functions; time the second.
    forward::forward_alloc(&gpu, &stream, &config, &device_inputs, false)?;
    stream.synchronize()?;
    let start = std::time::Instant::now();
    let (out, _) = forward::forward_alloc(&gpu, &stream, &config, &device_inputs, false)?;
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
        normalized_error(&stream.clone_dtoh(&out)?, &reference.out)
    );
    Ok(())
}
