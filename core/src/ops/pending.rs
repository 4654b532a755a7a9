//! Draining findings that no run could act on yet (`StateFile::PendingDrain`).
//!
//! A run that finds a fault which should drain the node but cannot drain
//! (a configuration error is in force, the brake holds, scontrol fails or
//! times out, an admin's drain is in the way) keeps the finding here with
//! why, before it marks anything as handled. Every later run that may
//! drain adds the pending findings to its own ([`PendingDrain::to_merge`]),
//! so the first run that can act does, and jobs keep being warned
//! meanwhile. The file changes only through [`apply`], a pure function,
//! under the state directory's lock.

use serde::{Deserialize, Serialize};

use crate::finding::{Action, Finding};

/// Why a draining finding was not acted on.
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

/// One pending finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingFinding {
    pub finding: Finding,
    pub cause: PendingCause,
    /// Unix ms of the first run that could not act on it.
    pub since_ms: u64,
}

/// The pending findings of this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDrain {
    /// Unix ms of the last run that could not act (or found them again).
    pub last_ms: u64,
    /// Why the last run could not act.
    pub why: String,
    pub findings: Vec<PendingFinding>,
}

/// Same check, GPU and summary: the same fault.
pub fn same_finding(a: &Finding, b: &Finding) -> bool {
    a.check == b.check && a.gpu == b.gpu && a.summary == b.summary
}

/// Whether a pending finding still stands in a run.
///
/// - `drain-until-clean` findings expire like such a drain would: once
///   `quiet_ms` passed since they were last held without the run finding
///   any draining fault (`fresh_fault`); `drain` findings stay until
///   `gpu-health resume`;
/// - kernel-log findings judged while the configuration was broken are
///   dropped by a run with a good configuration: that run reads the same
///   records again (the cursor was not moved) and judges them by the
///   policy the admin meant.
fn stands(p: &PendingFinding, last_ms: u64, ctx: &RunView) -> bool {
    let quiet = !ctx.fresh_fault && ctx.now_ms.saturating_sub(last_ms) >= ctx.quiet_ms;
    let expired = quiet && p.finding.action == Action::DrainUntilClean;
    let rejudged = ctx.config_ok
        && p.cause == PendingCause::ConfigError
        && matches!(p.finding.check.as_str(), "xid" | "sxid");
    !expired && !rejudged
}

/// What a run knows when it looks at the pending findings.
#[derive(Debug, Clone, Copy)]
pub struct RunView {
    pub now_ms: u64,
    /// `[recovery] quiet_time_s`, in ms.
    pub quiet_ms: u64,
    /// The run found a draining fault itself.
    pub fresh_fault: bool,
    pub config_ok: bool,
}

impl PendingDrain {
    /// The pending findings the run judges with its own (those it did not
    /// find again itself), marked in their message.
    pub fn to_merge(&self, own: &[Finding], ctx: &RunView) -> Vec<Finding> {
        self.findings
            .iter()
            .filter(|p| stands(p, self.last_ms, ctx))
            .filter(|p| !own.iter().any(|f| same_finding(f, &p.finding)))
            .map(|p| {
                let mut f = p.finding.clone();
                f.message = format!(
                    "{} (pending since {}: {})",
                    f.message,
                    crate::time::format_utc_ms(p.since_ms),
                    self.why
                );
                f
            })
            .collect()
    }
}

/// What a run did about its draining findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acted {
    /// No draining finding, nothing done.
    Nothing,
    /// The node was drained for these findings (or already was, by us).
    Drained(Vec<Finding>),
    /// These draining findings could not be acted on.
    NotActed {
        findings: Vec<Finding>,
        cause: PendingCause,
        why: String,
    },
}

/// The pending findings after a run: expired and re-judged ones gone,
/// drained ones gone, new ones not acted on added. `None`: nothing is
/// pending (the file is removed).
pub fn apply(current: Option<PendingDrain>, acted: &Acted, ctx: &RunView) -> Option<PendingDrain> {
    let mut p = current.unwrap_or_default();
    let last_ms = p.last_ms;
    p.findings.retain(|f| stands(f, last_ms, ctx));
    match acted {
        Acted::Nothing => {}
        Acted::Drained(done) => p
            .findings
            .retain(|f| !done.iter().any(|d| same_finding(d, &f.finding))),
        Acted::NotActed {
            findings,
            cause,
            why,
        } => {
            for f in findings.iter().filter(|f| f.action.drains()) {
                match p.findings.iter_mut().find(|h| same_finding(&h.finding, f)) {
                    Some(h) => {
                        h.cause = *cause;
                        h.finding.action = h.finding.action.max(f.action);
                    }
                    None => p.findings.push(PendingFinding {
                        finding: strip_pending_note(f),
                        cause: *cause,
                        since_ms: ctx.now_ms,
                    }),
                }
            }
            p.last_ms = ctx.now_ms;
            p.why = why.clone();
        }
    }
    (!p.findings.is_empty()).then_some(p)
}

