//! The proof after a reboot (`[acceptance] after_reboot`): the node came
//! back from a reboot gpu-health asked for still drained (or, with
//! `after_any_boot`, was drained by the first run of a boot gpu-health
//! did not ask for: `Ledger::boot_noted`); the first
//! health check that finds it registered, idle and drained by gpu-health
//! runs the acceptance tier, then returns it (every gate passed) or
//! drains it again with the gate, the figure and the threshold in its
//! reason.
//!
//! The tier runs outside the node's turn (like DCGM before a return) and
//! within the health check's time (`tier_budget`). Steps that do not fit
//! wait for the next health check; the passed ones are kept in the
//! ledger for this boot (`Ledger::tier_progress`). The evidence must
//! cover what the node had before its fault (`Ledger::had`), and a fault
//! found between the tier's start and the return fails it.

use std::time::{Duration, Instant};

use crate::acceptance::{self, GateResult, TierInput, TierOutcome, Verdict, Within};
use crate::finding::Finding;
use crate::inventory::Inventory;
use crate::ledger::{Plan, ReturnDecision};
use crate::ops::prove::{may_prove, ProveNow};
use crate::ops::recovery;
use crate::state::{StateError, StateFile};

use super::super::act::{self, Turn};
use super::super::node_check::{self, NodeCheck};
use super::super::RunContext;
use super::tier_budget::TierBudget;
use super::{resume_now, HealthAction, Next, PROBE};

/// In the turn: whether the tier may run now (from the node's line in
/// Slurm), or the return is left to do after a tier that passed.
pub(super) fn prove_when_idle(turn: &mut Turn<'_>, check: &NodeCheck) -> Next {
    let ctx = turn.ctx;
    if !ctx.config_ok() {
        // The tier's gates, limits and thresholds come from the
        // configuration: not judged on one that failed to load.
        let why = format!(
            "back from {}: the acceptance tier waits for a configuration that loads",
            the_boot(turn)
        );
        log::error!("{}: {why}", ctx.node);
        return Next::Done(HealthAction::StaysDrained(why));
    }
    turn.loaded.ledger.proof_in_boot(ctx.boot_id());
    if !tier_still_wanted(turn) {
        // The site turned the tier off since the reboot: the node
        // returns as it would have without it.
        log::warn!(
            "{}: the acceptance tier after {} is no longer configured: returning without it",
            ctx.node,
            the_boot(turn)
        );
        turn.loaded.ledger.tier_passed(ctx.now_ms);
    }
    let me = match turn.slurm().show_node(&ctx.node) {
        Ok(me) => me,
        Err(e) => {
            return Next::Done(HealthAction::StaysDrained(format!(
                "cannot look at {} in Slurm ({e}); the acceptance tier waits for the next run",
                ctx.node
            )))
        }
    };
    match may_prove(me.as_ref()) {
        ProveNow::Run if turn.ledger().tier_due() => Next::Prove,
        // Passed in an earlier run whose return did not go through.
        ProveNow::Run => Next::Done(return_proven(turn, check)),
        ProveNow::Wait(why) => {
            let why = format!(
                "back from {}, acceptance tier not run yet: {why}",
                the_boot(turn)
            );
            log::info!("{}: {why}", ctx.node);
            Next::Done(HealthAction::StaysDrained(why))
        }
        ProveNow::NotOurs(why) => {
            log::warn!(
                "{}: {why}; the acceptance tier after {} is not gpu-health's to run any more",
                ctx.node,
                the_boot(turn)
            );
            turn.loaded.ledger.proof_dropped();
            Next::Done(HealthAction::Nothing)
        }
    }
}

