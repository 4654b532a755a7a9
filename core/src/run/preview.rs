//! What the Prolog would do on this node now, for `gpu-health check`:
//! the same checks (saved histories read, never written), the node's fault
//! ledger as it is on disk, the same decision. Nothing is written and
//! Slurm is not asked, so "drain" means "would drain, brake and Slurm
//! permitting".

use crate::finding::{Action, Finding};
use crate::ledger::{Ledger, Plan};

use super::act;
use super::node_check::NodeCheck;
use super::RunContext;

/// The Prolog's decision for a job starting now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WouldDo {
    /// Drain the node with this reason (its kind is the gravest fault's).
    Drain {
        reason: String,
        kind: Action,
    },
    /// Not drain: the configuration has an error (a bad file never drains).
    Hold {
        why: String,
    },
    /// Let jobs start, warned: strict jobs (`--gpu-health=strict`) are
    /// refused on these findings.
    WarnStrict {
        findings: Vec<String>,
    },
    Nothing,
}

impl WouldDo {
    /// One line for a table or a log.
    pub fn describe(&self) -> String {
        match self {
            WouldDo::Drain { reason, .. } => format!("the prolog would drain: {reason}"),
            WouldDo::Hold { why } => format!("the prolog would not drain: {why}"),
            WouldDo::WarnStrict { findings } => format!(
                "the prolog would warn jobs and refuse strict ones: {}",
                findings.join("; ")
            ),
            WouldDo::Nothing => "the prolog would let jobs start".into(),
        }
    }
}

/// Judge `check` and the saved ledger as the Prolog would.
pub fn prolog_would(ctx: &RunContext, check: &NodeCheck) -> WouldDo {
    let mut ledger = act::peek(ctx).unwrap_or_else(|| Ledger::new(ctx.node.as_str()));
    ledger.observe(
        &check.findings,
        &act::node_run_view(ctx),
        &ctx.config().recovery,
        &ctx.config().remediation,
    );
    let reboot = ledger
        .reboot_wanted(&ctx.config().remediation, ctx.now_ms)
        .is_some();
    match ledger.plan_marked(ctx.config_ok(), reboot) {
        Plan::Drain { reason, .. } => WouldDo::Drain {
            kind: ledger.gravest().unwrap_or(Action::Drain),
            reason,
        },
        Plan::Hold { why } => WouldDo::Hold { why },
        Plan::Quiet => {
            let warned: Vec<String> = check
                .findings
                .iter()
                .filter(|f| f.action == Action::Warn)
                .map(|f: &Finding| f.summary.clone())
                .collect();
            if warned.is_empty() {
                WouldDo::Nothing
            } else {
                WouldDo::WarnStrict { findings: warned }
            }
        }
    }
}

/// The acceptance tier the node waits for, if any (`Ledger::proof_summary`),
/// from the ledger on disk.
pub fn acceptance_due(ctx: &RunContext) -> Option<String> {
    act::peek(ctx)?.proof_summary()
}
