//! Final / decode states (spec §4.2) and assembly of per-head results into full tensors.

use super::error::Mamba3Error;
use super::geometry::Mamba3Geometry;
use super::inputs::{Mamba3Inputs, OutputMode};

/// State left after the last token, in the decode hand-off layouts; also the state carried by [`step`](super::step).
#[derive(Debug, Clone, PartialEq)]
pub struct FinalStates {
    /// θ of the last token reduced into [0, 2π), (B,H,Na).
    pub theta: Vec<f64>,
    /// SSM state `H` of the last token, p-major, (B,H,P,N).
    pub ssm: Vec<f64>,
    /// Rotated, biased k̂ of the last token (no Δ/trap factor), (B,R,H,N).
    pub k: Vec<f64>,
    /// Raw v of the last token (not up-projected), (B,H,P).
    pub v: Vec<f64>,
}

impl FinalStates {
    /// All-zero state: stepping from it equals a forward pass from scratch (`seq_len` is irrelevant).
    pub fn zeros(geometry: &Mamba3Geometry) -> Result<Self, Mamba3Error> {
        Mamba3Geometry {
            seq_len: 1,
            ..*geometry
        }
        .validate()?;
        Ok(Self::alloc(geometry))
    }

    /// Zero state for an already validated geometry.
    pub(crate) fn alloc(g: &Mamba3Geometry) -> Self {
        Self {
            theta: vec![0.0; g.batch * g.heads * g.num_angles],
            ssm: vec![0.0; g.batch * g.heads * g.head_dim * g.state_dim],
            k: vec![0.0; g.batch * g.rank * g.heads * g.state_dim],
            v: vec![0.0; g.batch * g.heads * g.head_dim],
        }
    }

    /// Checks the four buffer lengths against `geometry` (its `seq_len` is irrelevant).
    pub fn validate_for(&self, geometry: &Mamba3Geometry) -> Result<(), Mamba3Error> {
        Mamba3Geometry {
            seq_len: 1,
            ..*geometry
        }
        .validate()?;
        geometry.theta_state_shape().check(self.theta.len())?;
        geometry.ssm_state_shape().check(self.ssm.len())?;
        geometry.k_state_shape().check(self.k.len())?;
        geometry.v_state_shape().check(self.v.len())
    }
}

/// Result of a forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// (B,S,H,P), or (B,S,R,H,P) in [`OutputMode::Prereduce`].
    pub out: Vec<f64>,
    /// States after token S−1.
    pub final_states: FinalStates,
}

/// What one (b, h) worker produces.
pub(crate) struct HeadResult {
    /// (T, W) with W the output width.
    pub(crate) out: Vec<f64>,
    /// (P,N).
    pub(crate) ssm: Vec<f64>,
    /// (R,N), k̂ of the last token.
    pub(crate) k_last: Vec<f64>,
    /// (Na), reduced θ of the last token.
    pub(crate) theta_last: Vec<f64>,
}

/// Scatters per-head outputs (ordered by `b·H + h`) into the output layout of `inp`.
pub(crate) fn gather_out(inp: &Mamba3Inputs, results: &[HeadResult]) -> Vec<f64> {
    let g = &inp.geometry;
    let (s_len, heads, p) = (g.seq_len, g.heads, g.head_dim);
    let width = inp.output_width();
    let mut out = vec![0.0; g.batch * s_len * heads * width];
    for (bh, res) in results.iter().enumerate() {
        let (b, h) = (bh / heads, bh % heads);
        for t in 0..s_len {
            let src = &res.out[t * width..(t + 1) * width];
            match inp.output_mode() {
                OutputMode::Prereduce => {
                    for r in 0..g.rank {
                        let dst = (((b * s_len + t) * g.rank + r) * heads + h) * p;
                        out[dst..dst + p].copy_from_slice(&src[r * p..(r + 1) * p]);
                    }
                }
                _ => {
                    let dst = ((b * s_len + t) * heads + h) * p;
                    out[dst..dst + p].copy_from_slice(src);
                }
            }
        }
    }
    out
}

/// Writes per-head final states into `states`, whose buffers already have the right lengths.
pub(crate) fn scatter_states(inp: &Mamba3Inputs, results: &[HeadResult], states: &mut FinalStates) {
    let g = &inp.geometry;
    let (heads, n, p, na) = (g.heads, g.state_dim, g.head_dim, g.num_angles);
    let last = g.seq_len - 1;
    for (bh, res) in results.iter().enumerate() {
        let (b, h) = (bh / heads, bh % heads);
        states.theta[bh * na..(bh + 1) * na].copy_from_slice(&res.theta_last);
        states.ssm[bh * p * n..(bh + 1) * p * n].copy_from_slice(&res.ssm);
        for r in 0..g.rank {
            let dst = ((b * g.rank + r) * heads + h) * n;
            states.k[dst..dst + n].copy_from_slice(&res.k_last[r * n..(r + 1) * n]);
        }
        let v_src = ((b * g.seq_len + last) * heads + h) * p;
        states.v[bh * p..(bh + 1) * p].copy_from_slice(&inp.v[v_src..v_src + p]);
    }
}

/// Builds the [`Output`] of a forward pass from its per-head results.
pub(crate) fn assemble(inp: &Mamba3Inputs, results: &[HeadResult]) -> Output {
    let out = gather_out(inp, results);
    let mut final_states = FinalStates::alloc(&inp.geometry);
    scatter_states(inp, results, &mut final_states);
    Output { out, final_states }
}
