//! Decide and act: the one place where a run's findings meet the node's
//! fault ledger and become a drain, or faults kept pending with why.
//!
//! A run that may act takes the node's turn ([`Turn::take`]: the run lock,
//! then the ledger, read once), folds its findings in, decides from the
//! ledger (`Ledger::plan`, pure), drains through the brake, writes down
//! what that came to (`Ledger::record`, pure) and saves the ledger once
//! ([`Turn::commit`]); only then may the caller mark anything as handled.

use std::cell::OnceCell;
use std::time::{Duration, Instant};

use crate::finding::{Action, Finding};
use crate::ids::NodeName;
use crate::ledger::{
    lifecycle, store, FaultId, Ledger, NodeState, PendingCause, Plan, Recorded, RunView,
};
use crate::ops::drain::{DrainOutcome, DrainStamp, Drainer, SlurmCalls, Standing};
use crate::slurm::{AfterReboot, Scontrol};
use crate::state::{RunLock, StateError};

use super::RunContext;

mod stages;

/// A run's turn on the node: the run lock held, the ledger read.
pub struct Turn<'a> {
    pub ctx: &'a RunContext,
    pub loaded: store::Loaded,
    /// How long the run waited for its turn: that much less is left of
    /// its Slurm budget.
    waited: Duration,
    slurm: OnceCell<Scontrol<'a>>,
    /// The lifecycle state the ledger said when the turn was taken.
    entered: NodeState,
    _lock: Option<RunLock>,
}

/// The node's turn was not had within the run's budget: another run of
/// this node is deciding and acting; what it found is its to act on.
#[derive(Debug)]
pub struct Busy(pub StateError);

impl<'a> Turn<'a> {
    /// Wait (at most the run's Slurm budget, `scontrol_timeout_ms`) for
    /// the node's turn, then read the ledger.
    pub fn take(ctx: &'a RunContext) -> Result<Turn<'a>, Busy> {
        let budget = Duration::from_millis(ctx.config().scontrol_timeout_ms);
        let t0 = Instant::now();
        let lock = ctx
            .state
            .lock_run(budget, &ctx.config().run_lock_dir)
            .map_err(Busy)?;
        let loaded = store::load(&ctx.state, &ctx.node);
        Ok(Turn {
            ctx,
            entered: NodeState::of(&loaded.ledger),
            loaded,
            waited: t0.elapsed(),
            slurm: OnceCell::new(),
            _lock: lock,
        })
    }

    /// The run's Slurm: scontrol with its budget started at the first use
    /// (so that the healthy path's work does not eat it) less the wait for
    /// the turn (so that a run never holds Slurm longer than its budget in
    /// all); or the one the run was given.
    pub fn slurm(&self) -> &dyn SlurmCalls {
        if let Some(given) = &self.ctx.slurm {
            return given.as_ref();
        }
        self.slurm.get_or_init(|| {
            let cfg = self.ctx.config();
            let budget = Duration::from_millis(cfg.scontrol_timeout_ms);
            Scontrol::new(&cfg.scontrol, budget.saturating_sub(self.waited))
        })
    }

    pub fn ledger(&self) -> &Ledger {
        &self.loaded.ledger
    }

    /// Save the ledger (when it changed). False when it could not be
    /// saved: then nothing the run found may be marked as handled.
    pub fn commit(&mut self) -> bool {
        self.log_move();
        match store::save(&self.ctx.state, &self.loaded) {
            Ok(()) => {
                self.loaded.saved();
                true
            }
            Err(e) => {
                log::error!(
                    "cannot save the node's fault ledger: {e}; the kernel-log records stay unread so the next run sees them again"
                );
                false
            }
        }
    }
}

impl Turn<'_> {
    /// The lifecycle move this turn made, logged with what made it.
    fn log_move(&mut self) {
        let now = NodeState::of(&self.loaded.ledger);
        let was = std::mem::replace(&mut self.entered, now);
        if now == was {
            return;
        }
        match lifecycle::moved(was, now) {
            Ok(m) => log::warn!("{}: {was} -> {now}: {}", self.ctx.node, m.on),
            Err(e) => log::error!("{}: {e}", self.ctx.node),
        }
    }
}

