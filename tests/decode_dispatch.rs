//! Which decode kernel a configuration runs, and the register-resident kernel's row split (no GPU
//! needed): the rules of `DecodeConfig::register_resident` and `DecodeConfig::rows_per_warp`.

use mamba3::decode::{
    DecodeConfig, DecodePath, CHUNKED_MIN_TOKENS, REGISTER_RESIDENT_MAX_SEQUENCE_HEADS,
    STREAMING_MIN_SEQUENCE_HEADS, TENSOR_CORE_CHUNK_MIN_SEQUENCE_HEADS_PER_SM_PER_TOKEN,
};
use mamba3::{OutputMode, Rotation};
use mamba3_abi::{DecodeRowsSmem, DecodeSmem};

/// Opt-in shared memory per block of an H100/H200 (227 KiB).
const H200_SHARED_MEMORY: usize = 232_448;

/// SMs of an H200.
const H200_SMS: usize = 132;

/// Opt-in shared memory per block of sm_86 / sm_89 GPUs (99 KiB).
const SM86_SHARED_MEMORY: usize = 101_376;

/// The benchmark geometry (H=64 P=64 N=128 R=4, gated) at `batch`.
fn reference(batch: usize) -> DecodeConfig {
    DecodeConfig {
        batch,
        heads: 64,
        groups: 1,
        rank: 4,
        state_dim: 128,
        head_dim: 64,
        num_angles: 32,
        rotation: Rotation::HalfSplit,
        mode: OutputMode::Gated,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    }
}

/// The reference geometry with Na = 16: no fixed-geometry instantiation, the general kernels.
fn general(batch: usize) -> DecodeConfig {
    DecodeConfig {
        num_angles: 16,
        ..reference(batch)
    }
}

#[test]
fn small_batches_run_the_register_resident_kernel() {
    // (bf16 calls at these geometries run the tensor-core step: f32 here, bf16 at another rank.)
    let rank2 = |batch| DecodeConfig {
        rank: 2,
        ..reference(batch)
    };
    assert_eq!(
        reference(1).dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_rows_fixed_f32_r4_n128_p64_na32"]
    );
    assert_eq!(
        rank2(1).dispatch_paths::<half::bf16>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_rows_bf16_r2"]
    );
    assert_eq!(
        reference(2).dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_rows_fixed_f32_r4_n128_p64_na32"]
    );
    assert_eq!(
        general(2).dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_rows_f32_r4"]
    );
    assert_eq!(REGISTER_RESIDENT_MAX_SEQUENCE_HEADS, 128);
    assert_eq!(
        reference(3).dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_fixed_f32_r4_n128_p64_na32"]
    );
    assert_eq!(
        rank2(3).dispatch_paths::<half::bf16>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_bf16_r2"]
    );
    assert_eq!(
        reference(256).dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_fixed_f32_r4_n128_p64_na32"]
    );
    // Outside its geometry: N not a multiple of 4, N above 128, fused norm over more than 32 rows.
    for c in [
        DecodeConfig {
            state_dim: 126,
            num_angles: 16,
            ..reference(1)
        },
        DecodeConfig {
            state_dim: 256,
            ..reference(1)
        },
        DecodeConfig {
            mode: OutputMode::FusedNorm,
            ..reference(1)
        },
    ] {
        assert!(!c.register_resident(), "{c:?}");
        // The fused-norm case keeps the fixed geometry: its shared-tile instantiation runs for
        // f32 (bf16 there is the tensor-core step's).
        let shared = if c.mode == OutputMode::FusedNorm {
            "decode_fixed_f32_r4_n128_p64_na32"
        } else {
            "decode_f32_r4"
        };
        assert_eq!(
            c.dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
            [shared]
        );
        let (r, n, p, na) = (
            c.rank as u32,
            c.state_dim as u32,
            c.head_dim as u32,
            c.num_angles as u32,
        );
        assert_eq!(
            c.shared_memory_bytes(),
            DecodeSmem::new(r, n, p, na).bytes() as usize
        );
    }
    let norm = DecodeConfig {
        mode: OutputMode::FusedNorm,
        head_dim: 32,
        ..reference(1)
    };
    assert!(norm.register_resident());
}

