//! The chunked forward kernel's source (`kernels/src/chunked_forward.rs`) compiled for the host
//! against emulated device primitives, checked against the float64 golden model on the CPU.
//!
//! Each block runs as `FORWARD_THREADS` OS threads with a real barrier; shared memory is an array
//! of atomics whose every access is bounds-checked and race-checked (a word written by one thread
//! and touched by another between the same two barriers is reported); global memory accesses go
//! through the `Elem` trait and are checked against the buffers of the launch. Slow (hundreds of
//! OS threads per block), so the geometries are small; they cover every branch of the kernel.

#![allow(dead_code)]

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use mamba3::golden::{
    forward_recurrent, Mamba3Geometry, Mamba3Inputs, OutputMode, RandomOptions, Rotation,
};
use mamba3_abi::{ForwardParams, ForwardSmem, ForwardStage, FORWARD_THREADS};

use common::rel_err;

/// Per-thread launch context of the emulation.
struct ThreadCtx {
    tid: u32,
    block: (u32, u32),
    launch: Arc<Launch>,
    epoch: u64,
}

/// State shared by the threads of one block.
struct Launch {
    smem: Vec<AtomicU32>,
    /// Per word: `(epoch << 32) | (tid + 1)` of the last writer.
    writer: Vec<AtomicU64>,
    /// Per word: `(epoch << 32) | (tid + 1)` of the last reader, `tid + 1 = 0xffff` for several.
    reader: Vec<AtomicU64>,
    barrier: Barrier,
    warp_slots: Vec<AtomicU32>,
    /// Six operand registers per thread for the emulated `mma`.
    mma_slots: Vec<AtomicU32>,
    warp_barriers: Vec<Barrier>,
    /// Global buffers of the launch: (start address, length in bytes, name).
    buffers: Vec<(u64, u64, &'static str)>,
    errors: Mutex<Vec<String>>,
    failed: AtomicBool,
}

thread_local! {
    static CTX: RefCell<Option<ThreadCtx>> = const { RefCell::new(None) };
}

fn with_ctx<T>(f: impl FnOnce(&mut ThreadCtx) -> T) -> T {
    CTX.with(|c| f(c.borrow_mut().as_mut().expect("emulated thread context")))
}

fn fail(msg: String) -> ! {
    eprintln!("EMULATION ERROR: {msg}");
    // Other threads of the block wait at a barrier: stop the whole test process.
    std::process::abort();
}

const MULTI: u64 = 0xffff;

fn smem_word(addr: u32, write: bool) -> usize {
    with_ctx(|c| {
        if !addr.is_multiple_of(4) {
            fail(format!("tid {} unaligned shared access at {addr}", c.tid));
        }
        let w = (addr / 4) as usize;
        let l = &c.launch;
        if w >= l.smem.len() {
            fail(format!(
                "tid {} block {:?}: shared {} at byte {addr} past the {} bytes of the launch",
                c.tid,
                c.block,
                if write { "write" } else { "read" },
                4 * l.smem.len()
            ));
        }
        let me = c.tid as u64 + 1;
        let cur = c.epoch;
        let wr = l.writer[w].load(Ordering::Relaxed);
        if wr >> 32 == cur && wr & 0xffff_ffff != me && wr != 0 {
            let kind = if write {
                "write-after-write"
            } else {
                "read-after-write"
            };
            let msg = format!(
                "{kind} race at shared byte {addr}: tid {} and tid {} between the same barriers (epoch {cur})",
                c.tid,
                (wr & 0xffff_ffff) - 1
            );
            l.errors.lock().unwrap().push(msg);
            l.failed.store(true, Ordering::Relaxed);
        }
        if write {
            let rd = l.reader[w].load(Ordering::Relaxed);
            if rd >> 32 == cur && rd & 0xffff_ffff != me && rd != 0 {
                let msg = format!(
                    "write-after-read race at shared byte {addr}: writer tid {} (epoch {cur})",
                    c.tid
                );
                l.errors.lock().unwrap().push(msg);
                l.failed.store(true, Ordering::Relaxed);
            }
            l.writer[w].store((cur << 32) | me, Ordering::Relaxed);
        } else {
            let rd = l.reader[w].load(Ordering::Relaxed);
            let next = if rd >> 32 == cur && rd & 0xffff_ffff != me {
                (cur << 32) | MULTI
            } else {
                (cur << 32) | me
            };
            l.reader[w].store(next, Ordering::Relaxed);
        }
        w
    })
}

fn smem_read(addr: u32) -> u32 {
    let w = smem_word(addr, false);
    with_ctx(|c| c.launch.smem[w].load(Ordering::Relaxed))
}

fn smem_write(addr: u32, v: u32) {
    let w = smem_word(addr, true);
    with_ctx(|c| c.launch.smem[w].store(v, Ordering::Relaxed));
}

fn check_global(base: u64, i: usize, size: usize, write: bool) {
    with_ctx(|c| {
        let addr = base + (i * size) as u64;
        let ok = c
            .launch
            .buffers
            .iter()
            .any(|&(s, len, _)| addr >= s && addr + size as u64 <= s + len);
        if !ok {
            let near = c
                .launch
                .buffers
                .iter()
                .find(|&&(s, _, _)| s == base)
                .map_or("?", |b| b.2);
            fail(format!(
                "tid {} block {:?}: global {} of element {i} of buffer `{near}` out of bounds",
                c.tid,
                c.block,
                if write { "store" } else { "load" }
            ));
        }
    })
}

/// Emulated `crate::arch`.
mod arch {
    pub mod float {
        pub fn fma_rn(a: f32, b: f32, c: f32) -> f32 {
            a.mul_add(b, c)
        }
        pub fn round_nearest(a: f32) -> f32 {
            a.round_ties_even()
        }
        pub fn exp2_approx(a: f32) -> f32 {
            a.exp2()
        }
        pub fn sqrt_rn(a: f32) -> f32 {
            a.sqrt()
        }
        pub fn floor(a: f32) -> f32 {
            a.floor()
        }
        pub fn to_tf32(a: f32) -> u32 {
            // Round to nearest, ties away from zero, on the 13 dropped mantissa bits (finite a).
            (a.to_bits() + 0x1000) & !0x1fff
        }
        pub fn to_bf16(a: f32) -> u16 {
            half::bf16::from_f32(a).to_bits()
        }
    }

