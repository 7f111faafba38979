//! The contract of the Mamba-3 MIMO backward kernels (spec §5): parameters, shared-memory layout
//! of the per-head kernel, workspace sizes and the per-(batch, head) parameter-gradient slots.

/// Threads per block of the backward kernels.
pub const BACKWARD_THREADS: u32 = 256;

/// Parameters of one backward call (both kernels take the same struct).
///
/// Inputs have the forward's layouts (see [`crate::ForwardParams`]); `dout` has the output's
/// layout, `(B,S,H,P)` X or `(B,S,R,H,P)` X in prereduce mode. Gradients:
/// dq, dk `(B,S,R,G,N)` X; dv, dz `(B,S,H,P)` X; dtrap `(B,H,S)` X (w.r.t. the raw logits);
/// ddt, dadt `(B,H,S)` f32; dangles `(B,S,H,Na)` f32 (w.r.t. the raw logits); dq_bias, dk_bias
/// `(H,R,N)`, dmimo_v/z/o `(H,R,P)`, dd `(H)`, dnorm `(H,P)` f32 (optional ones 0 when absent).
/// Workspace (f32 words, sizes from [`BackwardWorkspace`]): `ckpt` state checkpoints per segment,
/// `seg` the recomputed states of one segment, `cs` cosines and sines of every θ, `dqh`/`dkh`
/// per-value-head q/k gradients `(B,S,R,H,N)`, `slots` per-(b, h) parameter-gradient partials.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BackwardParams {
    /// q `(B,S,R,G,N)` X.
    pub q: u64,
    /// k `(B,S,R,G,N)` X.
    pub k: u64,
    /// v `(B,S,H,P)` X.
    pub v: u64,
    /// z `(B,S,H,P)` X or 0.
    pub z: u64,
    /// Raw trap logits `(B,H,S)` X.
    pub trap: u64,
    /// Step sizes `(B,H,S)` f32.
    pub dt: u64,
    /// Log decays `(B,H,S)` f32.
    pub adt: u64,
    /// Raw angle logits `(B,S,H,Na)` f32.
    pub angles: u64,
    /// `(H,R,N)` f32.
    pub q_bias: u64,
    /// `(H,R,N)` f32.
    pub k_bias: u64,
    /// `(H,R,P)` f32.
    pub mimo_v: u64,
    /// `(H,R,P)` f32 or 0 (set iff z is).
    pub mimo_z: u64,
    /// `(H,R,P)` f32, or 0 in prereduce mode.
    pub mimo_o: u64,
    /// `(H)` f32 or 0.
    pub d: u64,
    /// `(H,P)` f32 or 0 (weight 1; fused-norm mode only).
    pub norm_weight: u64,
    /// ∂L/∂out, the output's layout, X.
    pub dout: u64,
    /// ∂L/∂q `(B,S,R,G,N)` X (reduce kernel).
    pub dq: u64,
    /// ∂L/∂k `(B,S,R,G,N)` X (reduce kernel).
    pub dk: u64,
    /// ∂L/∂v `(B,S,H,P)` X.
    pub dv: u64,
    /// ∂L/∂z `(B,S,H,P)` X, or 0 (iff z is).
    pub dz: u64,
    /// ∂L/∂trap logits `(B,H,S)` X.
    pub dtrap: u64,
    /// ∂L/∂Δ `(B,H,S)` f32.
    pub ddt: u64,
    /// ∂L/∂a `(B,H,S)` f32.
    pub dadt: u64,
    /// ∂L/∂angle logits `(B,S,H,Na)` f32.
    pub dangles: u64,
    /// `(H,R,N)` f32 (reduce kernel).
    pub dq_bias: u64,
    /// `(H,R,N)` f32 (reduce kernel).
    pub dk_bias: u64,
    /// `(H,R,P)` f32 (reduce kernel).
    pub dmimo_v: u64,
    /// `(H,R,P)` f32 or 0 (reduce kernel).
    pub dmimo_z: u64,
    /// `(H,R,P)` f32 or 0 (reduce kernel).
    pub dmimo_o: u64,
    /// `(H)` f32 or 0 (reduce kernel).
    pub dd: u64,
    /// `(H,P)` f32 or 0 (reduce kernel).
    pub dnorm: u64,
    /// Workspace: states entering each segment, `(B,H,nseg,P,N)` f32 (segment 0 unused); on the
    /// tensor-core path the checkpoint sweep's states entering each chunk, `(B,H,⌈S/16⌉,P,N)`
    /// bf16.
    pub ckpt: u64,
    /// Workspace: states of the segment being reversed, `(B,H,min(L,S),P,N)` f32.
    pub seg: u64,
    /// Workspace: `cos θ`, `sin θ` of every token, `(B,H,S,2,Na)` f32; on the tensor-core path
    /// θ entering each chunk as f32 `(hi, lo)` pairs, `(B,H,⌈S/16⌉,Na,2)`.
    pub cs: u64,
    /// Workspace: per-value-head ∂L/∂q̃ `(B,S,R,H,N)` f32 (bf16 when [`Self::qkh_bf16`]).
    pub dqh: u64,
    /// Workspace: per-value-head ∂L/∂k̃ `(B,S,R,H,N)` f32 (bf16 when [`Self::qkh_bf16`]).
    pub dkh: u64,
    /// Workspace: parameter-gradient partials `(B,H,slot_len)` f32, see [`BackwardSlots`].
    pub slots: u64,
    /// Batch rows B.
    pub batch: u32,
    /// Tokens S (≥ 1).
    pub seq_len: u32,
    /// MIMO rank R.
    pub rank: u32,
    /// Value heads H.
    pub heads: u32,
    /// q/k groups G (divides H).
    pub groups: u32,
    /// State size N (even).
    pub n: u32,
    /// Head dim P.
    pub p: u32,
    /// Rotary angles Na (≤ N/2).
    pub na: u32,
    /// Segment length L (≥ 1): tokens between state checkpoints.
    pub seg_len: u32,
    /// One of [`crate::output_mode`].
    pub mode: u32,
    /// One of [`crate::rotation`].
    pub rotation: u32,
    /// RMSNorm epsilon (fused-norm mode).
    pub norm_eps: f32,
    /// Blocks of the reduce kernel's grid (grid-stride loop).
    pub reduce_blocks: u32,
    /// 1 when `dqh` / `dkh` hold bf16 (the tensor-core backward, whose activations are bf16 and
    /// whose per-head partials would otherwise double the HBM traffic of the call), 0 for f32.
    /// With 1, N is a multiple of 8 and `dqh` / `dkh` are 16-byte aligned (the reduce reads
    /// eight elements per load).
    pub qkh_bf16: u32,
    /// Which launch of a sequence-split tensor-core backward this is (one of [`split_launch`]);
    /// [`split_launch::WHOLE`] (0) for a call that is not split (grid `(H, B)`).
    pub split: u32,
    /// Boundaries of a split call: `K − 1` for `K` segments (0 when not split). Both split
    /// launches have the grid `(H, B·(K − 1))`, block y = `b + B·j`.
    pub split_boundaries: u32,
    /// Chunks of segments `0 … K − 2` (the last segment holds the rest, at least one chunk).
    pub split_chunks: u32,
    /// Workspace: the adjoint at each boundary, `(B, H, K − 1, P·N)` f32 in the kernel's thread
    /// layout (see [`split_launch`]).
    pub split_adj: u64,
    /// Workspace: `(B, H, K − 1)` f32, the state decay across segment `j + 1` at slot `j`.
    pub split_decay: u64,
    /// Workspace: `(B, H, K − 1, 8)` f32, the pieces of the first token of segment `j + 1` at
    /// slot `j` (see [`split_launch`]).
    pub split_tokens: u64,
}

