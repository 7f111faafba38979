//! The forward's validation on the CPU: every rule rejects with an error naming the argument,
//! its value and the rule, before anything touches a GPU.

mod common;

use mamba3::backward;
use mamba3::forward::{
    blocks_per_sm, dispatch_paths, dispatch_paths_with_workspace, kernel_chunk_size, kernel_for,
    segment_state_kernel_for, sequence_segments, tensor_core_fits, validate, validate_config,
    validate_initial, workspace_len, Dtype, ForwardConfig, ForwardLens, StateLens, MAX_SEGMENTS,
    MIN_SEGMENT_CHUNKS,
};
use mamba3::golden::{OutputMode, Rotation};
use mamba3::Error;

use common::{MODES, UPSTREAM_GRID};

/// The opt-in shared memory per block of an H100/H200.
const HOPPER_SHARED_MEMORY: usize = 232_448;

fn config() -> ForwardConfig {
    ForwardConfig {
        batch: 2,
        seq_len: 100,
        rank: 4,
        groups: 2,
        heads: 4,
        state_dim: 16,
        head_dim: 8,
        num_angles: 4,
        chunk_size: 16,
        dtype: Dtype::Bf16,
        rotation: Rotation::HalfSplit,
        mode: OutputMode::FusedNorm,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    }
}

fn lens(c: &ForwardConfig) -> ForwardLens {
    c.expected_lens(true).expect("sizes fit")
}

/// Asserts that `result` is an `InvalidArgument` for `arg` whose message contains `needle`.
fn expect_arg(result: mamba3::Result<()>, arg: &str, needle: &str) {
    match result {
        Err(Error::InvalidArgument {
            arg: got,
            value,
            rule,
        }) => {
            let msg = format!("{got} = {value}: {rule}");
            eprintln!("rejected as expected: {msg}");
            assert_eq!(got, arg, "wrong argument named: {msg}");
            assert!(msg.contains(needle), "message `{msg}` lacks `{needle}`");
        }
        other => panic!("expected InvalidArgument for `{arg}`, got {other:?}"),
    }
}

#[test]
fn valid_config_and_lengths_pass() {
    for mode in MODES {
        for (has_z, has_d) in [(true, true), (false, false), (true, false)] {
            for with_states in [false, true] {
                let c = ForwardConfig {
                    mode,
                    has_z,
                    has_d,
                    ..config()
                };
                validate(&c, &c.expected_lens(with_states).unwrap()).unwrap();
            }
        }
    }
    // Fused norm without a weight (weight 1) is valid.
    let c = config();
    validate(
        &c,
        &ForwardLens {
            norm_weight: None,
            ..lens(&c)
        },
    )
    .unwrap();
}

#[test]
fn config_rules_name_the_argument() {
    let c = config();
    expect_arg(
        validate_config(&ForwardConfig { batch: 0, ..c }),
        "batch",
        "at least 1",
    );
    expect_arg(
        validate_config(&ForwardConfig { seq_len: 0, ..c }),
        "seq_len",
        "at least 1",
    );
    expect_arg(
        validate_config(&ForwardConfig { chunk_size: 0, ..c }),
        "chunk_size",
        "at least 1",
    );
    expect_arg(
        validate_config(&ForwardConfig { rank: 3, ..c }),
        "rank",
        "1, 2, 4 or 8",
    );
    expect_arg(
        validate_config(&ForwardConfig { rank: 16, ..c }),
        "rank",
        "1, 2, 4 or 8",
    );
    expect_arg(
        validate_config(&ForwardConfig { state_dim: 15, ..c }),
        "state_dim",
        "even",
    );
    expect_arg(
        validate_config(&ForwardConfig { num_angles: 9, ..c }),
        "num_angles",
        "state_dim/2 = 8",
    );
    expect_arg(
        validate_config(&ForwardConfig { groups: 3, ..c }),
        "groups",
        "divide heads = 4",
    );
    expect_arg(
        validate_config(&ForwardConfig { batch: 70_000, ..c }),
        "batch",
        "65535",
    );
    expect_arg(
        validate_config(&ForwardConfig { norm_eps: 0.0, ..c }),
        "norm_eps",
        "> 0",
    );
    expect_arg(
        validate_config(&ForwardConfig {
            norm_eps: f32::NAN,
            ..c
        }),
        "norm_eps",
        "finite",
    );
    expect_arg(
        validate_config(&ForwardConfig {
            seq_len: 1 << 33,
            ..c
        }),
        "seq_len",
        "2^32",
    );
    // A non-fused mode ignores the epsilon.
    validate_config(&ForwardConfig {
        norm_eps: 0.0,
        mode: OutputMode::Gated,
        ..c
    })
    .unwrap();
}

