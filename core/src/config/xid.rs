//! The `[xid]` configuration section: look-back, policy overrides, and the
//! paths of the kernel's boot id and uptime (fixtures in tests).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::keys::check;
use crate::finding::Action;

/// What the policy does with an event of one code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyAction {
    /// No finding at all.
    Ignore,
    /// Recorded and shown; never refuses a job.
    Info,
    /// Job-level warning: the user is told, strict jobs are refused.
    Warn,
    /// Node drained; a later clean check may return it to service.
    DrainUntilClean,
    /// Node drained until an admin resumes it.
    Drain,
}

impl PolicyAction {
    /// The finding action, `None` for [`PolicyAction::Ignore`].
    pub fn finding_action(self) -> Option<Action> {
        match self {
            PolicyAction::Ignore => None,
            PolicyAction::Info => Some(Action::Info),
            PolicyAction::Warn => Some(Action::Warn),
            PolicyAction::DrainUntilClean => Some(Action::DrainUntilClean),
            PolicyAction::Drain => Some(Action::Drain),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyAction::Ignore => "ignore",
            PolicyAction::Info => "info",
            PolicyAction::Warn => "warn",
            PolicyAction::DrainUntilClean => "drain-until-clean",
            PolicyAction::Drain => "drain",
        }
    }
}

/// `[xid.rules.<key>]`: an action with an optional repeat rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct XidRule {
    /// Action once the rule fires; `None` keeps the table's action.
    pub action: Option<PolicyAction>,
    /// Act only when this many events of the code hit the same device
    /// within `window_minutes` (1 = every event acts).
    pub repeat: u32,
    pub window_minutes: u32,
    /// Events of the code on one GPU within `escalate_window_hours` after
    /// which the action becomes `escalate_to` (0: never; unset: the
    /// built-in default of the code, if any).
    pub escalate_after: Option<u32>,
    pub escalate_window_hours: Option<u32>,
    /// Events closer than this to one counted are one burst.
    pub escalate_burst_seconds: Option<u32>,
    pub escalate_to: Option<PolicyAction>,
}

impl Default for XidRule {
    fn default() -> Self {
        XidRule {
            action: None,
            repeat: 1,
            window_minutes: 60,
            escalate_after: None,
            escalate_window_hours: None,
            escalate_burst_seconds: None,
            escalate_to: None,
        }
    }
}

/// `[xid]` section of the configuration.
///
/// Keys of `actions` and `rules` name an event: `"31"` is Xid 31,
/// `"sxid-12028"` is NVSwitch SXid 12028 (both are valid bare TOML keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct XidConfig {
    /// Without a cursor (first run), only records younger than this are
    /// judged, so a fresh install does not drain for an old, fixed Xid.
    pub lookback_hours: u32,
    /// Action for Xid codes that neither the built-in table nor `actions`
    /// name.
    pub default_action: PolicyAction,
    /// SXids whose message marks them `Fatal`.
    pub sxid_fatal_action: PolicyAction,
    /// Every other SXid.
    pub sxid_default_action: PolicyAction,
    /// Per-code action overrides, e.g. `13 = "ignore"`.
    pub actions: BTreeMap<String, PolicyAction>,
    /// Per-code rules with repeat thresholds, e.g.
    /// `[xid.rules.31] action = "drain-until-clean", repeat = 3, window_minutes = 60`.
    pub rules: BTreeMap<String, XidRule>,
    /// Whether Xids read from lines users can forge may drain: syslog
    /// text lines (`logger -t kernel` writes the same `host kernel:`
    /// line) and any kernel log file that users other than root may
    /// write. Off: such Xids warn (shown, strict jobs refused), never drain.
    pub syslog_may_drain: bool,
    /// With `kernel_log = "journal"`: a journal directory or file to read
    /// instead of the system journal (`journalctl --directory/--file`).
    pub journal_path: Option<PathBuf>,
    /// The journalctl program.
    pub journalctl: PathBuf,
    /// The longest one scan waits for journalctl, all pages together.
    pub journal_timeout_ms: u64,
    /// Kernel boot id (a new one means the node rebooted): everything
    /// kept for one boot is keyed by it (`RunContext::boot_id`).
    pub boot_id_path: PathBuf,
    /// Seconds since boot, to date /dev/kmsg's monotonic timestamps.
    pub uptime_path: PathBuf,
}

