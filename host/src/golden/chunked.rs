//! The chunked (SSD) form of spec §2.2 and its per-chunk pieces, exposed so kernels can be checked piecewise.
//!
//! The decay sums here are plain sums. The upstream kernels clip them with `min(0, ·)`, which changes nothing
//! for `a_t ≤ 0` (the module guarantees it) and would break the equality with the recurrence otherwise.

use super::error::Mamba3Error;
use super::geometry::MAX_ELEMS;
use super::head::{prepare_head, sigmoid, HeadData};
use super::inputs::Mamba3Inputs;
use super::linalg::{axpy, dot};
use super::output::finish_token;
use super::recurrent::par_heads;
use super::rotation::{reduce_angle, theta_head};
use super::state::{assemble, HeadResult, Output};

/// Checks that `len` is a positive multiple of `seq_len` and that `chunk_size ≥ 1`.
fn check_rows(
    name: &'static str,
    len: usize,
    seq_len: usize,
    chunk_size: usize,
) -> Result<(), Mamba3Error> {
    if chunk_size == 0 {
        return Err(Mamba3Error::ZeroChunkSize);
    }
    if seq_len == 0 || len == 0 || !len.is_multiple_of(seq_len) {
        return Err(Mamba3Error::RowLength { name, len, seq_len });
    }
    Ok(())
}

/// Chunks `[c·C, min(c·C + C, S))` of one row of length S.
fn chunks(seq_len: usize, chunk_size: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..seq_len)
        .step_by(chunk_size)
        .map(move |s| s..s.saturating_add(chunk_size).min(seq_len))
}

fn da_cs_row(adt: &[f64], chunk_size: usize, out: &mut [f64]) {
    for range in chunks(adt.len(), chunk_size) {
        let mut acc = 0.0;
        for t in range {
            acc += adt[t];
            out[t] = acc;
        }
    }
}

fn da_cs_rev_row(adt: &[f64], chunk_size: usize, out: &mut [f64]) {
    for range in chunks(adt.len(), chunk_size) {
        let mut acc = 0.0;
        for t in range.rev() {
            out[t] = acc;
            acc += adt[t];
        }
    }
}

fn trap_scale_row(dt: &[f64], trap: &[f64], out: &mut [f64]) {
    let s_len = dt.len();
    for t in 0..s_len {
        let gamma = sigmoid(trap[t]) * dt[t];
        // ε of the next global token; the sequence's last token has none.
        let eps_next = if t + 1 < s_len {
            dt[t + 1] * (1.0 - sigmoid(trap[t + 1]))
        } else {
            0.0
        };
        out[t] = gamma + eps_next;
    }
}

/// Segsum of one chunk of log-decays `a` (length L): (L,L) with `[i][j] = Σ_{u=j+1..=i} a_u` for i > j, else 0.
fn segsum_chunk(a: &[f64], out: &mut [f64]) {
    let len = a.len();
    for j in 0..len {
        let mut acc = 0.0;
        for i in j + 1..len {
            acc += a[i];
            out[i * len + j] = acc;
        }
    }
}

/// Chunk-local inclusive prefix sums `dA_cs[t] = Σ_{u = chunk start..=t} adt[u]`, restarting every
/// `chunk_size` tokens. `adt` is any number of rows of `seq_len` tokens (e.g. (B,H,S)); same shape out.
pub fn chunk_da_cs(
    adt: &[f64],
    seq_len: usize,
    chunk_size: usize,
) -> Result<Vec<f64>, Mamba3Error> {
    check_rows("adt", adt.len(), seq_len, chunk_size)?;
    let mut out = vec![0.0; adt.len()];
    for (a, o) in adt.chunks(seq_len).zip(out.chunks_mut(seq_len)) {
        da_cs_row(a, chunk_size, o);
    }
    Ok(out)
}

/// Chunk-local exclusive suffix sums `dA_cs_rev[t] = Σ_{u = t+1..chunk end} adt[u]` (0 at a chunk's last token;
/// a tail chunk ends at S−1). Row layout as in [`chunk_da_cs`].
pub fn chunk_da_cs_rev(
    adt: &[f64],
    seq_len: usize,
    chunk_size: usize,
) -> Result<Vec<f64>, Mamba3Error> {
    check_rows("adt", adt.len(), seq_len, chunk_size)?;
    let mut out = vec![0.0; adt.len()];
    for (a, o) in adt.chunks(seq_len).zip(out.chunks_mut(seq_len)) {
        da_cs_rev_row(a, chunk_size, o);
    }
    Ok(out)
}