#[test]
fn buffer_rules_name_the_argument_and_shape() {
    let c = config();
    let ok = lens(&c);
    expect_arg(
        validate(&c, &ForwardLens { q: ok.q - 1, ..ok }),
        "q",
        "(B,S,R,G,N)=(2,100,4,2,16)",
    );
    expect_arg(
        validate(&c, &ForwardLens { k: ok.k + 1, ..ok }),
        "k",
        "25600 elements",
    );
    expect_arg(
        validate(&c, &ForwardLens { v: 1, ..ok }),
        "v",
        "(B,S,H,P)=(2,100,4,8)",
    );
    expect_arg(
        validate(&c, &ForwardLens { z: None, ..ok }),
        "z",
        "has_z is true",
    );
    expect_arg(
        validate(&c, &ForwardLens { z: Some(3), ..ok }),
        "z",
        "(B,S,H,P)",
    );
    expect_arg(
        validate(&c, &ForwardLens { trap: 7, ..ok }),
        "trap",
        "(B,H,S)=(2,4,100)",
    );
    expect_arg(validate(&c, &ForwardLens { dt: 7, ..ok }), "dt", "(B,H,S)");
    expect_arg(
        validate(&c, &ForwardLens { adt: 7, ..ok }),
        "adt",
        "(B,H,S)",
    );
    expect_arg(
        validate(&c, &ForwardLens { angles: 7, ..ok }),
        "angles",
        "(B,S,H,Na)=(2,100,4,4)",
    );
    expect_arg(
        validate(&c, &ForwardLens { q_bias: 7, ..ok }),
        "q_bias",
        "(H,R,N)=(4,4,16)",
    );
    expect_arg(
        validate(&c, &ForwardLens { k_bias: 7, ..ok }),
        "k_bias",
        "(H,R,N)",
    );
    expect_arg(
        validate(&c, &ForwardLens { mimo_v: 7, ..ok }),
        "mimo_v",
        "(H,R,P)=(4,4,8)",
    );
    expect_arg(
        validate(&c, &ForwardLens { mimo_z: None, ..ok }),
        "mimo_z",
        "has_z is true",
    );
    expect_arg(
        validate(&c, &ForwardLens { mimo_o: None, ..ok }),
        "mimo_o",
        "fused-norm",
    );
    expect_arg(
        validate(&c, &ForwardLens { d: None, ..ok }),
        "d",
        "has_d is true",
    );
    expect_arg(
        validate(&c, &ForwardLens { d: Some(5), ..ok }),
        "d",
        "(H)=(4)",
    );
    expect_arg(
        validate(
            &c,
            &ForwardLens {
                norm_weight: Some(5),
                ..ok
            },
        ),
        "norm_weight",
        "(H,P)=(4,8)",
    );
    expect_arg(
        validate(&c, &ForwardLens { out: 5, ..ok }),
        "out",
        "(B,S,H,P)=(2,100,4,8)",
    );
    let st = ok.states.unwrap();
    expect_arg(
        validate(
            &c,
            &ForwardLens {
                states: Some(mamba3::forward::StateLens { theta: 1, ..st }),
                ..ok
            },
        ),
        "states.theta",
        "(B,H,Na)=(2,4,4)",
    );
    expect_arg(
        validate(
            &c,
            &ForwardLens {
                states: Some(mamba3::forward::StateLens { ssm: 1, ..st }),
                ..ok
            },
        ),
        "states.ssm",
        "(B,H,P,N)=(2,4,8,16)",
    );
    expect_arg(
        validate(
            &c,
            &ForwardLens {
                states: Some(mamba3::forward::StateLens { k: 1, ..st }),
                ..ok
            },
        ),
        "states.k",
        "(B,R,H,N)=(2,4,4,16)",
    );
    expect_arg(
        validate(
            &c,
            &ForwardLens {
                states: Some(mamba3::forward::StateLens { v: 1, ..st }),
                ..ok
            },
        ),
        "states.v",
        "(B,H,P)=(2,4,8)",
    );

    // Options that the config does not use must be absent.
    let gated_no_z = ForwardConfig {
        mode: OutputMode::Gated,
        has_z: false,
        has_d: false,
        ..c
    };
    let ok = lens(&gated_no_z);
    expect_arg(
        validate(
            &gated_no_z,
            &ForwardLens {
                z: Some(ok.v),
                ..ok
            },
        ),
        "z",
        "has_z is false",
    );
    expect_arg(
        validate(
            &gated_no_z,
            &ForwardLens {
                mimo_z: Some(ok.mimo_v),
                ..ok
            },
        ),
        "mimo_z",
        "has_z is false",
    );
    expect_arg(
        validate(&gated_no_z, &ForwardLens { d: Some(4), ..ok }),
        "d",
        "has_d is false",
    );
    expect_arg(
        validate(
            &gated_no_z,
            &ForwardLens {
                norm_weight: Some(32),
                ..ok
            },
        ),
        "norm_weight",
        "outside fused-norm",
    );
    let pre = ForwardConfig {
        mode: OutputMode::Prereduce,
        ..c
    };
    let ok = lens(&pre);
    expect_arg(
        validate(
            &pre,
            &ForwardLens {
                mimo_o: Some(ok.mimo_v),
                ..ok
            },
        ),
        "mimo_o",
        "prereduce",
    );
    expect_arg(
        validate(
            &pre,
            &ForwardLens {
                out: ok.out / 4,
                ..ok
            },
        ),
        "out",
        "(B,S,R,H,P)=(2,100,4,4,8)",
    );
}