/// The launches of a sequence-split tensor-core backward (`BackwardParams::split`). The
/// sequence's chunks are cut into `K` segments, `0 … K − 2` of `split_chunks` chunks each and
/// the last one holding the rest; boundary `j` lies between segments `j` and `j + 1`.
///
/// * [`FIRST`](split_launch::FIRST), block `j = 0`: the whole backward of the last segment from
///   a zero adjoint, writing the adjoint at its start (the true one at boundary `K − 2`) into
///   `split_adj` slot `K − 2`. Block `j ≥ 1`: the *local* pass of segment `j` (outputs again,
///   the output-stage backward, the adjoint update; nothing else), from a zero adjoint at its
///   end, writing the adjoint at its start into slot `j − 1` and the segment's state decay
///   into `split_decay` slot `j − 1`.
/// * [`SECOND`](split_launch::SECOND), block `j`: the whole backward of segment `j` from the
///   true adjoint at its end, `G(K − 2) = adj[K − 2]`, `G(i) = adj[i] + decay[i]·G(i + 1)`
///   (the adjoint recurrence is affine in G with a scalar decay, and the checkpoints give every
///   segment its true angles, so no rotation enters).
///
/// A segment that starts after the first hands its first token's ∂Δ and ∂λ (without the ε term
/// of the key before) to `split_tokens` words 0–3 of its boundary (∂Δ₀, ∂λ₀, λ, Δ), the segment
/// before writes that ε term (∂c of its last token) to word 4, and the reduce kernel finishes
/// the token's ∂Δ and ∂trap. Parameter partials go to `slots` row `j·B + b` for segment `j`
/// (`K·B` rows, summed by the reduce in that order).
pub mod split_launch {
    /// Not split: one launch of grid `(H, B)` over the whole sequence.
    pub const WHOLE: u32 = 0;
    /// The last segment's backward and the middle segments' local adjoint passes.
    pub const FIRST: u32 = 1;
    /// Every segment but the last, from its true end adjoint (also set on the reduce launch).
    pub const SECOND: u32 = 2;
    /// Words per boundary in `split_tokens`.
    pub const TOKEN_WORDS: u32 = 8;
}

