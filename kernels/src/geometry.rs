//! Compile-time geometry of a kernel instantiation.
//!
//! A kernel body generic over [`Geometry`] reads its dimensions through it: [`AnyGeometry`] takes
//! them from the launch parameters; [`FixedGeometry`] makes them constants, so every loop bound,
//! shared-memory offset, division and padding test on them folds at compile time. The host
//! launches a fixed instantiation only for calls whose dimensions equal its constants.

/// Where an instantiation takes N, P, Na and the chunk size C from.
pub trait Geometry {
    /// `Some([N, P, Na])` when fixed at compile time.
    const DIMS: Option<[u32; 3]>;
    /// `Some(C)` when the chunk size is fixed at compile time (kernels without chunks: `None`).
    const CHUNK: Option<u32>;
    /// `Some(R)` when the rank is fixed at compile time (kernels instantiated per rank: `None`).
    const RANK: Option<u32> = None;

    /// (N, P, Na): the constants when fixed, else the launch parameters given.
    #[inline(always)]
    fn dims(n: u32, p: u32, na: u32) -> (u32, u32, u32) {
        Self::DIMS.map_or((n, p, na), |[fixed_n, fixed_p, fixed_na]| {
            (fixed_n, fixed_p, fixed_na)
        })
    }

    /// C: the constant when fixed, else the launch parameter given.
    #[inline(always)]
    fn chunk(chunk: u32) -> u32 {
        Self::CHUNK.unwrap_or(chunk)
    }

    /// R: the constant when fixed, else the launch parameter given.
    #[inline(always)]
    fn rank(rank: u32) -> u32 {
        Self::RANK.unwrap_or(rank)
    }
}

/// Dimensions read from the launch parameters.
pub struct AnyGeometry;

impl Geometry for AnyGeometry {
    const DIMS: Option<[u32; 3]> = None;
    const CHUNK: Option<u32> = None;
}

/// Dimensions fixed at compile time; `C = 0` leaves the chunk size to the launch parameters
/// (the decode kernels have none).
pub struct FixedGeometry<const N: u32, const P: u32, const NA: u32, const C: u32>;

impl<const N: u32, const P: u32, const NA: u32, const C: u32> Geometry
    for FixedGeometry<N, P, NA, C>
{
    const DIMS: Option<[u32; 3]> = Some([N, P, NA]);
    const CHUNK: Option<u32> = if C == 0 { None } else { Some(C) };
}

/// Rank and dimensions fixed at compile time, for kernels that take the rank as a launch
/// parameter (the chunked backward); `C = 0` leaves the chunk size to the launch parameters.
pub struct FixedRankGeometry<const R: u32, const N: u32, const P: u32, const NA: u32, const C: u32>;

impl<const R: u32, const N: u32, const P: u32, const NA: u32, const C: u32> Geometry
    for FixedRankGeometry<R, N, P, NA, C>
{
    const DIMS: Option<[u32; 3]> = Some([N, P, NA]);
    const CHUNK: Option<u32> = if C == 0 { None } else { Some(C) };
    const RANK: Option<u32> = Some(R);
}
