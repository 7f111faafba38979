//! `cargo xtask sass`: the SASS instruction counts of kernels' loops, on a machine without a GPU.
//!
//! The module the library loads on compute capability 9.0 (printed by the `ptx_module` example)
//! is assembled for `sm_90a` by `ptxas` (`pip install nvidia-cuda-nvcc-cu12`) one entry at a
//! time and disassembled by `nvdisasm` (`pip install nvidia-cuda-nvdisasm`); each backward branch
//! closes a loop, printed with its instruction count and most frequent opcodes. For a kernel
//! bound by instruction issue, a loop body's count per iteration is what a change moves; the
//! static count includes rarely taken paths inside the loop, so read the listing where a branch
//! skips a block.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One instruction of the listing: its opcode without modifiers and its branch target, if any.
#[derive(Debug, PartialEq)]
pub struct Instruction {
    pub opcode: String,
    pub target: Option<String>,
}

/// A loop: instruction indices `[first, last]`, closed by the branch at `last`.
#[derive(Debug, PartialEq)]
pub struct Loop {
    pub first: usize,
    pub last: usize,
}

/// Parses `nvdisasm -c` output: instructions (`/*0040*/ OP ... ;`, an optional `@P` guard) and
/// labels (`.L_x_N:`), the latter mapped to the index of the instruction that follows them.
pub fn parse(listing: &str) -> (Vec<Instruction>, HashMap<String, usize>) {
    let mut code = Vec::new();
    let mut labels = HashMap::new();
    for line in listing.lines() {
        let line = line.trim();
        if let Some(label) = line.strip_suffix(':').filter(|l| l.starts_with(".L")) {
            labels.insert(label.to_string(), code.len());
            continue;
        }
        let Some(rest) = line.strip_prefix("/*") else {
            continue;
        };
        let Some((_, text)) = rest.split_once("*/") else {
            continue;
        };
        let text = text.trim().trim_end_matches(';').trim();
        let mut words = text.split_whitespace();
        let Some(mut op) = words.next() else {
            continue;
        };
        if op.starts_with('@') {
            match words.next() {
                Some(next) => op = next,
                None => continue,
            }
        }
        let opcode = op.split('.').next().unwrap_or(op).to_string();
        let target = text
            .split_once("`(")
            .and_then(|(_, t)| t.split_once(')'))
            .map(|(t, _)| t.to_string());
        code.push(Instruction { opcode, target });
    }
    (code, labels)
}

/// Every backward branch (`BRA` to a label at or before it) as a loop.
pub fn loops(code: &[Instruction], labels: &HashMap<String, usize>) -> Vec<Loop> {
    code.iter()
        .enumerate()
        .filter(|(_, ins)| ins.opcode == "BRA")
        .filter_map(|(last, ins)| {
            let first = *labels.get(ins.target.as_deref()?)?;
            (first <= last).then_some(Loop { first, last })
        })
        .collect()
}

/// The lines of `ptxas -v` output about `entry` itself: its stack and spills, its registers.
fn entry_usage<'a>(info: &'a str, entry: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = info.lines().map(str::trim).collect();
    let properties = format!("Function properties for {entry}");
    let compiling = format!("Compiling entry function '{entry}'");
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.ends_with(&properties) {
            found.extend(lines.get(i + 1).copied());
        } else if line.contains(&compiling) {
            found.extend(lines[i + 1..].iter().copied().find(|l| l.contains("Used ")));
        }
    }
    found
}

fn tool(var: &str, name: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(name))
}