#[test]
fn dispatch_names_one_kernel_per_dtype_and_rank() {
    let c = config();
    assert_eq!(
        dispatch_paths(&c, HOPPER_SHARED_MEMORY),
        vec!["forward_fma_bf16_r4"]
    );
    let f = ForwardConfig {
        dtype: Dtype::F32,
        rank: 8,
        ..c
    };
    assert_eq!(
        dispatch_paths(&f, HOPPER_SHARED_MEMORY),
        vec!["forward_fma_f32_r8"]
    );
    assert!(dispatch_paths(&ForwardConfig { rank: 3, ..c }, HOPPER_SHARED_MEMORY).is_empty());
    // Every dispatched symbol is an entry point of the PTX.
    let entries = mamba3::ptx_entry_points(mamba3::PTX);
    for dtype in [Dtype::F32, Dtype::Bf16] {
        for rank in [1, 2, 4, 8] {
            for sym in dispatch_paths(&ForwardConfig { dtype, rank, ..c }, HOPPER_SHARED_MEMORY) {
                assert!(entries.contains(&sym), "{sym} is not in the PTX");
            }
        }
    }
}

/// The split covers the sequence with K non-empty segments of whole chunks (the last possibly
/// shorter), K·B·H blocks within one wave of one block per SM, and only when B·H leaves SMs idle;
/// the workspace and the dispatched kernels follow it.
#[test]
fn sequence_split_covers_the_sequence_within_one_wave() {
    let base = benchmark_config();
    // The tensor-core kernel: two blocks per SM, so four segments of 64 rows fill 132 SMs.
    assert_eq!(blocks_per_sm(&base), 2);
    assert_eq!(sequence_segments(&base, 132), 4);
    assert_eq!(
        dispatch_paths_with_workspace(&base, 132, HOPPER_SHARED_MEMORY),
        vec![
            "segment_state_mma_bf16_r4_n128_p64_na32_c16",
            "segment_combine_f32",
            "forward_mma_bf16_r4_n128_p64_na32_c16"
        ]
    );
    // f32 at the same geometry: the three-pass TF32 tensor-core kernels, also two blocks per SM
    // (no short-call instantiation: a call shorter than a chunk runs the full one).
    let base_f32 = ForwardConfig {
        dtype: Dtype::F32,
        ..base
    };
    assert_eq!(blocks_per_sm(&base_f32), 2);
    assert_eq!(sequence_segments(&base_f32, 132), 4);
    assert_eq!(
        dispatch_paths_with_workspace(&base_f32, 132, HOPPER_SHARED_MEMORY),
        vec![
            "segment_state_mma_f32_r4_n128_p64_na32_c16",
            "segment_combine_f32",
            "forward_mma_f32_r4_n128_p64_na32_c16"
        ]
    );
    let short_f32 = ForwardConfig {
        seq_len: 8,
        ..base_f32
    };
    assert_eq!(
        dispatch_paths_with_workspace(&short_f32, 132, HOPPER_SHARED_MEMORY),
        vec!["forward_mma_f32_r4_n128_p64_na32_c16"]
    );
    // Another chunk size in f32: the rank's general kernels, one block per SM.
    let general_f32 = ForwardConfig {
        chunk_size: 32,
        ..base_f32
    };
    assert_eq!(blocks_per_sm(&general_f32), 1);
    // Shorter than one chunk: never split, the tensor-core forward's short-call instantiation;
    // one chunk exactly: the full-chunk kernel.
    for (seq_len, kernel) in [
        (1, "forward_mma_short_bf16_r4_n128_p64_na32_c16"),
        (15, "forward_mma_short_bf16_r4_n128_p64_na32_c16"),
        (16, "forward_mma_bf16_r4_n128_p64_na32_c16"),
    ] {
        let short = ForwardConfig { seq_len, ..base };
        assert_eq!(sequence_segments(&short, 132), 1);
        assert_eq!(
            dispatch_paths_with_workspace(&short, 132, HOPPER_SHARED_MEMORY),
            vec![kernel]
        );
    }
    // Another chunk size that fits: no fixed-geometry instantiation, the rank's general kernels.
    let general = ForwardConfig {
        chunk_size: 8,
        ..base
    };
    assert_eq!(
        dispatch_paths_with_workspace(&general, 132, HOPPER_SHARED_MEMORY),
        vec![
            "segment_state_bf16_r4",
            "segment_combine_f32",
            "forward_fma_bf16_r4"
        ]
    );
    // C = 32 needs ≈ 300 KB in the general kernel: it runs as C = 16, on the tensor-core
    // kernels where they fit (Hopper), on the general ones where they do not (sm_86/sm_89).
    let wide = ForwardConfig {
        chunk_size: 32,
        ..base
    };
    assert_eq!(
        dispatch_paths_with_workspace(&wide, 132, HOPPER_SHARED_MEMORY),
        vec![
            "segment_state_mma_bf16_r4_n128_p64_na32_c16",
            "segment_combine_f32",
            "forward_mma_bf16_r4_n128_p64_na32_c16"
        ]
    );
    assert_eq!(
        dispatch_paths(&wide, 101_376),
        vec!["forward_fma_bf16_r4"],
        "{} bytes at C = {}",
        ForwardConfig {
            chunk_size: kernel_chunk_size(&wide, 101_376),
            ..wide
        }
        .shared_memory_bytes(),
        kernel_chunk_size(&wide, 101_376)
    );
    assert_eq!(workspace_len(&base, 132), 3 * 64 * (64 * 128 + 2 * 32 + 1));
    for sms in [1usize, 16, 66, 108, 132, 1000] {
        for (batch, heads) in [
            (1usize, 1usize),
            (1, 2),
            (1, 32),
            (1, 64),
            (2, 16),
            (8, 64),
            (3, 5),
        ] {
            for (seq_len, chunk_size) in [
                (1usize, 16usize),
                (5, 1),
                (33, 16),
                (100, 7),
                (2048, 16),
                (32768, 16),
            ] {
                let c = ForwardConfig {
                    batch,
                    heads,
                    groups: 1,
                    seq_len,
                    chunk_size,
                    ..base
                };
                let rows = batch * heads;
                let chunks = seq_len.div_ceil(chunk_size);
                let k = sequence_segments(&c, sms);
                if k == 1 {
                    assert_eq!(workspace_len(&c, sms), 0);
                    assert_eq!(
                        dispatch_paths_with_workspace(&c, sms, HOPPER_SHARED_MEMORY),
                        dispatch_paths(&c, HOPPER_SHARED_MEMORY)
                    );
                    continue;
                }
                assert!(
                    k <= MAX_SEGMENTS && k * rows <= blocks_per_sm(&c) * sms,
                    "{c:?} on {sms} SMs: K = {k}"
                );
                // The kernel's segments: whole chunks, `chunks.div_ceil(k)` each, none empty.
                let per = chunks.div_ceil(k);
                assert!(per >= MIN_SEGMENT_CHUNKS, "{c:?}: K = {k}");
                assert!(
                    (k - 1) * per < chunks,
                    "{c:?}: K = {k} leaves a segment empty"
                );
                assert_eq!(
                    dispatch_paths_with_workspace(&c, sms, HOPPER_SHARED_MEMORY).len(),
                    3
                );
                assert_eq!(
                    workspace_len(&c, sms),
                    (k - 1) * rows * (c.head_dim * c.state_dim + 2 * c.num_angles + 1)
                );
            }
        }
    }
}

