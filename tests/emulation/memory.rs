//! Host "global memory" of one emulated launch: buffers the kernel addresses by raw pointer, and
//! the extents that `run_grid` checks every global access against.

use super::Buffer;

/// 16 bytes, 16-byte aligned: the unit of the host buffers (`cp.async` and vectorized global
/// accesses need 16-byte aligned addresses).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Quad([u8; 16]);

/// Aligned buffers of one launch and their checked extents.
#[derive(Default)]
pub struct Memory {
    storage: Vec<Vec<Quad>>,
    /// The extents of every buffer, for `run_grid`.
    pub buffers: Vec<Buffer>,
}

impl Memory {
    /// A buffer holding `bytes`; returns its address.
    pub fn put(&mut self, bytes: &[u8], name: &'static str) -> u64 {
        let mut v = vec![Quad([0; 16]); bytes.len().div_ceil(16)];
        for (i, b) in bytes.iter().enumerate() {
            v[i / 16].0[i % 16] = *b;
        }
        let ptr = v.as_ptr() as u64;
        self.buffers.push((ptr, bytes.len() as u64, name));
        self.storage.push(v);
        ptr
    }

    /// A buffer holding `x` rounded to f32.
    pub fn put_f32(&mut self, x: &[f64], name: &'static str) -> u64 {
        let bytes: Vec<u8> = x.iter().flat_map(|&v| (v as f32).to_ne_bytes()).collect();
        self.put(&bytes, name)
    }

    /// A buffer holding `x` rounded to the activation type (bf16 or f32).
    pub fn put_act(&mut self, x: &[f64], bf16: bool, name: &'static str) -> u64 {
        if bf16 {
            let bytes: Vec<u8> = x
                .iter()
                .flat_map(|&v| half::bf16::from_f64(v).to_bits().to_ne_bytes())
                .collect();
            self.put(&bytes, name)
        } else {
            self.put_f32(x, name)
        }
    }

    /// A buffer of `len` f32 NaNs (an output every element of which the kernel must write).
    pub fn poison_f32(&mut self, len: usize, name: &'static str) -> u64 {
        self.put_f32(&vec![f64::NAN; len], name)
    }

    /// A buffer of `len` NaNs of the activation type.
    pub fn poison_act(&mut self, len: usize, bf16: bool, name: &'static str) -> u64 {
        self.put_act(&vec![f64::NAN; len], bf16, name)
    }

    /// The first `len` f32 of the buffer at `ptr`, as f64.
    pub fn get_f32(&self, ptr: u64, len: usize) -> Vec<f64> {
        // SAFETY: the caller passes a buffer of `self` holding at least `len` f32.
        let s = unsafe { std::slice::from_raw_parts(ptr as *const f32, len) };
        s.iter().map(|&v| v as f64).collect()
    }

    /// The first `len` elements of the activation type of the buffer at `ptr`, as f64.
    pub fn get_act(&self, ptr: u64, len: usize, bf16: bool) -> Vec<f64> {
        if bf16 {
            // SAFETY: the caller passes a buffer of `self` holding at least `len` bf16.
            let s = unsafe { std::slice::from_raw_parts(ptr as *const u16, len) };
            s.iter()
                .map(|&b| half::bf16::from_bits(b).to_f64())
                .collect()
        } else {
            self.get_f32(ptr, len)
        }
    }
}
