//! The crate's error type.

use cudarc::driver::DriverError;

/// Result alias with the crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong, typed so callers can react without parsing strings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library (`libcuda.so` / `nvcuda.dll`) could not be loaded.
    #[error("no CUDA driver: libcuda could not be loaded on this machine")]
    NoDriver,
    /// The driver loaded but reports no usable GPU.
    #[error("the CUDA driver reports no GPU")]
    NoDevice,
    /// The requested device ordinal does not exist.
    #[error("GPU ordinal {ordinal} does not exist: the driver reports {count} device(s)")]
    BadOrdinal {
        /// Ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// The GPU is older than the kernels' minimum architecture.
    #[error("compute capability {major}.{minor} is below 8.0: the kernels need sm_80 or newer")]
    ComputeCapability {
        /// Major version.
        major: i32,
        /// Minor version.
        minor: i32,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error while {during}: {source}")]
    Driver {
        /// What the library was doing.
        during: &'static str,
        /// The driver's error.
        source: DriverError,
    },
    /// An argument breaks a rule of the API.
    #[error("invalid argument `{arg}` = {value}: {rule}")]
    InvalidArgument {
        /// The argument's name as in the API.
        arg: &'static str,
        /// Its value, rendered.
        value: String,
        /// The rule it breaks.
        rule: String,
    },
    /// A kernel uses instructions this device does not have.
    #[error("kernel `{kernel}` needs {needs}; this device has compute capability {major}.{minor}")]
    Architecture {
        /// Kernel symbol.
        kernel: &'static str,
        /// What it needs, in words.
        needs: &'static str,
        /// The device's major version.
        major: i32,
        /// The device's minor version.
        minor: i32,
    },
    /// A launch would need more shared memory per block than the device allows.
    #[error(
        "kernel `{kernel}` needs {needed} bytes of shared memory per block; \
         this device allows at most {max} (opt-in maximum)"
    )]
    SharedMemory {
        /// Kernel symbol.
        kernel: &'static str,
        /// Bytes the launch needs.
        needed: usize,
        /// The device's opt-in maximum per block.
        max: usize,
    },
}

impl Error {
    /// Builds [`Error::InvalidArgument`].
    pub fn invalid(arg: &'static str, value: impl ToString, rule: impl ToString) -> Self {
        Error::InvalidArgument {
            arg,
            value: value.to_string(),
            rule: rule.to_string(),
        }
    }

    /// Wraps a driver error with what was being done (for `map_err`).
    pub(crate) fn driver(during: &'static str) -> impl FnOnce(DriverError) -> Self {
        move |source| Error::Driver { during, source }
    }
}
