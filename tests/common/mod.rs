//! Shared test helpers: fixture loading, error metrics, random-case strategies.

// Each test binary uses only part of these helpers.
#![allow(dead_code)]

pub mod device;

use std::cell::Cell;
use std::collections::HashMap;
use std::f64::consts::TAU;
use std::path::PathBuf;
use std::sync::Arc;

use mamba3::golden::{
    Mamba3Geometry, Mamba3Inputs, OutputMode, RandomOptions, RmsNormWeight, Rotation,
};
use mamba3::{Activation, Error, Gpu};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

/// Root of the shared fixtures.
pub fn fixture_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures"))
}

/// `max(acc, x)` keeping a NaN: `f64::max` drops one, so a NaN element would vanish from a fold
/// and an output full of NaN could pass.
pub fn nan_max(acc: f64, x: f64) -> f64 {
    if acc.is_nan() || x.is_nan() {
        f64::NAN
    } else {
        acc.max(x)
    }
}

/// `max|ours − reference| / max|reference|` (0 when both are all zero). A NaN anywhere in `ours` gives infinity.
pub fn rel_err(ours: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(ours.len(), reference.len(), "length mismatch");
    let diff = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, nan_max);
    let scale = reference.iter().map(|v| v.abs()).fold(0.0, nan_max);
    if diff == 0.0 {
        0.0
    } else if diff.is_nan() {
        f64::INFINITY
    } else {
        diff / scale.max(f64::MIN_POSITIVE)
    }
}

/// Error of one gradient of a backward call: [`rel_err`], except for a gradient that is zero in
/// exact arithmetic (largest reference element at most 1e-9 of `call_scale`, the largest element
/// of any gradient of the call; e.g. ∂θ at S = 1, where q and k share θ), whose rounding noise is
/// measured against `call_scale` instead of its own (vanishing) magnitude.
pub fn grad_err(ours: &[f64], reference: &[f64], call_scale: f64) -> f64 {
    let scale = reference.iter().map(|v| v.abs()).fold(0.0, nan_max);
    if scale > 1e-9 * call_scale {
        return rel_err(ours, reference);
    }
    let diff = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, nan_max);
    if diff.is_nan() {
        f64::INFINITY
    } else {
        diff / call_scale.max(f64::MIN_POSITIVE)
    }
}

/// Like [`rel_err`] for angles: differences are taken modulo 2π (into [−π, π]) and scaled by the largest
/// reference angle after reduction into [0, 2π).
pub fn angle_rel_err(ours: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(ours.len(), reference.len(), "length mismatch");
    let diff = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| {
            let d = (a - b).rem_euclid(TAU);
            d.min(TAU - d)
        })
        .fold(0.0, nan_max);
    let scale = reference
        .iter()
        .map(|v| v.rem_euclid(TAU))
        .fold(0.0, nan_max);
    if diff == 0.0 {
        0.0
    } else if diff.is_nan() {
        f64::INFINITY
    } else {
        diff / scale.max(f64::MIN_POSITIVE)
    }
}

/// Tracks the worst error seen and which quantity produced it.
#[derive(Default)]
pub struct Worst {
    pub value: Cell<f64>,
    pub label: std::cell::RefCell<String>,
}

impl Worst {
    pub fn record(&self, label: &str, err: f64) -> f64 {
        if err > self.value.get() || err.is_nan() {
            self.value.set(err);
            *self.label.borrow_mut() = label.to_string();
        }
        err
    }
}

/// All F64 tensors of one fixture file, by name: (shape, data).
pub struct Fixture {
    tensors: HashMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Fixture {
    pub fn load(folder: &str, file: &str) -> Self {
        let path = fixture_dir().join(folder).join(file);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
        let st = SafeTensors::deserialize(&bytes).expect("parse safetensors");
        let mut tensors = HashMap::new();
        for name in st.names() {
            let view = st.tensor(name).expect("tensor");
            if view.dtype() != Dtype::F64 {
                continue;
            }
            let data = view
                .data()
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            tensors.insert(name.to_string(), (view.shape().to_vec(), data));
        }
        Self { tensors }
    }

    pub fn get(&self, name: &str) -> &[f64] {
        &self
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("missing tensor {name}"))
            .1
    }

