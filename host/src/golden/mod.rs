//! CPU golden model of Mamba-3 MIMO in f64 (semantics: `shared/spec/mamba3.md` §1–4).
//!
//! * [`forward_recurrent`]: the step-by-step recurrence (§2.1), the ground truth.
//! * [`forward_chunked`]: the chunked SSD decomposition (§2.2, §2.3) with its per-chunk pieces
//!   ([`chunk_da_cs`], [`chunk_da_cs_rev`], [`chunk_segsum`], [`trap_scale`], [`cumulative_theta`]).
//! * [`step`]: decode continuation from [`FinalStates`].
//! * [`backward_recurrent`]: reverse-mode [`Gradients`] of `Σ out ⊙ dout` through the recurrence (§5).
//!
//! All tensors are flat row-major `f64` buffers; shapes are documented on [`Mamba3Inputs`] and
//! [`FinalStates`]. Independent (batch, head) pairs run in parallel on rayon's pool.
mod backward;
mod chunked;
mod error;
mod geometry;
mod head;
mod inputs;
mod linalg;
mod output;
mod random;
mod recurrent;
mod rotation;
mod state;
mod step;

pub use backward::{backward_recurrent, Gradients};
pub use chunked::{chunk_da_cs, chunk_da_cs_rev, chunk_segsum, forward_chunked, trap_scale};
pub use error::Mamba3Error;
pub use geometry::Mamba3Geometry;
pub use inputs::{Mamba3Inputs, OutputMode, RmsNormWeight, DEFAULT_NORM_EPS};
pub use random::{RandomOptions, SplitMix64};
pub use recurrent::forward_recurrent;
pub use rotation::{cumulative_theta, reduce_angle, Rotation};
pub use state::{FinalStates, Output};
pub use step::step;