    pub mod mma {
        use std::sync::atomic::Ordering;

        pub use super::mma_tf32::mma_m16n8k8_tf32_f32;

        /// The warp's 32 lanes post their operand registers, then each lane forms its four
        /// accumulator elements from the whole A and B tiles rebuilt through the fragment maps.
        pub fn mma_m16n8k16_bf16_f32(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            let warp = (tid / 32) as usize;
            let lane = tid % 32;
            for (j, v) in a.iter().chain(b.iter()).enumerate() {
                launch.mma_slots[6 * tid as usize + j].store(*v, Ordering::Relaxed);
            }
            launch.warp_barriers[warp].wait();
            let half = |v: u32, hi: bool| -> f32 {
                f32::from_bits(if hi { v & 0xffff_0000 } else { v << 16 })
            };
            let mut am = [[0.0f32; 16]; 16];
            let mut bm = [[0.0f32; 8]; 16];
            for l in 0..32u32 {
                let slot = |j: usize| {
                    launch.mma_slots[6 * (warp * 32 + l as usize) + j].load(Ordering::Relaxed)
                };
                for i in 0..8u32 {
                    let (r, c) = super::super::frag::a_m16k16(l, i);
                    am[r as usize][c as usize] = half(slot((i / 2) as usize), i % 2 == 1);
                }
                for i in 0..4u32 {
                    let (k, n) = super::super::frag::b_k16n8(l, i);
                    bm[k as usize][n as usize] = half(slot(4 + (i / 2) as usize), i % 2 == 1);
                }
            }
            launch.warp_barriers[warp].wait();
            for (s, v) in acc.iter_mut().enumerate() {
                let (r, c) = super::super::frag::acc_m16n8(lane, s as u32);
                let mut sum = 0.0f32;
                for k in 0..16 {
                    sum += am[r as usize][k] * bm[k][c as usize];
                }
                *v += sum;
            }
        }
    }

    /// As `mma` above for `mma.m16n8k8` tf32 (A 16×8, B 8×8 of f32 bit patterns).
    pub mod mma_tf32 {
        use std::sync::atomic::Ordering;

