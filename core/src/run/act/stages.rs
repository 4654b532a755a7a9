//! The stages of `act`, in order: notice a new boot, fold the findings
//! into the ledger, drain as the ledger plans (through the brake, or a
//! new reason on gpu-health's own drain), then write down what came of
//! it. Each stage does one thing; `act` calls them.

use crate::finding::Finding;
use crate::ledger::{FaultId, Ledger, Plan, Recorded, RunView};
use crate::ops::drain::{DrainOutcome, Standing};

use super::{drainer_look, look_before_claim, recorded, with_drainer, withdraw_left_claim};
use super::{ActOutcome, Turn};

/// A new boot: a reboot gpu-health asked for happened (its faults are
/// cleared unless found again), or a boot it did not ask for is to be
/// proven. The boot id read (empty where nothing needs it).
pub(super) fn notice_boot(turn: &mut Turn<'_>, view: &RunView) -> String {
    let ctx = turn.ctx;
    let remediation = &ctx.config().remediation;
    // Read only where reboots are on, one was asked, or every boot is to
    // be proven: with the default configuration a run does what it did
    // before.
    let any_boot =
        crate::acceptance::wanted(&ctx.config().acceptance, crate::acceptance::Boot::Other);
    let boot_id = if remediation.reboot || turn.loaded.ledger.reboot_asked.is_some() || any_boot {
        ctx.boot_id().to_string()
    } else {
        String::new()
    };
    let ledger = &mut turn.loaded.ledger;
    let asked = ledger.boot_seen(&boot_id, view.clock.wall_ms, remediation.window_ms());
    if asked {
        log::warn!(
            "{} rebooted as gpu-health asked: the faults it was for are cleared unless found again",
            ctx.node
        );
    }
    // A broken configuration's fallback says nothing about the key: the
    // boot stays as it was written down.
    if ctx.config_ok() && ledger.boot_noted(&boot_id, any_boot, asked, view.clock.wall_ms) {
        log::warn!(
            "{} booted without gpu-health asking for it ({boot_id}): it is drained until the acceptance tier passes on it (acceptance.after_any_boot)",
            ctx.node
        );
    }
    boot_id
}

/// The run's findings into the ledger (after the reboots Slurm keeps for
/// a node whose ledger knows none); a claim an interrupted run left is
/// withdrawn. True when the run found a draining fault itself.
pub(super) fn fold(turn: &mut Turn<'_>, findings: &[Finding], view: &RunView) -> bool {
    let ctx = turn.ctx;
    let (recovery, remediation) = (&ctx.config().recovery, &ctx.config().remediation);
    super::super::reboot_history::recover(turn, findings, view.clock.wall_ms);
    let observed = turn
        .loaded
        .ledger
        .observe(findings, view, recovery, remediation);
    if !observed.escalated.is_empty() {
        log::error!(
            "{} returned by itself {} times or more within {} h for the same fault: draining it for an admin ({})",
            ctx.node,
            recovery.escalate_after_returns,
            recovery.escalate_window_hours,
            observed.escalated.join(", ")
        );
    }
    if !observed.inspected.is_empty() {
        log::error!(
            "{} has a fault back after {} reboots or more within {} h: draining it for hardware inspection, no more reboots ({})",
            ctx.node,
            remediation.max_reboots,
            remediation.window_hours,
            observed.inspected.join(", ")
        );
    }
    if turn.loaded.ledger.claim_ms.is_some() {
        withdraw_left_claim(turn);
    }
    observed.fresh
}

/// What the ledger planned and what the drain came to.
pub(super) struct Planned {
    pub plan: Plan,
    /// The kinds of fault to ask a reboot for once drained.
    pub reboot: Option<Vec<String>>,
    pub drain: Option<DrainOutcome>,
    /// Faults an admin answered by returning the node outside gpu-health.
    pub answered: usize,
    /// A new drain went through the brake: its claim and drain stamp
    /// rewrote the node's Comment.
    pub comment_rewritten: bool,
}

/// The reboot the ledger wants now (never on a broken configuration).
fn reboot_wanted(turn: &Turn<'_>, l: &Ledger, view: &RunView) -> Option<Vec<String>> {
    let ctx = turn.ctx;
    l.reboot_wanted(&ctx.config().remediation, view.clock.wall_ms)
        .filter(|_| ctx.config_ok())
}

