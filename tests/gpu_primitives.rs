//! GPU tests of the device primitives against plain host loops (skipped without a GPU).

mod common;

use half::bf16;
use mamba3::primitives;

use mamba3::golden::SplitMix64 as Rng;

/// Host model of `cvt.rna.tf32.f32`: keep 10 mantissa bits, round half away from zero.
fn to_tf32(x: f32) -> f32 {
    f32::from_bits((x.to_bits().wrapping_add(0x1000)) & !0x1fff)
}

/// `c + a·b` in f64 for row-major `a` (m×k), `b` (k×n), `c` (m×n); also `Σ|a||b| + |c|` per entry.
fn matmul_ref(
    a: &[f64],
    b: &[f64],
    c: &[f32],
    m: usize,
    k: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for r in 0..m {
        for col in 0..n {
            let (mut s, mut t) = (c[r * n + col] as f64, (c[r * n + col] as f64).abs());
            for i in 0..k {
                s += a[r * k + i] * b[i * n + col];
                t += (a[r * k + i] * b[i * n + col]).abs();
            }
            out[r * n + col] = s;
            mag[r * n + col] = t;
        }
    }
    (out, mag)
}

/// Worst `|got − want| / scale` over the entries.
fn worst(got: &[f32], want: &[f64], scale: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .zip(scale)
        .map(|((g, w), s)| (*g as f64 - w).abs() / s)
        .fold(0.0, common::nan_max)
}

#[test]
fn mma_bf16_m16n8k16_matches_host_matmul() {
    let gpu = gpu_or_skip!();
    let mut rng = Rng::new(1);
    for _ in 0..4 {
        let a: Vec<bf16> = (0..256).map(|_| bf16::from_f64(rng.normal())).collect();
        let b: Vec<bf16> = (0..128).map(|_| bf16::from_f64(rng.normal())).collect();
        let c: Vec<f32> = (0..128).map(|_| rng.normal() as f32).collect();
        let d = primitives::mma_bf16_m16n8k16(&gpu, &a, &b, &c).unwrap();
        let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        let bf: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
        let (want, mag) = matmul_ref(&af, &bf, &c, 16, 16, 8);
        let err = worst(&d, &want, &mag);
        eprintln!("mma bf16 m16n8k16: worst error / Σ|ab| = {err:.2e}");
        // bf16 products are exact in f32; only the f32 accumulation rounds.
        assert!(
            err < 1e-6,
            "mma bf16 result off by {err:e} relative to Σ|a·b|"
        );
    }
}

#[test]
fn mma_tf32_m16n8k8_matches_host_matmul_and_three_pass_split_reaches_f32() {
    let gpu = gpu_or_skip!();
    let mut rng = Rng::new(2);
    let a: Vec<f32> = (0..128).map(|_| rng.normal() as f32).collect();
    let b: Vec<f32> = (0..64).map(|_| rng.normal() as f32).collect();
    let c: Vec<f32> = (0..128).map(|_| rng.normal() as f32).collect();
    let zero = vec![0.0f32; 128];

    let one_pass = primitives::mma_tf32_m16n8k8(&gpu, &a, &b, &c).unwrap();
    let a_tf: Vec<f64> = a.iter().map(|x| to_tf32(*x) as f64).collect();
    let b_tf: Vec<f64> = b.iter().map(|x| to_tf32(*x) as f64).collect();
    let (want_tf, mag) = matmul_ref(&a_tf, &b_tf, &c, 16, 8, 8);
    let err_rounded = worst(&one_pass, &want_tf, &mag);
    eprintln!("mma tf32 m16n8k8 vs tf32-rounded inputs: {err_rounded:.2e}");
    assert!(
        err_rounded < 1e-6,
        "tf32 mma off by {err_rounded:e} against its rounded inputs"
    );

    // The split x = hi + lo (hi = tf32(x), lo = tf32(x − hi)) and hi·hi + hi·lo + lo·hi recover
    // float32 accuracy, which one TF32 pass cannot: the forward's f32 path relies on this.
    let split = |x: &[f32]| -> (Vec<f32>, Vec<f32>) {
        x.iter()
            .map(|v| (to_tf32(*v), to_tf32(*v - to_tf32(*v))))
            .unzip()
    };
    let (a_hi, a_lo) = split(&a);
    let (b_hi, b_lo) = split(&b);
    let d = primitives::mma_tf32_m16n8k8(&gpu, &a_lo, &b_hi, &zero).unwrap();
    let d = primitives::mma_tf32_m16n8k8(&gpu, &a_hi, &b_lo, &d).unwrap();
    let d: Vec<f32> = d.iter().zip(&c).map(|(x, y)| x + y).collect();
    let three_pass = primitives::mma_tf32_m16n8k8(&gpu, &a_hi, &b_hi, &d).unwrap();
    let af: Vec<f64> = a.iter().map(|x| *x as f64).collect();
    let bf: Vec<f64> = b.iter().map(|x| *x as f64).collect();
    let (want, mag) = matmul_ref(&af, &bf, &c, 16, 8, 8);
    let err_one = worst(&one_pass, &want, &mag);
    let err_three = worst(&three_pass, &want, &mag);
    eprintln!("tf32 vs exact f32 inputs: one pass {err_one:.2e}, three-pass split {err_three:.2e}");
    assert!(
        err_three < 2e-6,
        "three-pass TF32 split off by {err_three:e}"
    );
    assert!(
        err_one > 10.0 * err_three,
        "one TF32 pass unexpectedly as accurate as three"
    );
}

