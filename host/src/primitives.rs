//! Host drivers of the self-test kernels (`kernels/src/primitives.rs`).
//!
//! Each function copies its inputs to the GPU, runs one primitive on the default stream,
//! synchronizes and copies the result back: they exist to check the primitives against plain host
//! loops, so unlike the operators they allocate and synchronize by contract.

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, LaunchConfig};
use half::bf16;

use crate::device::Gpu;
use crate::error::{Error, Result};
use crate::kernel::Kernel;

fn check_len(arg: &'static str, len: usize, expected: usize) -> Result<()> {
    if len == expected {
        Ok(())
    } else {
        Err(Error::invalid(
            arg,
            format!("{len} elements"),
            format!("must hold exactly {expected} elements"),
        ))
    }
}

fn upload<T: DeviceRepr>(gpu: &Gpu, host: &[T]) -> Result<CudaSlice<T>> {
    gpu.default_stream()
        .clone_htod(host)
        .map_err(Error::driver("copying to the device"))
}

fn download<T: DeviceRepr + Default + Clone>(gpu: &Gpu, dev: &CudaSlice<T>) -> Result<Vec<T>> {
    gpu.default_stream()
        .clone_dtoh(dev)
        .map_err(Error::driver("copying to the host"))
}

fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    len: usize,
) -> Result<CudaSlice<T>> {
    gpu.default_stream()
        .alloc_zeros(len)
        .map_err(Error::driver("allocating"))
}

fn one_warp(shared_mem_bytes: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes,
    }
}

fn covering(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).max(1) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn check_count(arg: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(arg, format!("{n} elements"), "must be below 2^32"))
}

/// `a·b + c` through one `mma.m16n8k16` bf16 instruction: `a` 16×16 row-major, `b` 16×8 indexed
/// (k, n) row-major, `c` and the result 16×8 f32 row-major.
pub fn mma_bf16_m16n8k16(gpu: &Gpu, a: &[bf16], b: &[bf16], c: &[f32]) -> Result<Vec<f32>> {
    check_len("a", a.len(), 256)?;
    check_len("b", b.len(), 128)?;
    check_len("c", c.len(), 128)?;
    let bits = |x: &[bf16]| x.iter().map(|v| v.to_bits()).collect::<Vec<u16>>();
    let (da, db, dc) = (
        upload(gpu, &bits(a))?,
        upload(gpu, &bits(b))?,
        upload(gpu, c)?,
    );
    let mut dd = zeros::<f32>(gpu, 128)?;
    let stream = gpu.default_stream();
    let mut launch = gpu.launch(&stream, Kernel::PrimMmaBf16M16n8k16)?;
    launch.arg(&da).arg(&db).arg(&dc).arg(&mut dd);
    // SAFETY: argument order and sizes match the kernel's contract.
    unsafe { launch.run(one_warp(0))? };
    download(gpu, &dd)
}

/// `tf32(a)·tf32(b) + c` through one `mma.m16n8k8` tf32 instruction: `a` 16×8, `b` 8×8 indexed
/// (k, n), `c` and the result 16×8, all f32 row-major. Inputs are rounded to TF32 on the device.
pub fn mma_tf32_m16n8k8(gpu: &Gpu, a: &[f32], b: &[f32], c: &[f32]) -> Result<Vec<f32>> {
    check_len("a", a.len(), 128)?;
    check_len("b", b.len(), 64)?;
    check_len("c", c.len(), 128)?;
    let (da, db, dc) = (upload(gpu, a)?, upload(gpu, b)?, upload(gpu, c)?);
    let mut dd = zeros::<f32>(gpu, 128)?;
    let stream = gpu.default_stream();
    let mut launch = gpu.launch(&stream, Kernel::PrimMmaTf32M16n8k8)?;
    launch.arg(&da).arg(&db).arg(&dc).arg(&mut dd);
    // SAFETY: argument order and sizes match the kernel's contract.
    unsafe { launch.run(one_warp(0))? };
    download(gpu, &dd)
}

/// Four 8×8 u16 matrices (`src`, matrix-major, row-major within) through shared memory and
/// `ldmatrix .x4` (`transpose`: `.x4.trans`); returns the 32 lanes × 4 registers, lane-major.
pub fn ldmatrix_x4(gpu: &Gpu, src: &[u16], transpose: bool) -> Result<Vec<u32>> {
    check_len("src", src.len(), 256)?;
    let dsrc = upload(gpu, src)?;
    let mut dout = zeros::<u32>(gpu, 128)?;
    let stream = gpu.default_stream();
    let transpose = transpose as u32;
    let mut launch = gpu.launch(&stream, Kernel::PrimLdmatrixX4)?;
    launch.arg(&dsrc).arg(&mut dout).arg(&transpose);
    // SAFETY: argument order and sizes match the kernel's contract; 512 bytes of shared memory.
    unsafe { launch.run(one_warp(512))? };
    download(gpu, &dout)
}

