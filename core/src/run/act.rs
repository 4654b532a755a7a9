//! Decide and act: the one place where a run's findings become a drain,
//! or, when the drain cannot be made, pending findings kept for the next
//! run. [`decide`] is pure; [`act`] drains through the brake and then
//! updates `StateFile::PendingDrain`.

use crate::finding::{drain_reason, Action, Finding};
use crate::ops::drain::{DrainOutcome, Drainer};
use crate::ops::pending::{self, Acted, PendingCause, PendingDrain, RunView};
use crate::slurm::Scontrol;
use crate::state::StateFile;

use super::RunContext;

/// What to do about a run's findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainDecision {
    /// Drain the node with this reason.
    pub drain_reason: Option<String>,
    /// Why a draining finding must not drain in this run.
    pub held_back: Option<String>,
}

/// Pure: drain when a finding asks for it and the configuration could be
/// trusted (a configuration mistake must never drain a node).
pub fn decide(findings: &[Finding], config_ok: bool) -> DrainDecision {
    match drain_reason(findings) {
        Some(r) if !config_ok => DrainDecision {
            drain_reason: None,
            held_back: Some(format!("configuration error; would have drained: {r}")),
        },
        r => DrainDecision {
            drain_reason: r,
            held_back: None,
        },
    }
}

/// What a run's action came to.
#[derive(Debug)]
pub struct ActOutcome {
    pub decision: DrainDecision,
    /// `None` when no drain was tried.
    pub drain: Option<DrainOutcome>,
    /// Every draining finding was acted on or is kept as pending (when
    /// false the run must not mark its inputs as handled).
    pub kept: bool,
}

impl ActOutcome {
    /// Drained now (or already by gpu-health).
    pub fn drained(&self) -> bool {
        matches!(self.drain, Some(DrainOutcome::Drained))
    }

    /// Why a draining finding did not drain, if one did not.
    pub fn not_drained(&self) -> Option<&str> {
        match &self.drain {
            Some(
                DrainOutcome::HeldBack(w) | DrainOutcome::Foreign(w) | DrainOutcome::Failed(w),
            ) => Some(w),
            Some(DrainOutcome::Drained) => None,
            None => self.decision.held_back.as_deref(),
        }
    }
}

/// Decide, drain through the brake when the decision says so, and keep
/// what could not be acted on as pending (with why). `pending` is what the
/// run loaded (`None`: nothing); `view` what it knows for the pending
/// rules.
pub fn act(
    ctx: &RunContext,
    slurm: &Scontrol<'_>,
    findings: &[Finding],
    pending: Option<&PendingDrain>,
    view: &RunView,
) -> ActOutcome {
    let decision = decide(findings, ctx.config_ok());
    if let Some(why) = &decision.held_back {
        log::error!("{why}");
    }
    let draining: Vec<Finding> = findings
        .iter()
        .filter(|f| f.action.drains())
        .cloned()
        .collect();
    let drain = decision.drain_reason.as_deref().map(|reason| {
        let look_first = pending.is_some_and(|p| {
            p.findings
                .iter()
                .any(|f| f.cause == PendingCause::DrainedBySomeoneElse)
        });
        let drainer = Drainer {
            brake: &ctx.config().brake,
            slurm,
            state: &ctx.state,
            look_first,
        };
        let summaries: Vec<String> = draining.iter().map(|f| f.summary.clone()).collect();
        if reason.ends_with(" more (drain)") || reason.ends_with(" more (drain-until-clean)") {
            log::error!("all draining findings: {}", summaries.join("; "));
        }
        drainer.drain_guarded(&ctx.node, reason, &summaries, ctx.now_ms)
    });
    let not_acted = |cause, why: &String| Acted::NotActed {
        findings: draining.clone(),
        cause,
        why: why.clone(),
    };
    let acted = match (&drain, &decision.held_back) {
        (Some(DrainOutcome::Drained), _) => Acted::Drained(draining.clone()),
        (Some(DrainOutcome::HeldBack(w)), _) => not_acted(PendingCause::Brake, w),
        (Some(DrainOutcome::Foreign(w)), _) => not_acted(PendingCause::DrainedBySomeoneElse, w),
        (Some(DrainOutcome::Failed(w)), _) => not_acted(PendingCause::SlurmFailed, w),
        (None, Some(w)) => not_acted(PendingCause::ConfigError, w),
        (None, None) => Acted::Nothing,
    };
    let kept = keep_pending(ctx, pending, &acted, view);
    ActOutcome {
        decision,
        drain,
        kept,
    }
}

/// Update the pending findings after acting. Skipped (no file work) on a
/// healthy run with nothing pending. False when findings that were not
/// acted on could not be kept.
fn keep_pending(
    ctx: &RunContext,
    loaded: Option<&PendingDrain>,
    acted: &Acted,
    view: &RunView,
) -> bool {
    if loaded.is_none() && *acted == Acted::Nothing {
        return true;
    }
    let updated = ctx.state.update(StateFile::PendingDrain, |current| {
        (pending::apply(current, acted, view), ())
    });
    match updated {
        Ok(()) => true,
        Err(e) => {
            let lost = matches!(acted, Acted::NotActed { .. });
            log::error!(
                "cannot update the pending drain findings: {e}{}",
                if lost {
                    "; the kernel-log records stay unread so the next run sees them again"
                } else {
                    ""
                }
            );
            !lost
        }
    }
}

/// A finding that tells a job why its node was not drained although a
/// check asked for it (strict jobs are refused on it).
pub fn not_drained_note(outcome: &ActOutcome) -> Option<Finding> {
    let why = outcome.not_drained()?;
    let summary = match &outcome.drain {
        Some(DrainOutcome::HeldBack(_)) => "drain held back by the brake",
        Some(DrainOutcome::Foreign(_)) => "node drained by someone else",
        Some(DrainOutcome::Failed(_)) => "drain failed",
        _ => "drain not allowed: configuration error",
    };
    Some(Finding::node(
        "brake",
        Action::Warn,
        summary.to_string(),
        format!("this node has a fault that should have drained it, but it was not drained: {why}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_error_never_drains() {
        let f = vec![Finding::node(
            "nvml",
            Action::Drain,
            "NVML init failed".into(),
            "m".into(),
        )];
        let d = decide(&f, true);
        assert_eq!(
            d.drain_reason.as_deref(),
            Some("gpu-health: NVML init failed (drain)")
        );
        let d = decide(&f, false);
        assert_eq!(d.drain_reason, None);
        assert!(d.held_back.unwrap().contains("NVML init failed"));
        let w = vec![Finding::node("x", Action::Warn, "w".into(), "m".into())];
        assert_eq!(
            decide(&w, true),
            DrainDecision {
                drain_reason: None,
                held_back: None
            }
        );
    }
}
