//! The backward kernels' source (`kernels/src/backward_recurrent.rs`) compiled for the host
//! against emulated device primitives, checked against the float64 golden backward on the CPU.
//!
//! Each block runs as `BACKWARD_THREADS` OS threads with a real barrier; shared memory accesses
//! are bounds- and race-checked, global accesses checked against the launch's buffers (see
//! `tests/emulation`). Every output is poisoned with NaN before the launch and must come back
//! finite. Slow, so the geometries are small; they cover every output mode, both rotations,
//! G ≥ 1, S not a multiple of the segment length, S = 1 and both activation types.

#![allow(dead_code)]

mod common;
mod emulation;

use mamba3::golden::{backward_recurrent, Gradients, Mamba3Inputs, OutputMode, Rotation};
use mamba3_abi::{
    backward_mma_smem, forward_mma_smem, output_mode, rotation, segment_combine_smem_bytes,
    split_launch, BackwardChunkedSmem, BackwardParams, BackwardSmem, BackwardWorkspace,
    ForwardParams, SegmentCombineParams, BACKWARD_MMA_THREADS, BACKWARD_THREADS,
    FORWARD_MMA_THREADS, SEGMENT_COMBINE_THREADS,
};

use common::{geo, grad_err, letters, opts, quantize, worst_over};
use emulation::{arch, elem, frag, math, smem, warp_reduce, warp_scan, Memory};

#[path = "../kernels/src/angles.rs"]
mod angles;

#[path = "../kernels/src/geometry.rs"]
mod geometry;

#[allow(clippy::all)]
#[path = "../kernels/src/backward_recurrent.rs"]
mod backward_recurrent;

#[allow(clippy::all)]
#[path = "../kernels/src/backward_chunked.rs"]
mod backward_chunked;

#[path = "../kernels/src/tile_mac.rs"]
mod tile_mac;

#[path = "../kernels/src/tile_mma.rs"]
mod tile_mma;

#[allow(clippy::all)]
#[path = "../kernels/src/chunked_forward.rs"]
mod chunked_forward;

#[allow(clippy::all)]
#[path = "../kernels/src/chunked_forward_mma.rs"]
mod chunked_forward_mma;

#[allow(clippy::all)]
#[path = "../kernels/src/backward_mma.rs"]
mod backward_mma;

#[allow(clippy::all)]
#[path = "../kernels/src/segment_state.rs"]
mod segment_state;

#[allow(clippy::all)]
#[path = "../kernels/src/forward_ws.rs"]
mod forward_ws;

/// The per-head backward kernel an emulated run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// `backward_head` (segments of `seg_len` tokens).
    TokenSerial,
    /// `backward_chunked` (chunks of `seg_len` tokens).
    Chunked,
    /// The checkpoint sweep then `backward_mma` (R = 4, N = 128, P = 64, Na = 32, bf16, C = 16).
    TensorCore,
    /// `backward_mma` from the checkpoints of the forward with checkpoints (a training step's
    /// forward), after checking them bitwise against the sweep's and its outputs bitwise
    /// against the plain forward's.
    TensorCoreAfterForward,
    /// `backward_mma` from the checkpoints of the warp-specialized forward with checkpoints (a
    /// training step's forward on compute capability 9.0), after checking them against the
    /// sweep's (to the state's bf16 rounding and θ's f32 pair; its products round differently)
    /// and its outputs bitwise against the plain warp-specialized forward's.
    WarpSpecializedAfterForward,
    /// The checkpoint sweep (split into `sweep_segments` segments when above 1: the segment-state
    /// pass, the combine pass and the sweep from the combined states, with the hand-off slots
    /// where the host puts them, in the split adjoint and per-head ∂k̃ regions) then
    /// `backward_mma` split into `boundaries + 1` segments of `chunks` chunks (the last holding
    /// the rest): its two launches (`split_launch`) and the reduce. With `wgmma`, the sweep and
    /// its segment-state pass are the `wgmma` twins (`WG = true`, as compute capability 9.0 runs
    /// them).
    TensorCoreSplit {
        boundaries: u32,
        chunks: u32,
        sweep_segments: u32,
        wgmma: bool,
    },
}

/// Random ∂L/∂out in the output's layout, rounded to the activation type.
fn random_dout(inp: &Mamba3Inputs, seed: u64, bf16: bool) -> Vec<f64> {
    let g = inp.geometry;
    let len = g.batch * g.seq_len * g.heads * inp.output_width();
    let mut rng = mamba3::golden::SplitMix64::new(seed);
    (0..len)
        .map(|_| {
            let v = rng.normal();
            if bf16 {
                half::bf16::from_f64(v).to_f64()
            } else {
                v as f32 as f64
            }
        })
        .collect()
}