/// What a run's action came to.
#[derive(Debug)]
pub struct ActOutcome {
    pub plan: Plan,
    /// `None` when no drain was tried.
    pub drain: Option<DrainOutcome>,
    /// The run found a draining fault itself.
    pub fresh: bool,
    /// Faults an admin answered by returning the node outside gpu-health
    /// (closed, not drained again).
    pub answered: usize,
    /// This run changed gpu-health's drain in Slurm (drained the node, or
    /// gave it a new reason), rather than finding it as it was.
    pub drain_changed: bool,
}

impl ActOutcome {
    /// Slurm holds gpu-health's drain of the node now.
    pub fn drained(&self) -> bool {
        matches!(self.drain, Some(DrainOutcome::Drained))
    }

    /// Why an open draining fault did not drain, if one did not.
    pub fn not_drained(&self) -> Option<&str> {
        match (&self.drain, &self.plan) {
            (
                Some(
                    DrainOutcome::HeldBack(w) | DrainOutcome::Foreign(w) | DrainOutcome::Failed(w),
                ),
                _,
            ) => Some(w),
            (None, Plan::Hold { why }) => Some(why),
            _ => None,
        }
    }
}

/// Fold `findings` into the ledger, decide, drain through the brake when
/// the ledger says so, and write down what came of it (the caller saves
/// with [`Turn::commit`]).
pub fn act(turn: &mut Turn<'_>, findings: &[Finding], view: &RunView) -> ActOutcome {
    let boot_id = stages::notice_boot(turn, view);
    let fresh = stages::fold(turn, findings, view);
    let found: Vec<FaultId> = findings
        .iter()
        .filter(|f| f.action.drains())
        .map(FaultId::of)
        .collect();
    let planned = stages::drain_as_planned(turn, &found, view);
    if let (Some(DrainOutcome::Drained), Plan::Drain { reason, .. }) =
        (&planned.drain, &planned.plan)
    {
        match planned.reboot.clone() {
            Some(kinds) => ask_reboot(turn, reason, kinds, &boot_id, view.clock.wall_ms),
            None => super::withdraw_reboot::withdraw_reboot(turn, reason),
        }
    }
    // The brake's claim and drain stamp wrote the Comment whole: the
    // reboots kept there (for a state directory emptied at a boot) go
    // back, unless the reboot just asked wrote them already.
    if planned.comment_rewritten
        && turn.ledger().reboot_asked.is_none()
        && !turn.ledger().reboots.is_empty()
    {
        super::reboot_history::keep(turn);
    }
    stages::write_down(turn, planned, fresh, view)
}

/// The node is drained for faults a reboot clears: ask Slurm to reboot
/// it. Written down only once Slurm took it; a failure leaves the node
/// drained and the next run asks again.
fn ask_reboot(turn: &mut Turn<'_>, reason: &str, kinds: Vec<String>, boot_id: &str, now_ms: u64) {
    let node = &turn.ctx.node;
    if boot_id.is_empty() {
        log::error!(
            "{node} stays drained: cannot read this boot's id ({}), so a reboot could not be told from none; not asking Slurm for one",
            turn.ctx.config().xid.boot_id_path.display()
        );
        return;
    }
    // With the tier on after a reboot, Slurm must not return the node by
    // itself: it comes back drained and returns once the tier passed.
    let cfg = turn.ctx.config();
    let prove =
        crate::acceptance::wanted(&cfg.acceptance, crate::acceptance::Boot::RequestedReboot);
    let after = if prove {
        AfterReboot::StayDrained
    } else {
        AfterReboot::Resume
    };
    match turn.slurm().reboot(node, reason, after) {
        Ok(()) => {
            log::error!(
                "asked Slurm to reboot {node} once its jobs are done{}: {reason}",
                if prove {
                    " (it stays drained after it until the acceptance tier passes)"
                } else {
                    ""
                }
            );
            turn.loaded
                .ledger
                .reboot_requested(now_ms, boot_id, kinds, prove);
            super::reboot_history::keep(turn);
        }
        Err(e) => log::error!(
            "cannot ask Slurm to reboot {node} ({e}); it stays drained and the next run asks again"
        ),
    }
}

