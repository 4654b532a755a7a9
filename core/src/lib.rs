//! gpu-health core library.
//!
//! Data flows one way: probe (NVML, sysfs, kernel log) -> [`snapshot`] ->
//! pure checks against the [`config`] policy -> [`finding`]s and a
//! [`verdict`] -> actions at the edges ([`slurm`], [`state`]).

pub mod config;
pub mod finding;
pub mod snapshot;
pub mod verdict;
pub mod xid;
