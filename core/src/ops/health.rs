//! Health-check mode: what `gpu-health-prolog` does as Slurm's
//! `HealthCheckProgram` (no job; Slurm passes no arguments and only
//! `SLURMD_NODENAME`), and what `gpu-health health-check` does by hand.
//!
//! The same probe, checks, Xid scan and drain rules as the prolog; no
//! verdict; plus the automatic return of `drain-until-clean` drains. One
//! `scontrol show node <self>` on a clean run (to learn whether the node
//! is drained and by whom); the failing path adds the brake's queries.

use crate::config::Config;
use crate::finding::{drain_reason, is_own_reason, reason_clears_itself, Finding};
use crate::gate::{self, NodeCheck};
use crate::probe::ProbeOptions;

use super::dcgm;
use super::drain::{self, DrainOutcome};
use super::drain_state::{self, DrainRecord};
use super::recovery::{self, ReturnDecision};

/// What one health-check run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthAction {
    /// Nothing to do (clean and in service, or drained by someone else).
    Nothing,
    /// Drained now (or a gpu-health drain refreshed).
    Drained(String),
    /// A draining finding did not drain (brake, foreign drain, scontrol).
    NotDrained(String),
    /// A drain-until-clean node went back to service.
    Returned,
    /// Drained by gpu-health and staying so; the text says until when.
    StaysDrained(String),
}

pub struct HealthReport {
    pub node: String,
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

/// Run the health check on `node` (this node).
pub fn run(cfg: &Config, config_ok: bool, node: &str, now_ms: u64) -> HealthReport {
    let opts = ProbeOptions {
        enable_accounting: false,
        topology: true,
        accounting_processes: false,
    };
    let mut check = gate::check_node_for_drain(cfg, opts, now_ms);
    for f in &check.findings {
        log::warn!("{}: {}", f.check, f.message);
    }
    let decision = gate::decide(&check.findings, config_ok);
    if let Some(why) = &decision.held_back {
        log::error!("{why}");
    }
    gate::persist(cfg, &mut check, now_ms);
    let action = match &decision.drain_reason {
        Some(reason) => drain_action(cfg, node, &check.findings, reason, now_ms),
        None => clean_action(cfg, config_ok, node, &mut check, now_ms),
    };
    log::info!("health check on {node}: {action:?}");
    HealthReport {
        node: node.to_string(),
        findings: check.findings,
        action,
    }
}

fn drain_action(
    cfg: &Config,
    node: &str,
    findings: &[Finding],
    reason: &str,
    now_ms: u64,
) -> HealthAction {
    match gate::drain_findings(cfg, node, findings, reason, now_ms) {
        DrainOutcome::Drained => HealthAction::Drained(reason.to_string()),
        DrainOutcome::HeldBack(why) | DrainOutcome::Foreign(why) | DrainOutcome::Failed(why) => {
            HealthAction::NotDrained(why)
        }
    }
}

/// No draining finding now: return a drain-until-clean node when it has
/// been quiet long enough.
fn clean_action(
    cfg: &Config,
    config_ok: bool,
    node: &str,
    check: &mut NodeCheck,
    now_ms: u64,
) -> HealthAction {
    let me = match drain::scontrol(cfg).show_nodes(Some(node)) {
        Ok(nodes) => nodes.into_iter().find(|n| n.name == node),
        Err(e) => {
            log::warn!("cannot ask Slurm about {node}: {e}");
            return HealthAction::Nothing;
        }
    };
    let reason = me
        .as_ref()
        .filter(|n| n.is_drained())
        .and_then(|n| n.reason.clone());
    let Some(reason) = reason.filter(|r| is_own_reason(r)) else {
        // In service, or someone else's drain: our record is stale.
        if drain_state::load_drain_record(&cfg.state_dir).is_ok_and(|r| r.is_some()) {
            log::info!("{node} is not drained by gpu-health any more; forgetting the drain record");
            drain_state::clear_drain_record(&cfg.state_dir);
        }
        return HealthAction::Nothing;
    };
    let record = match drain_state::load_drain_record(&cfg.state_dir) {
        Ok(r) => r.filter(|r| r.node == node),
        Err(e) => {
            log::warn!("drain record unusable: {e}");
            None
        }
    };
    if record.is_none() && reason_clears_itself(&reason) {
        // Drained before this version, or the state was lost: the quiet
        // time starts now.
        let kind =
            drain_state::reason_kind(&reason).unwrap_or(crate::finding::Action::DrainUntilClean);
        let rec = DrainRecord::new(node, &reason, kind, now_ms);
        if let Err(e) = drain_state::save_drain_record(&cfg.state_dir, &rec) {
            log::error!("cannot record the drain: {e}");
        }
    }
    let problems = recovery::clean_now(&check.findings, &check.snapshot, config_ok);
    match recovery::auto_return(&cfg.recovery, &reason, record.as_ref(), &problems, now_ms) {
        ReturnDecision::Return => confirm_and_return(cfg, node, check, now_ms),
        ReturnDecision::Wait(why) => HealthAction::StaysDrained(why),
        ReturnDecision::NotOurs(why) => HealthAction::StaysDrained(why),
    }
}

/// The last step before a node returns: DCGM, when installed, must not
/// find a hardware fault.
fn confirm_and_return(
    cfg: &Config,
    node: &str,
    check: &mut NodeCheck,
    now_ms: u64,
) -> HealthAction {
    if cfg.dcgm.before_return {
        let outcome = dcgm::run_diag(&cfg.dcgm, &[]);
        log::info!("before returning {node}: {}", outcome.describe());
        let found = outcome.findings();
        check.findings.extend(found.iter().cloned());
        if let Some(reason) = drain_reason(&found) {
            return drain_action(cfg, node, &check.findings, &reason, now_ms);
        }
    }
    match drain::resume_own(cfg, node) {
        Ok(()) => {
            drain_state::clear_held_back(&cfg.state_dir);
            log::warn!("{node} returned to service: clean for the quiet time");
            HealthAction::Returned
        }
        Err(e) => {
            log::error!("could not return {node} to service: {e}");
            HealthAction::StaysDrained(format!("scontrol resume failed: {e}"))
        }
    }
}
