//! Every bad argument is rejected with the error variant that names it.

use mamba3::golden::{
    chunk_da_cs, chunk_da_cs_rev, chunk_segsum, cumulative_theta, forward_chunked,
    forward_recurrent, step, trap_scale, FinalStates, Mamba3Error, Mamba3Geometry, Mamba3Inputs,
    OutputMode, RandomOptions, RmsNormWeight, Rotation,
};

fn geometry() -> Mamba3Geometry {
    Mamba3Geometry {
        batch: 2,
        seq_len: 5,
        rank: 2,
        groups: 1,
        heads: 2,
        state_dim: 8,
        head_dim: 3,
        num_angles: 2,
    }
}

fn inputs(mode: OutputMode) -> Mamba3Inputs {
    let options = RandomOptions {
        mode,
        ..Default::default()
    };
    Mamba3Inputs::random(geometry(), options, 3).expect("valid")
}

/// The same error from validate, both forwards and step.
fn all_entry_points(inp: &Mamba3Inputs) -> Vec<Mamba3Error> {
    let mut state = FinalStates::zeros(&geometry()).expect("zeros");
    vec![
        inp.validate().expect_err("validate"),
        forward_recurrent(inp).expect_err("recurrent"),
        forward_chunked(inp, 2).expect_err("chunked"),
        step(inp, &mut state).expect_err("step"),
    ]
}

fn assert_all(inp: &Mamba3Inputs, expected: &Mamba3Error) {
    for err in all_entry_points(inp) {
        assert_eq!(&err, expected);
    }
}

#[test]
fn zero_dimensions() {
    let base = geometry();
    type Mutate = fn(&mut Mamba3Geometry);
    let cases: [(&str, Mutate); 7] = [
        ("batch", |g| g.batch = 0),
        ("seq_len", |g| g.seq_len = 0),
        ("rank", |g| g.rank = 0),
        ("groups", |g| g.groups = 0),
        ("heads", |g| g.heads = 0),
        ("state_dim", |g| g.state_dim = 0),
        ("head_dim", |g| g.head_dim = 0),
    ];
    for (name, mutate) in cases {
        let mut g = base;
        mutate(&mut g);
        assert_eq!(g.validate(), Err(Mamba3Error::ZeroDimension { name }));
        assert_eq!(
            Mamba3Inputs::random(g, RandomOptions::default(), 0).err(),
            Some(Mamba3Error::ZeroDimension { name })
        );
        let mut inp = inputs(OutputMode::Gated);
        inp.geometry = g;
        assert_all(&inp, &Mamba3Error::ZeroDimension { name });
    }
    let mut g = base;
    g.num_angles = 0;
    assert_eq!(g.validate(), Ok(()), "Na = 0 (no rotation) is allowed");
}

#[test]
fn geometry_rules() {
    let mut inp = inputs(OutputMode::Gated);
    inp.geometry.state_dim = 7;
    assert_all(&inp, &Mamba3Error::OddStateDim { state_dim: 7 });

    let mut inp = inputs(OutputMode::Gated);
    inp.geometry.num_angles = 5;
    assert_all(
        &inp,
        &Mamba3Error::TooManyAngles {
            num_angles: 5,
            max: 4,
        },
    );

    let mut inp = inputs(OutputMode::Gated);
    inp.geometry.heads = 3;
    inp.geometry.groups = 2;
    assert_all(
        &inp,
        &Mamba3Error::HeadsNotMultipleOfGroups {
            heads: 3,
            groups: 2,
        },
    );

    let mut g = geometry();
    g.batch = usize::MAX / 64;
    assert_eq!(g.validate(), Err(Mamba3Error::SizeOverflow { name: "q" }));
    let mut g = geometry();
    g.batch = usize::MAX / 2;
    g.seq_len = usize::MAX / 2;
    assert_eq!(g.validate(), Err(Mamba3Error::SizeOverflow { name: "q" }));
}

#[test]
fn zero_chunk_size() {
    let inp = inputs(OutputMode::Gated);
    assert_eq!(forward_chunked(&inp, 0), Err(Mamba3Error::ZeroChunkSize));
    assert_eq!(chunk_da_cs(&inp.adt, 5, 0), Err(Mamba3Error::ZeroChunkSize));
    assert_eq!(
        chunk_da_cs_rev(&inp.adt, 5, 0),
        Err(Mamba3Error::ZeroChunkSize)
    );
    assert_eq!(
        chunk_segsum(&inp.adt, 5, 0),
        Err(Mamba3Error::ZeroChunkSize)
    );
}