    pub fn opt(&self, name: &str) -> Option<Vec<f64>> {
        self.tensors.get(name).map(|t| t.1.clone())
    }
}

/// The `cases` array of a fixture folder's cases.json.
pub fn load_cases(folder: &str) -> Vec<Value> {
    let path = fixture_dir().join(folder).join("cases.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
    let json: Value = serde_json::from_str(&text).expect("parse cases.json");
    json["cases"].as_array().expect("cases array").clone()
}

pub fn field(case: &Value, name: &str) -> usize {
    case[name]
        .as_u64()
        .unwrap_or_else(|| panic!("case field {name}")) as usize
}

/// Geometry of a Mamba-3 fixture case, with `seq_len` overridden.
pub fn case_geometry(case: &Value, seq_len: usize) -> Mamba3Geometry {
    Mamba3Geometry {
        batch: field(case, "B"),
        seq_len,
        rank: field(case, "R"),
        groups: field(case, "G"),
        heads: field(case, "H"),
        state_dim: field(case, "N"),
        head_dim: field(case, "P"),
        num_angles: field(case, "Na"),
    }
}

/// Inputs of a fixture case; `prefix` is "" for the main sequence or "cont_" for the continuation tokens.
pub fn case_inputs(case: &Value, fx: &Fixture, rotation: Rotation, prefix: &str) -> Mamba3Inputs {
    let seq_len = if prefix.is_empty() {
        field(case, "S")
    } else {
        field(case, "E_cont")
    };
    let tok = |name: &str| fx.get(&format!("{prefix}{name}")).to_vec();
    let norm = fx.opt("norm_weight").map(|weight| RmsNormWeight {
        weight,
        eps: case["norm_eps"].as_f64().expect("norm_eps"),
    });
    Mamba3Inputs {
        geometry: case_geometry(case, seq_len),
        rotation,
        q: tok("q"),
        k: tok("k"),
        v: tok("v"),
        z: fx.opt(&format!("{prefix}z")),
        trap: tok("trap"),
        dt: tok("dt"),
        adt: tok("adt"),
        angle_logits: tok("angle_logits"),
        q_bias: fx.get("q_bias").to_vec(),
        k_bias: fx.get("k_bias").to_vec(),
        mimo_v: fx.get("mimo_v").to_vec(),
        mimo_z: fx.opt("mimo_z"),
        mimo_o: fx.opt("mimo_o"),
        d: fx.opt("D"),
        norm,
    }
}

/// (B,H,A,C) → (B,H,C,A) for `outer = B·H` blocks.
pub fn transpose_last2(x: &[f64], outer: usize, a: usize, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..a {
            for j in 0..c {
                out[(o * c + j) * a + i] = x[(o * a + i) * c + j];
            }
        }
    }
    out
}

/// (B,X,Y,N) → (B,Y,X,N).
pub fn swap_mid(x: &[f64], b: usize, xd: usize, yd: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for bb in 0..b {
        for i in 0..xd {
            for j in 0..yd {
                let src = ((bb * xd + i) * yd + j) * n;
                let dst = ((bb * yd + j) * xd + i) * n;
                out[dst..dst + n].copy_from_slice(&x[src..src + n]);
            }
        }
    }
    out
}

/// Tokens `start..start+count` of a time-major output with `seq_len` tokens of `per_token` values per batch.
pub fn token_range(
    out: &[f64],
    batch: usize,
    seq_len: usize,
    per_token: usize,
    start: usize,
    count: usize,
) -> Vec<f64> {
    (0..batch)
        .flat_map(|b| {
            let base = (b * seq_len + start) * per_token;
            out[base..base + count * per_token].iter().copied()
        })
        .collect()
}

pub const MODES: [OutputMode; 3] = [
    OutputMode::Gated,
    OutputMode::FusedNorm,
    OutputMode::Prereduce,
];
pub const ROTATIONS: [Rotation; 2] = [Rotation::HalfSplit, Rotation::Pairwise];