impl Default for XidConfig {
    fn default() -> Self {
        XidConfig {
            lookback_hours: 24,
            default_action: PolicyAction::Warn,
            sxid_fatal_action: PolicyAction::Drain,
            sxid_default_action: PolicyAction::Warn,
            actions: BTreeMap::new(),
            rules: BTreeMap::new(),
            syslog_may_drain: false,
            journal_path: None,
            journalctl: PathBuf::from("/usr/bin/journalctl"),
            journal_timeout_ms: 5_000,
            boot_id_path: PathBuf::from("/proc/sys/kernel/random/boot_id"),
            uptime_path: PathBuf::from("/proc/uptime"),
        }
    }
}

/// Which events a policy key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CodeKey {
    Xid(u32),
    Sxid(u32),
}

impl CodeKey {
    /// Parse `"31"` or `"sxid-12028"`.
    pub fn parse(key: &str) -> Option<CodeKey> {
        let key = key.trim();
        let (sxid, digits) = match key.strip_prefix("sxid-") {
            Some(rest) => (true, rest),
            None => (false, key),
        };
        if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let code = digits.parse().ok()?;
        Some(if sxid {
            CodeKey::Sxid(code)
        } else {
            CodeKey::Xid(code)
        })
    }
}

impl XidConfig {
    /// Refuse settings that cannot be meant.
    pub fn validate(&self) -> Result<(), String> {
        check("xid.lookback_hours", f64::from(self.lookback_hours))?;
        check("xid.journal_timeout_ms", self.journal_timeout_ms as f64)?;
        for key in self.actions.keys() {
            if CodeKey::parse(key).is_none() {
                return Err(format!(
                    "xid.actions: key {key:?} is neither an Xid code (\"31\") nor an SXid (\"sxid-12028\")"
                ));
            }
        }
        for (key, rule) in &self.rules {
            if CodeKey::parse(key).is_none() {
                return Err(format!(
                    "xid.rules: key {key:?} is neither an Xid code (\"31\") nor an SXid (\"sxid-12028\")"
                ));
            }
            check("xid.rules.repeat", f64::from(rule.repeat))
                .and_then(|()| check("xid.rules.window_minutes", f64::from(rule.window_minutes)))
                .and_then(|()| match rule.escalate_after {
                    Some(n) => check("xid.rules.escalate_after", f64::from(n)),
                    None => Ok(()),
                })
                .and_then(|()| match rule.escalate_window_hours {
                    Some(h) => check("xid.rules.escalate_window_hours", f64::from(h)),
                    None => Ok(()),
                })
                .and_then(|()| match rule.escalate_burst_seconds {
                    Some(s) => check("xid.rules.escalate_burst_seconds", f64::from(s)),
                    None => Ok(()),
                })
                .map_err(|e| format!("xid.rules.{key}: {e}"))?;
            if self.actions.contains_key(key) && rule.action.is_some() {
                return Err(format!(
                    "xid: code {key} has an action in both xid.actions and xid.rules"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse() {
        assert_eq!(CodeKey::parse("31"), Some(CodeKey::Xid(31)));
        assert_eq!(CodeKey::parse("sxid-12028"), Some(CodeKey::Sxid(12028)));
        assert_eq!(CodeKey::parse("x31"), None);
        assert_eq!(CodeKey::parse("sxid-"), None);
        assert_eq!(CodeKey::parse("-1"), None);
        assert_eq!(CodeKey::parse("9999999"), None);
    }

    #[test]
    fn toml_overrides_parse_and_validate() {
        let text = "lookback_hours = 48\n[actions]\n13 = \"ignore\"\nsxid-12028 = \"drain\"\n\
                    [rules.31]\naction = \"drain-until-clean\"\nrepeat = 3\nwindow_minutes = 60\n";
        let c: XidConfig = toml::from_str(text).unwrap();
        assert_eq!(c.actions["13"], PolicyAction::Ignore);
        assert_eq!(c.rules["31"].repeat, 3);
        assert_eq!(c.lookback_hours, 48);
        c.validate().unwrap();
    }

    #[test]
    fn nonsense_is_refused() {
        let bad = |t: &str| {
            let c: XidConfig = toml::from_str(t).unwrap();
            c.validate().unwrap_err()
        };
        assert!(bad("lookback_hours = 0").contains("lookback"));
        assert!(bad("[actions]\nabc = \"warn\"").contains("abc"));
        assert!(bad("[rules.31]\nrepeat = 0").contains("repeat"));
        assert!(bad("[rules.31]\nwindow_minutes = 0").contains("window"));
        assert!(toml::from_str::<XidConfig>("[actions]\n13 = \"explode\"").is_err());
        assert!(toml::from_str::<XidConfig>("[rules.31]\ncount = 3").is_err());
    }
}
