//! Problem sizes and the flat row-major shapes derived from them.

use super::error::Mamba3Error;
use super::inputs::OutputMode;

/// Sizes of one Mamba-3 MIMO problem. Every tensor is a flat row-major `f64` buffer whose shape is
/// written with these letters: `B` batch, `S` seq_len, `R` rank, `G` groups, `H` heads, `N` state_dim,
/// `P` head_dim, `Na` num_angles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mamba3Geometry {
    /// B, batch size.
    pub batch: usize,
    /// S, number of tokens (T for [`step`](super::step)).
    pub seq_len: usize,
    /// R, MIMO rank.
    pub rank: usize,
    /// G, number of q/k groups; value head `h` reads group `h / (H/G)`.
    pub groups: usize,
    /// H, number of value heads.
    pub heads: usize,
    /// N, state dimension (q/k head dim); must be even.
    pub state_dim: usize,
    /// P, value head dimension.
    pub head_dim: usize,
    /// Na, number of rotary angles per head; at most N/2 (0 disables rotation).
    pub num_angles: usize,
}

/// Most `f64` elements one `Vec` can hold (its byte size must fit in `isize`).
pub(crate) const MAX_ELEMS: usize = isize::MAX as usize / std::mem::size_of::<f64>();

/// A named shape: its name, letter pattern and dimension values.
pub(crate) struct Shape {
    pub(crate) name: &'static str,
    pub(crate) letters: &'static str,
    pub(crate) dims: Vec<usize>,
}

impl Shape {
    fn new(name: &'static str, letters: &'static str, dims: &[usize]) -> Self {
        Self {
            name,
            letters,
            dims: dims.to_vec(),
        }
    }

    /// Element count, or `None` when it exceeds what a `Vec<f64>` can hold.
    pub(crate) fn checked_len(&self) -> Option<usize> {
        self.dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= MAX_ELEMS)
    }

    /// Checks that a buffer of `actual` elements matches this shape.
    pub(crate) fn check(&self, actual: usize) -> Result<(), Mamba3Error> {
        let expected = self
            .checked_len()
            .ok_or(Mamba3Error::SizeOverflow { name: self.name })?;
        if expected == actual {
            return Ok(());
        }
        let values: Vec<String> = self.dims.iter().map(usize::to_string).collect();
        Err(Mamba3Error::ShapeMismatch {
            name: self.name,
            shape: format!("{}=({})", self.letters, values.join(",")),
            expected,
            actual,
        })
    }
}

impl Mamba3Geometry {
    /// Checks the size rules: every dimension except `num_angles` is at least 1, N is even,
    /// Na ≤ N/2, G divides H, and every tensor of this geometry fits in a `Vec<f64>`.
    pub fn validate(&self) -> Result<(), Mamba3Error> {
        let dims = [
            ("batch", self.batch),
            ("seq_len", self.seq_len),
            ("rank", self.rank),
            ("groups", self.groups),
            ("heads", self.heads),
            ("state_dim", self.state_dim),
            ("head_dim", self.head_dim),
        ];
        if let Some((name, _)) = dims.iter().find(|(_, v)| *v == 0) {
            return Err(Mamba3Error::ZeroDimension { name });
        }
        if !self.state_dim.is_multiple_of(2) {
            return Err(Mamba3Error::OddStateDim {
                state_dim: self.state_dim,
            });
        }
        if self.num_angles > self.state_dim / 2 {
            return Err(Mamba3Error::TooManyAngles {
                num_angles: self.num_angles,
                max: self.state_dim / 2,
            });
        }
        if !self.heads.is_multiple_of(self.groups) {
            return Err(Mamba3Error::HeadsNotMultipleOfGroups {
                heads: self.heads,
                groups: self.groups,
            });
        }
        let shapes = [
            self.qk_shape("q"),
            self.vz_shape("v"),
            self.scalar_shape("dt"),
            self.angle_shape(),
            self.bias_shape("q_bias"),
            self.mimo_shape("mimo_v"),
            self.prereduce_out_shape(),
            self.ssm_state_shape(),
            self.k_state_shape(),
        ];
        for shape in shapes {
            shape
                .checked_len()
                .ok_or(Mamba3Error::SizeOverflow { name: shape.name })?;
        }
        Ok(())
    }

    /// Number of value heads sharing one q/k group (H/G).
    pub fn heads_per_group(&self) -> usize {
        self.heads / self.groups.max(1)
    }

    /// The q/k group read by value head `h`.
    pub fn group_of_head(&self, h: usize) -> usize {
        h / self.heads_per_group().max(1)
    }

    pub(crate) fn qk_shape(&self, name: &'static str) -> Shape {
        Shape::new(
            name,
            "(B,S,R,G,N)",
            &[
                self.batch,
                self.seq_len,
                self.rank,
                self.groups,
                self.state_dim,
            ],
        )
    }

    pub(crate) fn vz_shape(&self, name: &'static str) -> Shape {
        Shape::new(
            name,
            "(B,S,H,P)",
            &[self.batch, self.seq_len, self.heads, self.head_dim],
        )
    }

    pub(crate) fn scalar_shape(&self, name: &'static str) -> Shape {
        Shape::new(name, "(B,H,S)", &[self.batch, self.heads, self.seq_len])
    }

    pub(crate) fn angle_shape(&self) -> Shape {
        Shape::new(
            "angle_logits",
            "(B,S,H,Na)",
            &[self.batch, self.seq_len, self.heads, self.num_angles],
        )
    }

    pub(crate) fn bias_shape(&self, name: &'static str) -> Shape {
        Shape::new(name, "(H,R,N)", &[self.heads, self.rank, self.state_dim])
    }

    pub(crate) fn mimo_shape(&self, name: &'static str) -> Shape {
        Shape::new(name, "(H,R,P)", &[self.heads, self.rank, self.head_dim])
    }

    pub(crate) fn prereduce_out_shape(&self) -> Shape {
        Shape::new(
            "out",
            "(B,S,R,H,P)",
            &[
                self.batch,
                self.seq_len,
                self.rank,
                self.heads,
                self.head_dim,
            ],
        )
    }

    /// Shape of the output cotangent `dout` of the backward pass for output mode `mode`.
    pub(crate) fn dout_shape(&self, mode: OutputMode) -> Shape {
        match mode {
            OutputMode::Prereduce => Shape {
                name: "dout",
                ..self.prereduce_out_shape()
            },
            _ => self.vz_shape("dout"),
        }
    }

    pub(crate) fn theta_state_shape(&self) -> Shape {
        Shape::new(
            "state.theta",
            "(B,H,Na)",
            &[self.batch, self.heads, self.num_angles],
        )
    }

    pub(crate) fn ssm_state_shape(&self) -> Shape {
        Shape::new(
            "state.ssm",
            "(B,H,P,N)",
            &[self.batch, self.heads, self.head_dim, self.state_dim],
        )
    }

    pub(crate) fn k_state_shape(&self) -> Shape {
        Shape::new(
            "state.k",
            "(B,R,H,N)",
            &[self.batch, self.rank, self.heads, self.state_dim],
        )
    }

    pub(crate) fn v_state_shape(&self) -> Shape {
        Shape::new(
            "state.v",
            "(B,H,P)",
            &[self.batch, self.heads, self.head_dim],
        )
    }
}