/// A merged finding carries its pending note; keep the original text.
fn strip_pending_note(f: &Finding) -> Finding {
    let mut f = f.clone();
    if let Some(i) = f.message.find(" (pending since ") {
        f.message.truncate(i);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fatal(check: &str, kind: Action, s: &str) -> Finding {
        Finding::node(check, kind, s.into(), format!("{s} happened"))
    }

    fn view(now_ms: u64) -> RunView {
        RunView {
            now_ms,
            quiet_ms: 10_000,
            fresh_fault: false,
            config_ok: true,
        }
    }

    fn not_acted(f: Vec<Finding>, cause: PendingCause) -> Acted {
        Acted::NotActed {
            findings: f,
            cause,
            why: "brake".into(),
        }
    }

    #[test]
    fn kept_merged_and_cleared_by_the_drain() {
        let held = apply(
            None,
            &not_acted(
                vec![
                    fatal("xid", Action::DrainUntilClean, "Xid 31"),
                    fatal("temp", Action::Warn, "warm"),
                ],
                PendingCause::Brake,
            ),
            &view(1_000),
        )
        .unwrap();
        assert_eq!(held.findings.len(), 1, "only draining findings are kept");
        let held = apply(
            Some(held),
            &not_acted(
                vec![fatal("ecc", Action::Drain, "ECC DBE")],
                PendingCause::SlurmFailed,
            ),
            &view(2_000),
        )
        .unwrap();
        assert_eq!(held.findings.len(), 2);
        assert_eq!(held.findings[0].since_ms, 1_000);

        let merged = held.to_merge(&[], &view(5_000));
        assert_eq!(merged.len(), 2);
        assert!(
            merged[0].message.contains("pending since"),
            "{}",
            merged[0].message
        );
        // Found again by the run itself: not merged twice.
        let own = [fatal("ecc", Action::Drain, "ECC DBE")];
        assert_eq!(held.to_merge(&own, &view(5_000)).len(), 1);

        // The drain acted on the merged findings: nothing stays.
        assert_eq!(
            apply(Some(held), &Acted::Drained(merged), &view(6_000)),
            None
        );
    }

    #[test]
    fn until_clean_findings_expire_after_a_quiet_time() {
        let held = apply(
            None,
            &not_acted(
                vec![
                    fatal("xid", Action::DrainUntilClean, "Xid 31"),
                    fatal("ecc", Action::Drain, "ECC DBE"),
                ],
                PendingCause::Brake,
            ),
            &view(0),
        )
        .unwrap();
        assert_eq!(held.to_merge(&[], &view(50_000)).len(), 1);
        let busy = RunView {
            fresh_fault: true,
            ..view(50_000)
        };
        assert_eq!(held.to_merge(&[], &busy).len(), 2);
        let left = apply(Some(held), &Acted::Nothing, &view(50_000)).unwrap();
        assert_eq!(left.findings.len(), 1);
        assert_eq!(left.findings[0].finding.action, Action::Drain);
    }

    #[test]
    fn kernel_log_findings_of_a_broken_configuration_are_judged_again() {
        let held = apply(
            None,
            &not_acted(
                vec![
                    fatal("xid", Action::Drain, "Xid 79 GPU3"),
                    fatal("dcgm", Action::Drain, "DCGM memory test failed"),
                ],
                PendingCause::ConfigError,
            ),
            &view(0),
        )
        .unwrap();
        let broken = RunView {
            config_ok: false,
            ..view(1)
        };
        assert_eq!(held.to_merge(&[], &broken).len(), 2);
        let fixed = held.to_merge(&[], &view(1));
        assert_eq!(fixed.len(), 1);
        assert_eq!(fixed[0].check, "dcgm");
    }

    #[test]
    fn a_merged_finding_is_kept_with_its_own_text() {
        let first = apply(
            None,
            &not_acted(
                vec![fatal("ecc", Action::Drain, "ECC DBE")],
                PendingCause::Brake,
            ),
            &view(0),
        )
        .unwrap();
        let merged = first.to_merge(&[], &view(1));
        let again = apply(
            Some(first),
            &not_acted(merged, PendingCause::SlurmFailed),
            &view(2),
        )
        .unwrap();
        assert_eq!(again.findings.len(), 1);
        assert_eq!(again.findings[0].finding.message, "ECC DBE happened");
        assert_eq!(again.findings[0].cause, PendingCause::SlurmFailed);
        assert_eq!(again.findings[0].since_ms, 0);
    }
}
