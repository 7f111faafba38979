//! GPU tests of the backward against the float64 golden backward (skipped without a GPU).
//!
//! Metric: `max|ours − ref| / max|ref|` per gradient, worst over a grid, printed per gradient.
//! The golden model runs on exactly the values the GPU sees (f32-rounded parameters, activations
//! and `dout` rounded to the storage type). Gradients and the workspace are poisoned with NaN
//! before each launch and every element must come back finite. Every case runs three times and
//! the three results must be bitwise identical.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use half::bf16;
use mamba3::backward::{
    backward, backward_path, backward_with_checkpoints, backward_with_path, dispatch_paths,
    dispatch_paths_on_gpu, forward_for_backward, workspace_len, workspace_len_for,
    workspace_len_on, BackwardCheckpoints, BackwardPath, GradientsMut,
};
use mamba3::cuda::{CudaSlice, CudaStream, CudaViewMut};
use mamba3::forward::{self, Activation, ForwardConfig, ForwardInputs};
use mamba3::golden::{
    backward_recurrent, Gradients, Mamba3Geometry, Mamba3Inputs, OutputMode, RandomOptions,
    Rotation, SplitMix64,
};
use mamba3::{Error, Gpu};
use proptest::prelude::*;

use common::device::{config_of, down_act, down_f32, poison, up_act, DeviceInputs};
use common::{assert_invalid_argument, geo, grad_err, letters, opts, quantize, UPSTREAM_GRID};

const F32_TOL: f64 = 1e-5;
const BF16_TOL: f64 = 2e-2;

/// One backward problem: geometry, segment length (the config's chunk size) and options.
#[derive(Clone, Copy, Debug)]
struct Case {
    geo: Mamba3Geometry,
    chunk: usize,
    opts: RandomOptions,
}

/// Random ∂L/∂out in the output's layout, rounded to `T`.
fn random_dout<T: Activation>(inp: &Mamba3Inputs, seed: u64) -> Vec<f64> {
    let g = inp.geometry;
    let len = g.batch * g.seq_len * g.heads * inp.output_width();
    let mut rng = SplitMix64::new(seed);
    (0..len)
        .map(|_| T::from_f64(rng.normal()).to_f64())
        .collect()
}

/// How a test runs the backward.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Run {
    /// `backward_with_path` on this per-head kernel.
    Path(BackwardPath),
    /// A training step: `forward_for_backward` (split where the forward splits), which must
    /// write the tensor-core backward's checkpoints and produce the plain forward's outputs
    /// bitwise, then `backward_with_checkpoints`.
    TrainingStep,
}

impl From<BackwardPath> for Run {
    fn from(path: BackwardPath) -> Run {
        Run::Path(path)
    }
}

/// Runs the forward with checkpoints (and, for comparison, the plain forward) into the backward
/// workspace `ws`; panics unless the checkpoints were written and the outputs agree bitwise.
fn run_training_forward<T: Activation>(
    gpu: &Gpu,
    s: &Arc<CudaStream>,
    cfg: &ForwardConfig,
    inputs: &ForwardInputs<'_, T>,
    ws: &mut CudaSlice<f32>,
) -> BackwardCheckpoints {
    let out_len = cfg.batch * cfg.seq_len * cfg.heads * cfg.output_width();
    let mut fws = poison::<f32>(s, forward::workspace_len(cfg, gpu.sm_count()).max(1));
    let mut plain = poison::<T>(s, out_len);
    forward::forward_with_workspace(
        gpu,
        s,
        cfg,
        inputs,
        &mut plain.as_view_mut(),
        None,
        &mut fws.as_view_mut(),
    )
    .expect("plain forward");
    let mut out = poison::<T>(s, out_len);
    let checkpoints = forward_for_backward(
        gpu,
        s,
        cfg,
        inputs,
        &mut out.as_view_mut(),
        None,
        Some(&mut fws.as_view_mut()),
        &mut ws.as_view_mut(),
    )
    .expect("forward with checkpoints");
    assert!(
        checkpoints.written(),
        "the forward wrote no checkpoints for {cfg:?}"
    );
    let bits =
        |x: &CudaSlice<T>| -> Vec<u64> { down_act(s, x).iter().map(|v| v.to_bits()).collect() };
    assert!(
        bits(&plain) == bits(&out),
        "the forward with checkpoints changed the outputs for {cfg:?}"
    );
    checkpoints
}

