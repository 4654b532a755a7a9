//! The health check: what `gpu-health-prolog` does as Slurm's
//! `HealthCheckProgram` (no job; Slurm passes no arguments and only
//! `SLURMD_NODENAME`), and what `gpu-health health-check` does by hand.
//!
//! The same probe, checks, Xid scan and drain rules as the prolog; no
//! verdict; plus the automatic return of `drain-until-clean` drains. One
//! `scontrol show node <self>` on a clean run (to learn whether the node
//! is drained and by whom); the failing path adds the brake's queries.

use crate::finding::{
    drain_reason, is_own_reason, own_reason, reason_clears_itself, Action, Finding, REASON_PREFIX,
};
use crate::ids::NodeName;
use crate::ops::dcgm;
use crate::ops::drain::resume_own;
use crate::ops::drain_record::{self, DrainRecord};
use crate::ops::escalation::{self, ReturnHistory};
use crate::ops::recovery::{self, ReturnDecision};
use crate::probe::ProbeOptions;
use crate::slurm::{NodeInfo, Scontrol};
use crate::state::StateFile;

use super::node_check::{self, NodeCheck};
use super::{act, RunContext};

/// What one health-check run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthAction {
    /// Nothing to do (clean and in service, or drained by someone else).
    Nothing,
    /// Drained now (or a gpu-health drain refreshed).
    Drained(String),
    /// A draining finding did not drain (configuration error, brake,
    /// someone else's drain, scontrol); it is pending.
    NotDrained(String),
    /// A drain-until-clean node went back to service.
    Returned,
    /// Drained by gpu-health and staying so; the text says until when.
    StaysDrained(String),
}