#[test]
fn rows_spread_over_the_sms_at_small_batch() {
    // Batch 1 on 132 SMs: 4 rows per warp gives 128 blocks, 2 rows 256 (within two per SM),
    // 1 row 512 (not): 2 rows per warp, 4 blocks per head.
    assert_eq!(reference(1).rows_per_warp(132), 2);
    // Batch 2: 256 blocks at 4 rows per warp already; halving would exceed two per SM.
    assert_eq!(reference(2).rows_per_warp(132), 4);
    // Fused norm keeps one block per (b, h): all of P = 32 in 8 warps of 4 rows.
    let norm = DecodeConfig {
        mode: OutputMode::FusedNorm,
        head_dim: 32,
        ..reference(1)
    };
    assert_eq!(norm.rows_per_warp(132), 4);
    // Shared memory: the largest block (all of P up to 32 rows).
    let c = reference(1);
    assert_eq!(
        c.shared_memory_bytes(),
        DecodeRowsSmem::new(4, 128, 32, 32).bytes() as usize
    );
}

/// One or two bf16 tokens at R = 4, N = 128, P = 64 run the tensor-core kernel at every batch and
/// Na (two through its token-loop entry; one token, when B·H blocks fit the SMs, through the
/// prefetching entry); f32 and other geometries keep the other kernels.
#[test]
fn one_bf16_token_at_the_tensor_core_geometry_runs_the_tensor_core_kernel() {
    use half::bf16;
    for batch in [1, 2, 3, 8, 64, 256] {
        for c in [reference(batch), general(batch)] {
            let fits = batch * c.heads <= H200_SMS;
            for (tokens, kernel, shared_memory) in [
                (1, "decode_mma_bf16_r4_n128_p64", SM86_SHARED_MEMORY),
                (2, "decode_mma_tokens_bf16_r4_n128_p64", H200_SHARED_MEMORY),
            ] {
                let (path, kernel) = if fits && tokens == 1 {
                    (
                        DecodePath::TensorCorePrefetching,
                        "decode_mma_prefetch_bf16_r4_n128_p64",
                    )
                } else {
                    (DecodePath::TensorCore, kernel)
                };
                assert_eq!(
                    c.path::<bf16>(tokens, H200_SMS, H200_SHARED_MEMORY),
                    path,
                    "{c:?}"
                );
                assert_eq!(
                    c.prefers_tensor_core_prefetching::<bf16>(tokens, H200_SMS),
                    path == DecodePath::TensorCorePrefetching
                );
                assert_eq!(
                    c.dispatch_paths::<bf16>(tokens, H200_SMS, shared_memory),
                    [kernel]
                );
                assert!(c.prefers_tensor_core::<bf16>(tokens));
                assert!(!c.prefers_tensor_core::<f32>(tokens), "{c:?}");
            }
        }
    }
    // Fused norm too (the block holds all of P).
    let norm = DecodeConfig {
        mode: OutputMode::FusedNorm,
        ..reference(4)
    };
    assert_eq!(
        norm.path::<bf16>(1, 132, H200_SHARED_MEMORY),
        DecodePath::TensorCore
    );
    // Another rank, state size or head dim: the other kernels.
    for c in [
        DecodeConfig {
            rank: 2,
            ..reference(8)
        },
        DecodeConfig {
            state_dim: 64,
            num_angles: 16,
            ..reference(8)
        },
        DecodeConfig {
            head_dim: 32,
            ..reference(8)
        },
    ] {
        assert!(!c.prefers_tensor_core::<bf16>(1), "{c:?}");
        assert!(c.check_path(DecodePath::TensorCore, 1).is_err(), "{c:?}");
        assert!(matches!(
            c.path::<bf16>(1, 132, H200_SHARED_MEMORY),
            DecodePath::Streaming { .. }
        ));
    }
    // A pinned tensor-core path takes any token count from one; the prefetching entry one only.
    assert!(reference(8).check_path(DecodePath::TensorCore, 9).is_ok());
    assert!(reference(8)
        .check_path(DecodePath::TensorCorePrefetching, 1)
        .is_ok());
    let err = reference(1)
        .check_path(DecodePath::TensorCorePrefetching, 2)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("TensorCorePrefetching") && err.contains("one token"),
        "{err}"
    );
    let err = reference(8)
        .check_path(DecodePath::TensorCore, 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("path") && err.contains("at least one token"),
        "{err}"
    );
}