        pub fn mma_m16n8k8_tf32_f32(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            let warp = (tid / 32) as usize;
            let lane = tid % 32;
            for (j, v) in a.iter().chain(b.iter()).enumerate() {
                launch.mma_slots[6 * tid as usize + j].store(*v, Ordering::Relaxed);
            }
            launch.warp_barriers[warp].wait();
            let mut am = [[0.0f32; 8]; 16];
            let mut bm = [[0.0f32; 8]; 8];
            for l in 0..32u32 {
                let slot = |j: usize| {
                    launch.mma_slots[6 * (warp * 32 + l as usize) + j].load(Ordering::Relaxed)
                };
                for i in 0..4u32 {
                    let (r, c) = super::super::frag::a_m16k8_tf32(l, i);
                    am[r as usize][c as usize] = f32::from_bits(slot(i as usize));
                }
                for i in 0..2u32 {
                    let (k, n) = super::super::frag::b_k8n8_tf32(l, i);
                    bm[k as usize][n as usize] = f32::from_bits(slot(4 + i as usize));
                }
            }
            launch.warp_barriers[warp].wait();
            for (s, v) in acc.iter_mut().enumerate() {
                let (r, c) = super::super::frag::acc_m16n8(lane, s as u32);
                let mut sum = 0.0f32;
                for k in 0..8 {
                    sum += am[r as usize][k] * bm[k][c as usize];
                }
                *v += sum;
            }
        }
    }

    pub mod cp_async {
        /// Copies at once: the kernel reads the destination only after `wait_group` and a
        /// barrier, so the race check sees the copy as a write of the issuing thread.
        pub unsafe fn cp_async_cg_16(dst: u32, src: *const u8) {
            if !dst.is_multiple_of(16) || !(src as u64).is_multiple_of(16) {
                super::super::fail(format!("unaligned cp.async: dst {dst}, src {src:p}"));
            }
            super::super::check_global(src as u64, 0, 16, false);
            for k in 0..4u32 {
                let w = unsafe { (src as *const u32).add(k as usize).read_unaligned() };
                super::super::smem_write(dst + 4 * k, w);
            }
        }
        pub fn commit_group() {}
        pub fn wait_group<const PENDING: u32>() {}
    }

    pub mod sreg {
        use std::sync::atomic::Ordering;

        pub fn smem_base() -> u32 {
            0
        }
        pub fn thread_x() -> u32 {
            super::super::with_ctx(|c| c.tid)
        }
        pub fn block_x() -> u32 {
            super::super::with_ctx(|c| c.block.0)
        }
        pub fn block_y() -> u32 {
            super::super::with_ctx(|c| c.block.1)
        }
        pub fn lane_id() -> u32 {
            thread_x() % 32
        }
        pub fn sync_threads() {
            let launch = super::super::with_ctx(|c| c.launch.clone());
            launch.barrier.wait();
            super::super::with_ctx(|c| c.epoch += 1);
        }
        pub fn shfl_xor_f32(value: f32, mask: u32) -> f32 {
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            let warp = (tid / 32) as usize;
            let lane = tid % 32;
            launch.warp_slots[tid as usize].store(value.to_bits(), Ordering::Relaxed);
            launch.warp_barriers[warp].wait();
            let other = warp as u32 * 32 + (lane ^ mask);
            let v = f32::from_bits(launch.warp_slots[other as usize].load(Ordering::Relaxed));
            launch.warp_barriers[warp].wait();
            v
        }
        pub unsafe fn st_shared_f32(addr: u32, value: f32) {
            super::super::smem_write(addr, value.to_bits());
        }
        pub unsafe fn ld_shared_f32(addr: u32) -> f32 {
            f32::from_bits(super::super::smem_read(addr))
        }
        pub unsafe fn ld_shared_u32(addr: u32) -> u32 {
            super::super::smem_read(addr)
        }
        pub unsafe fn ld_shared_v4_f32(addr: u32) -> [f32; 4] {
            if !addr.is_multiple_of(16) {
                super::super::fail(format!("unaligned 16-byte shared load at {addr}"));
            }
            let mut out = [0.0; 4];
            for (k, o) in out.iter_mut().enumerate() {
                *o = f32::from_bits(super::super::smem_read(addr + 4 * k as u32));
            }
            out
        }
    }
}

/// Emulated `crate::elem`: the real conversions, with every access bounds-checked.
mod elem {
    pub trait Elem: Copy {
        const BYTES: u32;
        unsafe fn load(base: u64, i: usize) -> f32;
        unsafe fn store(base: u64, i: usize, value: f32);
    }

    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub struct Bf16(pub u16);

    impl Elem for f32 {
        const BYTES: u32 = 4;
        unsafe fn load(base: u64, i: usize) -> f32 {
            super::check_global(base, i, 4, false);
            unsafe { *(base as *const f32).add(i) }
        }
        unsafe fn store(base: u64, i: usize, value: f32) {
            super::check_global(base, i, 4, true);
            unsafe { *(base as *mut f32).add(i) = value }
        }
    }