/// Runs the emulated per-head `kernel` (`seg_len` tokens per chunk or segment) and the reduce
/// kernel; returns the gradients in the golden model's layout.
fn run_emulated(
    inp: &Mamba3Inputs,
    dout_host: &[f64],
    seg_len: usize,
    bf16: bool,
    kernel: Kernel,
) -> Gradients {
    let chunked = kernel == Kernel::Chunked;
    let tensor_core = matches!(
        kernel,
        Kernel::TensorCore
            | Kernel::TensorCoreAfterForward
            | Kernel::WarpSpecializedAfterForward
            | Kernel::TensorCoreSplit { .. }
    );
    let (boundaries, split_chunks, sweep_segments, wgmma) = match kernel {
        Kernel::TensorCoreSplit {
            boundaries,
            chunks,
            sweep_segments,
            wgmma,
        } => (boundaries, chunks, sweep_segments.max(1), wgmma),
        _ => (0, 0, 1, false),
    };
    let g = inp.geometry;
    let (b, s, r, gr, h, n, p, na) = letters(&g);
    let mut bufs = Memory::default();
    let q = bufs.put_act(&inp.q, bf16, "q");
    let k = bufs.put_act(&inp.k, bf16, "k");
    let v = bufs.put_act(&inp.v, bf16, "v");
    let z = inp.z.as_ref().map_or(0, |z| bufs.put_act(z, bf16, "z"));
    let trap = bufs.put_act(&inp.trap, bf16, "trap");
    let dout = bufs.put_act(dout_host, bf16, "dout");
    let dt = bufs.put_f32(&inp.dt, "dt");
    let adt = bufs.put_f32(&inp.adt, "adt");
    let angles = bufs.put_f32(&inp.angle_logits, "angles");
    let q_bias = bufs.put_f32(&inp.q_bias, "q_bias");
    let k_bias = bufs.put_f32(&inp.k_bias, "k_bias");
    let mimo_v = bufs.put_f32(&inp.mimo_v, "mimo_v");
    let mimo_z = inp.mimo_z.as_ref().map_or(0, |m| bufs.put_f32(m, "mimo_z"));
    let mimo_o = inp.mimo_o.as_ref().map_or(0, |m| bufs.put_f32(m, "mimo_o"));
    let d = inp.d.as_ref().map_or(0, |m| bufs.put_f32(m, "d"));
    let norm_weight = inp
        .norm
        .as_ref()
        .map_or(0, |nw| bufs.put_f32(&nw.weight, "norm_weight"));

    let qk_len = b * s * r * gr * n;
    let vz_len = b * s * h * p;
    let sc_len = b * h * s;
    let mimo_len = h * r * p;
    let dq = bufs.poison_act(qk_len, bf16, "dq");
    let dk = bufs.poison_act(qk_len, bf16, "dk");
    let dv = bufs.poison_act(vz_len, bf16, "dv");
    let dz = if inp.z.is_some() {
        bufs.poison_act(vz_len, bf16, "dz")
    } else {
        0
    };
    let dtrap = bufs.poison_act(sc_len, bf16, "dtrap");
    let ddt = bufs.poison_f32(sc_len, "ddt");
    let dadt = bufs.poison_f32(sc_len, "dadt");
    let dangles = bufs.poison_f32(b * s * h * na, "dangles");
    let dq_bias = bufs.poison_f32(h * r * n, "dq_bias");
    let dk_bias = bufs.poison_f32(h * r * n, "dk_bias");
    let dmimo_v = bufs.poison_f32(mimo_len, "dmimo_v");
    let dmimo_z = if inp.mimo_z.is_some() {
        bufs.poison_f32(mimo_len, "dmimo_z")
    } else {
        0
    };
    let dmimo_o = if inp.mimo_o.is_some() {
        bufs.poison_f32(mimo_len, "dmimo_o")
    } else {
        0
    };
    let dd = if inp.d.is_some() {
        bufs.poison_f32(h, "dd")
    } else {
        0
    };
    let dnorm = if inp.norm.is_some() {
        bufs.poison_f32(h * p, "dnorm")
    } else {
        0
    };
    let ws = BackwardWorkspace::new(
        b as u64,
        s as u64,
        r as u64,
        h as u64,
        n as u64,
        p as u64,
        na as u64,
        seg_len as u64,
    );
    let ckpt = bufs.poison_f32(ws.ckpt as usize, "ckpt");
    let seg = bufs.poison_f32(ws.seg as usize, "seg");
    let cs = bufs.poison_f32(ws.cs as usize, "cs");
    let dqh = bufs.poison_f32(ws.dqkh as usize, "dqh");
    let dkh = bufs.poison_f32(ws.dqkh as usize, "dkh");
    let slots = bufs.poison_f32(ws.slots as usize * (boundaries as usize + 1), "slots");
    let split_rows = b * h * boundaries as usize;
    let (split_adj, split_decay, split_tokens) = if boundaries > 0 {
        (
            bufs.poison_f32(split_rows * p * n, "split_adj"),
            bufs.poison_f32(split_rows, "split_decay"),
            bufs.poison_f32(
                split_rows * split_launch::TOKEN_WORDS as usize,
                "split_tokens",
            ),
        )
    } else {
        (0, 0, 0)
    };

    let reduce_blocks = 3u32;
    let params = BackwardParams {
        q,
        k,
        v,
        z,
        trap,
        dt,
        adt,
        angles,
        q_bias,
        k_bias,
        mimo_v,
        mimo_z,
        mimo_o,
        d,
        norm_weight,
        dout,
        dq,
        dk,
        dv,
        dz,
        dtrap,
        ddt,
        dadt,
        dangles,
        dq_bias,
        dk_bias,
        dmimo_v,
        dmimo_z,
        dmimo_o,
        dd,
        dnorm,
        ckpt,
        seg,
        cs,
        dqh,
        dkh,
        slots,
        batch: b as u32,
        seq_len: s as u32,
        rank: r as u32,
        heads: h as u32,
        groups: gr as u32,
        n: n as u32,
        p: p as u32,
        na: na as u32,
        seg_len: seg_len as u32,
        mode: match inp.output_mode() {
            OutputMode::Gated => output_mode::GATED,
            OutputMode::FusedNorm => output_mode::FUSED_NORM,
            OutputMode::Prereduce => output_mode::PREREDUCE,
        },
        rotation: match inp.rotation {
            Rotation::HalfSplit => rotation::HALF_SPLIT,
            Rotation::Pairwise => rotation::PAIRWISE,
        },
        norm_eps: inp.norm.as_ref().map_or(1e-5, |nw| nw.eps as f32),
        reduce_blocks,
        qkh_bf16: u32::from(tensor_core),
        split: split_launch::WHOLE,
        split_boundaries: boundaries,
        split_chunks,
        split_adj,
        split_decay,
        split_tokens,
    };
    if tensor_core {
        assert!(bf16 && (r, n, p, na, seg_len) == (4, 128, 64, 32, 16));
        let sweep = ForwardParams {
            q,
            k,
            v,
            z,
            trap,
            dt,
            adt,
            angles,
            q_bias,
            k_bias,
            mimo_v,
            mimo_z,
            mimo_o,
            d,
            norm_weight,
            batch: b as u32,
            seq_len: s as u32,
            rank: r as u32,
            heads: h as u32,
            groups: gr as u32,
            n: n as u32,
            p: p as u32,
            na: na as u32,
            chunk: 16,
            mode: params.mode,
            rotation: params.rotation,
            norm_eps: params.norm_eps,
            segments: 1,
            ckpt_state: ckpt,
            ckpt_theta: cs,
            ..ForwardParams::default()
        };
        let sweep = if sweep_segments > 1 {
            // The host's layout: states in the split adjoint region (one slot per boundary of
            // the backward's split at most), θ and decays at the start of the per-head ∂k̃.
            let slots = (sweep_segments as usize - 1) * b * h;
            assert!(sweep_segments <= boundaries + 1 && slots * (2 * na + 1) <= ws.dqkh as usize);
            let chunks = s.div_ceil(16);
            let sweep = ForwardParams {
                segments: sweep_segments,
                seg_chunks: chunks.div_ceil(sweep_segments as usize) as u32,
                seg_state: split_adj,
                seg_theta: dkh,
                seg_decay: dkh + 4 * (slots * 2 * na) as u64,
                ..sweep
            };
            emulation::run_grid(
                (h as u32, (b as u32) * sweep_segments),
                FORWARD_MMA_THREADS as usize,
                forward_mma_smem::BYTES as usize / 4,
                &bufs.buffers,
                || unsafe {
                    if wgmma {
                        chunked_forward_mma::chunked_forward_mma::<true, false, false, true>(&sweep)
                    } else {
                        chunked_forward_mma::chunked_forward_mma::<true, false, false, false>(
                            &sweep,
                        )
                    }
                },
            );
            let combine = SegmentCombineParams {
                seg_state: sweep.seg_state,
                seg_theta: sweep.seg_theta,
                seg_decay: sweep.seg_decay,
                heads: h as u32,
                segments: sweep_segments,
                n: n as u32,
                p: p as u32,
                na: na as u32,
                rotation: params.rotation,
            };
            emulation::run_grid(
                (h as u32, b as u32),
                SEGMENT_COMBINE_THREADS as usize,
                (segment_combine_smem_bytes(sweep_segments, na as u32) as usize / 4).max(1),
                &bufs.buffers,
                || unsafe { segment_state::segment_combine(&combine) },
            );
            sweep
        } else {
            sweep
        };
        emulation::run_grid(
            (h as u32, (b as u32) * sweep.segments),
            FORWARD_MMA_THREADS as usize,
            forward_mma_smem::BYTES as usize / 4,
            &bufs.buffers,
            || unsafe {
                if wgmma {
                    chunked_forward_mma::chunked_forward_mma::<true, false, true, true>(&sweep)
                } else {
                    chunked_forward_mma::chunked_forward_mma::<true, false, true, false>(&sweep)
                }
            },
        );
        let sweep = ForwardParams {
            segments: 1,
            seg_chunks: 0,
            seg_state: 0,
            seg_theta: 0,
            seg_decay: 0,
            ..sweep
        };
        let mut params = params;
        let warp_specialized = kernel == Kernel::WarpSpecializedAfterForward;
        if kernel == Kernel::TensorCoreAfterForward || warp_specialized {
            let out_len = b * s * h * inp.output_width();
            let (ckpt_len, cs_len) = (ws.ckpt as usize, ws.cs as usize);
            let out_plain = bufs.poison_act(out_len, true, "out (plain forward)");
            let out_ckpt = bufs.poison_act(out_len, true, "out (forward with checkpoints)");
            let ckpt_fwd = bufs.poison_f32(ckpt_len, "ckpt (forward)");
            let cs_fwd = bufs.poison_f32(cs_len, "cs (forward)");
            let plain = ForwardParams {
                out: out_plain,
                ckpt_state: 0,
                ckpt_theta: 0,
                ..sweep
            };
            let with_ckpt = ForwardParams {
                out: out_ckpt,
                ckpt_state: ckpt_fwd,
                ckpt_theta: cs_fwd,
                ..sweep
            };
            for (fp, with) in [(plain, false), (with_ckpt, true)] {
                if warp_specialized {
                    emulation::run_grid_hb(
                        (h as u32 / 2, b as u32, 1),
                        mamba3_abi::FORWARD_WS_THREADS as usize,
                        mamba3_abi::forward_ws_smem::BYTES as usize / 4,
                        &bufs.buffers,
                        || unsafe {
                            if with {
                                forward_ws::forward_ws::<true, false>(&fp)
                            } else {
                                forward_ws::forward_ws::<false, false>(&fp)
                            }
                        },
                    );
                } else {
                    emulation::run_grid(
                        (h as u32, b as u32),
                        FORWARD_MMA_THREADS as usize,
                        forward_mma_smem::BYTES as usize / 4,
                        &bufs.buffers,
                        || unsafe {
                            if with {
                                chunked_forward_mma::chunked_forward_mma::<false, false, true, false>(
                                    &fp,
                                )
                            } else {
                                chunked_forward_mma::chunked_forward_mma::<false, false, false, false>(
                                    &fp,
                                )
                            }
                        },
                    );
                }
            }
            let words = |ptr: u64, len: usize| -> Vec<u32> {
                // SAFETY: a buffer of `bufs` holding at least `len` 4-byte words.
                unsafe { std::slice::from_raw_parts(ptr as *const u32, len) }.to_vec()
            };
            if warp_specialized {
                // The tensor-core layout's part of the regions: bf16 states, θ pairs per chunk.
                let slots = b * h * s.div_ceil(16);
                let (st_len, th_len) = (slots * p * n / 2, slots * na * 2);
                assert!(st_len <= ckpt_len && th_len <= cs_len);
                assert_checkpoints_close(
                    (&words(ckpt, st_len), &words(cs, th_len)),
                    (&words(ckpt_fwd, st_len), &words(cs_fwd, th_len)),
                );
            } else {
                assert!(
                    words(ckpt, ckpt_len) == words(ckpt_fwd, ckpt_len),
                    "the forward's checkpoint states differ from the sweep's"
                );
                assert!(
                    words(cs, cs_len) == words(cs_fwd, cs_len),
                    "the forward's checkpoint angles differ from the sweep's"
                );
            }
            assert!(
                words(out_plain, out_len / 2) == words(out_ckpt, out_len / 2),
                "the forward with checkpoints changed the outputs"
            );
            params.ckpt = ckpt_fwd;
            params.cs = cs_fwd;
        }
        let launches: &[u32] = if boundaries > 0 {
            &[split_launch::FIRST, split_launch::SECOND]
        } else {
            &[split_launch::WHOLE]
        };
        for &which in launches {
            let params = BackwardParams {
                split: which,
                ..params
            };
            emulation::run_grid3(
                (h as u32, b as u32, boundaries.max(1)),
                BACKWARD_MMA_THREADS as usize,
                backward_mma_smem::BYTES as usize / 4,
                &bufs.buffers,
                || unsafe { backward_mma::backward_mma(&params) },
            );
        }
    }
    let params = BackwardParams {
        split: if boundaries > 0 {
            split_launch::SECOND
        } else {
            split_launch::WHOLE
        },
        ..params
    };
    let words = if chunked {
        BackwardChunkedSmem::new(seg_len as u32, r as u32, n as u32, p as u32, na as u32).total
    } else {
        BackwardSmem::new(r as u32, n as u32, p as u32, na as u32).total
    };
    if !tensor_core {
        emulation::run_grid(
            (h as u32, b as u32),
            BACKWARD_THREADS as usize,
            words as usize,
            &bufs.buffers,
            || unsafe {
                use backward_chunked::backward_chunked;
                use backward_chunked::FixedBackward as Fixed;
                use geometry::AnyGeometry;
                // The host launches the fixed instantiation exactly when the call's geometry is its
                // own; so does the emulation.
                let fixed = chunked && (r, n, p, na) == (4, 128, 64, 32);
                match (chunked, bf16) {
                    (true, true) if fixed => backward_chunked::<elem::Bf16, Fixed>(&params),
                    (true, false) if fixed => backward_chunked::<f32, Fixed>(&params),
                    (true, true) => backward_chunked::<elem::Bf16, AnyGeometry>(&params),
                    (true, false) => backward_chunked::<f32, AnyGeometry>(&params),
                    (false, true) => backward_recurrent::backward_head::<elem::Bf16>(&params),
                    (false, false) => backward_recurrent::backward_head::<f32>(&params),
                }
            },
        );
    }
    emulation::run_grid(
        (reduce_blocks, 1),
        BACKWARD_THREADS as usize,
        0,
        &bufs.buffers,
        || unsafe {
            if bf16 {
                backward_recurrent::backward_reduce::<elem::Bf16>(&params)
            } else {
                backward_recurrent::backward_reduce::<f32>(&params)
            }
        },
    );
    let f = |ptr: u64, len: usize| bufs.get_f32(ptr, len);
    let a = |ptr: u64, len: usize| bufs.get_act(ptr, len, bf16);
    Gradients {
        q: a(dq, qk_len),
        k: a(dk, qk_len),
        v: a(dv, vz_len),
        z: inp.z.as_ref().map(|_| a(dz, vz_len)),
        trap: a(dtrap, sc_len),
        dt: f(ddt, sc_len),
        adt: f(dadt, sc_len),
        angle_logits: f(dangles, b * s * h * na),
        q_bias: f(dq_bias, h * r * n),
        k_bias: f(dk_bias, h * r * n),
        mimo_v: f(dmimo_v, mimo_len),
        mimo_z: inp.mimo_z.as_ref().map(|_| f(dmimo_z, mimo_len)),
        mimo_o: inp.mimo_o.as_ref().map(|_| f(dmimo_o, mimo_len)),
        d: inp.d.as_ref().map(|_| f(dd, h)),
        norm_weight: inp.norm.as_ref().map(|_| f(dnorm, h * p)),
    }
}