#[test]
fn ldmatrix_x4_delivers_the_isa_lane_map() {
    let gpu = gpu_or_skip!();
    let src: Vec<u16> = (0..256).collect();
    for transpose in [false, true] {
        let regs = primitives::ldmatrix_x4(&gpu, &src, transpose).unwrap();
        for lane in 0..32u32 {
            for matrix in 0..4u32 {
                let reg = regs[(lane * 4 + matrix) as usize];
                for half in 0..2u32 {
                    // PTX ISA ldmatrix figure: lane l holds row l/4, columns 2(l%4)+{0,1};
                    // .trans swaps row and column.
                    let (row, col) = if transpose {
                        (2 * (lane % 4) + half, lane / 4)
                    } else {
                        (lane / 4, 2 * (lane % 4) + half)
                    };
                    let want = matrix * 64 + row * 8 + col;
                    let got = (reg >> (16 * half)) & 0xffff;
                    assert_eq!(
                        got, want,
                        "lane {lane} matrix {matrix} half {half} trans={transpose}"
                    );
                }
            }
        }
    }
}

#[test]
fn cp_async_roundtrip_is_exact() {
    let gpu = gpu_or_skip!();
    let mut rng = Rng::new(3);
    for (bytes, threads) in [(16usize, 32u32), (4096, 128), (40_000, 33)] {
        let src: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
        let got = primitives::cp_async_roundtrip(&gpu, &src, threads).unwrap();
        let want: Vec<u32> = src
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        assert_eq!(
            got, want,
            "cp.async round trip of {bytes} bytes with {threads} threads"
        );
    }
}

#[test]
fn warp_scan_matches_sequential_affine_recurrence() {
    let gpu = gpu_or_skip!();
    let mut rng = Rng::new(4);
    let n = 1000; // not a multiple of 32: the last warp is partial
    let a: Vec<f32> = (0..n).map(|_| (0.5 + 0.5 * rng.uniform()) as f32).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
    let (sa, sb) = primitives::warp_scan_affine(&gpu, &a, &b).unwrap();
    let mut worst = 0.0f64;
    for start in (0..n).step_by(32) {
        let (mut acc_a, mut h) = (1.0f64, 0.0f64);
        for i in start..(start + 32).min(n) {
            h = a[i] as f64 * h + b[i] as f64;
            acc_a *= a[i] as f64;
            worst = worst.max((sb[i] as f64 - h).abs() / (1.0 + h.abs()));
            worst = worst.max((sa[i] as f64 - acc_a).abs() / acc_a);
        }
    }
    eprintln!("warp affine scan: worst relative error {worst:.2e}");
    assert!(worst < 1e-5, "warp scan off by {worst:e}");
}

#[test]
fn sincos_is_accurate_to_f32_up_to_1e5() {
    let gpu = gpu_or_skip!();
    let mut rng = Rng::new(5);
    let mut x: Vec<f32> = (0..1 << 20)
        .map(|_| ((rng.uniform() * 2.0 - 1.0) * 1e5) as f32)
        .collect();
    x.extend((0..1 << 16).map(|_| ((rng.uniform() * 2.0 - 1.0) * 10.0) as f32));
    x.extend([
        0.0,
        -0.0,
        1e5,
        -1e5,
        99_999.99,
        std::f32::consts::FRAC_PI_4,
        3.0 * std::f32::consts::FRAC_PI_4,
    ]);
    let (s, c) = primitives::sincos(&gpu, &x).unwrap();
    let mut worst = (0.0f64, 0.0f32);
    for ((xi, si), ci) in x.iter().zip(&s).zip(&c) {
        let xd = *xi as f64;
        let e = (*si as f64 - xd.sin())
            .abs()
            .max((*ci as f64 - xd.cos()).abs());
        if e > worst.0 {
            worst = (e, *xi);
        }
    }
    eprintln!(
        "sincos: worst absolute error {:.2e} at x = {}",
        worst.0, worst.1
    );
    assert!(
        worst.0 < 2e-7,
        "sincos error {:e} at x = {}",
        worst.0,
        worst.1
    );
}

/// On a device without `wgmma`: asserts that the launch was refused as it must be and says that
/// the test is skipped.
fn skip_refused_off_wgmma<T: std::fmt::Debug>(refused: mamba3::Result<T>) {
    assert!(
        matches!(refused, Err(mamba3::Error::Architecture { .. })),
        "a wgmma launch off compute capability 9.0 must be refused, got {refused:?}"
    );
    eprintln!("SKIPPED: wgmma needs compute capability 9.0 (the launch was refused as it must be)");
}