/// Upstream's 11 dense geometries (spec §8) as (N, P, R, C).
pub const UPSTREAM_GRID: [(usize, usize, usize, usize); 11] = [
    (16, 64, 4, 8),
    (32, 64, 4, 16),
    (64, 64, 4, 16),
    (128, 64, 4, 16),
    (256, 64, 4, 8),
    (64, 128, 4, 16),
    (128, 32, 4, 16),
    (128, 128, 4, 8),
    (128, 64, 8, 8),
    (128, 64, 2, 32),
    (128, 64, 1, 64),
];

/// Fixed-seed proptest configuration without failure files, so runs are reproducible.
pub fn proptest_config(cases: u32, seed: u64) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

/// One random case: geometry, options, chunk size and input seed.
#[derive(Debug, Clone)]
pub struct RandomCase {
    pub geometry: Mamba3Geometry,
    pub options: RandomOptions,
    pub chunk: usize,
    pub seed: u64,
}

/// Random cases with R ∈ 1..=8, N even in 2..=64, Na ∈ 1..=N/2, P ∈ 1..=32, C ∈ 1..=32, S ∈ 1..=`max_seq`,
/// H ∈ 1..=4 with G | H, B ∈ 1..=2, both rotations, every output mode, with/without z and D.
pub fn random_case(max_seq: usize) -> impl Strategy<Value = RandomCase> {
    let sizes = (
        1usize..=8,
        1usize..=32,
        0usize..1000,
        1usize..=32,
        1usize..=32,
        1usize..=max_seq,
        1usize..=4,
        0usize..4,
        1usize..=2,
    );
    let flags = (
        0usize..2,
        0usize..3,
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    );
    (sizes, flags).prop_map(
        |((rank, half, na_pick, p, chunk, s, heads, g_pick, batch), (rot, mode, z, d, seed))| {
            let divisors: Vec<usize> = (1..=heads).filter(|g| heads % g == 0).collect();
            RandomCase {
                geometry: Mamba3Geometry {
                    batch,
                    seq_len: s,
                    rank,
                    groups: divisors[g_pick % divisors.len()],
                    heads,
                    state_dim: 2 * half,
                    head_dim: p,
                    num_angles: 1 + na_pick % half,
                },
                options: RandomOptions {
                    rotation: ROTATIONS[rot],
                    mode: MODES[mode],
                    has_z: z,
                    has_d: d,
                },
                chunk,
                seed,
            }
        },
    )
}

// --- GPU helpers ---

/// The GPU of ordinal 0, or `None` with a printed reason. With `MAMBA3_REQUIRE_GPU=1` (set by the
/// staged GPU suite) a missing GPU is a failure instead of a skip.
pub fn gpu() -> Option<Arc<Gpu>> {
    match Gpu::new(0) {
        Ok(gpu) => Some(gpu),
        Err(e) if std::env::var_os("MAMBA3_REQUIRE_GPU").is_some() => {
            panic!("MAMBA3_REQUIRE_GPU is set but no GPU is usable: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no GPU): {e}");
            None
        }
    }
}

/// Binds the GPU or returns from the test after printing why it was skipped.
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match common::gpu() {
            Some(gpu) => gpu,
            None => return,
        }
    };
}

// --- Rounding to what the device sees, geometry builders ---

/// Rounds every element to the activation type `X` and back.
pub fn round_act<X: Activation>(v: &mut [f64]) {
    v.iter_mut().for_each(|x| *x = X::from_f64(*x).to_f64());
}

/// Rounds every element to f32 and back.
pub fn round_f32(v: &mut [f64]) {
    v.iter_mut().for_each(|x| *x = *x as f32 as f64);
}

