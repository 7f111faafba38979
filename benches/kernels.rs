//! Kernel benchmarks: time per call (CUDA events, median of repeated calls) and the fraction of the
//! H200's limits reached (HBM ≈ 4.3 TB/s measured, bf16 tensor cores ≈ 790 TFLOP/s).
//!
//! `cargo xtask bench [FILTER...]` runs the benchmarks whose name contains a filter (all without
//! one). Without a GPU it prints one line and exits 0.

use std::sync::Arc;

use half::bf16;
use mamba3::backward;
use mamba3::cuda::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use mamba3::decode::{
    self, DecodeConfig, DecodeGraph, DecodeInputs, DecodePath, DecodeState, DecodeWeights,
    REGISTER_RESIDENT_MAX_SEQUENCE_HEADS,
};
use mamba3::forward::{
    dispatch_paths_on_gpu, forward_with_workspace, workspace_len, ForwardConfig, ForwardInputs,
};
use mamba3::golden::SplitMix64;
use mamba3::{primitives, Activation, Dtype, Gpu, OutputMode, Rotation};

/// Measured H200 HBM bandwidth, bytes per second.
const HBM_BYTES_PER_S: f64 = 4.3e12;

/// Measured H200 dense bf16 tensor-core rate, FLOP per second.
const TC_FLOP_PER_S: f64 = 790e12;

/// Median milliseconds per call of `launch` over `reps` calls after `warmup` calls, each timed with
/// its own pair of events.
fn time_ms(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    warmup: usize,
    reps: usize,
    mut launch: impl FnMut(),
) -> f64 {
    let flags = Some(mamba3::cuda::sys::CUevent_flags::CU_EVENT_DEFAULT);
    for _ in 0..warmup {
        launch();
    }
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let start = gpu.context().new_event(flags).expect("creating an event");
            let end = gpu.context().new_event(flags).expect("creating an event");
            start.record(stream).expect("recording an event");
            launch();
            end.record(stream).expect("recording an event");
            end.synchronize().expect("waiting for the GPU");
            start.elapsed_ms(&end).expect("reading the timer") as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn report(name: &str, ms: f64, bytes: f64, kernels: &str) {
    let bandwidth = bytes / (ms * 1e-3);
    println!(
        "{name:<32} {:>10.1} µs/call {:>9.1} GB/s {:>6.1}% of HBM   kernels: {kernels}",
        ms * 1e3,
        bandwidth / 1e9,
        100.0 * bandwidth / HBM_BYTES_PER_S
    );
}

fn device_buffer(stream: &Arc<CudaStream>, len: usize, value: f32) -> CudaSlice<f32> {
    stream
        .clone_htod(&vec![value; len])
        .expect("allocating a benchmark buffer")
}

/// Streaming `sincos` over 64 Mi elements: 4 bytes read, 8 written per element.
fn bench_sincos(gpu: &Gpu, stream: &Arc<CudaStream>) {
    let n = 64 << 20;
    let x = device_buffer(stream, n, 12_345.678);
    let (mut s, mut c) = (device_buffer(stream, n, 0.0), device_buffer(stream, n, 0.0));
    let ms = time_ms(gpu, stream, 3, 20, || {
        primitives::launch_sincos(gpu, stream, &x, &mut s, &mut c).unwrap()
    });
    report(
        "primitives/sincos/n=64Mi",
        ms,
        12.0 * n as f64,
        "prim_sincos",
    );
}

/// Warp affine scan over 64 Mi pairs: 8 bytes read, 8 written per pair.
fn bench_warp_scan(gpu: &Gpu, stream: &Arc<CudaStream>) {
    let n = 64 << 20;
    let (a, b) = (
        device_buffer(stream, n, 0.999),
        device_buffer(stream, n, 0.5),
    );
    let (mut oa, mut ob) = (device_buffer(stream, n, 0.0), device_buffer(stream, n, 0.0));
    let ms = time_ms(gpu, stream, 3, 20, &mut || {
        primitives::launch_warp_scan_affine(gpu, stream, &a, &b, &mut oa, &mut ob).unwrap()
    });
    report(
        "primitives/warp_scan/n=64Mi",
        ms,
        16.0 * n as f64,
        "prim_warp_scan",
    );
}

/// Mean milliseconds per item of `batch_of_calls` (which enqueues `items` calls), median over
/// `reps` timed batches after one warm-up batch.
fn time_batch_ms(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    reps: usize,
    items: usize,
    mut batch_of_calls: impl FnMut(),
) -> f64 {
    time_ms(gpu, stream, 1, reps, &mut batch_of_calls) / items as f64
}

fn random_f32(rng: &mut SplitMix64, len: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..len).map(|_| rng.uniform_range(lo, hi) as f32).collect()
}

/// Decode batches, with upstream's rotary step + CuTe step graph-replayed on this H200 (bf16
/// inputs, f32 state, µs per token; issue #4) where it was measured. Batches 2 and 4 lie between
/// the register-resident kernel's and the streaming kernel's ranges (they locate the dispatch
/// crossover).
const DECODE_BATCHES: [(usize, Option<f64>); 8] = [
    (1, Some(6.7)),
    (2, None),
    (4, None),
    (8, Some(13.2)),
    (32, Some(50.7)),
    (64, Some(93.3)),
    (128, Some(178.6)),
    (256, Some(349.0)),
];

