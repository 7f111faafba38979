//! Decode: continue the recurrence from carried [`FinalStates`] over T ≥ 1 new tokens.

use super::error::Mamba3Error;
use super::head::prepare_head;
use super::inputs::Mamba3Inputs;
use super::recurrent::{par_heads, recur_head, Carry};
use super::rotation::theta_head;
use super::state::{gather_out, scatter_states, FinalStates, HeadResult};

/// Runs the §2.1 recurrence over the T tokens of `inputs` (its `seq_len` is T) starting from `state`, returns
/// their outputs (same layout as a forward pass with S = T) and leaves the state after the last token in `state`.
/// θ is kept in [0, 2π) after every token; the first token's trapezoid term uses the carried k̂ and raw v
/// (up-projected by `mimo_v`). Starting from [`FinalStates::zeros`] equals a forward pass from scratch.
pub fn step(inputs: &Mamba3Inputs, state: &mut FinalStates) -> Result<Vec<f64>, Mamba3Error> {
    inputs.validate()?;
    let geo = &inputs.geometry;
    state.validate_for(geo)?;
    let (t_len, r_len, n, p, na, heads) = (
        geo.seq_len,
        geo.rank,
        geo.state_dim,
        geo.head_dim,
        geo.num_angles,
        geo.heads,
    );
    let carried: &FinalStates = state;
    let results = par_heads(inputs, |b, h| {
        let bh = b * heads + h;
        let theta0 = &carried.theta[bh * na..(bh + 1) * na];
        let theta = theta_head(geo, &inputs.angle_logits, &inputs.dt, b, h, theta0, true);
        let hd = prepare_head(inputs, b, h, &theta);
        let mut carry = Carry {
            ssm: carried.ssm[bh * p * n..(bh + 1) * p * n].to_vec(),
            k_prev: (0..r_len)
                .flat_map(|r| {
                    let src = ((b * r_len + r) * heads + h) * n;
                    carried.k[src..src + n].iter().copied()
                })
                .collect(),
            v_prev: carried.v[bh * p..(bh + 1) * p].to_vec(),
        };
        let mut out = vec![0.0; t_len * inputs.output_width()];
        recur_head(inputs, b, h, &hd, &mut carry, &mut out);
        HeadResult {
            out,
            ssm: carry.ssm,
            k_last: carry.k_prev,
            theta_last: theta[(t_len - 1) * na..].to_vec(),
        }
    });
    scatter_states(inputs, &results, state);
    Ok(gather_out(inputs, &results))
}
