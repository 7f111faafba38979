//! The input bundle of one Mamba-3 MIMO call and its argument checks.

use super::error::Mamba3Error;
use super::geometry::Mamba3Geometry;
use super::rotation::Rotation;

/// RMSNorm epsilon used by the reference fixtures and the upstream module.
pub const DEFAULT_NORM_EPS: f64 = 1e-5;

/// Weight and epsilon of the fused head-wise RMSNorm (spec §4.1 mode 2).
#[derive(Debug, Clone, PartialEq)]
pub struct RmsNormWeight {
    /// Per-head scale, shape (H,P).
    pub weight: Vec<f64>,
    /// Added to `mean_p(y²)` before the square root; finite and > 0.
    pub eps: f64,
}

pub use crate::config::OutputMode;

/// All inputs of one call, flat row-major `f64` buffers (see [`Mamba3Geometry`] for the letters).
/// `gate_{t,r} = silu(z_t ⊙ mimo_z_r)` when `z` is present, else 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Mamba3Inputs {
    /// Sizes.
    pub geometry: Mamba3Geometry,
    /// Rotary convention.
    pub rotation: Rotation,
    /// Read-out ("C"), (B,S,R,G,N).
    pub q: Vec<f64>,
    /// Write-in ("B"), (B,S,R,G,N).
    pub k: Vec<f64>,
    /// Value stream, (B,S,H,P).
    pub v: Vec<f64>,
    /// Gate stream, (B,S,H,P); present iff `mimo_z` is.
    pub z: Option<Vec<f64>>,
    /// Trapezoid logits before the sigmoid, (B,H,S).
    pub trap: Vec<f64>,
    /// Step sizes Δ (already softplus'ed), (B,H,S).
    pub dt: Vec<f64>,
    /// Natural-log per-step decay `a_t = A·Δ`, (B,H,S).
    pub adt: Vec<f64>,
    /// Raw (pre-tanh) angle logits, (B,S,H,Na).
    pub angle_logits: Vec<f64>,
    /// Bias added to q before rotation, (H,R,N).
    pub q_bias: Vec<f64>,
    /// Bias added to k before rotation, (H,R,N).
    pub k_bias: Vec<f64>,
    /// Rank up-projection of v, (H,R,P).
    pub mimo_v: Vec<f64>,
    /// Rank up-projection of z inside the gate, (H,R,P); present iff `z` is.
    pub mimo_z: Option<Vec<f64>>,
    /// Rank down-projection, (H,R,P); `None` selects [`OutputMode::Prereduce`].
    pub mimo_o: Option<Vec<f64>>,
    /// Skip weight, (H,).
    pub d: Option<Vec<f64>>,
    /// Fused head-wise RMSNorm; selects [`OutputMode::FusedNorm`] (needs `mimo_o`).
    pub norm: Option<RmsNormWeight>,
}

impl Mamba3Inputs {
    /// Checks the geometry, every buffer length and the option rules.
    pub fn validate(&self) -> Result<(), Mamba3Error> {
        let g = &self.geometry;
        g.validate()?;
        g.qk_shape("q").check(self.q.len())?;
        g.qk_shape("k").check(self.k.len())?;
        g.vz_shape("v").check(self.v.len())?;
        if let Some(z) = &self.z {
            g.vz_shape("z").check(z.len())?;
        }
        g.scalar_shape("trap").check(self.trap.len())?;
        g.scalar_shape("dt").check(self.dt.len())?;
        g.scalar_shape("adt").check(self.adt.len())?;
        g.angle_shape().check(self.angle_logits.len())?;
        g.bias_shape("q_bias").check(self.q_bias.len())?;
        g.bias_shape("k_bias").check(self.k_bias.len())?;
        g.mimo_shape("mimo_v").check(self.mimo_v.len())?;
        if let Some(m) = &self.mimo_z {
            g.mimo_shape("mimo_z").check(m.len())?;
        }
        if let Some(m) = &self.mimo_o {
            g.mimo_shape("mimo_o").check(m.len())?;
        }
        if let Some(d) = &self.d {
            if d.len() != g.heads {
                return Err(Mamba3Error::ShapeMismatch {
                    name: "d",
                    shape: format!("(H)=({})", g.heads),
                    expected: g.heads,
                    actual: d.len(),
                });
            }
        }
        match (&self.z, &self.mimo_z) {
            (Some(_), None) => return Err(Mamba3Error::ZWithoutMimoZ),
            (None, Some(_)) => return Err(Mamba3Error::MimoZWithoutZ),
            _ => {}
        }
        if let Some(norm) = &self.norm {
            if self.mimo_o.is_none() {
                return Err(Mamba3Error::NormWithoutMimoO);
            }
            let expected = g.heads * g.head_dim;
            if norm.weight.len() != expected {
                return Err(Mamba3Error::ShapeMismatch {
                    name: "norm.weight",
                    shape: format!("(H,P)=({},{})", g.heads, g.head_dim),
                    expected,
                    actual: norm.weight.len(),
                });
            }
            if !(norm.eps.is_finite() && norm.eps > 0.0) {
                return Err(Mamba3Error::InvalidNormEps { eps: norm.eps });
            }
        }
        Ok(())
    }

