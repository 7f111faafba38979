//! Properties of the exposed per-chunk pieces and rotation helpers.

mod common;

use std::f64::consts::TAU;

use common::*;
use mamba3::golden::{
    chunk_da_cs, chunk_da_cs_rev, chunk_segsum, forward_recurrent, reduce_angle, trap_scale,
    Mamba3Geometry, Mamba3Inputs, RandomOptions, Rotation, SplitMix64,
};

#[test]
fn decay_pieces_are_consistent() {
    let mut rng = SplitMix64::new(11);
    let (rows, s) = (3, 23);
    let adt: Vec<f64> = (0..rows * s)
        .map(|_| -rng.uniform_range(0.01, 0.5))
        .collect();
    for c in [1, 4, 7, 23, 30] {
        let cs = chunk_da_cs(&adt, s, c).expect("cs");
        let rev = chunk_da_cs_rev(&adt, s, c).expect("rev");
        let seg = chunk_segsum(&adt, s, c).expect("segsum");
        let n_chunks = s.div_ceil(c);
        assert_eq!(seg.len(), rows * n_chunks * c * c);
        for row in 0..rows {
            for chunk in 0..n_chunks {
                let (c0, c1) = (chunk * c, ((chunk + 1) * c).min(s));
                let total: f64 = adt[row * s + c0..row * s + c1].iter().sum();
                for i in 0..c {
                    for j in 0..c {
                        let got = seg[((row * n_chunks + chunk) * c + i) * c + j];
                        let want = if i > j && c0 + i < s {
                            cs[row * s + c0 + i] - cs[row * s + c0 + j]
                        } else {
                            0.0
                        };
                        assert!((got - want).abs() < 1e-13, "segsum c={c} {i},{j}");
                    }
                }
                for t in c0..c1 {
                    // inclusive prefix + exclusive suffix = chunk total
                    let sum = cs[row * s + t] + rev[row * s + t];
                    assert!((sum - total).abs() < 1e-13, "c={c} t={t}");
                }
                assert_eq!(rev[row * s + c1 - 1], 0.0);
            }
        }
    }
}

#[test]
fn trap_scale_ends_with_gamma() {
    let dt = [0.1, 0.2, 0.3, 0.4];
    let trap = [0.5, -1.0, 2.0, 0.0];
    let c = trap_scale(&dt, &trap, 2).expect("scale");
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    // Rows of length 2: ε does not cross rows.
    assert!((c[0] - (sig(0.5) * 0.1 + 0.2 * (1.0 - sig(-1.0)))).abs() < 1e-16);
    assert!((c[1] - sig(-1.0) * 0.2).abs() < 1e-16);
    assert!((c[3] - sig(0.0) * 0.4).abs() < 1e-16);
}

#[test]
fn reduce_angle_range() {
    for x in [
        0.0,
        1.0,
        TAU,
        -TAU,
        -1e-300,
        -1e-17,
        7.0 * TAU + 0.5,
        -123.456,
        1e6,
    ] {
        let r = reduce_angle(x);
        assert!((0.0..TAU).contains(&r), "{x} -> {r}");
        let d = (r - x).rem_euclid(TAU);
        assert!(d.min(TAU - d) < 1e-9, "{x} -> {r}");
    }
    assert!(reduce_angle(f64::NAN).is_nan());
}

#[test]
fn rotations_preserve_norm_and_compose() {
    let mut rng = SplitMix64::new(5);
    for rotation in ROTATIONS {
        let v0: Vec<f64> = (0..10).map(|_| rng.normal()).collect();
        let th = [0.3, -1.2, 2.5];
        let mut v = v0.clone();
        rotation.rotate(&mut v, &th).expect("rotate");
        let n0: f64 = v0.iter().map(|x| x * x).sum();
        let n1: f64 = v.iter().map(|x| x * x).sum();
        assert!((n0 - n1).abs() < 1e-12);
        let back: Vec<f64> = th.iter().map(|t| -t).collect();
        rotation.rotate(&mut v, &back).expect("rotate back");
        assert!(rel_err(&v, &v0) < 1e-15);
    }
}

/// Half-split and pairwise are the same model up to the fixed permutation of N described in the fixture README.
#[test]
fn half_split_is_permuted_pairwise() {
    let geometry = Mamba3Geometry {
        batch: 2,
        seq_len: 19,
        rank: 3,
        groups: 1,
        heads: 2,
        state_dim: 12,
        head_dim: 4,
        num_angles: 3,
    };
    let half = Mamba3Inputs::random(geometry, RandomOptions::default(), 21).expect("valid");
    let n = geometry.state_dim;
    // pairwise position of half-split index i
    let mut perm = vec![usize::MAX; n];
    for j in 0..geometry.num_angles {
        perm[j] = 2 * j;
        perm[j + n / 2] = 2 * j + 1;
    }
    let mut next = 2 * geometry.num_angles;
    for slot in perm.iter_mut() {
        if *slot == usize::MAX {
            *slot = next;
            next += 1;
        }
    }
    let permute = |x: &[f64]| -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        for (row, src) in x.chunks(n).enumerate() {
            for (i, &v) in src.iter().enumerate() {
                out[row * n + perm[i]] = v;
            }
        }
        out
    };
    let mut pair = half.clone();
    pair.rotation = Rotation::Pairwise;
    pair.q = permute(&half.q);
    pair.k = permute(&half.k);
    pair.q_bias = permute(&half.q_bias);
    pair.k_bias = permute(&half.k_bias);
    let a = forward_recurrent(&half).expect("half");
    let b = forward_recurrent(&pair).expect("pair");
    assert!(rel_err(&a.out, &b.out) < 1e-13);
    assert!(rel_err(&permute(&a.final_states.k), &b.final_states.k) < 1e-15);
    assert!(rel_err(&permute(&a.final_states.ssm), &b.final_states.ssm) < 1e-13);
}

#[test]
fn random_is_deterministic() {
    let g = Mamba3Geometry {
        batch: 1,
        seq_len: 4,
        rank: 2,
        groups: 1,
        heads: 1,
        state_dim: 4,
        head_dim: 2,
        num_angles: 1,
    };
    let a = Mamba3Inputs::random(g, RandomOptions::default(), 9).expect("a");
    let b = Mamba3Inputs::random(g, RandomOptions::default(), 9).expect("b");
    let c = Mamba3Inputs::random(g, RandomOptions::default(), 10).expect("c");
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(a.dt.iter().all(|&d| d > 0.0));
    assert!(a.adt.iter().zip(&a.dt).all(|(&x, &d)| x < 0.0 && x >= -d));
}
