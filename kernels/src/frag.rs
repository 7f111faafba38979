//! Lane maps of the warp-level matrix fragments: which element of a tile lane `lane` holds in its
//! register slot `i`.
//!
//! Kernels never compute `lane / 4` or `lane % 4` themselves; they ask these `const fn`s. The maps
//! follow the figures of PTX ISA §9.7.13.4.8 (mma m16n8k16 / m16n8k8) and §9.7.13.4.15 (ldmatrix).
//! `group = lane / 4` and `quad = lane % 4` are the ISA's `groupID` and `threadID_in_group`.

/// Element (row, col) of the 16×16 bf16 A tile (row-major) held by `lane` in element slot `i`
/// (0..8; slots 2j and 2j+1 are the low and high halves of register j).
#[inline(always)]
pub const fn a_m16k16(lane: u32, i: u32) -> (u32, u32) {
    let (group, quad) = (lane / 4, lane % 4);
    let row = group + 8 * ((i / 2) % 2);
    let col = quad * 2 + (i % 2) + 8 * (i / 4);
    (row, col)
}

/// Element (k, n) of the 16×8 bf16 B tile held by `lane` in element slot `i` (0..4; slots 2j and
/// 2j+1 are the halves of register j).
#[inline(always)]
pub const fn b_k16n8(lane: u32, i: u32) -> (u32, u32) {
    let (group, quad) = (lane / 4, lane % 4);
    (quad * 2 + (i % 2) + 8 * (i / 2), group)
}

/// Element (row, col) of the 16×8 bf16 A tile of `mma.m16n8k8` held by `lane` in element slot
/// `i` (0..4; slots 2j and 2j+1 are the low and high halves of register j).
#[inline(always)]
pub const fn a_m16k8(lane: u32, i: u32) -> (u32, u32) {
    let (group, quad) = (lane / 4, lane % 4);
    (group + 8 * (i / 2), quad * 2 + (i % 2))
}

/// Element (k, n) of the 8×8 bf16 B tile of `mma.m16n8k8` held by `lane` in element slot `i`
/// (0..2, the low and high halves of its one register).
#[inline(always)]
pub const fn b_k8n8(lane: u32, i: u32) -> (u32, u32) {
    let (group, quad) = (lane / 4, lane % 4);
    (quad * 2 + i, group)
}

/// Element (row, col) of the 16×8 f32 accumulator held by `lane` in slot `i` (0..4).
#[inline(always)]
pub const fn acc_m16n8(lane: u32, i: u32) -> (u32, u32) {
    let (group, quad) = (lane / 4, lane % 4);
    (group + 8 * (i / 2), quad * 2 + (i % 2))
}

/// Element (row, col) of the 16×8 tf32 A tile held by `lane` in register `i` (0..4).
#[inline(always)]
pub const fn a_m16k8_tf32(lane: u32, i: u32) -> (u32, u32) {
    let (group, quad) = (lane / 4, lane % 4);
    (group + 8 * (i % 2), quad + 4 * (i / 2))
}

/// Element (k, n) of the 8×8 tf32 B tile held by `lane` in register `i` (0..2).
#[inline(always)]
pub const fn b_k8n8_tf32(lane: u32, i: u32) -> (u32, u32) {
    let (group, quad) = (lane / 4, lane % 4);
    (quad + 4 * i, group)
}

/// Element (row, col) of 8×8 matrix `reg` that `ldmatrix .x4` puts in the `half` (0 low, 1 high)
/// of register `reg` of `lane`.
#[inline(always)]
pub const fn ldmatrix_x4(lane: u32, half: u32) -> (u32, u32) {
    (lane / 4, 2 * (lane % 4) + half)
}

/// As [`ldmatrix_x4`] for `ldmatrix .x4.trans` (each 8×8 matrix transposed on the way).
#[inline(always)]
pub const fn ldmatrix_x4_trans(lane: u32, half: u32) -> (u32, u32) {
    (2 * (lane % 4) + half, lane / 4)
}