impl BackwardParams {
    /// Index in `dout` of element (b, t, r, h, p): the (B,S,R,H,P) element in prereduce mode, the
    /// (B,S,H,P) one (every rank reads it) otherwise.
    #[inline(always)]
    pub const fn dout_index(&self, b: usize, t: usize, r: u32, h: usize, p: u32) -> usize {
        let (s_len, heads, head_dim) =
            (self.seq_len as usize, self.heads as usize, self.p as usize);
        if self.mode == crate::output_mode::PREREDUCE {
            (((b * s_len + t) * self.rank as usize + r as usize) * heads + h) * head_dim
                + p as usize
        } else {
            ((b * s_len + t) * heads + h) * head_dim + p as usize
        }
    }
}

/// Offsets (f32 elements) of one (b, h)'s parameter-gradient partials in the `slots` workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardSlots {
    /// ∂q_bias `(R,N)`.
    pub q_bias: u32,
    /// ∂k_bias `(R,N)`.
    pub k_bias: u32,
    /// ∂mimo_v `(R,P)`.
    pub mimo_v: u32,
    /// ∂mimo_z `(R,P)`.
    pub mimo_z: u32,
    /// ∂mimo_o `(R,P)`.
    pub mimo_o: u32,
    /// ∂norm weight `(P)`.
    pub norm: u32,
    /// ∂D (1).
    pub d: u32,
    /// Elements per (b, h).
    pub len: u32,
}

impl BackwardSlots {
    /// [`BackwardSlots::len`] for any sizes, saturating instead of overflowing (the workspace
    /// planner's form: it sizes geometries before they are validated).
    pub const fn len_saturating(r: u64, n: u64, p: u64) -> u64 {
        let rn = r.saturating_mul(n);
        let rp = r.saturating_mul(p);
        rn.saturating_mul(2)
            .saturating_add(rp.saturating_mul(3))
            .saturating_add(p)
            .saturating_add(1)
    }

    /// The layout for rank `r`, state size `n`, head dim `p`.
    pub const fn new(r: u32, n: u32, p: u32) -> Self {
        let rn = r * n;
        let rp = r * p;
        BackwardSlots {
            q_bias: 0,
            k_bias: rn,
            mimo_v: 2 * rn,
            mimo_z: 2 * rn + rp,
            mimo_o: 2 * rn + 2 * rp,
            norm: 2 * rn + 3 * rp,
            d: 2 * rn + 3 * rp + p,
            len: 2 * rn + 3 * rp + p + 1,
        }
    }
}