/// Decide from the ledger and drain as it says: a new drain through the
/// brake, or a new reason on gpu-health's own drain (`found`: the run's
/// draining faults, for a node someone returned meanwhile).
pub(super) fn drain_as_planned(turn: &mut Turn<'_>, found: &[FaultId], view: &RunView) -> Planned {
    let ctx = turn.ctx;
    let reboot = reboot_wanted(turn, &turn.loaded.ledger, view);
    let plan = turn
        .loaded
        .ledger
        .plan_marked(ctx.config_ok(), reboot.is_some());
    let mut planned = Planned {
        plan,
        reboot,
        drain: None,
        answered: 0,
        comment_rewritten: false,
    };
    planned.drain = match planned.plan.clone() {
        Plan::Quiet => None,
        Plan::Hold { why } => {
            log::error!("{why}");
            None
        }
        Plan::Drain {
            reason,
            ours_already: true,
            ..
        } => redrain_ours(turn, &reason, found, view, &mut planned),
        Plan::Drain {
            reason, look_first, ..
        } => {
            planned.comment_rewritten = true;
            Some(drain_new(turn, &reason, look_first))
        }
    };
    planned
}

/// A new drain through the brake.
fn drain_new(turn: &mut Turn<'_>, reason: &str, look_first: bool) -> DrainOutcome {
    let node = &turn.ctx.node;
    let look_first = look_before_claim(turn, look_first);
    with_drainer(turn, |d| d.drain_new(node, reason, look_first))
}

/// gpu-health's drain stands in the ledger: a new reason on it as Slurm
/// shows it; someone else's drain is left alone; a node someone returned
/// has its faults answered and is planned again.
fn redrain_ours(
    turn: &mut Turn<'_>,
    reason: &str,
    found: &[FaultId],
    view: &RunView,
    planned: &mut Planned,
) -> Option<DrainOutcome> {
    let ctx = turn.ctx;
    match drainer_look(turn) {
        Ok(Standing::Ours(current)) => {
            Some(with_drainer(turn, |d| d.redrain(&ctx.node, &current, reason)))
        }
        Ok(Standing::Foreign(current)) => Some(DrainOutcome::Foreign(format!(
            "{} is drained by someone else (reason {:?}); not touching it, would have drained: {reason}",
            ctx.node,
            crate::text::printable(&current)
        ))),
        Ok(Standing::InService) => {
            let answered = turn.loaded.ledger.returned_by_someone(found);
            log::warn!(
                "{} is back in service although gpu-health drained it: someone returned it; \
                 {answered} fault(s) it had are taken as answered{}",
                ctx.node,
                if turn.loaded.ledger.open_faults().next().is_none() {
                    String::new()
                } else {
                    ", the ones found again drain it again".to_string()
                }
            );
            planned.answered = answered;
            planned.reboot = reboot_wanted(turn, &turn.loaded.ledger, view);
            planned.plan = turn
                .loaded
                .ledger
                .plan_marked(ctx.config_ok(), planned.reboot.is_some());
            match planned.plan.clone() {
                Plan::Drain {
                    reason, look_first, ..
                } => {
                    planned.comment_rewritten = true;
                    Some(drain_new(turn, &reason, look_first))
                }
                _ => None,
            }
        }
        Err(e) => Some(DrainOutcome::Failed(format!(
            "cannot look at {} in Slurm ({e}); would have drained: {reason}",
            ctx.node
        ))),
    }
}

/// What the action came to, into the ledger (the caller saves it).
pub(super) fn write_down(
    turn: &mut Turn<'_>,
    planned: Planned,
    fresh: bool,
    view: &RunView,
) -> ActOutcome {
    let recorded = recorded(&planned.plan, planned.drain.as_ref());
    if let Recorded::NotActed { .. } = &recorded {
        let summaries: Vec<String> = turn
            .loaded
            .ledger
            .open_faults()
            .map(|f| f.summary.clone())
            .collect();
        log::error!(
            "{} not drained; its open faults stay pending: {}",
            turn.ctx.node,
            summaries.join("; ")
        );
    }
    let ledger = &mut turn.loaded.ledger;
    let before = ledger.drain.as_ref().map(|m| m.reason.clone());
    ledger.record(&recorded, fresh, view.clock);
    ledger.claim_ms = None;
    let drain_changed =
        matches!(&recorded, Recorded::Drained { reason } if before.as_ref() != Some(reason));
    ActOutcome {
        plan: planned.plan,
        drain: planned.drain,
        fresh,
        answered: planned.answered,
        drain_changed,
    }
}