/// Runs the backward into NaN-poisoned caller buffers and downloads every gradient.
fn run_gpu<T: Activation>(
    gpu: &Gpu,
    s: &Arc<CudaStream>,
    inp: &Mamba3Inputs,
    dev: &DeviceInputs<T>,
    dout: &CudaSlice<T>,
    chunk: usize,
    run: Run,
) -> Gradients {
    let cfg = config_of::<T>(inp, chunk);
    let g = inp.geometry;
    let (b, sl, r, gr, h, n, p, na) = letters(&g);
    let (qk, vz, sc, mimo) = (b * sl * r * gr * n, b * sl * h * p, b * h * sl, h * r * p);
    let mut dq = poison::<T>(s, qk);
    let mut dk = poison::<T>(s, qk);
    let mut dv = poison::<T>(s, vz);
    let mut dz = inp.z.as_ref().map(|_| poison::<T>(s, vz));
    let mut dtrap = poison::<T>(s, sc);
    let mut ddt = poison::<f32>(s, sc);
    let mut dadt = poison::<f32>(s, sc);
    let mut dang = poison::<f32>(s, b * sl * h * na);
    let mut dqb = poison::<f32>(s, h * r * n);
    let mut dkb = poison::<f32>(s, h * r * n);
    let mut dmv = poison::<f32>(s, mimo);
    let mut dmz = inp.mimo_z.as_ref().map(|_| poison::<f32>(s, mimo));
    let mut dmo = inp.mimo_o.as_ref().map(|_| poison::<f32>(s, mimo));
    let mut dd = inp.d.as_ref().map(|_| poison::<f32>(s, h));
    let mut dnw = inp.norm.as_ref().map(|_| poison::<f32>(s, h * p));
    // Exactly the workspace the path's layout needs (the tensor-core one is about half the
    // token-serial one), so that a region past its end would be caught.
    let path = match run {
        Run::Path(path) => path,
        Run::TrainingStep => BackwardPath::TensorCore,
    };
    let ws_len = workspace_len_for(&cfg, path).expect("workspace size");
    assert!(ws_len <= workspace_len(&cfg).expect("workspace size"));
    let mut ws = poison::<f32>(s, ws_len);
    {
        let inputs = dev.views();
        let mut grads = GradientsMut {
            q: dq.as_view_mut(),
            k: dk.as_view_mut(),
            v: dv.as_view_mut(),
            z: dz.as_mut().map(|x| x.as_view_mut()),
            trap: dtrap.as_view_mut(),
            dt: ddt.as_view_mut(),
            adt: dadt.as_view_mut(),
            angles: dang.as_view_mut(),
            q_bias: dqb.as_view_mut(),
            k_bias: dkb.as_view_mut(),
            mimo_v: dmv.as_view_mut(),
            mimo_z: dmz.as_mut().map(|x| x.as_view_mut()),
            mimo_o: dmo.as_mut().map(|x| x.as_view_mut()),
            d: dd.as_mut().map(|x| x.as_view_mut()),
            norm_weight: dnw.as_mut().map(|x| x.as_view_mut()),
        };
        match run {
            Run::Path(path) => backward_with_path(
                gpu,
                s,
                &cfg,
                path,
                &inputs,
                &dout.as_view(),
                &mut grads,
                &mut ws.as_view_mut(),
            ),
            Run::TrainingStep => {
                let checkpoints = run_training_forward(gpu, s, &cfg, &inputs, &mut ws);
                backward_with_checkpoints(
                    gpu,
                    s,
                    &cfg,
                    &checkpoints,
                    &inputs,
                    &dout.as_view(),
                    &mut grads,
                    &mut ws.as_view_mut(),
                )
            }
        }
        .unwrap_or_else(|e| panic!("backward ({run:?}) failed for {g:?}: {e}"));
    }
    s.synchronize().expect("the backward kernels failed");
    Gradients {
        q: down_act(s, &dq),
        k: down_act(s, &dk),
        v: down_act(s, &dv),
        z: dz.as_ref().map(|x| down_act(s, x)),
        trap: down_act(s, &dtrap),
        dt: down_f32(s, &ddt),
        adt: down_f32(s, &dadt),
        angle_logits: down_f32(s, &dang),
        q_bias: down_f32(s, &dqb),
        k_bias: down_f32(s, &dkb),
        mimo_v: down_f32(s, &dmv),
        mimo_z: dmz.as_ref().map(|x| down_f32(s, x)),
        mimo_o: dmo.as_ref().map(|x| down_f32(s, x)),
        d: dd.as_ref().map(|x| down_f32(s, x)),
        norm_weight: dnw.as_ref().map(|x| down_f32(s, x)),
    }
}