#[test]
fn shared_memory_of_upstream_geometries_fits_hopper() {
    // Upstream's 11 geometries (N, P, R, C) at Na = N/4: all within 227 KB.
    for (n, p, r, ch) in UPSTREAM_GRID {
        let c = ForwardConfig {
            state_dim: n,
            head_dim: p,
            rank: r,
            chunk_size: ch,
            num_angles: n / 4,
            ..config()
        };
        let bytes = c.shared_memory_bytes();
        eprintln!("N={n} P={p} R={r} C={ch}: {bytes} bytes of shared memory");
        assert!(bytes <= 227 * 1024, "{bytes} bytes");
    }
    // Saturates instead of overflowing.
    let huge = ForwardConfig {
        state_dim: usize::MAX - 1,
        chunk_size: usize::MAX,
        ..config()
    };
    assert_eq!(huge.shared_memory_bytes(), u64::MAX);
}

/// A chunk whose tiles exceed the opt-in limit runs as its largest divisor that fits: checked
/// against the definition (divides C, fits, no larger divisor fits) over chunk sizes, ranks and
/// the opt-in limits of the GPUs we target, and on the geometries that first exposed it.
#[test]
fn kernel_chunk_is_the_largest_divisor_that_fits() {
    const OPT_IN_LIMITS: [usize; 3] = [232_448, 166_912, 101_376];
    for max in OPT_IN_LIMITS {
        for (n, p, r) in [
            (26, 25, 8),
            (54, 27, 8),
            (128, 64, 4),
            (256, 128, 4),
            (62, 32, 2),
        ] {
            for chunk in [1, 7, 12, 16, 23, 24, 32, 48, 64, 96, 128, 1000] {
                let c = ForwardConfig {
                    state_dim: n,
                    head_dim: p,
                    rank: r,
                    num_angles: n / 4,
                    chunk_size: chunk,
                    seq_len: 2048,
                    ..config()
                };
                let run = kernel_chunk_size(&c, max);
                let bytes = |d: usize| ForwardConfig { chunk_size: d, ..c }.shared_memory_bytes();
                let fits = |d: usize| bytes(d) <= max as u64;
                assert!(chunk % run == 0, "{run} does not divide C={chunk}");
                if fits(chunk) {
                    assert_eq!(run, chunk, "C={chunk} fits in {max} bytes");
                    continue;
                }
                if !fits(1) {
                    assert_eq!(run, chunk, "nothing fits: the launch reports C itself");
                    continue;
                }
                assert!(
                    fits(run),
                    "N={n} P={p} R={r} C={chunk}: {run} does not fit {max}"
                );
                for d in run + 1..=chunk {
                    assert!(
                        chunk % d != 0 || !fits(d),
                        "N={n} P={p} R={r} C={chunk}: divisor {d} > {run} fits {max}"
                    );
                }
            }
        }
    }
    // The random GPU geometry that found the limit: C = 23 (prime) at R = 8 runs one token a
    // chunk; C·R = 256 at the benchmark geometry runs C = 16 on Hopper.
    let prime = ForwardConfig {
        rank: 8,
        state_dim: 26,
        head_dim: 25,
        num_angles: 1,
        chunk_size: 23,
        ..config()
    };
    assert_eq!(kernel_chunk_size(&prime, 232_448), 1);
    let wide = ForwardConfig {
        chunk_size: 64,
        ..benchmark_config()
    };
    assert_eq!(kernel_chunk_size(&wide, 232_448), 16);
}