/// The decode batches to run: those of [`DECODE_BATCHES`] that `MAMBA3_BENCH_BATCH` selects, or
/// a batch it names outside the table (no upstream figure), to place the dispatch's crossovers.
fn decode_batches() -> Vec<(usize, Option<f64>)> {
    let named = std::env::var("MAMBA3_BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    match named {
        Some(b) if b > 0 && !DECODE_BATCHES.iter().any(|&(t, _)| t == b) => vec![(b, None)],
        _ => DECODE_BATCHES
            .into_iter()
            .filter(|&(b, _)| batch_selected(b))
            .collect(),
    }
}

/// Captures the launches `record` issues on `stream` into a CUDA graph, with cudarc's
/// cross-stream event tracking off meanwhile (as `DecodeGraph` does: events recorded outside the
/// capture would make the captured work wait on them).
fn capture_graph(stream: &Arc<CudaStream>, record: impl FnOnce()) -> mamba3::cuda::CudaGraph {
    use mamba3::cuda::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let ctx = stream.context();
    let tracking = ctx.is_event_tracking();
    // SAFETY: only this capture runs while tracking is off; the setting is restored below.
    unsafe { ctx.disable_event_tracking() };
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("beginning a capture");
    record();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("ending the capture")
        .expect("a captured graph");
    if tracking {
        // SAFETY: restores the previous setting.
        unsafe { ctx.enable_event_tracking() };
    }
    graph
}

/// Graph-replayed µs per call of the smallest launch there is (the `sincos` primitive on 32
/// values, one block), timed like the decode table: the floor under its per-call figures.
fn graph_replay_floor_us(gpu: &Gpu, stream: &Arc<CudaStream>) -> f64 {
    let x = device_buffer(stream, 32, 0.5);
    let (mut sin, mut cos) = (
        device_buffer(stream, 32, 0.0),
        device_buffer(stream, 32, 0.0),
    );
    let graph = capture_graph(stream, || {
        primitives::launch_sincos(gpu, stream, &x, &mut sin, &mut cos).expect("sincos launch");
    });
    let calls = 1000;
    time_batch_ms(gpu, stream, 5, calls, || {
        for _ in 0..calls {
            graph.launch().expect("graph replay");
        }
    }) * 1e3
}

/// Decode at H=64, P=64, N=128, R=4, G=1, Na=32, bf16 activations, f32 state, z, D and mimo_o:
/// eager, one graph per call replayed back to back, and calls unrolled into one graph
/// ([`unrolled_graph_us`]), rotating through more than 100 MB of state copies so the 60 MB L2
/// cannot hold them.
fn bench_decode(gpu: &Gpu, stream: &Arc<CudaStream>) {
    let (h, p, n, r) = (64usize, 64usize, 128usize, 4usize);
    let mut rng = SplitMix64::new(7);
    let up = |v: Vec<f32>| stream.clone_htod(&v).expect("uploading weights");
    let q_bias = up(random_f32(&mut rng, h * r * n, -1.0, 1.0));
    let k_bias = up(random_f32(&mut rng, h * r * n, -1.0, 1.0));
    let mimo_v = up(random_f32(&mut rng, h * r * p, -0.5, 0.5));
    let mimo_z = up(random_f32(&mut rng, h * r * p, -1.0, 1.0));
    let mimo_o = up(random_f32(&mut rng, h * r * p, -0.5, 0.5));
    let d = up(random_f32(&mut rng, h, -1.0, 1.0));
    let weights = DecodeWeights {
        q_bias: &q_bias,
        k_bias: &k_bias,
        mimo_v: &mimo_v,
        mimo_z: Some(&mimo_z),
        mimo_o: Some(&mimo_o),
        d: Some(&d),
        norm_weight: None,
    };
    // `MAMBA3_BENCH_PROGRAMMATIC=0` turns programmatic dependent launch off (A/B runs).
    let programmatic = gpu.set_programmatic_launch(
        std::env::var("MAMBA3_BENCH_PROGRAMMATIC").map_or(true, |v| v != "0"),
    );
    println!(
        "decode: programmatic dependent launch {}",
        if programmatic { "on" } else { "off" }
    );
    println!(
        "decode: graph replay of a one-block kernel (the floor of the graph µs column): {:.2} µs",
        graph_replay_floor_us(gpu, stream)
    );
    // T = 3 and 4 locate the crossover to the chunked path (`decode::CHUNKED_MIN_TOKENS`).
    if dtype_selected("bf16") {
        bench_decode_dtype::<bf16>(gpu, stream, &weights, &[1, 2, 3, 4, 8], &mut rng);
    }
    // f32 activations at T = 3, 4 and 8: the chunked path (pinned) runs the TF32 forward there.
    if dtype_selected("f32") {
        bench_decode_dtype::<f32>(gpu, stream, &weights, &[3, 4, 8], &mut rng);
    }
}

/// Fewest calls captured into the one-graph timing of [`unrolled_graph_us`].
const UNROLLED_MIN_CALLS: usize = 16;

