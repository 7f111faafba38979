//! Device code of the kernels crate compiled for the host against emulated device primitives
//! (shared by the `*_emulated` tests).
//!
//! A test file declares `mod emulation;` and re-exports `emulation::{arch, elem, frag, math}` at
//! its root, so kernel sources included with `#[path]` find them as `crate::arch` etc. Each block
//! of a launch runs as OS threads with a real barrier ([`run_grid`]); shared memory is an array of
//! atomics whose every access is bounds-checked and race-checked (a word written by one thread and
//! touched by another between the same two barriers is reported); global memory accesses through
//! the `Elem` trait (and `cp.async`) are checked against the buffers of the launch.

#![allow(dead_code)]

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

/// Per-thread launch context of the emulation.
pub struct ThreadCtx {
    tid: u32,
    block: (u32, u32, u32),
    launch: Arc<Launch>,
    epoch: u64,
    /// Vector clock of this thread (launches with [`HappensBefore`] only): component `t` is the
    /// last interval of thread `t` ordered before this thread's present.
    clock: Vec<u32>,
}

/// The race checker of launches whose warpgroups synchronize through named barriers
/// ([`run_grid_hb`]): shared-memory accesses are ordered by vector clocks that barriers merge, so
/// an access is a race unless every conflicting access of another thread happened before it.
pub struct HappensBefore {
    /// Per word: the last write `(tid, interval)` and the reads since it.
    words: Vec<Mutex<WordAccesses>>,
    /// Named barriers 0–15 and, past them, one per warp (`sync_warp`).
    barriers: Vec<(Mutex<NamedBarrier>, std::sync::Condvar)>,
}

#[derive(Default)]
struct WordAccesses {
    write: Option<(u32, u32)>,
    reads: Vec<(u32, u32)>,
}

#[derive(Default)]
struct NamedBarrier {
    /// Threads arrived towards the next completion, and the thread count it was asked for.
    arrived: u32,
    expected: u32,
    /// Maximum of the arrived threads' clocks.
    clock: Vec<u32>,
    /// Completions so far, and the merged clock each released.
    generation: u64,
    released: std::collections::HashMap<u64, Vec<u32>>,
}

/// State shared by the threads of one block.
pub struct Launch {
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
    /// The vector-clock race checker, for launches with named barriers.
    hb: Option<HappensBefore>,
    threads: usize,
    /// Registers per thread each warpgroup asked for with `setmaxnreg` (by warpgroup).
    regs: Mutex<std::collections::BTreeMap<u32, u32>>,
}

/// Records `setmaxnreg` of this thread's warpgroup: the register count it runs with from now on.
pub fn set_max_registers(regs: u32) {
    with_ctx(|c| {
        if !regs.is_multiple_of(8) || !(24..=256).contains(&regs) {
            fail(format!(
                "setmaxnreg {regs}: not a multiple of 8 in 24..=256"
            ));
        }
        c.launch.regs.lock().unwrap().insert(c.tid / 128, regs);
    })
}

/// The registers per thread a launch of `threads` threads starts with when its kernel declares
/// `.maxntid threads` and `.minnctapersm 1`: the register file split evenly, rounded down to the
/// allocation granule of 8, at most 255.
fn launch_registers(threads: usize) -> u32 {
    ((65536 / threads as u32) & !7).min(255)
}

/// Arrives at barrier `index` of the happens-before state (`threads` threads complete it) with
/// this thread's clock, waits for the completion when `wait` (then takes the merged clock), and
/// starts a new interval of this thread.
pub fn hb_barrier(index: usize, threads: u32, wait: bool) {
    let (tid, launch, clock) = with_ctx(|c| (c.tid, c.launch.clone(), c.clock.clone()));
    let hb = launch
        .hb
        .as_ref()
        .unwrap_or_else(|| fail("named barrier outside a run_grid_hb launch".to_string()));
    let (lock, cv) = &hb.barriers[index];
    let mut bar = lock.lock().unwrap();
    if bar.arrived == 0 {
        bar.expected = threads;
        bar.clock = vec![0; launch.threads];
    } else if bar.expected != threads {
        fail(format!(
            "tid {tid}: barrier {index} reached with {threads} threads, others with {}",
            bar.expected
        ));
    }
    for (m, c) in bar.clock.iter_mut().zip(&clock) {
        *m = (*m).max(*c);
    }
    bar.arrived += 1;
    let generation = bar.generation;
    if bar.arrived == threads {
        let merged = std::mem::take(&mut bar.clock);
        bar.released.insert(generation, merged);
        bar.generation += 1;
        bar.arrived = 0;
        cv.notify_all();
    }
    let merged = if wait {
        while bar.generation == generation {
            bar = cv.wait(bar).unwrap();
        }
        Some(bar.released[&generation].clone())
    } else {
        None
    };
    drop(bar);
    with_ctx(|c| {
        if let Some(m) = merged {
            for (x, y) in c.clock.iter_mut().zip(&m) {
                *x = (*x).max(*y);
            }
        }
        c.clock[tid as usize] += 1;
    });
}

