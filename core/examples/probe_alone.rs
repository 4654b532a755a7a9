//! The part of a healthy Prolog run that its safety fixes: a process that
//! forks the NVML probe with its deadline and exits, with nothing else of
//! the run (no configuration, state, checks or PCI bus). `ci/bench-prolog`
//! times it beside the Prolog as the floor that no cut of the run's own
//! work can go below.
//!
//! `probe_alone LIBRARY`: the NVML library to load (the stand-in in the
//! bench). Exit 1 when the probe failed or found no GPU. Started as the
//! Prolog is (its own C entry, gpu_health_core::entry).

#![no_main]

use std::ffi::{c_char, c_int};
use std::path::PathBuf;
use std::time::Duration;

use gpu_health_core::probe::{self, ProbeOptions};

#[no_mangle]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    gpu_health_core::entry::prepare();
    let Some(library) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: probe_alone LIBRARY");
        std::process::exit(2);
    };
    // The Prolog's options, and a deadline far above the stand-in's time.
    let snapshot = probe::probe_with_deadline(
        Some(&library),
        ProbeOptions::PROLOG,
        Duration::from_secs(10),
    );
    // Silent when it worked, as the healthy Prolog is.
    if let Some(e) = &snapshot.nvml_error {
        eprintln!("probe failed: {e:?}");
        std::process::exit(1);
    }
    if snapshot.gpus.is_empty() {
        eprintln!("probe found no GPU");
        std::process::exit(1);
    }
    0
}
