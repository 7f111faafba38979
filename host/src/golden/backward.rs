//! Reverse-mode gradients of `L = Σ out ⊙ dout` through the §2.1 recurrence (spec §5), in f64.
//!
//! Per (batch, head) the forward recurrence is re-run, keeping every state `H_t`; a reverse sweep over t
//! then carries `G_t = ∂L/∂H_t` (the full adjoint of the state, including everything later tokens read
//! through the decay). Rotations, the cumulative angle sum, the up-projection and the bias are undone
//! afterwards, per token. Per-token gradients of different (b, h) never overlap, so they are written
//! directly; gradients of shared tensors (q/k of a group, per-head parameters) are reduced in a fixed
//! order (b ascending, then h ascending), which keeps the result bit-for-bit deterministic regardless of
//! rayon's scheduling.

use std::f64::consts::PI;

use rayon::prelude::*;

use super::error::Mamba3Error;
use super::head::{prepare_head, sigmoid, HeadData};
use super::inputs::{Mamba3Inputs, OutputMode};
use super::linalg::{axpy, dot};
use super::rotation::{theta_head, Rotation};

/// Gradients of `L = Σ out ⊙ dout` with respect to every input of a [`Mamba3Inputs`].
///
/// Each field has the shape and layout of the input of the same name; an optional field is present
/// exactly when that input is. Every input is treated as independent (e.g. `dt` enters both the decay
/// coefficients and θ, and its gradient holds both paths).
#[derive(Debug, Clone, PartialEq)]
pub struct Gradients {
    /// ∂L/∂q, (B,S,R,G,N): summed over the H/G value heads that read each group.
    pub q: Vec<f64>,
    /// ∂L/∂k, (B,S,R,G,N): summed over the H/G value heads that read each group.
    pub k: Vec<f64>,
    /// ∂L/∂v, (B,S,H,P).
    pub v: Vec<f64>,
    /// ∂L/∂z, (B,S,H,P); present iff `z` is.
    pub z: Option<Vec<f64>>,
    /// ∂L/∂trap with respect to the raw (pre-sigmoid) logits, (B,H,S).
    pub trap: Vec<f64>,
    /// ∂L/∂Δ, (B,H,S): the decay/trapezoid path plus the path through θ.
    pub dt: Vec<f64>,
    /// ∂L/∂a with `a` the natural-log decay, (B,H,S).
    pub adt: Vec<f64>,
    /// ∂L/∂angle_logits with respect to the raw (pre-tanh) logits, (B,S,H,Na).
    pub angle_logits: Vec<f64>,
    /// ∂L/∂q_bias, (H,R,N).
    pub q_bias: Vec<f64>,
    /// ∂L/∂k_bias, (H,R,N).
    pub k_bias: Vec<f64>,
    /// ∂L/∂mimo_v, (H,R,P).
    pub mimo_v: Vec<f64>,
    /// ∂L/∂mimo_z, (H,R,P); present iff `mimo_z` is.
    pub mimo_z: Option<Vec<f64>>,
    /// ∂L/∂mimo_o, (H,R,P); present iff `mimo_o` is.
    pub mimo_o: Option<Vec<f64>>,
    /// ∂L/∂D, (H,); present iff `d` is.
    pub d: Option<Vec<f64>>,
    /// ∂L/∂norm.weight, (H,P); present iff `norm` is (the epsilon gets no gradient).
    pub norm_weight: Option<Vec<f64>>,
}