/// Workspace element counts (f32) of one backward call, saturating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardWorkspace {
    /// `ckpt`.
    pub ckpt: u64,
    /// `seg`.
    pub seg: u64,
    /// `cs`.
    pub cs: u64,
    /// `dqh` (and `dkh`).
    pub dqkh: u64,
    /// `slots`.
    pub slots: u64,
    /// `split_adj`, `split_decay` and `split_tokens` together (0 from [`Self::new`]; the host
    /// sizes them for the tensor-core backward's sequence split).
    pub split: u64,
}

impl BackwardWorkspace {
    /// Sizes for B, S, R, H, N, P, Na and segment length L.
    #[allow(clippy::too_many_arguments)]
    pub const fn new(b: u64, s: u64, r: u64, h: u64, n: u64, p: u64, na: u64, l: u64) -> Self {
        let bh = b.saturating_mul(h);
        let state = p.saturating_mul(n);
        let nseg = if l == 0 { 0 } else { s.div_ceil(l) };
        BackwardWorkspace {
            ckpt: bh.saturating_mul(nseg).saturating_mul(state),
            seg: bh
                .saturating_mul(if l < s { l } else { s })
                .saturating_mul(state),
            cs: bh.saturating_mul(s).saturating_mul(na.saturating_mul(2)),
            dqkh: bh.saturating_mul(s).saturating_mul(r).saturating_mul(n),
            slots: bh.saturating_mul(BackwardSlots::len_saturating(r, n, p)),
            split: 0,
        }
    }
}

/// Shared-memory regions of the per-head backward kernel, offsets in f32 elements. Token-indexed
/// regions have two slots (token parity); states have rows of `N + 1` (odd stride: row-wise reads
/// by consecutive p hit distinct banks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardSmem {
    /// Row stride of the state regions (N + 1).
    pub n_stride: u32,
    /// Running state `(P, N+1)` of the forward sweep and of segment recomputes.
    pub state: u32,
    /// Adjoint `G = ∂L/∂H_t` `(P, N+1)`.
    pub adj: u32,
    /// Rotated, biased q̂ `(2, R, N)`.
    pub q: u32,
    /// Rotated, biased k̂ `(2, R, N)`.
    pub k: u32,
    /// Up-projected x `(2, R, P)`.
    pub x: u32,
    /// Raw outputs y `(R, P)` of the current token.
    pub y: u32,
    /// δ = ∂L/∂y `(R, P)`.
    pub delta: u32,
    /// ∂L/∂q̂ `(R, N)` of the current token.
    pub dq: u32,
    /// ∂L/∂k̂ `(2, R, N)` (current token, and the β-term carry of the previous one).
    pub dk: u32,
    /// ∂L/∂x `(2, R, P)` (same two slots).
    pub dx: u32,
    /// Per-rank inverse RMS and `mean_p(dŷ ⊙ ŷ)`, `(2, R)`.
    pub stats: u32,
    /// Accumulated ∂q_bias `(R, N)`.
    pub acc_qb: u32,
    /// Accumulated ∂k_bias `(R, N)`.
    pub acc_kb: u32,
    /// Accumulated ∂mimo_v `(R, P)`.
    pub acc_mv: u32,
    /// Accumulated ∂mimo_z `(R, P)`.
    pub acc_mz: u32,
    /// Accumulated ∂mimo_o `(R, P)`.
    pub acc_mo: u32,
    /// Accumulated ∂norm weight `(P)`.
    pub acc_norm: u32,
    /// Accumulated ∂D per p `(P)`.
    pub acc_d: u32,
    /// Reverse running sums of ∂L/∂θ `(Na)`.
    pub suffix: u32,
    /// The θ-path part of ∂L/∂Δ per angle of the current token `(Na)`.
    pub ddt_angle: u32,
    /// Running θ totals of the forward sweep, f64 as two words each `(2·Na)`.
    pub theta: u32,
    /// Per-warp partial sums of the block reductions `(3, warps)`.
    pub red: u32,
    /// Total words.
    pub total: u32,
}

