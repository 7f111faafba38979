//! The golden backward against the float64 reference gradients and against central finite differences.

mod common;

use common::*;
use mamba3::golden::{
    backward_recurrent, forward_recurrent, Gradients, Mamba3Error, Mamba3Geometry, Mamba3Inputs,
    OutputMode, RandomOptions, Rotation, SplitMix64,
};

/// Relative tolerance against the fixtures (max abs diff / max abs reference).
const FIXTURE_TOL: f64 = 1e-10;
/// Below this reference magnitude a gradient is mathematically zero (S = 1 case) and is checked absolutely.
const ZERO_REF: f64 = 1e-12;
/// Absolute bound for such mathematically-zero gradients.
const ZERO_ABS_TOL: f64 = 1e-14;
/// Finite-difference tolerance, relative to the largest analytic entry of the tensor.
const FD_TOL: f64 = 1e-6;

/// Fixture tensor name of each gradient (the fixtures spell D in upper case).
fn fixture_name(name: &str) -> String {
    match name {
        "d" => "grad_D".to_string(),
        other => format!("grad_{other}"),
    }
}

const GRAD_NAMES: [&str; 15] = [
    "q",
    "k",
    "v",
    "z",
    "trap",
    "dt",
    "adt",
    "angle_logits",
    "q_bias",
    "k_bias",
    "mimo_v",
    "mimo_z",
    "mimo_o",
    "d",
    "norm_weight",
];

#[test]
fn backward_matches_fixtures() {
    let cases = load_cases("mamba3");
    assert_eq!(cases.len(), 10, "expected 10 Mamba-3 cases");
    let mut failures = Vec::new();
    let mut per_grad: Vec<(String, f64)> =
        GRAD_NAMES.iter().map(|n| (n.to_string(), 0.0)).collect();
    for case in &cases {
        let id = case["id"].as_str().expect("id");
        let fx = Fixture::load("mamba3", case["file"].as_str().expect("file"));
        // The fixture gradients are of L = Σ y_halfsplit ⊙ dout.
        let inputs = case_inputs(case, &fx, Rotation::HalfSplit, "");
        let grads = backward_recurrent(&inputs, fx.get("dout")).expect("backward");
        let ours = grads.tensors();
        let worst = Worst::default();
        for (slot, name) in GRAD_NAMES.iter().enumerate() {
            let reference = fx.opt(&fixture_name(name));
            let mine = ours.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
            let (mine, reference) = match (mine, reference) {
                (None, None) => continue,
                (Some(m), Some(r)) => (m, r),
                (m, r) => {
                    failures.push(format!(
                        "{id}: grad {name} present ours={} fixture={}",
                        m.is_some(),
                        r.is_some()
                    ));
                    continue;
                }
            };
            let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let (err, bound) = if scale < ZERO_REF {
                let diff = mine
                    .iter()
                    .zip(&reference)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f64, common::nan_max);
                eprintln!("  {id} {name}: reference ~0 (max {scale:.1e}), abs diff {diff:.3e}");
                (diff, ZERO_ABS_TOL)
            } else {
                let err = rel_err(mine, &reference);
                per_grad[slot].1 = per_grad[slot].1.max(err);
                (worst.record(name, err), FIXTURE_TOL)
            };
            if err.is_nan() || err > bound {
                failures.push(format!("{id} {name}: {err:.3e} > {bound:.0e}"));
            }
        }
        eprintln!(
            "backward fixture {id:<22} worst rel err {:.3e} ({})",
            worst.value.get(),
            worst.label.borrow()
        );
    }
    for (name, err) in &per_grad {
        eprintln!("backward fixtures: grad_{name:<13} worst rel err {err:.3e}");
    }
    assert!(failures.is_empty(), "fixture mismatches: {failures:#?}");
}

