//! gpu-health SPANK plugin (`gpu_health`): the user's `--gpu-health`,
//! `--tp-size` and `--nccl-debug` options, the NCCL_IB_* environment
//! derived from the node's RDMA fabric, strict-mode refusal of steps on
//! GPUs with warnings, and tensor-parallel placement checks.
//!
//! Contexts (see docs/spank.md), one file each owning its state under
//! `context/`: submission (`context::local`: sbatch, salloc, srun)
//! validates and refuses; the step side (`context::remote`: slurmstepd)
//! sets the environment and checks each step. `hooks` only exports the
//! callbacks and hands each to its context. The pure parts (the
//! plugstack.conf arguments and the table of arguments and options in
//! `gpu_health_core::plugstack`, [`options`], [`nccl_setup`],
//! [`step_checks`]) are tested without Slurm; the FFI glue is left out of
//! test builds, which have no Slurm to link against.

pub mod env_marker;
pub mod nccl_setup;
pub mod options;
pub mod step_checks;

#[cfg(not(test))]
mod context;
#[cfg(not(test))]
mod hooks;
#[cfg(not(test))]
mod spank;

mod build_info {
    include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));
}

/// The symbols Slurm's plugin loader looks for.
#[cfg(not(test))]
mod plugin_symbols {
    use std::os::raw::{c_char, c_uint};

    #[no_mangle]
    pub static plugin_name: [c_char; 11] = to_c(*b"gpu_health\0");
    #[no_mangle]
    pub static plugin_type: [c_char; 6] = to_c(*b"spank\0");
    /// Slurm loads the plugin only when major.minor equal its own.
    #[no_mangle]
    pub static plugin_version: c_uint = super::build_info::SLURM_VERSION_NUMBER;

    /// Slurm 25.05 and later (spank.h declares it; detected by build.rs):
    /// a failing `slurm_spank_init` of this plugin fails the job instead of
    /// draining the node (Slurm's default, ESPANK_NODE_FAILURE). Slurm
    /// reads it as a C `int`; an atomic has that layout and lies in
    /// writable memory, as the C declaration (`extern int`) allows.
    #[cfg(slurm_init_failure_mode)]
    #[no_mangle]
    pub static slurm_spank_init_failure_mode: std::sync::atomic::AtomicI32 =
        std::sync::atomic::AtomicI32::new(super::build_info::ESPANK_JOB_FAILURE);

    const fn to_c<const N: usize>(bytes: [u8; N]) -> [c_char; N] {
        let mut out = [0 as c_char; N];
        let mut i = 0;
        while i < N {
            out[i] = bytes[i] as c_char;
            i += 1;
        }
        out
    }
}

/// SLURM_VERSION_NUMBER the plugin was built for.
pub const BUILT_FOR_SLURM: u32 = build_info::SLURM_VERSION_NUMBER;

/// What a failing `slurm_spank_init` does with this build: `Some` of the
/// mode the plugin sets (ESPANK_JOB_FAILURE) where the headers declare
/// `slurm_spank_init_failure_mode` (25.05 and later), `None` where Slurm
/// decides alone (earlier releases).
pub const INIT_FAILURE_MODE: Option<i32> = {
    #[cfg(slurm_init_failure_mode)]
    {
        Some(build_info::ESPANK_JOB_FAILURE)
    }
    #[cfg(not(slurm_init_failure_mode))]
    {
        None
    }
};

/// INIT_FAILURE_MODE in words, for the logs.
pub fn init_failure_mode_text() -> &'static str {
    match INIT_FAILURE_MODE {
        Some(_) => "ESPANK_JOB_FAILURE (the job fails, the node stays in service)",
        None => {
            "none before Slurm 25.05 (Slurm decides: a failing init in slurmstepd drains the node)"
        }
    }
}

/// The header reading of build.rs, tested here.
#[cfg(test)]
#[path = "../build_support/slurm_headers.rs"]
mod build_facts;
#[cfg(test)]
mod build_facts_tests;
