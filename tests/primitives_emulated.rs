//! The split-operand product of the self-test kernels (`kernels/src/primitives.rs`,
//! `wgmma_f16_split_product`, with `kernels/src/f16_split.rs`) compiled for the host against the
//! emulated device primitives of `tests/emulation`, checked against an f64 product: the binary16
//! split, the swizzled hi/lo tiles, the descriptors and every way of summing the passes, without a
//! GPU. (The emulated `wgmma` sums in f32 in depth order; how the tensor cores accumulate is the
//! GPU test's, `gpu_primitives::wgmma_f16_split_reaches_f32_accuracy`.)

mod common;
mod emulation;

use emulation::{arch, frag, math, warp_scan};

#[allow(clippy::all)]
#[path = "../kernels/src/f16_split.rs"]
mod f16_split;

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../kernels/src/primitives.rs"]
mod primitives;

#[test]
fn emulated_f16_split_product_reaches_f32_accuracy() {
    let words = mamba3_abi::WGMMA_SPLIT_TEST_SMEM as usize / 4;
    let mut failures = Vec::new();
    for (name, a, b) in &common::split_product_cases() {
        for mode in 0..6u32 {
            let mut d = vec![f32::NAN; 64 * 64];
            let (pa, pb, pd) = (
                a.as_ptr() as usize,
                b.as_ptr() as usize,
                d.as_mut_ptr() as usize,
            );
            emulation::run_grid((1, 1), 128, words, &[], || {
                // SAFETY: the kernel's sizes (a 64×128, b 128×64, d 64×64); one warpgroup.
                unsafe {
                    primitives::wgmma_f16_split_product(
                        pa as *const f32,
                        pb as *const f32,
                        pd as *mut f32,
                        mode,
                    )
                }
            });
            let (err, err_peak) = common::split_product_errors(&d, a, b);
            eprintln!(
                "emulated f16 split, {name}, mode {mode}: worst error / Σ|ab| = {err:.2e}, max error / max|ab| = {err_peak:.2e}"
            );
            // A layout, descriptor or scale error shows as ≥ 2⁻¹¹; the split itself leaves ~2⁻²²
            // of each product, and the emulated sums round in f32.
            if err.is_nan() || err > 2e-6 {
                failures.push(format!("{name}, mode {mode}: {err:e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "emulated split products off:\n{}",
        failures.join("\n")
    );
}
