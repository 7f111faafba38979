//! One training step of a Mamba-3 MIMO layer on the GPU: `backward::forward_for_backward` (the
//! chunked forward, split into sequence segments where the batch leaves SMs idle), then
//! `backward::backward_with_checkpoints` for a random ∂L/∂out, both checked against the CPU golden
//! model. By default float32 activations on a small geometry; with `--bf16`, bf16 activations at
//! the tensor-core geometry (R = 4, N = 128, P = 64, Na = 32), where the forward also writes the
//! tensor-core backward's checkpoints and the backward skips its checkpoint sweep.
//! Run with `cargo run --release --example forward_backward [-- --bf16]`; without a GPU it says
//! so and exits.

use mamba3::backward::{self, Gradients};
use mamba3::cuda::CudaSlice;
use mamba3::forward::{self, Activation, ForwardConfig, ForwardInputs};
use mamba3::golden::{self, Mamba3Geometry, Mamba3Inputs, RandomOptions, SplitMix64};
use mamba3::{Gpu, OutputMode, Rotation};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `max|ours − reference| / max|reference|`.
fn normalized_error(ours: &[f64], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0f64, |m, r| m.max(r.abs()));
    let worst = ours
        .iter()
        .zip(reference)
        .fold(0f64, |m, (o, r)| m.max((o - r).abs()));
    worst / scale.max(f64::MIN_POSITIVE)
}

/// Rounds every activation of `inputs` to `T` and every parameter to f32, as the GPU sees them,
/// so that the golden model runs on the same values.
fn round_to_device<T: Activation>(inputs: &mut Mamba3Inputs) {
    let act = |v: &mut Vec<f64>| v.iter_mut().for_each(|x| *x = T::from_f64(*x).to_f64());
    let f32s = |v: &mut Vec<f64>| v.iter_mut().for_each(|x| *x = *x as f32 as f64);
    for v in [
        &mut inputs.q,
        &mut inputs.k,
        &mut inputs.v,
        &mut inputs.trap,
    ] {
        act(v);
    }
    if let Some(z) = inputs.z.as_mut() {
        act(z);
    }
    for v in [
        &mut inputs.dt,
        &mut inputs.adt,
        &mut inputs.angle_logits,
        &mut inputs.q_bias,
        &mut inputs.k_bias,
        &mut inputs.mimo_v,
    ] {
        f32s(v);
    }
    for v in [&mut inputs.mimo_z, &mut inputs.mimo_o, &mut inputs.d]
        .into_iter()
        .flatten()
    {
        f32s(v);
    }
}