struct Case {
    geo: mamba3::golden::Mamba3Geometry,
    seg_len: usize,
    opts: mamba3::golden::RandomOptions,
    bf16: bool,
}

/// Runs `case` on the chunked kernel (`seg_len` = tokens per chunk).
fn check_chunked(case: &Case, seed: u64) -> f64 {
    check_kernel(case, seed, Kernel::Chunked)
}

/// Runs `case` on the token-serial kernel.
fn check(case: &Case, seed: u64) -> f64 {
    check_kernel(case, seed, Kernel::TokenSerial)
}

/// Runs `case` on the tensor-core kernel.
fn check_mma(case: &Case, seed: u64) -> f64 {
    check_kernel(case, seed, Kernel::TensorCore)
}

/// Runs `case` on the tensor-core kernel from the checkpoints of the forward with checkpoints.
fn check_mma_after_forward(case: &Case, seed: u64) -> f64 {
    check_kernel(case, seed, Kernel::TensorCoreAfterForward)
}

fn check_mma_after_warp_specialized_forward(case: &Case, seed: u64) -> f64 {
    check_kernel(case, seed, Kernel::WarpSpecializedAfterForward)
}

/// Panics unless a forward's checkpoints (`ours`: bf16 state pairs and f32 `(hi, lo)` angles, as
/// 4-byte words) agree with the sweep's (`sweep`) to within the state's bf16 rounding (two
/// units in the last place of the largest state entry) and 1e-5 rad modulo 2π (the sweep keeps
/// θ unreduced, the warp-specialized forward in [0, 2π)); prints the figures.
fn assert_checkpoints_close(sweep: (&[u32], &[u32]), ours: (&[u32], &[u32])) {
    let halves = |w: &[u32]| -> Vec<f64> {
        w.iter()
            .flat_map(|&x| [x << 16, x & 0xffff_0000])
            .map(|b| f32::from_bits(b) as f64)
            .collect()
    };
    let (a, b) = (halves(sweep.0), halves(ours.0));
    assert!(
        b.iter().all(|v| v.is_finite()),
        "a state checkpoint was not written"
    );
    let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let worst = a
        .iter()
        .zip(&b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    let theta = |w: &[u32]| -> Vec<f64> {
        w.chunks(2)
            .map(|p| f32::from_bits(p[0]) as f64 + f32::from_bits(p[1]) as f64)
            .collect()
    };
    let tau = std::f64::consts::TAU;
    let worst_theta = theta(sweep.1)
        .iter()
        .zip(&theta(ours.1))
        .fold(0.0f64, |m, (x, y)| {
            let d = (x - y).rem_euclid(tau);
            m.max(d.min(tau - d))
        });
    eprintln!(
        "checkpoints against the sweep's: state {worst:.2e} of {scale:.2e}, θ {worst_theta:.2e} rad"
    );
    assert!(
        worst <= scale * 2f64.powi(-7),
        "state checkpoints {worst:.2e} apart (scale {scale:.2e})"
    );
    assert!(
        worst_theta <= 1e-5,
        "angle checkpoints {worst_theta:.2e} rad apart"
    );
}

/// Runs `case` on one kernel; returns the worst relative error over every gradient.
fn check_kernel(case: &Case, seed: u64, kernel: Kernel) -> f64 {
    let mut inp = Mamba3Inputs::random(case.geo, case.opts, seed).unwrap();
    if case.bf16 {
        quantize::<half::bf16>(&mut inp);
    } else {
        quantize::<f32>(&mut inp);
    }
    let dout = random_dout(&inp, seed ^ 0x5eed, case.bf16);
    let reference = backward_recurrent(&inp, &dout).unwrap();
    let ours = run_emulated(&inp, &dout, case.seg_len, case.bf16, kernel);
    let tol = if case.bf16 { 2e-2 } else { 1e-5 };
    let call_scale = reference
        .tensors()
        .iter()
        .flat_map(|(_, x)| x.iter())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut worst = 0.0f64;
    let mut line = String::new();
    for ((name, o), (_, rf)) in ours.tensors().into_iter().zip(reference.tensors()) {
        assert!(
            o.iter().all(|v| v.is_finite()),
            "{name}: non-finite element (unwritten output?)"
        );
        let e = grad_err(o, rf, call_scale);
        line.push_str(&format!(" {name} {e:.1e}"));
        assert!(
            e <= tol,
            "{name}: error {e:e} above {tol:e} ({:?})",
            case.geo
        );
        worst = worst.max(e);
    }
    eprintln!(
        "emulated {kernel:?} backward {} {:?} L={} {:?}:{line}",
        if case.bf16 { "bf16" } else { "f32" },
        case.geo,
        case.seg_len,
        case.opts
    );
    worst
}

#[test]
fn emulated_backward_matches_golden_on_small_geometries() {
    use OutputMode::*;
    use Rotation::*;
    let cases = [
        // Segments with a tail (S % L ≠ 0), every mode, both rotations, GQA.
        Case {
            geo: geo(1, 7, 2, 1, 2, 8, 5, 2),
            seg_len: 3,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: false,
        },
        Case {
            geo: geo(2, 6, 1, 1, 1, 6, 7, 3),
            seg_len: 4,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: false,
        },
        Case {
            geo: geo(1, 5, 4, 2, 4, 4, 3, 1),
            seg_len: 2,
            opts: opts(HalfSplit, Prereduce, false, true),
            bf16: false,
        },
        Case {
            geo: geo(1, 4, 8, 1, 1, 10, 4, 2),
            seg_len: 1,
            opts: opts(Pairwise, Gated, false, false),
            bf16: false,
        },
        // S = 1, L > S, Na = 0.
        Case {
            geo: geo(1, 1, 2, 1, 2, 4, 3, 0),
            seg_len: 4,
            opts: opts(HalfSplit, FusedNorm, true, false),
            bf16: false,
        },
        // S = 1 with rotation: ∂θ is zero in exact arithmetic (q and k share θ).
        Case {
            geo: geo(1, 1, 4, 1, 1, 8, 4, 4),
            seg_len: 2,
            opts: opts(Pairwise, Gated, true, true),
            bf16: false,
        },
        // bf16 activations.
        Case {
            geo: geo(1, 6, 2, 1, 2, 8, 6, 4),
            seg_len: 4,
            opts: opts(HalfSplit, FusedNorm, true, true),
            bf16: true,
        },
        Case {
            geo: geo(1, 5, 4, 1, 1, 6, 5, 2),
            seg_len: 2,
            opts: opts(Pairwise, Prereduce, true, true),
            bf16: true,
        },
    ];
    let worst = worst_over(&cases, 300, check);
    eprintln!(
        "emulated backward: worst error {worst:.2e} over {} cases",
        cases.len()
    );
}

#[test]
fn emulated_chunked_backward_matches_golden_on_small_geometries() {
    use OutputMode::*;
    use Rotation::*;
    let cases = [
        // Tail chunk (S % C ≠ 0), gated, GQA, odd P, half-split.
        Case {
            geo: geo(1, 7, 2, 1, 2, 8, 5, 2),
            seg_len: 3,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: false,
        },
        // Fused norm, pairwise, R = 1, two batch rows.
        Case {
            geo: geo(2, 9, 1, 1, 1, 6, 7, 3),
            seg_len: 4,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: false,
        },
        // Prereduce, R = 4, G = 2, no z.
        Case {
            geo: geo(1, 5, 4, 2, 4, 4, 3, 1),
            seg_len: 2,
            opts: opts(HalfSplit, Prereduce, false, true),
            bf16: false,
        },
        // R = 8, one token per chunk, no z and no D.
        Case {
            geo: geo(1, 4, 8, 1, 1, 10, 4, 2),
            seg_len: 1,
            opts: opts(Pairwise, Gated, false, false),
            bf16: false,
        },
        // S = 1 < C, Na = 0.
        Case {
            geo: geo(1, 1, 2, 1, 2, 4, 3, 0),
            seg_len: 4,
            opts: opts(HalfSplit, FusedNorm, true, false),
            bf16: false,
        },
        // N above one 128-column strip, Na < N/2, several chunks.
        Case {
            geo: geo(1, 6, 1, 1, 1, 130, 3, 5),
            seg_len: 4,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: false,
        },
        // bf16 activations.
        Case {
            geo: geo(1, 6, 2, 1, 2, 8, 6, 4),
            seg_len: 4,
            opts: opts(HalfSplit, FusedNorm, true, true),
            bf16: true,
        },
        Case {
            geo: geo(1, 5, 4, 1, 1, 6, 5, 2),
            seg_len: 2,
            opts: opts(Pairwise, Prereduce, true, true),
            bf16: true,
        },
        // bf16 on the tensor-core products: rows over two 16-row tiles with a causal bound inside
        // a 32-deep block, N over two 32-column strips, P over two 32-deep blocks, a tail chunk.
        Case {
            geo: geo(1, 11, 4, 1, 1, 40, 36, 3),
            seg_len: 5,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: true,
        },
        // One 16-row group: the state-pass partials of eight warps per row, three column strips
        // (N = 72, the last one partial), pairwise rotation, fused norm.
        Case {
            geo: geo(1, 9, 2, 1, 1, 72, 20, 4),
            seg_len: 8,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: true,
        },
    ];
    let worst = worst_over(&cases, 300, check_chunked);
    eprintln!(
        "emulated chunked backward: worst error {worst:.2e} over {} cases",
        cases.len()
    );
}

#[test]
fn emulated_chunked_backward_fixed_geometry_matches_golden() {
    use OutputMode::*;
    use Rotation::*;
    // The fixed instantiation (R = 4, N = 128, P = 64, Na = 32): a full chunk of 16 tokens and a
    // tail of 5, chunks of 8; both activation types, both rotations, every mode.
    let cases = [
        Case {
            geo: geo(1, 21, 4, 1, 1, 128, 64, 32),
            seg_len: 16,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: true,
        },
        Case {
            geo: geo(1, 21, 4, 1, 1, 128, 64, 32),
            seg_len: 16,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: false,
        },
        Case {
            geo: geo(1, 19, 4, 1, 2, 128, 64, 32),
            seg_len: 8,
            opts: opts(HalfSplit, Prereduce, false, true),
            bf16: true,
        },
    ];
    let worst = worst_over(&cases, 300, check_chunked);
    eprintln!(
        "emulated fixed-geometry chunked backward: worst error {worst:.2e} over {} cases",
        cases.len()
    );
}

/// `cases` random small geometries (seeded by `seed`) on one kernel and activation type: every
/// rank, rotation and mode, Na up to N/2 (0 included), GQA, B ≤ 2, chunks / segments shorter and
/// longer than S; returns the worst error.
fn random_geometries(seed: u64, cases: u64, bf16: bool, chunked: bool) -> f64 {
    use OutputMode::*;
    use Rotation::*;
    let mut rng = mamba3::golden::SplitMix64::new(seed);
    let mut pick = |m: u64| (rng.next_u64() % m) as usize;
    let mut worst = 0.0f64;
    for i in 0..cases {
        let rank = [1, 2, 4, 8][pick(4)];
        let n = 2 * (2 + pick(20));
        let p = 2 + pick(40);
        let na = pick((n / 2 + 1) as u64);
        let seq_len = 1 + pick(40);
        let groups = 1 + pick(2);
        let heads = groups * (1 + pick(2));
        let batch = 1 + pick(2);
        let rotation = [HalfSplit, Pairwise][pick(2)];
        let mode = [Gated, FusedNorm, Prereduce][pick(3)];
        let case = Case {
            geo: geo(batch, seq_len, rank, groups, heads, n, p, na),
            seg_len: 1 + pick(16),
            opts: opts(rotation, mode, pick(2) == 0, pick(2) == 0),
            bf16,
        };
        let kernel = if chunked {
            Kernel::Chunked
        } else {
            Kernel::TokenSerial
        };
        worst = worst.max(check_kernel(&case, seed + i, kernel));
    }
    eprintln!(
        "emulated {} backward {}: worst error {worst:.2e} over {cases} random geometries",
        if chunked { "chunked" } else { "token-serial" },
        if bf16 { "bf16" } else { "f32" }
    );
    worst
}

/// Random geometries on the tensor-core products (bf16 activations: y from split operands, the
/// states and adjoints in one TF32 pass). The fixed cases above are each built around one feature;
/// a precision choice can hold there and not on another geometry (with the products of y in TF32
/// too, one of 40 such geometries reached 1.6e-2 of the 2e-2 bound, on ∂D).
#[test]
fn emulated_chunked_backward_bf16_matches_golden_on_random_geometries() {
    random_geometries(0xb16, 16, true, true);
}

/// Random geometries in f32 on both kernels (each checked against the 1e-5 bound), with several
/// chunks or segments per sequence, so the running sums handed across boundaries are exercised.
#[test]
fn emulated_backward_f32_matches_golden_on_random_geometries() {
    random_geometries(0xf32, 12, false, true);
    random_geometries(0xf32 + 100, 12, false, false);
}

/// The first `len` tokens of a B = H = G = 1 call (every per-token tensor is token-major then).
fn leading_tokens(inp: &Mamba3Inputs, dout: &[f64], len: usize) -> (Mamba3Inputs, Vec<f64>) {
    let g = inp.geometry;
    assert_eq!((g.batch, g.heads, g.groups), (1, 1, 1));
    let cut = |v: &[f64], per_token: usize| v[..len * per_token].to_vec();
    let qk = g.rank * g.state_dim;
    let mut out = inp.clone();
    out.geometry.seq_len = len;
    out.q = cut(&inp.q, qk);
    out.k = cut(&inp.k, qk);
    out.v = cut(&inp.v, g.head_dim);
    out.z = inp.z.as_ref().map(|z| cut(z, g.head_dim));
    out.trap = cut(&inp.trap, 1);
    out.dt = cut(&inp.dt, 1);
    out.adt = cut(&inp.adt, 1);
    out.angle_logits = cut(&inp.angle_logits, g.num_angles);
    (out, cut(dout, inp.output_width()))
}

/// ∂angles of token t is a sum of ∂θ over every later token whose exact value depends on the
/// near future only (the state's memory), but whose per-token terms do not shrink: summing them
/// over the rest of the sequence let their roundings add up, so the early tokens' error grew with
/// S (f32, chunked kernel: 2.6e-6 at S = 400, 8.1e-6 at S = 2048 over the first 256 tokens here;
/// token-serial 6.1e-6 already at S = 400).
/// Both kernels form the sum at chunk / segment boundaries from the state and its adjoint
/// instead; the error at the first tokens must not depend on how far the sequence goes on.
#[test]
fn emulated_angle_gradient_error_does_not_grow_with_sequence_length() {
    let (short, long, watched) = (400, 2048, 256);
    let geo = geo(1, long, 4, 1, 1, 16, 8, 4);
    let options = opts(Rotation::HalfSplit, OutputMode::Gated, true, true);
    let mut inp = Mamba3Inputs::random(geo, options, 9100).unwrap();
    quantize::<f32>(&mut inp);
    let dout = random_dout(&inp, 9100 ^ 0x5eed, false);
    let na = geo.num_angles;
    let (inp_short, dout_short) = leading_tokens(&inp, &dout, short);
    for chunked in [true, false] {
        // (worst absolute error, largest |reference|) over the first `watched` tokens.
        let early_error = |inp: &Mamba3Inputs, dout: &[f64]| {
            let reference = backward_recurrent(inp, dout).unwrap();
            let kernel = if chunked {
                Kernel::Chunked
            } else {
                Kernel::TokenSerial
            };
            let ours = run_emulated(inp, dout, 16, false, kernel);
            let (o, rf) = (&ours.angle_logits, &reference.angle_logits);
            assert!(o.iter().all(|v| v.is_finite()), "non-finite ∂angles");
            (0..watched * na).fold((0.0f64, 0.0f64), |(e, m), i| {
                (common::nan_max(e, (o[i] - rf[i]).abs()), m.max(rf[i].abs()))
            })
        };
        let ((e_short, _), (e_long, scale)) = (
            early_error(&inp_short, &dout_short),
            early_error(&inp, &dout),
        );
        let kernel = if chunked { "chunked" } else { "token-serial" };
        eprintln!(
            "{kernel} ∂angles, worst absolute error over the first {watched} tokens: \
             S = {short} {e_short:.2e}, S = {long} {e_long:.2e} ({:.2e} of their max |ref|)",
            e_long / scale
        );
        assert!(
            e_long <= 1.5 * e_short,
            "{kernel}: the first tokens' ∂angles error grows with S: {e_short:e} at S = {short}, \
             {e_long:e} at S = {long}"
        );
        // Summed token by token, the suffixes over 150–2000 later tokens put these tokens at
        // 2.7e-6 (token-serial) and 3.2e-6 (chunked) of their largest gradient.
        assert!(
            e_long <= 1e-6 * scale,
            "{kernel}: the first tokens' ∂angles error {e_long:e} is above 1e-6 of their largest \
             gradient {scale:e}"
        );
    }
}

#[test]
fn emulated_tensor_core_backward_matches_golden() {
    use OutputMode::*;
    use Rotation::*;
    // The checkpoint sweep and the tensor-core backward (R = 4, N = 128, P = 64, Na = 32, C = 16,
    // bf16): full chunks and a tail, a single short chunk, both rotations, every mode, ±z, ±D,
    // GQA, two batch rows.
    let cases = [
        Case {
            geo: geo(1, 37, 4, 1, 1, 128, 64, 32),
            seg_len: 16,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: true,
        },
        Case {
            geo: geo(1, 21, 4, 1, 1, 128, 64, 32),
            seg_len: 16,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: true,
        },
        Case {
            geo: geo(2, 19, 4, 1, 2, 128, 64, 32),
            seg_len: 16,
            opts: opts(HalfSplit, Prereduce, false, true),
            bf16: true,
        },
        Case {
            geo: geo(1, 7, 4, 2, 2, 128, 64, 32),
            seg_len: 16,
            opts: opts(Pairwise, FusedNorm, false, false),
            bf16: true,
        },
    ];
    let worst = worst_over(&cases, 300, check_mma);
    eprintln!(
        "emulated tensor-core backward: worst error {worst:.2e} over {} cases",
        cases.len()
    );
}

#[test]
fn emulated_split_tensor_core_backward_matches_golden() {
    use OutputMode::*;
    use Rotation::*;
    // The sequence split (`split_launch`): two boundaries over 10 chunks (segments of 4, 4 and
    // 2 chunks; a middle segment's local pass, the last segment's backward handing its start
    // adjoint on), then three boundaries with a tail chunk, GQA and two batch rows (a local pass
    // chained through two decays).
    // The checkpoint sweep runs whole in the first case, split in three segments (of 4, 4 and 2
    // chunks) in the second and in four (4, 4, 4, 2) in the third, as the host splits it when
    // B·H leaves SMs idle (`backward::checkpoint_sweep_segments`). The second case's sweep and
    // segment-state pass are the `wgmma` twins.
    let cases = [
        (
            Case {
                geo: geo(1, 160, 4, 1, 1, 128, 64, 32),
                seg_len: 16,
                opts: opts(HalfSplit, Gated, true, true),
                bf16: true,
            },
            2,
            1,
        ),
        (
            Case {
                geo: geo(1, 150, 4, 1, 1, 128, 64, 32),
                seg_len: 16,
                opts: opts(Pairwise, Gated, true, true),
                bf16: true,
            },
            2,
            3,
        ),
        (
            Case {
                geo: geo(2, 217, 4, 2, 2, 128, 64, 32),
                seg_len: 16,
                opts: opts(Pairwise, FusedNorm, true, false),
                bf16: true,
            },
            3,
            4,
        ),
    ];
    let mut worst = 0.0f64;
    for (i, (case, boundaries, sweep_segments)) in cases.iter().enumerate() {
        let kernel = Kernel::TensorCoreSplit {
            boundaries: *boundaries,
            chunks: 4,
            sweep_segments: *sweep_segments,
            wgmma: i == 1,
        };
        let e = check_kernel(case, 320 + i as u64, kernel);
        eprintln!("split case {i} (sweep in {sweep_segments}): worst gradient error {e:.2e}");
        assert!(
            e <= 2e-2,
            "split case {i}: worst gradient error {e:e} above 2e-2"
        );
        worst = worst.max(e);
    }
    eprintln!("emulated split tensor-core backward: worst error {worst:.2e}");
}

#[test]
fn emulated_tensor_core_backward_from_the_forwards_checkpoints_matches_golden() {
    use OutputMode::*;
    use Rotation::*;
    // A training step: the forward writing the backward's checkpoints (bitwise the sweep's, its
    // outputs bitwise the plain forward's; checked in `run_emulated`), then the backward from
    // them: full chunks and a tail, a single short chunk, both rotations, GQA.
    let cases = [
        Case {
            geo: geo(1, 37, 4, 1, 1, 128, 64, 32),
            seg_len: 16,
            opts: opts(Pairwise, Gated, true, true),
            bf16: true,
        },
        Case {
            geo: geo(2, 9, 4, 2, 2, 128, 64, 32),
            seg_len: 16,
            opts: opts(HalfSplit, FusedNorm, true, false),
            bf16: true,
        },
    ];
    let worst = worst_over(&cases, 310, check_mma_after_forward);
    eprintln!(
        "emulated tensor-core backward after the forward: worst error {worst:.2e} over {} cases",
        cases.len()
    );
}

#[test]
fn emulated_tensor_core_backward_from_the_warp_specialized_forwards_checkpoints_matches_golden() {
    use OutputMode::*;
    use Rotation::*;
    // A training step on compute capability 9.0: the warp-specialized forward writing the
    // backward's checkpoints (close to the sweep's, its outputs bitwise the plain kernel's;
    // checked in `run_emulated`), then the backward from them: full chunks and a tail, GQA with
    // two heads per group, B = 2, with and without z and D.
    let cases = [
        Case {
            geo: geo(1, 37, 4, 1, 2, 128, 64, 32),
            seg_len: 16,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: true,
        },
        Case {
            geo: geo(2, 20, 4, 2, 4, 128, 64, 32),
            seg_len: 16,
            opts: opts(HalfSplit, Gated, false, false),
            bf16: true,
        },
    ];
    let worst = worst_over(&cases, 320, check_mma_after_warp_specialized_forward);
    eprintln!(
        "emulated tensor-core backward after the warp-specialized forward: worst error {worst:.2e} over {} cases",
        cases.len()
    );
}

/// A single token on the tensor-core backward (B = 1, H = 2; the GPU suite's case and seed):
/// head 1's ∂trap is a sum of rank-pair products `(q̂·k̂)(δ·x)` that cancels to 1/300 of its
/// terms, so the bf16 operand roundings move it by 2e-2 of the call's largest ∂trap, and one bf16
/// rounding of the inputs moves the exact value by as much (2.35e-2): the call is bounded by
/// `BF16_ROUNDINGS` × its bf16 rounding spread, as the GPU test bounds it.
#[test]
fn emulated_tensor_core_ill_conditioned_call_stays_within_its_spread() {
    use OutputMode::*;
    use Rotation::*;
    let geo = geo(1, 1, 4, 1, 2, 128, 64, 32);
    let mut inp = Mamba3Inputs::random(geo, opts(HalfSplit, Gated, true, true), 8500).unwrap();
    quantize::<half::bf16>(&mut inp);
    let mut rng = mamba3::golden::SplitMix64::new(8500 ^ 0xd0d7);
    let dout: Vec<f64> = (0..2 * inp.output_width())
        .map(|_| half::bf16::from_f64(rng.normal()).to_f64())
        .collect();
    let reference = backward_recurrent(&inp, &dout).unwrap();
    let ours = run_emulated(&inp, &dout, 16, true, Kernel::TensorCore);
    let spreads = common::backward_rounding_spread(&inp, &dout, &reference, common::BF16_ROUNDING);
    let call_scale = reference
        .tensors()
        .iter()
        .flat_map(|(_, x)| x.iter())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    for (((name, o), (_, rf)), spread) in ours
        .tensors()
        .into_iter()
        .zip(reference.tensors())
        .zip(spreads)
    {
        let e = grad_err(o, rf, call_scale);
        let bound = 2e-2f64.max(common::BF16_ROUNDINGS * spread);
        eprintln!("{name}: error {e:.2e}, bf16 spread {spread:.2e}, bound {bound:.2e}");
        assert!(e <= bound, "{name}: error {e:e} above {bound:e}");
    }
}
