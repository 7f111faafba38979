//! GPU tests of the chunked forward against the float64 golden recurrence (skipped without a GPU).
//!
//! Metric: `max|ours − ref| / max|ref|` per tensor (angles modulo 2π), worst over a grid. The
//! golden model runs on exactly the values the GPU sees: f32-rounded parameters and activations
//! rounded to the storage type. Outputs are poisoned with NaN before each launch, and every
//! element must come back finite. Every case runs twice: through [`forward`] (one block per
//! (head, batch row)) and through [`forward_with_workspace`], which splits the sequence whenever
//! B·H leaves SMs idle (NaN-poisoned workspace); the errors are the worse of the two.

mod common;

use std::sync::Arc;

use half::bf16;
use mamba3::cuda::CudaStream;
use mamba3::forward::{
    dispatch_paths, dispatch_paths_on_gpu, dispatch_paths_with_workspace, forward,
    forward_from_states, forward_with_workspace, sequence_segments, workspace_len, Activation,
    Dtype, FinalStatesMut, ForwardConfig, ForwardInputs, InitialStates,
};
use mamba3::golden::{
    forward_recurrent, step, FinalStates, Mamba3Geometry, Mamba3Inputs, OutputMode, RandomOptions,
    Rotation,
};
use mamba3::{Error, Gpu};
use proptest::prelude::*;

use common::device::{config_of, down_act, down_f32, poison, up_act, up_f32, DeviceInputs};
use common::{angle_rel_err, assert_invalid_argument, geo, opts, quantize, rel_err, UPSTREAM_GRID};

const F32_TOL: f64 = 2e-6;
const BF16_TOL: f64 = 1e-2;

/// One forward problem: geometry, chunk size and options.
#[derive(Clone, Copy, Debug)]
struct Case {
    geo: Mamba3Geometry,
    chunk: usize,
    opts: RandomOptions,
}

/// Errors of one run, per tensor.
#[derive(Clone, Copy, Debug, Default)]
struct Errors {
    out: f64,
    theta: f64,
    ssm: f64,
    k: f64,
    v: f64,
}

impl Errors {
    fn worst(&self) -> f64 {
        self.out
            .max(self.theta)
            .max(self.ssm)
            .max(self.k)
            .max(self.v)
    }
}

/// Rounds activations to `T` and everything else to f32, as the GPU will see them.
fn round_inputs<T: Activation>(inp: &Mamba3Inputs) -> Mamba3Inputs {
    let mut out = inp.clone();
    quantize::<T>(&mut out);
    out
}

/// Device outputs of one forward: out and the four final states, as f64.
struct DeviceResult {
    out: Vec<f64>,
    theta: Vec<f64>,
    ssm: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
}

/// Uploads `inp` (already rounded), runs the forward into NaN-poisoned caller buffers (with
/// `split`, through [`forward_with_workspace`] and a NaN-poisoned workspace), and downloads
/// everything.
fn run_gpu<T: Activation>(
    gpu: &Gpu,
    s: &Arc<CudaStream>,
    inp: &Mamba3Inputs,
    chunk: usize,
    split: bool,
    initial: Option<&FinalStates>,
) -> DeviceResult {
    let cfg = config_of::<T>(inp, chunk);
    let g = inp.geometry;
    let dev = DeviceInputs::<T>::upload(s, inp);
    let inputs = dev.views();
    let lens = cfg.expected_lens(true).expect("sizes fit");
    let st = lens.states.expect("states asked for");
    let mut out = poison::<T>(s, lens.out);
    let mut theta = poison::<f32>(s, st.theta);
    let mut ssm = poison::<f32>(s, st.ssm);
    let mut fk = poison::<T>(s, st.k);
    let mut fv = poison::<T>(s, st.v);
    let init = initial.map(|i| {
        (
            up_f32(s, &i.theta),
            up_f32(s, &i.ssm),
            up_act::<T>(s, &i.k),
            up_act::<T>(s, &i.v),
        )
    });
    {
        let mut states = FinalStatesMut {
            theta: theta.as_view_mut(),
            ssm: ssm.as_view_mut(),
            k: fk.as_view_mut(),
            v: fv.as_view_mut(),
        };
        if let Some((theta, ssm, k, v)) = &init {
            let initial = InitialStates {
                theta: theta.as_view(),
                ssm: ssm.as_view(),
                k: k.as_view(),
                v: v.as_view(),
            };
            let mut ws = poison::<f32>(s, workspace_len(&cfg, gpu.sm_count()).max(1));
            forward_from_states(
                gpu,
                s,
                &cfg,
                &initial,
                &inputs,
                &mut out.as_view_mut(),
                Some(&mut states),
                split.then_some(&mut ws.as_view_mut()),
            )
        } else if split {
            let mut ws = poison::<f32>(s, workspace_len(&cfg, gpu.sm_count()).max(1));
            forward_with_workspace(
                gpu,
                s,
                &cfg,
                &inputs,
                &mut out.as_view_mut(),
                Some(&mut states),
                &mut ws.as_view_mut(),
            )
        } else {
            forward(
                gpu,
                s,
                &cfg,
                &inputs,
                &mut out.as_view_mut(),
                Some(&mut states),
            )
        }
        .unwrap_or_else(|e| panic!("forward failed for {g:?}: {e}"));
    }
    s.synchronize().expect("the forward kernel failed");
    DeviceResult {
        out: down_act(s, &out),
        theta: down_f32(s, &theta),
        ssm: down_f32(s, &ssm),
        k: down_act(s, &fk),
        v: down_act(s, &fv),
    }
}