/// Runs one case three times in dtype `T` on `path`: checks finiteness, bitwise equality of the
/// runs and the error of every gradient against the golden backward; returns the errors by
/// gradient.
fn check<T: Activation>(
    gpu: &Gpu,
    s: &Arc<CudaStream>,
    case: &Case,
    seed: u64,
    path: impl Into<Run>,
) -> Vec<(&'static str, f64)> {
    let path: Run = path.into();
    let mut inp = Mamba3Inputs::random(case.geo, case.opts, seed).expect("random inputs");
    quantize::<T>(&mut inp);
    let dout_host = random_dout::<T>(&inp, seed ^ 0xd0d7);
    let reference = backward_recurrent(&inp, &dout_host).expect("golden backward");
    let dev = DeviceInputs::<T>::upload(s, &inp);
    let dout = up_act::<T>(s, &dout_host);
    let runs: Vec<Gradients> = (0..3)
        .map(|_| run_gpu::<T>(gpu, s, &inp, &dev, &dout, case.chunk, path))
        .collect();
    let bits = |g: &Gradients| -> Vec<Vec<u64>> {
        g.tensors()
            .iter()
            .map(|(_, x)| x.iter().map(|v| v.to_bits()).collect())
            .collect()
    };
    let first = bits(&runs[0]);
    for (i, run) in runs.iter().enumerate().skip(1) {
        assert!(
            bits(run) == first,
            "run {i} differs bitwise from run 0 for {case:?}"
        );
    }
    let tol = if T::DTYPE == mamba3::Dtype::F32 {
        F32_TOL
    } else {
        BF16_TOL
    };
    let call_scale = reference
        .tensors()
        .iter()
        .flat_map(|(_, x)| x.iter())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut errs = Vec::new();
    let mut line = String::new();
    for ((name, ours), (_, rf)) in runs[0].tensors().into_iter().zip(reference.tensors()) {
        if let Some(i) = ours.iter().position(|v| !v.is_finite()) {
            panic!("{name}[{i}] = {} is not finite for {case:?}", ours[i]);
        }
        let e = grad_err(ours, rf, call_scale);
        line.push_str(&format!(" {name} {e:.1e}"));
        errs.push((name, e));
    }
    eprintln!(
        "{path:?} {:?} {:?} L={} {:?}:{line}",
        T::DTYPE,
        case.geo,
        case.chunk,
        case.opts
    );
    // An ill-conditioned call (one rounding of its inputs at the dtype's level moves a gradient by
    // more than the target allows) is bounded by a multiple of that gradient's own spread instead:
    // ROUNDINGS × the f32 spread, BF16_ROUNDINGS × the bf16 one. The spread is computed only when
    // the target is exceeded.
    let (unit, times) = if T::DTYPE == mamba3::Dtype::F32 {
        (common::F32_ROUNDING, common::ROUNDINGS)
    } else {
        (common::BF16_ROUNDING, common::BF16_ROUNDINGS)
    };
    let spreads = if errs.iter().any(|(_, e)| *e > tol) {
        common::backward_rounding_spread(&inp, &dout_host, &reference, unit)
    } else {
        vec![0.0; errs.len()]
    };
    for ((name, e), spread) in errs.iter().zip(&spreads) {
        let bound = tol.max(times * spread);
        assert!(
            *e <= bound,
            "{name}: error {e:e} above {bound:e} (target {tol:e}, rounding spread {spread:e}) \
             for {case:?} ({:?}, {path:?})",
            T::DTYPE
        );
    }
    errs
}

