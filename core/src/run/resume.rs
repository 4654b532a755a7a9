//! `gpu-health resume NODE`: return a node gpu-health drained, after the
//! checks pass once more on the node itself. Decide (the checks, read
//! only: the kernel-log cursor is not moved), act (scontrol resume), and
//! only then close the node's faults in its ledger.
//!
//! On a node that is not drained, open faults held back earlier (by the
//! brake, a failing Slurm, a configuration error) stay: they are what the
//! next run acts on. `--forget-pending` is the admin saying they were
//! looked at.

use crate::checks::dcgm;
use crate::finding::is_own_reason;
use crate::ids::NodeName;
use crate::ops::drain::resume_own;
use crate::ops::recovery;
use crate::probe::ProbeOptions;
use crate::text::printable;

use super::act::{self, Turn};
use super::node_check;
use super::RunContext;

/// What `resume` did, for the admin's terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// Resumed; the reason it had.
    Resumed(String),
    /// Not drained: the node's state, the open faults it still has (held
    /// back, pending) and whether they were forgotten now.
    NotDrained {
        state: String,
        pending: Vec<String>,
        forgotten: bool,
    },
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
/// must run on the node itself). `forget_pending`: on a node that is not
/// drained, close the faults still pending.
pub fn run(
    ctx: &RunContext,
    target: &NodeName,
    force: bool,
    forget_pending: bool,
) -> ResumeOutcome {
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
    // Outside the node's turn: DCGM's diagnostic takes minutes.
    let problems = checks_now(ctx);
    let mut turn = match Turn::take(ctx) {
        Ok(t) => t,
        Err(busy) => {
            return ResumeOutcome::Error(format!(
                "{}; try again in a few seconds",
                act::busy_note(me, &busy)
            ))
        }
    };
    let info = match turn.slurm().show_node(target) {
        Ok(Some(info)) => info,
        Ok(None) => return ResumeOutcome::Error(format!("Slurm does not know {target}")),
        Err(e) => return ResumeOutcome::Error(format!("cannot ask Slurm about {target}: {e}")),
    };
    let outcome = decide(&mut turn, target, &info, problems, forget_pending);
    if !turn.commit() {
        log::error!("{target}: the fault ledger was not saved; the closed faults may come back");
    }
    outcome
}

/// What the resume comes to for `target` as Slurm shows it (`info`),
/// done in the node's turn.
fn decide(
    turn: &mut Turn<'_>,
    target: &NodeName,
    info: &crate::slurm::NodeInfo,
    problems: Vec<String>,
    forget_pending: bool,
) -> ResumeOutcome {
    let ctx = turn.ctx;
    // Down or rebooting with gpu-health's reason is its drain too.
    let reason = info
        .reason
        .clone()
        .filter(|_| info.is_drained() || info.held_by_us());
    match reason {
        None => {
            let out = not_drained(turn, target, info.state.clone(), forget_pending);
            if matches!(
                out,
                ResumeOutcome::NotDrained {
                    forgotten: true,
                    ..
                }
            ) {
                super::reboot_history::forget(turn, info);
            }
            out
        }
        Some(r) if !is_own_reason(&r) => ResumeOutcome::Error(format!(
            "{target} is drained by someone else (reason {:?}); gpu-health only resumes its own \
             drains. If you mean it: scontrol update NodeName={target} State=RESUME",
            printable(&r)
        )),
        Some(_) if info.reboot_pending() => ResumeOutcome::Error(format!(
            "a reboot of {target} is pending ({}): Slurm sets its state after the reboot \
             (scontrol cancel_reboot {target} first to resume it now)",
            info.state
        )),
        Some(_) if !problems.is_empty() => ResumeOutcome::Refused(problems),
        Some(r) => match resume_own(turn.slurm(), target) {
            Ok(()) => {
                // The admin answered every fault: the count of automatic
                // returns starts over too.
                let window = ctx.config().recovery.escalate_window_ms();
                turn.loaded.ledger.returned(false, ctx.now_ms, window);
                super::reboot_history::forget(turn, info);
                ResumeOutcome::Resumed(r)
            }
            Err(e) => ResumeOutcome::Error(format!("scontrol failed: {e}")),
        },
    }
}

/// The node is not drained: what the ledger holds pending, forgotten
/// when the admin asked (`--forget-pending`).
fn not_drained(
    turn: &mut Turn<'_>,
    target: &NodeName,
    state: String,
    forget_pending: bool,
) -> ResumeOutcome {
    let ctx = turn.ctx;
    let pending: Vec<String> = turn
        .ledger()
        .faults
        .iter()
        .map(|f| format!("{} ({})", f.summary, f.action.as_str()))
        .collect();
    let forgotten = forget_pending && !pending.is_empty();
    if forgotten {
        let window = ctx.config().recovery.escalate_window_ms();
        turn.loaded.ledger.returned(false, ctx.now_ms, window);
        log::warn!(
            "{target}: an admin forgot {} pending fault(s): {}",
            pending.len(),
            pending.join("; ")
        );
    }
    ResumeOutcome::NotDrained {
        state,
        pending,
        forgotten,
    }
}

/// Everything that stands against returning this node now: the checks
/// and, when installed, DCGM's diagnostic. Open faults of the ledger do
/// not count: the admin's resume is what answers them.
fn checks_now(ctx: &RunContext) -> Vec<String> {
    let opts = ProbeOptions {
        topology: true,
        ..Default::default()
    };
    let mut check = node_check::check_node(ctx, opts);
    if ctx.config().dcgm.before_return {
        let all: Vec<u32> = check.snapshot.gpus.iter().map(|g| g.index).collect();
        let outcome = dcgm::run_diag(&ctx.config().dcgm, &ctx.search_path, &[], &all);
        log::warn!("{}", outcome.describe());
        check.findings.extend(outcome.findings());
    }
    recovery::clean_now(&check.findings, &check.snapshot, true)
}