/// The training step in activation type `T` on `geometry`; prints the errors against the golden
/// model.
fn train_step<T: Activation>(gpu: &Gpu, geometry: Mamba3Geometry) -> Result<()> {
    let options = RandomOptions {
        rotation: Rotation::HalfSplit,
        mode: OutputMode::Gated,
        has_z: true,
        has_d: true,
    };
    let mut inputs = Mamba3Inputs::random(geometry, options, 7)?;
    round_to_device::<T>(&mut inputs);

    let stream = gpu.context().new_stream()?;
    let act = |v: &[f64]| -> Result<CudaSlice<T>> {
        Ok(stream.clone_htod(&v.iter().map(|x| T::from_f64(*x)).collect::<Vec<_>>())?)
    };
    let f32s = |v: &[f64]| -> Result<CudaSlice<f32>> {
        Ok(stream.clone_htod(&v.iter().map(|x| *x as f32).collect::<Vec<_>>())?)
    };
    let (q, k, v, trap) = (
        act(&inputs.q)?,
        act(&inputs.k)?,
        act(&inputs.v)?,
        act(&inputs.trap)?,
    );
    let z = act(inputs.z.as_deref().expect("drawn with z"))?;
    let (dt, adt, angles) = (
        f32s(&inputs.dt)?,
        f32s(&inputs.adt)?,
        f32s(&inputs.angle_logits)?,
    );
    let (q_bias, k_bias, mimo_v) = (
        f32s(&inputs.q_bias)?,
        f32s(&inputs.k_bias)?,
        f32s(&inputs.mimo_v)?,
    );
    let mimo_z = f32s(inputs.mimo_z.as_deref().expect("drawn with z"))?;
    let mimo_o = f32s(inputs.mimo_o.as_deref().expect("gated mode"))?;
    let d = f32s(inputs.d.as_deref().expect("drawn with D"))?;
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
        dtype: T::DTYPE,
        rotation: options.rotation,
        mode: options.mode,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    };
    println!("{} ({:?} activations)", gpu.name(), T::DTYPE);
    println!(
        "forward kernels: {:?}",
        forward::dispatch_paths_on_gpu(gpu, &config)
    );
    println!(
        "backward kernels: {:?}",
        backward::dispatch_paths_on_gpu(gpu, &config)
    );

    let out_len = geometry.batch * geometry.seq_len * geometry.heads * inputs.output_width();
    let mut out = stream.alloc_zeros::<T>(out_len)?;
    let mut forward_workspace =
        stream.alloc_zeros::<f32>(forward::workspace_len(&config, gpu.sm_count()).max(1))?;
    let mut workspace = stream
        .alloc_zeros::<f32>(backward::workspace_len_on(gpu, &config).ok_or("workspace size")?)?;
    let checkpoints = backward::forward_for_backward(
        gpu,
        &stream,
        &config,
        &device_inputs,
        &mut out.as_view_mut(),
        None,
        Some(&mut forward_workspace.as_view_mut()),
        &mut workspace.as_view_mut(),
    )?;
    println!(
        "{}",
        if checkpoints.written() {
            "the forward wrote the backward's checkpoints: the backward skips its checkpoint sweep"
        } else {
            "the forward wrote no checkpoints (not a tensor-core backward call): the backward is \
             the plain one"
        }
    );

    let mut rng = SplitMix64::new(11);
    let dout_host: Vec<f64> = (0..out_len)
        .map(|_| T::from_f64(rng.normal()).to_f64())
        .collect();
    let dout = act(&dout_host)?;
    let mut grads = Gradients::<T>::alloc(&stream, &config, false)?;
    backward::backward_with_checkpoints(
        gpu,
        &stream,
        &config,
        &checkpoints,
        &device_inputs,
        &dout.as_view(),
        &mut grads.as_views_mut(),
        &mut workspace.as_view_mut(),
    )?;
    stream.synchronize()?;

    let reference = golden::forward_recurrent(&inputs)?;
    let reference_grads = golden::backward_recurrent(&inputs, &dout_host)?;
    let down_act = |x: &CudaSlice<T>| -> Result<Vec<f64>> {
        Ok(stream.clone_dtoh(x)?.into_iter().map(T::to_f64).collect())
    };
    let down_f32 = |x: &CudaSlice<f32>| -> Result<Vec<f64>> {
        Ok(stream.clone_dtoh(x)?.into_iter().map(f64::from).collect())
    };
    println!(
        "out     error vs golden: {:.2e}",
        normalized_error(&down_act(&out)?, &reference.out)
    );
    for (name, ours, theirs) in [
        ("dq", down_act(&grads.q)?, &reference_grads.q),
        ("dk", down_act(&grads.k)?, &reference_grads.k),
        ("dv", down_act(&grads.v)?, &reference_grads.v),
        ("ddt", down_f32(&grads.dt)?, &reference_grads.dt),
        (
            "dangles",
            down_f32(&grads.angles)?,
            &reference_grads.angle_logits,
        ),
        ("dmimo_v", down_f32(&grads.mimo_v)?, &reference_grads.mimo_v),
    ] {
        println!(
            "{name:<7} error vs golden: {:.2e}",
            normalized_error(&ours, theirs)
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no GPU here ({e}); nothing to run");
            return Ok(());
        }
    };
    if std::env::args().any(|a| a == "--bf16") {
        let geometry = Mamba3Geometry {
            batch: 1,
            seq_len: 300,
            rank: 4,
            groups: 1,
            heads: 4,
            state_dim: 128,
            head_dim: 64,
            num_angles: 32,
        };
        train_step::<half::bf16>(&gpu, geometry)
    } else {
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
        train_step::<f32>(&gpu, geometry)
    }
}
