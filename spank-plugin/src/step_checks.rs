//! What a step hears at launch: the prolog's verdict and the TP placement,
//! judged by the job's mode. Pure apart from reading the state files
//! (through the core's state module, as every other reader).

use gpu_health_core::finding::Action;
use gpu_health_core::ids::JobId;
use gpu_health_core::run::step_end::split_claim;
use gpu_health_core::snapshot::{GpuLink, NodeTopology};
use gpu_health_core::state::StateDir;
use gpu_health_core::topology::TpViolation;
use gpu_health_core::verdict::{job_findings, JobVerdict, Mode};

/// At most this many TP violations are spelled out (an 8-GPU PCIe node
/// has 28 non-NVLink pairs per group).
const MAX_SHOWN: usize = 4;

#[derive(Debug, Clone, PartialEq)]
pub enum VerdictRead {
    Found(JobVerdict),
    Missing,
    Unreadable(String),
}

/// The prolog's verdict on the job, read through the state module (no
/// symlink, regular file, size cap, trusted owner: a planted FIFO or a
/// link to /dev/zero is an unreadable verdict, never a hang).
pub fn read_verdict(state: &StateDir, job_id: JobId) -> VerdictRead {
    if let Some(why) = state.problem() {
        return VerdictRead::Unreadable(format!(
            "state directory {} unusable: {why}",
            state.root().display()
        ));
    }
    match state.load::<JobVerdict>(job_id) {
        Ok(Some(v)) => VerdictRead::Found(v),
        Ok(None) => VerdictRead::Missing,
        Err(e) => VerdictRead::Unreadable(e.to_string()),
    }
}

/// The GPU link matrix the prolog and health check last saw, if any.
pub fn read_topology(state: &StateDir) -> Option<Vec<Vec<GpuLink>>> {
    state.load::<NodeTopology>(()).ok()??.links
}

/// Messages for the user: refusals stop the step, warnings do not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepReport {
    pub refusals: Vec<String>,
    pub warnings: Vec<String>,
}

impl StepReport {
    fn add(&mut self, mode: Mode, message: String) {
        match mode {
            Mode::Strict => self.refusals.push(message),
            Mode::Warn => self.warnings.push(message),
            Mode::Off => {}
        }
    }

    pub fn merge(&mut self, other: StepReport) {
        self.refusals.extend(other.refusals);
        self.warnings.extend(other.warnings);
    }

    /// The lines to print, refusals first with how to run anyway.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .refusals
            .iter()
            .map(|r| format!("gpu-health: {r}"))
            .collect();
        if !self.refusals.is_empty() {
            out.push(
                "gpu-health: strict mode refuses this step (--gpu-health=warn runs it anyway)"
                    .into(),
            );
        }
        out.extend(
            self.warnings
                .iter()
                .map(|w| format!("gpu-health: warning: {w}")),
        );
        out
    }
}

/// The prolog's findings on the job's GPUs under `mode`.
pub fn health_report(mode: Mode, node: &str, job_id: JobId, verdict: &VerdictRead) -> StepReport {
    let mut report = StepReport::default();
    if mode == Mode::Off {
        return report;
    }
    match verdict {
        VerdictRead::Found(v) => {
            for f in job_findings(&v.findings, &v.job_gpus) {
                if f.action < Action::Warn {
                    continue;
                }
                // Name the GPU unless the finding's own text already does.
                let gpu = match (f.gpu, f.pci.as_deref()) {
                    (Some(g), _) if names_gpu(&f.message, g) => String::new(),
                    (Some(g), Some(pci)) => format!(" GPU{g} ({pci})"),
                    (Some(g), None) => format!(" GPU{g}"),
                    _ => String::new(),
                };
                report.add(
                    mode,
                    format!("node {node}{gpu}: {} [{}]", f.message, f.check),
                );
            }
            if let Some(e) = &v.config_error {
                report.warnings.push(format!(
                    "node {node}: gpu-health configuration unusable, checks ran with defaults: {e}"
                ));
            }
        }
        // Only strict jobs need the verdict to exist: warn jobs run anyway.
        VerdictRead::Missing if mode == Mode::Strict => report.refusals.push(format!(
            "node {node}: no gpu-health verdict for job {job_id} (the prolog did not check this node)"
        )),
        VerdictRead::Unreadable(e) if mode == Mode::Strict => report
            .refusals
            .push(format!("node {node}: gpu-health verdict unreadable: {e}")),
        VerdictRead::Missing | VerdictRead::Unreadable(_) => {}
    }
    report
}

