//! The health check: what `gpu-health-prolog` does as Slurm's
//! `HealthCheckProgram` (no job; Slurm passes no arguments and only
//! `SLURMD_NODENAME`), and what `gpu-health health-check` does by hand.
//!
//! The same probe, checks, Xid scan and fault ledger as the prolog; no
//! verdict; plus the automatic return of a node whose open faults are
//! all `drain-until-clean` once it was quiet long enough. A clean node
//! with an empty ledger calls no Slurm command; a node with open faults
//! looks at its own line (to learn whether its drain still stands).

use crate::checks::dcgm;
use crate::finding::Finding;
use crate::ledger::{Plan, ReturnDecision};
use crate::ops::drain::resume_own;
use crate::ops::recovery;
use crate::probe::ProbeOptions;

use super::act::{self, Turn};
use super::node_check::{self, NodeCheck};
use super::prolog::{ledger_lost, log_findings};
use super::RunContext;
use after_reboot::prove_when_idle;

/// What one health-check run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthAction {
    /// Nothing to do (clean and in service, or drained by someone else).
    Nothing,
    /// Drained now (or a gpu-health drain refreshed).
    Drained(String),
    /// A draining fault did not drain (configuration error, brake,
    /// someone else's drain, scontrol); it is pending.
    NotDrained(String),
    /// A drain-until-clean node went back to service.
    Returned,
    /// Drained by gpu-health and staying so; the text says until when.
    StaysDrained(String),
    /// Another run of this node held its turn: nothing decided.
    Busy(String),
}

impl HealthAction {
    /// A sentence for the log and the terminal.
    pub fn describe(&self) -> String {
        match self {
            HealthAction::Nothing => "nothing to do".into(),
            HealthAction::Drained(r) => format!("drained: {r}"),
            HealthAction::NotDrained(w) => format!("not drained: {w}"),
            HealthAction::Returned => "returned to service".into(),
            HealthAction::StaysDrained(w) => format!("stays drained: {w}"),
            HealthAction::Busy(w) => format!("did nothing: {w}"),
        }
    }
}

pub struct HealthReport {
    pub node: crate::ids::NodeName,
    pub findings: Vec<Finding>,
    pub action: HealthAction,
}

impl HealthReport {
    /// 0 when the node is fine (or came back), 1 when it has a draining fault.
    pub fn exit_code(&self) -> i32 {
        match self.action {
            HealthAction::Drained(_) | HealthAction::NotDrained(_) => 1,
            _ => 0,
        }
    }
}

/// What a health check asks of NVML.
const PROBE: ProbeOptions = ProbeOptions {
    enable_accounting: false,
    topology: true,
    accounting_processes: false,
};

/// Run the health check on this node.
pub fn run(ctx: &RunContext) -> HealthReport {
    let probed = node_check::probe(ctx, PROBE, None, None);
    let mut turn = match Turn::take(ctx) {
        Ok(t) => t,
        Err(busy) => {
            let why = act::busy_note(&ctx.node, &busy);
            log::warn!("{why}");
            return HealthReport {
                node: ctx.node.clone(),
                findings: Vec::new(),
                action: HealthAction::Busy(why),
            };
        }
    };
    let lost = turn.loaded.unreadable.clone();
    let mut check = node_check::judge(ctx, probed, None, None, lost.is_some());
    if let Some(why) = lost {
        check.findings.push(ledger_lost(why));
    }
    log_findings(
        &check
            .findings
            .iter()
            .filter(|f| f.action > crate::finding::Action::Info)
            .cloned()
            .collect::<Vec<_>>(),
    );
    let outcome = act::act(&mut turn, &check.findings, &act::node_run_view(ctx));
    super::inventory::note(&mut turn, &check);
    let next = match (&outcome.plan, outcome.not_drained()) {
        (_, Some(why)) => Next::Done(HealthAction::NotDrained(why.to_string())),
        (Plan::Drain { reason, .. }, None) if outcome.fresh || outcome.drain_changed => {
            Next::Done(HealthAction::Drained(reason.clone()))
        }
        (Plan::Drain { .. }, None) if outcome.drained() => return_when_quiet(&mut turn, &check),
        (Plan::Quiet, None) if turn.ledger().proof_stands() => prove_when_idle(&mut turn, &check),
        _ => Next::Done(HealthAction::Nothing),
    };
    let saved = turn.commit();
    node_check::commit(ctx, &check, None, ctx.config_ok() && saved);
    side_work(ctx, &check);
    drop(turn);
    node_check::count_in_metrics(ctx, &check, crate::records::metrics::RunKind::HealthCheck);
    let action = match next {
        Next::Done(action) => action,
        // Decided in the turn; DCGM runs outside it (it takes minutes),
        // then the return is made in a turn of its own.
        Next::ConfirmWithDcgm => confirm_with_dcgm(ctx, &check),
        Next::Prove => after_reboot::prove(ctx, &check),
    };
    log::info!("health check on {}: {}", ctx.node, action.describe());
    HealthReport {
        node: ctx.node.clone(),
        findings: check.findings,
        action,
    }
}

/// One power sample of each running job's GPUs (their peak power).
fn side_work(ctx: &RunContext, check: &NodeCheck) {
    crate::records::sample_running_jobs(&ctx.state, &check.snapshot);
}