impl Gradients {
    /// The present gradients as `(input name, buffer)` pairs, in field order. Names are the
    /// [`Mamba3Inputs`] field names, with `norm_weight` for the norm's weight.
    pub fn tensors(&self) -> Vec<(&'static str, &[f64])> {
        let mut out: Vec<(&'static str, &[f64])> =
            vec![("q", &self.q), ("k", &self.k), ("v", &self.v)];
        if let Some(z) = &self.z {
            out.push(("z", z));
        }
        out.extend([
            ("trap", &self.trap[..]),
            ("dt", &self.dt[..]),
            ("adt", &self.adt[..]),
            ("angle_logits", &self.angle_logits[..]),
            ("q_bias", &self.q_bias[..]),
            ("k_bias", &self.k_bias[..]),
            ("mimo_v", &self.mimo_v[..]),
        ]);
        for (name, t) in [
            ("mimo_z", &self.mimo_z),
            ("mimo_o", &self.mimo_o),
            ("d", &self.d),
            ("norm_weight", &self.norm_weight),
        ] {
            if let Some(t) = t {
                out.push((name, t));
            }
        }
        out
    }
}

/// Gradients produced by one (b, h) worker; token-indexed buffers cover that head only.
struct HeadGrads {
    /// ∂L/∂q̃ (biased, unrotated) of this head, (S,R,N); also the q-bias contribution.
    dq: Vec<f64>,
    /// ∂L/∂k̃ of this head, (S,R,N).
    dk: Vec<f64>,
    /// (S,P).
    dv: Vec<f64>,
    /// (S,P) when z is present.
    dz: Option<Vec<f64>>,
    /// (S) each.
    dtrap: Vec<f64>,
    ddt: Vec<f64>,
    dadt: Vec<f64>,
    /// (S,Na).
    dangle: Vec<f64>,
    /// (R,P) each.
    dmimo_v: Vec<f64>,
    dmimo_z: Vec<f64>,
    dmimo_o: Vec<f64>,
    dd: f64,
    /// (P).
    dnorm: Vec<f64>,
}

/// `silu(u)` and `silu'(u) = σ(u)·(1 + u·(1 − σ(u)))`.
fn silu_and_grad(u: f64) -> (f64, f64) {
    let s = sigmoid(u);
    (u * s, s * (1.0 + u * (1.0 - s)))
}

/// Per-head parameter accumulators of the output stage (spec §4.1), (R,P) or (P).
struct OutputAcc<'a> {
    dmimo_z: &'a mut [f64],
    dmimo_o: &'a mut [f64],
    dnorm: &'a mut [f64],
}

/// Backward of the gate / fused norm / contraction of one token: from `dout_tok` ((P), or (R,P) in
/// prereduce mode) and the raw outputs `y` ((R,P)) computes `delta = ∂L/∂y` ((R,P)), adds ∂L/∂z of
/// this token into `dz_row` ((P), when z exists) and the parameter gradients into `acc`.
#[allow(clippy::too_many_arguments)]
fn output_backward(
    inp: &Mamba3Inputs,
    b: usize,
    t: usize,
    h: usize,
    y: &[f64],
    dout_tok: &[f64],
    delta: &mut [f64],
    dz_row: Option<&mut [f64]>,
    acc: &mut OutputAcc<'_>,
) {
    let geo = &inp.geometry;
    let (r_len, p) = (geo.rank, geo.head_dim);
    let z_row = inp
        .z
        .as_ref()
        .map(|z| &z[((b * geo.seq_len + t) * geo.heads + h) * p..][..p]);
    let mimo_z = inp
        .mimo_z
        .as_ref()
        .map(|m| &m[h * r_len * p..][..r_len * p]);
    let mimo_o = inp
        .mimo_o
        .as_ref()
        .map(|m| &m[h * r_len * p..][..r_len * p]);
    // ∂L/∂gate per (r, p), consumed by the z path below.
    let mut dgate = vec![0.0; r_len * p];
    let mut gates = vec![1.0; r_len * p];
    let mut gate_grads = vec![0.0; r_len * p];
    if let (Some(z), Some(mz)) = (z_row, mimo_z) {
        for i in 0..r_len * p {
            let (g, gp) = silu_and_grad(z[i % p] * mz[i]);
            gates[i] = g;
            gate_grads[i] = gp;
        }
    }
    for r in 0..r_len {
        let rp = r * p..(r + 1) * p;
        let (yr, gr) = (&y[rp.clone()], &gates[rp.clone()]);
        // The present options select the mode (see `Mamba3Inputs::output_mode`): no mimo_o is
        // prereduce, where dout carries one (P) row per rank.
        match (mimo_o, &inp.norm) {
            (None, _) => {
                let d = &dout_tok[rp.clone()];
                for pp in 0..p {
                    delta[r * p + pp] = d[pp] * gr[pp];
                    dgate[r * p + pp] = d[pp] * yr[pp];
                }
            }
            (Some(mo), None) => {
                let mo = &mo[rp.clone()];
                for pp in 0..p {
                    let d = dout_tok[pp];
                    delta[r * p + pp] = d * mo[pp] * gr[pp];
                    acc.dmimo_o[r * p + pp] += d * yr[pp] * gr[pp];
                    dgate[r * p + pp] = d * mo[pp] * yr[pp];
                }
            }
            (Some(mo), Some(norm)) => {
                let mo = &mo[rp.clone()];
                let w_h = &norm.weight[h * p..(h + 1) * p];
                let ms = yr.iter().map(|v| v * v).sum::<f64>() / p as f64;
                let rstd = 1.0 / (ms + norm.eps).sqrt();
                // dŷ = ∂L/∂(y·rstd); the norm backward then needs mean_p(dŷ ⊙ ŷ).
                let mut dyhat = vec![0.0; p];
                let mut mean_dot = 0.0;
                for pp in 0..p {
                    let d = dout_tok[pp];
                    let w = w_h[pp];
                    let yhat = yr[pp] * rstd;
                    dyhat[pp] = d * w * gr[pp] * mo[pp];
                    acc.dnorm[pp] += d * yhat * gr[pp] * mo[pp];
                    acc.dmimo_o[r * p + pp] += d * yhat * w * gr[pp];
                    dgate[r * p + pp] = d * yhat * w * mo[pp];
                    mean_dot += dyhat[pp] * yhat;
                }
                mean_dot /= p as f64;
                for pp in 0..p {
                    delta[r * p + pp] = rstd * (dyhat[pp] - yr[pp] * rstd * mean_dot);
                }
            }
        }
    }
    if let (Some(z), Some(mz), Some(dz)) = (z_row, mimo_z, dz_row) {
        for i in 0..r_len * p {
            let du = dgate[i] * gate_grads[i];
            dz[i % p] += du * mz[i];
            acc.dmimo_z[i] += du * z[i % p];
        }
    }
}