fn assert_finite(name: &str, x: &[f64], case: &Case) {
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        panic!(
            "{name}[{i}] = {} is not finite (unwritten or overflowed) for {case:?}",
            x[i]
        );
    }
}

/// Runs one case in dtype `T` against the golden recurrence, unsplit and split, and prints the
/// errors of both; returns the worse per tensor.
fn check<T: Activation>(gpu: &Gpu, s: &Arc<CudaStream>, case: &Case, seed: u64) -> Errors {
    let raw = Mamba3Inputs::random(case.geo, case.opts, seed).expect("random inputs");
    let inp = round_inputs::<T>(&raw);
    let reference = forward_recurrent(&inp).expect("golden forward");
    let whole = check_path::<T>(gpu, s, case, &inp, &reference, false);
    let split = check_path::<T>(gpu, s, case, &inp, &reference, true);
    Errors {
        out: whole.out.max(split.out),
        theta: whole.theta.max(split.theta),
        ssm: whole.ssm.max(split.ssm),
        k: whole.k.max(split.k),
        v: whole.v.max(split.v),
    }
}

/// One path of [`check`].
fn check_path<T: Activation>(
    gpu: &Gpu,
    s: &Arc<CudaStream>,
    case: &Case,
    inp: &Mamba3Inputs,
    reference: &mamba3::golden::Output,
    split: bool,
) -> Errors {
    let segments = if split {
        sequence_segments(&config_of::<T>(inp, case.chunk), gpu.sm_count())
    } else {
        1
    };
    let ours = run_gpu::<T>(gpu, s, inp, case.chunk, split, None);
    for (name, x) in [
        ("out", &ours.out),
        ("theta", &ours.theta),
        ("ssm", &ours.ssm),
        ("k", &ours.k),
        ("v", &ours.v),
    ] {
        assert_finite(name, x, case);
    }
    let fs = &reference.final_states;
    let e = Errors {
        out: rel_err(&ours.out, &reference.out),
        theta: angle_rel_err(&ours.theta, &fs.theta),
        ssm: rel_err(&ours.ssm, &fs.ssm),
        k: rel_err(&ours.k, &fs.k),
        v: rel_err(&ours.v, &fs.v),
    };
    let g = case.geo;
    let o = case.opts;
    eprintln!(
        "forward {:>4} K={segments:<2} B={} S={} R={} G={} H={} N={} P={} Na={} C={} {:?} {:?} z={} D={}: error out {:.2e} theta {:.2e} ssm {:.2e} k {:.2e} v {:.2e}",
        if T::DTYPE == Dtype::F32 { "f32" } else { "bf16" },
        g.batch, g.seq_len, g.rank, g.groups, g.heads, g.state_dim, g.head_dim, g.num_angles,
        case.chunk, o.rotation, o.mode, o.has_z as u8, o.has_d as u8,
        e.out, e.theta, e.ssm, e.k, e.v
    );
    e
}

/// Upstream's 11 dense geometries (spec §8): B=2, S=2048, H=16, G=1, Na=N/4, z and D, gated;
/// plus the tuned geometry with G=2.
fn upstream_cases() -> Vec<Case> {
    upstream_cases_at(2048, 16)
}