/// Copies the eager calls' random inputs into a captured step's buffers, so that its replays
/// compute on the same values (nonzero angles, whose `sincos` branches can diverge within a warp)
/// rather than the zeros [`DecodeGraph`] allocates.
fn fill_graph_inputs<X: Activation>(
    stream: &Arc<CudaStream>,
    inputs: &DecodeInputs<X>,
    buffers: &mut mamba3::decode::GraphBuffers<X>,
) {
    let copy = "copying the inputs into a graph";
    stream.memcpy_dtod(inputs.q, &mut buffers.q).expect(copy);
    stream.memcpy_dtod(inputs.k, &mut buffers.k).expect(copy);
    stream.memcpy_dtod(inputs.v, &mut buffers.v).expect(copy);
    if let (Some(src), Some(dst)) = (inputs.z, buffers.z.as_mut()) {
        stream.memcpy_dtod(src, dst).expect(copy);
    }
    stream
        .memcpy_dtod(inputs.trap, &mut buffers.trap)
        .expect(copy);
    stream.memcpy_dtod(inputs.dt, &mut buffers.dt).expect(copy);
    stream
        .memcpy_dtod(inputs.adt, &mut buffers.adt)
        .expect(copy);
    stream
        .memcpy_dtod(inputs.angles, &mut buffers.angles)
        .expect(copy);
}

/// Per-call µs of decode calls captured back to back into one CUDA graph and replayed: the way
/// triton's `do_bench_cudagraph` (upstream's figures) times a function, the graph's launch cost
/// shared by its calls, as when a whole model step is one graph. Call `j` advances state copy
/// `j mod copies` with that copy's own copy of the eager calls' random `inputs` and its own
/// output, so that neither the states nor the inputs stay in L2; at least
/// [`UNROLLED_MIN_CALLS`] calls. With `shared_inputs` every call reads `inputs` itself instead,
/// which stay in L2 as in a model's step, where the projection before the decode call has just
/// written them (and as `do_bench_cudagraph` runs upstream's step on one set of inputs); the
/// states still rotate.
#[allow(clippy::too_many_arguments)]
fn unrolled_graph_us<X: Activation>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    config: DecodeConfig,
    pinned: Option<DecodePath>,
    weights: &DecodeWeights,
    inputs: &DecodeInputs<X>,
    tokens: usize,
    copies: usize,
    shared_inputs: bool,
) -> f64 {
    let calls = copies.max(UNROLLED_MIN_CALLS);
    let copy_x = |src: &CudaSlice<X>| -> CudaSlice<X> {
        stream.clone_dtod(src).expect("copying the inputs")
    };
    let copy_f = |src: &CudaSlice<f32>| -> CudaSlice<f32> {
        stream.clone_dtod(src).expect("copying the inputs")
    };
    struct CopyBuffers<X: DeviceRepr> {
        /// q, k, v, z and the trap logits.
        activations: [CudaSlice<X>; 5],
        /// Δ, the log decays and the angle logits.
        scalars: [CudaSlice<f32>; 3],
        out: CudaSlice<X>,
    }
    let mut states: Vec<DecodeState<X>> = (0..copies)
        .map(|_| {
            let mut state = DecodeState::new(stream, config).expect("allocating states");
            state.pin_path(pinned);
            state
        })
        .collect();
    let mut buffers: Vec<CopyBuffers<X>> = (0..copies)
        .map(|_| CopyBuffers {
            activations: [
                copy_x(inputs.q),
                copy_x(inputs.k),
                copy_x(inputs.v),
                inputs
                    .z
                    .map_or_else(|| stream.alloc_zeros(1).expect("allocating"), &copy_x),
                copy_x(inputs.trap),
            ],
            scalars: [copy_f(inputs.dt), copy_f(inputs.adt), copy_f(inputs.angles)],
            out: stream
                .alloc_zeros(config.output_len(tokens))
                .expect("allocating"),
        })
        .collect();
    let graph = capture_graph(stream, || {
        for j in 0..calls {
            let i = j % copies;
            let CopyBuffers {
                activations: [q, k, v, z, trap],
                scalars: [dt, adt, angles],
                out,
            } = &mut buffers[i];
            let own = DecodeInputs {
                q,
                k,
                v,
                z: config.has_z.then_some(&*z),
                trap,
                dt,
                adt,
                angles,
            };
            let call_inputs = if shared_inputs { inputs } else { &own };
            decode::step_tokens(
                gpu,
                stream,
                &mut states[i],
                weights,
                call_inputs,
                tokens,
                out,
            )
            .expect("decode launch");
        }
    });
    graph.upload().expect("uploading the graph");
    time_batch_ms(gpu, stream, 5, calls, || {
        graph.launch().expect("graph replay");
    }) * 1e3
}

