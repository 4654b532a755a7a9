//! The policy table: which action an event calls for.
//!
//! Built-in defaults (see docs/xid-policy.md), overridden per code by
//! `[xid.actions]` and `[xid.rules.<code>]`.

use std::collections::HashMap;

use super::catalog::sxid_is_fatal;
use super::event::{EventKind, XidEvent};
use crate::config::{CodeKey, PolicyAction, XidConfig};

/// How the built-in table decides for one code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultAction {
    Fixed(PolicyAction),
    /// Xid 154: the action follows the recovery action the driver names.
    FollowRecoveryAction,
}

/// The built-in table; codes it does not list take `default_action`.
pub const DEFAULT_TABLE: &[(u32, DefaultAction)] = {
    use DefaultAction::{Fixed, FollowRecoveryAction as Follow};
    use PolicyAction::{Drain, DrainUntilClean, Warn};
    &[
        (13, Fixed(Warn)),
        (31, Fixed(DrainUntilClean)),
        (43, Fixed(DrainUntilClean)),
        (45, Fixed(Warn)),
        (48, Fixed(Drain)),
        (61, Fixed(Warn)),
        (62, Fixed(Drain)),
        (63, Fixed(Warn)),
        (64, Fixed(Drain)),
        (68, Fixed(Warn)),
        (74, Fixed(Drain)),
        (79, Fixed(Drain)),
        (92, Fixed(Warn)),
        (94, Fixed(Warn)),
        (95, Fixed(Drain)),
        (119, Fixed(Drain)),
        (120, Fixed(Drain)),
        (140, Fixed(Drain)),
        (154, Follow),
    ]
};

/// What the policy says about one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub action: PolicyAction,
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
}

impl Policy {
    /// Assumes `cfg` passed [`XidConfig::validate`]; unparsable keys are
    /// skipped.
    pub fn from_config(cfg: &XidConfig) -> Policy {
        let mut entries: HashMap<CodeKey, Entry> = DEFAULT_TABLE
            .iter()
            .map(|&(code, action)| {
                let entry = Entry {
                    action,
                    repeat: 1,
                    window_minutes: 60,
                };
                (CodeKey::Xid(code), entry)
            })
            .collect();
        let base = |entries: &HashMap<CodeKey, Entry>, key: CodeKey| {
            entries.get(&key).copied().unwrap_or(Entry {
                action: match key {
                    CodeKey::Xid(_) => DefaultAction::Fixed(cfg.default_action),
                    // An SXid rule without action keeps the fatal/non-fatal
                    // split: resolved per event in `decide`.
                    CodeKey::Sxid(_) => DefaultAction::FollowRecoveryAction,
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
        }
    }

    /// The decision for one event.
    pub fn decide(&self, ev: &XidEvent) -> Decision {
        let key = match ev.kind {
            EventKind::Xid => CodeKey::Xid(ev.code),
            EventKind::Sxid => CodeKey::Sxid(ev.code),
        };
        let (action, repeat, window_minutes) = match self.entries.get(&key) {
            Some(e) => (e.action, e.repeat, e.window_minutes),
            None => (DefaultAction::FollowRecoveryAction, 1, 60),
        };
        let action = match (action, ev.kind) {
            (DefaultAction::Fixed(a), _) => a,
            // For SXids "follow" means: by the severity word of the message.
            (DefaultAction::FollowRecoveryAction, EventKind::Sxid) => {
                if sxid_is_fatal(&ev.message) {
                    self.sxid_fatal_action
                } else {
                    self.sxid_default_action
                }
            }
            (DefaultAction::FollowRecoveryAction, EventKind::Xid) if ev.code == 154 => {
                recovery_action(&ev.message)
            }
            (DefaultAction::FollowRecoveryAction, EventKind::Xid) => self.default_action,
        };
        Decision {
            action,
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