/// The ledger's account of a plan and what the drain came to.
fn recorded(plan: &Plan, drain: Option<&DrainOutcome>) -> Recorded {
    let not_acted = |cause, why: &String| Recorded::NotActed {
        cause,
        why: why.clone(),
    };
    match (plan, drain) {
        (Plan::Drain { reason, .. }, Some(DrainOutcome::Drained)) => Recorded::Drained {
            reason: reason.clone(),
        },
        (_, Some(DrainOutcome::HeldBack(w))) => not_acted(PendingCause::Brake, w),
        (_, Some(DrainOutcome::Foreign(w))) => not_acted(PendingCause::DrainedBySomeoneElse, w),
        (_, Some(DrainOutcome::Failed(w))) => not_acted(PendingCause::SlurmFailed, w),
        (Plan::Hold { why }, None) => not_acted(PendingCause::ConfigError, why),
        _ => Recorded::Nothing,
    }
}

fn drainer_look(turn: &Turn<'_>) -> Result<Standing, crate::slurm::SlurmError> {
    let noop = |_: u64| Ok(());
    let d = Drainer {
        brake: &turn.ctx.config().brake,
        slurm: turn.slurm(),
        before_claim: &noop,
        kept: Default::default(),
        stamped: Default::default(),
    };
    d.look(&turn.ctx.node)
}

/// Whether to look at the node in Slurm before claiming a drain: the
/// ledger says so, or the state directory cannot keep the ledger. The run
/// then knows neither its own earlier drain nor someone else's, and a
/// blind claim would replace their Comment (and withdrawing it blank the
/// stamp the brake counts).
fn look_before_claim(turn: &Turn<'_>, ledger_says: bool) -> bool {
    ledger_says || turn.ctx.state.problem().is_some()
}

/// Run `f` with a drainer whose claims are written into the ledger
/// before they are sent (a kill between the two leaves a claim the next
/// run can withdraw).
fn with_drainer(turn: &mut Turn<'_>, f: impl FnOnce(&Drainer<'_>) -> DrainOutcome) -> DrainOutcome {
    let state = &turn.ctx.state;
    let before = turn.loaded.ledger.clone();
    let record_claim = |stamp: u64| {
        let mut l = before.clone();
        l.claim_ms = Some(stamp);
        // The record only lets a later run withdraw the claim of a run
        // killed before its drain; such a claim is void after its lifetime
        // anyway. A state directory that cannot be written (unusable, full,
        // read-only) must not hold every drain of the node back.
        if let Err(e) = state.save((), &l) {
            log::warn!(
                "drain brake: the claim cannot be written down ({e}); claiming all the same"
            );
        }
        Ok(())
    };
    // The node's own drain stamp, which its claim keeps in the Comment.
    let kept = state.load::<DrainStamp>(()).ok().flatten().map(|s| s.ms);
    let d = Drainer {
        brake: &turn.ctx.config().brake,
        slurm: turn.slurm(),
        before_claim: &record_claim,
        kept: kept.into(),
        stamped: Default::default(),
    };
    let outcome = f(&d);
    if let Some(ms) = d.stamped.get() {
        if let Err(e) = state.save((), &DrainStamp { ms }) {
            log::warn!("cannot keep the drain's stamp ({e}): the next claim may not carry it");
        }
    }
    // Whatever was saved before the claim is not what the file holds now.
    turn.loaded.forget_original();
    outcome
}