/// Does `text` mention `GPU<g>` (and not `GPU<g>0`)?
fn names_gpu(text: &str, g: u32) -> bool {
    let word = format!("GPU{g}");
    text.match_indices(&word).any(|(i, _)| {
        !text[i + word.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// TP placement violations on this node under `mode`, as one message.
pub fn tp_report(mode: Mode, node: &str, tp: u32, violations: &[TpViolation]) -> StepReport {
    let mut report = StepReport::default();
    if violations.is_empty() {
        return report;
    }
    let mut text: Vec<String> = violations
        .iter()
        .take(MAX_SHOWN)
        .map(ToString::to_string)
        .collect();
    if violations.len() > MAX_SHOWN {
        text.push(format!("and {} more", violations.len() - MAX_SHOWN));
    }
    report.add(
        mode,
        format!("node {node}: --tp-size={tp}: {}", text.join("; ")),
    );
    report
}

/// The job's GPUs on this node in the order local ranks use them: the
/// verdict's list, else the step's or job's GPU list from the environment.
pub fn job_gpus(verdict: &VerdictRead, env: impl Fn(&str) -> Option<String>) -> Vec<u32> {
    if let VerdictRead::Found(v) = verdict {
        if !v.job_gpus.is_empty() {
            return v.job_gpus.clone();
        }
    }
    ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS"]
        .iter()
        .filter_map(|k| env(k))
        .find_map(|s| {
            gpu_health_core::verdict::parse_gpu_list(&s)
                .ok()
                .filter(|l| !l.is_empty())
        })
        .unwrap_or_default()
}

/// Steps that ran shorter than this get no near-OOM probe at their end.
/// The probe (`gpu-health step-end`: a process, NVML and its accounting)
/// costs a few milliseconds at the end of every GPU step: for steps of
/// `srun true` and the like 5-17 ms on 60-100 ms (ci/bench-spank). A step
/// of a second or more pays it once, under 1% of its time; steps that
/// come near a GPU's memory (training, inference) run far longer, and a
/// short step's peak is still in the job's record (the Epilog's
/// `near_oom`).
pub const MIN_STEP_MS_FOR_NOTICE: u64 = 1000;

/// Does a step that ran `ran_ms` get the near-OOM probe?
pub fn long_enough_for_notice(ran_ms: u64) -> bool {
    ran_ms >= MIN_STEP_MS_FOR_NOTICE
}

/// The GPUs whose near-OOM figures the step's user may hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEndGpus {
    /// The step's GPUs that the job owns (all the job's when the step
    /// names none).
    pub report: Vec<u32>,
    /// GPUs the step's environment names that the job does not own.
    pub not_the_jobs: Vec<u32>,
}

/// Which GPUs `gpu-health step-end` gets at the end of a step.
///
/// `claimed` is the job environment's `SLURM_STEP_GPUS`: the job's user
/// can set it to anything, so it only narrows the job's own GPUs as the
/// root Prolog recorded them (the verdict's `job_gpus`, from slurmd's
/// SLURM_JOB_GPUS; the SPANK API has no item for the job's GPUs). Without
/// that record there is nothing to trust: `Err(why)`, and no figures.
pub fn step_end_gpus(claimed: Option<&str>, verdict: &VerdictRead) -> Result<StepEndGpus, String> {
    let job_gpus = match verdict {
        VerdictRead::Found(v) if !v.job_gpus.is_empty() => &v.job_gpus,
        VerdictRead::Found(_) => return Err("the Prolog recorded no GPUs for the job".into()),
        VerdictRead::Missing => {
            return Err("no verdict of the Prolog for the job: its GPUs are unknown".into())
        }
        VerdictRead::Unreadable(e) => return Err(format!("the job's verdict is unreadable: {e}")),
    };
    let claimed = claimed
        .and_then(|s| gpu_health_core::verdict::parse_gpu_list(s).ok())
        .filter(|l| !l.is_empty());
    Ok(match claimed {
        Some(c) => {
            let (report, not_the_jobs) = split_claim(&c, job_gpus);
            StepEndGpus {
                report,
                not_the_jobs,
            }
        }
        None => StepEndGpus {
            report: job_gpus.clone(),
            not_the_jobs: Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests;