#[test]
fn buffer_shapes() {
    type Field = fn(&mut Mamba3Inputs) -> &mut Vec<f64>;
    let fields: [(&str, OutputMode, Field); 15] = [
        ("q", OutputMode::Gated, |i| &mut i.q),
        ("k", OutputMode::Gated, |i| &mut i.k),
        ("v", OutputMode::Gated, |i| &mut i.v),
        ("z", OutputMode::Gated, |i| i.z.as_mut().expect("z")),
        ("trap", OutputMode::Gated, |i| &mut i.trap),
        ("dt", OutputMode::Gated, |i| &mut i.dt),
        ("adt", OutputMode::Gated, |i| &mut i.adt),
        ("angle_logits", OutputMode::Gated, |i| &mut i.angle_logits),
        ("q_bias", OutputMode::Gated, |i| &mut i.q_bias),
        ("k_bias", OutputMode::Gated, |i| &mut i.k_bias),
        ("mimo_v", OutputMode::Gated, |i| &mut i.mimo_v),
        ("mimo_z", OutputMode::Gated, |i| {
            i.mimo_z.as_mut().expect("mimo_z")
        }),
        ("mimo_o", OutputMode::Gated, |i| {
            i.mimo_o.as_mut().expect("mimo_o")
        }),
        ("d", OutputMode::Gated, |i| i.d.as_mut().expect("d")),
        ("norm.weight", OutputMode::FusedNorm, |i| {
            &mut i.norm.as_mut().expect("norm").weight
        }),
    ];
    for (name, mode, field) in fields {
        let mut inp = inputs(mode);
        let buf = field(&mut inp);
        let expected = buf.len();
        buf.pop();
        for err in all_entry_points(&inp) {
            match err {
                Mamba3Error::ShapeMismatch {
                    name: n,
                    expected: e,
                    actual,
                    ..
                } => {
                    assert_eq!((n, e, actual), (name, expected, expected - 1), "{name}");
                }
                other => panic!("{name}: unexpected {other:?}"),
            }
        }
    }
    let mut inp = inputs(OutputMode::Gated);
    inp.q.push(0.0);
    let msg = inp.validate().expect_err("bad q").to_string();
    assert!(
        msg.contains("`q`") && msg.contains("(B,S,R,G,N)=(2,5,2,1,8)"),
        "{msg}"
    );
}

#[test]
fn option_rules() {
    let mut inp = inputs(OutputMode::Gated);
    inp.mimo_z = None;
    assert_all(&inp, &Mamba3Error::ZWithoutMimoZ);

    let mut inp = inputs(OutputMode::Gated);
    inp.z = None;
    assert_all(&inp, &Mamba3Error::MimoZWithoutZ);

    let mut inp = inputs(OutputMode::FusedNorm);
    inp.mimo_o = None;
    assert_all(&inp, &Mamba3Error::NormWithoutMimoO);

    for eps in [0.0, -1.0, f64::INFINITY] {
        let mut inp = inputs(OutputMode::FusedNorm);
        inp.norm = Some(RmsNormWeight {
            weight: vec![1.0; 6],
            eps,
        });
        assert_all(&inp, &Mamba3Error::InvalidNormEps { eps });
    }
    let mut inp = inputs(OutputMode::FusedNorm);
    inp.norm.as_mut().expect("norm").eps = f64::NAN;
    assert!(matches!(
        inp.validate(),
        Err(Mamba3Error::InvalidNormEps { eps }) if eps.is_nan()
    ));

    // Fused norm without z is accepted: the gate is 1.
    let options = RandomOptions {
        mode: OutputMode::FusedNorm,
        has_z: false,
        ..Default::default()
    };
    let inp = Mamba3Inputs::random(geometry(), options, 4).expect("valid");
    assert_eq!(inp.output_mode(), OutputMode::FusedNorm);
    assert!(forward_recurrent(&inp).is_ok());
}

#[test]
fn state_shapes() {
    let inp = inputs(OutputMode::Gated);
    type Field = fn(&mut FinalStates) -> &mut Vec<f64>;
    let fields: [(&str, Field); 4] = [
        ("state.theta", |s| &mut s.theta),
        ("state.ssm", |s| &mut s.ssm),
        ("state.k", |s| &mut s.k),
        ("state.v", |s| &mut s.v),
    ];
    for (name, field) in fields {
        let mut state = FinalStates::zeros(&geometry()).expect("zeros");
        field(&mut state).push(0.0);
        let before = state.clone();
        match step(&inp, &mut state) {
            Err(Mamba3Error::ShapeMismatch { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name}: unexpected {other:?}"),
        }
        assert_eq!(state, before, "a rejected step leaves the state untouched");
    }
}

#[test]
fn token_ranges() {
    let inp = inputs(OutputMode::Gated);
    for (start, end) in [(3, 3), (4, 2), (0, 6)] {
        assert_eq!(
            inp.token_slice(start, end),
            Err(Mamba3Error::InvalidTokenRange {
                start,
                end,
                seq_len: 5
            })
        );
    }
    assert_eq!(inp.token_slice(1, 4).expect("slice").geometry.seq_len, 3);
}

#[test]
fn helper_arguments() {
    let adt = vec![-0.1; 10];
    assert_eq!(
        chunk_da_cs(&adt, 3, 2),
        Err(Mamba3Error::RowLength {
            name: "adt",
            len: 10,
            seq_len: 3
        })
    );
    assert_eq!(
        chunk_da_cs_rev(&adt, 0, 2),
        Err(Mamba3Error::RowLength {
            name: "adt",
            len: 10,
            seq_len: 0
        })
    );
    assert_eq!(
        trap_scale(&adt, &adt[..9], 5),
        Err(Mamba3Error::ShapeMismatch {
            name: "trap",
            shape: "same as dt".to_string(),
            expected: 10,
            actual: 9
        })
    );
    let g = geometry();
    assert!(matches!(
        cumulative_theta(&g, &[0.0; 3], &[0.0; 20]),
        Err(Mamba3Error::ShapeMismatch {
            name: "angle_logits",
            ..
        })
    ));
    let mut v = vec![1.0; 5];
    assert_eq!(
        Rotation::HalfSplit.rotate(&mut v, &[0.1]),
        Err(Mamba3Error::OddStateDim { state_dim: 5 })
    );
    let mut v = vec![1.0; 4];
    assert_eq!(
        Rotation::Pairwise.rotate(&mut v, &[0.1, 0.2, 0.3]),
        Err(Mamba3Error::TooManyAngles {
            num_angles: 3,
            max: 2
        })
    );
}
