//! Per-(batch, head) token preparation shared by every evaluation form (spec §2.1 first bullets).

use super::inputs::Mamba3Inputs;

/// Everything one (b, h) needs per token, with rank vectors flattened as `(t, r)` rows.
pub(crate) struct HeadData {
    /// Biased, unrotated q̃, (T,R,N).
    pub(crate) q_tilde: Vec<f64>,
    /// Biased, unrotated k̃, (T,R,N).
    pub(crate) k_tilde: Vec<f64>,
    /// Rotated q̂, (T,R,N).
    pub(crate) q_hat: Vec<f64>,
    /// Rotated k̂, (T,R,N).
    pub(crate) k_hat: Vec<f64>,
    /// Up-projected values x = v ⊙ mimo_v_r, (T,R,P).
    pub(crate) x: Vec<f64>,
    /// Δ_t.
    pub(crate) dt: Vec<f64>,
    /// λ_t = σ(trap_t).
    pub(crate) lam: Vec<f64>,
    /// a_t (natural-log decay).
    pub(crate) adt: Vec<f64>,
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Builds the per-token data of head `h` in batch `b`, rotating with `theta` ((T,Na), already cumulative).
pub(crate) fn prepare_head(inp: &Mamba3Inputs, b: usize, h: usize, theta: &[f64]) -> HeadData {
    let geo = &inp.geometry;
    let (t_len, r_len, n, p, na) = (
        geo.seq_len,
        geo.rank,
        geo.state_dim,
        geo.head_dim,
        geo.num_angles,
    );
    let g = geo.group_of_head(h);
    let rows = t_len * r_len;
    let mut hd = HeadData {
        q_tilde: vec![0.0; rows * n],
        k_tilde: vec![0.0; rows * n],
        q_hat: vec![0.0; rows * n],
        k_hat: vec![0.0; rows * n],
        x: vec![0.0; rows * p],
        dt: vec![0.0; t_len],
        lam: vec![0.0; t_len],
        adt: vec![0.0; t_len],
    };
    let mut cos = vec![0.0; na];
    let mut sin = vec![0.0; na];
    for t in 0..t_len {
        for (j, &th) in theta[t * na..(t + 1) * na].iter().enumerate() {
            cos[j] = th.cos();
            sin[j] = th.sin();
        }
        let v_row = &inp.v[((b * t_len + t) * geo.heads + h) * p..][..p];
        for r in 0..r_len {
            let src = (((b * t_len + t) * r_len + r) * geo.groups + g) * n;
            let bias = (h * r_len + r) * n;
            let dst = (t * r_len + r) * n;
            for (tilde, hat, raw, bias_vec) in [
                (&mut hd.q_tilde, &mut hd.q_hat, &inp.q, &inp.q_bias),
                (&mut hd.k_tilde, &mut hd.k_hat, &inp.k, &inp.k_bias),
            ] {
                let tilde = &mut tilde[dst..dst + n];
                for ((o, &a), &c) in tilde
                    .iter_mut()
                    .zip(&raw[src..src + n])
                    .zip(&bias_vec[bias..bias + n])
                {
                    *o = a + c;
                }
                let hat = &mut hat[dst..dst + n];
                hat.copy_from_slice(tilde);
                inp.rotation.rotate_cs(hat, &cos, &sin);
            }
            let mv = &inp.mimo_v[(h * r_len + r) * p..][..p];
            for ((o, &vv), &m) in hd.x[(t * r_len + r) * p..][..p]
                .iter_mut()
                .zip(v_row)
                .zip(mv)
            {
                *o = vv * m;
            }
        }
        let s = (b * geo.heads + h) * t_len + t;
        hd.dt[t] = inp.dt[s];
        hd.lam[t] = sigmoid(inp.trap[s]);
        hd.adt[t] = inp.adt[s];
    }
    hd
}
