//! Gate, fused RMSNorm and rank contraction of the raw per-rank outputs (spec §4.1).

use super::head::sigmoid;
use super::inputs::Mamba3Inputs;

fn silu(u: f64) -> f64 {
    u * sigmoid(u)
}

/// Turns the raw outputs `y` ((R,P), token `t` of head `h` in batch `b`) into `out`
/// (P values, or (R,P) in prereduce mode). `t` indexes the per-token tensors of `inp`.
pub(crate) fn finish_token(
    inp: &Mamba3Inputs,
    b: usize,
    t: usize,
    h: usize,
    y: &[f64],
    out: &mut [f64],
) {
    let geo = &inp.geometry;
    let (r_len, p) = (geo.rank, geo.head_dim);
    let z_row = inp
        .z
        .as_ref()
        .map(|z| &z[((b * geo.seq_len + t) * geo.heads + h) * p..][..p]);
    let gate = |r: usize, pp: usize| -> f64 {
        match (z_row, &inp.mimo_z) {
            (Some(z), Some(mz)) => silu(z[pp] * mz[(h * r_len + r) * p + pp]),
            _ => 1.0,
        }
    };
    let Some(mimo_o) = &inp.mimo_o else {
        for (i, o) in out[..r_len * p].iter_mut().enumerate() {
            *o = y[i] * gate(i / p, i % p);
        }
        return;
    };
    out[..p].fill(0.0);
    for r in 0..r_len {
        let yr = &y[r * p..(r + 1) * p];
        let mo = &mimo_o[(h * r_len + r) * p..][..p];
        // The norm is per rank over P only; without a norm the scale is the identity.
        let (scale, weight) = match &inp.norm {
            Some(norm) => {
                let ms = yr.iter().map(|v| v * v).sum::<f64>() / p as f64;
                (
                    1.0 / (ms + norm.eps).sqrt(),
                    Some(&norm.weight[h * p..(h + 1) * p]),
                )
            }
            None => (1.0, None),
        };
        for pp in 0..p {
            let w = weight.map_or(1.0, |w| w[pp]);
            out[pp] += yr[pp] * scale * w * gate(r, pp) * mo[pp];
        }
    }
}