/// What the health check does after its turn.
enum Next {
    Done(HealthAction),
    /// The node may return once DCGM finds nothing (`dcgm.before_return`).
    ConfirmWithDcgm,
    /// Back from a reboot: run the acceptance tier (`after_reboot`).
    Prove,
}

/// gpu-health's drain stands and nothing new was found: return the node
/// when the ledger allows it (every open fault drain-until-clean, quiet
/// long enough).
fn return_when_quiet(turn: &mut Turn<'_>, check: &NodeCheck) -> Next {
    let ctx = turn.ctx;
    let problems = recovery::clean_now(&check.findings, &check.snapshot, ctx.config_ok());
    let cfg = &ctx.config().recovery;
    match turn.ledger().may_return(cfg, &problems, ctx.clock()) {
        ReturnDecision::Return if ctx.config().dcgm.before_return => Next::ConfirmWithDcgm,
        ReturnDecision::Return => Next::Done(resume_now(turn, QUIET)),
        // A drain-until-clean fault of a boot still to prove went quiet:
        // the tier decides the return.
        ReturnDecision::ProveFirst(_) => prove_when_idle(turn, check),
        ReturnDecision::Wait(why) | ReturnDecision::NotOurs(why) => {
            Next::Done(HealthAction::StaysDrained(why))
        }
    }
}

/// Why a drain-until-clean node returns.
const QUIET: &str = "clean for the quiet time";

/// Resume the node and write the return into the ledger; not while an
/// admin's reboot of it is pending (the reboot decides its next state).
pub(super) fn resume_now(turn: &mut Turn<'_>, why: &str) -> HealthAction {
    let ctx = turn.ctx;
    if let Some(asked) = &turn.ledger().reboot_asked {
        let why = format!(
            "{} is clean, but the reboot gpu-health asked for (for {}) has not happened yet: left to the reboot",
            ctx.node,
            asked.kinds.join(", ")
        );
        log::info!("{why}");
        return HealthAction::StaysDrained(why);
    }
    if let Ok(Some(me)) = turn.slurm().show_node(&ctx.node) {
        if me.reboot_pending() {
            let why = format!(
                "{} is clean, but a reboot of it is pending ({}): left to the reboot",
                ctx.node, me.state
            );
            log::info!("{why}");
            return HealthAction::StaysDrained(why);
        }
        // Someone drained it with their own reason since this run looked
        // (the tier and DCGM run outside the turn, for seconds): theirs.
        if me.is_drained() && !me.drained_by_us() {
            let why = format!(
                "{} is clean, but someone drained it meanwhile ({:?}): not returned",
                ctx.node,
                crate::text::printable(me.reason.as_deref().unwrap_or(""))
            );
            log::warn!("{why}");
            return HealthAction::StaysDrained(why);
        }
    }
    match resume_own(turn.slurm(), &ctx.node) {
        Ok(()) => {
            log::warn!("{} returned to service: {why}", ctx.node);
            let window = ctx.config().recovery.escalate_window_ms();
            turn.loaded.ledger.returned(true, ctx.now_ms, window);
            HealthAction::Returned
        }
        Err(e) => {
            log::error!("could not return {} to service: {e}", ctx.node);
            HealthAction::StaysDrained(format!("scontrol resume failed: {e}"))
        }
    }
}

/// The last step before a node returns: DCGM must not find a hardware
/// fault. Runs outside the node's turn; the return (or the drain for
/// what DCGM found) is made in a new turn, after the ledger was read
/// again.
fn confirm_with_dcgm(ctx: &RunContext, check: &NodeCheck) -> HealthAction {
    let all: Vec<u32> = check.snapshot.gpus.iter().map(|g| g.index).collect();
    let outcome = dcgm::run_diag(&ctx.config().dcgm, &ctx.search_path, &[], &all);
    log::info!("before returning {}: {}", ctx.node, outcome.describe());
    let found = outcome.findings();
    let mut turn = match Turn::take(ctx) {
        Ok(t) => t,
        Err(busy) => return HealthAction::Busy(act::busy_note(&ctx.node, &busy)),
    };
    let action = if found.iter().any(|f| f.action.drains()) {
        let view = act::node_run_view(ctx);
        let acted = act::act(&mut turn, &found, &view);
        match (&acted.plan, acted.not_drained()) {
            (_, Some(why)) => HealthAction::NotDrained(why.to_string()),
            (Plan::Drain { reason, .. }, None) => HealthAction::Drained(reason.clone()),
            _ => HealthAction::StaysDrained("DCGM found a fault".into()),
        }
    } else {
        let problems = recovery::clean_now(&check.findings, &check.snapshot, ctx.config_ok());
        let cfg = &ctx.config().recovery;
        match turn.ledger().may_return(cfg, &problems, ctx.clock()) {
            ReturnDecision::Return => resume_now(&mut turn, QUIET),
            ReturnDecision::Wait(why)
            | ReturnDecision::NotOurs(why)
            | ReturnDecision::ProveFirst(why) => HealthAction::StaysDrained(why),
        }
    };
    turn.commit();
    action
}

mod after_reboot;
mod tier_budget;
