//! The ledger on disk (`StateFile::Ledger`): read once per run, saved once,
//! and only when it changed; a healthy node keeps no file.
//!
//! A ledger that cannot be read (corrupt, not ours, another node's) is
//! never silently replaced by an empty one: it is moved aside for the
//! admin (`StateFile::LedgerUnreadable`), the run says so loudly, and the
//! caller reads the kernel log again from its look-back, so that the
//! faults the driver logged are found again; NVML faults are found again
//! by every probe anyway. A bad file never drains a node by itself.
//!
//! The files of the versions before the ledger (`drain.json`,
//! `pending-drain.json`, `returns.json`) are folded in once and removed
//! after the first save.

use serde::{Deserialize, Serialize};

use crate::finding::{Action, Finding};
use crate::ids::NodeName;
use crate::state::{StateDir, StateError, StateFile, StateValue};

use super::{
    capped, AutoReturn, DrainMark, Fault, FaultId, Handling, Ledger, PendingCause, Source,
    LEDGER_VERSION, MAX_MESSAGE, MAX_SUMMARY,
};

impl StateValue for Ledger {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::Ledger
    }
}

/// The ledger as a run found it.
#[derive(Debug)]
pub struct Loaded {
    pub ledger: Ledger,
    /// As read, to save only what changed.
    original: Option<Ledger>,
    /// Folded in from the files of a version before the ledger.
    imported: bool,
    /// The ledger could not be used (moved aside): why. The caller reads
    /// the kernel log again from its look-back and tells jobs.
    pub unreadable: Option<String>,
}

/// Read this node's ledger. Never fails: see the module's text for what
/// an unreadable one gives.
pub fn load(state: &StateDir, node: &NodeName) -> Loaded {
    match state.load::<Ledger>(()) {
        Ok(Some(l)) if l.version == LEDGER_VERSION && l.node == node.as_str() => Loaded {
            original: Some(l.clone()),
            ledger: l,
            imported: false,
            unreadable: None,
        },
        Ok(Some(l)) => set_aside(
            state,
            node,
            format!(
                "it is version {} of node {:?} (this is version {LEDGER_VERSION} on {node})",
                l.version,
                crate::text::printable(&l.node)
            ),
        ),
        Ok(None) => {
            let legacy = import_legacy(state, node);
            if legacy.imported {
                log::warn!(
                    "folding the drain record, pending findings and returns of an earlier gpu-health into the fault ledger ({} open faults)",
                    legacy.ledger.faults.len()
                );
            }
            legacy
        }
        Err(e) => set_aside(state, node, e.to_string()),
    }
}

/// The ledger as it is on disk, read only (the admin command, a run that
/// did not get its turn): nothing is moved aside or folded in on disk;
/// the files of an older version are read as the first run would fold
/// them in. `None`: no ledger, or one that cannot be read.
pub fn peek(state: &StateDir, node: &NodeName) -> Option<Ledger> {
    match state.load::<Ledger>(()) {
        Ok(Some(l)) if l.version == LEDGER_VERSION && l.node == node.as_str() => Some(l),
        Ok(None) => {
            let legacy = import_legacy(state, node);
            legacy.imported.then_some(legacy.ledger)
        }
        _ => None,
    }
}

/// Save the ledger when it changed (remove the file when it is empty).
pub fn save(state: &StateDir, loaded: &Loaded) -> Result<(), StateError> {
    let changed = loaded.original.as_ref() != Some(&loaded.ledger);
    if changed || loaded.imported {
        if loaded.ledger.is_empty() {
            state.remove(StateFile::Ledger)?;
        } else {
            state.save((), &loaded.ledger)?;
        }
    }
    if loaded.imported {
        for f in [
            StateFile::LegacyDrainRecord,
            StateFile::LegacyPendingDrain,
            StateFile::LegacyReturnHistory,
        ] {
            if let Err(e) = state.remove(f) {
                log::warn!("cannot remove {}: {e}", state.path_of(f).display());
            }
        }
    }
    Ok(())
}

impl Loaded {
    /// The ledger as it is on disk now (after [`save`]).
    pub fn saved(&mut self) {
        self.original = Some(self.ledger.clone());
        self.imported = false;
    }

    /// The file was written meanwhile (a claim recorded before it was
    /// sent): save at the end whatever the ledger then holds.
    pub fn forget_original(&mut self) {
        self.original = None;
    }

    /// Whether the ledger holds anything a run must look at.
    pub fn is_empty(&self) -> bool {
        self.ledger.is_empty()
    }
}

fn set_aside(state: &StateDir, node: &NodeName, why: String) -> Loaded {
    let aside = state.path_of(StateFile::LedgerUnreadable);
    let moved = match state.rename(StateFile::Ledger, StateFile::LedgerUnreadable) {
        Ok(()) => format!("moved to {}", aside.display()),
        Err(e) => format!("and it cannot be moved aside ({e})"),
    };
    let message = format!(
        "the node's fault ledger {} is unreadable ({why}); {moved}; starting a new one and reading \
         the kernel log again from its look-back",
        state.path_of(StateFile::Ledger).display()
    );
    log::error!("{message}");
    Loaded {
        ledger: Ledger::new(node.as_str()),
        original: None,
        imported: false,
        unreadable: Some(message),
    }
}