/// Row and column (in f32 elements) of the row address `lane` gives to `ldmatrix .x4` so that the
/// four registers are the TF32 A operand (a0..a3, see [`a_m16k8_tf32`]) of a row-major 16×8 f32
/// tile: each 8×8 b16 matrix of `ldmatrix` is an 8×4 block of f32, lane `l` receiving word `l%4`
/// of row `l/4`; matrices 0–3 are rows 0–7 / 8–15 at columns 0–3, then the same at columns 4–7.
#[inline(always)]
pub const fn ldmatrix_x4_tf32_a(lane: u32) -> (u32, u32) {
    let matrix = lane / 8;
    (lane % 8 + 8 * (matrix % 2), 4 * (matrix / 2))
}

/// As [`ldmatrix_x4_tf32_a`] for two TF32 B operands (b0, b1 of [`b_k8n8_tf32`] for columns 0–7,
/// then for columns 8–15) of an 8-deep tile stored column by column (row `n` of the stored tile
/// is column `n` of B, depth contiguous): matrices 0–3 are stored rows 0–7 at depth 0–3 and 4–7,
/// then rows 8–15 at depth 0–3 and 4–7.
#[inline(always)]
pub const fn ldmatrix_x4_tf32_b(lane: u32) -> (u32, u32) {
    let matrix = lane / 8;
    (lane % 8 + 8 * (matrix / 2), 4 * (matrix % 2))
}

/// The A rows (`g`, `g + 8`), the B column (`g`) and the first of the eight consecutive depths
/// that `lane` holds under the depth order of [`crate::tile_mma`]: lane quad `q` holds depths
/// `8q .. 8q + 8` of each block of 32 consecutive depths, as four of each of two `mma.m16n8k16`
/// steps (those of step `s` at `8q + 4s`) or two of each of four TF32 `mma.m16n8k8` steps (at
/// `8q + 2s`), which the ISA allows because A and B share the order of the summed index.
#[inline(always)]
pub const fn mma_k32_lane(lane: u32) -> (u32, u32) {
    (lane / 4, 8 * (lane % 4))
}

/// Byte offset from a bf16 tile's base of the row address `lane` gives to `ldmatrix .x4` for the
/// A operand of `mma.m16n8k16` (rows `m0 .. m0 + 16`, depths `k0 .. k0 + 16`) when the tile is
/// stored row-major `[m][k]` with row stride `stride` bytes: matrices 0–3 are rows 0–7 / 8–15 at
/// depths 0–7, then the same at depths 8–15 (a0..a3 of [`a_m16k16`]).
#[inline(always)]
pub const fn ldsm_a(stride: u32, m0: u32, k0: u32, lane: u32) -> u32 {
    (m0 + lane % 16) * stride + 2 * (k0 + 8 * (lane / 16))
}

/// As [`ldsm_a`] for a tile stored transposed, `[k][m]`, read with `ldmatrix .x4.trans`:
/// matrices 0–3 are depths 0–7 at rows 0–7 and 8–15, then depths 8–15 likewise.
#[inline(always)]
pub const fn ldsm_a_trans(stride: u32, m0: u32, k0: u32, lane: u32) -> u32 {
    (k0 + lane % 8 + 8 * (lane / 16)) * stride + 2 * (m0 + 8 * ((lane / 8) % 2))
}

/// As [`ldsm_a`] for two B operands of `mma.m16n8k16` (registers 0–1: columns `n0 .. n0 + 8`,
/// 2–3: `n0 + 8 .. n0 + 16`, depths `k0 .. k0 + 16`, see [`b_k16n8`]) of a tile stored `[n][k]`
/// (row `n` of the stored tile is column `n` of B).
#[inline(always)]
pub const fn ldsm_b(stride: u32, n0: u32, k0: u32, lane: u32) -> u32 {
    (n0 + lane % 8 + 8 * (lane / 16)) * stride + 2 * (k0 + 8 * ((lane / 8) % 2))
}

/// As [`ldsm_b`] for a tile stored `[k][n]`, read with `ldmatrix .x4.trans`.
#[inline(always)]
pub const fn ldsm_b_trans(stride: u32, k0: u32, n0: u32, lane: u32) -> u32 {
    (k0 + lane % 16) * stride + 2 * (n0 + 8 * (lane / 16))
}
