//! The drain gpu-health made on this node (`StateFile::DrainRecord`):
//! reason, kind, when, and when the last fault was seen (the automatic
//! return waits for a quiet time after that).

use serde::{Deserialize, Serialize};

use crate::finding::Action;
use crate::ids::NodeName;
use crate::state::{StateDir, StateError, StateFile};

/// A drain made by gpu-health on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRecord {
    pub node: String,
    /// The reason given to Slurm.
    pub reason: String,
    /// `drain` or `drain-until-clean`.
    pub kind: Action,
    /// Unix ms of the drain.
    pub at_ms: u64,
    /// Unix ms of the last run that still found a draining fault.
    pub last_fault_ms: u64,
    /// Every draining finding's summary (the reason may say `+N more`).
    #[serde(default)]
    pub findings: Vec<String>,
}

impl DrainRecord {
    pub fn new(node: &NodeName, reason: &str, kind: Action, now_ms: u64) -> Self {
        DrainRecord {
            node: node.to_string(),
            reason: reason.to_string(),
            kind,
            at_ms: now_ms,
            last_fault_ms: now_ms,
            findings: Vec::new(),
        }
    }
}

/// The kind a gpu-health reason names (see [`crate::finding::own_reason`]).
pub fn reason_kind(reason: &str) -> Option<Action> {
    crate::finding::own_reason(reason).map(|(_, kind)| kind)
}

/// This node's record (one of another node's name is not this node's).
pub fn load(state: &StateDir, node: &NodeName) -> Result<Option<DrainRecord>, StateError> {
    Ok(state
        .load::<DrainRecord>(StateFile::DrainRecord)?
        .filter(|r| r.node == node.as_str()))
}

pub fn save(state: &StateDir, rec: &DrainRecord) -> Result<(), StateError> {
    state.save(StateFile::DrainRecord, rec)
}

/// After a drain: start a record, or refresh one (a repeated drain keeps
/// the drain time and moves the last fault).
pub fn record_drain(
    state: &StateDir,
    node: &NodeName,
    reason: &str,
    findings: &[String],
    now_ms: u64,
) -> Result<(), StateError> {
    let Some(kind) = reason_kind(reason) else {
        return Ok(());
    };
    let mut rec = match load(state, node) {
        Ok(Some(mut old)) => {
            old.reason = reason.to_string();
            old.kind = old.kind.max(kind);
            old.last_fault_ms = now_ms;
            old
        }
        _ => DrainRecord::new(node, reason, kind, now_ms),
    };
    rec.findings = findings.to_vec();
    save(state, &rec)
}

pub fn clear(state: &StateDir) {
    if let Err(e) = state.remove(StateFile::DrainRecord) {
        log::warn!("cannot remove the drain record: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_reasons() {
        assert_eq!(reason_kind("gpu-health: a (drain)"), Some(Action::Drain));
        assert_eq!(
            reason_kind("gpu-health: a (drain-until-clean) : Not responding"),
            Some(Action::DrainUntilClean)
        );
        assert_eq!(reason_kind("admin"), None);
    }

    #[test]
    fn record_round_trip_and_refresh() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state"));
        let n1 = NodeName::parse("n1").unwrap();
        assert_eq!(load(&state, &n1).unwrap(), None);
        record_drain(&state, &n1, "gpu-health: x (drain-until-clean)", &[], 5).unwrap();
        let all = vec!["y".to_string(), "z".to_string()];
        record_drain(&state, &n1, "gpu-health: y; +1 more (drain)", &all, 9).unwrap();
        let r = load(&state, &n1).unwrap().unwrap();
        assert_eq!((r.at_ms, r.last_fault_ms, r.kind), (5, 9, Action::Drain));
        assert_eq!(r.findings, all);
        assert_eq!(load(&state, &NodeName::parse("n2").unwrap()).unwrap(), None);
        clear(&state);
        assert_eq!(load(&state, &n1).unwrap(), None);
    }
}
