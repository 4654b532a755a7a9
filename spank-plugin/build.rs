//! Facts of the Slurm the plugin is built for, from its headers:
//! - `plugin_version`: Slurm refuses a SPANK plugin whose major.minor
//!   differs from its own, so the number must be the one of the Slurm the
//!   plugin is built for, never a constant;
//! - whether spank.h declares `slurm_spank_init_failure_mode` (25.05 and
//!   later), and the value of `ESPANK_JOB_FAILURE` there: the plugin then
//!   defines the symbol so that a failing init fails the job, never the
//!   node (Slurm's default is a node failure, which drains it).

use std::path::{Path, PathBuf};

#[path = "build_support/slurm_headers.rs"]
mod slurm_headers;

fn read(header: &Path) -> String {
    println!("cargo:rerun-if-changed={}", header.display());
    std::fs::read_to_string(header)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", header.display()))
}

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rustc-check-cfg=cfg(slurm_init_failure_mode)");
    let dirs: Vec<PathBuf> = match std::env::var_os("SLURM_INCLUDE_DIR") {
        Some(d) => vec![PathBuf::from(d)],
        None => vec!["/usr/include".into(), "/usr/local/include".into()],
    };
    let Some(slurm_dir) = dirs
        .iter()
        .map(|d| d.join("slurm"))
        .find(|d| d.join("slurm_version.h").is_file())
    else {
        panic!(
            "slurm/slurm_version.h not found in {dirs:?}: install Slurm's development headers (Debian: libslurm-dev) or set SLURM_INCLUDE_DIR"
        );
    };
    let version_h = slurm_dir.join("slurm_version.h");
    let number = slurm_headers::version_number(&read(&version_h))
        .unwrap_or_else(|| panic!("no SLURM_VERSION_NUMBER in {}", version_h.display()));

    let spank_h = slurm_dir.join("spank.h");
    let errno_h = slurm_dir.join("slurm_errno.h");
    let mut facts = format!(
        "/// SLURM_VERSION_NUMBER of {} at build time.\npub const SLURM_VERSION_NUMBER: u32 = {number:#x};\n",
        version_h.display()
    );
    if spank_h.is_file() && slurm_headers::declares_init_failure_mode(&read(&spank_h)) {
        let headers = [&errno_h, &spank_h];
        let value = headers
            .iter()
            .filter(|h| h.is_file())
            .find_map(|h| slurm_headers::enum_value(&read(h), "ESPANK_JOB_FAILURE"))
            .unwrap_or_else(|| {
                panic!(
                    "{} declares slurm_spank_init_failure_mode but no value of ESPANK_JOB_FAILURE was found in {headers:?}",
                    spank_h.display()
                )
            });
        let value = i32::try_from(value)
            .unwrap_or_else(|_| panic!("ESPANK_JOB_FAILURE = {value} is not a C int"));
        println!("cargo:rustc-cfg=slurm_init_failure_mode");
        facts.push_str(&format!(
            "/// ESPANK_JOB_FAILURE of {}: the value of the plugin's slurm_spank_init_failure_mode.\npub const ESPANK_JOB_FAILURE: i32 = {value};\n",
            errno_h.display()
        ));
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("slurm_version.rs"), facts)
        .unwrap_or_else(|e| panic!("cannot write slurm_version.rs: {e}"));
}
