//! The backward's validation rules, without a GPU: each broken rule is reported with the
//! argument's name before anything is launched.

mod common;

use mamba3::backward::{
    dispatch_paths, expected_gradient_lens, validate_backward, workspace_len, workspace_len_for,
    BackwardPath, GradientLens,
};
use mamba3::forward::{Dtype, ForwardConfig, ForwardLens};
use mamba3::{Error, OutputMode, Rotation};

use common::MODES;

/// The H200's opt-in shared memory per block (bytes).
const H200_SHARED_MEMORY: usize = 232_448;

fn config(mode: OutputMode) -> ForwardConfig {
    ForwardConfig {
        batch: 2,
        seq_len: 37,
        rank: 4,
        groups: 2,
        heads: 4,
        state_dim: 16,
        head_dim: 8,
        num_angles: 4,
        chunk_size: 8,
        dtype: Dtype::Bf16,
        rotation: Rotation::HalfSplit,
        mode,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    }
}

/// Lengths of a valid call for `c` (norm weight given in fused-norm mode).
fn valid(c: &ForwardConfig) -> (ForwardLens, usize, GradientLens, usize) {
    let lens = c.expected_lens(false).unwrap();
    let grads = expected_gradient_lens(c, lens.norm_weight.is_some()).unwrap();
    (lens, lens.out, grads, workspace_len(c).unwrap())
}