/// The input buffer of the given gradient name.
fn input_mut<'a>(inp: &'a mut Mamba3Inputs, name: &str) -> &'a mut Vec<f64> {
    match name {
        "q" => &mut inp.q,
        "k" => &mut inp.k,
        "v" => &mut inp.v,
        "z" => inp.z.as_mut().expect("z"),
        "trap" => &mut inp.trap,
        "dt" => &mut inp.dt,
        "adt" => &mut inp.adt,
        "angle_logits" => &mut inp.angle_logits,
        "q_bias" => &mut inp.q_bias,
        "k_bias" => &mut inp.k_bias,
        "mimo_v" => &mut inp.mimo_v,
        "mimo_z" => inp.mimo_z.as_mut().expect("mimo_z"),
        "mimo_o" => inp.mimo_o.as_mut().expect("mimo_o"),
        "d" => inp.d.as_mut().expect("d"),
        "norm_weight" => &mut inp.norm.as_mut().expect("norm").weight,
        other => panic!("unknown input {other}"),
    }
}

/// L = Σ out ⊙ dout.
fn loss(inp: &Mamba3Inputs, dout: &[f64]) -> f64 {
    let out = forward_recurrent(inp).expect("forward").out;
    out.iter().zip(dout).map(|(a, b)| a * b).sum()
}

/// Central differences at a few elements of every input tensor (the largest analytic entry plus random
/// ones); returns the worst error relative to the tensor's largest analytic entry.
fn finite_difference_check(
    worst: &Worst,
    tag: &str,
    inputs: &Mamba3Inputs,
    dout: &[f64],
    grads: &Gradients,
    rng: &mut SplitMix64,
) -> f64 {
    let mut max_err = 0.0f64;
    for (name, grad) in grads.tensors() {
        let scale = grad.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{tag}: gradient {name} is identically zero");
        let argmax =
            grad.iter().enumerate().fold(
                0,
                |best, (i, v)| if v.abs() > grad[best].abs() { i } else { best },
            );
        let mut picks = vec![argmax];
        picks.extend((0..6).map(|_| (rng.next_u64() % grad.len() as u64) as usize));
        for i in picks {
            let mut pert = inputs.clone();
            let x0 = input_mut(&mut pert, name)[i];
            let step = 1e-6 * x0.abs().max(1.0);
            input_mut(&mut pert, name)[i] = x0 + step;
            let plus = loss(&pert, dout);
            input_mut(&mut pert, name)[i] = x0 - step;
            let minus = loss(&pert, dout);
            let fd = (plus - minus) / (2.0 * step);
            let err = (fd - grad[i]).abs() / scale;
            worst.record(&format!("{tag} {name}[{i}]"), err);
            max_err = max_err.max(err);
            assert!(
                err <= FD_TOL,
                "{tag}: d/d{name}[{i}] analytic {:.12e} vs finite difference {fd:.12e} (rel {err:.3e})",
                grad[i]
            );
        }
    }
    max_err
}