/// Run the tier (outside the turn) but for the steps passed earlier in
/// this boot, look at the node again (a fault during the tier fails it),
/// then act on both in a turn of its own, after the ledger was read
/// again.
pub(super) fn prove(ctx: &RunContext, check: &NodeCheck) -> HealthAction {
    // One tier at a time (a health check by hand beside Slurm's, or
    // `gpu-health accept`): two all-reduces at once would each measure
    // half the bandwidth.
    let _tier = match ctx.state.lock_file(StateFile::TierLock, Duration::ZERO) {
        Ok(lock) => lock,
        Err(StateError::Busy { .. }) => {
            let why = "another acceptance tier is under way on this node".to_string();
            log::info!("{}: {why}", ctx.node);
            return HealthAction::StaysDrained(why);
        }
        Err(e) => {
            let why = format!("the acceptance tier did not run: {e}");
            log::warn!("{}: {why}", ctx.node);
            return HealthAction::StaysDrained(why);
        }
    };
    // Read again under the tier's lock: since this run's turn another
    // run may have returned the node, or passed steps.
    let Some(ledger) = act::peek(ctx).filter(|l| l.tier_due()) else {
        return HealthAction::Nothing;
    };
    let Some(done) = ledger.proof.as_ref().map(|p| p.steps_passed.clone()) else {
        return HealthAction::Nothing;
    };
    let outcome = run_tier(ctx, check, &done, &ledger.had());
    // Between the tier's start and the return: NVML and the kernel log
    // again, outside the turn like the run's first look.
    let again = node_check::probe(ctx, PROBE, None, None);
    let mut turn = match Turn::take(ctx) {
        Ok(t) => t,
        Err(busy) => return HealthAction::Busy(act::busy_note(&ctx.node, &busy)),
    };
    let recheck = node_check::judge(ctx, again, None, None, false);
    if !turn.ledger().tier_due() {
        // Another run acted on the node meanwhile (a fault came back, an
        // admin took it): the tier's result is not needed; what this
        // look found is the next run's to read again.
        return HealthAction::Nothing;
    }
    let action = act_on(&mut turn, &recheck, &outcome);
    let saved = turn.commit();
    node_check::commit(ctx, &recheck, None, ctx.config_ok() && saved);
    action
}

/// The steps not passed yet, as many as fit in what the health check has
/// left, covering what the node had before its fault (`had`).
fn run_tier(ctx: &RunContext, check: &NodeCheck, done: &[String], had: &Inventory) -> TierOutcome {
    let (fitted, notes) = ctx.config().acceptance.fitted_to_a_health_check();
    for n in &notes {
        log::warn!("{}: {n}", ctx.node);
    }
    let mut config = ctx.config().clone();
    config.acceptance = fitted;
    let fabric = crate::fabric::read_fabric(&config.sysfs_root).unwrap_or_else(|e| {
        log::warn!("cannot list the HCAs for the acceptance tier: {e}");
        Default::default()
    });
    let hcas = acceptance::hcas_of(&config.acceptance, &fabric);
    let budget = TierBudget::now(ctx);
    let t0 = Instant::now();
    let outcome = acceptance::run_tier_within(
        &TierInput {
            config: &config,
            snapshot: &check.snapshot,
            hcas: &hcas,
            search_path: &ctx.search_path,
            job_running: busy_gpus(check),
            had,
        },
        &Within {
            done,
            budget: budget.left(),
        },
    );
    log_tier(ctx, &outcome, t0.elapsed().as_millis());
    if outcome.refused.is_none() && outcome.results.is_empty() {
        if let Some(first) = outcome.deferred.first() {
            log::warn!(
                "{}: acceptance step {first} waits for the next health check: its time limit does not fit, {}",
                ctx.node,
                budget.describe()
            );
        }
    }
    outcome
}

/// What the tier and the look after it came to, written down and acted
/// on: a draining fault found during the tier fails it.
fn act_on(turn: &mut Turn<'_>, check: &NodeCheck, outcome: &TierOutcome) -> HealthAction {
    let ctx = turn.ctx;
    if check.findings.iter().any(|f| f.action.drains()) {
        log::error!(
            "{}: a fault was found during the acceptance tier after {}: the proof fails",
            ctx.node,
            the_boot(turn)
        );
        return drain_for(turn, &check.findings);
    }
    if let Some(why) = &outcome.refused {
        turn.loaded.ledger.tier_inconclusive(why);
        return HealthAction::StaysDrained(format!("acceptance tier not run: {why}"));
    }
    let after = the_boot(turn);
    if outcome.may_return() {
        log::warn!(
            "{} passed the acceptance tier after {after}: returning it",
            ctx.node
        );
        turn.loaded.ledger.tier_passed(ctx.now_ms);
        return return_proven(turn, check);
    }
    let findings = failed_findings(outcome);
    if findings.is_empty() && !outcome.deferred.is_empty() {
        turn.loaded.ledger.tier_progress(&outcome.steps_passed);
        let why = format!(
            "acceptance tier after {after}: {} step(s) passed, {} left for the next health check ({})",
            outcome.steps_passed.len(),
            outcome.deferred.len(),
            outcome.deferred.join(", ")
        );
        log::info!("{}: {why}", ctx.node);
        return HealthAction::StaysDrained(why);
    }
    log::error!("{} failed the acceptance tier after {after}", ctx.node);
    drain_for(turn, &findings)
}