/// Runs `cases` in both dtypes on `path` and prints the worst error per gradient.
fn run_grid(cases: &[Case], label: &str, seed0: u64, path: impl Into<Run>) {
    let path: Run = path.into();
    let gpu = match common::gpu() {
        Some(g) => g,
        None => return,
    };
    let s = gpu.context().new_stream().expect("stream");
    let mut worst_f32: BTreeMap<&'static str, f64> = BTreeMap::new();
    let mut worst_bf16: BTreeMap<&'static str, f64> = BTreeMap::new();
    for (i, case) in cases.iter().enumerate() {
        let seed = seed0 + i as u64;
        // The tensor-core backward takes bf16 activations only.
        if !matches!(
            path,
            Run::Path(BackwardPath::TensorCore) | Run::TrainingStep
        ) {
            for (name, e) in check::<f32>(&gpu, &s, case, seed, path) {
                let w = worst_f32.entry(name).or_insert(0.0);
                *w = w.max(e);
            }
        }
        for (name, e) in check::<bf16>(&gpu, &s, case, seed, path) {
            let w = worst_bf16.entry(name).or_insert(0.0);
            *w = w.max(e);
        }
    }
    for (dtype, worst) in [("f32", &worst_f32), ("bf16", &worst_bf16)] {
        if worst.is_empty() {
            continue;
        }
        let line: Vec<String> = worst
            .iter()
            .map(|(name, e)| format!("{name} {e:.2e}"))
            .collect();
        eprintln!(
            "backward {label} {path:?} {dtype}: worst over {} cases (3 runs each, bitwise identical): {}",
            cases.len(),
            line.join(", ")
        );
    }
}

/// Upstream's grid (spec §8: divisor 4, gated with z and D) at B = 2, S = 2048, H = 4, plus GQA.
fn upstream_cases() -> Vec<Case> {
    let gated = opts(Rotation::HalfSplit, OutputMode::Gated, true, true);
    let mut cases: Vec<Case> = UPSTREAM_GRID[..8]
        .iter()
        .map(|&(n, p, r, c)| Case {
            geo: geo(2, 2048, r, 1, 4, n, p, n / 4),
            chunk: 4 * c,
            opts: gated,
        })
        .collect();
    cases.push(Case {
        geo: geo(2, 2048, 4, 2, 4, 128, 64, 32),
        chunk: 64,
        opts: opts(Rotation::HalfSplit, OutputMode::FusedNorm, true, true),
    });
    cases
}

/// Smaller varied geometries: segment tails, S = 1, L = 1, L > S, Na < N/2, Na = 0, odd P, both
/// rotations, every mode, with and without z and D, GQA, every rank, the fixed-geometry kernel.
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
            geo: geo(1, 1, 4, 1, 2, 128, 64, 32),
            chunk: 16,
            opts: opts(HalfSplit, Gated, true, true),
        },
        // The fixed-geometry instantiation (R = 4, N = 128, P = 64, Na = 32) with a tail chunk.
        Case {
            geo: geo(1, 37, 4, 2, 4, 128, 64, 32),
            chunk: 16,
            opts: opts(Pairwise, FusedNorm, true, false),
        },
        Case {
            geo: geo(2, 19, 1, 2, 2, 10, 7, 2),
            chunk: 1,
            opts: opts(HalfSplit, FusedNorm, false, true),
        },
        Case {
            geo: geo(1, 50, 2, 2, 4, 48, 33, 0),
            chunk: 24,
            opts: opts(Pairwise, Prereduce, true, true),
        },
        Case {
            geo: geo(2, 130, 4, 1, 2, 128, 64, 64),
            chunk: 1000,
            opts: opts(Pairwise, FusedNorm, true, true),
        },
    ]
}

#[test]
fn backward_matches_golden_on_small_geometries() {
    run_grid(&small_cases(), "small", 7000, BackwardPath::Chunked);
}

#[test]
fn token_serial_backward_matches_golden_on_small_geometries() {
    run_grid(&small_cases(), "small", 7000, BackwardPath::TokenSerial);
}