/// The decode table for activations `X` over `token_counts` (see [`bench_decode`]); upstream's
/// figures are for bf16 activations.
fn bench_decode_dtype<X: Activation>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    weights: &DecodeWeights,
    token_counts: &[usize],
    rng: &mut SplitMix64,
) {
    let (h, p, n, r, na) = (64usize, 64usize, 128usize, 4usize, 32usize);
    let up = |v: Vec<f32>| stream.clone_htod(&v).expect("uploading inputs");
    let dtype = if X::DTYPE == Dtype::Bf16 {
        "bf16"
    } else {
        "f32"
    };
    println!(
        "{:<26} {:>11} {:>11} {:>11} {:>9} {:>8} {:>11} {:>8} {:>16} {:>11}",
        format!("decode ({dtype}, H=64 P=64 N=128 R=4)"),
        "eager µs",
        "graph µs",
        "µs/token",
        "MB/call",
        "% HBM",
        "upstream µs",
        "speedup",
        "1-graph µs/token",
        "L2 inputs"
    );
    println!(
        "  (graph µs: one graph per call, replayed back to back; 1-graph: at least {UNROLLED_MIN_CALLS} calls in one \
         graph, as do_bench_cudagraph times upstream's step; L2 inputs: the same with every call \
         reading one set of inputs, states still rotating; % HBM and speedup from the first)"
    );
    for (batch, upstream) in decode_batches() {
        let config = DecodeConfig {
            batch,
            heads: h,
            groups: 1,
            rank: r,
            state_dim: n,
            head_dim: p,
            num_angles: na,
            rotation: Rotation::HalfSplit,
            mode: OutputMode::Gated,
            has_z: true,
            has_d: true,
            norm_eps: 1e-5,
        };
        let state_bytes = batch * h * p * n * 4;
        let copies = (120_000_000usize).div_ceil(state_bytes).max(1);
        for &tokens in token_counts {
            if !tokens_selected(tokens) {
                continue;
            }
            let act = |len: usize, rng: &mut SplitMix64| -> CudaSlice<X> {
                let v: Vec<X> = (0..len).map(|_| X::from_f64(rng.normal())).collect();
                stream.clone_htod(&v).expect("uploading inputs")
            };
            let (q, k) = (
                act(batch * tokens * r * n, rng),
                act(batch * tokens * r * n, rng),
            );
            let (v, z) = (
                act(batch * tokens * h * p, rng),
                act(batch * tokens * h * p, rng),
            );
            let trap = act(batch * h * tokens, rng);
            let dt = up(random_f32(rng, batch * h * tokens, 0.01, 0.1));
            let adt = up(random_f32(rng, batch * h * tokens, -0.1, -0.001));
            let angles = up(random_f32(rng, batch * tokens * h * na, -2.0, 2.0));
            let inputs = DecodeInputs {
                q: &q,
                k: &k,
                v: &v,
                z: Some(&z),
                trap: &trap,
                dt: &dt,
                adt: &adt,
                angles: &angles,
            };
            // The automatic choice first, then the other kernels that can run the call.
            let sm = gpu.sm_count();
            let auto = config.path::<X>(tokens, sm, gpu.max_shared_memory_optin());
            let mut paths = vec![None];
            // Streaming also with twice and half the automatic rows per warp (its split is a
            // tuning choice: fewer, longer warps repeat the per-(b, h) prologue less often).
            let stream_rows = config.streaming_rows_per_warp(sm);
            let others = [
                DecodePath::SharedTile,
                DecodePath::Chunked,
                DecodePath::TensorCore,
                DecodePath::TensorCorePrefetching,
                DecodePath::TensorCoreChunk,
                DecodePath::Streaming {
                    rows_per_warp: stream_rows,
                },
                DecodePath::Streaming {
                    rows_per_warp: (2 * stream_rows).min(config.head_dim as u32),
                },
                DecodePath::Streaming {
                    rows_per_warp: (stream_rows / 2).max(1),
                },
                // The split whose four warps of a block share the per-rank prologue.
                DecodePath::Streaming {
                    rows_per_warp: config
                        .streaming_shared_prologue_rows()
                        .unwrap_or(stream_rows),
                },
                DecodePath::RegisterResident {
                    rows_per_warp: config.rows_per_warp(sm),
                },
                // The register-resident split, too, is a tuning choice: fewer, longer blocks
                // repeat the per-(b, h) staging and token prologue less often.
                DecodePath::RegisterResident {
                    rows_per_warp: 2 * config.rows_per_warp(sm),
                },
                DecodePath::RegisterResident {
                    rows_per_warp: (config.rows_per_warp(sm) / 2).max(1),
                },
            ];
            for path in others {
                // The register-resident kernel also up to twice its automatic range, where the
                // crossover to the other kernels lies.
                let worth = match path {
                    DecodePath::RegisterResident { .. } => {
                        config.batch * config.heads <= 2 * REGISTER_RESIDENT_MAX_SEQUENCE_HEADS
                    }
                    _ => true,
                };
                if path != auto
                    && worth
                    && !auto_only()
                    && !paths.contains(&Some(path))
                    && config.check_path(path, tokens).is_ok()
                    && path.kernel::<X>(&config, tokens).is_some()
                {
                    paths.push(Some(path));
                }
            }
            for pinned in paths {
                let path = pinned.unwrap_or(auto);
                let mut states: Vec<DecodeState<X>> = (0..copies)
                    .map(|_| {
                        let mut state =
                            DecodeState::new(stream, config).expect("allocating states");
                        state.pin_path(pinned);
                        state
                    })
                    .collect();
                let mut outs: Vec<CudaSlice<X>> = (0..copies)
                    .map(|_| {
                        stream
                            .alloc_zeros(config.output_len(tokens))
                            .expect("allocating outputs")
                    })
                    .collect();
                let eager_ms = time_batch_ms(gpu, stream, 5, copies, || {
                    for (state, out) in states.iter_mut().zip(outs.iter_mut()) {
                        decode::step_tokens(gpu, stream, state, weights, &inputs, tokens, out)
                            .expect("decode launch");
                    }
                });
                drop(outs);
                let mut graphs: Vec<DecodeGraph<X>> = states
                    .into_iter()
                    .map(|state| {
                        let mut graph = DecodeGraph::capture(gpu, stream, state, weights, tokens)
                            .expect("capturing the step");
                        fill_graph_inputs(stream, &inputs, graph.buffers_mut());
                        graph
                    })
                    .collect();
                let graph_ms = time_batch_ms(gpu, stream, 5, copies, || {
                    for graph in graphs.iter_mut() {
                        graph.replay().expect("graph replay");
                    }
                });
                drop(graphs);
                let one_graph_us = unrolled_graph_us::<X>(
                    gpu, stream, config, pinned, weights, &inputs, tokens, copies, false,
                ) / tokens as f64;
                let l2_inputs_us = unrolled_graph_us::<X>(
                    gpu, stream, config, pinned, weights, &inputs, tokens, copies, true,
                ) / tokens as f64;
                let bytes = config.min_bytes(tokens, X::DTYPE.bytes()) as f64;
                let per_token_us = graph_ms * 1e3 / tokens as f64;
                let kernel = path
                    .kernel::<X>(&config, tokens)
                    .map_or("?", |k| k.symbol());
                let (upstream, speedup) = match upstream {
                    Some(us) => (format!("{us:.1}"), format!("{:.1}x", us / per_token_us)),
                    None => ("-".to_string(), "-".to_string()),
                };
                println!(
                    "{:<26} {:>11.2} {:>11.2} {:>11.2} {:>9.1} {:>7.1}% {:>11} {:>8} {:>16.2} {:>11.2}   kernels: {kernel} {path:?}{}",
                    format!("decode/{dtype}/B={batch}/T={tokens}"),
                    eager_ms * 1e3,
                    graph_ms * 1e3,
                    per_token_us,
                    bytes / 1e6,
                    100.0 * bytes / (graph_ms * 1e-3) / HBM_BYTES_PER_S,
                    upstream,
                    speedup,
                    one_graph_us,
                    l2_inputs_us,
                    if pinned.is_some() { " (pinned)" } else { "" }
                );
            }
        }
    }
}

