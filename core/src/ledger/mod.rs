//! The node's fault ledger: the one record of what is wrong with this node
//! and what gpu-health did about it (`StateFile::Ledger`).
//!
//! Each open fault is kept once, under its identity ([`FaultId`]: the
//! check, the GPU and the code, never a pid or a free text), with its
//! gravest action so far, when it was first and last seen, where it came
//! from and what was done ([`Handling`]: drained, or pending with why).
//! Beside the faults: gpu-health's drain as it was given to Slurm
//! ([`DrainMark`]), a brake claim in flight, and the automatic returns
//! that escalation counts.
//!
//! Every run that may act reads the ledger once, under the node's run
//! lock (`StateDir::lock_run`), folds its own findings in
//! ([`Ledger::observe`]), decides ([`Ledger::plan`]), acts (`run::act`),
//! records what the action came to ([`Ledger::record`]) and saves it once
//! ([`store`]). Only then may the kernel-log cursor move: the cursor never
//! passes a fault the ledger does not hold. Everything here but [`store`]
//! is pure.
//!
//! Rules that hold by construction:
//! - a fault's action only ever grows: a milder finding of the same fault
//!   never softens it, and the drain's kind is the gravest open fault's;
//! - a node with an open `drain` fault never returns by itself;
//! - the ledger is bounded: one entry per identity, at most
//!   [`MAX_FAULTS`] (the mildest beyond fold into one entry of their
//!   gravest action), texts capped.

mod boot;
mod clock;
mod inventory;
pub mod lifecycle;
mod observe;
mod plan;
mod proof;
mod reboot;
mod reboot_history;
pub mod store;

use serde::{Deserialize, Serialize};

use crate::finding::{Action, Finding, Remedy};
use crate::inventory::Inventory;

pub use boot::BOOT_PROOF_REASON;
pub use clock::{BootStamp, Clock};
pub use lifecycle::NodeState;
pub use observe::{Observed, RunView};
pub use plan::{Plan, Recorded, ReturnDecision};

/// Version of the file's layout.
pub const LEDGER_VERSION: u32 = 1;
/// Open faults kept at most (8 GPUs x every check and many Xid codes
/// fit; the mildest beyond fold into one entry, never the gravest).
pub const MAX_FAULTS: usize = 256;
/// Automatic returns kept at most (far more than any threshold needs).
pub const MAX_RETURNS: usize = 64;
/// Reboots kept at most (`remediation.max_reboots` is at most 100).
pub const MAX_REBOOTS: usize = 128;
/// A summary is part of a drain reason (at most 200 bytes in all).
const MAX_SUMMARY: usize = 200;
const MAX_MESSAGE: usize = 2048;
const MAX_WHY: usize = 1024;

/// What names one fault: check, GPU and code. Never a pid, a process
/// name or any other text a user could choose.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FaultId {
    pub check: String,
    pub gpu: Option<u32>,
    pub code: Option<u32>,
}

impl FaultId {
    pub fn of(f: &Finding) -> FaultId {
        FaultId {
            check: f.check.clone(),
            gpu: f.gpu,
            code: f.code,
        }
    }

    /// The kind of fault, without its device: `Xid 31`, `SXid 12028`,
    /// `ecc-uncorrected`. Escalation counts returns per kind.
    pub fn kind(&self) -> String {
        match (self.check.as_str(), self.code) {
            ("xid", Some(c)) => format!("Xid {c}"),
            ("sxid", Some(c)) => format!("SXid {c}"),
            (check, _) => check.to_string(),
        }
    }
}

/// Where a fault was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// NVML, sysfs and the checks on them.
    Probe,
    /// The kernel log (Xid, SXid), by a node scan or a job's epilog.
    KernelLog,
    /// `dcgmi diag`.
    Dcgm,
    /// The counters of a job's GPUs at its end (epilog).
    JobEnd,
    /// Folded in from the files of a version before the ledger.
    Imported,
}

impl Source {
    fn of(check: &str, at_job_end: bool) -> Source {
        match check {
            "xid" | "sxid" => Source::KernelLog,
            "dcgm" => Source::Dcgm,
            _ if at_job_end => Source::JobEnd,
            _ => Source::Probe,
        }
    }
}

/// Why a draining fault was not acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PendingCause {
    /// The configuration could not be used; nothing drains in such a run.
    ConfigError,
    /// The drain brake held the drain back.
    Brake,
    /// scontrol failed or timed out.
    SlurmFailed,
    /// The node is drained with someone else's reason; gpu-health does
    /// not touch it.
    DrainedBySomeoneElse,
}