/// Copies `src` (a whole number of 16-byte chunks) global → shared → global with `cp.async` in one
/// block of `threads` threads, and returns what came back as little-endian words.
pub fn cp_async_roundtrip(gpu: &Gpu, src: &[u8], threads: u32) -> Result<Vec<u32>> {
    if src.is_empty() || !src.len().is_multiple_of(16) {
        return Err(Error::invalid(
            "src",
            format!("{} bytes", src.len()),
            "must be a positive multiple of 16 bytes",
        ));
    }
    if !(1..=1024).contains(&threads) {
        return Err(Error::invalid("threads", threads, "must be in 1..=1024"));
    }
    let chunks = check_count("src", src.len() / 16)?;
    let dsrc = upload(gpu, src)?;
    let mut dout = zeros::<u32>(gpu, src.len() / 4)?;
    let stream = gpu.default_stream();
    let mut launch = gpu.launch(&stream, Kernel::PrimCpAsync)?;
    launch.arg(&dsrc).arg(&mut dout).arg(&chunks);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: src.len() as u32,
    };
    // SAFETY: argument order and sizes match the kernel's contract (16·chunks bytes of smem).
    unsafe { launch.run(cfg)? };
    download(gpu, &dout)
}

/// Enqueues the warp-segmented affine scan of `(a, b)` into `(out_a, out_b)` on `stream` without
/// allocating or synchronizing (benchmarks time this).
pub fn launch_warp_scan_affine(
    gpu: &Gpu,
    stream: &CudaStream,
    a: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    out_a: &mut CudaSlice<f32>,
    out_b: &mut CudaSlice<f32>,
) -> Result<()> {
    check_len("b", b.len(), a.len())?;
    check_len("out_a", out_a.len(), a.len())?;
    check_len("out_b", out_b.len(), a.len())?;
    let n = check_count("a", a.len())?;
    let mut launch = gpu.launch(stream, Kernel::PrimWarpScan)?;
    launch.arg(a).arg(b).arg(out_a).arg(out_b).arg(&n);
    // SAFETY: argument order and sizes match the kernel's contract.
    unsafe { launch.run(covering(a.len())) }
}

/// Warp-segmented inclusive scan of affine maps `(a[i], b[i])`: each run of 32 elements starting at
/// a multiple of 32 is scanned on its own. Returns the scanned `(a, b)`.
pub fn warp_scan_affine(gpu: &Gpu, a: &[f32], b: &[f32]) -> Result<(Vec<f32>, Vec<f32>)> {
    check_len("b", b.len(), a.len())?;
    if a.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let (da, db) = (upload(gpu, a)?, upload(gpu, b)?);
    let (mut oa, mut ob) = (zeros::<f32>(gpu, a.len())?, zeros::<f32>(gpu, a.len())?);
    launch_warp_scan_affine(gpu, &gpu.default_stream(), &da, &db, &mut oa, &mut ob)?;
    Ok((download(gpu, &oa)?, download(gpu, &ob)?))
}

/// Enqueues `sin`/`cos` of every element of `x` into `sin`/`cos` on `stream` without allocating or
/// synchronizing (benchmarks time this).
pub fn launch_sincos(
    gpu: &Gpu,
    stream: &CudaStream,
    x: &CudaSlice<f32>,
    sin: &mut CudaSlice<f32>,
    cos: &mut CudaSlice<f32>,
) -> Result<()> {
    check_len("sin", sin.len(), x.len())?;
    check_len("cos", cos.len(), x.len())?;
    let n = check_count("x", x.len())?;
    let mut launch = gpu.launch(stream, Kernel::PrimSincos)?;
    launch.arg(x).arg(sin).arg(cos).arg(&n);
    // SAFETY: argument order and sizes match the kernel's contract.
    unsafe { launch.run(covering(x.len())) }
}

/// `(sin x, cos x)` for every element through the device's range-reduced `sincos`.
pub fn sincos(gpu: &Gpu, x: &[f32]) -> Result<(Vec<f32>, Vec<f32>)> {
    if x.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let dx = upload(gpu, x)?;
    let (mut ds, mut dc) = (zeros::<f32>(gpu, x.len())?, zeros::<f32>(gpu, x.len())?);
    launch_sincos(gpu, &gpu.default_stream(), &dx, &mut ds, &mut dc)?;
    Ok((download(gpu, &ds)?, download(gpu, &dc)?))
}