/// A device buffer of `len` elements filled by tiling a pool of at most 1 Mi values drawn by
/// `draw` (random data at any size without generating it all on the host).
fn random_buffer<T: DeviceRepr + ValidAsZeroBits + Copy>(
    stream: &Arc<CudaStream>,
    len: usize,
    rng: &mut SplitMix64,
    mut draw: impl FnMut(&mut SplitMix64) -> T,
) -> CudaSlice<T> {
    let pool: Vec<T> = (0..len.min(1 << 20)).map(|_| draw(rng)).collect();
    let host: Vec<T> = pool.iter().copied().cycle().take(len).collect();
    stream
        .clone_htod(&host)
        .expect("allocating a benchmark buffer")
}

fn softplus(x: f64) -> f64 {
    if x > 30.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// The H200 model geometry of the forward and backward benchmarks at `(heads, batch, seq_len)`:
/// G=1, N=128, P=64, R=4, C=16, Na=32, z, D, gated with mimo_o, activations in `T`.
fn model_config<T: Activation>(heads: usize, batch: usize, seq_len: usize) -> ForwardConfig {
    ForwardConfig {
        batch,
        seq_len,
        rank: 4,
        groups: 1,
        heads,
        state_dim: 128,
        head_dim: 64,
        num_angles: 32,
        chunk_size: 16,
        dtype: T::DTYPE,
        rotation: Rotation::HalfSplit,
        mode: OutputMode::Gated,
        has_z: true,
        has_d: true,
        norm_eps: 1e-5,
    }
}

/// Random device inputs of a [`model_config`] call (every input but the norm weight), drawn like
/// the golden model's: activations N(0,1) in `T`; dt = softplus(−3 + N(0,1)),
/// adt = −softplus(−3 + N(0,1))·U(0.1, 1), mimo_v and mimo_o N(0,1)/4, the rest N(0,1), in f32.
struct ModelInputs<T> {
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    z: CudaSlice<T>,
    trap: CudaSlice<T>,
    dt: CudaSlice<f32>,
    adt: CudaSlice<f32>,
    angles: CudaSlice<f32>,
    q_bias: CudaSlice<f32>,
    k_bias: CudaSlice<f32>,
    mimo_v: CudaSlice<f32>,
    mimo_z: CudaSlice<f32>,
    mimo_o: CudaSlice<f32>,
    d: CudaSlice<f32>,
}

impl<T: Activation> ModelInputs<T> {
    /// Draws the tensors from `rng` in field order and uploads them.
    fn random(stream: &Arc<CudaStream>, cfg: &ForwardConfig, rng: &mut SplitMix64) -> Self {
        let (b, s, r, g, h, n, p, na) = (
            cfg.batch,
            cfg.seq_len,
            cfg.rank,
            cfg.groups,
            cfg.heads,
            cfg.state_dim,
            cfg.head_dim,
            cfg.num_angles,
        );
        let act = |rng: &mut SplitMix64| T::from_f64(rng.normal());
        let normal = |rng: &mut SplitMix64| rng.normal() as f32;
        let quarter = |rng: &mut SplitMix64| rng.normal() as f32 / 4.0;
        ModelInputs {
            q: random_buffer(stream, b * s * r * g * n, rng, act),
            k: random_buffer(stream, b * s * r * g * n, rng, act),
            v: random_buffer(stream, b * s * h * p, rng, act),
            z: random_buffer(stream, b * s * h * p, rng, act),
            trap: random_buffer(stream, b * h * s, rng, act),
            dt: random_buffer(stream, b * h * s, rng, |rng: &mut SplitMix64| {
                softplus(-3.0 + rng.normal()) as f32
            }),
            adt: random_buffer(stream, b * h * s, rng, |rng: &mut SplitMix64| {
                (-softplus(-3.0 + rng.normal()) * rng.uniform_range(0.1, 1.0)) as f32
            }),
            angles: random_buffer(stream, b * s * h * na, rng, normal),
            q_bias: random_buffer(stream, h * r * n, rng, normal),
            k_bias: random_buffer(stream, h * r * n, rng, normal),
            mimo_v: random_buffer(stream, h * r * p, rng, quarter),
            mimo_z: random_buffer(stream, h * r * p, rng, normal),
            mimo_o: random_buffer(stream, h * r * p, rng, quarter),
            d: random_buffer(stream, h, rng, normal),
        }
    }

    fn views(&self) -> ForwardInputs<'_, T> {
        ForwardInputs {
            q: self.q.as_view(),
            k: self.k.as_view(),
            v: self.v.as_view(),
            z: Some(self.z.as_view()),
            trap: self.trap.as_view(),
            dt: self.dt.as_view(),
            adt: self.adt.as_view(),
            angles: self.angles.as_view(),
            q_bias: self.q_bias.as_view(),
            k_bias: self.k_bias.as_view(),
            mimo_v: self.mimo_v.as_view(),
            mimo_z: Some(self.mimo_z.as_view()),
            mimo_o: Some(self.mimo_o.as_view()),
            d: Some(self.d.as_view()),
            norm_weight: None,
        }
    }
}

