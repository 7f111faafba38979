//! The chunked SSD form equals the step-by-step recurrence on random geometries.

mod common;

use common::*;
use mamba3::golden::{forward_chunked, forward_recurrent, Mamba3Inputs, Output};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

const TOL: f64 = 1e-12;

/// Worst relative error over the output and the four final states.
fn compare(worst: &Worst, tag: &str, ours: &Output, reference: &Output) -> f64 {
    let (a, b) = (&ours.final_states, &reference.final_states);
    [
        worst.record(&format!("{tag} out"), rel_err(&ours.out, &reference.out)),
        worst.record(&format!("{tag} ssm"), rel_err(&a.ssm, &b.ssm)),
        worst.record(&format!("{tag} k"), rel_err(&a.k, &b.k)),
        worst.record(&format!("{tag} v"), rel_err(&a.v, &b.v)),
        worst.record(&format!("{tag} theta"), angle_rel_err(&a.theta, &b.theta)),
    ]
    .into_iter()
    .fold(0.0, common::nan_max)
}

#[test]
fn chunked_matches_recurrent() {
    let mut runner = TestRunner::new(proptest_config(48, 0x5eed_c4a7));
    let worst = Worst::default();
    runner
        .run(&random_case(200), |case| {
            let inputs = Mamba3Inputs::random(case.geometry, case.options, case.seed)
                .expect("valid random case");
            let rec = forward_recurrent(&inputs).expect("recurrent");
            let chk = forward_chunked(&inputs, case.chunk).expect("chunked");
            let err = compare(&worst, &format!("{case:?}"), &chk, &rec);
            prop_assert!(err <= TOL, "rel err {err:.3e} for {case:?}");
            Ok(())
        })
        .expect("chunked == recurrent");
    eprintln!(
        "chunked vs recurrent: worst rel err {:.3e} ({})",
        worst.value.get(),
        worst.label.borrow()
    );
}

/// Every rotation × output mode × z × D combination, on a tail-chunk geometry.
#[test]
fn every_option_combination() {
    let worst = Worst::default();
    let mut seed = 300;
    for rotation in ROTATIONS {
        for mode in MODES {
            for (has_z, has_d) in [(true, true), (false, true), (true, false), (false, false)] {
                seed += 1;
                let geometry = mamba3::golden::Mamba3Geometry {
                    batch: 2,
                    seq_len: 29,
                    rank: 4,
                    groups: 2,
                    heads: 4,
                    state_dim: 16,
                    head_dim: 8,
                    num_angles: 3,
                };
                let options = mamba3::golden::RandomOptions {
                    rotation,
                    mode,
                    has_z,
                    has_d,
                };
                let inputs = Mamba3Inputs::random(geometry, options, seed).expect("valid");
                let rec = forward_recurrent(&inputs).expect("recurrent");
                for chunk in [3, 8] {
                    let chk = forward_chunked(&inputs, chunk).expect("chunked");
                    let tag = format!("{options:?} C={chunk}");
                    let err = compare(&worst, &tag, &chk, &rec);
                    assert!(err <= TOL, "{tag}: {err:.3e}");
                }
            }
        }
    }
    eprintln!(
        "every option combination: worst rel err {:.3e} ({})",
        worst.value.get(),
        worst.label.borrow()
    );
}

/// Chunk sizes at and around S, including C = 1 and C > S, on one case per output mode.
#[test]
fn chunk_size_edges() {
    let worst = Worst::default();
    for (i, mode) in MODES.into_iter().enumerate() {
        let case = RandomCase {
            geometry: mamba3::golden::Mamba3Geometry {
                batch: 2,
                seq_len: 17,
                rank: 3,
                groups: 2,
                heads: 4,
                state_dim: 12,
                head_dim: 5,
                num_angles: 4,
            },
            options: mamba3::golden::RandomOptions {
                mode,
                ..Default::default()
            },
            chunk: 0,
            seed: 100 + i as u64,
        };
        let inputs = Mamba3Inputs::random(case.geometry, case.options, case.seed).expect("valid");
        let rec = forward_recurrent(&inputs).expect("recurrent");
        for chunk in [1, 2, 5, 16, 17, 18, 64, usize::MAX] {
            let chk = forward_chunked(&inputs, chunk).expect("chunked");
            let err = compare(&worst, &format!("{mode:?} C={chunk}"), &chk, &rec);
            assert!(err <= TOL, "{mode:?} C={chunk}: {err:.3e}");
        }
    }
    eprintln!(
        "chunk size edges: worst rel err {:.3e} ({})",
        worst.value.get(),
        worst.label.borrow()
    );
}