#[test]
fn one_token_at_many_sequence_heads_streams() {
    // Above the register-resident kernel's 128 sequence-heads a one-token call outside the
    // tensor-core kernel's reach (f32 here, or another geometry) streams; several tokens (below
    // the chunked path's 3) keep the shared tile.
    assert_eq!(
        STREAMING_MIN_SEQUENCE_HEADS,
        REGISTER_RESIDENT_MAX_SEQUENCE_HEADS + 1
    );
    let p32 = |batch| DecodeConfig {
        head_dim: 32,
        ..reference(batch)
    };
    assert_eq!(
        p32(8).dispatch_paths::<half::bf16>(1, H200_SMS, H200_SHARED_MEMORY),
        ["decode_stream_bf16_r4"]
    );
    assert_eq!(
        reference(8).dispatch_paths::<f32>(1, H200_SMS, H200_SHARED_MEMORY),
        ["decode_stream_f32_r4"]
    );
    // Batch 3 (192 sequence-heads) streams one token and keeps the shared tile for two.
    assert_eq!(
        p32(3).dispatch_paths::<half::bf16>(1, H200_SMS, H200_SHARED_MEMORY),
        ["decode_stream_bf16_r4"]
    );
    assert_eq!(
        reference(3).dispatch_paths::<f32>(1, H200_SMS, H200_SHARED_MEMORY),
        ["decode_stream_f32_r4"]
    );
    assert_eq!(
        reference(3).dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_fixed_f32_r4_n128_p64_na32"]
    );
    // f32 streaming has no fixed instantiation (register budget): the general kernel.
    assert_eq!(
        reference(256).dispatch_paths::<f32>(1, H200_SMS, H200_SHARED_MEMORY),
        ["decode_stream_f32_r4"]
    );
    assert_eq!(
        reference(256).dispatch_paths::<f32>(2, H200_SMS, H200_SHARED_MEMORY),
        ["decode_fixed_f32_r4_n128_p64_na32"]
    );
    // Few sequence-heads stay on the register-resident kernel whatever T.
    assert_eq!(
        reference(2).dispatch_paths::<f32>(1, H200_SMS, H200_SHARED_MEMORY),
        ["decode_rows_fixed_f32_r4_n128_p64_na32"]
    );
    // The row split aims for 4 warps per SM (528 on 132 SMs). Batch 256: 16384 warps of all
    // 64 rows.
    assert_eq!(
        reference(256).path::<f32>(1, 132, H200_SHARED_MEMORY),
        DecodePath::Streaming { rows_per_warp: 64 }
    );
    // Up to one wave of blocks (4 per SM: 528 on 132 SMs) the four warps of a block split one
    // (b, h) and share its prologue: P = 64 in four ranges of 16 rows. Batch 4 (256
    // sequence-heads), batch 3 (192) and batch 8 (512 blocks).
    for batch in [3, 4, 8] {
        assert_eq!(
            reference(batch).path::<f32>(1, 132, H200_SHARED_MEMORY),
            DecodePath::Streaming { rows_per_warp: 16 },
            "batch {batch}"
        );
    }
    assert_eq!(reference(8).streaming_shared_prologue_rows(), Some(16));
    // P = 6 does not split into four ranges (2 rows a warp give three), P = 13 does (4 rows a
    // warp, the last range one row).
    let p = |head_dim| DecodeConfig {
        head_dim,
        ..reference(8)
    };
    assert_eq!(p(6).streaming_shared_prologue_rows(), None);
    assert_eq!(p(0).streaming_shared_prologue_rows(), None);
    assert_eq!(p(13).streaming_shared_prologue_rows(), Some(4));
    // Batches 1 and 2 (pinned: the register-resident kernel runs them) share the prologue too.
    assert_eq!(reference(2).streaming_rows_per_warp(132), 16);
    assert_eq!(reference(1).streaming_rows_per_warp(132), 16);
    // Without the shared split the rows halve towards 4 warps per SM: P = 6 at batch 1 (64
    // sequence-heads) stops at the floor of 4 rows (128 warps).
    let one = DecodeConfig {
        head_dim: 6,
        ..reference(1)
    };
    assert_eq!(one.streaming_rows_per_warp(132), 4);
    // Batch 8 on 100 SMs (512 blocks are more than one wave of 400): 64 rows give 512 warps,
    // above the target of 400.
    assert_eq!(
        reference(8).path::<f32>(1, 100, H200_SHARED_MEMORY),
        DecodePath::Streaming { rows_per_warp: 64 }
    );
    // Batch 16: 64 rows give 1024 warps.
    assert_eq!(
        reference(16).path::<f32>(1, 132, H200_SHARED_MEMORY),
        DecodePath::Streaming { rows_per_warp: 64 }
    );
    // Batch 32 (2048 sequence-heads): 64 rows give 2048 warps.
    assert_eq!(
        reference(32).path::<f32>(1, 132, H200_SHARED_MEMORY),
        DecodePath::Streaming { rows_per_warp: 64 }
    );
    // Fused norm, N above 128 or N not a multiple of 4: not streamable.
    for c in [
        DecodeConfig {
            mode: OutputMode::FusedNorm,
            ..reference(256)
        },
        DecodeConfig {
            state_dim: 256,
            ..reference(256)
        },
        DecodeConfig {
            state_dim: 126,
            num_angles: 16,
            ..reference(256)
        },
    ] {
        assert!(!c.streamable(1), "{c:?}");
        assert_eq!(
            c.path::<f32>(1, 132, H200_SHARED_MEMORY),
            DecodePath::SharedTile,
            "{c:?}"
        );
    }
}

