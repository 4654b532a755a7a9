//! The policy table: which action an event calls for.
//!
//! Built-in defaults from the one Xid table ([`super::catalog::CATALOG`],
//! shown in docs/xid-policy.md), overridden per code by `[xid.actions]`
//! and `[xid.rules.<code>]`.

use std::collections::BTreeMap;

use super::catalog::{sxid_is_fatal, DefaultAction, CATALOG};
use super::event::{EventKind, XidEvent};
use super::rules::{default_escalation, DEFAULT_BURST_SECONDS};
use crate::config::{CodeKey, PolicyAction, XidConfig};
use crate::finding::Remedy;

/// What the policy says about one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub action: PolicyAction,
    /// The table's action would drain, but the event came from a line
    /// users can forge (`xid.syslog_may_drain` is off): `action` is warn.
    pub forgeable_capped: bool,
    /// Events needed within the window before `action` applies (1 = now).
    pub repeat: u32,
    pub window_minutes: u32,
    /// Repetition on one GPU that makes the action graver.
    pub escalate: Option<Escalate>,
}

/// `after` events of the code on one GPU within `window_minutes` make the
/// action `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escalate {
    pub after: u32,
    pub window_minutes: u32,
    /// Events within this of one counted are the same burst.
    pub burst_seconds: u32,
    pub to: PolicyAction,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    action: DefaultAction,
    repeat: u32,
    window_minutes: u32,
    escalate: Option<Escalate>,
}

/// The table in force: built-in defaults plus the configuration. Only
/// what the configuration changes is held; the built-in rows are read
/// from the one table when an event needs them (a run that sees no Xid
/// builds nothing of it).
#[derive(Debug, Clone)]
pub struct Policy {
    overrides: BTreeMap<CodeKey, Entry>,
    default_action: PolicyAction,
    sxid_fatal_action: PolicyAction,
    sxid_default_action: PolicyAction,
    forgeable_may_drain: bool,
}

impl Policy {
    /// Assumes `cfg` passed [`XidConfig::validate`]; unparsable keys are
    /// skipped.
    pub fn from_config(cfg: &XidConfig) -> Policy {
        let mut overrides: BTreeMap<CodeKey, Entry> = BTreeMap::new();
        let base = |overrides: &BTreeMap<CodeKey, Entry>, key: CodeKey| {
            entry_in(overrides, key).unwrap_or_else(|| unlisted(key, cfg.default_action))
        };
        for (key, action) in &cfg.actions {
            if let Some(key) = CodeKey::parse(key) {
                let mut e = base(&overrides, key);
                e.action = DefaultAction::Fixed(*action);
                overrides.insert(key, e);
            }
        }
        for (key, rule) in &cfg.rules {
            let Some(key) = CodeKey::parse(key) else {
                continue;
            };
            let mut e = base(&overrides, key);
            if let Some(action) = rule.action {
                e.action = DefaultAction::Fixed(action);
            }
            e.repeat = rule.repeat.max(1);
            e.window_minutes = rule.window_minutes.max(1);
            if rule.escalate_after.is_some()
                || rule.escalate_window_hours.is_some()
                || rule.escalate_burst_seconds.is_some()
                || rule.escalate_to.is_some()
            {
                let base = e.escalate;
                let after = rule.escalate_after.or(base.map(|b| b.after)).unwrap_or(0);
                let window_minutes = rule
                    .escalate_window_hours
                    .map(|h| h * 60)
                    .or(base.map(|b| b.window_minutes))
                    .unwrap_or(24 * 60);
                let burst_seconds = rule
                    .escalate_burst_seconds
                    .or(base.map(|b| b.burst_seconds))
                    .unwrap_or(DEFAULT_BURST_SECONDS);
                let to = rule
                    .escalate_to
                    .or(base.map(|b| b.to))
                    .unwrap_or(PolicyAction::Drain);
                e.escalate = (after > 0).then_some(Escalate {
                    after,
                    window_minutes,
                    burst_seconds,
                    to,
                });
            }
            overrides.insert(key, e);
        }
        Policy {
            overrides,
            default_action: cfg.default_action,
            sxid_fatal_action: cfg.sxid_fatal_action,
            sxid_default_action: cfg.sxid_default_action,
            forgeable_may_drain: cfg.syslog_may_drain,
        }
    }

