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