/// The chunked forward at `(heads, batch, seq_len)` on the H200 model geometry (G=1, N=128,
/// P=64, R=4, C=16, Na=32, z, D, gated with mimo_o), activations in `T`.
///
/// FLOPs: the minimum of `shared/spec/performance.md` §3.1, `2·C·R²·(N+P) + 4·R·N·P` per token
/// and head (masked blocks counted dense). Bytes: every tensor the call reads or writes once
/// (q, k, v, z, trap, out in `T`; dt, adt, angles (B,S,H,Na) in f32; parameters negligible).
fn bench_forward_one<T: Activation>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    heads: usize,
    batch: usize,
    seq_len: usize,
) {
    let cfg = model_config::<T>(heads, batch, seq_len);
    let (b, s, h, p) = (batch, seq_len, heads, cfg.head_dim);
    let mut rng = SplitMix64::new(42 + (heads * 131 + batch * 7 + seq_len) as u64);
    let dev = ModelInputs::<T>::random(stream, &cfg, &mut rng);
    let mut out = stream
        .alloc_zeros::<T>(b * s * h * p)
        .expect("allocating a benchmark buffer");
    let inputs = dev.views();
    let mut workspace = stream
        .alloc_zeros::<f32>(workspace_len(&cfg, gpu.sm_count()).max(1))
        .expect("allocating a benchmark buffer");
    let ms = time_ms(gpu, stream, 2, 10, || {
        forward_with_workspace(
            gpu,
            stream,
            &cfg,
            &inputs,
            &mut out.as_view_mut(),
            None,
            &mut workspace.as_view_mut(),
        )
        .unwrap()
    });
    let esz = std::mem::size_of::<T>() as f64;
    let (bf, sf, hf) = (b as f64, s as f64, h as f64);
    let (rf, gf, nf, pf, naf, cf) = (4.0, 1.0, 128.0, 64.0, 32.0, 16.0);
    let flops = bf * sf * hf * (2.0 * cf * rf * rf * (nf + pf) + 4.0 * rf * nf * pf);
    let bytes = esz * (2.0 * bf * sf * rf * gf * nf + 3.0 * bf * sf * hf * pf + bf * hf * sf)
        + 4.0 * (2.0 * bf * hf * sf + bf * sf * hf * naf);
    let name = format!(
        "forward/{}/H={h}/B={b}/S={s}",
        if T::DTYPE == Dtype::F32 {
            "f32"
        } else {
            "bf16"
        }
    );
    let tflops = flops / (ms * 1e-3) / 1e12;
    let gbs = bytes / (ms * 1e-3) / 1e9;
    println!(
        "{name:<32} {:>10.1} µs/call {:>8.2} TFLOP/s {:>6.2}% of 790 {:>8.1} GB/s {:>5.1}% of HBM   kernels: {}",
        ms * 1e3,
        tflops,
        100.0 * tflops * 1e12 / TC_FLOP_PER_S,
        gbs,
        100.0 * gbs * 1e9 / HBM_BYTES_PER_S,
        dispatch_paths_on_gpu(gpu, &cfg).join(", ")
    );
}

/// (H, B, S) of the forward and backward benchmarks.
const MODEL_SHAPES: [(usize, usize, usize); 6] = [
    (64, 1, 2048),
    (64, 8, 2048),
    (32, 1, 2048),
    (32, 8, 2048),
    (64, 1, 8192),
    (64, 8, 8192),
];

