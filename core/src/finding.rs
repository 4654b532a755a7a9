//! Findings: what a check concluded about one GPU or the whole node.

use serde::{Deserialize, Serialize};

/// What gpu-health does about a finding. Ordered from mildest to gravest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Recorded and shown; never refuses a job.
    Info,
    /// Job-level warning: the user is told, strict jobs are refused.
    Warn,
    /// Node drained; a later clean check may return it to service.
    DrainUntilClean,
    /// Node drained until an admin resumes it.
    Drain,
}

impl Action {
    pub fn drains(self) -> bool {
        matches!(self, Action::Drain | Action::DrainUntilClean)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Info => "info",
            Action::Warn => "warn",
            Action::DrainUntilClean => "drain-until-clean",
            Action::Drain => "drain",
        }
    }

    /// Severity word used in tables and docs.
    pub fn severity(self) -> &'static str {
        match self {
            Action::Info => "info",
            Action::Warn => "warn",
            Action::DrainUntilClean | Action::Drain => "fatal",
        }
    }
}

/// One conclusion of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable check name, e.g. `ecc-uncorrected`, `xid`, `gpu-count`.
    pub check: String,
    pub action: Action,
    /// NVML index of the GPU concerned; `None` for node-wide findings.
    pub gpu: Option<u32>,
    /// Normalised PCI address of the GPU concerned, when known.
    pub pci: Option<String>,
    /// Short text for the drain reason, e.g. `ECC DBE GPU3 0000:3b:00.0`.
    pub summary: String,
    /// Full explanation for logs, verdicts and the user's terminal.
    pub message: String,
}

impl Finding {
    pub fn node(check: &str, action: Action, summary: String, message: String) -> Self {
        Finding {
            check: check.to_string(),
            action,
            gpu: None,
            pci: None,
            summary,
            message,
        }
    }

    pub fn gpu(
        check: &str,
        action: Action,
        gpu: u32,
        pci: Option<&str>,
        summary: String,
        message: String,
    ) -> Self {
        Finding {
            check: check.to_string(),
            action,
            gpu: Some(gpu),
            pci: pci.map(str::to_string),
            summary,
            message,
        }
    }
}

/// Every node state change gpu-health makes carries this prefix, so that
/// tools and people can tell its drains from everyone else's.
pub const REASON_PREFIX: &str = "gpu-health:";

/// Slurm stores reasons of any length, but `sinfo` and humans do not read
/// novels; keep the reason to what fits a wide terminal line.
const MAX_REASON_LEN: usize = 200;

/// The drain reason for a set of findings, or `None` when none drains.
///
/// Shape: `gpu-health: <summary>[; <summary>...] (drain|drain-until-clean)`.
/// The kind is the gravest among the draining findings, so an admin sees
/// whether to wait for an automatic return or to act.
pub fn drain_reason(findings: &[Finding]) -> Option<String> {
    let draining: Vec<&Finding> = findings.iter().filter(|f| f.action.drains()).collect();
    let kind = draining.iter().map(|f| f.action).max()?;
    let mut body = String::new();
    for f in &draining {
        if !body.is_empty() {
            body.push_str("; ");
        }
        body.push_str(&sanitize_reason(&f.summary));
    }
    let suffix = format!(" ({})", kind.as_str());
    let room = MAX_REASON_LEN - REASON_PREFIX.len() - 1 - suffix.len();
    if body.len() > room {
        let mut cut = room - 3;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        body.truncate(cut);
        body.push_str("...");
    }
    Some(format!("{REASON_PREFIX} {body}{suffix}"))
}

/// Reasons travel through scontrol's argument parser: keep them to
/// printable characters without quotes, so that no value can change the
/// meaning of the command line.
fn sanitize_reason(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || c == '"' || c == '\'' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Whether a Slurm node reason was set by gpu-health.
pub fn is_own_reason(reason: &str) -> bool {
    reason.trim_start().starts_with(REASON_PREFIX)
}

/// Whether a gpu-health reason may be cleared by a clean check.
pub fn reason_clears_itself(reason: &str) -> bool {
    is_own_reason(reason) && reason.trim_end().ends_with("(drain-until-clean)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(action: Action, summary: &str) -> Finding {
        Finding::node("t", action, summary.into(), summary.into())
    }

    #[test]
    fn no_reason_without_draining_findings() {
        assert_eq!(drain_reason(&[f(Action::Warn, "pcie")]), None);
        assert_eq!(drain_reason(&[]), None);
    }

    #[test]
    fn reason_names_all_and_gravest_kind() {
        let r = drain_reason(&[
            f(Action::DrainUntilClean, "Xid 31 GPU1 0000:18:00.0"),
            f(Action::Warn, "pcie"),
            f(Action::Drain, "ECC DBE GPU3 0000:3b:00.0"),
        ])
        .unwrap();
        assert_eq!(
            r,
            "gpu-health: Xid 31 GPU1 0000:18:00.0; ECC DBE GPU3 0000:3b:00.0 (drain)"
        );
        assert!(is_own_reason(&r));
        assert!(!reason_clears_itself(&r));
    }

    #[test]
    fn reason_is_bounded_and_quote_free() {
        let long = "x\"'\n".repeat(200);
        let r = drain_reason(&[f(Action::DrainUntilClean, &long)]).unwrap();
        assert!(r.len() <= MAX_REASON_LEN);
        assert!(!r.contains('"') && !r.contains('\'') && !r.contains('\n'));
        assert!(reason_clears_itself(&r));
    }

    #[test]
    fn foreign_reasons_are_not_ours() {
        assert!(!is_own_reason("NHC: check_hw_eth"));
        assert!(!is_own_reason("Prolog error"));
        assert!(!reason_clears_itself(
            "admin: gpu-health: (drain-until-clean)"
        ));
    }
}