/// Every rotation × output mode × z × D on small geometries: GQA with G = 2, H = 4 (Na < N/2 and
/// Na = N/2), and a minimal one with N = 2, R = 1, P = 2, G = H.
#[test]
fn backward_matches_finite_differences() {
    let worst = Worst::default();
    let mut rng = SplitMix64::new(0xfd_0001);
    let mut seed = 900;
    let gqa = |seq_len, num_angles| Mamba3Geometry {
        batch: 2,
        seq_len,
        rank: 2,
        groups: 2,
        heads: 4,
        state_dim: 8,
        head_dim: 3,
        num_angles,
    };
    let minimal = Mamba3Geometry {
        batch: 1,
        seq_len: 4,
        rank: 1,
        groups: 2,
        heads: 2,
        state_dim: 2,
        // P = 1 would make the fused norm ≈ sign(y): gradients ~eps/|y|³, below finite-difference noise.
        head_dim: 2,
        num_angles: 1,
    };
    for geometry in [gqa(7, 3), gqa(5, 4), minimal] {
        for rotation in ROTATIONS {
            for mode in MODES {
                for (has_z, has_d) in [(true, true), (false, true), (true, false), (false, false)] {
                    seed += 1;
                    let options = RandomOptions {
                        rotation,
                        mode,
                        has_z,
                        has_d,
                    };
                    let mut inputs = Mamba3Inputs::random(geometry, options, seed).expect("valid");
                    // Larger steps than the fixture draw so that every path (decay, rotation) is well excited.
                    for dt in inputs.dt.iter_mut() {
                        *dt *= 5.0;
                    }
                    for a in inputs.adt.iter_mut() {
                        *a *= 5.0;
                    }
                    let g = &geometry;
                    let len = g.batch * g.seq_len * g.heads * inputs.output_width();
                    let dout: Vec<f64> = (0..len).map(|_| rng.normal()).collect();
                    let grads = backward_recurrent(&inputs, &dout).expect("backward");
                    let tag = format!("{geometry:?} {options:?}");
                    finite_difference_check(&worst, &tag, &inputs, &dout, &grads, &mut rng);
                }
            }
        }
    }
    eprintln!(
        "finite differences: worst rel err {:.3e} ({})",
        worst.value.get(),
        worst.label.borrow()
    );
}

/// Shared gradients are reduced in a fixed order: one thread and the default pool agree bit for bit.
#[test]
fn backward_is_deterministic() {
    let geometry = Mamba3Geometry {
        batch: 3,
        seq_len: 9,
        rank: 3,
        groups: 2,
        heads: 4,
        state_dim: 10,
        head_dim: 5,
        num_angles: 4,
    };
    let inputs = Mamba3Inputs::random(geometry, RandomOptions::default(), 77).expect("valid");
    let mut rng = SplitMix64::new(5);
    let dout: Vec<f64> = (0..3 * 9 * 4 * 5).map(|_| rng.normal()).collect();
    let default_pool = backward_recurrent(&inputs, &dout).expect("backward");
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool")
        .install(|| backward_recurrent(&inputs, &dout).expect("backward"));
    assert_eq!(default_pool, single);
}

#[test]
fn backward_rejects_bad_arguments() {
    let geometry = Mamba3Geometry {
        batch: 1,
        seq_len: 4,
        rank: 2,
        groups: 1,
        heads: 2,
        state_dim: 4,
        head_dim: 3,
        num_angles: 2,
    };
    for mode in MODES {
        let options = RandomOptions {
            mode,
            ..RandomOptions::default()
        };
        let inputs = Mamba3Inputs::random(geometry, options, 3).expect("valid");
        let expected = 4 * 2 * 3 * if mode == OutputMode::Prereduce { 2 } else { 1 };
        for len in [0, expected - 1, expected + 1, expected * 2] {
            let err = backward_recurrent(&inputs, &vec![0.0; len]).expect_err("wrong dout length");
            match err {
                Mamba3Error::ShapeMismatch {
                    name,
                    expected: e,
                    actual,
                    ..
                } => {
                    assert_eq!(name, "dout");
                    assert_eq!(e, expected, "{mode:?}");
                    assert_eq!(actual, len);
                }
                other => panic!("{mode:?}: unexpected error {other:?}"),
            }
        }
        assert!(backward_recurrent(&inputs, &vec![0.0; expected]).is_ok());
    }
    // Invalid inputs are rejected before dout is looked at.
    let mut inputs = Mamba3Inputs::random(geometry, RandomOptions::default(), 4).expect("valid");
    inputs.mimo_z = None;
    assert_eq!(
        backward_recurrent(&inputs, &[0.0; 24]),
        Err(Mamba3Error::ZWithoutMimoZ)
    );
    inputs = Mamba3Inputs::random(geometry, RandomOptions::default(), 4).expect("valid");
    inputs.q.pop();
    assert!(matches!(
        backward_recurrent(&inputs, &[0.0; 24]),
        Err(Mamba3Error::ShapeMismatch { name: "q", .. })
    ));
}
