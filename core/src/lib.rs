//! gpu-health core library.
//!
//! Data flows one way: probe (NVML, sysfs, kernel log) -> [`snapshot`] ->
//! pure checks against the [`config`] policy -> [`finding`]s and a
//! [`verdict`] -> actions at the edges ([`slurm`], [`state`], [`records`]).
//! [`run`] holds each run (prolog, health check, epilog, resume, check)
//! once, in that order: decide, act, then commit; the binaries and the
//! SPANK plugin are wiring around it.
//!
//! Layers, each importing only from those below it:
//! - [`run`]
//! - [`records`], [`ops`]
//! - [`ledger`], [`acceptance`]
//! - [`checks`], [`xid`], [`probe`], [`fabric`], [`topology`]
//! - [`slurm`], [`state`], [`config`], [`logging`]
//! - [`snapshot`], [`inventory`], [`finding`], [`verdict`], [`ids`], [`process`], [`time`], [`text`],
//!   [`sysfs_read`]

pub mod acceptance;
pub mod checks;
pub mod config;
pub mod entry;
pub mod fabric;
pub mod finding;
pub mod ids;
pub mod inventory;
pub mod ledger;
pub mod logging;
pub mod ops;
pub mod plugstack;
pub mod probe;
pub mod process;
pub mod records;
pub mod run;
pub mod slurm;
pub mod snapshot;
pub mod state;
pub mod sysfs_read;
pub mod text;
pub mod time;
pub mod topology;
pub mod verdict;
pub mod xid;

/// An environment lookup over fixed pairs, for the tests of functions that
/// take one (`JobEnv::from_env`, `ids::this_node`, `run::invocation`).
#[cfg(test)]
pub(crate) fn test_env<'a>(
    pairs: &'a [(&'a str, &'a str)],
) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}