impl BackwardSmem {
    /// The layout for rank `r`, state size `n`, head dim `p`, `na` angles.
    pub const fn new(r: u32, n: u32, p: u32, na: u32) -> Self {
        let n_stride = n + 1;
        let st = p * n_stride;
        let rn = r * n;
        let rp = r * p;
        let state = 0;
        let adj = state + st;
        let q = adj + st;
        let k = q + 2 * rn;
        let x = k + 2 * rn;
        let y = x + 2 * rp;
        let delta = y + rp;
        let dq = delta + rp;
        let dk = dq + rn;
        let dx = dk + 2 * rn;
        let stats = dx + 2 * rp;
        let acc_qb = stats + 2 * r;
        let acc_kb = acc_qb + rn;
        let acc_mv = acc_kb + rn;
        let acc_mz = acc_mv + rp;
        let acc_mo = acc_mz + rp;
        let acc_norm = acc_mo + rp;
        let acc_d = acc_norm + p;
        let suffix = acc_d + p;
        let ddt_angle = suffix + na;
        // f64 words: even offset.
        let theta = (ddt_angle + na + 1) & !1;
        let red = theta + 2 * na;
        let total = red + 3 * (BACKWARD_THREADS / 32);
        BackwardSmem {
            n_stride,
            state,
            adj,
            q,
            k,
            x,
            y,
            delta,
            dq,
            dk,
            dx,
            stats,
            acc_qb,
            acc_kb,
            acc_mv,
            acc_mz,
            acc_mo,
            acc_norm,
            acc_d,
            suffix,
            ddt_angle,
            theta,
            red,
            total,
        }
    }

    /// Size in bytes.
    pub const fn bytes(&self) -> u32 {
        4 * self.total
    }
}

/// Dynamic shared memory of the per-head backward kernel in bytes ([`BackwardSmem::bytes`]);
/// `u64::MAX` when a size is too large for the layout's 32-bit offsets.
pub const fn backward_smem_bytes(r: u64, n: u64, p: u64, na: u64) -> u64 {
    const LIMIT: u64 = 1 << 12;
    if r > LIMIT || n > LIMIT || p > LIMIT || na > LIMIT {
        return u64::MAX;
    }
    BackwardSmem::new(r as u32, n as u32, p as u32, na as u32).bytes() as u64
}

/// Largest rows per chunk (`C·R`) of the chunked backward kernel.
pub const BACKWARD_CHUNK_ROWS: u32 = 64;

