//! What gpu-health remembers about its own drains, in the node's state
//! directory (atomic JSON files, root only):
//!
//! - `drain.json`: the drain gpu-health made ([`DrainRecord`]): reason,
//!   kind, when, and when the last fault was seen (the automatic return
//!   waits for a quiet time after that);
//! - `held-back.json`: draining findings the brake held back
//!   ([`HeldBack`]); later runs add them to their own findings so that the
//!   node drains as soon as the brake allows, and jobs keep being warned.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::finding::{Action, Finding};
use crate::state::{self, StateError};

pub fn drain_record_path(state_dir: &Path) -> PathBuf {
    state_dir.join("drain.json")
}

pub fn held_back_path(state_dir: &Path) -> PathBuf {
    state_dir.join("held-back.json")
}

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
}

impl DrainRecord {
    pub fn new(node: &str, reason: &str, kind: Action, now_ms: u64) -> Self {
        DrainRecord {
            node: node.to_string(),
            reason: reason.to_string(),
            kind,
            at_ms: now_ms,
            last_fault_ms: now_ms,
        }
    }
}

/// The kind a gpu-health reason names (its last parenthesis).
pub fn reason_kind(reason: &str) -> Option<Action> {
    let r = reason.trim_end();
    if r.ends_with("(drain-until-clean)") {
        Some(Action::DrainUntilClean)
    } else if r.ends_with("(drain)") {
        Some(Action::Drain)
    } else {
        None
    }
}

pub fn load_drain_record(state_dir: &Path) -> Result<Option<DrainRecord>, StateError> {
    state::load_json(&drain_record_path(state_dir))
}

pub fn save_drain_record(state_dir: &Path, rec: &DrainRecord) -> Result<(), StateError> {
    state::ensure_private_dir(state_dir)?;
    state::save_json(&drain_record_path(state_dir), rec, true)
}

pub fn clear_drain_record(state_dir: &Path) {
    remove(&drain_record_path(state_dir));
}

/// Draining findings the brake did not let drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBack {
    /// Unix ms of the first hold.
    pub since_ms: u64,
    /// Unix ms of the last run that held (or re-found) them.
    pub last_ms: u64,
    pub why: String,
    pub findings: Vec<Finding>,
}

pub fn load_held_back(state_dir: &Path) -> Option<HeldBack> {
    match state::load_json(&held_back_path(state_dir)) {
        Ok(h) => h,
        Err(e) => {
            log::warn!("held-back findings unreadable, ignoring them: {e}");
            None
        }
    }
}

/// Record `findings` (the draining ones) as held back, merged with what
/// was held before (same check, GPU and summary = same finding).
pub fn save_held_back(state_dir: &Path, why: &str, findings: &[Finding], now_ms: u64) {
    let mut held = load_held_back(state_dir).unwrap_or(HeldBack {
        since_ms: now_ms,
        last_ms: now_ms,
        why: String::new(),
        findings: Vec::new(),
    });
    held.last_ms = now_ms;
    held.why = why.to_string();
    for f in findings.iter().filter(|f| f.action.drains()) {
        if !held.findings.iter().any(|h| same_finding(h, f)) {
            held.findings.push(f.clone());
        }
    }
    let saved = state::ensure_private_dir(state_dir)
        .and_then(|()| state::save_json(&held_back_path(state_dir), &held, true));
    if let Err(e) = saved {
        log::error!("cannot record the held-back findings: {e}");
    }
}

pub fn clear_held_back(state_dir: &Path) {
    remove(&held_back_path(state_dir));
}

fn same_finding(a: &Finding, b: &Finding) -> bool {
    a.check == b.check && a.gpu == b.gpu && a.summary == b.summary
}