#[test]
fn backward_matches_golden_on_upstream_geometries() {
    run_grid(&upstream_cases(), "upstream", 8000, BackwardPath::Chunked);
}

/// Calls at the tensor-core backward's geometry (R = 4, N = 128, P = 64, Na = 32).
fn tensor_core_case(b: usize, s: usize, g: usize, h: usize, opts: RandomOptions) -> Case {
    Case {
        geo: geo(b, s, 4, g, h, 128, 64, 32),
        chunk: 16,
        opts,
    }
}

/// Small calls on the tensor-core backward: S = 1, a tail chunk, one short chunk, both rotations,
/// every mode, ±z, ±D, GQA, B = 2 (the fused norm without z, whose ∂D is a small difference of
/// large terms, among them); the B = 2, S = 130 call splits its checkpoint sweep in 3 segments
/// and the S = 300 one in 5 (and the backward itself in 3 and 5).
#[test]
fn tensor_core_backward_matches_golden_on_small_geometries() {
    use OutputMode::*;
    use Rotation::*;
    let cases = [
        tensor_core_case(1, 1, 1, 2, opts(HalfSplit, Gated, true, true)),
        tensor_core_case(1, 37, 2, 4, opts(Pairwise, FusedNorm, true, false)),
        tensor_core_case(2, 130, 1, 2, opts(Pairwise, FusedNorm, false, true)),
        tensor_core_case(1, 45, 1, 3, opts(HalfSplit, Prereduce, true, true)),
        tensor_core_case(2, 9, 2, 2, opts(Pairwise, Prereduce, false, false)),
        tensor_core_case(1, 300, 1, 2, opts(HalfSplit, Gated, true, true)),
    ];
    run_grid(&cases, "tensor-core small", 8500, BackwardPath::TensorCore);
}

/// The tensor-core backward on upstream's gated case and the fused-norm GQA case at B = 2,
/// S = 2048, H = 4.
#[test]
fn tensor_core_backward_matches_golden_on_upstream_geometries() {
    use OutputMode::*;
    use Rotation::*;
    let cases = [
        tensor_core_case(2, 2048, 1, 4, opts(HalfSplit, Gated, true, true)),
        tensor_core_case(2, 2048, 2, 4, opts(HalfSplit, FusedNorm, true, true)),
    ];
    run_grid(
        &cases,
        "tensor-core upstream",
        8400,
        BackwardPath::TensorCore,
    );
}

/// `dispatch_paths_on_gpu` names the checkpoint sweep the device runs: its `wgmma` twin on
/// compute capability 9.0 while the twins are on (as the grids above run it), the `mma.sync`
/// sweep otherwise, and the split sweep's segment-state pass likewise (H = 64, B = 1 splits it).
#[test]
fn backward_dispatch_names_the_sweep_the_device_runs() {
    let Some(gpu) = common::gpu() else {
        return;
    };
    let _restore = common::device::WgmmaKernelsOn(&gpu);
    let inp = Mamba3Inputs::random(
        geo(1, 2048, 4, 1, 64, 128, 64, 32),
        opts(Rotation::HalfSplit, OutputMode::Gated, true, true),
        1,
    )
    .expect("random inputs");
    let config = config_of::<bf16>(&inp, 16);
    let (wg, mma) = (
        "backward_ckpt_wg_bf16_r4_n128_p64_na32_c16",
        "backward_ckpt_mma_bf16_r4_n128_p64_na32_c16",
    );
    let paths = dispatch_paths_on_gpu(&gpu, &config);
    eprintln!("backward at H = 64, B = 1, S = 2048 on this device: {paths:?}");
    assert!(paths.contains(&"backward_mma_bf16_r4_n128_p64_na32_c16"));
    if gpu.wgmma_kernels() {
        assert!(paths.contains(&wg) && !paths.contains(&mma), "{paths:?}");
        assert!(paths.contains(&"segment_state_wg_bf16_r4_n128_p64_na32_c16"));
    }
    assert!(!gpu.set_wgmma_kernels(false));
    let paths = dispatch_paths_on_gpu(&gpu, &config);
    assert!(paths.contains(&mma) && !paths.contains(&wg), "{paths:?}");
}