/// Backward of one rotation of one (t, r) vector: `hat` is the rotated vector, `dhat` = ∂L/∂hat.
/// Writes ∂L/∂(unrotated) into `dtilde` (the transposed rotation) and adds ∂L/∂θ_j into `dtheta`.
/// For a pair rotated to `(u', w')`, ∂u'/∂θ = −w' and ∂w'/∂θ = u', so only rotated values are needed.
fn rotate_backward(
    rotation: Rotation,
    hat: &[f64],
    dhat: &[f64],
    cos: &[f64],
    sin: &[f64],
    dtilde: &mut [f64],
    dtheta: &mut [f64],
) {
    dtilde.copy_from_slice(dhat);
    let half = hat.len() / 2;
    for (j, (&c, &s)) in cos.iter().zip(sin).enumerate() {
        let (a, bb) = match rotation {
            Rotation::HalfSplit => (j, j + half),
            Rotation::Pairwise => (2 * j, 2 * j + 1),
        };
        let (du, dw) = (dhat[a], dhat[bb]);
        dtilde[a] = du * c + dw * s;
        dtilde[bb] = -du * s + dw * c;
        dtheta[j] += dw * hat[a] - du * hat[bb];
    }
}

/// Gradients of one (b, h): forward recurrence keeping all states, then the reverse sweep.
fn head_backward(inp: &Mamba3Inputs, b: usize, h: usize, dout: &[f64]) -> HeadGrads {
    let geo = &inp.geometry;
    let (s_len, r_len, n, p, na, heads) = (
        geo.seq_len,
        geo.rank,
        geo.state_dim,
        geo.head_dim,
        geo.num_angles,
        geo.heads,
    );
    let rp = r_len * p;
    let rn = r_len * n;
    let pn = p * n;
    let zeros_na = vec![0.0; na];
    let theta = theta_head(geo, &inp.angle_logits, &inp.dt, b, h, &zeros_na, false);
    let hd: HeadData = prepare_head(inp, b, h, &theta);
    let d_h = inp.d.as_ref().map_or(0.0, |d| d[h]);
    let alpha: Vec<f64> = hd.adt.iter().map(|a| a.exp()).collect();
    let beta: Vec<f64> = (0..s_len)
        .map(|t| (1.0 - hd.lam[t]) * hd.dt[t] * alpha[t])
        .collect();
    let gamma: Vec<f64> = (0..s_len).map(|t| hd.lam[t] * hd.dt[t]).collect();

    // Forward: states[t] = H_t, (S,P,N) p-major; y (S,R,P). Memory S·P·N per head: the golden model
    // trades memory for the simplest exact backward (no recomputation, no division by α).
    let mut states = vec![0.0; s_len * pn];
    let mut y = vec![0.0; s_len * rp];
    for t in 0..s_len {
        let (prev, cur) = states.split_at_mut(t * pn);
        let cur = &mut cur[..pn];
        if t > 0 {
            for (c, &pv) in cur.iter_mut().zip(&prev[(t - 1) * pn..]) {
                *c = alpha[t] * pv;
            }
        }
        for pp in 0..p {
            let row = &mut cur[pp * n..(pp + 1) * n];
            for r in 0..r_len {
                if t > 0 {
                    let xb = beta[t] * hd.x[((t - 1) * r_len + r) * p + pp];
                    axpy(row, xb, &hd.k_hat[((t - 1) * r_len + r) * n..][..n]);
                }
                let xg = gamma[t] * hd.x[(t * r_len + r) * p + pp];
                axpy(row, xg, &hd.k_hat[(t * r_len + r) * n..][..n]);
            }
            for r in 0..r_len {
                let i = (t * r_len + r) * p + pp;
                y[i] = dot(row, &hd.q_hat[(t * r_len + r) * n..][..n]) + d_h * hd.x[i];
            }
        }
    }

    // Output stage backward: delta = ∂L/∂y, plus z / mimo_z / mimo_o / norm-weight gradients.
    let mut g = HeadGrads {
        dq: vec![0.0; s_len * rn],
        dk: vec![0.0; s_len * rn],
        dv: vec![0.0; s_len * p],
        dz: inp.z.as_ref().map(|_| vec![0.0; s_len * p]),
        dtrap: vec![0.0; s_len],
        ddt: vec![0.0; s_len],
        dadt: vec![0.0; s_len],
        dangle: vec![0.0; s_len * na],
        dmimo_v: vec![0.0; rp],
        dmimo_z: vec![0.0; rp],
        dmimo_o: vec![0.0; rp],
        dd: 0.0,
        dnorm: vec![0.0; p],
    };
    let mut delta = vec![0.0; s_len * rp];
    {
        let mut acc = OutputAcc {
            dmimo_z: &mut g.dmimo_z,
            dmimo_o: &mut g.dmimo_o,
            dnorm: &mut g.dnorm,
        };
        let mut dout_tok = vec![0.0; inp.output_width()];
        for t in 0..s_len {
            if inp.output_mode() == OutputMode::Prereduce {
                for r in 0..r_len {
                    let src = (((b * s_len + t) * r_len + r) * heads + h) * p;
                    dout_tok[r * p..(r + 1) * p].copy_from_slice(&dout[src..src + p]);
                }
            } else {
                let src = ((b * s_len + t) * heads + h) * p;
                dout_tok.copy_from_slice(&dout[src..src + p]);
            }
            output_backward(
                inp,
                b,
                t,
                h,
                &y[t * rp..(t + 1) * rp],
                &dout_tok,
                &mut delta[t * rp..(t + 1) * rp],
                g.dz.as_mut().map(|dz| &mut dz[t * p..(t + 1) * p]),
                &mut acc,
            );
        }
    }

    // Reverse sweep. `adj` is G_t = ∂L/∂H_t in full: the read-out of token t plus α_{t+1}·G_{t+1}.
    let mut adj = vec![0.0; pn];
    let mut dq_hat = vec![0.0; s_len * rn];
    let mut dk_hat = vec![0.0; s_len * rn];
    let mut dx = vec![0.0; s_len * rp];
    let mut gk = vec![0.0; p];
    for t in (0..s_len).rev() {
        let h_t = &states[t * pn..(t + 1) * pn];
        for r in 0..r_len {
            let dl = &delta[(t * r_len + r) * p..][..p];
            let qh = &hd.q_hat[(t * r_len + r) * n..][..n];
            let dqh = &mut dq_hat[(t * r_len + r) * n..][..n];
            for pp in 0..p {
                // y_{t,r} = H_t q̂_{t,r}: ∂/∂H_t is the outer product δ q̂ᵀ, ∂/∂q̂ is H_tᵀ δ.
                axpy(&mut adj[pp * n..(pp + 1) * n], dl[pp], qh);
                axpy(dqh, dl[pp], &h_t[pp * n..(pp + 1) * n]);
            }
            let xr = &hd.x[(t * r_len + r) * p..][..p];
            g.dd += dot(dl, xr);
            axpy(&mut dx[(t * r_len + r) * p..][..p], d_h, dl);
        }
        // γ-term (token t itself) and β-term (token t−1 seen from t) of H_t.
        let mut d_alpha = 0.0;
        let mut d_beta = 0.0;
        let mut d_gamma = 0.0;
        if t > 0 {
            d_alpha = dot(&adj, &states[(t - 1) * pn..t * pn]);
        }
        let terms: &[(usize, f64)] = if t > 0 {
            &[(t, gamma[t]), (t - 1, beta[t])]
        } else {
            &[(t, gamma[t])]
        };
        for &(s, coef) in terms {
            let mut d_coef = 0.0;
            for r in 0..r_len {
                let kh = &hd.k_hat[(s * r_len + r) * n..][..n];
                let xr = &hd.x[(s * r_len + r) * p..][..p];
                for pp in 0..p {
                    gk[pp] = dot(&adj[pp * n..(pp + 1) * n], kh);
                }
                d_coef += dot(xr, &gk);
                axpy(&mut dx[(s * r_len + r) * p..][..p], coef, &gk);
                let dkh = &mut dk_hat[(s * r_len + r) * n..][..n];
                for pp in 0..p {
                    axpy(dkh, coef * xr[pp], &adj[pp * n..(pp + 1) * n]);
                }
            }
            if s == t {
                d_gamma = d_coef;
            } else {
                d_beta = d_coef;
            }
        }
        // Chain rule through α = e^a, β = (1−λ)Δα, γ = λΔ with λ = σ(τ) (spec §5.3–5.4 in step form).
        let (lam, dt) = (hd.lam[t], hd.dt[t]);
        g.dadt[t] = d_alpha * alpha[t] + d_beta * beta[t];
        g.ddt[t] = d_beta * (1.0 - lam) * alpha[t] + d_gamma * lam;
        let d_lam = d_gamma * dt - d_beta * dt * alpha[t];
        g.dtrap[t] = d_lam * lam * (1.0 - lam);
        for a in adj.iter_mut() {
            *a *= alpha[t];
        }
    }

    // Undo the rotation per (t, r) and collect ∂L/∂θ (summed over q and k and over ranks).
    let mut dtheta = vec![0.0; s_len * na];
    let mut cos = vec![0.0; na];
    let mut sin = vec![0.0; na];
    for t in 0..s_len {
        for (j, &th) in theta[t * na..(t + 1) * na].iter().enumerate() {
            cos[j] = th.cos();
            sin[j] = th.sin();
        }
        let dth = &mut dtheta[t * na..(t + 1) * na];
        for r in 0..r_len {
            let i = (t * r_len + r) * n;
            for (hat, dhat, dtilde) in [
                (&hd.q_hat, &dq_hat, &mut g.dq),
                (&hd.k_hat, &dk_hat, &mut g.dk),
            ] {
                rotate_backward(
                    inp.rotation,
                    &hat[i..i + n],
                    &dhat[i..i + n],
                    &cos,
                    &sin,
                    &mut dtilde[i..i + n],
                    dth,
                );
            }
        }
    }

    // θ_t = Σ_{u≤t} π·tanh(l_u)·Δ_u: token u receives the reverse cumulative sum of ∂L/∂θ (spec §5.5).
    let mut suffix = vec![0.0; na];
    for t in (0..s_len).rev() {
        let logits = &inp.angle_logits[((b * s_len + t) * heads + h) * na..][..na];
        let dt = hd.dt[t];
        for j in 0..na {
            suffix[j] += dtheta[t * na + j];
            let th = logits[j].tanh();
            g.dangle[t * na + j] = suffix[j] * PI * dt * (1.0 - th * th);
            g.ddt[t] += suffix[j] * PI * th;
        }
    }

    // x_{t,r} = v_t ⊙ mimo_v_r.
    let mimo_v = &inp.mimo_v[h * rp..(h + 1) * rp];
    for t in 0..s_len {
        let v_row = &inp.v[((b * s_len + t) * heads + h) * p..][..p];
        for r in 0..r_len {
            for pp in 0..p {
                let d = dx[(t * r_len + r) * p + pp];
                g.dv[t * p + pp] += d * mimo_v[r * p + pp];
                g.dmimo_v[r * p + pp] += d * v_row[pp];
            }
        }
    }
    g
}