/// In-chunk segment sums `L[i][j] = Σ_{u=j+1..=i} adt[chunk start + u]` for i > j, else 0, shape
/// (rows, ceil(S/C), C, C); entries of a tail chunk at or beyond S are 0.
pub fn chunk_segsum(
    adt: &[f64],
    seq_len: usize,
    chunk_size: usize,
) -> Result<Vec<f64>, Mamba3Error> {
    check_rows("adt", adt.len(), seq_len, chunk_size)?;
    let n_chunks = seq_len.div_ceil(chunk_size);
    let block = chunk_size
        .checked_mul(chunk_size)
        .and_then(|b| b.checked_mul(n_chunks))
        .and_then(|b| b.checked_mul(adt.len() / seq_len))
        .filter(|&b| b <= MAX_ELEMS)
        .ok_or(Mamba3Error::SizeOverflow { name: "segsum" })?;
    let mut out = vec![0.0; block];
    let mut seg = Vec::new();
    for (row, a) in adt.chunks(seq_len).enumerate() {
        for (c, range) in chunks(seq_len, chunk_size).enumerate() {
            let len = range.len();
            seg.clear();
            seg.resize(len * len, 0.0);
            segsum_chunk(&a[range], &mut seg);
            let base = (row * n_chunks + c) * chunk_size * chunk_size;
            for i in 0..len {
                out[base + i * chunk_size..base + i * chunk_size + len]
                    .copy_from_slice(&seg[i * len..(i + 1) * len]);
            }
        }
    }
    Ok(out)
}

/// Key scale ("trap_scale") `c_t = γ_t + ε_{t+1}` with `γ_t = σ(trap_t)·Δ_t`, `ε_u = Δ_u·(1 − σ(trap_u))` and
/// `ε_S = 0`. `dt` and `trap` are rows of `seq_len` tokens (e.g. (B,H,S)); same shape out.
pub fn trap_scale(dt: &[f64], trap: &[f64], seq_len: usize) -> Result<Vec<f64>, Mamba3Error> {
    check_rows("dt", dt.len(), seq_len, 1)?;
    if trap.len() != dt.len() {
        return Err(Mamba3Error::ShapeMismatch {
            name: "trap",
            shape: "same as dt".to_string(),
            expected: dt.len(),
            actual: trap.len(),
        });
    }
    let mut out = vec![0.0; dt.len()];
    for ((d, tr), o) in dt
        .chunks(seq_len)
        .zip(trap.chunks(seq_len))
        .zip(out.chunks_mut(seq_len))
    {
        trap_scale_row(d, tr, o);
    }
    Ok(out)
}