    impl Elem for Bf16 {
        const BYTES: u32 = 2;
        unsafe fn load(base: u64, i: usize) -> f32 {
            super::check_global(base, i, 2, false);
            let bits = unsafe { *(base as *const u16).add(i) };
            f32::from_bits((bits as u32) << 16)
        }
        unsafe fn store(base: u64, i: usize, value: f32) {
            super::check_global(base, i, 2, true);
            unsafe { *(base as *mut u16).add(i) = super::arch::float::to_bf16(value) }
        }
    }
}

// The device math as it is (not reformatted from here: the kernels crate has its own style).
#[rustfmt::skip]
#[allow(clippy::all)]
#[path = "../kernels/src/math.rs"]
mod math;

#[path = "../kernels/src/angles.rs"]
mod angles;

#[path = "../kernels/src/frag.rs"]
mod frag;

// Device code indexes register arrays in unrolled loops on purpose; host lints do not apply.
#[allow(clippy::all)]
#[path = "../kernels/src/chunked_forward.rs"]
mod chunked_forward;

fn f32v(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}

fn bf16v(x: &[f64]) -> Vec<u16> {
    x.iter()
        .map(|&v| half::bf16::from_f64(v).to_bits())
        .collect()
}

/// Rounds the activations of `inp` to the precision of the kernel's inputs.
fn round_inputs(inp: &Mamba3Inputs, bf16: bool) -> Mamba3Inputs {
    let act = |x: &[f64]| -> Vec<f64> {
        x.iter()
            .map(|&v| {
                if bf16 {
                    half::bf16::from_f64(v).to_f64()
                } else {
                    v as f32 as f64
                }
            })
            .collect()
    };
    let f = |x: &[f64]| -> Vec<f64> { x.iter().map(|&v| v as f32 as f64).collect() };
    let mut out = inp.clone();
    out.q = act(&inp.q);
    out.k = act(&inp.k);
    out.v = act(&inp.v);
    out.z = inp.z.as_ref().map(|z| act(z));
    out.trap = act(&inp.trap);
    out.dt = f(&inp.dt);
    out.adt = f(&inp.adt);
    out.angle_logits = f(&inp.angle_logits);
    out.q_bias = f(&inp.q_bias);
    out.k_bias = f(&inp.k_bias);
    out.mimo_v = f(&inp.mimo_v);
    out.mimo_z = inp.mimo_z.as_ref().map(|m| f(m));
    out.mimo_o = inp.mimo_o.as_ref().map(|m| f(m));
    out.d = inp.d.as_ref().map(|m| f(m));
    if let Some(n) = &mut out.norm {
        n.weight = f(&n.weight);
    }
    out
}

struct Outputs {
    out: Vec<f64>,
    theta: Vec<f64>,
    ssm: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
}

/// Runs the emulated kernel on `inp` (already rounded) and returns outputs and final states.
fn run_emulated(inp: &Mamba3Inputs, chunk: usize, bf16: bool, staged: bool) -> Outputs {
    let g = inp.geometry;
    let mut buffers: Vec<(u64, u64, &'static str)> = Vec::new();
    // Activation buffers: keep either u16 or f32 storage alive.
    let mut act16: Vec<Vec<u16>> = Vec::new();
    let mut act32: Vec<Vec<f32>> = Vec::new();
    let mut reg_act =
        |x: &[f64], name: &'static str, bufs: &mut Vec<(u64, u64, &'static str)>| -> u64 {
            if bf16 {
                let v = bf16v(x);
                let ptr = v.as_ptr() as u64;
                bufs.push((ptr, 2 * v.len() as u64, name));
                act16.push(v);
                ptr
            } else {
                let v = f32v(x);
                let ptr = v.as_ptr() as u64;
                bufs.push((ptr, 4 * v.len() as u64, name));
                act32.push(v);
                ptr
            }
        };
    let q = reg_act(&inp.q, "q", &mut buffers);
    let k = reg_act(&inp.k, "k", &mut buffers);
    let v = reg_act(&inp.v, "v", &mut buffers);
    let z = inp.z.as_ref().map_or(0, |z| reg_act(z, "z", &mut buffers));
    let trap = reg_act(&inp.trap, "trap", &mut buffers);
    let width = inp.output_width();
    let out_len = g.batch * g.seq_len * g.heads * width;
    let fk_len = g.batch * g.rank * g.heads * g.state_dim;
    let fv_len = g.batch * g.heads * g.head_dim;
    let zeros = vec![0.0f64; out_len.max(fk_len).max(fv_len)];
    let out = reg_act(&zeros[..out_len], "out", &mut buffers);
    let fk = reg_act(&zeros[..fk_len], "final_k", &mut buffers);
    let fv = reg_act(&zeros[..fv_len], "final_v", &mut buffers);

    let mut f32s: Vec<Vec<f32>> = Vec::new();
    let mut reg_f =
        |x: &[f64], name: &'static str, bufs: &mut Vec<(u64, u64, &'static str)>| -> u64 {
            let v = f32v(x);
            let ptr = v.as_ptr() as u64;
            bufs.push((ptr, 4 * v.len() as u64, name));
            f32s.push(v);
            ptr
        };
    let dt = reg_f(&inp.dt, "dt", &mut buffers);
    let adt = reg_f(&inp.adt, "adt", &mut buffers);
    let angles = reg_f(&inp.angle_logits, "angles", &mut buffers);
    let q_bias = reg_f(&inp.q_bias, "q_bias", &mut buffers);
    let k_bias = reg_f(&inp.k_bias, "k_bias", &mut buffers);
    let mimo_v = reg_f(&inp.mimo_v, "mimo_v", &mut buffers);
    let mimo_z = inp
        .mimo_z
        .as_ref()
        .map_or(0, |m| reg_f(m, "mimo_z", &mut buffers));
    let mimo_o = inp
        .mimo_o
        .as_ref()
        .map_or(0, |m| reg_f(m, "mimo_o", &mut buffers));
    let d = inp.d.as_ref().map_or(0, |m| reg_f(m, "d", &mut buffers));
    let norm_weight = inp
        .norm
        .as_ref()
        .map_or(0, |n| reg_f(&n.weight, "norm_weight", &mut buffers));
    let ftheta = reg_f(
        &vec![0.0; g.batch * g.heads * g.num_angles],
        "final_theta",
        &mut buffers,
    );
    let fssm = reg_f(
        &vec![0.0; g.batch * g.heads * g.head_dim * g.state_dim],
        "final_ssm",
        &mut buffers,
    );

