//! PTX gate: the embedded PTX assembles with `ptxas --warn-on-spills --warning-as-error` for every
//! GPU we ship for, and each entry point's registers, shared memory and spills are printed.
//!
//! ptxas comes from PyPI (`pip install nvidia-cuda-nvcc-cu12`); `.ci/run` installs it and sets
//! `MAMBA3_REQUIRE_PTXAS=1` so that a missing ptxas fails CI instead of skipping.

use std::path::PathBuf;
use std::process::Command;

const ARCHS: [&str; 5] = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"];

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
    // Compute capability 9.0 and newer load the rewrite with `griddepcontrol` (PTX 8.0): `sm_90`
    // above 9.0, `sm_90a` with `wgmma` on 9.0 itself.
    let hopper_file = dir.join("mamba3_kernels_sm90.ptx");
    std::fs::write(
        &hopper_file,
        mamba3::ptx_for_compute_capability((10, 0)).as_ref(),
    )
    .unwrap();
    let hopper_wgmma_file = dir.join("mamba3_kernels_sm90a.ptx");
    std::fs::write(
        &hopper_wgmma_file,
        mamba3::ptx_for_compute_capability((9, 0)).as_ref(),
    )
    .unwrap();
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
            .arg(match arch {
                "sm_90" => &hopper_file,
                "sm_90a" => &hopper_wgmma_file,
                _ => &ptx_file,
            })
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

/// The body of entry `name` in `ptx`: from its `.entry` line to the next entry or the end.
fn entry_body<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no entry {name} in the PTX"));
    let rest = &ptx[start..];
    let end = rest[1..].find(".entry ").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

/// Whether a PTX line touches memory another grid may write (anything but kernel parameters).
fn touches_global_memory(line: &str) -> bool {
    // A line may hold several statements (`{ .reg .pred %p; setp…; @%p prefetch…; }`), each
    // possibly predicated.
    line.split(';').any(|statement| {
        let op = statement.trim().trim_start_matches('{').trim_start();
        let op = match op.strip_prefix('@') {
            Some(predicated) => predicated
                .split_once(char::is_whitespace)
                .map_or("", |(_, rest)| rest.trim_start()),
            None => op,
        };
        let is_memory_op = ["ld.", "st.", "atom.", "red.", "cp.async", "prefetch"]
            .iter()
            .any(|p| op.starts_with(p));
        is_memory_op
            && !op.starts_with("ld.param")
            && !L2_PREFETCHES.iter().any(|p| op.starts_with(p))
    })
}

/// The accesses allowed before `griddepcontrol.wait`: an L2 prefetch returns nothing to the
/// program, so it cannot observe data the previous grid is still writing.
const L2_PREFETCHES: [&str; 2] = ["cp.async.bulk.prefetch.L2.global ", "prefetch.global.L2 "];

/// Every kernel the host may launch with programmatic stream serialization waits for the previous
/// grid before its first memory access other than an L2 prefetch (anything earlier could read
/// data that kernel is still writing), and no other kernel carries the prologue. Checked on the
/// `sm_90` rewrite, where the markers are instructions.
#[test]
fn dependent_launch_prologue_precedes_every_memory_access() {
    let wait = "griddepcontrol.wait;";
    let launch = "griddepcontrol.launch_dependents;";
    let hopper = mamba3::ptx_for_compute_capability((9, 0));
    let mut marked = 0;
    for kernel in mamba3::Kernel::ALL {
        let body = entry_body(&hopper, kernel.symbol());
        if !kernel.waits_for_prerequisite_grids() {
            assert!(
                !body.contains(wait) && !body.contains(launch),
                "{} carries the dependent-launch prologue but is not launched with it",
                kernel.symbol()
            );
            continue;
        }
        marked += 1;
        let wait_at = body
            .find(wait)
            .unwrap_or_else(|| panic!("{} has no griddepcontrol.wait marker", kernel.symbol()));
        let launch_at = body
            .find(launch)
            .unwrap_or_else(|| panic!("{} has no launch_dependents marker", kernel.symbol()));
        assert!(
            launch_at > wait_at,
            "{}: launch_dependents before the wait",
            kernel.symbol()
        );
        if let Some(line) = body[..wait_at].lines().find(|l| touches_global_memory(l)) {
            panic!(
                "{} accesses memory before griddepcontrol.wait: {}",
                kernel.symbol(),
                line.trim()
            );
        }
    }
    assert!(
        marked > 0,
        "no kernel carries the dependent-launch prologue"
    );

    assert!(hopper.contains(".version 8.0\n") && hopper.contains(".target sm_90a\n"));
    let newer = mamba3::ptx_for_compute_capability((10, 0));
    assert!(newer.contains(".version 8.0\n") && newer.contains(".target sm_90\n"));
    // `wgmma` exists on 9.0 only: its lines are instructions there and comments elsewhere.
    let wgmma_lines = mamba3::PTX
        .matches(mamba3_abi::SM90A_INSTRUCTION_MARKER)
        .count();
    assert!(
        wgmma_lines > 0,
        "no kernel carries an sm_90a instruction marker"
    );
    assert_eq!(
        newer.matches(mamba3_abi::SM90A_INSTRUCTION_MARKER).count(),
        wgmma_lines
    );
    assert_eq!(
        hopper.matches("wgmma.mma_async.sync.aligned").count(),
        mamba3::PTX.matches("wgmma.mma_async.sync.aligned").count()
    );
    // The early exit of kernels that run only on 9.0: an instruction in every module but 9.0's.
    let early_exits = |text: &str| {
        text.lines()
            .map(str::trim)
            .filter(|l| {
                l.ends_with(mamba3_abi::NOT_SM90A_INSTRUCTION_MARKER) && !l.starts_with("//")
            })
            .count()
    };
    assert!(
        early_exits(mamba3::PTX) > 0,
        "no kernel carries the sm_90a-only early exit"
    );
    assert_eq!(early_exits(&newer), early_exits(mamba3::PTX));
    assert_eq!(
        early_exits(&hopper),
        0,
        "an sm_90a-only early exit left in 9.0's module"
    );
    let markers = [
        mamba3_abi::GRIDDEPCONTROL_WAIT_MARKER,
        mamba3_abi::GRIDDEPCONTROL_LAUNCH_DEPENDENTS_MARKER,
        mamba3_abi::SM90_INSTRUCTION_MARKER,
        mamba3_abi::SM90A_INSTRUCTION_MARKER,
    ];
    for marker in markers {
        assert!(
            !hopper.contains(marker),
            "{marker} left in the sm_90 rewrite"
        );
    }
    assert_eq!(
        mamba3::PTX
            .matches(mamba3_abi::GRIDDEPCONTROL_WAIT_MARKER)
            .count(),
        marked
    );
    assert_eq!(hopper.matches(wait).count(), marked);
    assert_eq!(hopper.matches(launch).count(), marked);
    let prefetches = mamba3::PTX
        .matches(mamba3_abi::SM90_INSTRUCTION_MARKER)
        .count();
    assert!(
        prefetches > 0,
        "no kernel carries an sm_90 instruction marker"
    );
    // The restored instructions are predicated on `%pf`.
    let restored: usize = L2_PREFETCHES
        .iter()
        .map(|p| hopper.matches(&format!("@%pf {p}")).count())
        .sum();
    assert_eq!(restored, prefetches);
    assert_eq!(
        mamba3::ptx_for_compute_capability((8, 9)).as_ref(),
        mamba3::PTX
    );
}