/// Upstream's 11 geometries (spec §8) at B = 2, sequence length `s` and `heads` heads, plus a
/// G = 2 variant of the benchmark geometry.
fn upstream_cases_at(s: usize, heads: usize) -> Vec<Case> {
    let gated = opts(Rotation::HalfSplit, OutputMode::Gated, true, true);
    let mut cases: Vec<Case> = UPSTREAM_GRID
        .iter()
        .map(|&(n, p, r, c)| Case {
            geo: geo(2, s, r, 1, heads, n, p, n / 4),
            chunk: c,
            opts: gated,
        })
        .collect();
    cases.push(Case {
        geo: geo(2, s, 4, 2, heads, 128, 64, 32),
        chunk: 16,
        opts: gated,
    });
    cases
}

/// Smaller varied geometries: tails, S = 1, C not a power of two, C = 1, C > S, Na < N/2,
/// N not a multiple of 4, odd P, both rotations, every mode, with and without z and D, GQA.
fn small_cases() -> Vec<Case> {
    use OutputMode::*;
    use Rotation::*;
    vec![
        Case {
            geo: geo(2, 100, 4, 1, 3, 32, 16, 8),
            chunk: 16,
            opts: opts(HalfSplit, Gated, true, true),
        },
        Case {
            geo: geo(1, 77, 4, 2, 4, 64, 32, 16),
            chunk: 12,
            opts: opts(Pairwise, FusedNorm, true, true),
        },
        Case {
            geo: geo(2, 61, 2, 1, 2, 16, 24, 8),
            chunk: 7,
            opts: opts(HalfSplit, Prereduce, false, true),
        },
        Case {
            geo: geo(1, 45, 8, 1, 2, 32, 8, 3),
            chunk: 5,
            opts: opts(Pairwise, Gated, false, false),
        },
        Case {
            geo: geo(1, 33, 1, 3, 3, 128, 64, 32),
            chunk: 64,
            opts: opts(HalfSplit, FusedNorm, true, false),
        },
        Case {
            geo: geo(1, 1, 4, 1, 2, 128, 64, 32),
            chunk: 16,
            opts: opts(HalfSplit, Gated, true, true),
        },
        Case {
            geo: geo(2, 1, 2, 2, 2, 6, 5, 1),
            chunk: 1,
            opts: opts(Pairwise, Prereduce, true, false),
        },
        Case {
            geo: geo(1, 19, 4, 1, 1, 10, 7, 2),
            chunk: 1,
            opts: opts(HalfSplit, FusedNorm, false, true),
        },
        Case {
            geo: geo(1, 50, 2, 2, 4, 48, 33, 0),
            chunk: 24,
            opts: opts(HalfSplit, Gated, true, true),
        },
        Case {
            geo: geo(2, 130, 4, 1, 2, 128, 64, 64),
            chunk: 16,
            opts: opts(Pairwise, Prereduce, true, true),
        },
        Case {
            geo: geo(1, 70, 8, 1, 2, 64, 64, 16),
            chunk: 8,
            opts: opts(HalfSplit, FusedNorm, true, true),
        },
        Case {
            geo: geo(1, 9, 1, 1, 1, 2, 1, 1),
            chunk: 3,
            opts: opts(Pairwise, Gated, true, false),
        },
        // The fixed-geometry kernels (R=4, N=128, P=64, Na=32, C=16) in the other modes and
        // rotation, with tail chunks and GQA.
        Case {
            geo: geo(2, 45, 4, 2, 4, 128, 64, 32),
            chunk: 16,
            opts: opts(Pairwise, Prereduce, true, false),
        },
        Case {
            geo: geo(1, 71, 4, 1, 2, 128, 64, 32),
            chunk: 16,
            opts: opts(HalfSplit, FusedNorm, false, true),
        },
        // Chunks whose (C·R)² tiles exceed shared memory, run as their largest divisor that
        // fits: C = 48 at R = 8 as 16, and C = 23 (prime) as one token a chunk, with GQA.
        Case {
            geo: geo(1, 300, 8, 1, 2, 64, 32, 16),
            chunk: 48,
            opts: opts(HalfSplit, Gated, true, true),
        },
        Case {
            geo: geo(2, 175, 8, 3, 3, 54, 27, 24),
            chunk: 23,
            opts: opts(Pairwise, FusedNorm, true, true),
        },
    ]
}