/// The activation tensors of `inp` (q, k, v, trap, and z when present): what the device reads in
/// the activation dtype.
fn activations_mut(inp: &mut Mamba3Inputs) -> impl Iterator<Item = &mut Vec<f64>> {
    [
        Some(&mut inp.q),
        Some(&mut inp.k),
        Some(&mut inp.v),
        Some(&mut inp.trap),
        inp.z.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// Every other real-valued tensor of `inp` (token scalars, angle logits, biases, mimo weights, D,
/// norm weight): what the device reads as f32.
fn parameters_mut(inp: &mut Mamba3Inputs) -> impl Iterator<Item = &mut Vec<f64>> {
    [
        Some(&mut inp.dt),
        Some(&mut inp.adt),
        Some(&mut inp.angle_logits),
        Some(&mut inp.q_bias),
        Some(&mut inp.k_bias),
        Some(&mut inp.mimo_v),
        inp.mimo_z.as_mut(),
        inp.mimo_o.as_mut(),
        inp.d.as_mut(),
        inp.norm.as_mut().map(|n| &mut n.weight),
    ]
    .into_iter()
    .flatten()
}

/// Rounds every input to what the device sees: activations (q, k, v, z, trap) to `X`, everything
/// else (and the norm epsilon) to f32.
pub fn quantize<X: Activation>(inp: &mut Mamba3Inputs) {
    activations_mut(inp).for_each(|v| round_act::<X>(v));
    parameters_mut(inp).for_each(|v| round_f32(v));
    if let Some(n) = inp.norm.as_mut() {
        n.eps = n.eps as f32 as f64;
    }
}

/// A geometry from its letters in the order B, S, R, G, H, N, P, Na.
#[allow(clippy::too_many_arguments)]
pub fn geo(
    b: usize,
    s: usize,
    r: usize,
    g: usize,
    h: usize,
    n: usize,
    p: usize,
    na: usize,
) -> Mamba3Geometry {
    Mamba3Geometry {
        batch: b,
        seq_len: s,
        rank: r,
        groups: g,
        heads: h,
        state_dim: n,
        head_dim: p,
        num_angles: na,
    }
}

/// The letters of a geometry in the order B, S, R, G, H, N, P, Na (the inverse of [`geo`]).
pub fn letters(g: &Mamba3Geometry) -> (usize, usize, usize, usize, usize, usize, usize, usize) {
    (
        g.batch,
        g.seq_len,
        g.rank,
        g.groups,
        g.heads,
        g.state_dim,
        g.head_dim,
        g.num_angles,
    )
}

/// Random-input options.
pub fn opts(rotation: Rotation, mode: OutputMode, has_z: bool, has_d: bool) -> RandomOptions {
    RandomOptions {
        rotation,
        mode,
        has_z,
        has_d,
    }
}

/// Asserts that `err` is an [`Error::InvalidArgument`] naming `arg`.
pub fn assert_invalid_argument(err: &Error, arg: &str) {
    assert!(
        matches!(err, Error::InvalidArgument { arg: got, .. } if *got == arg),
        "{err}"
    );
}

/// The worst of `check(case, seed0 + i)` over the `i`-th of `cases`.
pub fn worst_over<C>(cases: &[C], seed0: u64, mut check: impl FnMut(&C, u64) -> f64) -> f64 {
    let mut worst = 0.0f64;
    for (i, case) in cases.iter().enumerate() {
        worst = worst.max(check(case, seed0 + i as u64));
    }
    worst
}

/// How many times [`step_rounding_spread`] a float32 decode may be off: its intermediates each
/// carry a few roundings (bias and rotation of q̂ and k̂, the 2R + 1 terms of the state update,
/// the read-out's sum over N), where the spread moves each input once.
pub const ROUNDINGS: f64 = 8.0;

/// How many times its bf16 rounding spread ([`backward_rounding_spread`] at [`BF16_ROUNDING`]) an
/// ill-conditioned bf16 backward call may be off: the tensor-core kernel's error on such calls
/// stays under one spread (a single token whose ∂trap is a cancelling sum of rank-pair products:
/// 2.05e-2 against a spread of 2.35e-2, CPU emulation and H200 alike).
pub const BF16_ROUNDINGS: f64 = 2.0;

/// Perturbation draws [`step_rounding_spread`] takes the largest of. One draw can miss an
/// output's sensitivity: on the GPU suite's chunked fused-norm case (B=2 H=1 R=4 N=74 P=47, seed
/// 6) draws gave spreads from 2.6e-7 to 1.6e-6, all set by one cancelling output, and the single
/// draw used before (3.1e-7) put the bound under the 2.8e-6 that the kernel (and its CPU
/// emulation) reaches there.
pub const SPREAD_DRAWS: u64 = 8;

/// One f32 rounding, relative (2⁻²⁴).
pub const F32_ROUNDING: f64 = f32::EPSILON as f64 / 2.0;

/// One bf16 rounding, relative (2⁻⁹): the size of the roundings a bf16 tensor-core kernel applies
/// to its operand tiles (q̂, k̂, x, δ, the state and its adjoint).
pub const BF16_ROUNDING: f64 = 1.0 / 512.0;

/// Moves every element it is given by one f32 rounding (relative ±2⁻²⁴), signs from a
/// pseudo-random sequence seeded by `draw` and continued across calls.
fn one_rounding(draw: u64) -> impl FnMut(&mut [f64]) {
    one_relative(draw, F32_ROUNDING)
}

/// As [`one_rounding`] with a relative step of `unit`.
fn one_relative(draw: u64, unit: f64) -> impl FnMut(&mut [f64]) {
    let mut bits = 0x9e37_79b9_7f4a_7c15u64 ^ draw.wrapping_mul(0x2545_f491_4f6c_dd1d);
    move |v: &mut [f64]| {
        for x in v.iter_mut() {
            bits ^= bits << 13;
            bits ^= bits >> 7;
            bits ^= bits << 17;
            let sign = if bits & 1 == 0 { 1.0 } else { -1.0 };
            *x *= 1.0 + sign * unit;
        }
    }
}

/// Relative spread of `golden::step`'s outputs when every real-valued input and carried state
/// element is moved by one f32 rounding (relative ±2⁻²⁴, signs from a pseudo-random sequence),
/// the largest over [`SPREAD_DRAWS`] sign patterns: the accuracy a float32 evaluation of the same
/// call can reach at best, since it rounds its intermediates (q̂, k̂, the state between tokens) at
/// that level. Large only for ill-conditioned calls, e.g. a fused-norm head whose read-out
/// cancels while `mean(y²)` is below the norm's epsilon, where the output is the cancelling sum
/// times `1/√ε`.
pub fn step_rounding_spread(
    call: &Mamba3Inputs,
    state: &mamba3::golden::FinalStates,
    reference: &[f64],
) -> f64 {
    let spread = |draw: u64| {
        let mut nudge = one_rounding(draw);
        let mut inp = call.clone();
        activations_mut(&mut inp).for_each(|v| nudge(v));
        parameters_mut(&mut inp).for_each(|v| nudge(v));
        let mut st = state.clone();
        nudge(&mut st.ssm);
        nudge(&mut st.k);
        nudge(&mut st.v);
        let out = mamba3::golden::step(&inp, &mut st).expect("perturbed golden step");
        rel_err(&out, reference)
    };
    (0..SPREAD_DRAWS).map(spread).fold(0.0, nan_max)
}

/// [`step_rounding_spread`] for a whole forward call from the zero state: the relative spread of
/// `golden::forward_recurrent`'s output `out` when every real-valued input moves by one f32
/// rounding, the largest over [`SPREAD_DRAWS`] sign patterns. The same ill-conditioned class
/// exists here (a cancelling read-out below the fused norm's epsilon, e.g. at the first token).
pub fn forward_rounding_spread(call: &Mamba3Inputs, reference: &[f64]) -> f64 {
    let spread = |draw: u64| {
        let mut nudge = one_rounding(draw);
        let mut inp = call.clone();
        activations_mut(&mut inp).for_each(|v| nudge(v));
        parameters_mut(&mut inp).for_each(|v| nudge(v));
        let out = mamba3::golden::forward_recurrent(&inp).expect("perturbed golden forward");
        rel_err(&out.out, reference)
    };
    (0..SPREAD_DRAWS).map(spread).fold(0.0, nan_max)
}

/// Per-gradient spread of `golden::backward_recurrent` (in the order of `Gradients::tensors`, each
/// measured as the GPU tests measure errors, [`grad_err`] against `reference`) when every
/// real-valued input moves by one rounding of relative size `unit`, the largest over
/// [`SPREAD_DRAWS`] sign patterns. For f32 calls ([`F32_ROUNDING`]) `dout` stays as given (the
/// kernels read it exactly); for bf16 calls ([`BF16_ROUNDING`]: the kernel rounds its operand
/// tiles, δ among them, to bf16) it moves too. Large only for ill-conditioned calls, e.g. a fused
/// norm over P = 2 whose ∂angles is a small difference of large terms, or a single token whose
/// ∂trap is a cancelling sum of rank-pair products.
#[allow(dead_code)]
pub fn backward_rounding_spread(
    call: &Mamba3Inputs,
    dout: &[f64],
    reference: &mamba3::golden::Gradients,
    unit: f64,
) -> Vec<f64> {
    let want = reference.tensors();
    let call_scale = want
        .iter()
        .flat_map(|(_, x)| x.iter())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut worst = vec![0.0f64; want.len()];
    for draw in 0..SPREAD_DRAWS {
        let mut nudge = one_relative(draw, unit);
        let mut inp = call.clone();
        activations_mut(&mut inp).for_each(|v| nudge(v));
        parameters_mut(&mut inp).for_each(|v| nudge(v));
        let mut dout = dout.to_vec();
        if unit > F32_ROUNDING {
            nudge(&mut dout);
        }
        let got =
            mamba3::golden::backward_recurrent(&inp, &dout).expect("perturbed golden backward");
        for (w, ((_, g), (_, r))) in worst.iter_mut().zip(got.tensors().iter().zip(&want)) {
            *w = nan_max(*w, grad_err(g, r, call_scale));
        }
    }
    worst
}

/// The float32 bound of a forward call whose worst error is `err`: the 2e-6 target, or for an
/// ill-conditioned call [`ROUNDINGS`] × its [`forward_rounding_spread`] when that is larger (the
/// spread is only computed when the target is exceeded).
pub fn forward_f32_tolerance(call: &Mamba3Inputs, reference: &[f64], err: f64) -> f64 {
    const TARGET: f64 = 2e-6;
    if err <= TARGET {
        TARGET
    } else {
        TARGET.max(ROUNDINGS * forward_rounding_spread(call, reference))
    }
}

/// A [`random_case`] with its rank mapped onto the forward's compiled ranks {1, 2, 4, 8}.
pub fn with_forward_rank(mut case: RandomCase) -> RandomCase {
    case.geometry.rank = [1, 2, 4, 8][(case.geometry.rank - 1) % 4];
    case
}

/// The operand sets of the binary16 split-product tests (`a` 64×128, `b` 128×64, row-major):
/// normal entries; entries spread over 2⁻⁶ … 2⁸ (inside binary16's normal range); and positive
/// entries, whose products all add up (the worst case for a truncating sum).
pub fn split_product_cases() -> Vec<(&'static str, Vec<f32>, Vec<f32>)> {
    use mamba3::golden::SplitMix64;
    let mut rng = SplitMix64::new(11);
    let mut normal = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal() as f32).collect() };
    let (a_unit, b_unit) = (normal(64 * 128), normal(128 * 64));
    let mut rng = SplitMix64::new(12);
    let mut spread = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                let e = (rng.next_u64() % 15) as i32 - 6;
                (rng.normal() * 2f64.powi(e)) as f32
            })
            .collect()
    };
    let (a_wide, b_wide) = (spread(64 * 128), spread(128 * 64));
    let mut rng = SplitMix64::new(13);
    let mut positive =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.uniform_range(0.5, 1.5) as f32).collect() };
    let (a_pos, b_pos) = (positive(64 * 128), positive(128 * 64));
    vec![
        ("normal", a_unit, b_unit),
        ("spread 2^-6..2^8", a_wide, b_wide),
        ("positive", a_pos, b_pos),
    ]
}

/// Errors of a 64×64 product `d` of the split-product tests against the f64 product of `a`
/// (64×128) and `b` (128×64): the worst `|d − ab| / Σ|a·b|` over the entries, and the largest
/// `|d − ab|` over the largest `|ab|`.
pub fn split_product_errors(d: &[f32], a: &[f32], b: &[f32]) -> (f64, f64) {
    let (mut worst, mut err_max, mut peak) = (0.0f64, 0.0f64, 0.0f64);
    for r in 0..64 {
        for c in 0..64 {
            let (mut s, mut mag) = (0.0f64, 0.0f64);
            for k in 0..128 {
                let t = a[r * 128 + k] as f64 * b[k * 64 + c] as f64;
                s += t;
                mag += t.abs();
            }
            let e = (d[r * 64 + c] as f64 - s).abs();
            worst = nan_max(worst, e / mag);
            err_max = nan_max(err_max, e);
            peak = peak.max(s.abs());
        }
    }
    (worst, err_max / peak)
}