/// A claim an earlier run of this node made and did not see through
/// (killed): withdraw it when Slurm still shows it.
fn withdraw_left_claim(turn: &mut Turn<'_>) {
    let Some(stamp) = turn.loaded.ledger.claim_ms.take() else {
        return;
    };
    let node = &turn.ctx.node;
    match turn.slurm().show_node(node) {
        Ok(Some(me)) if me.claim_ms == Some(stamp) => match turn
            .slurm()
            .release_claim(node, crate::ops::drain::own_stamp(&me))
        {
            Ok(()) => log::info!("withdrew a drain-brake claim an interrupted run left on {node}"),
            Err(e) => {
                log::warn!("cannot withdraw the claim an interrupted run left on {node}: {e}")
            }
        },
        Ok(_) => {}
        Err(e) => log::warn!("cannot look for a claim an interrupted run left on {node}: {e}"),
    }
}

/// A finding that tells a job why its node was not drained although a
/// fault asked for it (strict jobs are refused on it). It names no
/// process: the faults' summaries are the driver's and gpu-health's.
pub fn not_drained_note(outcome: &ActOutcome) -> Option<Finding> {
    let why = outcome.not_drained()?;
    let summary = match &outcome.drain {
        Some(DrainOutcome::HeldBack(_)) => "drain held back by the brake",
        Some(DrainOutcome::Foreign(_)) => "node drained by someone else",
        Some(DrainOutcome::Failed(_)) => "drain failed",
        _ => "drain not allowed: configuration error",
    };
    // A boot's proof drains without a fault (`Ledger::boot_noted`).
    let what = match &outcome.plan {
        Plan::Drain { reason, .. } if reason == crate::ledger::BOOT_PROOF_REASON => {
            "this node waits for its acceptance tier after a boot and should have been drained"
        }
        _ => "this node has a fault that should have drained it",
    };
    Some(Finding::node(
        "brake",
        Action::Warn,
        summary.to_string(),
        format!("{what}, but it was not drained: {why}"),
    ))
}

/// Whether the job must stay off the node (prolog exit 1, Slurm requeues
/// it): the node is drained, or its drain could not be made because
/// Slurm failed (Slurm then drains the node itself, "Prolog error"): a
/// job never starts on a node with a fault merely because scontrol
/// failed. The brake's hold, someone else's drain and a configuration
/// error let the job start, warned (strict jobs are refused), so that
/// neither a bad rule nor a bad file drains nodes through Slurm's
/// "Prolog error" behind the brake's back.
pub fn keeps_job_off(outcome: &ActOutcome) -> bool {
    matches!(
        outcome.drain,
        Some(DrainOutcome::Drained | DrainOutcome::Failed(_))
    )
}

/// The view of a prolog or health check (they read the node's kernel log).
pub fn node_run_view(ctx: &RunContext) -> RunView<'_> {
    RunView {
        clock: ctx.clock(),
        config_ok: ctx.config_ok(),
        scans_kernel_log: true,
        at_job_end: false,
    }
}

/// What a run that did not get the node's turn logs.
pub fn busy_note(node: &NodeName, e: &Busy) -> String {
    format!(
        "another gpu-health run on {node} holds its turn ({}): this run decides nothing and marks nothing as handled",
        e.0
    )
}

/// The ledger as it is on disk, read without taking the node's turn (a
/// run that did not get it; the admin command): saves are atomic, so it
/// is always a whole one.
pub fn peek(ctx: &RunContext) -> Option<Ledger> {
    store::peek(&ctx.state, &ctx.node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_drain_or_a_failed_slurm_keeps_the_job_off() {
        let out = |d| ActOutcome {
            plan: Plan::Quiet,
            drain: Some(d),
            fresh: true,
            answered: 0,
            drain_changed: false,
        };
        assert!(keeps_job_off(&out(DrainOutcome::Failed("x".into()))));
        assert!(keeps_job_off(&out(DrainOutcome::Drained)));
        assert!(!keeps_job_off(&out(DrainOutcome::HeldBack("x".into()))));
        assert!(!keeps_job_off(&out(DrainOutcome::Foreign("x".into()))));
    }
}