/// Drain again for `findings` (the ledger decides the reason).
fn drain_for(turn: &mut Turn<'_>, findings: &[Finding]) -> HealthAction {
    let acted = act::act(turn, findings, &act::node_run_view(turn.ctx));
    match (&acted.plan, acted.not_drained()) {
        (_, Some(why)) => HealthAction::NotDrained(why.to_string()),
        (Plan::Drain { reason, .. }, None) => {
            log::error!("{} drained: {reason}", turn.ctx.node);
            HealthAction::Drained(reason.clone())
        }
        _ => HealthAction::StaysDrained("the acceptance tier failed".into()),
    }
}

/// The tier passed: the return through the ledger's automatic return.
fn return_proven(turn: &mut Turn<'_>, check: &NodeCheck) -> HealthAction {
    let ctx = turn.ctx;
    let problems = recovery::clean_now(&check.findings, &check.snapshot, ctx.config_ok());
    match turn
        .ledger()
        .may_return(&ctx.config().recovery, &problems, ctx.clock())
    {
        ReturnDecision::Return => resume_now(turn, "every acceptance gate passed"),
        ReturnDecision::Wait(why)
        | ReturnDecision::NotOurs(why)
        | ReturnDecision::ProveFirst(why) => HealthAction::StaysDrained(why),
    }
}

/// Whether the configuration still asks for the tier after the boot
/// the proof is for.
fn tier_still_wanted(turn: &Turn<'_>) -> bool {
    let boot = match &turn.ledger().proof {
        Some(p) if p.after_boot => acceptance::Boot::Other,
        _ => acceptance::Boot::RequestedReboot,
    };
    acceptance::wanted(&turn.ctx.config().acceptance, boot)
}

/// What the proof is after: a reboot gpu-health asked for, or a boot it
/// did not ask for.
fn the_boot(turn: &Turn<'_>) -> &'static str {
    match &turn.ledger().proof {
        Some(p) if p.after_boot => p.boot_words(),
        _ => "its reboot",
    }
}

/// The findings a failed tier drains for; the first says it is the
/// acceptance tier's (the drain reason names the gate, the figure and
/// the threshold: `acceptance failed: all-reduce 180 GB/s < 460 GB/s
/// (H100 SXM)`).
pub fn failed_findings(outcome: &TierOutcome) -> Vec<Finding> {
    let mut findings: Vec<Finding> = outcome
        .findings
        .iter()
        .filter(|f| f.action.drains())
        .cloned()
        .collect();
    if let Some(first) = findings.first_mut() {
        first.summary = format!("acceptance failed: {}", first.summary);
    }
    findings
}

/// A GPU with a compute process on it: a job, or someone's program.
fn busy_gpus(check: &NodeCheck) -> Option<String> {
    let busy: Vec<String> = check
        .snapshot
        .gpus
        .iter()
        .filter(|g| !g.running_processes.is_empty())
        .map(|g| format!("GPU{}", g.index))
        .collect();
    (!busy.is_empty()).then(|| format!("compute processes on {}", busy.join(", ")))
}

fn log_tier(ctx: &RunContext, outcome: &TierOutcome, ms: u128) {
    for r in &outcome.results {
        let line = describe(r);
        match r.verdict {
            Verdict::Passed => log::info!("{}: {line}", ctx.node),
            _ => log::warn!("{}: {line}", ctx.node),
        }
    }
    log::info!(
        "{}: acceptance tier: {} gate result(s) in {ms} ms",
        ctx.node,
        outcome.results.len()
    );
}

fn describe(r: &GateResult) -> String {
    format!(
        "acceptance gate {}{}: {} ({})",
        r.gate.as_str(),
        r.subject
            .as_ref()
            .map(|s| format!(" {s}"))
            .unwrap_or_default(),
        r.verdict.as_str(),
        r.detail
    )
}