/// Reverse-mode gradients of `L = Σ out ⊙ dout`, with `out` the output of
/// [`forward_recurrent`](super::forward_recurrent)`(inputs)`.
///
/// `dout` has the output's layout: (B,S,H,P), or (B,S,R,H,P) when `mimo_o` is absent (prereduce).
/// θ is the unreduced inclusive running sum, as in the forward pass. Every (b, h) runs in parallel;
/// shared gradients are reduced in a fixed order, so results do not depend on the thread count.
/// Memory: one (S,P,N) state history per (b, h) in flight.
///
/// # Errors
/// Whatever [`Mamba3Inputs::validate`] rejects, and [`Mamba3Error::ShapeMismatch`] naming `dout` when
/// its length does not match the output shape.
pub fn backward_recurrent(inputs: &Mamba3Inputs, dout: &[f64]) -> Result<Gradients, Mamba3Error> {
    inputs.validate()?;
    let geo = &inputs.geometry;
    geo.dout_shape(inputs.output_mode()).check(dout.len())?;
    let (batch, s_len, r_len, groups, heads, n, p, na) = (
        geo.batch,
        geo.seq_len,
        geo.rank,
        geo.groups,
        geo.heads,
        geo.state_dim,
        geo.head_dim,
        geo.num_angles,
    );
    let per_head: Vec<HeadGrads> = (0..batch * heads)
        .into_par_iter()
        .map(|bh| head_backward(inputs, bh / heads, bh % heads, dout))
        .collect();

    let qk_len = batch * s_len * r_len * groups * n;
    let vz_len = batch * s_len * heads * p;
    let mimo_len = heads * r_len * p;
    let mut out = Gradients {
        q: vec![0.0; qk_len],
        k: vec![0.0; qk_len],
        v: vec![0.0; vz_len],
        z: inputs.z.as_ref().map(|_| vec![0.0; vz_len]),
        trap: vec![0.0; batch * heads * s_len],
        dt: vec![0.0; batch * heads * s_len],
        adt: vec![0.0; batch * heads * s_len],
        angle_logits: vec![0.0; batch * s_len * heads * na],
        q_bias: vec![0.0; heads * r_len * n],
        k_bias: vec![0.0; heads * r_len * n],
        mimo_v: vec![0.0; mimo_len],
        mimo_z: inputs.mimo_z.as_ref().map(|_| vec![0.0; mimo_len]),
        mimo_o: inputs.mimo_o.as_ref().map(|_| vec![0.0; mimo_len]),
        d: inputs.d.as_ref().map(|_| vec![0.0; heads]),
        norm_weight: inputs.norm.as_ref().map(|_| vec![0.0; heads * p]),
    };
    // Sequential reduction in (b, h) order: deterministic sums for every shared gradient.
    for (bh, hg) in per_head.iter().enumerate() {
        let (b, h) = (bh / heads, bh % heads);
        let grp = geo.group_of_head(h);
        let row = bh * s_len;
        out.trap[row..row + s_len].copy_from_slice(&hg.dtrap);
        out.dt[row..row + s_len].copy_from_slice(&hg.ddt);
        out.adt[row..row + s_len].copy_from_slice(&hg.dadt);
        for t in 0..s_len {
            for r in 0..r_len {
                let src = (t * r_len + r) * n;
                let dst = (((b * s_len + t) * r_len + r) * groups + grp) * n;
                let bias = (h * r_len + r) * n;
                axpy(&mut out.q[dst..dst + n], 1.0, &hg.dq[src..src + n]);
                axpy(&mut out.k[dst..dst + n], 1.0, &hg.dk[src..src + n]);
                axpy(&mut out.q_bias[bias..bias + n], 1.0, &hg.dq[src..src + n]);
                axpy(&mut out.k_bias[bias..bias + n], 1.0, &hg.dk[src..src + n]);
            }
            let dst = ((b * s_len + t) * heads + h) * p;
            out.v[dst..dst + p].copy_from_slice(&hg.dv[t * p..(t + 1) * p]);
            if let (Some(dz), Some(src)) = (&mut out.z, &hg.dz) {
                dz[dst..dst + p].copy_from_slice(&src[t * p..(t + 1) * p]);
            }
            let dst = ((b * s_len + t) * heads + h) * na;
            out.angle_logits[dst..dst + na].copy_from_slice(&hg.dangle[t * na..(t + 1) * na]);
        }
        let rp = r_len * p;
        axpy(&mut out.mimo_v[h * rp..(h + 1) * rp], 1.0, &hg.dmimo_v);
        if let Some(m) = &mut out.mimo_z {
            axpy(&mut m[h * rp..(h + 1) * rp], 1.0, &hg.dmimo_z);
        }
        if let Some(m) = &mut out.mimo_o {
            axpy(&mut m[h * rp..(h + 1) * rp], 1.0, &hg.dmimo_o);
        }
        if let Some(d) = &mut out.d {
            d[h] += hg.dd;
        }
        if let Some(w) = &mut out.norm_weight {
            axpy(&mut w[h * p..(h + 1) * p], 1.0, &hg.dnorm);
        }
    }
    Ok(out)
}