/// A training step at the tensor-core geometry: the forward writing the backward's checkpoints
/// (whole, and split into sequence segments where B·H leaves SMs idle), then the backward
/// without its sweep.
#[test]
fn training_step_matches_golden() {
    use OutputMode::*;
    use Rotation::*;
    let cases = [
        tensor_core_case(1, 200, 1, 2, opts(HalfSplit, Gated, true, true)),
        tensor_core_case(2, 37, 2, 4, opts(Pairwise, FusedNorm, true, false)),
        tensor_core_case(1, 600, 1, 4, opts(HalfSplit, Prereduce, true, true)),
    ];
    run_grid(&cases, "training step", 8600, Run::TrainingStep);
}

/// The fixed-geometry kernel (R = 4, N = 128, P = 64, Na = 32) at S = 2048 and S = 16384 (B = 1,
/// H = 2): every gradient within the bounds at both lengths; prints the ratio of the worst errors
/// (the running sums over the sequence, of the adjoint and of ∂θ, are where an error would grow).
#[test]
fn backward_error_stays_within_bounds_at_long_sequences() {
    let gpu = match common::gpu() {
        Some(g) => g,
        None => return,
    };
    let s = gpu.context().new_stream().expect("stream");
    let at = |seq_len: usize| Case {
        geo: geo(1, seq_len, 4, 1, 2, 128, 64, 32),
        chunk: 16,
        opts: opts(Rotation::HalfSplit, OutputMode::Gated, true, true),
    };
    let worst = |errs: Vec<(&'static str, f64)>| {
        errs.into_iter()
            .fold(("", 0.0f64), |w, e| if e.1 > w.1 { e } else { w })
    };
    for dtype in [mamba3::Dtype::F32, mamba3::Dtype::Bf16] {
        let run = |case: &Case| {
            if dtype == mamba3::Dtype::F32 {
                worst(check::<f32>(&gpu, &s, case, 9100, BackwardPath::Chunked))
            } else {
                worst(check::<bf16>(&gpu, &s, case, 9100, BackwardPath::Chunked))
            }
        };
        let (short, long) = (run(&at(2048)), run(&at(16384)));
        eprintln!(
            "backward {dtype:?} long sequence: worst S=2048 {} {:.2e}, S=16384 {} {:.2e} (ratio {:.2})",
            short.0,
            short.1,
            long.0,
            long.1,
            long.1 / short.1
        );
    }
    let run = |case: &Case| {
        worst(check::<bf16>(
            &gpu,
            &s,
            case,
            9100,
            BackwardPath::TensorCore,
        ))
    };
    let (short, long) = (run(&at(2048)), run(&at(16384)));
    eprintln!(
        "backward TensorCore Bf16 long sequence: worst S=2048 {} {:.2e}, S=16384 {} {:.2e} (ratio {:.2})",
        short.0,
        short.1,
        long.0,
        long.1,
        long.1 / short.1
    );
}

