//! Project tasks: `cargo xtask stage` (one folder holding the GPU suite and the benchmarks),
//! `cargo xtask bench` (the benchmarks on this machine's GPU) and `cargo xtask variants` (one
//! benchmark binary per patched variant of the committed tree, for a same-session A/B on a GPU)
//! and `cargo xtask sass` (the SASS instruction counts of kernels' loops, without a GPU).

mod sass;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  stage [DIR]        build the GPU suite (tests/gpu_*.rs, tests/device_errors.rs) and the benchmark
                     binary in release mode and copy them, with run.sh, into DIR (default: stage/).
                     On a GPU machine given only that folder: bash DIR/run.sh [--bench [FILTER]]
  bench [FILTER...]  run the benchmarks (benches/kernels.rs) on this machine's GPU; without a GPU
                     it says so in one line and exits 0
  variants NAME=[PATCH[+PATCH...]]...
                     build the benchmark binary of each variant (the committed tree, HEAD, with
                     the variant's patch files applied in order; NAME= alone is HEAD itself) in a
                     temporary git worktree, and pack them with ab.sh into variants/. On a GPU
                     machine: [ENV=...] bash variants/ab.sh BENCH_ARGS... runs each variant's
                     benchmark in turn, the first again at the end
  sass ENTRY...      assemble each kernel entry of the module loaded on compute capability 9.0
                     for sm_90a and print its loops' SASS instruction counts and top opcodes
                     (ptxas: `pip install nvidia-cuda-nvcc-cu12`, nvdisasm: `pip install
                     nvidia-cuda-nvdisasm`; on PATH or named by MAMBA3_PTXAS / MAMBA3_NVDISASM)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("stage") => stage(
            args.get(1)
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("stage")),
        ),
        Some("bench") => bench(&args[1..]),
        Some("variants") => variants(&args[1..]),
        Some("sass") => sass::sass(&workspace_root(), cargo(), &args[1..], 16),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ lies in the workspace")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

fn bench(filters: &[String]) -> Result<(), String> {
    let status = cargo()
        .args([
            "bench", "--quiet", "-p", "mamba3", "--bench", "kernels", "--",
        ])
        .args(filters)
        .status()
        .map_err(|e| format!("running cargo bench: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("benchmarks failed ({status})"))
}

/// Executables that `cargo <args> --no-run --message-format=json` builds, as (target name, path).
fn built_executables(args: &[&str]) -> Result<Vec<(String, PathBuf)>, String> {
    built_executables_with(cargo(), args)
}

/// [`built_executables`] through `cmd` (a `cargo` command with its directory and environment).
fn built_executables_with(
    mut cmd: Command,
    args: &[&str],
) -> Result<Vec<(String, PathBuf)>, String> {
    println!("building: cargo {}", args.join(" "));
    let out = cmd
        .args(args)
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(exe), Some(name)) =
            (msg["executable"].as_str(), msg["target"]["name"].as_str())
        {
            found.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    Ok(found)
}

fn copy_into(dir: &Path, name: &str, from: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    std::fs::copy(from, dir.join(name)).map_err(|e| format!("copying {}: {e}", from.display()))?;
    Ok(())
}

fn stage(dir: PathBuf) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
    }
    let tests = built_executables(&["test", "--release", "-p", "mamba3", "--tests"])?;
    let gpu_tests: Vec<_> = tests
        .iter()
        .filter(|(name, _)| name.starts_with("gpu_") || name == "device_errors")
        .collect();
    if gpu_tests.is_empty() {
        return Err("no GPU test binaries were built".into());
    }
    for (name, exe) in &gpu_tests {
        copy_into(&dir.join("tests"), name, exe)?;
    }
    let benches = built_executables(&["bench", "-p", "mamba3", "--bench", "kernels"])?;
    let (_, bench_exe) = benches
        .first()
        .ok_or("the benchmark binary was not built")?;
    copy_into(&dir.join("bench"), "kernels", bench_exe)?;
    pack_binaries(&dir, &["tests", "bench"])?;
    std::fs::write(dir.join("run.sh"), RUN_SH).map_err(|e| format!("writing run.sh: {e}"))?;
    let size: u64 = walk_size(&dir);
    println!(
        "staged {} test binaries and the benchmark into {} ({:.1} MiB)\nrun on a GPU machine: bash {}/run.sh [--bench [FILTER]]",
        gpu_tests.len(),
        dir.display(),
        size as f64 / (1 << 20) as f64,
        dir.display()
    );
    Ok(())
}

