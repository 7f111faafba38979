//! Seeded random inputs drawn like the reference fixtures, with a self-contained PRNG.

use std::f64::consts::TAU;

use super::error::Mamba3Error;
use super::geometry::Mamba3Geometry;
use super::inputs::{Mamba3Inputs, OutputMode, RmsNormWeight, DEFAULT_NORM_EPS};
use super::rotation::Rotation;

/// SplitMix64 generator with uniform and normal draws; tiny and deterministic across platforms.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// Generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform draw in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform draw in `[lo, hi)`.
    pub fn uniform_range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Standard normal draw (Box–Muller, cosine branch only, so each call consumes two uniforms).
    pub fn normal(&mut self) -> f64 {
        // 1 − u lies in (0, 1], keeping the logarithm finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (TAU * u2).cos()
    }

    fn normals(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
}

/// Which optional inputs [`Mamba3Inputs::random`] creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RandomOptions {
    /// Rotary convention stored in the inputs.
    pub rotation: Rotation,
    /// Output mode: decides whether `mimo_o` and `norm` are drawn.
    pub mode: OutputMode,
    /// Draw `z` and `mimo_z`.
    pub has_z: bool,
    /// Draw `D`.
    pub has_d: bool,
}

impl Default for RandomOptions {
    fn default() -> Self {
        Self {
            rotation: Rotation::HalfSplit,
            mode: OutputMode::Gated,
            has_z: true,
            has_d: true,
        }
    }
}

fn softplus(x: f64) -> f64 {
    if x > 30.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

impl Mamba3Inputs {
    /// Seeded random inputs distributed like the fixtures: q, k, v, z, biases, mimo_z, D, norm weight ~ N(0,1);
    /// mimo_v, mimo_o ~ N(0,1)/R; dt = softplus(−3 + N(0,1)); adt = −dt·U(0.1, 1); trap, angle_logits ~ N(0,1).
    /// Tensors are drawn in field order from one stream, so equal seeds give equal inputs.
    pub fn random(
        geometry: Mamba3Geometry,
        options: RandomOptions,
        seed: u64,
    ) -> Result<Self, Mamba3Error> {
        geometry.validate()?;
        let g = geometry;
        let mut rng = SplitMix64::new(seed);
        let qk = g.batch * g.seq_len * g.rank * g.groups * g.state_dim;
        let vz = g.batch * g.seq_len * g.heads * g.head_dim;
        let scalars = g.batch * g.heads * g.seq_len;
        let angles = g.batch * g.seq_len * g.heads * g.num_angles;
        let bias = g.heads * g.rank * g.state_dim;
        let mimo = g.heads * g.rank * g.head_dim;
        let inv_r = 1.0 / g.rank as f64;

        let q = rng.normals(qk, 1.0);
        let k = rng.normals(qk, 1.0);
        let v = rng.normals(vz, 1.0);
        let z = options.has_z.then(|| rng.normals(vz, 1.0));
        let trap = rng.normals(scalars, 1.0);
        let dt: Vec<f64> = (0..scalars)
            .map(|_| softplus(-3.0 + rng.normal()))
            .collect();
        let adt = dt
            .iter()
            .map(|&d| -d * rng.uniform_range(0.1, 1.0))
            .collect();
        let angle_logits = rng.normals(angles, 1.0);
        let q_bias = rng.normals(bias, 1.0);
        let k_bias = rng.normals(bias, 1.0);
        let mimo_v = rng.normals(mimo, inv_r);
        let mimo_z = options.has_z.then(|| rng.normals(mimo, 1.0));
        let mimo_o = (options.mode != OutputMode::Prereduce).then(|| rng.normals(mimo, inv_r));
        let d = options.has_d.then(|| rng.normals(g.heads, 1.0));
        let norm = (options.mode == OutputMode::FusedNorm).then(|| RmsNormWeight {
            weight: rng.normals(g.heads * g.head_dim, 1.0),
            eps: DEFAULT_NORM_EPS,
        });
        Ok(Self {
            geometry,
            rotation: options.rotation,
            q,
            k,
            v,
            z,
            trap,
            dt,
            adt,
            angle_logits,
            q_bias,
            k_bias,
            mimo_v,
            mimo_z,
            mimo_o,
            d,
            norm,
        })
    }
}