/// 24 random geometries, or `MAMBA3_PROPTEST_CASES` (the sanitizer runs use fewer).
fn proptest_cases() -> u32 {
    std::env::var("MAMBA3_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Checks a random case in dtype `T` on the kernel the dispatch picks for it and, when that is the
/// chunked one, on the token-serial kernel too.
fn check_random<T: Activation>(gpu: &Gpu, s: &Arc<CudaStream>, rc: &common::RandomCase) {
    let rc = common::with_forward_rank(rc.clone());
    let case = Case {
        geo: rc.geometry,
        chunk: rc.chunk,
        opts: rc.options,
    };
    let inp = Mamba3Inputs::random(case.geo, case.opts, rc.seed).expect("random inputs");
    let path = backward_path(
        &config_of::<T>(&inp, case.chunk),
        gpu.max_shared_memory_optin(),
    );
    check::<T>(gpu, s, &case, rc.seed, path);
    if path == BackwardPath::Chunked {
        check::<T>(gpu, s, &case, rc.seed, BackwardPath::TokenSerial);
    }
}

proptest! {
    #![proptest_config(common::proptest_config(proptest_cases(), 0xbac_0001))]

    /// Random geometries (R ∈ {1, 2, 4, 8}, so both kernels; N ≤ 64, P ≤ 32, GQA, B ≤ 2, S ≤ 160 against
    /// segment lengths 1..=32, every mode and rotation, ±z, ±D), both dtypes by draw.
    #[test]
    fn backward_matches_golden_over_random_geometries(
        rc in common::random_case(160),
        bf16_dtype in any::<bool>(),
    ) {
        let Some(gpu) = common::gpu() else { return Ok(()) };
        let s = gpu.context().new_stream().expect("stream");
        if bf16_dtype {
            check_random::<bf16>(&gpu, &s, &rc);
        } else {
            check_random::<f32>(&gpu, &s, &rc);
        }
    }
}

#[test]
fn backward_rejects_bad_arguments_before_launch() {
    let gpu = gpu_or_skip!();
    let s = gpu.context().new_stream().expect("stream");
    let case = small_cases()[0];
    let mut inp = Mamba3Inputs::random(case.geo, case.opts, 3).unwrap();
    quantize::<f32>(&mut inp);
    let cfg = config_of::<f32>(&inp, case.chunk);
    assert_eq!(
        dispatch_paths(&cfg, gpu.max_shared_memory_optin()),
        vec!["backward_chunked_f32", "backward_reduce_f32"]
    );
    let dev = DeviceInputs::<f32>::upload(&s, &inp);
    let dout_host = random_dout::<f32>(&inp, 1);
    // dout one element short.
    let short = up_act::<f32>(&s, &dout_host[1..]);
    let mut grads = mamba3::backward::backward_alloc(
        &gpu,
        &s,
        &cfg,
        &dev.views(),
        &up_act(&s, &dout_host).as_view(),
    )
    .expect("allocating backward");
    // The chunked path's own workspace (`workspace_len_on`), so that one element less is short.
    let ws_len = workspace_len_on(&gpu, &cfg).unwrap();
    assert_eq!(Some(ws_len), workspace_len_for(&cfg, BackwardPath::Chunked));
    let mut ws = poison::<f32>(&s, ws_len);
    // The backward must refuse the call, naming `arg`.
    let expect_rejected = |dout: &CudaSlice<f32>,
                           grads: &mut GradientsMut<'_, f32>,
                           ws: &mut CudaViewMut<'_, f32>,
                           arg: &str| {
        let err = backward(&gpu, &s, &cfg, &dev.views(), &dout.as_view(), grads, ws).unwrap_err();
        eprintln!("rejected: {err}");
        assert_invalid_argument(&err, arg);
    };
    expect_rejected(
        &short,
        &mut grads.as_views_mut(),
        &mut ws.as_view_mut(),
        "dout",
    );
    // Workspace one element short.
    let dout = up_act::<f32>(&s, &dout_host);
    expect_rejected(
        &dout,
        &mut grads.as_views_mut(),
        &mut ws.slice_mut(1..),
        "workspace",
    );
    // A missing optional gradient.
    let mut views = grads.as_views_mut();
    views.z = None;
    expect_rejected(&dout, &mut views, &mut ws.as_view_mut(), "grads.z");
    // Nothing was launched: the poisoned workspace is untouched.
    s.synchronize().unwrap();
    assert!(down_f32(&s, &ws).iter().all(|x| x.is_nan()));

    // A training step's backward refuses a record of another problem or another workspace
    // (this f32 call writes no checkpoints; the record still names its call).
    let out_len = cfg.batch * cfg.seq_len * cfg.heads * cfg.output_width();
    let mut out = poison::<f32>(&s, out_len);
    let checkpoints = forward_for_backward(
        &gpu,
        &s,
        &cfg,
        &dev.views(),
        &mut out.as_view_mut(),
        None,
        None,
        &mut ws.as_view_mut(),
    )
    .expect("forward for backward");
    assert!(!checkpoints.written());
    let mut other_ws = poison::<f32>(&s, workspace_len(&cfg).unwrap());
    let err = backward_with_checkpoints(
        &gpu,
        &s,
        &cfg,
        &checkpoints,
        &dev.views(),
        &dout.as_view(),
        &mut grads.as_views_mut(),
        &mut other_ws.as_view_mut(),
    )
    .unwrap_err();
    eprintln!("rejected: {err}");
    assert_invalid_argument(&err, "workspace");
    let other_cfg = ForwardConfig {
        seq_len: cfg.seq_len + 1,
        ..cfg
    };
    let err = backward_with_checkpoints(
        &gpu,
        &s,
        &other_cfg,
        &checkpoints,
        &dev.views(),
        &dout.as_view(),
        &mut grads.as_views_mut(),
        &mut ws.as_view_mut(),
    )
    .unwrap_err();
    eprintln!("rejected: {err}");
    assert_invalid_argument(&err, "checkpoints");
    // At the tensor-core geometry, a workspace too small for that backward's checkpoints.
    let tc_case = tensor_core_case(
        1,
        20,
        1,
        1,
        opts(Rotation::HalfSplit, OutputMode::Gated, true, true),
    );
    let mut tc = Mamba3Inputs::random(tc_case.geo, tc_case.opts, 4).unwrap();
    quantize::<bf16>(&mut tc);
    let tc_cfg = config_of::<bf16>(&tc, tc_case.chunk);
    let tc_dev = DeviceInputs::<bf16>::upload(&s, &tc);
    let mut tc_out = poison::<bf16>(
        &s,
        tc_cfg.batch * tc_cfg.seq_len * tc_cfg.heads * tc_cfg.output_width(),
    );
    let mut tiny = poison::<f32>(&s, 16);
    let result = forward_for_backward(
        &gpu,
        &s,
        &tc_cfg,
        &tc_dev.views(),
        &mut tc_out.as_view_mut(),
        None,
        None,
        &mut tiny.as_view_mut(),
    );
    if backward_path(&tc_cfg, gpu.max_shared_memory_optin()) == BackwardPath::TensorCore {
        let err = result.unwrap_err();
        eprintln!("rejected: {err}");
        assert_invalid_argument(&err, "workspace");
        // The tensor-core backward runs in exactly its own (smaller) layout and refuses one
        // element less (the view's start kept 16-byte aligned, so the path does not change).
        let tc_dout = up_act::<bf16>(&s, &random_dout::<bf16>(&tc, 6));
        let mut tc_grads = mamba3::backward::backward_alloc(
            &gpu,
            &s,
            &tc_cfg,
            &tc_dev.views(),
            &tc_dout.as_view(),
        )
        .expect("the tensor-core backward, allocating");
        let need = workspace_len_on(&gpu, &tc_cfg).unwrap();
        assert_eq!(
            Some(need),
            workspace_len_for(&tc_cfg, BackwardPath::TensorCore)
        );
        let mut tc_ws = poison::<f32>(&s, need);
        for len in [need - 1, need] {
            let result = backward(
                &gpu,
                &s,
                &tc_cfg,
                &tc_dev.views(),
                &tc_dout.as_view(),
                &mut tc_grads.as_views_mut(),
                &mut tc_ws.slice_mut(..len),
            );
            if len < need {
                let err = result.unwrap_err();
                eprintln!("rejected: {err}");
                assert_invalid_argument(&err, "workspace");
            } else {
                result.expect("the tensor-core backward in exactly its workspace");
            }
        }
    }

    // A state too large for the per-head kernel's shared memory: the typed error names both.
    let big_case = Case {
        geo: geo(1, 2, 1, 1, 1, 512, 256, 4),
        chunk: 2,
        opts: opts(Rotation::HalfSplit, OutputMode::Gated, false, false),
    };
    let mut big = Mamba3Inputs::random(big_case.geo, big_case.opts, 5).unwrap();
    quantize::<f32>(&mut big);
    let big_cfg = config_of::<f32>(&big, big_case.chunk);
    let big_dev = DeviceInputs::<f32>::upload(&s, &big);
    let big_dout = up_act::<f32>(&s, &random_dout::<f32>(&big, 2));
    let err =
        mamba3::backward::backward_alloc(&gpu, &s, &big_cfg, &big_dev.views(), &big_dout.as_view())
            .err()
            .expect("shared memory error");
    eprintln!("rejected: {err}");
    match err {
        Error::SharedMemory { needed, max, .. } => assert!(needed > max),
        other => panic!("expected SharedMemory, got {other}"),
    }
}