    let mode = match inp.output_mode() {
        OutputMode::Gated => mamba3_abi::output_mode::GATED,
        OutputMode::FusedNorm => mamba3_abi::output_mode::FUSED_NORM,
        OutputMode::Prereduce => mamba3_abi::output_mode::PREREDUCE,
    };
    let params = ForwardParams {
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
        out,
        final_theta: ftheta,
        final_ssm: fssm,
        final_k: fk,
        final_v: fv,
        batch: g.batch as u32,
        seq_len: g.seq_len as u32,
        rank: g.rank as u32,
        heads: g.heads as u32,
        groups: g.groups as u32,
        n: g.state_dim as u32,
        p: g.head_dim as u32,
        na: g.num_angles as u32,
        chunk: chunk as u32,
        mode,
        rotation: match inp.rotation {
            Rotation::HalfSplit => mamba3_abi::rotation::HALF_SPLIT,
            Rotation::Pairwise => mamba3_abi::rotation::PAIRWISE,
        },
        norm_eps: inp.norm.as_ref().map_or(1e-5, |n| n.eps as f32),
        staged: u32::from(staged),
    };
    let lay = ForwardSmem::new(
        g.rank as u32,
        g.state_dim as u32,
        g.head_dim as u32,
        g.num_angles as u32,
        chunk as u32,
    );
    let stage = ForwardStage::new(
        g.rank as u32,
        g.state_dim as u32,
        g.head_dim as u32,
        chunk as u32,
        if bf16 { 2 } else { 4 },
    );
    let words = lay.total as usize + if staged { stage.bytes as usize / 4 } else { 0 };
    let threads = FORWARD_THREADS as usize;
    let buffers = Arc::new(buffers);
    for by in 0..g.batch as u32 {
        for bx in 0..g.heads as u32 {
            let launch = Arc::new(Launch {
                // Poison shared memory: the kernel must not read what it did not write.
                smem: (0..words)
                    .map(|_| AtomicU32::new(f32::NAN.to_bits()))
                    .collect(),
                writer: (0..words).map(|_| AtomicU64::new(0)).collect(),
                reader: (0..words).map(|_| AtomicU64::new(0)).collect(),
                barrier: Barrier::new(threads),
                warp_slots: (0..threads).map(|_| AtomicU32::new(0)).collect(),
                mma_slots: (0..6 * threads).map(|_| AtomicU32::new(0)).collect(),
                warp_barriers: (0..threads / 32).map(|_| Barrier::new(32)).collect(),
                buffers: (*buffers).clone(),
                errors: Mutex::new(Vec::new()),
                failed: AtomicBool::new(false),
            });
            std::thread::scope(|s| {
                for tid in 0..threads as u32 {
                    let launch = launch.clone();
                    std::thread::Builder::new()
                        .stack_size(256 << 10)
                        .spawn_scoped(s, move || {
                            CTX.with(|c| {
                                *c.borrow_mut() = Some(ThreadCtx {
                                    tid,
                                    block: (bx, by),
                                    launch,
                                    epoch: 1,
                                })
                            });
                            let r = std::panic::catch_unwind(|| unsafe {
                                match (bf16, g.rank) {
                                    (false, 1) => {
                                        chunked_forward::chunked_forward::<f32, 1>(&params)
                                    }
                                    (false, 2) => {
                                        chunked_forward::chunked_forward::<f32, 2>(&params)
                                    }
                                    (false, 4) => {
                                        chunked_forward::chunked_forward::<f32, 4>(&params)
                                    }
                                    (false, 8) => {
                                        chunked_forward::chunked_forward::<f32, 8>(&params)
                                    }
                                    (true, 1) => {
                                        chunked_forward::chunked_forward::<elem::Bf16, 1>(&params)
                                    }
                                    (true, 2) => {
                                        chunked_forward::chunked_forward::<elem::Bf16, 2>(&params)
                                    }
                                    (true, 4) => {
                                        chunked_forward::chunked_forward::<elem::Bf16, 4>(&params)
                                    }
                                    (true, 8) => {
                                        chunked_forward::chunked_forward::<elem::Bf16, 8>(&params)
                                    }
                                    _ => panic!("unsupported rank"),
                                }
                            });
                            if r.is_err() {
                                fail(format!("tid {tid} panicked"));
                            }
                        })
                        .expect("spawning an emulated thread");
                }
            });
            let errors = launch.errors.lock().unwrap();
            if !errors.is_empty() {
                panic!(
                    "block ({bx},{by}): {} shared-memory races, first: {}",
                    errors.len(),
                    errors[0]
                );
            }
        }
    }
    let act_back = |ptr: u64, len: usize| -> Vec<f64> {
        if bf16 {
            let s = unsafe { std::slice::from_raw_parts(ptr as *const u16, len) };
            s.iter()
                .map(|&b| half::bf16::from_bits(b).to_f64())
                .collect()
        } else {
            let s = unsafe { std::slice::from_raw_parts(ptr as *const f32, len) };
            s.iter().map(|&v| v as f64).collect()
        }
    };
    let f_back = |ptr: u64, len: usize| -> Vec<f64> {
        let s = unsafe { std::slice::from_raw_parts(ptr as *const f32, len) };
        s.iter().map(|&v| v as f64).collect()
    };
    let res = Outputs {
        out: act_back(out, out_len),
        theta: f_back(ftheta, g.batch * g.heads * g.num_angles),
        ssm: f_back(fssm, g.batch * g.heads * g.head_dim * g.state_dim),
        k: act_back(fk, fk_len),
        v: act_back(fv, fv_len),
    };
    drop(act16);
    drop(act32);
    drop(f32s);
    res
}