/// Chunked evaluation of one head from a zero state; writes outputs ((S, W)) and returns H_{S−1} ((P,N)).
fn chunked_head(
    inp: &Mamba3Inputs,
    b: usize,
    h: usize,
    hd: &HeadData,
    chunk_size: usize,
    out: &mut [f64],
) -> Vec<f64> {
    let geo = &inp.geometry;
    let (s_len, r_len, n, p) = (geo.seq_len, geo.rank, geo.state_dim, geo.head_dim);
    let width = inp.output_width();
    let d_h = inp.d.as_ref().map_or(0.0, |d| d[h]);
    let row = (b * geo.heads + h) * s_len;
    let trap = &inp.trap[row..row + s_len];
    let mut da_cs = vec![0.0; s_len];
    let mut da_rev = vec![0.0; s_len];
    let mut scale = vec![0.0; s_len];
    da_cs_row(&hd.adt, chunk_size, &mut da_cs);
    da_cs_rev_row(&hd.adt, chunk_size, &mut da_rev);
    trap_scale_row(&hd.dt, trap, &mut scale);
    let gamma: Vec<f64> = hd.lam.iter().zip(&hd.dt).map(|(l, d)| l * d).collect();
    let rows_n = |t: usize, r: usize| (t * r_len + r) * n..(t * r_len + r + 1) * n;
    let rows_p = |t: usize, r: usize| (t * r_len + r) * p..(t * r_len + r + 1) * p;

    // Carried state Sᶜ, (N,P) n-major as in the kernel.
    let mut st = vec![0.0; n * p];
    let mut y = vec![0.0; r_len * p];
    let mut seg = Vec::new();
    for range in chunks(s_len, chunk_size) {
        let (c0, len) = (range.start, range.len());
        seg.clear();
        seg.resize(len * len, 0.0);
        segsum_chunk(&hd.adt[range.clone()], &mut seg);
        for i in 0..len {
            let t = c0 + i;
            let inter = da_cs[t].exp();
            for r in 0..r_len {
                let yr = &mut y[r * p..(r + 1) * p];
                yr.fill(0.0);
                let q_hat = &hd.q_hat[rows_n(t, r)];
                for (nn, &qv) in q_hat.iter().enumerate() {
                    axpy(yr, inter * qv, &st[nn * p..(nn + 1) * p]);
                }
                // Strictly earlier times of this chunk: every rank pair, keys scaled by c_{i'}.
                for i2 in 0..i {
                    let t2 = c0 + i2;
                    let w = seg[i * len + i2].exp() * scale[t2];
                    for r2 in 0..r_len {
                        let s = w * dot(q_hat, &hd.k_hat[rows_n(t2, r2)]);
                        axpy(yr, s, &hd.x[rows_p(t2, r2)]);
                    }
                }
                // Same time step, every rank pair, weight γ_t; unrotated dot as in the kernel.
                let q_tilde = &hd.q_tilde[rows_n(t, r)];
                for r2 in 0..r_len {
                    let s = gamma[t] * dot(q_tilde, &hd.k_tilde[rows_n(t, r2)]);
                    axpy(yr, s, &hd.x[rows_p(t, r2)]);
                }
                axpy(yr, d_h, &hd.x[rows_p(t, r)]);
            }
            finish_token(inp, b, t, h, &y, &mut out[t * width..(t + 1) * width]);
        }
        // State pass: decay over the whole chunk (to S−1 for a tail), then add scaled keys.
        let decay = da_cs[c0 + len - 1].exp();
        for v in st.iter_mut() {
            *v *= decay;
        }
        for t in range {
            let w = da_rev[t].exp() * scale[t];
            for r in 0..r_len {
                let x = &hd.x[rows_p(t, r)];
                for (nn, &kv) in hd.k_hat[rows_n(t, r)].iter().enumerate() {
                    axpy(&mut st[nn * p..(nn + 1) * p], w * kv, x);
                }
            }
        }
    }
    // ε_S = 0, so the carried state after the last chunk is exactly H_{S−1}ᵀ.
    let mut ssm = vec![0.0; p * n];
    for nn in 0..n {
        for pp in 0..p {
            ssm[pp * n + nn] = st[nn * p + pp];
        }
    }
    ssm
}

/// Forward pass by the chunked SSD form (spec §2.2) with chunk size `chunk_size ≥ 1`; any S ≥ 1 (the last chunk
/// may be partial). Equal to [`forward_recurrent`](super::forward_recurrent) up to rounding.
pub fn forward_chunked(inputs: &Mamba3Inputs, chunk_size: usize) -> Result<Output, Mamba3Error> {
    inputs.validate()?;
    if chunk_size == 0 {
        return Err(Mamba3Error::ZeroChunkSize);
    }
    let geo = &inputs.geometry;
    let (s_len, r_len, n, na) = (geo.seq_len, geo.rank, geo.state_dim, geo.num_angles);
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
        let mut out = vec![0.0; s_len * inputs.output_width()];
        let ssm = chunked_head(inputs, b, h, &hd, chunk_size, &mut out);
        HeadResult {
            out,
            ssm,
            k_last: hd.k_hat[(s_len - 1) * r_len * n..].to_vec(),
            theta_last: theta[(s_len - 1) * na..]
                .iter()
                .map(|&a| reduce_angle(a))
                .collect(),
        }
    });
    Ok(assemble(inputs, &results))
}