#[test]
fn wgmma_bf16_reads_every_swizzled_operand_layout() {
    let gpu = gpu_or_skip!();
    if !mamba3::has_wgmma(gpu.compute_capability()) {
        let layout = primitives::WgmmaLayout {
            a_m_major: false,
            b_n_major: false,
            exchange_offsets: false,
        };
        skip_refused_off_wgmma(primitives::wgmma_bf16_m64n128k128(
            &gpu,
            &[bf16::ZERO; 64 * 128],
            &[bf16::ZERO; 128 * 128],
            layout,
        ));
        return;
    }
    let mut rng = Rng::new(7);
    let a: Vec<bf16> = (0..64 * 128)
        .map(|_| bf16::from_f64(rng.normal()))
        .collect();
    let b: Vec<bf16> = (0..128 * 128)
        .map(|_| bf16::from_f64(rng.normal()))
        .collect();
    let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
    let bf: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
    let (want, mag) = matmul_ref(&af, &bf, &[0.0; 64 * 128], 64, 128, 128);
    let mut failures = Vec::new();
    for (a_m_major, b_n_major) in [(false, false), (false, true), (true, false), (true, true)] {
        let run = |exchange_offsets| {
            let layout = primitives::WgmmaLayout {
                a_m_major,
                b_n_major,
                exchange_offsets,
            };
            let d = primitives::wgmma_bf16_m64n128k128(&gpu, &a, &b, layout).unwrap();
            worst(&d, &want, &mag)
        };
        let err = run(false);
        eprintln!("wgmma m64n128k16 ×8, A M-major {a_m_major}, B N-major {b_n_major}: worst error / Σ|ab| = {err:.2e}");
        // bf16 products are exact in f32; eight instructions of f32 accumulation round.
        if err.is_nan() || err >= 4e-6 {
            let exchanged = run(true);
            failures.push(format!(
                "A M-major {a_m_major}, B N-major {b_n_major}: {err:e} (with the M-/N-major offsets exchanged: {exchanged:e})"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "wgmma results off:\n{}",
        failures.join("\n")
    );
}

/// The f16 split (`mamba3_kernels::f16_split`: `hi + 2⁻¹¹·lo`, three binary16 passes) against an
/// f64 product, for each way of summing the passes: whether it reaches float32 accuracy, and how
/// much the tensor cores' own accumulation costs when the passes stay in it (the probe behind the
/// f32 kernels' choice of fresh accumulators).
#[test]
fn wgmma_f16_split_reaches_f32_accuracy() {
    let gpu = gpu_or_skip!();
    let unit = primitives::SplitProduct {
        lo_scaled: true,
        fresh_every: Some(1),
    };
    if !mamba3::has_wgmma(gpu.compute_capability()) {
        skip_refused_off_wgmma(primitives::wgmma_f16_split_m64n64k128(
            &gpu,
            &[0.0; 64 * 128],
            &[0.0; 128 * 64],
            unit,
        ));
        return;
    }
    let bad = primitives::wgmma_f16_split_m64n64k128(
        &gpu,
        &[0.0; 64 * 128],
        &[0.0; 128 * 64],
        primitives::SplitProduct {
            lo_scaled: true,
            fresh_every: Some(2),
        },
    );
    assert!(
        matches!(
            bad,
            Err(mamba3::Error::InvalidArgument {
                arg: "fresh_every",
                ..
            })
        ),
        "fresh_every = 2 must be refused by name, got {bad:?}"
    );
    let cases = common::split_product_cases();
    let mut failures = Vec::new();
    for (name, a, b) in &cases {
        for lo_scaled in [true, false] {
            for fresh_every in [None, Some(4), Some(1)] {
                let how = primitives::SplitProduct {
                    lo_scaled,
                    fresh_every,
                };
                let d = primitives::wgmma_f16_split_m64n64k128(&gpu, a, b, how).unwrap();
                let (err, err_peak) = common::split_product_errors(&d, a, b);
                eprintln!(
                    "f16 split, {name}: lo scaled {lo_scaled}, fresh every {fresh_every:?}: worst error / Σ|ab| = {err:.2e}, max error / max|ab| = {err_peak:.2e}"
                );
                // Every form holds ~2⁻¹⁷ (a layout or split error shows as ≥ 2⁻¹¹); the one the
                // f32 kernels build on, a fresh accumulator per step and a scaled `lo`, holds
                // float32 accuracy (the TF32 three-pass split's 2e-6 bound).
                let bound = if how == unit { 2e-6 } else { 1e-5 };
                if err.is_nan() || err > bound {
                    failures.push(format!("{name}, {how:?}: {err:e} > {bound:e}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "f16 split products off:\n{}",
        failures.join("\n")
    );
}
