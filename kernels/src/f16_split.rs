//! Float32-accurate operands for the f16 tensor cores: `x = hi + lo·2⁻¹¹`, `hi` the IEEE binary16
//! rounding of `x` (11 significant bits), `lo` the remainder, scaled by 2¹¹ so that it stays a
//! normal binary16 wherever `hi` is one. A product is `hi·hi + 2⁻¹¹·(hi·lo + lo·hi)`: three passes
//! at the f16 (= bf16) tensor-core rate, where the TF32 split ([`crate::tf32x3`]) takes three
//! passes at half that rate. The dropped `lo·lo` and the rounding of `lo` leave about 2⁻²² of each
//! product. The binary16 range bounds it: `|x|` must stay below 65 504 (above, `hi` is infinite)
//! and above about 2⁻¹⁴ for full relative accuracy (below, `hi` and `lo` lose bits to subnormals),
//! so a kernel scales its tiles by powers of two into that range.

use crate::arch::float::{pack_f16x2, unpack_f16x2};

/// The scale of `lo` (2¹¹): the product of two `hi` and a scaled `lo` is 2¹¹ times its weight.
pub const LO_SCALE: f32 = 2048.0;

/// `1 / LO_SCALE`, the weight of a sum of `hi·lo` products.
pub const LO_WEIGHT: f32 = 1.0 / 2048.0;

/// Splits the pair `(x0, x1)` into packed binary16 words `(hi, lo)` (element 0 in the low half of
/// each): `hi` the nearest binary16 of each, `lo` the exact f32 remainder `x − hi` times
/// [`LO_SCALE`] rounded to binary16 when `SCALED`, unscaled otherwise (then `lo` loses bits to
/// subnormals below `|x| ≈ 2⁻³`: for tiles scaled up into binary16's range).
#[inline(always)]
pub fn split_f16x2<const SCALED: bool>(x0: f32, x1: f32) -> (u32, u32) {
    let hi = pack_f16x2(x0, x1);
    let (h0, h1) = unpack_f16x2(hi);
    // Exact: `h` is `x` rounded to 11 bits, so `x − h` fits f32's 24.
    let (r0, r1) = (x0 - h0, x1 - h1);
    let lo = if SCALED {
        pack_f16x2(r0 * LO_SCALE, r1 * LO_SCALE)
    } else {
        pack_f16x2(r0, r1)
    };
    (hi, lo)
}