/// Shared-memory regions of the chunked backward kernel (`backward_chunked_*`), offsets in f32
/// elements. A chunk of `C` tokens is `M = C·R` rows (token-major, rank-minor). Row-major
/// regions have a stride one longer than their row (odd: column walks hit distinct banks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardChunkedSmem {
    /// Tokens per chunk C.
    pub chunk: u32,
    /// Rows per chunk M = C·R.
    pub rows: u32,
    /// Row stride of the N-wide regions (N + 1).
    pub sn: u32,
    /// Row stride of the P-wide regions (P + 1).
    pub sp: u32,
    /// Row stride of the M-wide regions (M + 1).
    pub sm: u32,
    /// Rotated, biased q̂ `(M, N)`.
    pub qh: u32,
    /// Rotated, biased k̂ `(M, N)`.
    pub kh: u32,
    /// x = v ⊙ mimo_v `(M, P)`.
    pub x: u32,
    /// Raw outputs y, then δ = ∂L/∂y `(M, P)`.
    pub dl: u32,
    /// The state entering the chunk `(P, N)`; later ∂L/∂x `(M, P)`.
    pub hs: u32,
    /// The adjoint of the state leaving the chunk `(P, N)`.
    pub g: u32,
    /// Raw scores q̂·k̂ `(M, M)`.
    pub sc: u32,
    /// Inter-chunk outputs, then ∂L/∂gate, then δ·x (raw, then weighted) `(M, max(M, P))`.
    pub ds: u32,
    /// Token-pair weights W(t, s) `(C, C)`.
    pub wt: u32,
    /// Token-pair decays E(t, s) `(C, C)`.
    pub et: u32,
    /// Token-pair score gradients m(t, s) `(C, C)`.
    pub pm: u32,
    /// Per-token scalars, `TOKEN_SCALARS` arrays of C.
    pub tok: u32,
    /// Per-row scalars: the inter-chunk part of ∂A, then the partials of the state-pass sums
    /// `x·G·k̂` `(1 + backward_chunked_sp_slots(N, M), M)`.
    pub row: u32,
    /// ∂θ per (token, angle) `(C, Na)`.
    pub dth: u32,
    /// θ part of ∂Δ per (token, angle) `(C, Na)`.
    pub dtha: u32,
    /// Reverse running sums of ∂θ `(Na)`.
    pub suffix: u32,
    /// ∂q_bias, ∂k_bias `(2, R, N)`.
    pub acc_qk: u32,
    /// ∂mimo_v `(R, P)`.
    pub acc_mv: u32,
    /// Per-warp output-stage partials: ∂mimo_o, ∂mimo_z, ∂norm weight, ∂D `(warps, 4, P)`.
    pub acc_w: u32,
    /// Block-reduction partials and carried scalars `(32)`.
    pub misc: u32,
    /// Total words.
    pub total: u32,
}

/// Per-token scalar arrays of the chunked backward (each `C` words, see [`BackwardChunkedSmem::tok`]).
pub const BACKWARD_TOKEN_SCALARS: u32 = 12;

/// Partials of the state-pass sums `x·G·k̂` per row that the FMA tiles of the chunked backward
/// (f32 activations) leave: one per 128-column strip of N.
pub const fn backward_chunked_sp_strips(n: u32) -> u32 {
    n.div_ceil(128)
}

/// Partials of the state-pass sums per row that the tensor-core tiles of the chunked backward
/// (bf16 activations) leave: one per warp of a 16-row group, `WARPS / ⌈M/16⌉` (at least 1).
pub const fn backward_chunked_sp_warps(m: u32) -> u32 {
    let groups = if m == 0 { 1 } else { m.div_ceil(16) };
    let per_group = BACKWARD_THREADS / 32 / groups;
    if per_group == 0 {
        1
    } else {
        per_group
    }
}

/// Partials of the state-pass sums per row that the layout holds: enough for either path.
pub const fn backward_chunked_sp_slots(n: u32, m: u32) -> u32 {
    let (strips, warps) = (backward_chunked_sp_strips(n), backward_chunked_sp_warps(m));
    if strips > warps {
        strips
    } else {
        warps
    }
}

impl BackwardChunkedSmem {
    /// The layout for `c` tokens per chunk, rank `r`, state size `n`, head dim `p`, `na` angles.
    pub const fn new(c: u32, r: u32, n: u32, p: u32, na: u32) -> Self {
        let m = c * r;
        let (sn, sp, sm) = (n + 1, p + 1, m + 1);
        let qh = 0;
        let kh = qh + m * sn;
        let x = kh + m * sn;
        let dl = x + m * sp;
        let hs = dl + m * sp;
        let hs_len = if p * sn > m * sp { p * sn } else { m * sp };
        let g = hs + hs_len;
        let sc = g + p * sn;
        let ds = sc + m * sm;
        let ds_len = if sm > sp { m * sm } else { m * sp };
        let wt = ds + ds_len;
        let et = wt + c * c;
        let pm = et + c * c;
        let tok = pm + c * c;
        let row = tok + BACKWARD_TOKEN_SCALARS * c;
        let dth = row + (1 + backward_chunked_sp_slots(n, m)) * m;
        let dtha = dth + c * na;
        let suffix = dtha + c * na;
        let acc_qk = suffix + na;
        let acc_mv = acc_qk + 2 * r * n;
        let acc_w = acc_mv + r * p;
        let misc = acc_w + (BACKWARD_THREADS / 32) * 4 * p;
        let total = misc + 32;
        BackwardChunkedSmem {
            chunk: c,
            rows: m,
            sn,
            sp,
            sm,
            qh,
            kh,
            x,
            dl,
            hs,
            g,
            sc,
            ds,
            wt,
            et,
            pm,
            tok,
            row,
            dth,
            dtha,
            suffix,
            acc_qk,
            acc_mv,
            acc_w,
            misc,
            total,
        }
    }