/// `forward/...`: the H200 model geometry over (H, B, S), both activation dtypes.
/// Whether `MAMBA3_BENCH_BATCH` (unset: every batch) selects this batch size; profilers use it
/// to run one geometry of a family.
fn batch_selected(batch: usize) -> bool {
    std::env::var("MAMBA3_BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .is_none_or(|b| b == batch)
}

/// Whether `MAMBA3_BENCH_TOKENS` (a comma-separated list; unset: every count of the table)
/// selects this decode token count.
fn tokens_selected(tokens: usize) -> bool {
    std::env::var("MAMBA3_BENCH_TOKENS").map_or(true, |list| {
        list.split(',')
            .any(|t| t.trim().parse::<usize>() == Ok(tokens))
    })
}

/// Whether `MAMBA3_BENCH_AUTO_ONLY=1` restricts the decode table to the automatic path (A/B runs
/// of one kernel change).
fn auto_only() -> bool {
    std::env::var("MAMBA3_BENCH_AUTO_ONLY").is_ok_and(|v| v == "1")
}

/// Whether `MAMBA3_BENCH_DTYPE` (unset: both) selects this activation dtype of the forward,
/// backward and decode tables.
fn dtype_selected(dtype: &str) -> bool {
    std::env::var("MAMBA3_BENCH_DTYPE").map_or(true, |d| d == dtype)
}

fn bench_forward(gpu: &Gpu, stream: &Arc<CudaStream>) {
    for (h, b, s) in MODEL_SHAPES {
        if !batch_selected(b) {
            continue;
        }
        if dtype_selected("bf16") {
            bench_forward_one::<half::bf16>(gpu, stream, h, b, s);
        }
        if dtype_selected("f32") {
            bench_forward_one::<f32>(gpu, stream, h, b, s);
        }
    }
}

/// Segment length (tokens between state checkpoints) of the backward benchmarks.
const BACKWARD_SEGMENT: usize = 64;

/// The backward (alone, then after the forward) at `(heads, batch, seq_len)` on the forward
/// benchmark's geometry, activations in `T`; the backward's segment length is
/// [`BACKWARD_SEGMENT`].
///
/// FLOPs: the minimum of `shared/spec/performance.md` §3.4, `3a + 2b + 5c` per chunk
/// (589,824 per token and head at C=16, R=4, N=128, P=64), plus the forward's §3.1 minimum for
/// forward+backward. Extra memory: the backward's workspace (gradients not counted).
fn bench_backward_one<T: Activation>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    heads: usize,
    batch: usize,
    seq_len: usize,
) {
    let fwd_cfg = model_config::<T>(heads, batch, seq_len);
    let bwd_cfg = ForwardConfig {
        chunk_size: BACKWARD_SEGMENT,
        ..fwd_cfg
    };
    let (b, s, h, p) = (batch, seq_len, heads, fwd_cfg.head_dim);
    let mut rng = SplitMix64::new(77 + (heads * 131 + batch * 7 + seq_len) as u64);
    let dev = ModelInputs::<T>::random(stream, &fwd_cfg, &mut rng);
    let dout = random_buffer(stream, b * s * h * p, &mut rng, |rng: &mut SplitMix64| {
        T::from_f64(rng.normal())
    });
    let mut out = stream
        .alloc_zeros::<T>(b * s * h * p)
        .expect("allocating a benchmark buffer");
    let inputs = dev.views();
    // The figure reported is the workspace of the path `backward` takes here
    // (`workspace_len_on`); the allocation covers every path, for the pinned chunked run below.
    let ws_len = backward::workspace_len_on(gpu, &bwd_cfg).expect("workspace size");
    let mut workspace = stream
        .alloc_zeros::<f32>(backward::workspace_len(&bwd_cfg).expect("workspace size"))
        .expect("allocating the backward workspace");
    let mut grads = backward::backward_alloc(gpu, stream, &bwd_cfg, &inputs, &dout.as_view())
        .expect("allocating the gradients");
    let mut run_backward = || {
        backward::backward(
            gpu,
            stream,
            &bwd_cfg,
            &inputs,
            &dout.as_view(),
            &mut grads.as_views_mut(),
            &mut workspace.as_view_mut(),
        )
        .unwrap()
    };
    let ms_bwd = time_ms(gpu, stream, 1, 3, &mut run_backward);
    // A training step: the forward as the forward benchmark runs it (split into sequence
    // segments where B·H leaves SMs idle), writing the backward's checkpoints where the
    // tensor-core backward runs, then the backward without its checkpoint sweep.
    let mut fwd_workspace = stream
        .alloc_zeros::<f32>(workspace_len(&fwd_cfg, gpu.sm_count()).max(1))
        .expect("allocating the forward workspace");
    let run_forward =
        |out: &mut CudaSlice<T>, fws: &mut CudaSlice<f32>, ws: &mut CudaSlice<f32>| {
            backward::forward_for_backward(
                gpu,
                stream,
                &fwd_cfg,
                &inputs,
                &mut out.as_view_mut(),
                None,
                Some(&mut fws.as_view_mut()),
                &mut ws.as_view_mut(),
            )
            .unwrap()
        };
    let ms_fwd = time_ms(gpu, stream, 1, 3, || {
        run_forward(&mut out, &mut fwd_workspace, &mut workspace);
    });
    let ms_both = time_ms(gpu, stream, 1, 3, || {
        let checkpoints = run_forward(&mut out, &mut fwd_workspace, &mut workspace);
        backward::backward_with_checkpoints(
            gpu,
            stream,
            &bwd_cfg,
            &checkpoints,
            &inputs,
            &dout.as_view(),
            &mut grads.as_views_mut(),
            &mut workspace.as_view_mut(),
        )
        .unwrap()
    });
    let written = run_forward(&mut out, &mut fwd_workspace, &mut workspace).written();
    // Where the tensor-core backward runs, the chunked kernel it replaced, for comparison.
    let path = backward::backward_path(&bwd_cfg, gpu.max_shared_memory_optin());
    let ms_chunked = (path == backward::BackwardPath::TensorCore).then(|| {
        time_ms(gpu, stream, 1, 3, || {
            backward::backward_with_path(
                gpu,
                stream,
                &bwd_cfg,
                backward::BackwardPath::Chunked,
                &inputs,
                &dout.as_view(),
                &mut grads.as_views_mut(),
                &mut workspace.as_view_mut(),
            )
            .unwrap()
        })
    });
    let (tokens, rf, nf, pf, cf) = ((b * s * h) as f64, 4.0, 128.0, 64.0, 16.0);
    let fwd_flops = tokens * (2.0 * cf * rf * rf * (nf + pf) + 4.0 * rf * nf * pf);
    let bwd_flops = tokens
        * (3.0 * 2.0 * cf * rf * rf * nf
            + 2.0 * 2.0 * cf * rf * rf * pf
            + 5.0 * 2.0 * rf * nf * pf);
    let dtype = if T::DTYPE == Dtype::F32 {
        "f32"
    } else {
        "bf16"
    };
    let ws_mib = ws_len as f64 * 4.0 / (1 << 20) as f64;
    println!(
        "{:<34} {:>10.3} ms   (the training step's forward{})",
        format!("forward-for-backward/{dtype}/H={h}/B={b}/S={s}"),
        ms_fwd,
        if written {
            ", writing the backward's checkpoints"
        } else {
            "; no checkpoints on this path"
        }
    );
    for (what, ms, flops) in [
        ("backward", ms_bwd, bwd_flops),
        ("fwd+bwd", ms_both, fwd_flops + bwd_flops),
    ] {
        let frac = flops / (ms * 1e-3) / TC_FLOP_PER_S;
        println!(
            "{:<34} {:>10.3} ms {:>7.3}% of the §3.4 floor at 790 TFLOP/s   workspace {ws_mib:.0} MiB   kernels: {}",
            format!("{what}/{dtype}/H={h}/B={b}/S={s}"),
            ms,
            100.0 * frac,
            backward::dispatch_paths_on_gpu(gpu, &bwd_cfg).join(", ")
        );
    }
    if let Some(ms) = ms_chunked {
        println!(
            "{:<34} {:>10.3} ms {:>7.3}% of the §3.4 floor at 790 TFLOP/s   (the chunked kernel, pinned)",
            format!("backward-chunked/{dtype}/H={h}/B={b}/S={s}"),
            ms,
            100.0 * bwd_flops / (ms * 1e-3) / TC_FLOP_PER_S
        );
    }
}

