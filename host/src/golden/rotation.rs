//! Rotary conventions (spec §3) and the cumulative angle θ (spec §1.2(b)).

use std::f64::consts::{PI, TAU};

use super::error::Mamba3Error;
use super::geometry::Mamba3Geometry;

pub use crate::config::Rotation;

impl Rotation {
    /// Rotates `v` (length N, even) in place by the angles `theta` (length Na ≤ N/2).
    /// Pair `(u, w)` becomes `(u cos φ − w sin φ, u sin φ + w cos φ)`; dims outside a pair are unchanged.
    pub fn rotate(self, v: &mut [f64], theta: &[f64]) -> Result<(), Mamba3Error> {
        if !v.len().is_multiple_of(2) {
            return Err(Mamba3Error::OddStateDim { state_dim: v.len() });
        }
        if theta.len() > v.len() / 2 {
            return Err(Mamba3Error::TooManyAngles {
                num_angles: theta.len(),
                max: v.len() / 2,
            });
        }
        let cos: Vec<f64> = theta.iter().map(|t| t.cos()).collect();
        let sin: Vec<f64> = theta.iter().map(|t| t.sin()).collect();
        self.rotate_cs(v, &cos, &sin);
        Ok(())
    }

    /// Rotation with precomputed cos/sin; callers guarantee `cos.len() == sin.len() ≤ v.len() / 2`.
    pub(crate) fn rotate_cs(self, v: &mut [f64], cos: &[f64], sin: &[f64]) {
        let half = v.len() / 2;
        for (j, (&c, &s)) in cos.iter().zip(sin).enumerate() {
            let (a, b) = match self {
                Rotation::HalfSplit => (j, j + half),
                Rotation::Pairwise => (2 * j, 2 * j + 1),
            };
            let (u, w) = (v[a], v[b]);
            v[a] = u * c - w * s;
            v[b] = u * s + w * c;
        }
    }
}

/// Reduces an angle into `[0, 2π)` as `x − 2π·floor(x / 2π)`; a result that rounds onto 2π maps to 0.
/// NaN stays NaN.
pub fn reduce_angle(x: f64) -> f64 {
    let r = x - TAU * (x / TAU).floor();
    if (0.0..TAU).contains(&r) || r.is_nan() {
        r
    } else {
        0.0
    }
}

/// Per-token angle increment `π·tanh(logit)·Δ`.
pub(crate) fn angle_increment(logit: f64, dt: f64) -> f64 {
    PI * logit.tanh() * dt
}

/// θ of one (b, h) over all tokens of `geo`, as a (S, Na) buffer, continuing from `theta0` (length Na).
/// With `reduce` every θ_t is kept in [0, 2π) (decode convention), otherwise it is the plain running sum.
pub(crate) fn theta_head(
    geo: &Mamba3Geometry,
    angle_logits: &[f64],
    dt: &[f64],
    b: usize,
    h: usize,
    theta0: &[f64],
    reduce: bool,
) -> Vec<f64> {
    let (s_len, na, heads) = (geo.seq_len, geo.num_angles, geo.heads);
    let mut acc = theta0.to_vec();
    let mut out = vec![0.0; s_len * na];
    for t in 0..s_len {
        let delta = dt[(b * heads + h) * s_len + t];
        let logits = &angle_logits[((b * s_len + t) * heads + h) * na..][..na];
        for (a, &l) in acc.iter_mut().zip(logits) {
            *a += angle_increment(l, delta);
            if reduce {
                *a = reduce_angle(*a);
            }
        }
        out[t * na..(t + 1) * na].copy_from_slice(&acc);
    }
    out
}

/// Cumulative angles `θ[b,t,h,j] = Σ_{u≤t} π·tanh(angle_logits[b,u,h,j])·dt[b,h,u]` (inclusive, not reduced),
/// shape (B,S,H,Na). `angle_logits` is (B,S,H,Na), `dt` is (B,H,S).
pub fn cumulative_theta(
    geometry: &Mamba3Geometry,
    angle_logits: &[f64],
    dt: &[f64],
) -> Result<Vec<f64>, Mamba3Error> {
    geometry.validate()?;
    geometry.angle_shape().check(angle_logits.len())?;
    geometry.scalar_shape("dt").check(dt.len())?;
    let (s_len, na, heads) = (geometry.seq_len, geometry.num_angles, geometry.heads);
    let zeros = vec![0.0; na];
    let mut out = vec![0.0; angle_logits.len()];
    for b in 0..geometry.batch {
        for h in 0..heads {
            let th = theta_head(geometry, angle_logits, dt, b, h, &zeros, false);
            for t in 0..s_len {
                out[((b * s_len + t) * heads + h) * na..][..na]
                    .copy_from_slice(&th[t * na..(t + 1) * na]);
            }
        }
    }
    Ok(out)
}