struct Case {
    geo: Mamba3Geometry,
    chunk: usize,
    opts: RandomOptions,
    bf16: bool,
}

#[allow(clippy::too_many_arguments)]
fn geo(
    b: usize,
    s: usize,
    r: usize,
    g: usize,
    h: usize,
    n: usize,
    p: usize,
    na: usize,
) -> Mamba3Geometry {
    Mamba3Geometry {
        batch: b,
        seq_len: s,
        rank: r,
        groups: g,
        heads: h,
        state_dim: n,
        head_dim: p,
        num_angles: na,
    }
}

fn opts(rotation: Rotation, mode: OutputMode, has_z: bool, has_d: bool) -> RandomOptions {
    RandomOptions {
        rotation,
        mode,
        has_z,
        has_d,
    }
}

/// Runs `case` with and without the staging region; returns the worst error.
fn check(case: &Case, seed: u64) -> f64 {
    check_staged(case, seed, true).max(check_staged(case, seed, false))
}

fn check_staged(case: &Case, seed: u64, staged: bool) -> f64 {
    let raw = Mamba3Inputs::random(case.geo, case.opts, seed).unwrap();
    let inp = round_inputs(&raw, case.bf16);
    let reference = forward_recurrent(&inp).unwrap();
    let ours = run_emulated(&inp, case.chunk, case.bf16, staged);
    let fs = &reference.final_states;
    let e_out = rel_err(&ours.out, &reference.out);
    let e_theta = common::angle_rel_err(&ours.theta, &fs.theta);
    let e_ssm = rel_err(&ours.ssm, &fs.ssm);
    let e_k = rel_err(&ours.k, &fs.k);
    let e_v = rel_err(&ours.v, &fs.v);
    let worst = e_out.max(e_theta).max(e_ssm).max(e_k).max(e_v);
    eprintln!(
        "emulated {}{} {:?} C={} {:?}: error out {e_out:.2e} theta {e_theta:.2e} ssm {e_ssm:.2e} k {e_k:.2e} v {e_v:.2e}",
        if case.bf16 { "bf16" } else { "f32" },
        if staged { " staged" } else { "" },
        case.geo,
        case.chunk,
        case.opts
    );
    let tol = if case.bf16 { 1e-2 } else { 2e-6 };
    assert!(worst <= tol, "worst error {worst:e} above {tol:e}");
    worst
}