    /// The output mode selected by the present options.
    pub fn output_mode(&self) -> OutputMode {
        match (&self.mimo_o, &self.norm) {
            (None, _) => OutputMode::Prereduce,
            (Some(_), Some(_)) => OutputMode::FusedNorm,
            (Some(_), None) => OutputMode::Gated,
        }
    }

    /// Elements per token and head of the output: P, or R·P in prereduce mode.
    pub fn output_width(&self) -> usize {
        match self.output_mode() {
            OutputMode::Prereduce => self.geometry.rank * self.geometry.head_dim,
            _ => self.geometry.head_dim,
        }
    }

    /// Copy holding tokens `start..end` of every per-token tensor and all parameters unchanged
    /// (e.g. to split a sequence into a prefill part and a decode part).
    pub fn token_slice(&self, start: usize, end: usize) -> Result<Self, Mamba3Error> {
        self.validate()?;
        let g = self.geometry;
        if start >= end || end > g.seq_len {
            return Err(Mamba3Error::InvalidTokenRange {
                start,
                end,
                seq_len: g.seq_len,
            });
        }
        // Time-major tensors (B,S,...): per batch a contiguous block of tokens.
        let time_major = |buf: &[f64], per_token: usize| -> Vec<f64> {
            (0..g.batch)
                .flat_map(|b| {
                    let base = b * g.seq_len * per_token;
                    buf[base + start * per_token..base + end * per_token]
                        .iter()
                        .copied()
                })
                .collect()
        };
        // (B,H,S) tensors: per (b, h) row a contiguous range.
        let scalar = |buf: &[f64]| -> Vec<f64> {
            (0..g.batch * g.heads)
                .flat_map(|row| {
                    buf[row * g.seq_len + start..row * g.seq_len + end]
                        .iter()
                        .copied()
                })
                .collect()
        };
        let qk_tok = g.rank * g.groups * g.state_dim;
        let vz_tok = g.heads * g.head_dim;
        let ang_tok = g.heads * g.num_angles;
        Ok(Self {
            geometry: Mamba3Geometry {
                seq_len: end - start,
                ..g
            },
            rotation: self.rotation,
            q: time_major(&self.q, qk_tok),
            k: time_major(&self.k, qk_tok),
            v: time_major(&self.v, vz_tok),
            z: self.z.as_ref().map(|z| time_major(z, vz_tok)),
            trap: scalar(&self.trap),
            dt: scalar(&self.dt),
            adt: scalar(&self.adt),
            angle_logits: time_major(&self.angle_logits, ang_tok),
            q_bias: self.q_bias.clone(),
            k_bias: self.k_bias.clone(),
            mimo_v: self.mimo_v.clone(),
            mimo_z: self.mimo_z.clone(),
            mimo_o: self.mimo_o.clone(),
            d: self.d.clone(),
            norm: self.norm.clone(),
        })
    }
}