/// `backward/...`: the forward benchmark's geometries, both activation dtypes.
fn bench_backward(gpu: &Gpu, stream: &Arc<CudaStream>) {
    for (h, b, s) in MODEL_SHAPES {
        if !batch_selected(b) {
            continue;
        }
        if dtype_selected("bf16") {
            bench_backward_one::<half::bf16>(gpu, stream, h, b, s);
        }
        if dtype_selected("f32") {
            bench_backward_one::<f32>(gpu, stream, h, b, s);
        }
    }
}

type Bench = fn(&Gpu, &Arc<CudaStream>);

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("no GPU here ({e}); nothing to benchmark");
            return;
        }
    };
    let (major, minor) = gpu.compute_capability();
    println!(
        "{} (sm_{major}{minor}, {} SMs); limits used: HBM 4.3 TB/s, bf16 790 TFLOP/s",
        gpu.name(),
        gpu.sm_count()
    );
    // `MAMBA3_BENCH_WGMMA=0` runs the `mma.sync` kernels where `wgmma` twins exist (A/B runs).
    let wgmma =
        gpu.set_wgmma_kernels(std::env::var("MAMBA3_BENCH_WGMMA").map_or(true, |v| v != "0"));
    println!("wgmma kernels: {}", if wgmma { "on" } else { "off" });
    // `MAMBA3_BENCH_WS=0` runs the tensor-core forward (or its `wgmma` twin) where the
    // warp-specialized forward would (A/B runs).
    let ws = gpu
        .set_warp_specialized_kernels(std::env::var("MAMBA3_BENCH_WS").map_or(true, |v| v != "0"));
    println!(
        "warp-specialized forward: {}",
        if ws { "on" } else { "off" }
    );
    let stream = gpu.context().new_stream().expect("creating a stream");
    let benches: [(&str, Bench); 5] = [
        ("forward", bench_forward),
        ("backward", bench_backward),
        ("decode", bench_decode),
        ("primitives/sincos", bench_sincos),
        ("primitives/warp_scan", bench_warp_scan),
    ];
    for (name, run) in benches {
        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
            run(&gpu, &stream);
        }
    }
}