#[test]
fn emulated_kernel_matches_golden_on_small_geometries() {
    use OutputMode::*;
    use Rotation::*;
    let cases = [
        // Every rank; tails (S not a multiple of C), C not a power of two.
        Case {
            geo: geo(1, 13, 4, 1, 2, 16, 8, 4),
            chunk: 5,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: false,
        },
        Case {
            geo: geo(1, 11, 1, 1, 1, 12, 7, 3),
            chunk: 3,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: false,
        },
        Case {
            geo: geo(2, 9, 2, 2, 2, 8, 5, 2),
            chunk: 4,
            opts: opts(HalfSplit, Prereduce, false, true),
            bf16: false,
        },
        Case {
            geo: geo(1, 7, 8, 1, 1, 16, 4, 8),
            chunk: 3,
            opts: opts(Pairwise, Gated, false, false),
            bf16: false,
        },
        // N not a multiple of 4, Na < N/2, S = 1, C = 1, C > S, GQA.
        Case {
            geo: geo(1, 1, 4, 1, 1, 6, 3, 1),
            chunk: 4,
            opts: opts(HalfSplit, FusedNorm, true, false),
            bf16: false,
        },
        Case {
            geo: geo(1, 6, 2, 3, 3, 10, 9, 2),
            chunk: 1,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: false,
        },
        Case {
            geo: geo(1, 5, 1, 2, 4, 4, 2, 0),
            chunk: 16,
            opts: opts(Pairwise, Prereduce, true, false),
            bf16: false,
        },
        // bf16 activations.
        Case {
            geo: geo(1, 10, 4, 1, 2, 16, 8, 4),
            chunk: 4,
            opts: opts(HalfSplit, FusedNorm, true, true),
            bf16: true,
        },
        Case {
            geo: geo(1, 9, 8, 1, 1, 8, 6, 4),
            chunk: 2,
            opts: opts(Pairwise, Prereduce, true, true),
            bf16: true,
        },
        // Tensor cores (rows cp·R, N and P whole 16-wide tiles), with tails: f32 (three TF32
        // passes), then bf16.
        Case {
            geo: geo(1, 23, 4, 1, 2, 32, 16, 8),
            chunk: 8,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: false,
        },
        Case {
            geo: geo(1, 19, 2, 1, 1, 16, 32, 4),
            chunk: 8,
            opts: opts(HalfSplit, Gated, true, false),
            bf16: false,
        },
        Case {
            geo: geo(1, 23, 4, 1, 2, 32, 16, 8),
            chunk: 8,
            opts: opts(HalfSplit, Gated, true, true),
            bf16: true,
        },
        Case {
            geo: geo(2, 19, 2, 2, 2, 16, 32, 4),
            chunk: 8,
            opts: opts(Pairwise, FusedNorm, true, true),
            bf16: true,
        },
        Case {
            geo: geo(1, 21, 1, 1, 1, 48, 16, 12),
            chunk: 16,
            opts: opts(HalfSplit, Prereduce, false, false),
            bf16: true,
        },
        Case {
            geo: geo(1, 7, 8, 1, 1, 16, 16, 8),
            chunk: 2,
            opts: opts(Pairwise, Gated, true, true),
            bf16: true,
        },
    ];
    let mut worst = 0.0f64;
    for (i, case) in cases.iter().enumerate() {
        worst = worst.max(check(case, 100 + i as u64));
    }
    eprintln!(
        "emulated kernel: worst error {worst:.2e} over {} cases",
        cases.len()
    );
}