/// The tensor-core forward's launch bounds and shared memory agree with the two blocks per SM
/// that `blocks_per_sm` (and so the sequence split) counts on: 2 × (109 KB + the driver's 1 KB
/// per block) within an H100/H200 SM's 228 KB, and within the 227 KB opt-in limit of one block.
#[test]
fn tensor_core_forward_fits_two_blocks_per_hopper_sm() {
    use mamba3_abi::{forward_mma_smem, forward_tf32_smem, FORWARD_MMA_THREADS, LAUNCH_BOUNDS};
    const SM_BYTES: u32 = 228 * 1024;
    const DRIVER_BYTES_PER_BLOCK: u32 = 1024;
    const { assert!(2 * (forward_mma_smem::BYTES + DRIVER_BYTES_PER_BLOCK) <= SM_BYTES) };
    const { assert!(2 * (forward_tf32_smem::BYTES + DRIVER_BYTES_PER_BLOCK) <= SM_BYTES) };
    // Every kernel launched with the tensor-core forward's block: the forward's forms, their
    // `wgmma` twins, their segment-state passes and the backward's checkpoint sweeps.
    const FAMILIES: [&str; 6] = [
        "forward_mma_",
        "forward_wg_",
        "forward_ckpt_mma_",
        "segment_state_mma_",
        "segment_state_wg_",
        "backward_ckpt_",
    ];
    let entries: Vec<_> = mamba3::Kernel::ALL
        .iter()
        .map(|k| k.symbol())
        .filter(|s| FAMILIES.iter().any(|family| s.starts_with(family)))
        .collect();
    assert!(entries.len() >= 9, "{entries:?}");
    for entry in entries {
        let bound = LAUNCH_BOUNDS
            .iter()
            .find(|b| entry.starts_with(b.prefix))
            .expect("a launch bound");
        assert_eq!(bound.max_threads, FORWARD_MMA_THREADS, "{entry}");
        assert_eq!(bound.min_blocks_per_sm, 2, "{entry}");
    }
    assert_eq!(blocks_per_sm(&benchmark_config()), 2);
    let f32_config = ForwardConfig {
        dtype: Dtype::F32,
        ..benchmark_config()
    };
    assert_eq!(blocks_per_sm(&f32_config), 2);
}