    /// The decision for one event.
    pub fn decide(&self, ev: &XidEvent) -> Decision {
        let key = match ev.kind {
            EventKind::Xid => CodeKey::Xid(ev.code),
            EventKind::Sxid => CodeKey::Sxid(ev.code),
        };
        let Entry {
            action,
            repeat,
            window_minutes,
            escalate,
        } = entry_in(&self.overrides, key).unwrap_or_else(|| unlisted(key, self.default_action));
        let action = match (action, ev.kind) {
            (DefaultAction::Fixed(a), _) => a,
            // SXids follow the configured pair; NVLink5 Xids drain when
            // the record says fatal.
            (DefaultAction::BySeverityWord, EventKind::Sxid) => {
                if sxid_is_fatal(&ev.message) {
                    self.sxid_fatal_action
                } else {
                    self.sxid_default_action
                }
            }
            (DefaultAction::BySeverityWord, EventKind::Xid) => {
                if sxid_is_fatal(&ev.message) {
                    PolicyAction::Drain
                } else {
                    PolicyAction::Warn
                }
            }
            (DefaultAction::FollowRecoveryAction, _) => recovery_action(&ev.message),
        };
        let forgeable_capped = ev.forgeable
            && !self.forgeable_may_drain
            && matches!(action, PolicyAction::Drain | PolicyAction::DrainUntilClean);
        Decision {
            action: if forgeable_capped {
                PolicyAction::Warn
            } else {
                action
            },
            forgeable_capped,
            repeat,
            window_minutes,
            // A line users can write never escalates either.
            escalate: escalate.filter(|_| !ev.forgeable || self.forgeable_may_drain),
        }
    }

    /// The longest window any rule counts over: the repeat history keeps
    /// that much.
    pub fn longest_window_minutes(&self) -> u32 {
        let builtins = CATALOG
            .iter()
            .map(|row| CodeKey::Xid(row.code))
            .filter(|key| !self.overrides.contains_key(key))
            .filter_map(builtin);
        builtins
            .chain(self.overrides.values().copied())
            .flat_map(|e| [e.window_minutes, e.escalate.map_or(0, |x| x.window_minutes)])
            .max()
            .unwrap_or(60)
            .max(60)
    }
}

/// The configured entry for `key`, else the table's row.
fn entry_in(overrides: &BTreeMap<CodeKey, Entry>, key: CodeKey) -> Option<Entry> {
    overrides.get(&key).copied().or_else(|| builtin(key))
}

/// A code neither configured nor in the table: an Xid takes
/// `default_action`; an SXid keeps the fatal/non-fatal split, resolved per
/// event in [`Policy::decide`].
fn unlisted(key: CodeKey, default_action: PolicyAction) -> Entry {
    Entry {
        action: match key {
            CodeKey::Xid(_) => DefaultAction::Fixed(default_action),
            CodeKey::Sxid(_) => DefaultAction::BySeverityWord,
        },
        repeat: 1,
        window_minutes: 60,
        escalate: None,
    }
}

/// The built-in entry of an Xid: its row of the table (sorted, one row
/// per code, as docs/xid-policy.md lists it); SXids have none.
fn builtin(key: CodeKey) -> Option<Entry> {
    let CodeKey::Xid(code) = key else {
        return None;
    };
    let row = &CATALOG[CATALOG.binary_search_by_key(&code, |row| row.code).ok()?];
    Some(Entry {
        action: row.default,
        repeat: 1,
        window_minutes: 60,
        escalate: default_escalation(code).map(|e| Escalate {
            after: e.after,
            window_minutes: e.window_hours * 60,
            burst_seconds: e.burst_seconds,
            to: e.to,
        }),
    })
}

/// Xid 154: `GPU recovery action changed from 0x0 (None) to 0x2 (Node
/// Reboot Required)`. The number follows NVML's nvmlDeviceGpuRecoveryAction_t:
/// 0 none; 1 GPU reset; 2 node reboot; 3 drain P2P; 4 drain P2P and reset;
/// 5 recover IMEX domain; 6 bus reset; 7 system reboot. Every action other
/// than none needs someone to reset or reboot: drain. Text we cannot read
/// is a warning, not a silent pass.
pub fn recovery_action(message: &str) -> PolicyAction {
    recovery_target(message).0
}

