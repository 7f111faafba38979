//! The device layer: driver detection, one context and module per GPU, cached function handles,
//! and the one launch path every kernel goes through.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::sys::{CUlaunchAttribute, CUlaunchAttributeID, CUlaunchConfig};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, DeviceRepr, LaunchArgs, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// Dynamic shared memory a launch may use without opting in.
const DEFAULT_SMEM_LIMIT: usize = 48 * 1024;

/// One GPU with the kernels' module loaded: the handle every operation takes.
///
/// Created once per device ordinal per process ([`Gpu::new`] returns the same `Arc` again), so the
/// module is loaded once per context and each function handle is looked up once.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    module: Arc<CudaModule>,
    functions: [OnceLock<CudaFunction>; Kernel::ALL.len()],
    /// Max dynamic shared memory already granted to each function (bytes).
    smem_granted: [AtomicU32; Kernel::ALL.len()],
    name: String,
    compute_capability: (i32, i32),
    sm_count: usize,
    smem_optin: usize,
    /// Whether kernels with the dependent-launch prologue are launched with programmatic stream
    /// serialization (see [`Gpu::set_programmatic_launch`]).
    programmatic_enabled: AtomicBool,
    /// Whether launches take a kernel's `wgmma` twin where the device has one (see
    /// [`Gpu::set_wgmma_kernels`]).
    wgmma_enabled: AtomicBool,
    /// Whether the forward runs its warp-specialized kernel where it can (see
    /// [`Gpu::set_warp_specialized_kernels`]).
    ws_enabled: AtomicBool,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.ctx.ordinal())
            .field("name", &self.name)
            .field("compute_capability", &self.compute_capability)
            .field("sm_count", &self.sm_count)
            .finish()
    }
}