pub struct HealthReport {
    pub node: NodeName,
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

/// Run the health check on this node.
pub fn run(ctx: &RunContext) -> HealthReport {
    let opts = ProbeOptions {
        enable_accounting: false,
        topology: true,
        accounting_processes: false,
    };
    let mut check = node_check::check_node_for_drain(ctx, opts, None);
    for f in check.findings.iter().filter(|f| f.action > Action::Info) {
        log::warn!("{}", f.log_line());
    }
    let slurm = ctx.scontrol();
    let view = node_check::view(ctx, &check);
    let outcome = act::act(ctx, &slurm, &check.findings, check.pending.as_ref(), &view);
    node_check::commit(ctx, &mut check, ctx.config_ok() && outcome.kept);
    // One power sample of each running job's GPUs (their peak power).
    crate::records::sample_running_jobs(&ctx.state, &check.snapshot);
    if let Some(textfile) = &ctx.config().prometheus_textfile {
        // The live power in the node_exporter textfile, every health check.
        let live = crate::records::LivePower::of(&check.snapshot);
        if let Err(e) = crate::records::refresh_prometheus_live(&ctx.state, textfile, &live) {
            log::warn!("cannot refresh the Prometheus textfile: {e}");
        }
    }
    let action = match (&outcome.decision.drain_reason, outcome.not_drained()) {
        (_, Some(why)) => HealthAction::NotDrained(why.to_string()),
        (Some(reason), None) => HealthAction::Drained(reason.clone()),
        (None, None) => clean_action(ctx, &slurm, &mut check),
    };
    log::info!("health check on {}: {action:?}", ctx.node);
    HealthReport {
        node: ctx.node.clone(),
        findings: check.findings,
        action,
    }
}

/// No draining finding now: return a drain-until-clean node when it has
/// been quiet long enough.
fn clean_action(ctx: &RunContext, slurm: &Scontrol<'_>, check: &mut NodeCheck) -> HealthAction {
    let node = &ctx.node;
    let me = match slurm.show_node(node) {
        Ok(me) => me,
        Err(e) => {
            log::warn!("cannot ask Slurm about {node}: {e}");
            return HealthAction::Nothing;
        }
    };
    withdraw_stale_claim(ctx, slurm, me.as_ref());
    let reason = me
        .filter(|n| n.is_drained())
        .and_then(|n| n.reason)
        .filter(|r| is_own_reason(r));
    let Some(reason) = reason else {
        // In service, or someone else's drain: our record is stale.
        if drain_record::load(&ctx.state, node).is_ok_and(|r| r.is_some()) {
            log::info!("{node} is not drained by gpu-health any more; forgetting the drain record");
            drain_record::clear(&ctx.state);
        }
        return HealthAction::Nothing;
    };
    let record = match drain_record::load(&ctx.state, node) {
        Ok(r) => r,
        Err(e) => {
            log::warn!("drain record unusable: {e}");
            None
        }
    };
    if record.is_none() && reason_clears_itself(&reason) {
        // Drained before this version, or the state was lost: the quiet
        // time starts now.
        let kind = drain_record::reason_kind(&reason).unwrap_or(Action::DrainUntilClean);
        let rec = DrainRecord::new(node, &reason, kind, ctx.now_ms);
        if let Err(e) = drain_record::save(&ctx.state, &rec) {
            log::error!("cannot record the drain: {e}");
        }
    }
    let problems = recovery::clean_now(&check.findings, &check.snapshot, ctx.config_ok());
    let cfg = &ctx.config().recovery;
    match recovery::auto_return(cfg, &reason, record.as_ref(), &problems, ctx.now_ms) {
        ReturnDecision::Return => {
            let kinds = record.as_ref().map_or_else(
                || vec![escalation::fault_kind(reason_body(&reason))],
                |r| {
                    r.findings
                        .iter()
                        .map(|s| escalation::fault_kind(s))
                        .collect()
                },
            );
            confirm_and_return(ctx, slurm, check, kinds)
        }
        ReturnDecision::Wait(why) | ReturnDecision::NotOurs(why) => HealthAction::StaysDrained(why),
    }
}

/// A brake claim of this node left behind by a run that could not
/// withdraw it (killed, or out of time) is void already; remove it so
/// that the node's Comment does not keep it.
fn withdraw_stale_claim(ctx: &RunContext, slurm: &Scontrol<'_>, me: Option<&NodeInfo>) {
    let lifetime = crate::ops::brake::claim_lifetime_ms(&ctx.config().brake);
    let Some(stamp) = me.and_then(|n| n.claim_ms) else {
        return;
    };
    if crate::time::unix_ms().saturating_sub(stamp) <= lifetime {
        return;
    }
    match slurm.release_claim(&ctx.node) {
        Ok(()) => log::info!("removed a stale drain-brake claim of {}", ctx.node),
        Err(e) => log::warn!(
            "cannot remove the stale drain-brake claim of {}: {e}",
            ctx.node
        ),
    }
}

/// The last step before a node returns: DCGM, when installed, must not
/// find a hardware fault.
fn confirm_and_return(
    ctx: &RunContext,
    slurm: &Scontrol<'_>,
    check: &mut NodeCheck,
    kinds: Vec<String>,
) -> HealthAction {
    let node = &ctx.node;
    if ctx.config().dcgm.before_return {
        let outcome = dcgm::run_diag(&ctx.config().dcgm, &[]);
        log::info!("before returning {node}: {}", outcome.describe());
        let found = outcome.findings();
        if drain_reason(&found).is_some() {
            check.findings.extend(found.iter().cloned());
            let view = crate::ops::pending::RunView {
                fresh_fault: true,
                ..node_check::view(ctx, check)
            };
            let acted = act::act(ctx, slurm, &found, None, &view);
            return match (acted.decision.drain_reason.clone(), acted.not_drained()) {
                (_, Some(why)) => HealthAction::NotDrained(why.to_string()),
                (Some(reason), None) => HealthAction::Drained(reason),
                (None, None) => HealthAction::StaysDrained("DCGM found a fault".into()),
            };
        }
        check.findings.extend(found);
    }
    match resume_own(slurm, &ctx.state, node) {
        Ok(()) => {
            log::warn!("{node} returned to service: clean for the quiet time");
            remember_return(ctx, kinds);
            HealthAction::Returned
        }
        Err(e) => {
            log::error!("could not return {node} to service: {e}");
            HealthAction::StaysDrained(format!("scontrol resume failed: {e}"))
        }
    }
}

/// After the return was made: count it for escalation.
fn remember_return(ctx: &RunContext, kinds: Vec<String>) {
    let window_ms = ctx.config().recovery.escalate_window_ms();
    let now = ctx.now_ms;
    let saved = ctx.state.update(StateFile::ReturnHistory, |h| {
        let mut h: ReturnHistory = h.unwrap_or_default();
        h.record(now, kinds, window_ms);
        (Some(h), ())
    });
    if let Err(e) = saved {
        log::error!("cannot record the automatic return (escalation will not count it): {e}");
    }
}

/// A gpu-health reason without its prefix, its kind and whatever Slurm
/// appended (through the one parser of our reasons).
fn reason_body(reason: &str) -> &str {
    let ours = own_reason(reason).map_or(reason, |(r, _)| r);
    let body = ours.strip_prefix(REASON_PREFIX).unwrap_or(ours).trim();
    body.rsplit_once(" (").map_or(body, |(b, _)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_body_leaves_out_prefix_kind_and_slurms_addition() {
        for r in [
            "gpu-health: Xid 31 GPU0 0000:18:00.0 pid=7 (drain-until-clean)",
            "gpu-health: Xid 31 GPU0 0000:18:00.0 pid=7 (drain-until-clean) : Not responding",
        ] {
            assert_eq!(reason_body(r), "Xid 31 GPU0 0000:18:00.0 pid=7");
            assert_eq!(escalation::fault_kind(reason_body(r)), "Xid 31");
        }
    }
}