/// What clears an Xid: a reboot where NVIDIA's catalog says reset the
/// GPU or restart the node, where an Xid 154 asks for a reset or a
/// reboot, and for a fatal SXid (the NVSwitch and its GPUs must be
/// reset); a person otherwise.
pub fn remedy(ev: &XidEvent) -> Remedy {
    use super::catalog::{entry, Resolution};
    let reboot = match ev.kind {
        EventKind::Sxid => sxid_is_fatal(&ev.message),
        EventKind::Xid => match entry(ev.code).map(|e| e.resolution) {
            Some(Resolution::ResetGpu | Resolution::RebootNode) => true,
            Some(Resolution::FollowRecoveryAction) => recovery_target(&ev.message).1,
            _ => ev.fallen_off_bus,
        },
    };
    if reboot {
        Remedy::Reboot
    } else {
        Remedy::Person
    }
}

/// Xid 154's action, and whether a reset or reboot clears it.
fn recovery_target(message: &str) -> (PolicyAction, bool) {
    let Some((_, target)) = message.rsplit_once(" to ") else {
        return (PolicyAction::Warn, false);
    };
    let target = target.trim();
    let number = target
        .strip_prefix("0x")
        .map(|t| {
            t.split(|c: char| !c.is_ascii_hexdigit())
                .next()
                .unwrap_or("")
        })
        .and_then(|h| u32::from_str_radix(h, 16).ok());
    let words = target
        .split_once('(')
        .map(|(_, w)| w.trim_end_matches(['.', ')', ' ']))
        .unwrap_or(target)
        .to_ascii_lowercase();
    // nvmlDeviceGpuRecoveryAction_t: 1 GPU reset, 2 node reboot, 3 drain
    // P2P, 4 drain and reset, 5 IMEX recovery, 6 bus reset, 7 system
    // reboot.
    let reset = ["reset", "reboot", "flr"].iter().any(|w| words.contains(w));
    match number {
        Some(0) => (PolicyAction::Info, false),
        Some(n @ 1..=7) => (PolicyAction::Drain, matches!(n, 1 | 2 | 4 | 6 | 7)),
        _ if words == "none" => (PolicyAction::Info, false),
        _ if reset => (PolicyAction::Drain, true),
        _ if ["drain", "recover"].iter().any(|w| words.contains(w)) => (PolicyAction::Drain, false),
        _ => (PolicyAction::Warn, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, code: u32, message: &str) -> XidEvent {
        XidEvent {
            pci: Some("0000:18:00.0".into()),
            ..XidEvent::new(kind, code, message)
        }
    }

    fn xid(code: u32, message: &str) -> Remedy {
        remedy(&event(EventKind::Xid, code, message))
    }

    #[test]
    fn a_reboot_clears_what_nvidia_says_a_reset_or_reboot_clears() {
        // Catalog: 79 restart the node, 119/120 reset the GPU.
        for code in [79, 119, 120] {
            assert_eq!(xid(code, ""), Remedy::Reboot, "Xid {code}");
        }
        // Restart the application, check mechanicals, workflows: a person.
        for code in [13, 31, 48, 63, 74] {
            assert_eq!(xid(code, ""), Remedy::Person, "Xid {code}");
        }
        let to = |a: &str| format!("GPU recovery action changed from 0x0 (None) to {a}");
        for a in [
            "0x1 (GPU Reset Required)",
            "0x2 (Node Reboot Required)",
            "0x4 (Drain and Reset)",
            "(Node Reboot Required)",
        ] {
            assert_eq!(xid(154, &to(a)), Remedy::Reboot, "{a}");
        }
        for a in [
            "0x0 (None)",
            "0x3 (Drain P2P)",
            "(None)",
            "0x42 (Something New)",
        ] {
            assert_eq!(xid(154, &to(a)), Remedy::Person, "{a}");
        }
        assert_eq!(xid(154, "garbled"), Remedy::Person);
        let fatal = event(
            EventKind::Sxid,
            24007,
            "Fatal, Link 44 crumbstore ECC DBE Error",
        );
        let nonfatal = event(EventKind::Sxid, 12028, "Non-fatal, Link 32 PRIV error");
        assert_eq!(remedy(&fatal), Remedy::Reboot);
        assert_eq!(remedy(&nonfatal), Remedy::Person);
    }
}
