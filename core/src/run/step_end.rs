//! The step-end run (`gpu-health step-end`, which the SPANK plugin starts
//! when a step's last task on a node has ended): the step's GPUs that came
//! near out of memory, as one notice for the job's user. Read only: it
//! drains nothing, stores nothing and moves no cursor (the epilog makes
//! the job's record).
//!
//! Whose GPUs: the step's list comes from the job's environment
//! (`SLURM_STEP_GPUS`), which the job's user can set to anything. Figures
//! are given only for the GPUs of that list that the job owns as the root
//! Prolog recorded them from slurmd's `SLURM_JOB_GPUS` (the job's verdict,
//! [`recorded_job_gpus`]); without that record, none at all. Another job's
//! peak never reaches this job's output.

use std::time::Duration;

use crate::ids::JobId;
use crate::probe::{self, ProbeOptions};
use crate::records::{near_oom_since, step_notice};
use crate::state::StateDir;
use crate::text::printable;
use crate::verdict::JobVerdict;

use super::RunContext;

/// Which step ended, on which GPUs, since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedStep {
    pub job_id: Option<JobId>,
    /// `12.0`, `12.batch`: how the user knows the step.
    pub step: String,
    /// The GPUs the step claims on this node (the node's NVML indices),
    /// as the job's environment says: checked against the job's own.
    pub gpus: Vec<u32>,
    /// Unix ms when the step started on this node.
    pub since_ms: u64,
}

/// The job's GPUs on this node as the root Prolog recorded them (its
/// verdict's `job_gpus`, from slurmd's SLURM_JOB_GPUS); `Err(why)` when
/// there is no such record to trust.
pub fn recorded_job_gpus(state: &StateDir, job: JobId) -> Result<Vec<u32>, String> {
    match state.load::<JobVerdict>(job) {
        Ok(Some(v)) if v.job_id != job => Err(format!(
            "the verdict file of job {job} holds job {}",
            v.job_id
        )),
        Ok(Some(v)) if v.job_gpus.is_empty() => {
            Err(format!("the Prolog recorded no GPUs for job {job}"))
        }
        Ok(Some(v)) => Ok(v.job_gpus),
        Ok(None) => Err(match state.problem() {
            Some(why) => format!(
                "state directory {} unusable ({why}): the job's GPUs are unknown",
                printable(&state.root().display().to_string())
            ),
            None => format!(
                "no verdict of the Prolog for job {job} on this node: the job's GPUs are unknown"
            ),
        }),
        Err(e) => Err(format!("the verdict of job {job} is unreadable: {e}")),
    }
}

/// Pure: the claimed GPUs split into the job's own and the others, each
/// in the claim's order.
pub fn split_claim(claimed: &[u32], job_gpus: &[u32]) -> (Vec<u32>, Vec<u32>) {
    claimed.iter().partition(|g| job_gpus.contains(g))
}

/// `0,2,3`: a GPU list for a log line.
pub fn gpu_list(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The notice for the job's user, when one of the step's GPUs that the
/// job owns came near its memory; `None` otherwise (and when NVML gives
/// no figure, or the job's GPUs are unknown: logged).
pub fn run(ctx: &RunContext, step: &EndedStep) -> Option<String> {
    let cfg = ctx.config();
    if step.gpus.is_empty() {
        return None;
    }
    let name = printable(&step.step);
    let Some(job) = step.job_id else {
        log::info!("step {name}: no near-OOM figures: no job id (--job) to find the job's GPUs by");
        return None;
    };
    let job_gpus = match recorded_job_gpus(&ctx.state, job) {
        Ok(g) => g,
        Err(why) => {
            log::info!("step {name}: no near-OOM figures: {why}");
            return None;
        }
    };
    let (gpus, others) = split_claim(&step.gpus, &job_gpus);
    if !others.is_empty() {
        log::warn!(
            "job {job} step {name}: GPU(s) {} are not the job's (the Prolog recorded {}): never reported to it",
            gpu_list(&others),
            gpu_list(&job_gpus)
        );
    }
    if gpus.is_empty() {
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
        log::info!("step {name}: no near-OOM figures: {e}");
        return None;
    }
    probe::number_as_on_node_in_job(&mut snapshot, &cfg.sysfs_root, job.get());
    let share = cfg.thresholds.near_oom_share;
    let found = near_oom_since(&snapshot, &gpus, step.since_ms, ctx.now_ms, share);
    let notice = step_notice(ctx.node.as_str(), &name, &found, share)?;
    log::warn!("job {job}: {notice}");
    Some(notice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_jobs_own_gpus_are_kept() {
        let (mine, others) = split_claim(&[0, 1, 2, 3, 4, 5, 6, 7], &[2, 3]);
        assert_eq!(mine, vec![2, 3]);
        assert_eq!(others, vec![0, 1, 4, 5, 6, 7]);
        assert_eq!(split_claim(&[6], &[2, 3]), (vec![], vec![6]));
        assert_eq!(gpu_list(&[0, 2]), "0,2");
    }

    #[test]
    fn the_record_must_be_the_jobs() {
        let t = tempfile::tempdir().unwrap();
        let state = StateDir::open(&t.path().join("state"));
        let job = JobId::from(42);
        let why = recorded_job_gpus(&state, job).unwrap_err();
        assert!(why.contains("no verdict"), "{why}");
        let verdict = |id: u32, gpus: Vec<u32>| JobVerdict {
            job_id: JobId::from(id),
            node: "n1".into(),
            mode: crate::verdict::Mode::Warn,
            written_at_ms: 0,
            job_gpus: gpus,
            findings: Vec::new(),
            config_error: None,
        };
        state.save(job, &verdict(42, vec![2, 3])).unwrap();
        assert_eq!(recorded_job_gpus(&state, job).unwrap(), vec![2, 3]);
        state.save(job, &verdict(42, vec![])).unwrap();
        assert!(recorded_job_gpus(&state, job)
            .unwrap_err()
            .contains("no GPUs"));
        state.save(job, &verdict(7, vec![0])).unwrap();
        assert!(recorded_job_gpus(&state, job)
            .unwrap_err()
            .contains("holds job 7"));
        let unusable = StateDir::open_existing(&t.path().join("missing"));
        assert!(recorded_job_gpus(&unusable, job)
            .unwrap_err()
            .contains("unusable"));
    }
}