/// The GPU suite's small geometries plus short versions of upstream's, in emulation (slow: run on
/// demand with `--ignored`).
#[test]
#[ignore]
fn emulated_kernel_matches_golden_on_gpu_suite_geometries() {
    use OutputMode::*;
    use Rotation::*;
    let mut cases = vec![
        (
            geo(2, 100, 4, 1, 3, 32, 16, 8),
            16,
            opts(HalfSplit, Gated, true, true),
        ),
        (
            geo(1, 77, 4, 2, 4, 64, 32, 16),
            12,
            opts(Pairwise, FusedNorm, true, true),
        ),
        (
            geo(2, 61, 2, 1, 2, 16, 24, 8),
            7,
            opts(HalfSplit, Prereduce, false, true),
        ),
        (
            geo(1, 45, 8, 1, 2, 32, 8, 3),
            5,
            opts(Pairwise, Gated, false, false),
        ),
        (
            geo(1, 33, 1, 3, 3, 128, 64, 32),
            64,
            opts(HalfSplit, FusedNorm, true, false),
        ),
        (
            geo(1, 1, 4, 1, 2, 128, 64, 32),
            16,
            opts(HalfSplit, Gated, true, true),
        ),
        (
            geo(2, 1, 2, 2, 2, 6, 5, 1),
            1,
            opts(Pairwise, Prereduce, true, false),
        ),
        (
            geo(1, 19, 4, 1, 1, 10, 7, 2),
            1,
            opts(HalfSplit, FusedNorm, false, true),
        ),
        (
            geo(1, 50, 2, 2, 4, 48, 33, 0),
            24,
            opts(HalfSplit, Gated, true, true),
        ),
        (
            geo(2, 130, 4, 1, 2, 128, 64, 64),
            16,
            opts(Pairwise, Prereduce, true, true),
        ),
        (
            geo(1, 70, 8, 1, 2, 64, 64, 16),
            8,
            opts(HalfSplit, FusedNorm, true, true),
        ),
        (
            geo(1, 9, 1, 1, 1, 2, 1, 1),
            3,
            opts(Pairwise, Gated, true, false),
        ),
    ];
    for (n, p, r, c) in [
        (16, 64, 4, 8),
        (256, 64, 4, 8),
        (64, 128, 4, 16),
        (128, 128, 4, 8),
        (128, 64, 8, 8),
        (128, 64, 2, 32),
        (128, 64, 1, 64),
    ] {
        cases.push((
            geo(1, 3 * c + 1, r, 1, 1, n, p, n / 4),
            c,
            opts(HalfSplit, Gated, true, true),
        ));
    }
    for (i, (g, chunk, o)) in cases.into_iter().enumerate() {
        for bf16 in [false, true] {
            check(
                &Case {
                    geo: g,
                    chunk,
                    opts: o,
                    bf16,
                },
                900 + i as u64,
            );
        }
    }
}

/// The f64 angle increment matches the float64 definition to ~1e-16 absolute.
#[test]
fn angle_increment_is_accurate_in_f64() {
    let mut rng = mamba3::golden::SplitMix64::new(5);
    let mut worst = 0.0f64;
    for i in 0..200_000 {
        let logit = if i % 2 == 0 {
            (rng.normal() * 3.0) as f32
        } else {
            rng.uniform_range(-40.0, 40.0) as f32
        };
        let dt = rng.uniform_range(0.0, 2.0) as f32;
        let want = std::f64::consts::PI * (logit as f64).tanh() * dt as f64;
        let got = angles::angle_increment(logit, dt);
        worst = worst.max((got - want).abs());
    }
    for x in [0.0f64, 1e-30, -1e-8, 0.5, -3.0, 19.9, 20.1, -1e3] {
        assert!((angles::tanh_f64(x) - x.tanh()).abs() < 1e-15, "tanh({x})");
    }
    assert!(angles::tanh_f64(f64::NAN).is_nan());
    for y in [0.0f64, 1e-3, 0.3466, 1.0, 10.0, 40.0, 63.9] {
        let rel = (angles::exp_f64(y) - y.exp()).abs() / y.exp();
        assert!(rel < 4e-16, "exp({y}): relative error {rel:e}");
    }
    eprintln!("angle increment: worst absolute error {worst:.2e} over 200000 draws");
    assert!(worst < 2e-15, "{worst:e}");
    for x in [-7.0f64, -1e-9, 0.0, 3.0, 6.3, 1e6] {
        let r = angles::reduced_f32(x) as f64;
        let d = (r - x).rem_euclid(std::f64::consts::TAU);
        assert!(d.min(std::f64::consts::TAU - d) < 1e-6, "reduce {x}");
        assert!((-std::f64::consts::PI..std::f64::consts::PI + 1e-6).contains(&r));
    }
}