impl PendingCause {
    pub fn as_str(self) -> &'static str {
        match self {
            PendingCause::ConfigError => "configuration error",
            PendingCause::Brake => "drain brake",
            PendingCause::SlurmFailed => "Slurm failed",
            PendingCause::DrainedBySomeoneElse => "drained by someone else",
        }
    }
}

/// What was done about a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Handling {
    /// Found by the run in progress, not acted on yet (never saved: the
    /// run records what its action came to before it saves).
    New,
    /// gpu-health's drain covers it.
    Drained { at_ms: u64 },
    /// Not acted on yet; every later run that may drain tries again.
    Pending { cause: PendingCause, since_ms: u64 },
    /// The reboot gpu-health asked for it happened and the new boot did
    /// not find it again: the node returns once it proves itself (a
    /// clean check, DCGM and the acceptance gates). Found again, it is
    /// new again.
    Rebooted { at_ms: u64 },
}

/// One open fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub id: FaultId,
    /// The gravest action any finding of this fault asked for.
    pub action: Action,
    pub pci: Option<String>,
    /// The gravest finding's summary (part of the drain reason).
    pub summary: String,
    /// The gravest finding's explanation.
    pub message: String,
    pub source: Source,
    pub first_ms: u64,
    pub last_ms: u64,
    /// `last_ms` on the boot clock: quiet times count on it within a
    /// boot (absent in ledgers written before, and in imported faults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_boot: Option<BootStamp>,
    pub handling: Handling,
    /// Judged while the configuration was broken (and so by a fallback
    /// policy); a kernel-log fault like this is judged again by the next
    /// run with a good configuration, which reads the same records again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provisional: bool,
    /// What clears it (the greatest any of its findings asked for).
    #[serde(default, skip_serializing_if = "Remedy::is_person")]
    pub remedy: Remedy,
}

impl Fault {
    /// The fault as a finding (for reasons, verdicts and logs).
    pub fn finding(&self) -> Finding {
        Finding {
            check: self.id.check.clone(),
            action: self.action,
            gpu: self.id.gpu,
            pci: self.pci.clone(),
            summary: self.summary.clone(),
            message: self.message.clone(),
            culprit: None,
            code: self.id.code,
            forgeable: false,
            remedy: self.remedy,
        }
    }

    pub fn drained(&self) -> bool {
        matches!(self.handling, Handling::Drained { .. })
    }

    /// Cleared by a reboot gpu-health asked for; waiting for the proof.
    pub fn rebooted(&self) -> bool {
        matches!(self.handling, Handling::Rebooted { .. })
    }
}

/// gpu-health's drain of this node, as it was given to Slurm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainMark {
    /// The reason gpu-health set (Slurm may append its own after it).
    pub reason: String,
    pub kind: Action,
    /// Unix ms of the first drain.
    pub at_ms: u64,
    /// Unix ms of the last run that found a draining fault: the
    /// automatic return waits for a quiet time after it.
    pub last_fault_ms: u64,
    /// The later of `at_ms` and `last_fault_ms` on the boot clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_boot: Option<BootStamp>,
}

/// Why the last run could not act on the pending faults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub cause: PendingCause,
    pub why: String,
    pub at_ms: u64,
}

/// A reboot gpu-health asked Slurm for and has not seen happen yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootAsked {
    pub at_ms: u64,
    /// The boot it was asked in: another boot id means it happened.
    pub boot_id: String,
    /// The kinds of fault ([`FaultId::kind`]) it was asked for.
    pub kinds: Vec<String>,
    /// Asked so that Slurm keeps the node drained after it: the node
    /// returns once the acceptance tier proved it (`[acceptance]
    /// after_reboot`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prove: bool,
}

/// The node came back from a reboot gpu-health asked for, still drained,
/// or from a boot it did not ask for (`after_boot`): it returns once the
/// acceptance tier passes on it, idle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofDue {
    /// When the reboot was seen (the first run of the new boot).
    pub since_ms: u64,
    /// The boot the tier is to run in.
    pub boot_id: String,
    /// The kinds of fault the reboot was for.
    pub kinds: Vec<String>,
    /// When the tier passed (in this boot): only the return is left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_ms: Option<u64>,
    /// Tier runs that were tried and came to nothing (refused, not
    /// judged without holding): what the last said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_try: Option<String>,
    /// Due after a boot gpu-health did not ask for (`[acceptance]
    /// after_any_boot`): the drain is the proof's own (`kinds` is empty).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_boot: bool,
    /// The tier's steps passed so far in this boot (a tier longer than
    /// one health check is spread over several).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps_passed: Vec<String>,
}

