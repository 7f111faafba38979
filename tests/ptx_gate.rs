//! PTX gate: the embedded PTX assembles with `ptxas --warn-on-spills --warning-as-error` for every
//! GPU we ship for, and each entry point's registers, shared memory and spills are printed.
//!
//! ptxas comes from PyPI (`pip install nvidia-cuda-nvcc-cu12`); `.ci/run` installs it and sets
//! `MAMBA3_REQUIRE_PTXAS=1` so that a missing ptxas fails CI instead of skipping.

use std::path::PathBuf;
use std::process::Command;

const ARCHS: [&str; 4] = ["sm_80", "sm_86", "sm_89", "sm_90"];

/// `MAMBA3_PTXAS`, then `ptxas` on PATH, then the PyPI package in Python's site-packages.
fn find_ptxas() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("MAMBA3_PTXAS") {
        return Some(PathBuf::from(path));
    }
    if Command::new("ptxas")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(PathBuf::from("ptxas"));
    }
    let script = "import site, sysconfig; print('\\n'.join([sysconfig.get_paths()['purelib'], \
                  site.getusersitepackages()] + site.getsitepackages()))";
    let out = Command::new("python3").args(["-c", script]).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|dir| PathBuf::from(dir).join("nvidia/cuda_nvcc/bin/ptxas"))
        .find(|p| p.is_file())
}

/// One row of `ptxas -v` output.
#[derive(Debug, Default, Clone)]
struct Usage {
    entry: String,
    registers: u32,
    shared_bytes: u32,
    stack_bytes: u32,
    spill_bytes: u32,
}

fn number_before(line: &str, unit: &str) -> Option<u32> {
    let idx = line.find(unit)?;
    line[..idx]
        .split(|c: char| !c.is_ascii_digit())
        .rfind(|s| !s.is_empty())?
        .parse()
        .ok()
}

fn parse_verbose(text: &str) -> Vec<Usage> {
    let mut rows: Vec<Usage> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let entry = rest.split('\'').next().unwrap_or_default().to_string();
            rows.push(Usage {
                entry,
                ..Default::default()
            });
        } else if let Some(row) = rows.last_mut() {
            if line.contains("bytes stack frame") {
                row.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                row.spill_bytes = number_before(line, "bytes spill stores").unwrap_or(0)
                    + number_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used") && line.contains("registers") {
                row.registers = number_before(line, "registers").unwrap_or(0);
                row.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    rows
}

#[test]
fn ptx_assembles_for_every_shipped_arch_without_spills() {
    let Some(ptxas) = find_ptxas() else {
        if std::env::var_os("MAMBA3_REQUIRE_PTXAS").is_some() {
            panic!("MAMBA3_REQUIRE_PTXAS is set but no ptxas was found (pip install nvidia-cuda-nvcc-cu12)");
        }
        eprintln!(
            "SKIPPED: ptxas not found (set MAMBA3_PTXAS or pip install nvidia-cuda-nvcc-cu12)"
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("mamba3-ptx-gate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx_file = dir.join("mamba3_kernels.ptx");
    std::fs::write(&ptx_file, mamba3::PTX).unwrap();
    let entries = mamba3::ptx_entry_points(mamba3::PTX);
    assert!(!entries.is_empty(), "the PTX declares no entry point");

    println!(
        "{:<7} {:<28} {:>5} {:>10} {:>6} {:>7}",
        "arch", "entry", "regs", "static smem", "stack", "spills"
    );
    let mut failures = Vec::new();
    for arch in ARCHS {
        let out = Command::new(&ptxas)
            .args([
                "-arch",
                arch,
                "-v",
                "--warn-on-spills",
                "--warning-as-error",
                "-o",
            ])
            .arg(dir.join(format!("{arch}.cubin")))
            .arg(&ptx_file)
            .output()
            .expect("running ptxas");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            failures.push(format!("{arch}: ptxas failed:\n{text}"));
            continue;
        }
        let rows = parse_verbose(&text);
        for row in &rows {
            println!(
                "{arch:<7} {:<28} {:>5} {:>10} {:>6} {:>7}",
                row.entry, row.registers, row.shared_bytes, row.stack_bytes, row.spill_bytes
            );
            if row.spill_bytes > 0 || row.stack_bytes > 0 {
                failures.push(format!(
                    "{arch}: {} uses {} B of stack, {} B of spills",
                    row.entry, row.stack_bytes, row.spill_bytes
                ));
            }
        }
        for entry in &entries {
            if !rows.iter().any(|r| r.entry == *entry) {
                failures.push(format!("{arch}: ptxas reported nothing for entry {entry}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "PTX gate failed:\n{}",
        failures.join("\n")
    );
}