/// Packs the folders `subdirs` of `dir` (the staged `tests/` and `bench/`, or the variants) into
/// `binaries.tar.gz` (which `run.sh` and `ab.sh` unpack into a temporary folder) and removes
/// them: every binary embeds the PTX of all kernels, which compresses about tenfold, and the
/// folder has to travel to the GPU machine.
fn pack_binaries(dir: &Path, subdirs: &[&str]) -> Result<(), String> {
    let status = Command::new("tar")
        .arg("-czf")
        .arg(dir.join(BINARIES_ARCHIVE))
        .arg("-C")
        .arg(dir)
        .args(subdirs)
        .status()
        .map_err(|e| format!("running tar: {e}"))?;
    if !status.success() {
        return Err(format!("tar failed ({status})"));
    }
    for sub in subdirs {
        let path = dir.join(sub);
        std::fs::remove_dir_all(&path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// One A/B variant: its name and the patch files applied to HEAD, in order.
struct Variant {
    name: String,
    patches: Vec<PathBuf>,
}

/// Parses `NAME=[PATCH[+PATCH...]]` (patch paths relative to the current directory).
fn parse_variant(spec: &str) -> Result<Variant, String> {
    let (name, patches) = spec
        .split_once('=')
        .ok_or_else(|| format!("variant `{spec}`: expected NAME=[PATCH[+PATCH...]]"))?;
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(format!(
            "variant name `{name}`: letters, digits, '-' and '_' only (it names a folder)"
        ));
    }
    let patches = patches
        .split('+')
        .filter(|p| !p.is_empty())
        .map(|p| {
            std::fs::canonicalize(p).map_err(|e| format!("variant `{name}`: patch `{p}`: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Variant {
        name: name.to_string(),
        patches,
    })
}

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let status = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .status()
        .map_err(|e| format!("running git: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("git {} failed ({status})", args.join(" ")))
}

/// Removes the worktree at `tree`, also one left behind by an interrupted run (its folder deleted,
/// then git's record of it pruned).
fn remove_worktree(root: &Path, tree: &Path) -> Result<(), String> {
    if tree.exists() {
        std::fs::remove_dir_all(tree).map_err(|e| format!("removing {}: {e}", tree.display()))?;
    }
    git(root, &["worktree", "prune"])
}

/// Builds each variant's benchmark binary (see the usage text) into `variants/`.
fn variants(specs: &[String]) -> Result<(), String> {
    if specs.is_empty() {
        return Err(format!("variants: name at least one variant\n{USAGE}"));
    }
    let list = specs
        .iter()
        .map(|s| parse_variant(s))
        .collect::<Result<Vec<_>, _>>()?;
    let root = workspace_root();
    let out = root.join("variants");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| format!("clearing {}: {e}", out.display()))?;
    }
    let tree = root.join("target").join("variant-worktree");
    // One target folder for every variant: only the kernels and what embeds them rebuild.
    let target = root.join("target").join("variants-build");
    for (i, v) in list.iter().enumerate() {
        println!("variant {}/{}: {}", i + 1, list.len(), v.name);
        remove_worktree(&root, &tree)?;
        git(
            &root,
            &[
                "worktree",
                "add",
                "--detach",
                &tree.to_string_lossy(),
                "HEAD",
            ],
        )?;
        for patch in &v.patches {
            git(&tree, &["apply", &patch.to_string_lossy()])?;
        }
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.current_dir(&tree).env("CARGO_TARGET_DIR", &target);
        let built = built_executables_with(cmd, &["bench", "-p", "mamba3", "--bench", "kernels"])?;
        let (_, exe) = built.first().ok_or("the benchmark binary was not built")?;
        copy_into(&out.join(&v.name), "kernels", exe)?;
    }
    remove_worktree(&root, &tree)?;
    let names: Vec<&str> = list.iter().map(|v| v.name.as_str()).collect();
    pack_binaries(&out, &names)?;
    let mut order = names.clone();
    order.push(names[0]);
    let script = AB_SH.replace("@ORDER@", &order.join(" "));
    std::fs::write(out.join("ab.sh"), script).map_err(|e| format!("writing ab.sh: {e}"))?;
    println!(
        "packed {} variants into {} ({:.1} MiB); on a GPU machine (carry variants/): \
         [MAMBA3_BENCH_...=...] bash variants/ab.sh forward",
        names.len(),
        out.display(),
        walk_size(&out) as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// The A/B driver `variants` writes: unpacks the variants' benchmark binaries and runs each with
/// the script's arguments, in the order given and the first again at the end (so drift over the
/// session shows); output also appended to $OUT/ab.log (or ab.log beside it).
const AB_SH: &str = r#"#!/usr/bin/env bash
# Same-session A/B of benchmark variants (cargo xtask variants). Usage: bash ab.sh BENCH_ARGS...
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
tar -xzf "$here/binaries.tar.gz" -C "$bin" || { echo "cannot unpack $here/binaries.tar.gz"; exit 2; }
log=${OUT:-$here}/ab.log
for v in @ORDER@; do
  echo "== variant $v: $*" | tee -a "$log"
  "$bin/$v/kernels" "$@" 2>&1 | tee -a "$log"
done
"#;

/// The archive of staged binaries (see [`pack_binaries`]).
const BINARIES_ARCHIVE: &str = "binaries.tar.gz";

fn walk_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                walk_size(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}

/// The staged suite's driver: runs every test binary with the GPU required, prints each binary's
/// result and one summary line, then the benchmarks if asked. Logs go to $OUT when set.
const RUN_SH: &str = r#"#!/usr/bin/env bash
# Staged mamba3-rs GPU suite. Usage: bash run.sh [--sanitize] [--bench [FILTER...]]
# Order: every test binary, then the benchmarks (--bench; FILTER picks them by name), then every
# test binary again under compute-sanitizer memcheck and racecheck (--sanitize).
set -u
here=$(cd "$(dirname "$0")" && pwd)
logdir=${OUT:-$here/logs}
mkdir -p "$logdir"
# The binaries travel packed (each embeds every kernel's PTX); unpack them next to the logs' host.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
tar -xzf "$here/binaries.tar.gz" -C "$bin" || { echo "cannot unpack $here/binaries.tar.gz"; exit 2; }
export MAMBA3_REQUIRE_GPU=1
sanitize=0 bench=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=1; shift ;;
    --bench) bench=1; shift; break ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
passed=0 failed=0 broken=""
run_one() { # label, command...
  local label=$1; shift
  local log="$logdir/$label.log"
  "$@" >"$log" 2>&1
  local rc=$?
  grep -E '^(test |SKIPPED|.*worst|.*error|GPU )' "$log" | grep -v '^test result' | sed "s/^/[$label] /"
  local line; line=$(grep -E '^test result:' "$log" | tail -n 1)
  local p f
  p=$(echo "$line" | sed -nE 's/.* ([0-9]+) passed.*/\1/p'); f=$(echo "$line" | sed -nE 's/.* ([0-9]+) failed.*/\1/p')
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
  if [ $rc -ne 0 ] && [ "${f:-0}" = 0 ]; then failed=$((failed + 1)); broken="$broken $label(rc=$rc)"; fi
  if [ $rc -ne 0 ]; then echo "[$label] exit code $rc; log tail:"; tail -n 30 "$log"; fi
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
for t in "$bin"/tests/*; do
  run_one "$(basename "$t")" "$t" --test-threads=1 --nocapture
done
echo "GPU suite: $passed passed, $failed failed${broken:+ (broken:$broken)}"
if [ $bench = 1 ]; then
  "$bin/bench/kernels" "$@" 2>&1 | tee "$logdir/bench.log"
fi
suite_failed=$failed
if [ $sanitize = 1 ]; then
  passed=0 failed=0 broken=""
  # Under the sanitizers, skip the full-size grids (hours of instrumented runtime) and draw fewer
  # random geometries; the small and random geometries exercise the same paths, tails and modes.
  for t in "$bin"/tests/*; do
    for tool in memcheck racecheck; do
      MAMBA3_PROPTEST_CASES=6 run_one "$(basename "$t")-$tool" compute-sanitizer --tool $tool --error-exitcode 99 \
        "$t" --test-threads=1 --nocapture --skip upstream_geometries --skip does_not_grow_with_sequence_length \
        --skip long_sequences --skip reference_geometry
    done
  done
  echo "GPU suite under the sanitizers: $passed passed, $failed failed${broken:+ (broken:$broken)}"
fi
[ $((suite_failed + failed)) = 0 ]
"#;