fn arg_of(r: mamba3::Result<()>) -> &'static str {
    match r {
        Err(Error::InvalidArgument { arg, .. }) => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn valid_calls_pass_in_every_mode() {
    for mode in MODES {
        let c = config(mode);
        let (lens, dout, grads, ws) = valid(&c);
        validate_backward(&c, &lens, dout, &grads, ws).unwrap();
        // A larger workspace is fine.
        validate_backward(&c, &lens, dout, &grads, ws + 7).unwrap();
        assert_eq!(
            dispatch_paths(&c, H200_SHARED_MEMORY),
            vec!["backward_chunked_bf16", "backward_reduce_bf16"]
        );
        // A device without room for the chunked layout runs the token-serial kernel.
        assert_eq!(
            dispatch_paths(&c, 16 * 1024),
            vec!["backward_head_bf16", "backward_reduce_bf16"]
        );
    }
}

#[test]
fn each_broken_rule_names_its_argument() {
    let c = config(OutputMode::Gated);
    let (lens, dout, grads, ws) = valid(&c);
    assert_eq!(
        arg_of(validate_backward(&c, &lens, dout + 1, &grads, ws)),
        "dout"
    );
    assert_eq!(
        arg_of(validate_backward(&c, &lens, dout, &grads, ws - 1)),
        "workspace"
    );
    let bad_k = ForwardLens { k: 1, ..lens };
    assert_eq!(arg_of(validate_backward(&c, &bad_k, dout, &grads, ws)), "k");
    for (broken, name) in [
        (
            GradientLens {
                q: grads.q - 1,
                ..grads
            },
            "grads.q",
        ),
        (GradientLens { z: None, ..grads }, "grads.z"),
        (
            GradientLens {
                mimo_o: None,
                ..grads
            },
            "grads.mimo_o",
        ),
        (
            GradientLens {
                norm_weight: Some(c.heads * c.head_dim),
                ..grads
            },
            "grads.norm_weight",
        ),
        (
            GradientLens {
                angles: grads.angles + 1,
                ..grads
            },
            "grads.angles",
        ),
    ] {
        assert_eq!(
            arg_of(validate_backward(&c, &lens, dout, &broken, ws)),
            name
        );
    }
    // Prereduce: no mimo_o, so no ∂mimo_o either; dout has the (B,S,R,H,P) layout.
    let p = config(OutputMode::Prereduce);
    let (plens, pdout, pgrads, pws) = valid(&p);
    assert_eq!(pdout, p.batch * p.seq_len * p.rank * p.heads * p.head_dim);
    let extra = GradientLens {
        mimo_o: Some(p.heads * p.rank * p.head_dim),
        ..pgrads
    };
    assert_eq!(
        arg_of(validate_backward(&p, &plens, pdout, &extra, pws)),
        "grads.mimo_o"
    );
    // An invalid config is rejected before the buffers are looked at.
    let bad = ForwardConfig { rank: 3, ..c };
    assert_eq!(
        arg_of(validate_backward(&bad, &lens, dout, &grads, ws)),
        "rank"
    );
    assert!(dispatch_paths(&bad, H200_SHARED_MEMORY).is_empty());
}

#[test]
fn workspace_grows_with_fewer_longer_segments_as_documented() {
    // (⌈S/L⌉ + min(L,S))·P·N per (b, h) for the states, plus the L-independent parts.
    let c = config(OutputMode::Gated);
    let at = |l: usize| workspace_len(&ForwardConfig { chunk_size: l, ..c }).unwrap();
    let states = |l: usize| {
        c.batch * c.heads * (c.seq_len.div_ceil(l) + l.min(c.seq_len)) * c.head_dim * c.state_dim
    };
    for (l1, l2) in [(1, 6), (6, 37), (8, 100)] {
        assert_eq!(
            at(l1) as i64 - at(l2) as i64,
            states(l1) as i64 - states(l2) as i64
        );
    }
}

#[test]
fn chunked_backward_takes_the_geometries_it_supports() {
    use mamba3::backward::{backward_path, chunked_tokens, BackwardPath};
    let model = ForwardConfig {
        state_dim: 128,
        head_dim: 64,
        num_angles: 32,
        chunk_size: 16,
        ..config(OutputMode::Gated)
    };
    // 64 rows: 16 tokens of rank 4 at the model geometry, within the H200's shared memory.
    assert_eq!(chunked_tokens(&model), Some(16));
    // In bf16 the model geometry runs the tensor-core backward (its checkpoint sweep first), in
    // f32 the chunked instantiation compiled for it; any other rank or dimension the general
    // chunked kernel; a device without room for the layouts the token-serial kernel.
    assert_eq!(
        backward_path(&model, H200_SHARED_MEMORY),
        BackwardPath::TensorCore
    );
    assert_eq!(backward_path(&model, 101_376), BackwardPath::TokenSerial);
    assert_eq!(
        dispatch_paths(&model, H200_SHARED_MEMORY),
        vec![
            "backward_ckpt_mma_bf16_r4_n128_p64_na32_c16",
            "backward_mma_bf16_r4_n128_p64_na32_c16",
            "backward_reduce_bf16"
        ]
    );
    let model_f32 = ForwardConfig {
        dtype: Dtype::F32,
        ..model
    };
    assert_eq!(
        backward_path(&model_f32, H200_SHARED_MEMORY),
        BackwardPath::Chunked
    );
    assert_eq!(
        dispatch_paths(&model_f32, H200_SHARED_MEMORY),
        vec![
            "backward_chunked_fixed_f32_r4_n128_p64_na32",
            "backward_reduce_f32"
        ]
    );
    for other in [
        ForwardConfig { rank: 2, ..model },
        ForwardConfig {
            num_angles: 16,
            ..model
        },
    ] {
        assert_eq!(
            dispatch_paths(&other, H200_SHARED_MEMORY),
            vec!["backward_chunked_bf16", "backward_reduce_bf16"]
        );
    }
    assert_eq!(
        dispatch_paths(&model, 101_376),
        vec!["backward_head_bf16", "backward_reduce_bf16"]
    );
    // Larger states shrink the chunk to fit.
    let wide = ForwardConfig {
        head_dim: 128,
        ..model
    };
    assert_eq!(chunked_tokens(&wide), Some(4));
    // Other ranks: 64 rows unless the token-pair tables (C² words each) push the layout over.
    for (r, tokens) in [(1, 32), (2, 32), (8, 8)] {
        let c = ForwardConfig { rank: r, ..model };
        assert_eq!(chunked_tokens(&c), Some(tokens), "rank {r}");
    }
    // Outside the kernel: P above 256.
    let tall = ForwardConfig {
        head_dim: 300,
        ..model
    };
    assert_eq!(chunked_tokens(&tall), None);
    assert_eq!(
        backward_path(&tall, H200_SHARED_MEMORY),
        BackwardPath::TokenSerial
    );
    // The workspace holds the chunked kernel's carried states (one per chunk) and per-head q/k
    // gradients as well as the token-serial kernel's checkpoints.
    for c in [model, wide] {
        let chunk = chunked_tokens(&c).unwrap();
        let (bh, s) = (c.batch * c.heads, c.seq_len);
        let states = bh * s.div_ceil(chunk) * c.head_dim * c.state_dim;
        let qk = 2 * bh * s * c.rank * c.state_dim;
        let serial =
            bh * (s.div_ceil(c.chunk_size) + c.chunk_size.min(s)) * c.head_dim * c.state_dim;
        let ws = workspace_len(&c).unwrap();
        assert!(ws >= states + qk && ws >= serial + qk, "{c:?}: {ws}");
    }
}

#[test]
fn tensor_core_backward_splits_the_sequence_when_rows_leave_sms_idle() {
    use mamba3::backward::{
        backward_split, dispatch_paths_on, BackwardSplit, SPLIT_MIN_CHUNKS, SPLIT_SLOTS,
    };
    const H200_SMS: usize = 132;
    let model = |heads, batch, seq_len| benchmark_geometry(heads, batch, seq_len, 16);
    // n = ⌊132 / (B·H)⌋ blocks per row: K = n + 1 segments, the first K − 1 of m chunks with
    // m + max(last, m/2) least, the last one the rest.
    let cases = [
        ((64, 1, 2048), Some((3, 51, 26))),
        ((32, 1, 2048), Some((5, 29, 12))),
        ((64, 1, 8192), Some((3, 205, 102))),
        ((16, 2, 2048), Some((5, 29, 12))),
        // Every SM already busy, or one block per row to spare: no split.
        ((64, 8, 2048), None),
        ((64, 2, 2048), None),
        ((48, 2, 2048), None),
        // Too short for two segments of SPLIT_MIN_CHUNKS chunks and a last chunk.
        ((1, 1, 16 * 8), None),
        ((1, 1, 16 * 8 + 1), Some((3, 4, 1))),
        ((1, 1, 16 * 10), Some((3, 4, 2))),
    ];
    for ((h, b, s), want) in cases {
        let c = model(h, b, s);
        let got = backward_split(&c, H200_SMS);
        assert_eq!(
            got,
            want.map(|(segments, chunks, last_chunks)| BackwardSplit {
                segments,
                chunks,
                last_chunks
            }),
            "H={h} B={b} S={s}"
        );
        if let Some(sp) = got {
            let nc = s.div_ceil(16);
            assert_eq!((sp.segments - 1) * sp.chunks + sp.last_chunks, nc);
            assert!(sp.chunks >= SPLIT_MIN_CHUNKS && sp.last_chunks >= 1);
            assert!((sp.segments - 1) * b * h <= SPLIT_SLOTS.min(H200_SMS));
        }
        let paths = dispatch_paths_on(&c, H200_SHARED_MEMORY, H200_SMS);
        let heads_run = paths
            .iter()
            .filter(|p| **p == "backward_mma_bf16_r4_n128_p64_na32_c16")
            .count();
        assert_eq!(heads_run, if got.is_some() { 2 } else { 1 }, "{paths:?}");
    }
    // One row on a GPU of many SMs: bounded by SPLIT_SLOTS and by the chunk count.
    let long = model(1, 1, 1 << 20);
    assert_eq!(
        backward_split(&long, 10_000).unwrap().segments,
        SPLIT_SLOTS + 1
    );
    // f32, other geometries: the tensor-core backward does not run, nothing to split.
    let f32_model = ForwardConfig {
        dtype: Dtype::F32,
        ..model(64, 1, 2048)
    };
    assert_eq!(backward_split(&f32_model, H200_SMS), None);
    assert_eq!(
        backward_split(
            &ForwardConfig {
                rank: 2,
                ..model(64, 1, 2048)
            },
            H200_SMS
        ),
        None
    );
}

#[test]
fn tensor_core_checkpoint_sweep_splits_when_rows_leave_sms_idle() {
    use mamba3::backward::{checkpoint_sweep_segments, dispatch_paths_on, SPLIT_SLOTS};
    const H200_SMS: usize = 132;
    let model = |heads, batch, seq_len| benchmark_geometry(heads, batch, seq_len, 64);
    // Two sweep blocks per SM: ⌊264 / (B·H)⌋ segments of whole chunks of 16 tokens, at least
    // three, at most one more than the split adjoint region's SPLIT_SLOTS / (B·H) slots per row.
    let cases = [
        ((64, 1, 2048), 4),
        ((32, 1, 2048), 8),
        ((64, 1, 8192), 4),
        ((16, 2, 2048), 8),
        // 33 wanted, 32 slots: segments of 4 chunks.
        ((8, 1, 2048), 32),
        // Eleven chunks leave the split adjoint region room for (11 − 1) / 4 = 2 boundaries.
        ((1, 1, 16 * 11), 3),
        // Two segments would take as long as one; every SM busy; too short.
        ((64, 2, 2048), 1),
        ((64, 8, 2048), 1),
        ((1, 1, 16 * 5), 1),
    ];
    for ((h, b, s), want) in cases {
        let c = model(h, b, s);
        let got = checkpoint_sweep_segments(&c, H200_SMS);
        assert_eq!(got, want, "H={h} B={b} S={s}");
        assert!(
            got == 1 || (got - 1) * b * h <= SPLIT_SLOTS,
            "H={h} B={b} S={s}"
        );
        let paths = dispatch_paths_on(&c, H200_SHARED_MEMORY, H200_SMS);
        let sweep_at = paths
            .iter()
            .position(|p| *p == "backward_ckpt_mma_bf16_r4_n128_p64_na32_c16")
            .expect("the tensor-core path runs a checkpoint sweep");
        let prelude: &[&str] = if got > 1 {
            &[
                "segment_state_mma_bf16_r4_n128_p64_na32_c16",
                "segment_combine_f32",
            ]
        } else {
            &[]
        };
        assert_eq!(&paths[..sweep_at], prelude, "H={h} B={b} S={s}: {paths:?}");
    }
    // Other dtypes and geometries run no sweep to split.
    let f32_model = ForwardConfig {
        dtype: Dtype::F32,
        ..model(64, 1, 2048)
    };
    assert_eq!(checkpoint_sweep_segments(&f32_model, H200_SMS), 1);
}

/// The benchmark geometry (R = 4, N = 128, P = 64, Na = 32, G = 1, gated) at (H, B, S) and a
/// call chunk size (the tensor-core backward runs chunks of 16 whatever it is).
fn benchmark_geometry(
    heads: usize,
    batch: usize,
    seq_len: usize,
    chunk_size: usize,
) -> ForwardConfig {
    ForwardConfig {
        batch,
        heads,
        seq_len,
        groups: 1,
        state_dim: 128,
        head_dim: 64,
        num_angles: 32,
        chunk_size,
        ..config(OutputMode::Gated)
    }
}

/// The tensor-core backward's workspace holds what its kernels store: the state entering each
/// chunk of 16 and the per-head q/k gradients as bf16 (two per f32 element), θ entering each
/// chunk as (hi, lo) f32 pairs, and the per-(b, h) parameter slots (no split regions at
/// B·H = 512, above `SPLIT_SLOTS`): about half the token-serial layout, which `workspace_len`
/// (every path) still covers. The f32 call has no tensor-core layout.
#[test]
fn tensor_core_workspace_holds_bf16_checkpoints_and_partials() {
    let c = benchmark_geometry(64, 8, 2048, 16);
    let (b, h, s, r, n, p, na) = (8u64, 64u64, 2048u64, 4u64, 128u64, 64u64, 32u64);
    let chunks = s / 16;
    let slot_len = mamba3_abi::BackwardSlots::new(r as u32, n as u32, p as u32).len as u64;
    let want = b * h * chunks * p * n / 2
        + b * h * chunks * na * 2
        + 2 * (b * s * r * h * n / 2)
        + b * h * slot_len;
    let tc = workspace_len_for(&c, BackwardPath::TensorCore).unwrap() as u64;
    assert_eq!(tc, want);
    let any = workspace_len(&c).unwrap() as u64;
    let serial = workspace_len_for(&c, BackwardPath::TokenSerial).unwrap() as u64;
    assert_eq!(any, serial.max(tc));
    assert!(2 * tc < any + b * h * slot_len, "{tc} vs {any}");
    eprintln!(
        "workspace at H = 64, B = 8, S = 2048: tensor-core {:.2} GB, every path {:.2} GB",
        4.0 * tc as f64 / 1e9,
        4.0 * any as f64 / 1e9
    );
    let f32_call = ForwardConfig {
        dtype: Dtype::F32,
        ..c
    };
    assert_eq!(workspace_len_for(&f32_call, BackwardPath::TensorCore), None);
}