/// How [`wgmma_bf16_m64n128k128`] stores its operands in shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgmmaLayout {
    /// A stored M-major (its columns as swizzled rows), else K-major.
    pub a_m_major: bool,
    /// B stored N-major (its rows as swizzled rows), else K-major.
    pub b_n_major: bool,
    /// The M-/N-major descriptors with their leading and stride byte offsets exchanged: a
    /// diagnostic that tells which convention the hardware follows when the plain one fails.
    pub exchange_offsets: bool,
}

/// `a·b` through eight `wgmma.m64n128k16` bf16 instructions (one warpgroup, operands in the
/// 128-byte swizzled shared tiles of `kernels/src/arch/wgmma.rs`): `a` 64×128 `(m, k)` row-major,
/// `b` 128×128 `(k, n)` row-major; returns the 64×128 f32 product row-major. Compute capability
/// 9.0 only ([`Error::Architecture`] elsewhere).
pub fn wgmma_bf16_m64n128k128(
    gpu: &Gpu,
    a: &[bf16],
    b: &[bf16],
    layout: WgmmaLayout,
) -> Result<Vec<f32>> {
    check_len("a", a.len(), 64 * 128)?;
    check_len("b", b.len(), 128 * 128)?;
    let bits = |x: &[bf16]| x.iter().map(|v| v.to_bits()).collect::<Vec<u16>>();
    let (da, db) = (upload(gpu, &bits(a))?, upload(gpu, &bits(b))?);
    let mut dd = zeros::<f32>(gpu, 64 * 128)?;
    let flags = layout.a_m_major as u32
        | (layout.b_n_major as u32) << 1
        | (layout.exchange_offsets as u32) << 2;
    let stream = gpu.default_stream();
    let mut launch = gpu.launch(&stream, Kernel::PrimWgmmaBf16M64n128k128)?;
    launch.arg(&da).arg(&db).arg(&mut dd).arg(&flags);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: mamba3_abi::WGMMA_TEST_SMEM,
    };
    // SAFETY: argument order and sizes match the kernel's contract (`WGMMA_TEST_SMEM` bytes).
    unsafe { launch.run(cfg)? };
    download(gpu, &dd)
}

/// How [`wgmma_f16_split_m64n64k128`] splits its operands and sums the passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitProduct {
    /// `lo` scaled by 2¹¹ and its products summed in their own accumulator (else `lo` unscaled,
    /// every pass in one accumulator).
    pub lo_scaled: bool,
    /// How many k16 steps one accumulator takes before it is added to the running sum by an f32
    /// add (1, 4); `None`: all eight steps in place in the tensor cores' accumulator.
    pub fresh_every: Option<u32>,
}

/// `a·b` at float32 accuracy through three binary16 `wgmma.m64n64k16` passes per k16 step on
/// operands split into `hi + lo` (`mamba3_kernels::f16_split`; one warpgroup, eight steps):
/// `a` 64×128 `(m, k)` row-major, `b` 128×64 `(k, n)` row-major, both within binary16's range
/// (`|x| < 65504`); returns the 64×64 f32 product row-major. A probe of the tensor cores'
/// accumulation for the f32 kernels; compute capability 9.0 only ([`Error::Architecture`]
/// elsewhere).
pub fn wgmma_f16_split_m64n64k128(
    gpu: &Gpu,
    a: &[f32],
    b: &[f32],
    how: SplitProduct,
) -> Result<Vec<f32>> {
    check_len("a", a.len(), 64 * 128)?;
    check_len("b", b.len(), 128 * 64)?;
    let fresh = match how.fresh_every {
        None => 0u32,
        Some(1) => 1,
        Some(4) => 2,
        Some(other) => {
            return Err(Error::invalid(
                "fresh_every",
                format!("Some({other})"),
                "must be Some(1), Some(4) or None (in place)".to_string(),
            ))
        }
    };
    let (da, db) = (upload(gpu, a)?, upload(gpu, b)?);
    let mut dd = zeros::<f32>(gpu, 64 * 64)?;
    let mode = how.lo_scaled as u32 | fresh << 1;
    let stream = gpu.default_stream();
    let mut launch = gpu.launch(&stream, Kernel::PrimWgmmaF16SplitM64n64k128)?;
    launch.arg(&da).arg(&db).arg(&mut dd).arg(&mode);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: mamba3_abi::WGMMA_SPLIT_TEST_SMEM,
    };
    // SAFETY: argument order and sizes match the kernel's contract (`WGMMA_SPLIT_TEST_SMEM`
    // bytes).
    unsafe { launch.run(cfg)? };
    download(gpu, &dd)
}
