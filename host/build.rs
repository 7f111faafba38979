//! Builds `../kernels` to PTX with rustc's nvptx64 backend and embeds it.
//!
//! The nested cargo gets its own target directory (a second build inside the outer cargo's target
//! lock would dead-lock) and its own flags: `RUSTC_BOOTSTRAP=1` and `-Zbuild-std=core` are scoped
//! to it, never to the host build. `MAMBA3_PTX_FILE` skips the nested build and embeds that file.
//! The device crate's warnings are repeated as build-script warnings, or fail the build when
//! `MAMBA3_DENY_KERNEL_WARNINGS` is set (CI sets it).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "nvptx64-nvidia-cuda";
/// Unrolling: the kernels keep per-lane vectors in fixed-size arrays indexed by constant-bound
/// loop counters, which LLVM must unroll fully (a high threshold) or the arrays land in local
/// memory; partial and runtime unrolling of the outer loops would only multiply live registers.
const RUSTFLAGS: [&str; 4] = [
    "-Ctarget-cpu=sm_80",
    "-Clinker-flavor=llbc",
    "-Zunstable-options",
    "-Cllvm-args=-unroll-threshold=4000 -unroll-allow-partial=0 -unroll-runtime=0",
];

fn main() {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels = manifest.join("../kernels");
    println!("cargo:rerun-if-env-changed=MAMBA3_PTX_FILE");
    println!("cargo:rerun-if-env-changed=MAMBA3_DENY_KERNEL_WARNINGS");
    for watched in [
        kernels.join("src"),
        kernels.join("Cargo.toml"),
        manifest.join("../abi/src"),
    ] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }

    let ptx = match env::var_os("MAMBA3_PTX_FILE") {
        Some(file) => PathBuf::from(file),
        None => build_kernels(&kernels, &nested_target_dir(&out_dir)),
    };
    let text =
        std::fs::read_to_string(&ptx).unwrap_or_else(|e| panic!("reading {}: {e}", ptx.display()));
    let text = add_launch_bounds(&text, mamba3_abi::LAUNCH_BOUNDS);
    std::fs::write(out_dir.join("mamba3_kernels.ptx"), text).expect("writing the embedded PTX");
}

/// Inserts `.maxntid` / `.minnctapersm` (PTX ISA §11.4) after the parameter list of every entry
/// point a row of `bounds` names: rustc's nvptx backend has no attribute for them.
fn add_launch_bounds(ptx: &str, bounds: &[mamba3_abi::LaunchBounds]) -> String {
    let mut out = String::with_capacity(ptx.len() + 1024);
    let mut pending: Option<&mamba3_abi::LaunchBounds> = None;
    for line in ptx.lines() {
        if let Some(name) = line.trim_start().strip_prefix(".visible .entry ") {
            let name = name.split('(').next().unwrap_or(name).trim();
            pending = bounds.iter().find(|b| name.starts_with(b.prefix));
        }
        if line.trim() == "{" {
            if let Some(b) = pending.take() {
                out.push_str(&format!(
                    ".maxntid {}, 1, 1\n.minnctapersm {}\n",
                    b.max_threads, b.min_blocks_per_sm
                ));
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `<target>/<profile>/build/<pkg>/out` → `<target>/nvptx-kernels`, shared by every host profile
/// so `core` is built for nvptx once.
fn nested_target_dir(out_dir: &Path) -> PathBuf {
    let build = out_dir
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .expect("OUT_DIR lies under <target>/<profile>/build");
    let profile_dir = build.parent().expect("build/ has a parent");
    profile_dir
        .parent()
        .unwrap_or(profile_dir)
        .join("nvptx-kernels")
}

fn build_kernels(kernels: &Path, target_dir: &Path) -> PathBuf {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(kernels)
        .args([
            "build",
            "--release",
            "-Zbuild-std=core",
            "--target",
            TARGET,
            "--target-dir",
        ])
        .arg(target_dir)
        .arg("--manifest-path")
        .arg(kernels.join("Cargo.toml"));
    // The outer build's flags and wrappers (clippy sets RUSTC_WORKSPACE_WRAPPER) are for the host
    // target; none of them may leak into the device build.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_ENCODED_RUSTFLAGS", RUSTFLAGS.join("\x1f"));
    let output = cmd
        .output()
        .expect("running the nested cargo build of kernels/");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!("building kernels/ for {TARGET} failed:\n{stderr}");
    }
    // The device crate's warnings would vanish with the nested build's output: show them in the
    // outer build, or fail it where they are denied (CI).
    if stderr.lines().any(|l| l.starts_with("warning")) {
        if env::var_os("MAMBA3_DENY_KERNEL_WARNINGS").is_some() {
            panic!("kernels/ built with warnings (MAMBA3_DENY_KERNEL_WARNINGS is set):\n{stderr}");
        }
        for line in stderr.lines() {
            let word = line.split_whitespace().next().unwrap_or("");
            if !matches!(word, "Compiling" | "Finished" | "Updating" | "Locking") {
                println!("cargo:warning={line}");
            }
        }
    }
    target_dir
        .join(TARGET)
        .join("release")
        .join("mamba3_kernels.ptx")
}
