//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use mamba3::Gpu;

/// The GPU of ordinal 0, or `None` with a printed reason. With `MAMBA3_REQUIRE_GPU=1` (set by the
/// staged GPU suite) a missing GPU is a failure instead of a skip.
pub fn gpu() -> Option<Arc<Gpu>> {
    match Gpu::new(0) {
        Ok(gpu) => Some(gpu),
        Err(e) if std::env::var_os("MAMBA3_REQUIRE_GPU").is_some() => {
            panic!("MAMBA3_REQUIRE_GPU is set but no GPU is usable: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no GPU): {e}");
            None
        }
    }
}

/// Binds the GPU or returns from the test after printing why it was skipped.
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match common::gpu() {
            Some(gpu) => gpu,
            None => return,
        }
    };
}

/// Small deterministic generator (splitmix64) so tests need no RNG crate.
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}
