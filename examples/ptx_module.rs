//! Prints the PTX module the library loads on a GPU of a given compute capability (default 9.0:
//! the `sm_90a` rewrite with the `wgmma` lines restored), for reading or for assembling with
//! `ptxas` on a machine without a GPU: `cargo run --release --example ptx_module -- 9.0 > m.ptx`.
//! `cargo xtask sass` uses it to count the SASS instructions of a kernel's loops.

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "9.0".to_string());
    let (major, minor) = arg
        .split_once('.')
        .ok_or_else(|| format!("compute capability `{arg}`: expected MAJOR.MINOR, e.g. 9.0"))?;
    let cc = (major.parse::<i32>()?, minor.parse::<i32>()?);
    let text = mamba3::ptx_for_compute_capability(cc);
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}