/// A reboot that happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootDone {
    /// When it was asked for.
    pub at_ms: u64,
    pub kinds: Vec<String>,
}

/// One automatic return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoReturn {
    pub at_ms: u64,
    /// The kinds of fault ([`FaultId::kind`]) of the drain it ended.
    pub kinds: Vec<String>,
}

/// The node's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub version: u32,
    /// Whose ledger (a state directory copied from another node is not
    /// this node's).
    pub node: String,
    #[serde(default)]
    pub faults: Vec<Fault>,
    #[serde(default)]
    pub drain: Option<DrainMark>,
    #[serde(default)]
    pub held: Option<Held>,
    /// Stamp of a brake claim this node made and has not withdrawn or
    /// turned into a drain yet (the run was killed): the next run that
    /// talks to Slurm removes it.
    #[serde(default)]
    pub claim_ms: Option<u64>,
    #[serde(default)]
    pub returns: Vec<AutoReturn>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_asked: Option<RebootAsked>,
    /// Reboots within `[remediation] window_hours`, oldest first: after
    /// `max_reboots` for one kind the node goes to hardware inspection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reboots: Vec<RebootDone>,
    /// Back from a reboot asked with `prove`, or from a boot not asked
    /// for with `after_any_boot`: waiting for the tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<ProofDue>,
    /// The boot the last run saw (`[xid] boot_id_path`), kept only with
    /// `[acceptance] after_any_boot`: another one is a new boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// What the node had when its faults opened (GPUs, HCAs with an
    /// active port): the proof before a return must cover all of it.
    /// Kept while anything is open; dropped with the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,
}

impl Ledger {
    pub fn new(node: &str) -> Ledger {
        Ledger {
            version: LEDGER_VERSION,
            node: node.to_string(),
            faults: Vec::new(),
            drain: None,
            held: None,
            claim_ms: None,
            returns: Vec::new(),
            reboot_asked: None,
            reboots: Vec::new(),
            proof: None,
            boot_id: None,
            inventory: None,
        }
    }

    /// Nothing open, nothing done: what a healthy node's ledger is (and
    /// then no file is kept; an inventory alone is not kept).
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
            && self.drain.is_none()
            && self.held.is_none()
            && self.claim_ms.is_none()
            && self.returns.is_empty()
            && self.reboot_asked.is_none()
            && self.reboots.is_empty()
            && self.proof.is_none()
            && self.boot_id.is_none()
    }

    /// The gravest open action, if any.
    pub fn gravest(&self) -> Option<Action> {
        self.open_faults().map(|f| f.action).max()
    }

    /// The faults that stand (not cleared by a reboot since).
    pub fn open_faults(&self) -> impl Iterator<Item = &Fault> {
        self.faults.iter().filter(|f| !f.rebooted())
    }

    pub fn fault(&self, id: &FaultId) -> Option<&Fault> {
        self.faults.iter().find(|f| &f.id == id)
    }

    /// The open faults as findings, gravest first (then oldest first):
    /// the order of the drain reason, so that a cut reason keeps the
    /// gravest.
    pub fn findings(&self) -> Vec<Finding> {
        let mut open: Vec<&Fault> = self.open_faults().collect();
        open.sort_by_key(|f| (std::cmp::Reverse(f.action), f.first_ms));
        open.into_iter().map(Fault::finding).collect()
    }

    /// Reboots that happened for faults of `kind` within `window_ms`
    /// before `now_ms` (one asked and not seen happen yet is not one:
    /// the fault found again before it is the same occurrence).
    pub fn reboots_for(&self, kind: &str, now_ms: u64, window_ms: u64) -> usize {
        let from = now_ms.saturating_sub(window_ms);
        self.reboots
            .iter()
            .filter(|r| r.at_ms >= from && r.kinds.iter().any(|k| k == kind))
            .count()
    }

    /// Returns for faults of `kind` within `window_ms` before `now_ms`.
    pub fn returns_for(&self, kind: &str, now_ms: u64, window_ms: u64) -> usize {
        let from = now_ms.saturating_sub(window_ms);
        self.returns
            .iter()
            .filter(|r| r.at_ms >= from && r.kinds.iter().any(|k| k == kind))
            .count()
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
fn capped(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max.saturating_sub(3);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

#[cfg(test)]
mod clock_tests;
#[cfg(test)]
pub(crate) mod tests;