#[test]
fn pinned_paths_are_checked_against_the_call() {
    let c = reference(256);
    let stream = DecodePath::Streaming { rows_per_warp: 64 };
    assert!(c.check_path(stream, 1).is_ok());
    for (path, tokens) in [
        (stream, 2),
        (DecodePath::Streaming { rows_per_warp: 0 }, 1),
        (DecodePath::RegisterResident { rows_per_warp: 0 }, 1),
        (DecodePath::RegisterResident { rows_per_warp: 5 }, 1),
    ] {
        let err = c.check_path(path, tokens).unwrap_err().to_string();
        assert!(err.contains("path"), "{path:?} T={tokens}: {err}");
    }
    assert!(c
        .check_path(DecodePath::RegisterResident { rows_per_warp: 4 }, 8)
        .is_ok());
    assert!(c.check_path(DecodePath::SharedTile, 8).is_ok());
    let norm = DecodeConfig {
        mode: OutputMode::FusedNorm,
        ..reference(1)
    };
    assert!(norm
        .check_path(DecodePath::RegisterResident { rows_per_warp: 4 }, 1)
        .is_err());
}

/// From [`CHUNKED_MIN_TOKENS`] tokens a bf16 call at the tensor-core forward's geometry runs the
/// chunked forward where the GPU holds its shared memory (up to eight tokens at many
/// sequence-heads the chunk-form tensor-core kernel); f32 and other geometries (whose
/// `chunked_forward` fallback is slower) keep the per-token kernels unless pinned.
#[test]
fn multi_token_calls_run_the_chunked_forward() {
    use half::bf16;
    assert_eq!(CHUNKED_MIN_TOKENS, 3);
    for batch in [1, 8, 256] {
        let c = reference(batch);
        for tokens in [3, 8] {
            let many = batch * 64
                >= TENSOR_CORE_CHUNK_MIN_SEQUENCE_HEADS_PER_SM_PER_TOKEN * tokens * H200_SMS;
            assert_eq!(
                c.path::<bf16>(tokens, 132, H200_SHARED_MEMORY),
                if many {
                    DecodePath::TensorCoreChunk
                } else {
                    DecodePath::Chunked
                },
                "B = {batch}, T = {tokens}"
            );
        }
        assert_eq!(
            c.path::<bf16>(16, 132, H200_SHARED_MEMORY),
            DecodePath::Chunked
        );
        assert_ne!(
            c.path::<bf16>(2, 132, H200_SHARED_MEMORY),
            DecodePath::Chunked
        );
        assert_ne!(
            c.path::<f32>(8, 132, H200_SHARED_MEMORY),
            DecodePath::Chunked
        );
        assert_ne!(
            general(batch).path::<bf16>(8, 132, H200_SHARED_MEMORY),
            DecodePath::Chunked
        );
        assert!(c.check_path(DecodePath::Chunked, 8).is_ok());
    }
    // Fewer tokens than a chunk run the tensor-core forward's batch-walking short-call
    // instantiation: one wave of blocks (two per SM), each walking the batch rows of its head;
    // up to eight at many sequence-heads the chunk-form kernel (three blocks per SM), on a GPU
    // whose shared memory holds it.
    assert_eq!(
        reference(8).dispatch_paths::<bf16>(8, H200_SMS, H200_SHARED_MEMORY),
        ["forward_mma_units_bf16_r4_n128_p64_na32_c16"]
    );
    assert_eq!(
        reference(256).dispatch_paths::<bf16>(8, H200_SMS, H200_SHARED_MEMORY),
        ["decode_mma_chunk_bf16_r4_n128_p64"]
    );
    assert_eq!(
        reference(256).dispatch_paths::<bf16>(9, H200_SMS, H200_SHARED_MEMORY),
        ["forward_mma_units_bf16_r4_n128_p64_na32_c16"]
    );
    assert!(reference(256).prefers_tensor_core_chunk::<bf16>(8, H200_SMS, H200_SHARED_MEMORY));
    assert!(!reference(256).prefers_tensor_core_chunk::<bf16>(2, H200_SMS, H200_SHARED_MEMORY));
    assert!(!reference(256).prefers_tensor_core_chunk::<f32>(8, H200_SMS, H200_SHARED_MEMORY));
    assert!(!reference(256).prefers_tensor_core_chunk::<bf16>(8, H200_SMS, 40_000));
    // Any Na (here 16).
    assert!(general(256).prefers_tensor_core_chunk::<bf16>(3, H200_SMS, H200_SHARED_MEMORY));
    let err = reference(256)
        .check_path(DecodePath::TensorCoreChunk, 9)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("path") && err.contains("1 ..= 8 tokens"),
        "{err}"
    );
    assert_eq!(
        DecodePath::TensorCoreChunk.kernel::<f32>(&reference(256), 8),
        None
    );
    let stride = |batch: usize, heads: usize| {
        let c = DecodeConfig {
            heads,
            ..reference(batch)
        };
        mamba3::forward::unit_stride(&c.forward_config(8, mamba3::Dtype::Bf16), 132)
    };
    assert_eq!(stride(256, 64), 4);
    assert_eq!(stride(3, 64), 3);
    assert_eq!(stride(1, 64), 1);
    assert_eq!(stride(256, 512), 1);
    assert_eq!(stride(256, 1), 256);
    assert_eq!(
        reference(256).dispatch_paths::<bf16>(16, H200_SMS, H200_SHARED_MEMORY),
        ["forward_mma_bf16_r4_n128_p64_na32_c16"]
    );
    assert_eq!(
        reference(256).dispatch_paths::<f32>(8, H200_SMS, H200_SHARED_MEMORY),
        ["decode_fixed_f32_r4_n128_p64_na32"]
    );
    // Pinned, the chunked path names the forward kernel that runs it.
    assert_eq!(
        DecodePath::Chunked
            .kernel::<f32>(&reference(1), 8)
            .map(|k| k.symbol()),
        Some("forward_mma_f32_r4_n128_p64_na32_c16")
    );
    assert_eq!(
        DecodePath::Chunked
            .kernel::<bf16>(&general(1), 8)
            .map(|k| k.symbol()),
        Some("forward_fma_bf16_r4")
    );
    // The tensor-core forward's 109 KB exceed an sm_86 GPU's 99 KB: the tensor-core step runs
    // (12 KB), or at another rank the per-token kernels.
    assert!(!reference(1).prefers_chunked::<bf16>(8, SM86_SHARED_MEMORY));
    assert_eq!(
        reference(1).path::<bf16>(8, 132, SM86_SHARED_MEMORY),
        DecodePath::TensorCore
    );
    assert_eq!(
        DecodeConfig {
            rank: 2,
            ..reference(1)
        }
        .path::<bf16>(8, 132, SM86_SHARED_MEMORY),
        DecodePath::RegisterResident { rows_per_warp: 2 }
    );
}