impl Gpu {
    /// Whether a CUDA driver library can be loaded here (never panics).
    pub fn driver_present() -> bool {
        // SAFETY: only tries to open the library by name.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    /// The GPU of `ordinal`, with the module loaded; the same handle on later calls.
    ///
    /// Errors, never panics, when there is no driver ([`Error::NoDriver`]), no GPU
    /// ([`Error::NoDevice`]), no such ordinal, or a GPU older than sm_80.
    pub fn new(ordinal: usize) -> Result<Arc<Gpu>> {
        static OPEN: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
        if !Self::driver_present() {
            return Err(Error::NoDriver);
        }
        let mut open = OPEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(gpu) = open.get(&ordinal) {
            return Ok(gpu.clone());
        }
        let count =
            CudaContext::device_count().map_err(Error::driver("counting devices"))? as usize;
        if count == 0 {
            return Err(Error::NoDevice);
        }
        if ordinal >= count {
            return Err(Error::BadOrdinal { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(Error::driver("creating the context"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(Error::driver("reading the compute capability"))?;
        if major < 8 {
            return Err(Error::ComputeCapability { major, minor });
        }
        let attr = |a| {
            ctx.attribute(a)
                .map_err(Error::driver("reading a device attribute"))
        };
        let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize;
        let smem_optin =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                as usize;
        let name = ctx
            .name()
            .map_err(Error::driver("reading the device name"))?;
        let module = ctx
            .load_module(Ptx::from_src(
                crate::ptx_for_compute_capability((major, minor)).into_owned(),
            ))
            .map_err(Error::driver("loading the PTX module"))?;
        let gpu = Arc::new(Gpu {
            ctx,
            module,
            functions: std::array::from_fn(|_| OnceLock::new()),
            smem_granted: std::array::from_fn(|_| AtomicU32::new(DEFAULT_SMEM_LIMIT as u32)),
            name,
            compute_capability: (major, minor),
            sm_count,
            smem_optin,
            programmatic_enabled: AtomicBool::new(major >= 9),
            wgmma_enabled: AtomicBool::new(true),
            ws_enabled: AtomicBool::new(true),
        });
        open.insert(ordinal, gpu.clone());
        Ok(gpu)
    }

    /// The driver context (for allocations and streams).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The context's default stream.
    pub fn default_stream(&self) -> Arc<CudaStream> {
        self.ctx.default_stream()
    }

    /// Device name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> usize {
        self.sm_count
    }

    /// Largest dynamic shared memory a block may opt in to, in bytes.
    pub fn max_shared_memory_optin(&self) -> usize {
        self.smem_optin
    }

    /// Whether decode launches use programmatic dependent launch (on by default from compute
    /// capability 9.0).
    ///
    /// With it, a decode kernel may be scheduled while the previous kernel of its stream still
    /// runs; each of its blocks waits (`griddepcontrol.wait`) for that kernel's completion and
    /// memory before touching global memory, so results are the same either way and only the gap
    /// between the two kernels shrinks (in a CUDA graph too: the capture records a programmatic
    /// edge). Before 9.0 the module has no `griddepcontrol` and this stays off.
    pub fn programmatic_launch(&self) -> bool {
        // The module carries `griddepcontrol` from compute capability 9.0 on.
        self.compute_capability.0 >= 9 && self.programmatic_enabled.load(Ordering::Relaxed)
    }

    /// Turns programmatic dependent launch of the decode kernels on or off for launches enqueued
    /// from now on (graphs already captured keep what they recorded); returns whether it is in
    /// effect, which is `false` below compute capability 9.0 whatever `enabled` says.
    pub fn set_programmatic_launch(&self, enabled: bool) -> bool {
        self.programmatic_enabled.store(enabled, Ordering::Relaxed);
        self.programmatic_launch()
    }

    /// Whether launches use the `wgmma` twins of kernels ([`Kernel::wgmma_twin`]): on by default
    /// where the device has `wgmma` (compute capability 9.0, [`crate::has_wgmma`]), never
    /// elsewhere.
    pub fn wgmma_kernels(&self) -> bool {
        crate::has_wgmma(self.compute_capability) && self.wgmma_enabled.load(Ordering::Relaxed)
    }

    /// Turns the `wgmma` twins on or off for launches enqueued from now on (both compute the same
    /// results up to rounding; off runs the `mma.sync` kernels, e.g. to compare them). Returns
    /// [`Gpu::wgmma_kernels`] after the change.
    pub fn set_wgmma_kernels(&self, enabled: bool) -> bool {
        self.wgmma_enabled.store(enabled, Ordering::Relaxed);
        self.wgmma_kernels()
    }

    /// Whether the forward runs the warp-specialized kernel
    /// ([`crate::Kernel::ForwardWsBf16R4N128P64Na32C16`]; a training forward its checkpoint-writing
    /// instantiation, so that both round alike) for the calls it covers: where the device has
    /// `wgmma` (compute capability 9.0), on by default (on an H100, 1166.8 against the tensor-core
    /// forward's `wgmma` twin's 1724.9 µs at H=64 B=8 S=2048; `notes/forward-fma.md`, v16–v17).
    pub fn warp_specialized_kernels(&self) -> bool {
        crate::has_wgmma(self.compute_capability) && self.ws_enabled.load(Ordering::Relaxed)
    }

    /// Turns the warp-specialized forward on or off for launches enqueued from now on (off, those
    /// calls run the tensor-core forward or its `wgmma` twin, e.g. to compare them). Returns
    /// [`Gpu::warp_specialized_kernels`] after the change.
    pub fn set_warp_specialized_kernels(&self, enabled: bool) -> bool {
        self.ws_enabled.store(enabled, Ordering::Relaxed);
        self.warp_specialized_kernels()
    }

    /// `kernel`, or its `wgmma` twin while [`Gpu::wgmma_kernels`] is on.
    pub(crate) fn preferred(&self, kernel: Kernel) -> Kernel {
        match kernel.wgmma_twin() {
            Some(twin) if self.wgmma_kernels() => twin,
            _ => kernel,
        }
    }

    /// Kernel symbols (a `dispatch_paths` list) with each kernel replaced by the one
    /// [`Gpu::preferred`] launches in its place on this device.
    pub(crate) fn preferred_symbols(&self, symbols: Vec<&'static str>) -> Vec<&'static str> {
        symbols
            .into_iter()
            .map(|symbol| {
                Kernel::ALL
                    .iter()
                    .find(|k| k.symbol() == symbol)
                    .map_or(symbol, |k| self.preferred(*k).symbol())
            })
            .collect()
    }

    fn function(&self, kernel: Kernel) -> Result<&CudaFunction> {
        let slot = &self.functions[kernel.index()];
        if let Some(f) = slot.get() {
            return Ok(f);
        }
        let f = self
            .module
            .load_function(kernel.symbol())
            .map_err(Error::driver("looking up a kernel"))?;
        Ok(slot.get_or_init(|| f))
    }

    /// Starts a launch of `kernel` on `stream`; push the arguments in the kernel's order, then
    /// [`Launch::run`]. Neither allocates device memory nor synchronizes.
    pub(crate) fn launch<'a>(
        &'a self,
        stream: &'a CudaStream,
        kernel: Kernel,
    ) -> Result<Launch<'a>> {
        if kernel.needs_wgmma() && !crate::has_wgmma(self.compute_capability) {
            let (major, minor) = self.compute_capability;
            return Err(Error::Architecture {
                kernel: kernel.symbol(),
                needs: "compute capability 9.0 (wgmma, sm_90a)",
                major,
                minor,
            });
        }
        let function = self.function(kernel)?;
        Ok(Launch {
            gpu: self,
            kernel,
            function,
            stream,
            args: stream.launch_builder(function),
        })
    }
}

/// A launch being assembled (see [`Gpu::launch`]).
pub(crate) struct Launch<'a> {
    gpu: &'a Gpu,
    kernel: Kernel,
    function: &'a CudaFunction,
    stream: &'a CudaStream,
    args: LaunchArgs<'a>,
}

impl<'a> Launch<'a> {
    /// Appends one kernel argument.
    pub(crate) fn arg<T>(&mut self, value: T) -> &mut Self
    where
        LaunchArgs<'a>: PushKernelArg<T>,
    {
        self.args.arg(value);
        self
    }

    /// Enqueues the kernel. Checks the shared memory against the device's opt-in limit (typed
    /// error naming both figures) and raises the function's limit once when above 48 KB.
    ///
    /// # Safety
    /// The pushed arguments must match the kernel's parameter list and the buffers must have the
    /// sizes the kernel's contract states for `cfg`.
    pub(crate) unsafe fn run(mut self, cfg: LaunchConfig) -> Result<()> {
        self.grant_shared_memory(&cfg)?;
        // SAFETY: the caller guarantees the argument list and buffer sizes.
        unsafe { self.args.launch(cfg) }.map_err(Error::driver("launching a kernel"))?;
        Ok(())
    }

    /// Enqueues a kernel whose parameter list is the one by-value struct `params` (pushed here, not
    /// through [`Launch::arg`]). Kernels of [`Kernel::waits_for_prerequisite_grids`] go through
    /// `cuLaunchKernelEx` with programmatic stream serialization when [`Gpu::programmatic_launch`]
    /// is on; everything else as [`Launch::run`].
    ///
    /// # Safety
    /// As [`Launch::run`], with `params` the kernel's whole parameter list.
    pub(crate) unsafe fn run_with_params<P: DeviceRepr>(
        mut self,
        cfg: LaunchConfig,
        params: &'a P,
    ) -> Result<()> {
        if !(self.kernel.waits_for_prerequisite_grids() && self.gpu.programmatic_launch()) {
            self.args.arg(params);
            // SAFETY: forwarded.
            return unsafe { self.run(cfg) };
        }
        self.grant_shared_memory(&cfg)?;
        // SAFETY: an all-zero attribute is a valid value of this plain C struct; the id and the
        // union member set next are the pair the driver reads.
        let mut attribute: CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attribute.id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        let config = CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attribute,
            numAttrs: 1,
        };
        let mut args = [params as *const P as *mut std::ffi::c_void];
        self.gpu
            .ctx
            .bind_to_thread()
            .map_err(Error::driver("binding the context"))?;
        // SAFETY: `config` and `args` outlive the call (the driver copies the parameters when it
        // enqueues); the caller guarantees `params` is the kernel's parameter list, and the kernel
        // waits for the previous grid before touching memory (its dependent-launch prologue).
        unsafe {
            cudarc::driver::sys::cuLaunchKernelEx(
                &config,
                self.function.cu_function(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(Error::driver("launching a kernel"))
    }

    /// Checks the shared memory against the device's opt-in limit (typed error naming both
    /// figures) and raises the function's limit once when above 48 KB.
    fn grant_shared_memory(&mut self, cfg: &LaunchConfig) -> Result<()> {
        let needed = cfg.shared_mem_bytes as usize;
        if needed > self.gpu.smem_optin {
            return Err(Error::SharedMemory {
                kernel: self.kernel.symbol(),
                needed,
                max: self.gpu.smem_optin,
            });
        }
        let granted = &self.gpu.smem_granted[self.kernel.index()];
        if needed as u32 > granted.load(Ordering::Acquire) {
            self.function
                .set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    needed as i32,
                )
                .map_err(Error::driver("raising a kernel's shared-memory limit"))?;
            granted.fetch_max(needed as u32, Ordering::AcqRel);
        }
        Ok(())
    }
}