/// The happens-before check of one access of `word` (index `w`) by this thread.
fn hb_access(hb: &HappensBefore, w: usize, addr: u32, write: bool) {
    with_ctx(|c| {
        let me = c.tid;
        let now = c.clock[me as usize];
        let ordered = |(t, at): (u32, u32)| t == me || c.clock[t as usize] >= at;
        let mut acc = hb.words[w].lock().unwrap();
        let mut race = None;
        if let Some(wr) = acc.write {
            if !ordered(wr) {
                race = Some((
                    if write {
                        "write-after-write"
                    } else {
                        "read-after-write"
                    },
                    wr.0,
                ));
            }
        }
        if write {
            if let Some(&rd) = acc.reads.iter().find(|&&rd| !ordered(rd)) {
                race = Some(("write-after-read", rd.0));
            }
            acc.write = Some((me, now));
            acc.reads.clear();
        } else if let Some(rd) = acc.reads.iter_mut().find(|rd| rd.0 == me) {
            rd.1 = now;
        } else {
            acc.reads.push((me, now));
        }
        if let Some((kind, other)) = race {
            c.launch.errors.lock().unwrap().push(format!(
                "{kind} race at shared byte {addr}: tid {me} and tid {other} not ordered by a barrier"
            ));
            c.launch.failed.store(true, Ordering::Relaxed);
        }
    })
}

thread_local! {
    static CTX: RefCell<Option<ThreadCtx>> = const { RefCell::new(None) };
}

pub fn with_ctx<T>(f: impl FnOnce(&mut ThreadCtx) -> T) -> T {
    CTX.with(|c| f(c.borrow_mut().as_mut().expect("emulated thread context")))
}