fn run_grid(gpu: &Gpu, cases: &[Case], label: &str, seed0: u64) {
    let stream = gpu.context().new_stream().expect("stream");
    let (mut worst32, mut worst16) = (0.0f64, 0.0f64);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let e32 = check::<f32>(gpu, &stream, case, seed0 + i as u64);
        let e16 = check::<bf16>(gpu, &stream, case, seed0 + 1000 + i as u64);
        worst32 = worst32.max(e32.worst());
        worst16 = worst16.max(e16.worst());
        if e32.worst().is_nan() || e32.worst() > F32_TOL {
            failures.push(format!("f32 {case:?}: {e32:?}"));
        }
        if e16.worst().is_nan() || e16.worst() > BF16_TOL {
            failures.push(format!("bf16 {case:?}: {e16:?}"));
        }
    }
    eprintln!(
        "forward {label}: worst error f32 {worst32:.2e} (target {F32_TOL:.0e}), bf16 {worst16:.2e} (target {BF16_TOL:.0e}) over {} geometries",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "over tolerance:\n{}",
        failures.join("\n")
    );
}

#[test]
fn forward_matches_golden_on_upstream_geometries() {
    let gpu = gpu_or_skip!();
    run_grid(&gpu, &upstream_cases(), "upstream grid", 1);
}

/// Upstream's grid at S = 256 (H = 4): the size at which the sanitizer pass of the staged suite
/// covers every geometry of the grid (it skips the full-size grids), whole and split.
#[test]
fn forward_matches_golden_on_the_grid_at_s256() {
    let gpu = gpu_or_skip!();
    run_grid(&gpu, &upstream_cases_at(256, 4), "grid at S=256", 3000);
}

/// The benchmark geometry's cases of upstream's grid (G = 1 and 2).
fn tuned_upstream_cases() -> Vec<Case> {
    let tuned = |c: &Case| {
        let g = c.geo;
        (g.rank, g.state_dim, g.head_dim, c.chunk) == (4, 128, 64, 16)
    };
    upstream_cases().into_iter().filter(tuned).collect()
}

/// On compute capability 9.0 the gated half-split calls of the benchmark geometry run the
/// warp-specialized forwards (on by default; bf16 two heads per block, f32 one head on binary16
/// split operands): the dispatch names them (and, split, bf16's own segment-state pass, f32's the
/// TF32 one), and they match golden on upstream's benchmark-geometry cases (G = 1 and 2, split)
/// and on edge calls: tails and a single
/// chunk, S = 1 (the short-call kernel, which it does not cover), G = 2 with two heads per group,
/// B = 3, S = 1000 whole and split (where biases rounded to bf16 before the add had shown as
/// 1.01e-2); then the same edge calls switched off.
#[test]
fn forward_dispatch_names_the_warp_specialized_kernel_and_it_matches_golden() {
    let gpu = gpu_or_skip!();
    let cases = tuned_upstream_cases();
    let inp = Mamba3Inputs::random(cases[0].geo, cases[0].opts, 1).expect("random inputs");
    let config = config_of::<bf16>(&inp, cases[0].chunk);
    let ws = "forward_ws_bf16_r4_n128_p64_na32_c16";
    if !gpu.warp_specialized_kernels() {
        assert!(!gpu.set_warp_specialized_kernels(true));
        assert!(!dispatch_paths_on_gpu(&gpu, &config).contains(&ws));
        eprintln!(
            "SKIPPED: compute capability {:?} has no wgmma (the grids ran the tensor-core kernel)",
            gpu.compute_capability()
        );
        return;
    }
    let paths = dispatch_paths_on_gpu(&gpu, &config);
    assert!(paths.contains(&ws), "{paths:?}");
    // B·H = 32 leaves SMs idle: the call is split, its segment-state pass the warp-specialized one.
    assert_eq!(
        paths.first(),
        Some(&"segment_state_ws_bf16_r4_n128_p64_na32_c16"),
        "{paths:?}"
    );
    // The f32 calls run the f32 warp-specialized forward (binary16 split operands) after the TF32
    // kernel's segment-state pass.
    let ws_f32 = "forward_ws_f32_r4_n128_p64_na32_c16";
    let paths_f32 = dispatch_paths_on_gpu(&gpu, &config_of::<f32>(&inp, cases[0].chunk));
    assert_eq!(paths_f32.last(), Some(&ws_f32), "{paths_f32:?}");
    assert_eq!(
        paths_f32.first(),
        Some(&"segment_state_mma_f32_r4_n128_p64_na32_c16"),
        "{paths_f32:?}"
    );
    run_grid(
        &gpu,
        &cases,
        "warp-specialized kernel, upstream's benchmark geometry",
        8500,
    );
    let gated = |z, d| opts(Rotation::HalfSplit, OutputMode::Gated, z, d);
    let edge = vec![
        Case {
            geo: geo(1, 37, 4, 1, 2, 128, 64, 32),
            chunk: 16,
            opts: gated(true, true),
        },
        Case {
            geo: geo(3, 16, 4, 2, 4, 128, 64, 32),
            chunk: 16,
            opts: gated(false, true),
        },
        Case {
            geo: geo(1, 1, 4, 1, 2, 128, 64, 32),
            chunk: 16,
            opts: gated(true, false),
        },
        Case {
            geo: geo(2, 333, 4, 1, 6, 128, 64, 32),
            chunk: 16,
            opts: gated(false, false),
        },
        Case {
            geo: geo(1, 1000, 4, 1, 8, 128, 64, 32),
            chunk: 16,
            opts: gated(true, true),
        },
    ];
    run_grid(&gpu, &edge, "warp-specialized kernel, edge calls", 8000);
    assert!(!gpu.set_warp_specialized_kernels(false));
    assert!(!dispatch_paths_on_gpu(&gpu, &config).contains(&ws));
    run_grid(
        &gpu,
        &edge,
        "the same calls, warp-specialized kernel off",
        8000,
    );
}

