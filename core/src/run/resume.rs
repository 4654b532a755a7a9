//! `gpu-health resume NODE`: return a node gpu-health drained, after the
//! checks pass once more on the node itself. Decide (the checks, read
//! only: the kernel-log cursor is not moved), act (scontrol resume), and
//! only then forget the pending findings.

use crate::finding::is_own_reason;
use crate::ids::NodeName;
use crate::ops::drain::resume_own;
use crate::ops::{dcgm, recovery};
use crate::probe::ProbeOptions;
use crate::state::StateFile;
use crate::text::printable;

use super::node_check;
use super::RunContext;

/// What `resume` did, for the admin's terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// Resumed; the reason it had.
    Resumed(String),
    /// Not drained; the node's state, and whether pending findings were
    /// forgotten.
    NotDrained { state: String, cleared: bool },
    /// The checks still fail: why, one line each (exit 1).
    Refused(Vec<String>),
    /// Cannot be done (wrong node, configuration error, Slurm, someone
    /// else's drain): the message (exit 2).
    Error(String),
}

impl ResumeOutcome {
    pub fn exit_code(&self) -> i32 {
        match self {
            ResumeOutcome::Resumed(_) | ResumeOutcome::NotDrained { .. } => 0,
            ResumeOutcome::Refused(_) => 1,
            ResumeOutcome::Error(_) => 2,
        }
    }
}

/// Resume `target`, which must be this node unless `force` (the checks
/// must run on the node itself).
pub fn run(ctx: &RunContext, target: &NodeName, force: bool) -> ResumeOutcome {
    let me = &ctx.node;
    if target != me && !force {
        return ResumeOutcome::Error(format!(
            "this is {me}, not {target}: the checks must run on the node itself. Run it on \
             {target} (or add --force when {target} is this machine under another name)."
        ));
    }
    if let Some(e) = &ctx.loaded.error {
        return ResumeOutcome::Error(format!(
            "configuration error, the checks cannot be trusted: {e}"
        ));
    }
    let slurm = ctx.scontrol();
    let info = match slurm.show_node(target) {
        Ok(Some(info)) => info,
        Ok(None) => return ResumeOutcome::Error(format!("Slurm does not know {target}")),
        Err(e) => return ResumeOutcome::Error(format!("cannot ask Slurm about {target}: {e}")),
    };
    let reason = info.reason.clone().filter(|_| info.is_drained());
    let pending = ctx
        .state
        .load_bytes(StateFile::PendingDrain)
        .ok()
        .flatten()
        .is_some();
    match &reason {
        None if !pending => {
            return ResumeOutcome::NotDrained {
                state: info.state,
                cleared: false,
            }
        }
        Some(r) if !is_own_reason(r) => {
            return ResumeOutcome::Error(format!(
                "{target} is drained by someone else ({:?}); gpu-health only resumes its own \
                 drains. If you mean it: scontrol update NodeName={target} State=RESUME",
                printable(r)
            ))
        }
        _ => {}
    }
    let problems = checks_now(ctx);
    if !problems.is_empty() {
        return ResumeOutcome::Refused(problems);
    }
    if let Some(r) = reason {
        if let Err(e) = resume_own(&slurm, &ctx.state, target) {
            return ResumeOutcome::Error(format!("scontrol failed: {e}"));
        }
        forget_pending(ctx);
        return ResumeOutcome::Resumed(r);
    }
    forget_pending(ctx);
    ResumeOutcome::NotDrained {
        state: info.state,
        cleared: true,
    }
}

/// The admin returned the node: what was pending is dealt with, and the
/// count of automatic returns starts over (someone looked at the node).
fn forget_pending(ctx: &RunContext) {
    if let Err(e) = ctx.state.remove(StateFile::PendingDrain) {
        log::error!("cannot forget the pending drain findings: {e}");
    }
    if let Err(e) = ctx.state.remove(StateFile::ReturnHistory) {
        log::error!("cannot forget the automatic-return history: {e}");
    }
}

/// Everything that stands against returning this node now: the checks
/// and, when installed, DCGM's diagnostic. Pending findings do not count:
/// the admin's resume is what answers them.
fn checks_now(ctx: &RunContext) -> Vec<String> {
    let opts = ProbeOptions {
        topology: true,
        ..Default::default()
    };
    let mut check = node_check::check_node(ctx, opts);
    if ctx.config().dcgm.before_return {
        let outcome = dcgm::run_diag(&ctx.config().dcgm, &[]);
        log::warn!("{}", outcome.describe());
        check.findings.extend(outcome.findings());
    }
    recovery::clean_now(&check.findings, &check.snapshot, true)
}