pub fn fail(msg: String) -> ! {
    // Straight to stderr: the test harness's output capture would lose the message at the abort.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "EMULATION ERROR: {msg}");
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
        let l = c.launch.clone();
        if w >= l.smem.len() {
            fail(format!(
                "tid {} block {:?}: shared {} at byte {addr} past the {} bytes of the launch",
                c.tid,
                c.block,
                if write { "write" } else { "read" },
                4 * l.smem.len()
            ));
        }
        if l.hb.is_some() {
            return w;
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

pub fn smem_read(addr: u32) -> u32 {
    let w = smem_word(addr, false);
    let launch = with_ctx(|c| c.launch.clone());
    if let Some(hb) = &launch.hb {
        hb_access(hb, w, addr, false);
    }
    launch.smem[w].load(Ordering::Relaxed)
}

pub fn smem_write(addr: u32, v: u32) {
    let w = smem_word(addr, true);
    let launch = with_ctx(|c| c.launch.clone());
    if let Some(hb) = &launch.hb {
        hb_access(hb, w, addr, true);
    }
    launch.smem[w].store(v, Ordering::Relaxed);
}

pub fn check_global(base: u64, i: usize, size: usize, write: bool) {
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
pub mod arch {
    pub mod float {
        pub fn fma_rn(a: f32, b: f32, c: f32) -> f32 {
            a.mul_add(b, c)
        }
        pub fn fms_rn(a: f32, b: f32, c: f32) -> f32 {
            a.mul_add(b, -c)
        }
        pub fn round_nearest(a: f32) -> f32 {
            a.round_ties_even()
        }
        pub fn exp2_approx(a: f32) -> f32 {
            a.exp2()
        }
        /// `tanh.approx.f32` at its documented worst case: 2^-10.987 relative error, always
        /// towards zero (a bias, so that errors add up rather than cancel).
        pub fn tanh_approx(a: f32) -> f32 {
            a.tanh() * (1.0 - 2f32.powf(-10.987))
        }
        pub fn fma_rn_f64(a: f64, b: f64, c: f64) -> f64 {
            a.mul_add(b, c)
        }
        pub fn rcp_approx(a: f32) -> f32 {
            1.0 / a
        }
        pub fn sqrt_rn(a: f32) -> f32 {
            a.sqrt()
        }
        pub fn rsqrt_approx(a: f32) -> f32 {
            1.0 / a.sqrt()
        }
        pub fn sincos_approx(a: f32) -> (f32, f32) {
            let a = a as f64;
            (a.sin() as f32, a.cos() as f32)
        }
        pub fn to_tf32(a: f32) -> u32 {
            // Round to nearest, ties away from zero, on the 13 dropped mantissa bits (finite a).
            (a.to_bits() + 0x1000) & !0x1fff
        }
        pub fn to_bf16(a: f32) -> u16 {
            half::bf16::from_f32(a).to_bits()
        }
        pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
            to_bf16(lo) as u32 | ((to_bf16(hi) as u32) << 16)
        }
        pub fn pack_f16x2(lo: f32, hi: f32) -> u32 {
            half::f16::from_f32(lo).to_bits() as u32
                | ((half::f16::from_f32(hi).to_bits() as u32) << 16)
        }
        pub fn unpack_f16x2(pair: u32) -> (f32, f32) {
            (
                half::f16::from_bits(pair as u16).to_f32(),
                half::f16::from_bits((pair >> 16) as u16).to_f32(),
            )
        }
    }

    /// Emulated `mma.sync`: the warp's 32 lanes post their operand registers, then each lane
    /// rebuilds the whole A (16 × K) and B (K × 8) tiles through the fragment maps of
    /// `crate::frag` and forms its four accumulator elements (f32 sums in depth order).
    pub mod mma {
        use std::sync::atomic::Ordering;

        use super::super::frag;

        /// Element `e` (0 low, 1 high) of a register of two packed bf16.
        fn bf16_operand(bits: u32, e: u32) -> f32 {
            f32::from_bits(if e == 1 {
                bits & 0xffff_0000
            } else {
                bits << 16
            })
        }

        /// A TF32 operand register as the tensor core reads it: its top 19 bits (the low 13
        /// mantissa bits dropped).
        fn tf32_operand(bits: u32, _: u32) -> f32 {
            f32::from_bits(bits & !0x1fff)
        }

        /// One warp-wide `mma` of depth `K` whose registers hold `per_reg` elements each:
        /// element `i` of a lane's A (B) fragment is element `i % per_reg` of its register
        /// `i / per_reg`, at the (row, column) `a_at(lane, i)` (`b_at`) of its tile.
        fn warp_mma<const K: usize>(
            acc: &mut [f32; 4],
            a: &[u32],
            b: &[u32],
            per_reg: u32,
            a_at: fn(u32, u32) -> (u32, u32),
            b_at: fn(u32, u32) -> (u32, u32),
            operand: fn(u32, u32) -> f32,
        ) {
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            let warp = (tid / 32) as usize;
            let lane = tid % 32;
            for (j, v) in a.iter().chain(b).enumerate() {
                launch.mma_slots[6 * tid as usize + j].store(*v, Ordering::Relaxed);
            }
            launch.warp_barriers[warp].wait();
            let mut am = [[0.0f32; K]; 16];
            let mut bm = [[0.0f32; 8]; K];
            for l in 0..32u32 {
                let slot = |j: usize| {
                    launch.mma_slots[6 * (warp * 32 + l as usize) + j].load(Ordering::Relaxed)
                };
                for i in 0..a.len() as u32 * per_reg {
                    let (r, c) = a_at(l, i);
                    am[r as usize][c as usize] = operand(slot((i / per_reg) as usize), i % per_reg);
                }
                for i in 0..b.len() as u32 * per_reg {
                    let (k, n) = b_at(l, i);
                    bm[k as usize][n as usize] =
                        operand(slot(a.len() + (i / per_reg) as usize), i % per_reg);
                }
            }
            launch.warp_barriers[warp].wait();
            for (s, v) in acc.iter_mut().enumerate() {
                let (r, c) = frag::acc_m16n8(lane, s as u32);
                let mut sum = 0.0f32;
                for k in 0..K {
                    sum += am[r as usize][k] * bm[k][c as usize];
                }
                *v += sum;
            }
        }

        pub fn mma_m16n8k16_bf16_f32(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
            warp_mma::<16>(acc, &a, &b, 2, frag::a_m16k16, frag::b_k16n8, bf16_operand);
        }

        pub fn mma_m16n8k8_bf16_f32(acc: &mut [f32; 4], a: [u32; 2], b: u32) {
            warp_mma::<8>(acc, &a, &[b], 2, frag::a_m16k8, frag::b_k8n8, bf16_operand);
        }

        pub fn mma_m16n8k8_tf32_f32(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
            warp_mma::<8>(
                acc,
                &a,
                &b,
                1,
                frag::a_m16k8_tf32,
                frag::b_k8n8_tf32,
                tf32_operand,
            );
        }
    }

    /// Emulated `ldmatrix`: the warp's lanes post their row addresses, then each lane reads its
    /// word of every matrix (checked shared reads of this thread).
    pub mod ldmatrix {
        use std::sync::atomic::Ordering;

        /// Posts this lane's row address, then hands `read` this lane and the row address of
        /// lane `l` of the warp to form the four registers.
        fn with_row_addresses(
            row_addr: u32,
            read: impl Fn(u32, &dyn Fn(usize) -> u32) -> [u32; 4],
        ) -> [u32; 4] {
            if !row_addr.is_multiple_of(16) {
                super::super::fail(format!("unaligned ldmatrix row address {row_addr}"));
            }
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            let warp = (tid / 32) as usize;
            launch.warp_slots[tid as usize].store(row_addr, Ordering::Relaxed);
            launch.warp_barriers[warp].wait();
            let row_of = |l: usize| launch.warp_slots[warp * 32 + l].load(Ordering::Relaxed);
            let out = read(tid % 32, &row_of);
            launch.warp_barriers[warp].wait();
            out
        }

        pub unsafe fn ldmatrix_x4(row_addr: u32) -> [u32; 4] {
            with_row_addresses(row_addr, |lane, row_of| {
                let mut out = [0u32; 4];
                for (m, o) in out.iter_mut().enumerate() {
                    let row = row_of(8 * m + (lane / 4) as usize);
                    *o = super::super::smem_read(row + 4 * (lane % 4));
                }
                out
            })
        }

        /// Emulated `stmatrix` (`.x4`): lane `l`'s register m goes to row `l/4` of matrix m,
        /// at the row address lane `8m + l/4` posted, word `l % 4` (checked shared writes).
        pub unsafe fn stmatrix_x4(row_addr: u32, v: [u32; 4]) {
            with_row_addresses(row_addr, |lane, row_of| {
                for (m, word) in v.iter().enumerate() {
                    let row = row_of(8 * m + (lane / 4) as usize);
                    super::super::smem_write(row + 4 * (lane % 4), *word);
                }
                [0; 4]
            });
        }

        /// As [`ldmatrix_x4`] with every matrix transposed: lane `l` gets, in register m, rows
        /// `2·(l%4)` (low half) and `2·(l%4)+1` (high half) of column `l/4` of matrix m.
        pub unsafe fn ldmatrix_x4_trans(row_addr: u32) -> [u32; 4] {
            with_row_addresses(row_addr, |lane, row_of| {
                let mut out = [0u32; 4];
                for (m, o) in out.iter_mut().enumerate() {
                    let col = lane / 4;
                    for half in 0..2u32 {
                        let row = row_of(8 * m + (2 * (lane % 4) + half) as usize);
                        let word = super::super::smem_read(row + 4 * (col / 2));
                        let bits = if col % 2 == 0 {
                            word & 0xffff
                        } else {
                            word >> 16
                        };
                        *o |= bits << (16 * half);
                    }
                }
                out
            })
        }
    }

    pub mod cp_async {
        /// Copies at once: the kernel reads the destination only after `wait_group` and a
        /// barrier, so the race check sees the copy as a write of the issuing thread.
        pub unsafe fn cp_async_cg_16_zfill(dst: u32, src: *const u8, src_size: u32) {
            if src_size == 16 {
                unsafe { cp_async_cg_16(dst, src) };
            } else if src_size == 0 {
                if !dst.is_multiple_of(16) || !(src as u64).is_multiple_of(16) {
                    super::super::fail(format!("unaligned cp.async: dst {dst}, src {src:p}"));
                }
                super::super::check_global(src as u64, 0, 16, false);
                for k in 0..4u32 {
                    super::super::smem_write(dst + 4 * k, 0);
                }
            } else {
                super::super::fail(format!(
                    "cp.async src_size {src_size} (kernels use 0 or 16)"
                ));
            }
        }
        /// A copy of `bytes` (aligned to `bytes` at both ends), as one write of the issuer.
        unsafe fn copy(dst: u32, src: *const u8, bytes: u32) {
            if !dst.is_multiple_of(bytes) || !(src as u64).is_multiple_of(bytes as u64) {
                super::super::fail(format!("unaligned cp.async: dst {dst}, src {src:p}"));
            }
            super::super::check_global(src as u64, 0, bytes as usize, false);
            for k in 0..bytes / 4 {
                let w = unsafe { (src as *const u32).add(k as usize).read_unaligned() };
                super::super::smem_write(dst + 4 * k, w);
            }
        }
        pub unsafe fn cp_async_cg_16(dst: u32, src: *const u8) {
            unsafe { copy(dst, src, 16) }
        }
        pub unsafe fn cp_async_ca_8(dst: u32, src: *const u8) {
            unsafe { copy(dst, src, 8) }
        }
        pub unsafe fn cp_async_ca_4_zfill(dst: u32, src: *const u8, src_size: u32) {
            match src_size {
                4 => unsafe { copy(dst, src, 4) },
                0 => {
                    if !dst.is_multiple_of(4) || !(src as u64).is_multiple_of(4) {
                        super::super::fail(format!("unaligned cp.async: dst {dst}, src {src:p}"));
                    }
                    super::super::check_global(src as u64, 0, 4, false);
                    super::super::smem_write(dst, 0);
                }
                _ => {
                    super::super::fail(format!("cp.async src_size {src_size} (kernels use 0 or 4)"))
                }
            }
        }
        pub fn commit_group() {}
        pub fn wait_group<const PENDING: u32>() {}
    }

    /// Global accesses checked against the launch's buffers; blocks run one after another, so the
    /// atomics need no more than a plain read-modify-write.
    pub mod global {
        use super::super::check_global;

        pub unsafe fn ld_global_f32(addr: u64) -> f32 {
            check_global(addr, 0, 4, false);
            unsafe { (addr as *const f32).read() }
        }
        pub unsafe fn ld_global_nc_f32(addr: u64) -> f32 {
            unsafe { ld_global_f32(addr) }
        }
        pub unsafe fn ld_global_v4_f32(addr: u64) -> [f32; 4] {
            if !addr.is_multiple_of(16) {
                super::super::fail(format!("unaligned 16-byte global load at {addr:#x}"));
            }
            check_global(addr, 0, 16, false);
            unsafe { (addr as *const [f32; 4]).read() }
        }
        pub unsafe fn st_global_v4_f32(addr: u64, v: [f32; 4]) {
            if !addr.is_multiple_of(16) {
                super::super::fail(format!("unaligned 16-byte global store at {addr:#x}"));
            }
            check_global(addr, 0, 16, true);
            unsafe { (addr as *mut [f32; 4]).write(v) }
        }
        pub unsafe fn ld_global_v2_f32(addr: u64) -> [f32; 2] {
            if !addr.is_multiple_of(8) {
                super::super::fail(format!("unaligned 8-byte global load at {addr:#x}"));
            }
            check_global(addr, 0, 8, false);
            unsafe { (addr as *const [f32; 2]).read() }
        }
        pub unsafe fn st_global_v2_f32(addr: u64, v: [f32; 2]) {
            if !addr.is_multiple_of(8) {
                super::super::fail(format!("unaligned 8-byte global store at {addr:#x}"));
            }
            check_global(addr, 0, 8, true);
            unsafe { (addr as *mut [f32; 2]).write(v) }
        }
        pub unsafe fn st_global_f32(addr: u64, v: f32) {
            check_global(addr, 0, 4, true);
            unsafe { (addr as *mut f32).write(v) }
        }
        pub unsafe fn prefetch_l2(addr: u64) {
            let _ = addr;
        }
        pub unsafe fn st_global_u32(addr: u64, v: u32) {
            check_global(addr, 0, 4, true);
            unsafe { (addr as *mut u32).write(v) }
        }
        pub unsafe fn atom_add_acq_rel_gpu_u32(addr: u64, v: u32) -> u32 {
            check_global(addr, 0, 4, true);
            // A real atomic: warps of one block run as concurrent threads.
            // SAFETY: checked above to lie in a buffer of the launch; 4-byte aligned by contract.
            let word = unsafe { std::sync::atomic::AtomicU32::from_ptr(addr as *mut u32) };
            word.fetch_add(v, std::sync::atomic::Ordering::SeqCst)
        }
        pub unsafe fn atom_add_acq_rel_cta_u32(addr: u64, v: u32) -> u32 {
            check_global(addr, 0, 4, true);
            // A real atomic: warps of one block run as concurrent threads.
            // SAFETY: checked above to lie in a buffer of the launch; 4-byte aligned by contract.
            let word = unsafe { std::sync::atomic::AtomicU32::from_ptr(addr as *mut u32) };
            word.fetch_add(v, std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// Emulated `wgmma` (one warpgroup = the block's first four warps): each thread reads the
    /// A rows and B columns of its own accumulator elements from shared memory through the
    /// descriptors, as the hardware's 128-byte swizzle places them (the address bits 7–9 XORed
    /// into bits 4–6, see `mamba3_abi::swizzle128_offset`), and forms them at the call (f32 sums
    /// in depth order); fences, commits and waits are no-ops.
    pub mod wgmma {
        #[allow(unused_imports)]
        pub use mamba3_abi::swizzle128::{
            advance as advance_desc, k_major as k_major_desc, k_major_offset,
            mn_major as mn_major_desc, mn_major_offset, GROUP_BYTES,
        };
        #[allow(unused_imports)]
        pub use mamba3_abi::swizzle128_offset as sw128_offset;

        /// The element at operand coordinates (`mn`, `k`) of descriptor `d`, M-/N-major when
        /// `trans`: bf16, or binary16 when `F16`.
        fn element_of<const F16: bool>(d: u64, trans: bool, mn: u32, k: u32) -> f32 {
            let field = |shift: u32| (((d >> shift) & 0x3fff) << 4) as u32;
            let (start, leading, stride) = (field(0), field(16), field(32));
            if d >> 62 != 1 || (d >> 49) & 7 != 0 {
                super::super::fail(format!("wgmma descriptor {d:#x} not 128-byte swizzled"));
            }
            let linear = if trans {
                start + (mn / 64) * leading + (k / 8) * stride + (k % 8) * 128 + (mn % 64) * 2
            } else {
                start + (mn / 8) * stride + (mn % 8) * 128 + k * 2
            };
            let addr = linear ^ (((linear >> 7) & 7) << 4);
            let word = super::super::smem_read(addr & !3);
            let half_word = if addr & 2 != 0 {
                word >> 16
            } else {
                word & 0xffff
            };
            if F16 {
                half::f16::from_bits(half_word as u16).to_f32()
            } else {
                f32::from_bits(half_word << 16)
            }
        }

        /// The bf16 element at operand coordinates (`mn`, `k`) of descriptor `d`.
        fn element(d: u64, trans: bool, mn: u32, k: u32) -> f32 {
            element_of::<false>(d, trans, mn, k)
        }

        fn mma_of<const TRANS_A: bool, const TRANS_B: bool, const F16: bool>(
            acc: &mut [[f32; 4]],
            a: u64,
            b: u64,
            scale_d: bool,
        ) {
            let tid = super::super::with_ctx(|c| c.tid) % 128;
            let (w, g, t) = (tid / 32, (tid % 32) / 4, tid % 4);
            let rows = [16 * w + g, 16 * w + g + 8];
            let a_rows = rows.map(|m| {
                (0..16)
                    .map(|k| element_of::<F16>(a, TRANS_A, m, k))
                    .collect::<Vec<_>>()
            });
            for (j, tile) in acc.iter_mut().enumerate() {
                for (e, v) in tile.iter_mut().enumerate() {
                    let n = 8 * j as u32 + 2 * t + e as u32 % 2;
                    let mut sum = if scale_d { *v } else { 0.0 };
                    for (k, a_mk) in a_rows[e / 2].iter().enumerate() {
                        sum += a_mk * element_of::<F16>(b, TRANS_B, n, k as u32);
                    }
                    *v = sum;
                }
            }
        }

        fn mma<const TRANS_A: bool, const TRANS_B: bool>(
            acc: &mut [[f32; 4]],
            a: u64,
            b: u64,
            scale_d: bool,
        ) {
            mma_of::<TRANS_A, TRANS_B, false>(acc, a, b, scale_d);
        }

        pub unsafe fn mma_m64n64k16_f16<const TRANS_A: bool, const TRANS_B: bool>(
            acc: &mut [[f32; 4]; 8],
            a: u64,
            b: u64,
            scale_d: bool,
        ) {
            mma_of::<TRANS_A, TRANS_B, true>(acc, a, b, scale_d);
        }

        pub unsafe fn mma_m64n64k16_bf16<const TRANS_A: bool, const TRANS_B: bool>(
            acc: &mut [[f32; 4]; 8],
            a: u64,
            b: u64,
            scale_d: bool,
        ) {
            mma::<TRANS_A, TRANS_B>(acc, a, b, scale_d);
        }
        pub unsafe fn mma_m64n128k16_bf16<const TRANS_A: bool, const TRANS_B: bool>(
            acc: &mut [[f32; 4]; 16],
            a: u64,
            b: u64,
            scale_d: bool,
        ) {
            mma::<TRANS_A, TRANS_B>(acc, a, b, scale_d);
        }
        /// The register-A form: the warpgroup's threads post their four A registers (the
        /// `mma.m16n8k16` A map of their warp's 16 rows), each thread rebuilds its two rows.
        pub unsafe fn mma_m64n64k16_bf16_rs<const TRANS_B: bool>(
            acc: &mut [[f32; 4]; 8],
            a: [u32; 4],
            b: u64,
            scale_d: bool,
        ) {
            rs_of::<TRANS_B, false>(acc, a, b, scale_d);
        }
        /// The register-A form on binary16 operands.
        pub unsafe fn mma_m64n64k16_f16_rs<const TRANS_B: bool>(
            acc: &mut [[f32; 4]; 8],
            a: [u32; 4],
            b: u64,
            scale_d: bool,
        ) {
            rs_of::<TRANS_B, true>(acc, a, b, scale_d);
        }
        pub unsafe fn mma_m64n64k16_f16_rs_fresh<const TRANS_B: bool>(
            a: [u32; 4],
            b: u64,
        ) -> [[f32; 4]; 8] {
            let mut acc = [[0.0f32; 4]; 8];
            rs_of::<TRANS_B, true>(&mut acc, a, b, false);
            acc
        }
        pub unsafe fn mma_m64n64k16_f16_fresh<const TRANS_A: bool, const TRANS_B: bool>(
            a: u64,
            b: u64,
        ) -> [[f32; 4]; 8] {
            let mut acc = [[0.0f32; 4]; 8];
            mma_of::<TRANS_A, TRANS_B, true>(&mut acc, a, b, false);
            acc
        }
        fn rs_of<const TRANS_B: bool, const F16: bool>(
            acc: &mut [[f32; 4]; 8],
            a: [u32; 4],
            b: u64,
            scale_d: bool,
        ) {
            use std::sync::atomic::Ordering;
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            let warp = (tid / 32) as usize;
            for (j, v) in a.iter().enumerate() {
                launch.mma_slots[6 * tid as usize + j].store(*v, Ordering::Relaxed);
            }
            launch.warp_barriers[warp].wait();
            let (g, t) = ((tid % 32) / 4, tid % 4);
            let mut rows = [[0.0f32; 16]; 2];
            for l in 0..32u32 {
                if l / 4 != g {
                    continue;
                }
                let slot = |j: usize| {
                    launch.mma_slots[6 * (warp * 32 + l as usize) + j].load(Ordering::Relaxed)
                };
                let q = l % 4;
                for (reg, (h, k0)) in [
                    (0usize, (0usize, 0u32)),
                    (1, (1, 0)),
                    (2, (0, 8)),
                    (3, (1, 8)),
                ] {
                    let word = slot(reg);
                    let (lo, hi) = if F16 {
                        (
                            half::f16::from_bits(word as u16).to_f32(),
                            half::f16::from_bits((word >> 16) as u16).to_f32(),
                        )
                    } else {
                        (
                            f32::from_bits(word << 16),
                            f32::from_bits(word & 0xffff_0000),
                        )
                    };
                    rows[h][(k0 + 2 * q) as usize] = lo;
                    rows[h][(k0 + 2 * q + 1) as usize] = hi;
                }
            }
            launch.warp_barriers[warp].wait();
            for (j, tile) in acc.iter_mut().enumerate() {
                for (e, v) in tile.iter_mut().enumerate() {
                    let n = 8 * j as u32 + 2 * t + e as u32 % 2;
                    let mut sum = if scale_d { *v } else { 0.0 };
                    for (k, a_mk) in rows[e / 2].iter().enumerate() {
                        sum += a_mk * element_of::<F16>(b, TRANS_B, n, k as u32);
                    }
                    *v = sum;
                }
            }
        }
        pub unsafe fn mma_m64n64k16_bf16_fresh<const TRANS_A: bool, const TRANS_B: bool>(
            a: u64,
            b: u64,
        ) -> [[f32; 4]; 8] {
            let mut acc = [[0.0f32; 4]; 8];
            mma::<TRANS_A, TRANS_B>(&mut acc, a, b, false);
            acc
        }
        pub unsafe fn mma_m64n64k16_bf16_rs_fresh<const TRANS_B: bool>(
            a: [u32; 4],
            b: u64,
        ) -> [[f32; 4]; 8] {
            let mut acc = [[0.0f32; 4]; 8];
            // SAFETY: the caller's contract.
            unsafe { mma_m64n64k16_bf16_rs::<TRANS_B>(&mut acc, a, b, false) };
            acc
        }
        pub fn keep_a_m64k128(_: &mut [[u32; 4]; 8]) {}
        pub fn wait_m64n64<const PENDING: u32>(_: &mut [[f32; 4]; 8]) {}
        pub fn wait_m64n128<const PENDING: u32>(_: &mut [[f32; 4]; 16]) {}
        pub fn fence_proxy_async_shared() {}
        pub fn fence() {}
        pub fn commit_group() {}
        pub fn wait_all_m64n64(_: &mut [[f32; 4]; 8]) {}
        pub fn wait_all_m64n128(_: &mut [[f32; 4]; 16]) {}
    }

    /// Emulated named barriers (vector-clock merges of the happens-before checker) and
    /// `setmaxnreg` (nothing to emulate).
    pub mod barrier {
        pub unsafe fn bar_sync<const ID: u32, const THREADS: u32>() {
            super::super::hb_barrier(ID as usize, THREADS, true);
        }
        pub unsafe fn bar_arrive<const ID: u32, const THREADS: u32>() {
            super::super::hb_barrier(ID as usize, THREADS, false);
        }
        pub unsafe fn setmaxnreg_inc<const REGS: u32>() {
            super::super::set_max_registers(REGS);
        }
        pub unsafe fn setmaxnreg_dec<const REGS: u32>() {
            super::super::set_max_registers(REGS);
        }
        /// The emulation runs the sm_90a module's code, where the early exit is dropped.
        pub fn exit_unless_sm90a() {}
    }

    pub mod sreg {
        use std::sync::atomic::Ordering;

        pub fn smem_base() -> u32 {
            0
        }
        pub fn smem_base_fresh() -> u32 {
            0
        }
        pub fn thread_x() -> u32 {
            super::super::with_ctx(|c| c.tid)
        }
        pub fn block_dim_x() -> u32 {
            super::super::with_ctx(|c| c.launch.threads as u32)
        }
        pub fn block_x() -> u32 {
            super::super::with_ctx(|c| c.block.0)
        }
        pub fn block_y() -> u32 {
            super::super::with_ctx(|c| c.block.1)
        }
        pub fn block_z() -> u32 {
            super::super::with_ctx(|c| c.block.2)
        }
        pub fn block_and_thread_fresh() -> (u32, u32, u32, u32) {
            (block_x(), block_y(), block_z(), thread_x())
        }
        pub fn lane_id() -> u32 {
            thread_x() % 32
        }
        pub fn sync_threads() {
            let launch = super::super::with_ctx(|c| c.launch.clone());
            if launch.hb.is_some() {
                super::super::hb_barrier(0, launch.threads as u32, true);
                return;
            }
            launch.barrier.wait();
            super::super::with_ctx(|c| c.epoch += 1);
        }
        /// Waits for the warp's 32 lanes and starts a new race-check interval for them (a
        /// kernel that uses it keeps each warp's shared memory to itself).
        pub fn sync_warp() {
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            if launch.hb.is_some() {
                super::super::hb_barrier(16 + (tid / 32) as usize, 32, true);
                return;
            }
            launch.warp_barriers[(tid / 32) as usize].wait();
            super::super::with_ctx(|c| c.epoch += 1);
        }
        /// The warp's lanes post `value`; this lane gets the value of lane `src(lane)`.
        fn shuffle(value: f32, src: impl Fn(u32) -> u32) -> f32 {
            let (tid, launch) = super::super::with_ctx(|c| (c.tid, c.launch.clone()));
            let warp = (tid / 32) as usize;
            launch.warp_slots[tid as usize].store(value.to_bits(), Ordering::Relaxed);
            launch.warp_barriers[warp].wait();
            let other = warp as u32 * 32 + src(tid % 32) % 32;
            let v = f32::from_bits(launch.warp_slots[other as usize].load(Ordering::Relaxed));
            launch.warp_barriers[warp].wait();
            v
        }
        pub fn shfl_xor_f32(value: f32, mask: u32) -> f32 {
            shuffle(value, |lane| lane ^ mask)
        }
        pub fn shfl_up_f32(value: f32, delta: u32) -> f32 {
            shuffle(
                value,
                |lane| if lane >= delta { lane - delta } else { lane },
            )
        }
        pub fn shfl_idx_f32(value: f32, src: u32) -> f32 {
            shuffle(value, |_| src)
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
        pub unsafe fn st_shared_u32(addr: u32, value: u32) {
            super::super::smem_write(addr, value);
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
        pub unsafe fn st_shared_v4_f32(addr: u32, v: [f32; 4]) {
            if !addr.is_multiple_of(16) {
                super::super::fail(format!("unaligned 16-byte shared store at {addr}"));
            }
            for (k, x) in v.iter().enumerate() {
                super::super::smem_write(addr + 4 * k as u32, x.to_bits());
            }
        }
        pub unsafe fn ld_shared_v2_f32(addr: u32) -> [f32; 2] {
            if !addr.is_multiple_of(8) {
                super::super::fail(format!("unaligned 8-byte shared load at {addr}"));
            }
            [0, 1].map(|k| f32::from_bits(super::super::smem_read(addr + 4 * k)))
        }
        pub unsafe fn st_shared_v2_f32(addr: u32, v: [f32; 2]) {
            if !addr.is_multiple_of(8) {
                super::super::fail(format!("unaligned 8-byte shared store at {addr}"));
            }
            for (k, x) in v.iter().enumerate() {
                super::super::smem_write(addr + 4 * k as u32, x.to_bits());
            }
        }
        pub fn opaque_u32(x: u32) -> u32 {
            std::hint::black_box(x)
        }
        pub fn fresh_u32(x: u32) -> u32 {
            std::hint::black_box(x)
        }
    }
}

/// Emulated `crate::elem`: the real conversions, with every access bounds-checked.
pub mod elem {
    pub trait Elem: Copy {
        const BYTES: u32;
        /// Four elements as loaded: already f32 here (the device keeps bf16 words).
        type Raw4: Copy + Default;
        unsafe fn load4_raw(base: u64, i: usize) -> Self::Raw4;
        fn widen4(raw: Self::Raw4) -> [f32; 4];
        /// One element as loaded: already f32 here (the device keeps the bf16 word).
        type Raw: Copy + Default;
        unsafe fn load_raw(base: u64, i: usize) -> Self::Raw;
        fn widen(raw: Self::Raw) -> f32;
        unsafe fn load(base: u64, i: usize) -> f32;
        unsafe fn store(base: u64, i: usize, value: f32);
        /// Four scalar loads, after checking the device's alignment contract (four elements).
        unsafe fn load4(base: u64, i: usize) -> [f32; 4] {
            if !(base + i as u64 * Self::BYTES as u64).is_multiple_of(4 * Self::BYTES as u64) {
                super::fail(format!("load4 of element {i} not aligned to four elements"));
            }
            unsafe {
                [
                    Self::load(base, i),
                    Self::load(base, i + 1),
                    Self::load(base, i + 2),
                    Self::load(base, i + 3),
                ]
            }
        }
    }

    pub unsafe fn ldg(base: u64, i: usize) -> f32 {
        unsafe { <f32 as Elem>::load(base, i) }
    }

    pub unsafe fn stg(base: u64, i: usize, value: f32) {
        unsafe { <f32 as Elem>::store(base, i, value) }
    }

    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub struct Bf16(pub u16);

    impl Bf16 {
        /// Eight scalar loads, after checking the device's 16-byte alignment contract.
        pub unsafe fn load8_raw(base: u64, i: usize) -> [f32; 8] {
            if !(base + 2 * i as u64).is_multiple_of(16) {
                super::fail(format!("load8 of element {i} not 16-byte aligned"));
            }
            core::array::from_fn(|k| unsafe { <Self as Elem>::load(base, i + k) })
        }
        pub fn widen8(raw: [f32; 8]) -> [f32; 8] {
            raw
        }
    }

    impl Elem for f32 {
        type Raw4 = [f32; 4];
        unsafe fn load4_raw(base: u64, i: usize) -> [f32; 4] {
            unsafe { Self::load4(base, i) }
        }
        fn widen4(raw: [f32; 4]) -> [f32; 4] {
            raw
        }
        type Raw = f32;
        unsafe fn load_raw(base: u64, i: usize) -> f32 {
            unsafe { Self::load(base, i) }
        }
        fn widen(raw: f32) -> f32 {
            raw
        }
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
        type Raw4 = [f32; 4];
        unsafe fn load4_raw(base: u64, i: usize) -> [f32; 4] {
            unsafe { Self::load4(base, i) }
        }
        fn widen4(raw: [f32; 4]) -> [f32; 4] {
            raw
        }
        type Raw = f32;
        unsafe fn load_raw(base: u64, i: usize) -> f32 {
            unsafe { Self::load(base, i) }
        }
        fn widen(raw: f32) -> f32 {
            raw
        }
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
#[path = "../../kernels/src/math.rs"]
pub mod math;

#[path = "../../kernels/src/frag.rs"]
pub mod frag;

#[path = "../../kernels/src/smem.rs"]
pub mod smem;

#[path = "../../kernels/src/warp_reduce.rs"]
pub mod warp_reduce;

// Device code: host lints do not apply (its sums keep their written order on purpose).
#[allow(clippy::all)]
#[path = "../../kernels/src/warp_scan.rs"]
pub mod warp_scan;

/// A global buffer of a launch: (start address, length in bytes, name).
pub type Buffer = (u64, u64, &'static str);

mod memory;
#[allow(unused_imports)]
pub use memory::Memory;

/// Runs `body` on every block of the grid `(x, y)`, block after block, each as `threads` OS
/// threads with `words` words of poisoned (NaN) shared memory; global accesses must fall inside
/// `buffers`. Panics on a shared-memory race; aborts the process on any other emulation error.
pub fn run_grid(
    grid: (u32, u32),
    threads: usize,
    words: usize,
    buffers: &[Buffer],
    body: impl Fn() + Sync,
) {
    run_grid3((grid.0, grid.1, 1), threads, words, buffers, body)
}

/// [`run_grid`] for kernels whose warpgroups synchronize through named barriers: races are
/// checked by happens-before (vector clocks merged at every barrier) instead of barrier epochs.
pub fn run_grid_hb(
    grid: (u32, u32, u32),
    threads: usize,
    words: usize,
    buffers: &[Buffer],
    body: impl Fn() + Sync,
) {
    run_grid_impl(grid, threads, words, buffers, true, body)
}

/// [`run_grid`] on the grid `(x, y, z)`.
pub fn run_grid3(
    grid: (u32, u32, u32),
    threads: usize,
    words: usize,
    buffers: &[Buffer],
    body: impl Fn() + Sync,
) {
    run_grid_impl(grid, threads, words, buffers, false, body)
}

fn run_grid_impl(
    grid: (u32, u32, u32),
    threads: usize,
    words: usize,
    buffers: &[Buffer],
    hb: bool,
    body: impl Fn() + Sync,
) {
    for (bz, by) in (0..grid.2).flat_map(|z| (0..grid.1).map(move |y| (z, y))) {
        for bx in 0..grid.0 {
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
                buffers: buffers.to_vec(),
                errors: Mutex::new(Vec::new()),
                failed: AtomicBool::new(false),
                hb: hb.then(|| HappensBefore {
                    words: (0..words).map(|_| Mutex::default()).collect(),
                    barriers: (0..16 + threads / 32)
                        .map(|_| (Mutex::default(), std::sync::Condvar::new()))
                        .collect(),
                }),
                threads,
                regs: Mutex::default(),
            });
            let body = &body;
            std::thread::scope(|s| {
                for tid in 0..threads as u32 {
                    let launch = launch.clone();
                    std::thread::Builder::new()
                        .stack_size(256 << 10)
                        .spawn_scoped(s, move || {
                            CTX.with(|c| {
                                *c.borrow_mut() = Some(ThreadCtx {
                                    tid,
                                    block: (bx, by, bz),
                                    launch,
                                    epoch: 1,
                                    // Own interval 1: nothing of it is ordered before others.
                                    clock: if hb {
                                        (0..threads as u32).map(|t| u32::from(t == tid)).collect()
                                    } else {
                                        Vec::new()
                                    },
                                })
                            });
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
                            if r.is_err() {
                                fail(format!("tid {tid} panicked"));
                            }
                        })
                        .expect("spawning an emulated thread");
                }
            });
            // `setmaxnreg.inc` waits for registers the block's other warpgroups released: the
            // block can only redistribute what it was launched with (more would hang the GPU).
            let regs = launch.regs.lock().unwrap();
            if !regs.is_empty() {
                let start = launch_registers(threads);
                let total: u32 = (0..threads as u32 / 128)
                    .map(|wg| 128 * regs.get(&wg).copied().unwrap_or(start))
                    .sum();
                assert!(
                    total <= start * threads as u32,
                    "setmaxnreg asks for {total} registers in all; the block starts with {} \
                     ({start} per thread): the warpgroups raising theirs would wait forever",
                    start * threads as u32
                );
            }
            drop(regs);
            let errors = launch.errors.lock().unwrap();
            if !errors.is_empty() {
                panic!(
                    "block ({bx},{by},{bz}): {} shared-memory races, first: {}",
                    errors.len(),
                    errors[0]
                );
            }
        }
    }
}
