//! Timing of a production-sized case; run with `cargo test --release -- --ignored --nocapture`.

use std::time::Instant;

mod common;

use mamba3::golden::{
    forward_chunked, forward_recurrent, Mamba3Geometry, Mamba3Inputs, RandomOptions,
};

#[test]
#[ignore = "timing only; several seconds"]
fn large_case_timing() {
    let geometry = Mamba3Geometry {
        batch: 2,
        seq_len: 2048,
        rank: 4,
        groups: 1,
        heads: 16,
        state_dim: 128,
        head_dim: 64,
        num_angles: 32,
    };
    let inputs = Mamba3Inputs::random(geometry, RandomOptions::default(), 1).expect("valid");
    let t0 = Instant::now();
    let rec = forward_recurrent(&inputs).expect("recurrent");
    let t1 = Instant::now();
    let chk = forward_chunked(&inputs, 16).expect("chunked");
    let t2 = Instant::now();
    let diff = rec
        .out
        .iter()
        .zip(&chk.out)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, common::nan_max);
    let scale = rec.out.iter().map(|v| v.abs()).fold(0.0, common::nan_max);
    eprintln!(
        "large case: recurrent {:.2?}, chunked(C=16) {:.2?}, rel diff {:.3e}, threads {}",
        t1 - t0,
        t2 - t1,
        diff / scale,
        rayon::current_num_threads()
    );
    assert!(diff / scale < 1e-12);
}
