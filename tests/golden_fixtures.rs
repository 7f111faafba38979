//! The golden model against the float64 reference fixtures in `shared/fixtures/mamba3`.

mod common;

use common::*;
use mamba3::golden::{
    chunk_da_cs, chunk_da_cs_rev, cumulative_theta, forward_chunked, forward_recurrent, step,
    Output, Rotation,
};

const TOL: f64 = 1e-10;

/// Compares one forward output with the fixture's half-split or pairwise references.
fn check_forward(
    worst: &Worst,
    label: &str,
    o: &Output,
    fx: &Fixture,
    rotation: Rotation,
    dims: (usize, usize, usize, usize, usize),
) {
    let (b, h, r, n, p) = dims;
    let fs = &o.final_states;
    match rotation {
        Rotation::HalfSplit => {
            worst.record(
                &format!("{label} y"),
                rel_err(&o.out, fx.get("y_halfsplit")),
            );
            let ssm_ref = transpose_last2(fx.get("final_state"), b * h, n, p);
            worst.record(&format!("{label} final_state"), rel_err(&fs.ssm, &ssm_ref));
            worst.record(
                &format!("{label} final_k"),
                rel_err(&fs.k, fx.get("final_k")),
            );
            worst.record(
                &format!("{label} final_v"),
                rel_err(&fs.v, fx.get("final_v")),
            );
            worst.record(
                &format!("{label} theta_final"),
                angle_rel_err(&fs.theta, fx.get("theta_final")),
            );
        }
        Rotation::Pairwise => {
            worst.record(
                &format!("{label} y_pairwise"),
                rel_err(&o.out, fx.get("y_step_pairwise")),
            );
            worst.record(
                &format!("{label} step_ssm_state"),
                rel_err(&fs.ssm, fx.get("step_ssm_state")),
            );
            let k_ref = swap_mid(fx.get("step_k_state"), b, h, r, n);
            worst.record(&format!("{label} step_k_state"), rel_err(&fs.k, &k_ref));
            worst.record(
                &format!("{label} step_angle_state"),
                angle_rel_err(&fs.theta, fx.get("step_angle_state")),
            );
        }
    }
}

#[test]
fn mamba3_fixtures() {
    let cases = load_cases("mamba3");
    assert_eq!(cases.len(), 10, "expected 10 Mamba-3 cases");
    let mut failures = Vec::new();
    let mut overall = 0.0f64;
    for case in &cases {
        let id = case["id"].as_str().expect("id");
        let fx = Fixture::load("mamba3", case["file"].as_str().expect("file"));
        let (b, s, h, r, n, p, c) = (
            field(case, "B"),
            field(case, "S"),
            field(case, "H"),
            field(case, "R"),
            field(case, "N"),
            field(case, "P"),
            field(case, "C"),
        );
        let worst = Worst::default();

        for rotation in ROTATIONS {
            let inputs = case_inputs(case, &fx, rotation, "");
            let rec = forward_recurrent(&inputs).expect("recurrent");
            let chk = forward_chunked(&inputs, c).expect("chunked");
            let tag = format!("{rotation:?}");
            check_forward(
                &worst,
                &format!("{tag} recurrent"),
                &rec,
                &fx,
                rotation,
                (b, h, r, n, p),
            );
            check_forward(
                &worst,
                &format!("{tag} chunked"),
                &chk,
                &fx,
                rotation,
                (b, h, r, n, p),
            );

            if rotation == Rotation::HalfSplit {
                let cont = case_inputs(case, &fx, rotation, "cont_");
                for (label, start) in [("recurrent", &rec), ("chunked", &chk)] {
                    let mut state = start.final_states.clone();
                    let y = step(&cont, &mut state).expect("step");
                    worst.record(
                        &format!("cont_y after {label}"),
                        rel_err(&y, fx.get("cont_y_halfsplit")),
                    );
                }
            }
        }

        let adt = fx.get("adt");
        worst.record(
            "dA_cs",
            rel_err(&chunk_da_cs(adt, s, c).expect("dA_cs"), fx.get("dA_cs")),
        );
        worst.record(
            "dA_cs_rev",
            rel_err(
                &chunk_da_cs_rev(adt, s, c).expect("dA_cs_rev"),
                fx.get("dA_cs_rev"),
            ),
        );
        let geometry = case_geometry(case, s);
        let theta =
            cumulative_theta(&geometry, fx.get("angle_logits"), fx.get("dt")).expect("theta");
        worst.record("theta", rel_err(&theta, fx.get("theta")));

        let (err, label) = (worst.value.get(), worst.label.borrow().clone());
        eprintln!("fixture {id:<22} worst rel err {err:.3e} ({label})");
        overall = overall.max(err);
        if err.is_nan() || err > TOL {
            failures.push(format!("{id}: {err:.3e} at {label}"));
        }
    }
    eprintln!("fixtures overall worst rel err {overall:.3e}");
    assert!(failures.is_empty(), "fixture mismatches: {failures:#?}");
}
