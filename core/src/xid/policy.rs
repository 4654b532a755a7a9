//! The policy table: which action an event calls for.
//!
//! Built-in defaults from the one Xid table ([`super::catalog::CATALOG`],
//! shown in docs/xid-policy.md), overridden per code by `[xid.actions]`
//! and `[xid.rules.<code>]`.

use std::collections::HashMap;

use super::catalog::{sxid_is_fatal, DefaultAction, CATALOG};
use super::event::{EventKind, XidEvent};
use crate::config::{CodeKey, PolicyAction, XidConfig};

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
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    action: DefaultAction,
    repeat: u32,
    window_minutes: u32,
}

/// The table in force: built-in defaults plus the configuration.
#[derive(Debug, Clone)]
pub struct Policy {
    entries: HashMap<CodeKey, Entry>,
    default_action: PolicyAction,
    sxid_fatal_action: PolicyAction,
    sxid_default_action: PolicyAction,
    forgeable_may_drain: bool,
}

impl Policy {
    /// Assumes `cfg` passed [`XidConfig::validate`]; unparsable keys are
    /// skipped.
    pub fn from_config(cfg: &XidConfig) -> Policy {
        let mut entries: HashMap<CodeKey, Entry> = CATALOG
            .iter()
            .map(|row| {
                let entry = Entry {
                    action: row.default,
                    repeat: 1,
                    window_minutes: 60,
                };
                (CodeKey::Xid(row.code), entry)
            })
            .collect();
        let base = |entries: &HashMap<CodeKey, Entry>, key: CodeKey| {
            entries.get(&key).copied().unwrap_or(Entry {
                action: match key {
                    CodeKey::Xid(_) => DefaultAction::Fixed(cfg.default_action),
                    // An SXid rule without action keeps the fatal/non-fatal
                    // split: resolved per event in `decide`.
                    CodeKey::Sxid(_) => DefaultAction::BySeverityWord,
                },
                repeat: 1,
                window_minutes: 60,
            })
        };
        for (key, action) in &cfg.actions {
            if let Some(key) = CodeKey::parse(key) {
                let mut e = base(&entries, key);
                e.action = DefaultAction::Fixed(*action);
                entries.insert(key, e);
            }
        }
        for (key, rule) in &cfg.rules {
            let Some(key) = CodeKey::parse(key) else {
                continue;
            };
            let mut e = base(&entries, key);
            if let Some(action) = rule.action {
                e.action = DefaultAction::Fixed(action);
            }
            e.repeat = rule.repeat.max(1);
            e.window_minutes = rule.window_minutes.max(1);
            entries.insert(key, e);
        }
        Policy {
            entries,
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
        let (action, repeat, window_minutes) = match (self.entries.get(&key), ev.kind) {
            (Some(e), _) => (e.action, e.repeat, e.window_minutes),
            (None, EventKind::Sxid) => (DefaultAction::BySeverityWord, 1, 60),
            (None, EventKind::Xid) => (DefaultAction::Fixed(self.default_action), 1, 60),
        };
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
        }
    }
}

/// Xid 154: `GPU recovery action changed from 0x0 (None) to 0x2 (Node
/// Reboot Required)`. The number follows NVML's nvmlDeviceGpuRecoveryAction_t:
/// 0 none; 1 GPU reset; 2 node reboot; 3 drain P2P; 4 drain P2P and reset;
/// 5 recover IMEX domain; 6 bus reset; 7 system reboot. Every action other
/// than none needs someone to reset or reboot: drain. Text we cannot read
/// is a warning, not a silent pass.
pub fn recovery_action(message: &str) -> PolicyAction {
    let Some((_, target)) = message.rsplit_once(" to ") else {
        return PolicyAction::Warn;
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
    match number {
        Some(0) => PolicyAction::Info,
        Some(1..=7) => PolicyAction::Drain,
        _ if words == "none" => PolicyAction::Info,
        _ if ["reset", "reboot", "drain", "flr", "recover"]
            .iter()
            .any(|w| words.contains(w)) =>
        {
            PolicyAction::Drain
        }
        _ => PolicyAction::Warn,
    }
}
