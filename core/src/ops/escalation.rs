//! Escalation: a node the automatic return keeps bringing back for the
//! same kind of fault stays drained for an admin.
//!
//! Each automatic return is remembered with the kinds of fault of the
//! drain it ended (`StateFile::ReturnHistory`). When a fault that would
//! drain until clean is of a kind the node was returned for
//! `recovery.escalate_after_returns` times within
//! `recovery.escalate_window_hours`, it drains as `drain` instead, with a
//! reason that says why. An admin's `gpu-health resume` starts the count
//! over (someone looked at the node). Pure but for the history's
//! [`ReturnHistory`] type, which the state module stores.

use serde::{Deserialize, Serialize};

use crate::config::RecoveryConfig;
use crate::finding::{Action, Finding};

/// Returns kept at most (far more than any threshold needs).
const MAX_RETURNS: usize = 64;

/// The automatic returns of this node, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReturnHistory {
    pub returns: Vec<AutoReturn>,
}

/// One automatic return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoReturn {
    /// Unix ms of the return.
    pub at_ms: u64,
    /// The kinds of fault ([`fault_kind`]) of the drain it ended.
    pub kinds: Vec<String>,
}

impl ReturnHistory {
    /// Remember a return; forget what is older than `window_ms`.
    pub fn record(&mut self, at_ms: u64, mut kinds: Vec<String>, window_ms: u64) {
        kinds.sort();
        kinds.dedup();
        self.returns.push(AutoReturn { at_ms, kinds });
        let from = at_ms.saturating_sub(window_ms);
        self.returns.retain(|r| r.at_ms >= from);
        if self.returns.len() > MAX_RETURNS {
            let excess = self.returns.len() - MAX_RETURNS;
            self.returns.drain(..excess);
        }
    }

    /// Returns for faults of `kind` within `window_ms` before `now_ms`.
    pub fn count(&self, kind: &str, now_ms: u64, window_ms: u64) -> usize {
        let from = now_ms.saturating_sub(window_ms);
        self.returns
            .iter()
            .filter(|r| r.at_ms >= from && r.kinds.iter().any(|k| k == kind))
            .count()
    }
}

/// The kind of fault a finding summary names, without the device or
/// process: `Xid 31 GPU1 0000:18:00.0 pid=7` is `Xid 31`, `ECC DBE GPU3
/// 0000:3b:00.0` is `ECC DBE`.
pub fn fault_kind(summary: &str) -> String {
    let mut words = summary.split_whitespace();
    let first = words.next().unwrap_or("");
    if first == "Xid" || first == "SXid" {
        return format!("{first} {}", words.next().unwrap_or(""));
    }
    let device = |w: &str| {
        w.contains('=')
            || w.contains(':')
            || (w.starts_with("GPU") && w[3..].chars().next().is_some_and(|c| c.is_ascii_digit()))
    };
    summary
        .split_whitespace()
        .take_while(|w| !device(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Turn `drain-until-clean` findings into `drain` where the node was
/// returned for the same kind of fault too often. Returns how many.
pub fn escalate(
    findings: &mut [Finding],
    history: &ReturnHistory,
    cfg: &RecoveryConfig,
    now_ms: u64,
) -> usize {
    if cfg.escalate_after_returns == 0 {
        return 0;
    }
    let window_ms = cfg.escalate_window_ms();
    let mut escalated = 0;
    for f in findings
        .iter_mut()
        .filter(|f| f.action == Action::DrainUntilClean)
    {
        let kind = fault_kind(&f.summary);
        let returns = history.count(&kind, now_ms, window_ms);
        if returns < cfg.escalate_after_returns as usize {
            continue;
        }
        f.action = Action::Drain;
        let h = cfg.escalate_window_hours;
        f.summary = format!("{}, back {returns}x in {h} h", f.summary);
        f.message.push_str(&format!(
            "; the automatic return brought this node back {returns} times within {h} h for {kind}: it stays drained until an admin runs 'gpu-health resume' (recovery.escalate_after_returns = {})",
            cfg.escalate_after_returns
        ));
        escalated += 1;
    }
    escalated
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3_600_000;

    #[test]
    fn kinds_leave_out_devices_and_processes() {
        assert_eq!(fault_kind("Xid 31 GPU1 0000:18:00.0 pid=7"), "Xid 31");
        assert_eq!(fault_kind("SXid 12028 0000:05:00.0"), "SXid 12028");
        assert_eq!(fault_kind("ECC DBE GPU3 0000:3b:00.0"), "ECC DBE");
        assert_eq!(fault_kind("GPU count 7 of 8"), "GPU count 7 of 8");
    }

    #[test]
    fn third_return_in_the_window_escalates_the_next_fault() {
        let cfg = RecoveryConfig::default();
        assert_eq!(cfg.escalate_after_returns, 3);
        let mut h = ReturnHistory::default();
        let until = |s: &str| Finding::node("xid", Action::DrainUntilClean, s.into(), "m".into());
        let mut f = vec![until("Xid 31 GPU0 0000:18:00.0 pid=1")];
        for day in 0..2 {
            h.record(
                day * 24 * H,
                vec!["Xid 31".into()],
                cfg.escalate_window_ms(),
            );
        }
        assert_eq!(escalate(&mut f, &h, &cfg, 3 * 24 * H), 0, "two returns");
        h.record(
            3 * 24 * H,
            vec!["Xid 31".into(), "Xid 43".into()],
            cfg.escalate_window_ms(),
        );
        let mut other = vec![until("Xid 13 GPU0")];
        assert_eq!(
            escalate(&mut other, &h, &cfg, 3 * 24 * H),
            0,
            "another kind"
        );
        assert_eq!(escalate(&mut f, &h, &cfg, 3 * 24 * H + H), 1);
        assert_eq!(f[0].action, Action::Drain);
        assert_eq!(
            f[0].summary,
            "Xid 31 GPU0 0000:18:00.0 pid=1, back 3x in 168 h"
        );
        assert!(f[0].message.contains("gpu-health resume"));
        // A week after the first return it counts two again.
        let mut g = vec![until("Xid 31 GPU2")];
        assert_eq!(escalate(&mut g, &h, &cfg, 7 * 24 * H + 1), 0);
        let off = RecoveryConfig {
            escalate_after_returns: 0,
            ..RecoveryConfig::default()
        };
        let mut g = vec![until("Xid 31 GPU2")];
        assert_eq!(escalate(&mut g, &h, &off, 3 * 24 * H + H), 0);
    }

    #[test]
    fn history_is_bounded() {
        let mut h = ReturnHistory::default();
        for i in 0..200 {
            h.record(i, vec!["Xid 31".into()], u64::MAX);
        }
        assert_eq!(h.returns.len(), MAX_RETURNS);
    }
}
