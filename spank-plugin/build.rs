//! Take `plugin_version` from the build host's Slurm headers: Slurm refuses
//! a SPANK plugin whose major.minor differs from its own, so the number
//! must be the one of the Slurm the plugin is built for, never a constant.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let dirs: Vec<PathBuf> = match std::env::var_os("SLURM_INCLUDE_DIR") {
        Some(d) => vec![PathBuf::from(d)],
        None => vec!["/usr/include".into(), "/usr/local/include".into()],
    };
    let Some(header) = dirs
        .iter()
        .map(|d| d.join("slurm/slurm_version.h"))
        .find(|h| h.is_file())
    else {
        panic!(
            "slurm/slurm_version.h not found in {dirs:?}: install Slurm's development headers (Debian: libslurm-dev) or set SLURM_INCLUDE_DIR"
        );
    };
    println!("cargo:rerun-if-changed={}", header.display());
    let text = std::fs::read_to_string(&header)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", header.display()));
    let number = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#define SLURM_VERSION_NUMBER"))
        .find_map(|v| {
            let v = v.trim();
            match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => v.parse().ok(),
            }
        })
        .unwrap_or_else(|| panic!("no SLURM_VERSION_NUMBER in {}", header.display()));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("slurm_version.rs"),
        format!(
            "/// SLURM_VERSION_NUMBER of {} at build time.\npub const SLURM_VERSION_NUMBER: u32 = {number:#x};\n",
            header.display()
        ),
    )
    .unwrap_or_else(|e| panic!("cannot write slurm_version.rs: {e}"));
}
