//! The step-by-step recurrence of spec §2.1: the ground truth.

use rayon::prelude::*;

use super::error::Mamba3Error;
use super::head::{prepare_head, HeadData};
use super::inputs::Mamba3Inputs;
use super::linalg::dot;
use super::output::finish_token;
use super::rotation::{reduce_angle, theta_head};
use super::state::{assemble, HeadResult, Output};

/// Runs `f(b, h)` for every (batch, head) pair in parallel; results are ordered by `b·H + h`.
pub(crate) fn par_heads<F>(inp: &Mamba3Inputs, f: F) -> Vec<HeadResult>
where
    F: Fn(usize, usize) -> HeadResult + Sync,
{
    let heads = inp.geometry.heads;
    (0..inp.geometry.batch * heads)
        .into_par_iter()
        .map(|bh| f(bh / heads, bh % heads))
        .collect()
}

/// Recurrent state of one head between tokens (all zeros at a sequence start).
pub(crate) struct Carry {
    /// H of the previous token, (P,N) p-major.
    pub(crate) ssm: Vec<f64>,
    /// Rotated, biased k̂ of the previous token, (R,N).
    pub(crate) k_prev: Vec<f64>,
    /// Raw v of the previous token, (P).
    pub(crate) v_prev: Vec<f64>,
}

/// Advances `carry` of one head over all tokens of `hd`, writing outputs into `out` ((T, W)).
pub(crate) fn recur_head(
    inp: &Mamba3Inputs,
    b: usize,
    h: usize,
    hd: &HeadData,
    carry: &mut Carry,
    out: &mut [f64],
) {
    let geo = &inp.geometry;
    let (t_len, r_len, n, p) = (geo.seq_len, geo.rank, geo.state_dim, geo.head_dim);
    let width = inp.output_width();
    let d_h = inp.d.as_ref().map_or(0.0, |d| d[h]);
    let mimo_v = &inp.mimo_v[h * r_len * p..(h + 1) * r_len * p];
    let x_init: Vec<f64> = (0..r_len * p)
        .map(|i| carry.v_prev[i % p] * mimo_v[i])
        .collect();
    let ssm = &mut carry.ssm;
    let mut y = vec![0.0; r_len * p];
    for t in 0..t_len {
        let (x_prev, k_hat_prev) = if t == 0 {
            (&x_init[..], &carry.k_prev[..])
        } else {
            (
                &hd.x[(t - 1) * r_len * p..t * r_len * p],
                &hd.k_hat[(t - 1) * r_len * n..t * r_len * n],
            )
        };
        let x_cur = &hd.x[t * r_len * p..(t + 1) * r_len * p];
        let k_cur = &hd.k_hat[t * r_len * n..(t + 1) * r_len * n];
        let q_cur = &hd.q_hat[t * r_len * n..(t + 1) * r_len * n];
        let alpha = hd.adt[t].exp();
        let beta = (1.0 - hd.lam[t]) * hd.dt[t] * alpha;
        let gamma = hd.lam[t] * hd.dt[t];
        for pp in 0..p {
            let row = &mut ssm[pp * n..(pp + 1) * n];
            for v in row.iter_mut() {
                *v *= alpha;
            }
            for r in 0..r_len {
                let cb = beta * x_prev[r * p + pp];
                let cg = gamma * x_cur[r * p + pp];
                let kp = &k_hat_prev[r * n..(r + 1) * n];
                let kc = &k_cur[r * n..(r + 1) * n];
                for ((v, &a), &c) in row.iter_mut().zip(kp).zip(kc) {
                    *v += cb * a + cg * c;
                }
            }
            for r in 0..r_len {
                let q = &q_cur[r * n..(r + 1) * n];
                y[r * p + pp] = dot(row, q) + d_h * x_cur[r * p + pp];
            }
        }
        finish_token(inp, b, t, h, &y, &mut out[t * width..(t + 1) * width]);
    }
    carry.k_prev = hd.k_hat[(t_len - 1) * r_len * n..].to_vec();
    let v_last = ((b * t_len + t_len - 1) * geo.heads + h) * p;
    carry.v_prev = inp.v[v_last..v_last + p].to_vec();
}

/// Forward pass by the §2.1 recurrence from a zero state. θ is the unreduced running sum inside the pass;
/// the returned final θ is reduced into [0, 2π).
pub fn forward_recurrent(inputs: &Mamba3Inputs) -> Result<Output, Mamba3Error> {
    inputs.validate()?;
    let geo = &inputs.geometry;
    let (t_len, r_len, n, p, na) = (
        geo.seq_len,
        geo.rank,
        geo.state_dim,
        geo.head_dim,
        geo.num_angles,
    );
    let zeros_na = vec![0.0; na];
    let results = par_heads(inputs, |b, h| {
        let theta = theta_head(
            geo,
            &inputs.angle_logits,
            &inputs.dt,
            b,
            h,
            &zeros_na,
            false,
        );
        let hd = prepare_head(inputs, b, h, &theta);
        let mut carry = Carry {
            ssm: vec![0.0; p * n],
            k_prev: vec![0.0; r_len * n],
            v_prev: vec![0.0; p],
        };
        let mut out = vec![0.0; t_len * inputs.output_width()];
        recur_head(inputs, b, h, &hd, &mut carry, &mut out);
        HeadResult {
            out,
            ssm: carry.ssm,
            k_last: carry.k_prev,
            theta_last: theta[(t_len - 1) * na..]
                .iter()
                .map(|&a| reduce_angle(a))
                .collect(),
        }
    });
    Ok(assemble(inputs, &results))
}