/// On compute capability 9.0 the bf16 tensor-core forward runs as its `wgmma` twin (where the
/// warp-specialized forward does not take the call, as it does here unless switched off, which
/// this test does); this one checks that the dispatch reports the twin and runs
/// the `mma.sync` kernel on the same device too (the benchmark geometry of upstream's grid, G = 1
/// and 2, whole and split).
#[test]
fn forward_dispatch_names_the_wgmma_kernel_and_the_mma_kernel_still_matches_golden() {
    let gpu = gpu_or_skip!();
    let cases = tuned_upstream_cases();
    let inp = Mamba3Inputs::random(cases[0].geo, cases[0].opts, 1).expect("random inputs");
    let config = config_of::<bf16>(&inp, cases[0].chunk);
    let wg = "forward_wg_bf16_r4_n128_p64_na32_c16";
    let mma = "forward_mma_bf16_r4_n128_p64_na32_c16";
    let _restore = common::device::WgmmaKernelsOn(&gpu);
    // The warp-specialized forward (on by default) would take these calls.
    gpu.set_warp_specialized_kernels(false);
    if !gpu.wgmma_kernels() {
        assert!(!dispatch_paths_on_gpu(&gpu, &config).contains(&wg));
        eprintln!(
            "SKIPPED: compute capability {:?} has no wgmma (the grids ran the mma.sync kernel)",
            gpu.compute_capability()
        );
        return;
    }
    assert!(dispatch_paths_on_gpu(&gpu, &config).contains(&wg));
    assert!(!gpu.set_wgmma_kernels(false));
    assert!(dispatch_paths_on_gpu(&gpu, &config).contains(&mma));
    run_grid(&gpu, &cases, "mma.sync kernel on a wgmma device", 7000);
}

#[test]
fn forward_matches_golden_on_small_geometries() {
    let gpu = gpu_or_skip!();
    run_grid(&gpu, &small_cases(), "small geometries", 500);
}

/// No drift with sequence length: the f32 error over one 32768-token sequence (H=2, B=1) is at
/// most 1.2× the error over 2048-token sequences. Maxima grow with the number of samples, so the
/// S=2048 figure is the worst over 16 independent sequences: both figures are maxima over the
/// same number of tokens.
#[test]
fn forward_f32_error_does_not_grow_with_sequence_length() {
    let gpu = gpu_or_skip!();
    let stream = gpu.context().new_stream().expect("stream");
    let opts = opts(Rotation::HalfSplit, OutputMode::Gated, true, true);
    let short = Case {
        geo: geo(1, 2048, 4, 1, 2, 128, 64, 32),
        chunk: 16,
        opts,
    };
    let mut worst_short = 0.0f64;
    let mut first_short = 0.0f64;
    for seed in 0..16 {
        let e = check::<f32>(&gpu, &stream, &short, 7000 + seed).worst();
        if seed == 0 {
            first_short = e;
        }
        worst_short = worst_short.max(e);
    }
    let long = Case {
        geo: geo(1, 32768, 4, 1, 2, 128, 64, 32),
        ..short
    };
    let e_long = check::<f32>(&gpu, &stream, &long, 7100).worst();
    eprintln!(
        "forward S=32768 f32 worst error {e_long:.2e} vs S=2048 {worst_short:.2e} (16 sequences; one sequence: {first_short:.2e}); ratio {:.2}",
        e_long / worst_short
    );
    assert!(
        e_long <= 1.2 * worst_short,
        "error grows with S: {e_long:e} > 1.2 × {worst_short:e}"
    );
    assert!(e_long <= F32_TOL);
}