/// The benchmark geometry (H=64, B=1, S=2048, R=4, N=128, P=64, Na=32, C=16, G=1), bf16.
fn benchmark_config() -> ForwardConfig {
    ForwardConfig {
        batch: 1,
        heads: 64,
        seq_len: 2048,
        chunk_size: 16,
        state_dim: 128,
        head_dim: 64,
        num_angles: 32,
        groups: 1,
        ..config()
    }
}

/// The initial states of `forward_from_states` are checked against the final-state layouts, each
/// error naming `initial.<tensor>` and its shape; the config is checked first.
#[test]
fn initial_state_lengths_name_the_argument() {
    let c = config();
    let want: StateLens = lens(&c).states.expect("states");
    assert!(validate_initial(&c, &want).is_ok());
    let cases: [(StateLens, &str, &str); 4] = [
        (
            StateLens {
                theta: want.theta + 1,
                ..want
            },
            "initial.theta",
            "(B,H,Na)",
        ),
        (
            StateLens {
                ssm: want.ssm - 1,
                ..want
            },
            "initial.ssm",
            "(B,H,P,N)",
        ),
        (StateLens { k: 0, ..want }, "initial.k", "(B,R,H,N)"),
        (
            StateLens {
                v: 2 * want.v,
                ..want
            },
            "initial.v",
            "(B,H,P)",
        ),
    ];
    for (got, arg, shape) in cases {
        expect_arg(validate_initial(&c, &got), arg, shape);
    }
    let bad = ForwardConfig { rank: 3, ..c };
    expect_arg(validate_initial(&bad, &want), "rank", "1, 2, 4 or 8");
}

