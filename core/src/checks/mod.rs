//! The checks: one folder each, behind one interface ([`Check`]), listed
//! once in [`REGISTRY`]. Adding a check is a folder and a line there
//! (docs/checks.md says how).
//!
//! A run goes through every check in four steps:
//! 1. [`Check::probe`]: slow sources of its own, before the run takes the
//!    node's turn (DCGM's diagnostic);
//! 2. [`Check::gather`]: its saved state and its own source, in the turn
//!    (the kernel log from its cursor, the RDMA ports in sysfs), put into
//!    the run's [`Evidence`];
//! 3. [`Check::judge`]: pure, from the NVML snapshot and the evidence to
//!    findings; tested without hardware;
//! 4. [`Check::commit`]: after the run acted and saved the node's fault
//!    ledger, what later runs need (its history, its cursor).
//!
//! Probing the NVML snapshot itself (`probe`) and acting on the findings
//! (`ledger`, `run::act`) are not checks' business.

pub mod clocks;
pub mod dcgm;
pub mod ecc;
mod evidence;
pub mod gpu_count;
pub mod gpu_lost;
mod label;
pub mod leftovers;
pub mod nvlink;
pub mod nvml;
pub mod nvswitch_fabric;
pub mod pcie;
pub mod persistence;
pub mod power_limit;
pub mod rdma_ports;
pub mod recovery_action;
pub mod row_remap;
pub mod temperature;
pub mod xid;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;

use crate::config::Config;
use crate::finding::Finding;
use crate::snapshot::NodeSnapshot;
use crate::state::StateDir;
use crate::verdict::Mode;

pub use ecc::EccHistory;
pub use evidence::Evidence;
pub use leftovers::leftovers;
pub use nvlink::LinkHistory;

/// Every check, in the order their findings are listed within a
/// [`Place`].
pub const REGISTRY: &[&dyn Check] = &[
    &nvml::Nvml,
    &gpu_count::GpuCount,
    &gpu_lost::GpuLost,
    &ecc::Ecc,
    &row_remap::RowRemap,
    &pcie::Pcie,
    &nvlink::Nvlink,
    &temperature::Temperature,
    &power_limit::PowerLimit,
    &clocks::Clocks,
    &persistence::Persistence,
    &nvswitch_fabric::NvswitchFabric,
    &recovery_action::RecoveryAction,
    &xid::Xid,
    &rdma_ports::RdmaPorts,
    &leftovers::Leftovers,
    &dcgm::Dcgm,
];

/// Where a check's findings stand in a run's list (and so in a reason):
/// node-wide ones first, then each GPU's in GPU order, then the kernel
/// log's, the RDMA ports', the job's, DCGM's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    Node,
    Gpu,
    KernelLog,
    Ports,
    Job,
    Diagnostic,
}

/// The job a prolog checks the node for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobContext {
    /// The job's GPUs on this node (NVML indices).
    pub gpus: Vec<u32>,
    pub mode: Mode,
}

/// What a check may read and do at the edges: the run's configuration and
/// state directory, its time, the job.
pub struct Io<'a> {
    pub config: &'a Config,
    pub state: &'a StateDir,
    pub now_ms: u64,
    pub job: Option<&'a JobContext>,
    /// The node's fault ledger was lost: sources with a cursor start over
    /// from their look-back.
    pub from_lookback: bool,
    /// The NVML snapshot of this run (a source may be tied to its GPUs).
    pub snapshot: &'a NodeSnapshot,
    /// The run's `PATH`, for programs named without a directory.
    pub search_path: &'a [std::path::PathBuf],
    /// This boot's id (`xid.boot_id_path`, read once a run; empty when
    /// unreadable): what a check keeps for one boot is keyed by it.
    pub boot_id: &'a str,
}

/// Everything a judge may read.
pub struct CheckInput<'a> {
    pub snapshot: &'a NodeSnapshot,
    pub config: &'a Config,
    /// Unix ms of this run.
    pub now_ms: u64,
    /// `Some(k)`: this run sees the node from inside a job's cgroup (a
    /// Prolog with `PrologFlags=RunInJob`), whose device rules may show
    /// NVML only the job's `k` GPUs.
    pub job_view: Option<usize>,
    pub job: Option<&'a JobContext>,
    /// What the checks gathered: their saved state and their own sources.
    pub evidence: &'a Evidence,
}

/// One check.
pub trait Check: Sync {
    /// Its name: the `check` of its findings (a check with several kinds
    /// of finding names each in its docs fragment).
    fn name(&self) -> &'static str;
    /// The configuration section it reads, if any.
    fn section(&self) -> Option<&'static str> {
        None
    }
    fn place(&self) -> Place {
        Place::Gpu
    }
    /// Slow sources of its own, read before the run takes the node's turn.
    fn probe(&self, _io: &Io<'_>, _evidence: &mut Evidence) {}
    /// Its saved state and its own sources, read in the run's turn.
    fn gather(&self, _io: &Io<'_>, _evidence: &mut Evidence) {}
    /// Pure: its findings.
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding>;
    /// After the run acted: keep what later runs need. `handled`: the
    /// run's configuration was good and the node's fault ledger, holding
    /// every draining finding, is saved.
    fn commit(&self, _io: &Io<'_>, _input: &CheckInput<'_>, _handled: bool) {}
    /// Its rows of docs/checks.md: `| finding | action | when |` lines.
    fn doc(&self) -> &'static str;
}

/// Run every check's judge; findings in [`Place`] order (GPU findings by
/// GPU, then registry order), stable otherwise.
pub fn evaluate(input: &CheckInput<'_>) -> Vec<Finding> {
    let mut placed: Vec<(Place, Option<u32>, Finding)> = Vec::new();
    for check in REGISTRY {
        let place = check.place();
        for f in check.judge(input) {
            let gpu = if place == Place::Gpu { f.gpu } else { None };
            placed.push((place, gpu, f));
        }
    }
    placed.sort_by_key(|(place, gpu, _)| (*place, *gpu));
    placed.into_iter().map(|(_, _, f)| f).collect()
}

/// Every check's probe (before the run's turn).
pub fn probe_all(io: &Io<'_>, evidence: &mut Evidence) {
    for check in REGISTRY {
        check.probe(io, evidence);
    }
}

/// Every check's gather (in the run's turn).
pub fn gather_all(io: &Io<'_>, evidence: &mut Evidence) {
    for check in REGISTRY {
        check.gather(io, evidence);
    }
}

/// Every check's commit (after the run acted).
pub fn commit_all(io: &Io<'_>, input: &CheckInput<'_>, handled: bool) {
    for check in REGISTRY {
        check.commit(io, input, handled);
    }
}
