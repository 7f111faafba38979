//! Decode continuation: forward over S then step over T equals forward over S + T.

mod common;

use common::*;
use mamba3::golden::{
    forward_chunked, forward_recurrent, step, FinalStates, Mamba3Geometry, Mamba3Inputs,
    RandomOptions,
};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

const TOL: f64 = 1e-12;

/// Splits `inputs` (S + T tokens) after `prefix` tokens, runs the prefix with `forward`, steps the rest
/// (in pieces of `piece` tokens) and returns the worst relative error against the full forward.
fn prefill_then_step(
    worst: &Worst,
    tag: &str,
    inputs: &Mamba3Inputs,
    prefix: usize,
    piece: usize,
    chunk: Option<usize>,
) -> f64 {
    let g = inputs.geometry;
    let full = forward_recurrent(inputs).expect("full forward");
    let head = inputs.token_slice(0, prefix).expect("prefix");
    let mut state = match chunk {
        Some(c) => forward_chunked(&head, c).expect("prefix chunked"),
        None => forward_recurrent(&head).expect("prefix recurrent"),
    }
    .final_states;
    let per_token = g.heads * inputs.output_width();
    let mut err = 0.0f64;
    let mut start = prefix;
    while start < g.seq_len {
        let end = (start + piece).min(g.seq_len);
        let tail = inputs.token_slice(start, end).expect("tail");
        let y = step(&tail, &mut state).expect("step");
        let expect = token_range(&full.out, g.batch, g.seq_len, per_token, start, end - start);
        err = err.max(worst.record(&format!("{tag} out"), rel_err(&y, &expect)));
        start = end;
    }
    let f = &full.final_states;
    err = err.max(worst.record(&format!("{tag} ssm"), rel_err(&state.ssm, &f.ssm)));
    err = err.max(worst.record(&format!("{tag} k"), rel_err(&state.k, &f.k)));
    err = err.max(worst.record(&format!("{tag} v"), rel_err(&state.v, &f.v)));
    err.max(worst.record(
        &format!("{tag} theta"),
        angle_rel_err(&state.theta, &f.theta),
    ))
}

#[test]
fn forward_then_step_matches_longer_forward() {
    let mut runner = TestRunner::new(proptest_config(48, 0x57e9_0001));
    let worst = Worst::default();
    let strategy = (random_case(64), 1usize..=8, 1usize..=8, any::<bool>());
    runner
        .run(&strategy, |(mut case, t, piece, chunked)| {
            case.geometry.seq_len += t;
            let inputs = Mamba3Inputs::random(case.geometry, case.options, case.seed)
                .expect("valid random case");
            let prefix = case.geometry.seq_len - t;
            let chunk = chunked.then_some(case.chunk);
            let err =
                prefill_then_step(&worst, &format!("{case:?}"), &inputs, prefix, piece, chunk);
            prop_assert!(err <= TOL, "rel err {err:.3e} for {case:?} T={t}");
            Ok(())
        })
        .expect("forward + step == forward");
    eprintln!(
        "forward+step vs forward: worst rel err {:.3e} ({})",
        worst.value.get(),
        worst.label.borrow()
    );
}

/// Every rotation × output mode × z × D combination, T = 1..=8 in one call.
#[test]
fn step_every_mode() {
    let worst = Worst::default();
    let mut seed = 7;
    for rotation in ROTATIONS {
        for mode in MODES {
            for (has_z, has_d) in [(true, true), (false, true), (true, false), (false, false)] {
                for t in 1..=8 {
                    seed += 1;
                    let geometry = Mamba3Geometry {
                        batch: 2,
                        seq_len: 11 + t,
                        rank: 2,
                        groups: 1,
                        heads: 2,
                        state_dim: 8,
                        head_dim: 3,
                        num_angles: 2,
                    };
                    let options = RandomOptions {
                        rotation,
                        mode,
                        has_z,
                        has_d,
                    };
                    let inputs = Mamba3Inputs::random(geometry, options, seed).expect("valid");
                    let tag = format!("{options:?} T={t}");
                    let err = prefill_then_step(&worst, &tag, &inputs, 11, t, Some(4));
                    assert!(err <= TOL, "{tag}: {err:.3e}");
                }
            }
        }
    }
    eprintln!(
        "step every mode: worst rel err {:.3e} ({})",
        worst.value.get(),
        worst.label.borrow()
    );
}

/// Stepping a whole sequence from the zero state equals the forward pass from scratch.
#[test]
fn step_from_zero_state_equals_forward() {
    for (i, mode) in MODES.into_iter().enumerate() {
        for rotation in ROTATIONS {
            let geometry = Mamba3Geometry {
                batch: 2,
                seq_len: 23,
                rank: 4,
                groups: 2,
                heads: 4,
                state_dim: 16,
                head_dim: 6,
                num_angles: 5,
            };
            let options = RandomOptions {
                rotation,
                mode,
                ..Default::default()
            };
            let inputs = Mamba3Inputs::random(geometry, options, 900 + i as u64).expect("valid");
            let full = forward_recurrent(&inputs).expect("forward");
            for piece in [1, 5, 23] {
                let mut state = FinalStates::zeros(&geometry).expect("zeros");
                let mut outs = Vec::new();
                let mut start = 0;
                while start < geometry.seq_len {
                    let end = (start + piece).min(geometry.seq_len);
                    let y = step(&inputs.token_slice(start, end).expect("slice"), &mut state)
                        .expect("step");
                    outs.push((start, end, y));
                    start = end;
                }
                let per_token = geometry.heads * inputs.output_width();
                for (s, e, y) in outs {
                    let expect = token_range(
                        &full.out,
                        geometry.batch,
                        geometry.seq_len,
                        per_token,
                        s,
                        e - s,
                    );
                    let err = rel_err(&y, &expect);
                    assert!(err <= TOL, "{mode:?} {rotation:?} piece {piece}: {err:.3e}");
                }
                let err = rel_err(&state.ssm, &full.final_states.ssm)
                    .max(rel_err(&state.k, &full.final_states.k))
                    .max(rel_err(&state.v, &full.final_states.v))
                    .max(angle_rel_err(&state.theta, &full.final_states.theta));
                assert!(
                    err <= TOL,
                    "{mode:?} {rotation:?} piece {piece} states: {err:.3e}"
                );
            }
        }
    }
}