/// 24 random geometries, or `MAMBA3_PROPTEST_CASES` (the sanitizer runs use fewer).
fn proptest_cases() -> u32 {
    std::env::var("MAMBA3_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(common::proptest_config(proptest_cases(), 0xf0_0001))]

    /// Random geometries (`common::random_case` with R ∈ {1, 2, 4, 8}: N ≤ 64, Na ≤ N/2,
    /// P ≤ 32, C ≤ 32 incl. non-powers of two and C > S, S ≤ 200 with tails and S = 1, GQA,
    /// B ≤ 2, every mode and rotation, ±z, ±D), both dtypes, whole and split. The f32 bound is
    /// the target unless the call's own rounding spread is larger (see
    /// `common::forward_f32_tolerance`).
    #[test]
    fn forward_matches_golden_over_random_geometries(rc in common::random_case(200)) {
        let Some(gpu) = common::gpu() else { return Ok(()) };
        let s = gpu.context().new_stream().expect("stream");
        let rc = common::with_forward_rank(rc);
        let case = Case { geo: rc.geometry, chunk: rc.chunk, opts: rc.options };
        let e32 = check::<f32>(&gpu, &s, &case, rc.seed).worst();
        // The call's rounding spread (8 golden forwards) only when the target is exceeded.
        let tol32 = if e32 <= F32_TOL {
            F32_TOL
        } else {
            let raw = Mamba3Inputs::random(case.geo, case.opts, rc.seed).expect("random inputs");
            let inp = round_inputs::<f32>(&raw);
            let reference = forward_recurrent(&inp).expect("golden forward");
            common::forward_f32_tolerance(&inp, &reference.out, e32)
        };
        prop_assert!(e32 <= tol32, "f32 error {e32:e} above {tol32:e} for {case:?}");
        let e16 = check::<bf16>(&gpu, &s, &case, rc.seed ^ 1).worst();
        prop_assert!(e16 <= BF16_TOL, "bf16 error {e16:e} above {BF16_TOL:e} for {case:?}");
    }
}

#[test]
fn forward_rejects_bad_arguments_before_launch() {
    let gpu = gpu_or_skip!();
    let s = gpu.context().new_stream().expect("stream");
    let case = small_cases()[0];
    let inp = round_inputs::<f32>(&Mamba3Inputs::random(case.geo, case.opts, 3).unwrap());
    let cfg = config_of::<f32>(&inp, case.chunk);
    assert_eq!(
        dispatch_paths(&cfg, gpu.max_shared_memory_optin()),
        vec!["forward_fma_f32_r4"]
    );
    assert!(
        sequence_segments(&cfg, gpu.sm_count()) > 1,
        "the case splits"
    );
    assert_eq!(
        dispatch_paths_with_workspace(&cfg, gpu.sm_count(), gpu.max_shared_memory_optin()),
        vec![
            "segment_state_f32_r4",
            "segment_combine_f32",
            "forward_fma_f32_r4"
        ]
    );
    let dev = DeviceInputs::<f32>::upload(&s, &inp);
    let inputs = ForwardInputs {
        k: dev.k.slice(1..),
        ..dev.views()
    };
    let mut out = poison::<f32>(&s, cfg.expected_lens(false).unwrap().out);
    let err = forward(&gpu, &s, &cfg, &inputs, &mut out.as_view_mut(), None).unwrap_err();
    eprintln!("rejected: {err}");
    assert_invalid_argument(&err, "k");
    // dtype mismatch.
    let bad = ForwardConfig {
        dtype: Dtype::Bf16,
        ..cfg
    };
    let err = forward(&gpu, &s, &bad, &inputs, &mut out.as_view_mut(), None).unwrap_err();
    assert_invalid_argument(&err, "dtype");
    // A state tile too large for shared memory even at one token a chunk: the launch path's
    // typed error, naming both figures.
    let k_full = ForwardInputs {
        k: dev.k.as_view(),
        ..inputs
    };
    let huge = round_inputs::<f32>(
        &Mamba3Inputs::random(geo(1, 2, 1, 1, 1, 1024, 512, 8), case.opts, 5).unwrap(),
    );
    let huge_cfg = config_of::<f32>(&huge, 16);
    let huge_dev = DeviceInputs::<f32>::upload(&s, &huge);
    let mut huge_out = poison::<f32>(&s, huge_cfg.expected_lens(false).unwrap().out);
    let err = forward(
        &gpu,
        &s,
        &huge_cfg,
        &huge_dev.views(),
        &mut huge_out.as_view_mut(),
        None,
    )
    .unwrap_err();
    eprintln!("rejected: {err}");
    match err {
        Error::SharedMemory { needed, max, .. } => {
            assert_eq!(max, gpu.max_shared_memory_optin());
            assert!(needed > max, "{err}");
        }
        other => panic!("expected Error::SharedMemory, got {other}"),
    }
    // A workspace too small for the split.
    let mut ws = poison::<f32>(&s, workspace_len(&cfg, gpu.sm_count()) - 1);
    let err = forward_with_workspace(
        &gpu,
        &s,
        &cfg,
        &k_full,
        &mut out.as_view_mut(),
        None,
        &mut ws.as_view_mut(),
    )
    .unwrap_err();
    eprintln!("rejected: {err}");
    assert_invalid_argument(&err, "workspace");
    // Nothing was launched: the poisoned output is untouched.
    let back = down_act(&s, &out);
    assert!(back.iter().all(|x| x.is_nan()));
}

/// The split's hand-off angles after the combine pass (θ at each segment's end, as `hi + lo`)
/// against the golden cumulative angles, per slot; and the final θ of the split forward.
#[test]
fn forward_split_handoff_angles_match_golden() {
    let gpu = gpu_or_skip!();
    let s = gpu.context().new_stream().expect("stream");
    let case = Case {
        geo: geo(1, 64, 1, 1, 2, 16, 8, 4),
        chunk: 4,
        opts: opts(Rotation::HalfSplit, OutputMode::Gated, true, true),
    };
    let inp = round_inputs::<f32>(&Mamba3Inputs::random(case.geo, case.opts, 11).unwrap());
    let cfg = config_of::<f32>(&inp, case.chunk);
    let k_seg = sequence_segments(&cfg, gpu.sm_count());
    assert!(k_seg > 1);
    let g = case.geo;
    let theta_ref = mamba3::golden::cumulative_theta(&g, &inp.angle_logits, &inp.dt).unwrap();
    let dev = DeviceInputs::<f32>::upload(&s, &inp);
    let inputs = dev.views();
    let lens = cfg.expected_lens(true).unwrap();
    let st = lens.states.unwrap();
    let mut out = poison::<f32>(&s, lens.out);
    let mut theta = poison::<f32>(&s, st.theta);
    let mut ssm = poison::<f32>(&s, st.ssm);
    let mut fk = poison::<f32>(&s, st.k);
    let mut fv = poison::<f32>(&s, st.v);
    let mut ws = poison::<f32>(&s, workspace_len(&cfg, gpu.sm_count()));
    {
        let mut states = FinalStatesMut {
            theta: theta.as_view_mut(),
            ssm: ssm.as_view_mut(),
            k: fk.as_view_mut(),
            v: fv.as_view_mut(),
        };
        forward_with_workspace(
            &gpu,
            &s,
            &cfg,
            &inputs,
            &mut out.as_view_mut(),
            Some(&mut states),
            &mut ws.as_view_mut(),
        )
        .unwrap();
    }
    s.synchronize().unwrap();
    let ws_host = s.clone_dtoh(&ws).unwrap();
    let slots = k_seg - 1;
    let chunks = g.seq_len.div_ceil(case.chunk);
    let span = chunks.div_ceil(k_seg) * case.chunk;
    let th0 = slots * g.batch * g.heads * g.head_dim * g.state_dim;
    let tau = std::f64::consts::TAU;
    let wrap = |x: f64| x.rem_euclid(tau);
    let mut worst = 0.0f64;
    for h in 0..g.heads {
        for sl in 0..slots {
            let t = (sl + 1) * span - 1;
            let mut line = Vec::new();
            for j in 0..g.num_angles {
                let at = th0 + 2 * ((h * slots + sl) * g.num_angles + j);
                let ours = ws_host[at] as f64 + ws_host[at + 1] as f64;
                let want = wrap(theta_ref[(t * g.heads + h) * g.num_angles + j]);
                let dd = wrap(ours - want);
                let dd = dd.min(tau - dd);
                worst = worst.max(dd);
                line.push(format!("{dd:.1e}"));
            }
            eprintln!(
                "split hand-off θ h={h} slot={sl} (t={t}): |diff| {}",
                line.join(" ")
            );
        }
    }
    let th_host = down_f32(&s, &theta);
    let mut worst_final = 0.0f64;
    for h in 0..g.heads {
        for j in 0..g.num_angles {
            let want = wrap(theta_ref[((g.seq_len - 1) * g.heads + h) * g.num_angles + j]);
            let dd = wrap(th_host[h * g.num_angles + j] - want);
            worst_final = worst_final.max(dd.min(tau - dd));
        }
    }
    eprintln!(
        "split hand-off θ: worst {worst:.2e} rad over {slots} slots; final θ {worst_final:.2e} rad"
    );
    assert!(worst < 1e-9, "hand-off angles off by {worst:e} rad");
    assert!(worst_final < 1e-6, "final θ off by {worst_final:e} rad");
}

/// A forward continued from states (`forward_from_states`): the GPU forward's final states after
/// `prefix` tokens start a second GPU forward over the rest, whole and split into segments (the
/// segment-state pass starts segment 0 from the initial state), against the golden step
/// recurrence from the same states. Both kernels: small geometries on `chunked_forward`, the
/// tensor-core geometry in bf16 (and its f32 on the fixed-geometry FMA kernel).
fn check_continuation<T: Activation>(
    gpu: &Gpu,
    s: &Arc<CudaStream>,
    case: &Case,
    prefix: usize,
    seed: u64,
) -> f64 {
    let raw = Mamba3Inputs::random(case.geo, case.opts, seed).unwrap();
    let inp = round_inputs::<T>(&raw);
    let head = run_gpu::<T>(
        gpu,
        s,
        &inp.token_slice(0, prefix).unwrap(),
        case.chunk,
        false,
        None,
    );
    let init = FinalStates {
        theta: head.theta,
        ssm: head.ssm,
        k: head.k,
        v: head.v,
    };
    let tail = inp.token_slice(prefix, case.geo.seq_len).unwrap();
    let mut reference = init.clone();
    let ref_out = step(&tail, &mut reference).unwrap();
    let mut worst = 0.0f64;
    for split in [false, true] {
        let ours = run_gpu::<T>(gpu, s, &tail, case.chunk, split, Some(&init));
        let e = Errors {
            out: rel_err(&ours.out, &ref_out),
            theta: angle_rel_err(&ours.theta, &reference.theta),
            ssm: rel_err(&ours.ssm, &reference.ssm),
            k: rel_err(&ours.k, &reference.k),
            v: rel_err(&ours.v, &reference.v),
        };
        let segments = if split {
            sequence_segments(&config_of::<T>(&tail, case.chunk), gpu.sm_count())
        } else {
            1
        };
        eprintln!(
            "forward from states {:>4} after {prefix} K={segments} {:?} C={}: error out {:.2e} theta {:.2e} ssm {:.2e} k {:.2e} v {:.2e}",
            if T::DTYPE == Dtype::F32 { "f32" } else { "bf16" },
            tail.geometry, case.chunk, e.out, e.theta, e.ssm, e.k, e.v
        );
        worst = worst.max(e.worst());
    }
    let tol = if T::DTYPE == Dtype::F32 {
        F32_TOL
    } else {
        BF16_TOL
    };
    assert!(
        worst <= tol,
        "worst error {worst:e} above {tol:e} for {case:?}"
    );
    worst
}

#[test]
fn forward_from_states_matches_golden_continuation() {
    let gpu = gpu_or_skip!();
    let s = gpu.context().new_stream().unwrap();
    let cases = [
        (
            Case {
                geo: geo(2, 300, 4, 1, 3, 32, 16, 8),
                chunk: 16,
                opts: opts(Rotation::HalfSplit, OutputMode::Gated, true, true),
            },
            41,
        ),
        (
            Case {
                geo: geo(1, 150, 2, 2, 4, 24, 12, 5),
                chunk: 7,
                opts: opts(Rotation::Pairwise, OutputMode::FusedNorm, true, false),
            },
            9,
        ),
        (
            Case {
                geo: geo(1, 200, 8, 1, 2, 16, 8, 8),
                chunk: 8,
                opts: opts(Rotation::HalfSplit, OutputMode::Prereduce, false, true),
            },
            1,
        ),
        (
            Case {
                geo: geo(1, 700, 4, 1, 2, 128, 64, 32),
                chunk: 16,
                opts: opts(Rotation::HalfSplit, OutputMode::Gated, true, true),
            },
            123,
        ),
    ];
    let (mut worst_f32, mut worst_bf16) = (0.0f64, 0.0f64);
    for (i, (case, prefix)) in cases.iter().enumerate() {
        worst_f32 = worst_f32.max(check_continuation::<f32>(
            &gpu,
            &s,
            case,
            *prefix,
            900 + i as u64,
        ));
        worst_bf16 = worst_bf16.max(check_continuation::<bf16>(
            &gpu,
            &s,
            case,
            *prefix,
            900 + i as u64,
        ));
    }
    eprintln!("forward from states: worst f32 {worst_f32:.2e}, bf16 {worst_bf16:.2e}");
}