    /// Size in bytes.
    pub const fn bytes(&self) -> u32 {
        4 * self.total
    }
}

/// Dynamic shared memory of the chunked backward kernel in bytes for `c` tokens per chunk;
/// `u64::MAX` when a size is too large for the layout's 32-bit offsets.
pub const fn backward_chunked_smem_bytes(c: u64, r: u64, n: u64, p: u64, na: u64) -> u64 {
    const LIMIT: u64 = 1 << 12;
    if c > LIMIT || r > LIMIT || n > LIMIT || p > LIMIT || na > LIMIT {
        return u64::MAX;
    }
    BackwardChunkedSmem::new(c as u32, r as u32, n as u32, p as u32, na as u32).bytes() as u64
}

/// Threads per block of the tensor-core backward (`backward_mma_*`): eight warps, warp `w` owning
/// row tile `w mod 4` and column half `w / 4` of every chunk product.
pub const BACKWARD_MMA_THREADS: u32 = 256;

/// Shared-memory layout of the tensor-core backward (`backward_mma_bf16_r4_n128_p64_na32_c16`),
/// byte offsets from the dynamic shared base. A chunk is C = 16 tokens, M = 64 rank-flattened rows
/// `ρ = 4i + r`; the GEMM operands are bf16 tiles with row strides padded by 16 bytes (the eight
/// 16-byte rows of an `ldmatrix` matrix fall on 32 distinct banks in either orientation).
pub mod backward_mma_smem {
    /// Row stride in bytes of the 128-wide bf16 tiles (q̂, k̂, the state, its adjoint).
    pub const QK_STRIDE: u32 = 272;
    /// Row stride in bytes of the 64-wide bf16 tiles (x, δ, e^A·δ, the weighted score tiles).
    pub const X_STRIDE: u32 = 144;
    /// Row stride in bytes of the f32 `(64, 64)` region [`Y`] (72 words: the 8-byte accesses of a
    /// half-warp in the accumulator layout fall on 32 distinct banks).
    pub const Y_STRIDE: u32 = 288;
    /// Rotated, biased q̂ `(64 rows, 128)` bf16.
    pub const QH: u32 = 0;
    /// Rotated, biased k̂ `(64, 128)` bf16.
    pub const KH: u32 = QH + 64 * QK_STRIDE;
    /// The state entering the chunk, `(P = 64, N = 128)` bf16.
    pub const HS: u32 = KH + 64 * QK_STRIDE;
    /// The adjoint of the state leaving the chunk, `(P, N)` bf16 (the f32 adjoint lives in
    /// registers).
    pub const GS: u32 = HS + 64 * QK_STRIDE;
    /// x = v ⊙ mimo_v `(64, 64)` bf16.
    pub const X: u32 = GS + 64 * QK_STRIDE;
    /// δ = ∂L/∂y `(64, 64)` bf16.
    pub const DL: u32 = X + 64 * X_STRIDE;
    /// `e^{A_i}·δ` `(64, 64)` bf16.
    pub const DLA: u32 = DL + 64 * X_STRIDE;
    /// Weighted scores `W ⊙ q̂k̂ᵀ` `(64, 64)` bf16.
    pub const WS: u32 = DLA + 64 * X_STRIDE;
    /// Weighted score gradients `W ⊙ δxᵀ` `(64, 64)` bf16.
    pub const WD: u32 = WS + 64 * X_STRIDE;
    /// Raw q rows of the next chunk `(64, 128)` bf16, unpadded (the `cp.async` staging area); the
    /// output-stage partials at the end of the kernel.
    pub const RAW_Q: u32 = WD + 64 * X_STRIDE;
    /// Raw k rows of the next chunk `(64, 128)` bf16.
    pub const RAW_K: u32 = RAW_Q + 64 * 256;
    /// Two banks (chunk parity) of raw rows: v `(16, 64)` bf16 at +0, z at +[`BANK_Z`], ∂L/∂out
    /// at +[`BANK_DOUT`] (`(16, 64)`, or `(64, 64)` rows `ρ` in prereduce mode).
    pub const BANK: u32 = RAW_K + 64 * 256;
    /// Offset of the z rows within a bank.
    pub const BANK_Z: u32 = 2048;
    /// Offset of the ∂L/∂out rows within a bank.
    pub const BANK_DOUT: u32 = 4096;
    /// Bytes of one bank.
    pub const BANK_BYTES: u32 = 4096 + 8192;
    /// Recomputed outputs y `(64, 64)` f32, then the gate gradients `∂gate·silu'·mimo_z`.
    pub const Y: u32 = BANK + 2 * BANK_BYTES;
    /// `(cos θ, sin θ)` of the chunk `(16 times, 32 angles)` f32 pairs.
    pub const CS: u32 = Y + 64 * Y_STRIDE;
    /// tanh of the angle logits `(16, 32)` f32, then the θ part of ∂Δ per (time, angle).
    pub const DTHA: u32 = CS + 16 * 32 * 8;
    /// ∂L/∂θ per (time, angle) `(16, 32)` f32.
    pub const DTH: u32 = DTHA + 16 * 32 * 4;
    /// Per-token scalars `(12, 16)` f32 (see the kernel's `TOK_*` rows).
    pub const TOK: u32 = DTH + 16 * 32 * 4;
    /// Token-pair weights W(t, s) `(16, 16)` f32.
    pub const WT: u32 = TOK + 12 * 16 * 4;
    /// Token-pair decays E(t, s) `(16, 16)` f32.
    pub const ET: u32 = WT + 16 * 16 * 4;
    /// Token-pair score gradients m(t, s) `(16, 16)` f32.
    pub const PM: u32 = ET + 16 * 16 * 4;
    /// Per-row partials of the state-pass sums `x·G·k̂` `(64 rows, 2 column halves)` f32.
    pub const SP: u32 = PM + 16 * 16 * 4;
    /// Per-row partials of the inter-chunk part of ∂A, `q̂·(e^A δ H̃)` `(64, 2)` f32.
    pub const QI: u32 = SP + 64 * 2 * 4;
    /// Per-warp angle-increment totals `(8, 32)` f64.
    pub const TOT: u32 = QI + 64 * 2 * 4;
    /// Per-row-tile partials of the boundary sums of ∂θ `(4, 32)` f32.
    pub const BDT: u32 = TOT + 8 * 32 * 8;
    /// Running sums of ∂θ handed between chunks, two banks (chunk parity) `(2, 32)` f32.
    pub const SUFFIX: u32 = BDT + 4 * 32 * 4;
    /// Per-warp partials of ⟨G, H̃⟩ (8 words) and the pending first token of the chunk after (two
    /// slots by chunk parity, 5 words each, from word 16) `(32)` words.
    pub const MISC: u32 = SUFFIX + 2 * 32 * 4;
    /// Accumulated ∂q_bias partials `(4 row tiles, R, N)` f32.
    pub const ACC_QB: u32 = MISC + 32 * 4;
    /// Accumulated ∂k_bias partials `(4, R, N)` f32.
    pub const ACC_KB: u32 = ACC_QB + 4 * 4 * 128 * 4;
    /// Accumulated ∂mimo_v partials `(4, R, P)` f32.
    pub const ACC_MV: u32 = ACC_KB + 4 * 4 * 128 * 4;
    /// The identity rotation `(1, 0, 1, 0)` f32.
    pub const IDENT: u32 = ACC_MV + 4 * 4 * 64 * 4;
    /// Total dynamic shared memory (one block per H100/H200 SM).
    pub const BYTES: u32 = IDENT + 16;

    // Within the opt-in maximum of sm_90 (H100, H200).
    const _: () = assert!(BYTES <= 232_448);
}
