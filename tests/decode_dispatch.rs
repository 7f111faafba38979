//! Which decode kernel a configuration runs, and the register-resident kernel's row split (no GPU
//! needed): the rules of `DecodeConfig::register_resident` and `DecodeConfig::rows_per_warp`.

use mamba3::decode::{DecodeConfig, REGISTER_RESIDENT_MAX_SEQUENCE_HEADS};
use mamba3::{OutputMode, Rotation};
use mamba3_abi::{DecodeRowsSmem, DecodeSmem};

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

#[test]
fn small_batches_run_the_register_resident_kernel() {
    assert_eq!(
        reference(1).dispatch_paths::<half::bf16>(),
        ["decode_rows_bf16_r4"]
    );
    assert_eq!(reference(2).dispatch_paths::<f32>(), ["decode_rows_f32_r4"]);
    assert_eq!(REGISTER_RESIDENT_MAX_SEQUENCE_HEADS, 128);
    assert_eq!(
        reference(3).dispatch_paths::<half::bf16>(),
        ["decode_bf16_r4"]
    );
    assert_eq!(reference(256).dispatch_paths::<f32>(), ["decode_f32_r4"]);
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
        assert_eq!(c.dispatch_paths::<half::bf16>(), ["decode_bf16_r4"]);
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
