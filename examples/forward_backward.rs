//! One training step of a Mamba-3 MIMO layer on the GPU: the chunked forward, then the backward
//! for a random ∂L/∂out, both checked against the CPU golden model (float32 activations).
//! Run with `cargo run --release --example forward_backward`; without a GPU it says so and exits.

use mamba3::backward;
use mamba3::cuda::CudaSlice;
use mamba3::forward::{self, ForwardConfig, ForwardInputs};
use mamba3::golden::{self, Mamba3Geometry, Mamba3Inputs, RandomOptions, SplitMix64};
use mamba3::{Dtype, Gpu, OutputMode, Rotation};

/// `max|ours − reference| / max|reference|`.
fn normalized_error(ours: &[f32], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0f64, |m, r| m.max(r.abs()));
    let worst = ours
        .iter()
        .zip(reference)
        .fold(0f64, |m, (o, r)| m.max((*o as f64 - r).abs()));
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
        batch: 2,
        seq_len: 100,
        rank: 4,
        groups: 1,
        heads: 4,
        state_dim: 32,
        head_dim: 16,
        num_angles: 8,
    };
    let options = RandomOptions {
        rotation: Rotation::HalfSplit,
        mode: OutputMode::Gated,
        has_z: true,
        has_d: true,
    };
    let inputs = Mamba3Inputs::random(geometry, options, 7)?;

    let stream = gpu.context().new_stream()?;
    let upload = |v: &[f64]| -> Result<CudaSlice<f32>, Box<dyn std::error::Error>> {
        Ok(stream.clone_htod(&v.iter().map(|x| *x as f32).collect::<Vec<_>>())?)
    };
    let (q, k, v, trap) = (
        upload(&inputs.q)?,
        upload(&inputs.k)?,
        upload(&inputs.v)?,
        upload(&inputs.trap)?,
    );
    let z = upload(inputs.z.as_deref().expect("drawn with z"))?;
    let (dt, adt, angles) = (
        upload(&inputs.dt)?,
        upload(&inputs.adt)?,
        upload(&inputs.angle_logits)?,
    );
    let (q_bias, k_bias, mimo_v) = (
        upload(&inputs.q_bias)?,
        upload(&inputs.k_bias)?,
        upload(&inputs.mimo_v)?,
    );
    let mimo_z = upload(inputs.mimo_z.as_deref().expect("drawn with z"))?;
    let mimo_o = upload(inputs.mimo_o.as_deref().expect("gated mode"))?;
    let d = upload(inputs.d.as_deref().expect("drawn with D"))?;
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
        dtype: Dtype::F32,
        rotation: options.rotation,
        mode: options.mode,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    };
    println!("{}", gpu.name());
    println!(
        "forward kernels: {:?}",
        forward::dispatch_paths_with_workspace(
            &config,
            gpu.sm_count(),
            gpu.max_shared_memory_optin()
        )
    );
    println!(
        "backward kernels: {:?}",
        backward::dispatch_paths(&config, gpu.max_shared_memory_optin())
    );

    let (out, _) = forward::forward_alloc(&gpu, &stream, &config, &device_inputs, false)?;

    let mut rng = SplitMix64::new(11);
    let dout_host: Vec<f64> = (0..inputs.geometry.batch
        * inputs.geometry.seq_len
        * inputs.geometry.heads
        * inputs.output_width())
        .map(|_| rng.normal())
        .collect();
    let dout = upload(&dout_host)?;
    let grads = backward::backward_alloc(&gpu, &stream, &config, &device_inputs, &dout.as_view())?;
    stream.synchronize()?;

    let reference = golden::forward_recurrent(&inputs)?;
    let reference_grads = golden::backward_recurrent(&inputs, &dout_host)?;
    println!(
        "out   error vs golden: {:.2e}",
        normalized_error(&stream.clone_dtoh(&out)?, &reference.out)
    );
    for (name, ours, theirs) in [
        ("dq", &grads.q, &reference_grads.q),
        ("dk", &grads.k, &reference_grads.k),
        ("dv", &grads.v, &reference_grads.v),
        ("ddt", &grads.dt, &reference_grads.dt),
        ("dangles", &grads.angles, &reference_grads.angle_logits),
        ("dmimo_v", &grads.mimo_v, &reference_grads.mimo_v),
    ] {
        println!(
            "{name:<7} error vs golden: {:.2e}",
            normalized_error(&stream.clone_dtoh(ours)?, theirs)
        );
    }
    Ok(())
}