/// Add held-back findings to a run's findings (those the run did not find
/// again itself), marked as held back in their message.
///
/// Held `drain-until-clean` findings expire like such a drain would: once
/// `quiet_ms` passed since they were last held without the run finding
/// any draining fault. Held `drain` findings stay until an admin clears
/// them (`gpu-health resume`).
pub fn merge_held_back(
    state_dir: &Path,
    findings: &mut Vec<Finding>,
    quiet_ms: u64,
    now_ms: u64,
) -> bool {
    let Some(held) = load_held_back(state_dir) else {
        return false;
    };
    let fresh_fault = findings.iter().any(|f| f.action.drains());
    let quiet = !fresh_fault && now_ms.saturating_sub(held.last_ms) >= quiet_ms;
    let keep: Vec<&Finding> = held
        .findings
        .iter()
        .filter(|h| !(quiet && h.action == Action::DrainUntilClean))
        .collect();
    if keep.is_empty() {
        log::warn!("held-back findings expired after a quiet time; forgetting them");
        clear_held_back(state_dir);
        return false;
    }
    for h in keep {
        if !findings.iter().any(|f| same_finding(f, h)) {
            let mut f = h.clone();
            f.message = format!(
                "{} (held back by the drain brake since {} ms)",
                f.message, held.since_ms
            );
            findings.push(f);
        }
    }
    true
}

fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::warn!("cannot remove {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fatal(kind: Action, s: &str) -> Finding {
        Finding::node("xid", kind, s.into(), s.into())
    }

    #[test]
    fn kinds_from_reasons() {
        assert_eq!(reason_kind("gpu-health: a (drain)"), Some(Action::Drain));
        assert_eq!(
            reason_kind("gpu-health: a (drain-until-clean) "),
            Some(Action::DrainUntilClean)
        );
        assert_eq!(reason_kind("admin"), None);
    }

    #[test]
    fn drain_record_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("state");
        assert_eq!(load_drain_record(&dir).unwrap(), None);
        let r = DrainRecord::new("n1", "gpu-health: x (drain)", Action::Drain, 5);
        save_drain_record(&dir, &r).unwrap();
        assert_eq!(load_drain_record(&dir).unwrap(), Some(r));
        clear_drain_record(&dir);
        assert_eq!(load_drain_record(&dir).unwrap(), None);
    }

    #[test]
    fn held_back_merges_and_expires() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        save_held_back(
            dir,
            "brake",
            &[
                fatal(Action::DrainUntilClean, "Xid 31"),
                fatal(Action::Warn, "warm"),
            ],
            1_000,
        );
        save_held_back(dir, "brake", &[fatal(Action::Drain, "ECC DBE")], 2_000);
        let h = load_held_back(dir).unwrap();
        assert_eq!(h.findings.len(), 2, "only draining findings are held");
        assert_eq!(h.since_ms, 1_000);

        // Within the quiet time both come back.
        let mut f = Vec::new();
        assert!(merge_held_back(dir, &mut f, 10_000, 5_000));
        assert_eq!(f.len(), 2);
        assert!(f[0].message.contains("held back"));

        // After the quiet time only the admin-kind finding stays.
        let mut f = Vec::new();
        assert!(merge_held_back(dir, &mut f, 10_000, 50_000));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Drain);

        // A fresh fault keeps the until-clean ones too.
        let mut f = vec![fatal(Action::DrainUntilClean, "Xid 43")];
        merge_held_back(dir, &mut f, 10_000, 50_000);
        assert_eq!(f.len(), 3);

        clear_held_back(dir);
        let mut f = Vec::new();
        assert!(!merge_held_back(dir, &mut f, 0, 0));
        assert!(f.is_empty());
    }

    #[test]
    fn only_until_clean_holds_expire_entirely() {
        let d = tempfile::tempdir().unwrap();
        save_held_back(
            d.path(),
            "b",
            &[fatal(Action::DrainUntilClean, "Xid 31")],
            0,
        );
        let mut f = Vec::new();
        assert!(!merge_held_back(d.path(), &mut f, 100, 1_000));
        assert!(load_held_back(d.path()).is_none());
    }
}
