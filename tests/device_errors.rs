//! The device layer fails with typed errors, never panics (runs on CPU-only machines too).

mod common;

use mamba3::{Error, Gpu};

#[test]
fn gpu_new_without_driver_is_a_typed_error() {
    if Gpu::driver_present() {
        eprintln!("SKIPPED: a CUDA driver is present, so the no-driver path cannot be exercised");
        return;
    }
    match Gpu::new(0) {
        Err(Error::NoDriver) => {}
        other => panic!("expected Error::NoDriver, got {other:?}"),
    }
}

#[test]
fn bad_ordinal_is_a_typed_error() {
    let gpu = gpu_or_skip!();
    drop(gpu);
    match Gpu::new(10_000) {
        Err(Error::BadOrdinal {
            ordinal: 10_000, ..
        }) => {}
        other => panic!("expected Error::BadOrdinal, got {other:?}"),
    }
}

#[test]
fn gpu_is_opened_once_per_ordinal() {
    let gpu = gpu_or_skip!();
    let again = Gpu::new(0).unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&gpu, &again),
        "Gpu::new(0) loaded the module twice"
    );
    eprintln!(
        "GPU 0: {gpu:?}, opt-in shared memory {} bytes",
        gpu.max_shared_memory_optin()
    );
}

#[test]
fn primitive_rejects_bad_lengths_before_launch() {
    let gpu = gpu_or_skip!();
    let err =
        mamba3::primitives::mma_tf32_m16n8k8(&gpu, &[0.0; 3], &[0.0; 64], &[0.0; 128]).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { arg: "a", .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("128"),
        "message should name the limit: {err}"
    );
}
