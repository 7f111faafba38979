//! Device-side helpers of the GPU tests: uploads rounded to the storage type, NaN-poisoned
//! buffers, downloads to f64, the forward config of a golden input set, and the device copies of
//! its tensors.

use std::sync::Arc;

use mamba3::cuda::{CudaSlice, CudaStream};
use mamba3::forward::{ForwardConfig, ForwardInputs};
use mamba3::golden::Mamba3Inputs;
use mamba3::Activation;

/// Uploads `x` rounded to the activation type `T`.
pub fn up_act<T: Activation>(s: &Arc<CudaStream>, x: &[f64]) -> CudaSlice<T> {
    let v: Vec<T> = x.iter().map(|&a| T::from_f64(a)).collect();
    s.clone_htod(&v).expect("upload")
}

/// Uploads `x` rounded to f32.
pub fn up_f32(s: &Arc<CudaStream>, x: &[f64]) -> CudaSlice<f32> {
    let v: Vec<f32> = x.iter().map(|&a| a as f32).collect();
    s.clone_htod(&v).expect("upload")
}

/// A device buffer of `len` NaNs: every element the kernel does not write stays non-finite.
pub fn poison<T: Activation>(s: &Arc<CudaStream>, len: usize) -> CudaSlice<T> {
    s.clone_htod(&vec![T::from_f64(f64::NAN); len])
        .expect("upload")
}

/// Downloads an activation-typed buffer as f64.
pub fn down_act<T: Activation>(s: &Arc<CudaStream>, x: &CudaSlice<T>) -> Vec<f64> {
    s.clone_dtoh(x)
        .expect("download")
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

/// Downloads an f32 buffer as f64.
pub fn down_f32(s: &Arc<CudaStream>, x: &CudaSlice<f32>) -> Vec<f64> {
    s.clone_dtoh(x)
        .expect("download")
        .iter()
        .map(|&v| v as f64)
        .collect()
}

/// The forward config of `inp` with activations in `T` and chunk size `chunk` (the backward's
/// segment length).
pub fn config_of<T: Activation>(inp: &Mamba3Inputs, chunk: usize) -> ForwardConfig {
    let g = inp.geometry;
    ForwardConfig {
        batch: g.batch,
        seq_len: g.seq_len,
        rank: g.rank,
        groups: g.groups,
        heads: g.heads,
        state_dim: g.state_dim,
        head_dim: g.head_dim,
        num_angles: g.num_angles,
        chunk_size: chunk,
        dtype: T::DTYPE,
        rotation: inp.rotation,
        mode: inp.output_mode(),
        has_z: inp.z.is_some(),
        has_d: inp.d.is_some(),
        norm_eps: inp.norm.as_ref().map_or(1e-5, |n| n.eps as f32),
    }
}

/// Device copies of the tensors of one input set: activations in `T`, everything else in f32.
pub struct DeviceInputs<T> {
    pub q: CudaSlice<T>,
    pub k: CudaSlice<T>,
    pub v: CudaSlice<T>,
    pub z: Option<CudaSlice<T>>,
    pub trap: CudaSlice<T>,
    pub dt: CudaSlice<f32>,
    pub adt: CudaSlice<f32>,
    pub angles: CudaSlice<f32>,
    pub q_bias: CudaSlice<f32>,
    pub k_bias: CudaSlice<f32>,
    pub mimo_v: CudaSlice<f32>,
    pub mimo_z: Option<CudaSlice<f32>>,
    pub mimo_o: Option<CudaSlice<f32>>,
    pub d: Option<CudaSlice<f32>>,
    pub norm_weight: Option<CudaSlice<f32>>,
}

impl<T: Activation> DeviceInputs<T> {
    /// Uploads every tensor of `inp` (already rounded to what the device sees).
    pub fn upload(s: &Arc<CudaStream>, inp: &Mamba3Inputs) -> Self {
        Self::upload_with(s, inp, up_f32)
    }

    /// [`upload`](Self::upload), with `up_f32` uploading the f32 tensors.
    pub fn upload_with(
        s: &Arc<CudaStream>,
        inp: &Mamba3Inputs,
        up_f32: impl Fn(&Arc<CudaStream>, &[f64]) -> CudaSlice<f32>,
    ) -> Self {
        DeviceInputs {
            q: up_act(s, &inp.q),
            k: up_act(s, &inp.k),
            v: up_act(s, &inp.v),
            z: inp.z.as_ref().map(|z| up_act(s, z)),
            trap: up_act(s, &inp.trap),
            dt: up_f32(s, &inp.dt),
            adt: up_f32(s, &inp.adt),
            angles: up_f32(s, &inp.angle_logits),
            q_bias: up_f32(s, &inp.q_bias),
            k_bias: up_f32(s, &inp.k_bias),
            mimo_v: up_f32(s, &inp.mimo_v),
            mimo_z: inp.mimo_z.as_ref().map(|m| up_f32(s, m)),
            mimo_o: inp.mimo_o.as_ref().map(|m| up_f32(s, m)),
            d: inp.d.as_ref().map(|m| up_f32(s, m)),
            norm_weight: inp.norm.as_ref().map(|n| up_f32(s, &n.weight)),
        }
    }

    /// Whole-buffer views of every tensor, as the forward and backward take them.
    pub fn views(&self) -> ForwardInputs<'_, T> {
        ForwardInputs {
            q: self.q.as_view(),
            k: self.k.as_view(),
            v: self.v.as_view(),
            z: self.z.as_ref().map(|x| x.as_view()),
            trap: self.trap.as_view(),
            dt: self.dt.as_view(),
            adt: self.adt.as_view(),
            angles: self.angles.as_view(),
            q_bias: self.q_bias.as_view(),
            k_bias: self.k_bias.as_view(),
            mimo_v: self.mimo_v.as_view(),
            mimo_z: self.mimo_z.as_ref().map(|x| x.as_view()),
            mimo_o: self.mimo_o.as_ref().map(|x| x.as_view()),
            d: self.d.as_ref().map(|x| x.as_view()),
            norm_weight: self.norm_weight.as_ref().map(|x| x.as_view()),
        }
    }
}

/// Turns the device's `wgmma` kernels back on when dropped (also when the test that switched
/// them off fails).
pub struct WgmmaKernelsOn<'a>(pub &'a mamba3::Gpu);

impl Drop for WgmmaKernelsOn<'_> {
    fn drop(&mut self) {
        self.0.set_wgmma_kernels(true);
    }
}
