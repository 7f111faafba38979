//! Decode a few tokens of one Mamba-3 MIMO layer on the GPU and check them against the CPU golden
//! model. Run with `cargo run --release --example decode`; without a GPU it says so and exits.

use half::bf16;
use mamba3::decode::{self, DecodeConfig, DecodeInputs, DecodeState, DecodeWeights};
use mamba3::golden::{self, FinalStates, Mamba3Geometry, Mamba3Inputs, RandomOptions};
use mamba3::{Gpu, OutputMode, Rotation};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no GPU here ({e}); nothing to run");
            return Ok(());
        }
    };
    let (batch, heads, rank, n, p, na, tokens) = (4, 8, 4, 64, 32, 16, 3);
    let geometry = Mamba3Geometry {
        batch,
        seq_len: tokens,
        rank,
        groups: 1,
        heads,
        state_dim: n,
        head_dim: p,
        num_angles: na,
    };
    let options = RandomOptions {
        rotation: Rotation::HalfSplit,
        mode: OutputMode::Gated,
        has_z: true,
        has_d: true,
    };
    let inputs = Mamba3Inputs::random(geometry, options, 1)?;

    // Everything the device sees: activations in bf16, the rest in f32.
    let stream = gpu.context().new_stream()?;
    let act =
        |v: &[f64]| stream.clone_htod(&v.iter().map(|x| bf16::from_f64(*x)).collect::<Vec<_>>());
    let f32s = |v: &[f64]| stream.clone_htod(&v.iter().map(|x| *x as f32).collect::<Vec<_>>());
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

    let config = DecodeConfig {
        batch,
        heads,
        groups: 1,
        rank,
        state_dim: n,
        head_dim: p,
        num_angles: na,
        rotation: Rotation::HalfSplit,
        mode: OutputMode::Gated,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    };
    println!(
        "{} selects {:?} (programmatic dependent launch {})",
        gpu.name(),
        config.dispatch_paths::<bf16>(tokens, gpu.sm_count(), gpu.max_shared_memory_optin()),
        if gpu.programmatic_launch() {
            "on"
        } else {
            "off"
        }
    );
    let mut state = DecodeState::<bf16>::new(&stream, config)?;
    let weights = DecodeWeights {
        q_bias: &q_bias,
        k_bias: &k_bias,
        mimo_v: &mimo_v,
        mimo_z: Some(&mimo_z),
        mimo_o: Some(&mimo_o),
        d: Some(&d),
        norm_weight: None,
    };
    let call = DecodeInputs {
        q: &q,
        k: &k,
        v: &v,
        z: Some(&z),
        trap: &trap,
        dt: &dt,
        adt: &adt,
        angles: &angles,
    };
    let mut out = stream.alloc_zeros::<bf16>(config.output_len(tokens))?;
    decode::step_tokens(&gpu, &stream, &mut state, &weights, &call, tokens, &mut out)?;
    let got = stream.clone_dtoh(&out)?;

    // The golden model runs on the unrounded inputs, so the figure includes bf16 input rounding.
    let want = golden::step(&inputs, &mut FinalStates::zeros(&geometry)?)?;
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let err = got
        .iter()
        .zip(&want)
        .fold(0.0f64, |m, (g, w)| m.max((g.to_f64() - w).abs()));
    println!(
        "{tokens} tokens × {batch} sequences: max |gpu − golden| / max |golden| = {:.2e}",
        err / scale
    );
    Ok(())
}