fn run(cmd: &mut Command, what: &str) -> Result<std::process::Output, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("running {what}: {e} (see `cargo xtask help`)"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Assembles and disassembles each entry of `entries` and prints its loops of at least
/// `min_len` instructions.
pub fn sass(root: &Path, cargo: Command, entries: &[String], min_len: usize) -> Result<(), String> {
    if entries.is_empty() {
        return Err(
            "sass: name at least one kernel entry (e.g. forward_ws_bf16_r4_n128_p64_na32_c16)"
                .into(),
        );
    }
    let dir = root.join("target").join("sass");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut cargo = cargo;
    let out = run(
        cargo.args([
            "run",
            "--quiet",
            "--release",
            "--example",
            "ptx_module",
            "--",
            "9.0",
        ]),
        "cargo run --example ptx_module",
    )?;
    let module = dir.join("module_sm90a.ptx");
    std::fs::write(&module, &out.stdout)
        .map_err(|e| format!("writing {}: {e}", module.display()))?;
    let (ptxas, nvdisasm) = (
        tool("MAMBA3_PTXAS", "ptxas"),
        tool("MAMBA3_NVDISASM", "nvdisasm"),
    );
    for entry in entries {
        let cubin = dir.join(format!("{entry}.cubin"));
        let assembled = run(
            Command::new(&ptxas)
                .args(["-arch=sm_90a", "-O3", "-v", "-e", entry, "-o"])
                .arg(&cubin)
                .arg(&module),
            "ptxas",
        )?;
        let info = String::from_utf8_lossy(&assembled.stderr);
        let listing = run(Command::new(&nvdisasm).arg("-c").arg(&cubin), "nvdisasm")?;
        let (code, labels) = parse(&String::from_utf8_lossy(&listing.stdout));
        if code.is_empty() {
            return Err(format!(
                "{entry}: no instructions (is it an entry of the module?)"
            ));
        }
        println!("{entry}: {} instructions", code.len());
        for line in entry_usage(&info, entry) {
            println!("  {line}");
        }
        for l in loops(&code, &labels) {
            let body = &code[l.first..=l.last];
            if body.len() < min_len {
                continue;
            }
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for ins in body {
                *counts.entry(ins.opcode.as_str()).or_default() += 1;
            }
            let mut top: Vec<_> = counts.into_iter().collect();
            top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let top: Vec<String> = top
                .iter()
                .take(10)
                .map(|(o, n)| format!("{o} {n}"))
                .collect();
            println!(
                "  loop [{}, {}]: {} instructions ({})",
                l.first,
                l.last,
                body.len(),
                top.join(", ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-counted listing: a 3-instruction inner loop inside a 6-instruction outer one, a
    /// forward branch that is no loop, a guarded instruction and a label before the first.
    const LISTING: &str = "
        .text.k:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   IADD3 R2, R2, 0x1, RZ ;
.L_x_1:
        /*0020*/                   FFMA R3, R3, R4, R5 ;
        /*0030*/              @P0  FMUL.FTZ R3, R3, R3 ;
        /*0040*/              @!P1 BRA `(.L_x_1) ;
        /*0050*/                   BRA `(.L_x_2) ;
.L_x_2:
        /*0060*/                   BRA `(.L_x_0) ;
        /*0070*/                   EXIT ;
";

    #[test]
    fn parses_opcodes_guards_and_labels() {
        let (code, labels) = parse(LISTING);
        let ops: Vec<&str> = code.iter().map(|i| i.opcode.as_str()).collect();
        assert_eq!(
            ops,
            ["MOV", "IADD3", "FFMA", "FMUL", "BRA", "BRA", "BRA", "EXIT"]
        );
        assert_eq!(labels[".L_x_1"], 2);
        assert_eq!(code[4].target.as_deref(), Some(".L_x_1"));
    }

    #[test]
    fn reports_only_the_entrys_own_usage() {
        let info = "ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 99 registers, used 1 barriers
ptxas info    : Function properties for panic
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads";
        assert_eq!(
            entry_usage(info, "k"),
            [
                "ptxas info    : Used 99 registers, used 1 barriers",
                "8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads"
            ]
        );
    }

    #[test]
    fn finds_each_backward_branch_as_a_loop() {
        let (code, labels) = parse(LISTING);
        assert_eq!(
            loops(&code, &labels),
            [Loop { first: 2, last: 4 }, Loop { first: 1, last: 6 }]
        );
    }
}
