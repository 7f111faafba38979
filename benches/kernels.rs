//! Kernel benchmarks: time per call (CUDA events, median of repeated calls) and the fraction of the
//! H200's limits reached (HBM ≈ 4.3 TB/s measured, bf16 tensor cores ≈ 790 TFLOP/s).
//!
//! `cargo xtask bench [FILTER...]` runs the benchmarks whose name contains a filter (all without
//! one). Without a GPU it prints one line and exits 0.

use std::sync::Arc;

use mamba3::cuda::{CudaSlice, CudaStream};
use mamba3::{primitives, Gpu};

/// Measured H200 HBM bandwidth, bytes per second.
const HBM_BYTES_PER_S: f64 = 4.3e12;

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
    let ms = time_ms(gpu, stream, 3, 20, || {
        primitives::launch_warp_scan_affine(gpu, stream, &a, &b, &mut oa, &mut ob).unwrap()
    });
    report(
        "primitives/warp_scan/n=64Mi",
        ms,
        16.0 * n as f64,
        "prim_warp_scan",
    );
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
    let stream = gpu.context().new_stream().expect("creating a stream");
    let benches: [(&str, Bench); 2] = [
        ("primitives/sincos", bench_sincos),
        ("primitives/warp_scan", bench_warp_scan),
    ];
    for (name, run) in benches {
        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
            run(&gpu, &stream);
        }
    }
}
