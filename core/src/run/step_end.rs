//! The step-end run (`gpu-health step-end`, which the SPANK plugin starts
//! when a step's last task on a node has ended): the step's GPUs that came
//! near out of memory, as one notice for the job's user. Read only: it
//! drains nothing, stores nothing and moves no cursor (the epilog makes
//! the job's record).

use std::time::Duration;

use crate::ids::JobId;
use crate::probe::{self, ProbeOptions};
use crate::records::{near_oom_since, step_notice};

use super::RunContext;

/// Which step ended, on which GPUs, since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedStep {
    pub job_id: Option<JobId>,
    /// `12.0`, `12.batch`: how the user knows the step.
    pub step: String,
    /// The step's GPUs on this node (the node's NVML indices).
    pub gpus: Vec<u32>,
    /// Unix ms when the step started on this node.
    pub since_ms: u64,
}

/// The notice for the job's user, when one of the step's GPUs came near
/// its memory; `None` otherwise (and when NVML gives no figure).
pub fn run(ctx: &RunContext, step: &EndedStep) -> Option<String> {
    let cfg = ctx.config();
    if step.gpus.is_empty() {
        return None;
    }
    let opts = ProbeOptions {
        accounting_processes: true,
        enable_accounting: false,
        topology: false,
    };
    let deadline = Duration::from_millis(cfg.nvml_deadline_ms.min(cfg.step_end.timeout_ms));
    let mut snapshot = probe::probe_with_deadline(cfg.nvml_library.as_deref(), opts, deadline);
    if let Some(e) = &snapshot.nvml_error {
        log::info!("step {}: no near-OOM figures: {e:?}", step.step);
        return None;
    }
    if let Some(job) = step.job_id {
        probe::number_as_on_node_in_job(&mut snapshot, &cfg.sysfs_root, job.get());
    }
    let share = cfg.thresholds.near_oom_share;
    let found = near_oom_since(&snapshot, &step.gpus, step.since_ms, ctx.now_ms, share);
    let notice = step_notice(ctx.node.as_str(), &step.step, &found, share)?;
    log::warn!(
        "job {}: {notice}",
        step.job_id.map_or("?".to_string(), |j| j.to_string())
    );
    Some(notice)
}