/// Before the ledger: the drain record.
#[derive(Debug, Deserialize, Serialize)]
struct LegacyDrainRecord {
    node: String,
    reason: String,
    kind: Action,
    at_ms: u64,
    last_fault_ms: u64,
    #[serde(default)]
    findings: Vec<String>,
}

/// Before the ledger: one pending finding.
#[derive(Debug, Deserialize, Serialize)]
struct LegacyPendingFinding {
    finding: Finding,
    cause: PendingCause,
    since_ms: u64,
}

/// Before the ledger: the pending findings.
#[derive(Debug, Deserialize, Serialize)]
struct LegacyPendingDrain {
    findings: Vec<LegacyPendingFinding>,
}

/// Before the ledger: the automatic returns.
#[derive(Debug, Deserialize, Serialize)]
struct LegacyReturnHistory {
    returns: Vec<AutoReturn>,
}

impl StateValue for LegacyDrainRecord {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::LegacyDrainRecord
    }
}

impl StateValue for LegacyPendingDrain {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::LegacyPendingDrain
    }
}

impl StateValue for LegacyReturnHistory {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::LegacyReturnHistory
    }
}

/// No ledger yet: fold in what an older version kept, if anything.
fn import_legacy(state: &StateDir, node: &NodeName) -> Loaded {
    let mut ledger = Ledger::new(node.as_str());
    let mut imported = false;
    let warn = |what: StateFile, e: StateError| {
        log::error!(
            "cannot fold {} into the fault ledger ({e}); it stays for an admin to read",
            state.path_of(what).display()
        );
    };
    match state.load::<LegacyPendingDrain>(()) {
        Ok(Some(p)) => {
            imported = true;
            for p in p.findings.into_iter().filter(|p| p.finding.action.drains()) {
                let handling = Handling::Pending {
                    cause: p.cause,
                    since_ms: p.since_ms,
                };
                add_imported(&mut ledger, &p.finding, handling, p.since_ms);
            }
        }
        Ok(None) => {}
        Err(e) => warn(StateFile::LegacyPendingDrain, e),
    }
    match state.load::<LegacyDrainRecord>(()) {
        Ok(Some(r)) if r.node == node.as_str() => {
            imported = true;
            let summaries = if r.findings.is_empty() {
                vec![r.reason.clone()]
            } else {
                r.findings.clone()
            };
            for s in &summaries {
                let f = legacy_finding(s, r.kind);
                add_imported(
                    &mut ledger,
                    &f,
                    Handling::Drained { at_ms: r.at_ms },
                    r.at_ms,
                );
            }
            ledger.drain = Some(DrainMark {
                reason: r.reason,
                kind: r.kind,
                at_ms: r.at_ms,
                last_fault_ms: r.last_fault_ms,
                last_boot: None,
            });
        }
        Ok(_) => {}
        Err(e) => warn(StateFile::LegacyDrainRecord, e),
    }
    match state.load::<LegacyReturnHistory>(()) {
        Ok(Some(h)) => {
            imported = true;
            ledger.returns = h.returns;
        }
        Ok(None) => {}
        Err(e) => warn(StateFile::LegacyReturnHistory, e),
    }
    Loaded {
        ledger,
        original: None,
        imported,
        unreadable: None,
    }
}

/// A finding of an older version: its summary may carry a pid (dropped)
/// and its code is in the summary (`Xid 79 GPU3 ...`).
fn add_imported(ledger: &mut Ledger, f: &Finding, handling: Handling, at_ms: u64) {
    let summary = without_pid(&f.summary);
    let code = match f.check.as_str() {
        "xid" | "sxid" => f.code.or_else(|| second_word_number(&summary)),
        _ => f.code,
    };
    let id = FaultId {
        check: f.check.clone(),
        gpu: f.gpu,
        code,
    };
    if let Some(e) = ledger.faults.iter_mut().find(|e| e.id == id) {
        e.action = e.action.max(f.action);
        if matches!(handling, Handling::Drained { .. }) {
            e.handling = handling;
        }
        return;
    }
    ledger.faults.push(Fault {
        id,
        action: f.action,
        pci: f.pci.clone(),
        summary: capped(&summary, MAX_SUMMARY),
        message: capped(&without_pid(&f.message), MAX_MESSAGE),
        source: Source::Imported,
        first_ms: at_ms,
        last_ms: at_ms,
        last_boot: None,
        handling,
        provisional: false,
        remedy: f.remedy,
    });
}

/// A finding from a summary alone (the drain record kept no more).
fn legacy_finding(summary: &str, kind: Action) -> Finding {
    let first = summary.split_whitespace().next().unwrap_or("");
    let check = match first {
        "Xid" => "xid",
        "SXid" => "sxid",
        _ => "imported",
    };
    let gpu = summary
        .split_whitespace()
        .find_map(|w| w.strip_prefix("GPU")?.parse::<u32>().ok());
    Finding {
        gpu,
        ..Finding::node(check, kind, summary.to_string(), summary.to_string())
    }
}

fn second_word_number(s: &str) -> Option<u32> {
    s.split_whitespace().nth(1)?.parse().ok()
}

/// `... pid=2210 ...` without the pid (a user's process number).
fn without_pid(s: &str) -> String {
    s.split(' ')
        .filter(|w| {
            w.strip_prefix("pid=")
                .is_none_or(|p| p.trim_end_matches([',', ';']).parse::<u64>().is_err())
        })
        .collect::<Vec<_>>()
        .join(" ")
}