#[test]
fn queries_do_not_panic_on_invalid_configs() {
    // Validation rejects every config below; the planning and dispatch queries a caller may run
    // before validating must still answer (no division by zero, no overflow panic).
    let c = config();
    let bad = [
        ForwardConfig { batch: 0, ..c },
        ForwardConfig { seq_len: 0, ..c },
        ForwardConfig { rank: 0, ..c },
        ForwardConfig { rank: 3, ..c },
        ForwardConfig { groups: 0, ..c },
        ForwardConfig { heads: 0, ..c },
        ForwardConfig { heads: 3, ..c },
        ForwardConfig { state_dim: 0, ..c },
        ForwardConfig { head_dim: 0, ..c },
        ForwardConfig { chunk_size: 0, ..c },
        ForwardConfig {
            num_angles: 1000,
            ..c
        },
        ForwardConfig {
            seq_len: usize::MAX / 2,
            ..c
        },
        ForwardConfig {
            state_dim: usize::MAX / 4,
            head_dim: usize::MAX / 4,
            ..c
        },
    ];
    for b in bad {
        assert!(validate_config(&b).is_err(), "{b:?} should be rejected");
        let _ = (
            b.output_width(),
            b.shared_memory_bytes(),
            b.expected_lens(true),
        );
        let _ = (
            kernel_for(&b),
            segment_state_kernel_for(&b),
            dispatch_paths(&b, HOPPER_SHARED_MEMORY),
        );
        let _ = (tensor_core_fits(&b, 232_448), blocks_per_sm(&b));
        for sm in [0, 1, 132] {
            let _ = (sequence_segments(&b, sm), workspace_len(&b, sm));
            let _ = dispatch_paths_with_workspace(&b, sm, HOPPER_SHARED_MEMORY);
        }
        let _ = (
            backward::chunked_tokens(&b),
            backward::chunked_shared_memory_bytes(&b),
            backward::backward_path(&b, 232_448),
            backward::workspace_len(&b),
            backward::backward_shared_memory_bytes(&b),
            backward::dispatch_paths(&b, 232_448),
        );
    }
}
