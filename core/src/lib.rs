//! gpu-health core library.
//!
//! Data flows one way: probe (NVML, sysfs, kernel log) -> [`snapshot`] ->
//! pure checks against the [`config`] policy -> [`finding`]s and a
//! [`verdict`] -> actions at the edges ([`slurm`], [`state`]).

pub mod checks;
pub mod config;
pub mod fabric;
pub mod finding;
pub mod gate;
pub mod logging;
pub mod ops;
pub mod probe;
pub mod records;
pub mod slurm;
pub mod snapshot;
pub mod state;
pub mod time;
pub mod topology;
pub mod verdict;
pub mod xid;