#[test]
fn dispatch_queries_do_not_panic_on_degenerate_geometries() {
    // Validation rejects these; the dispatch queries must still answer rather than divide by
    // zero (a caller may ask before validating).
    for (batch, heads, p, n, rank) in [
        (0, 64, 64, 128, 4),
        (1, 0, 64, 128, 4),
        (1, 64, 0, 128, 4),
        (1, 64, 64, 0, 4),
        (1, 64, 64, 128, 0),
        (usize::MAX / 4, 64, 64, 128, 4),
        (1, 64, usize::MAX / 4, usize::MAX / 4, 4),
    ] {
        let c = DecodeConfig {
            batch,
            heads,
            head_dim: p,
            state_dim: n,
            rank,
            ..reference(1)
        };
        assert!(c.validate().is_err(), "{c:?} should be rejected");
        for tokens in [0, 1, 8] {
            let _ = c.path::<half::bf16>(tokens, 132, H200_SHARED_MEMORY);
            let _ = c.path::<f32>(tokens, 0, 0);
            let _ = c.dispatch_paths::<half::bf16>(tokens, H200_SMS, H200_SHARED_MEMORY);
        }
        let _ = (
            c.streaming_rows_per_warp(132),
            c.rows_per_warp(132),
            c.shared_memory_bytes(),
        );
        let _ = c.streaming_shared_prologue_rows();
        for tokens in [0, 1, usize::MAX / 2] {
            let _ = (c.output_len(tokens), c.min_bytes(tokens, 2));
            let _ = c.forward_config(tokens, mamba3::Dtype::Bf16);
            for path in [
                DecodePath::SharedTile,
                DecodePath::Chunked,
                DecodePath::Streaming { rows_per_warp: 16 },
                DecodePath::RegisterResident { rows_per_warp: 2 },
                DecodePath::TensorCore,
                DecodePath::TensorCorePrefetching,
                DecodePath::TensorCoreChunk,
            ] {
                let _ = c.check_path(path, tokens);
            }
        }
    }
}
