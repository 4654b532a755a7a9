//! The Prolog run: check the node before a job starts, drain it when a
//! fault asks for it (exit 1: Slurm requeues the job), and tell the job
//! what was found (its verdict, read by the SPANK plugin) and the Epilog
//! what the counters were (the job's start snapshot).
//!
//! The healthy path calls no Slurm command: one NVML probe, the checks,
//! the kernel-log scan, a few state files.

use crate::finding::{Action, Finding};
use crate::ops::dcgm;

use crate::probe::{self, ProbeOptions};
use crate::records::{self, JobStart};
use crate::state::StateFile;
use crate::verdict::{self, JobVerdict, Mode};

use super::node_check::{self, NodeCheck};
use super::{act, JobEnv, RunContext};

/// The Prolog of `job`. Returns the exit code: 0 lets the job start, 1
/// means the node was drained (or scontrol failed, which Slurm answers
/// with its own drain) and the job must go elsewhere.
pub fn run(ctx: &RunContext, job: &JobEnv) -> i32 {
    for n in &job.notes {
        log::warn!("{n}");
    }
    let cfg = ctx.config();
    let opts = ProbeOptions {
        enable_accounting: true,
        topology: true,
        accounting_processes: false,
    };
    // With PrologFlags=RunInJob the Prolog runs in the job's cgroup, whose
    // device rules may hide the node's other GPUs from NVML.
    let job_view = job
        .job_id
        .filter(|j| probe::seen_from_job(j.get()))
        .map(|_| job.job_gpus.len());
    let mut check = node_check::check_node_for_drain(ctx, opts, job_view);
    check.findings.extend(crate::checks::leftovers(
        &check.snapshot,
        &job.job_gpus,
        &cfg.thresholds,
    ));
    if job.mode == Mode::Strict && cfg.dcgm.strict_jobs {
        let outcome = dcgm::run_diag(&cfg.dcgm, &job.job_gpus);
        log::info!("strict job: {}", outcome.describe());
        let found = outcome.findings();
        check.fresh_fault |= found.iter().any(|f| f.action.drains());
        check.findings.extend(found);
    }
    log_findings(&check.findings);
    flush_spool(ctx);

    let slurm = ctx.scontrol();
    let view = node_check::view(ctx, &check);
    let outcome = act::act(ctx, &slurm, &check.findings, check.pending.as_ref(), &view);
    node_check::commit(ctx, &mut check, ctx.config_ok() && outcome.kept);

    save_job_start(ctx, job, &check);
    let code = match &outcome.drain {
        Some(crate::ops::drain::DrainOutcome::Drained) => 1,
        // Slurm drains the node itself ("Prolog error"): the job must not
        // start on a node that has a fault.
        Some(crate::ops::drain::DrainOutcome::Failed(_)) => 1,
        _ => 0,
    };
    if code == 0 {
        // Held back (brake, configuration error, someone else's drain):
        // the job runs, warned; strict jobs are refused by the plugin.
        if let Some(note) = act::not_drained_note(&outcome) {
            log::error!(
                "job {} starts on a faulty node: {}",
                job.job_id.map_or("-".into(), |j| j.to_string()),
                note.message
            );
            check.findings.push(note);
        }
    }
    write_verdict(ctx, job, &check);
    log::info!(
        "job {} on {}: {} findings, exit {code}, probe {} us",
        job.job_id.map_or("-".into(), |j| j.to_string()),
        ctx.node,
        check.findings.len(),
        check.snapshot.probe_us
    );
    code
}

pub(super) fn log_findings(findings: &[Finding]) {
    for f in findings {
        match f.action {
            Action::Info => log::info!("{}", f.log_line()),
            _ => log::warn!("{}", f.log_line()),
        }
    }
}

/// Records an earlier epilog could not append go out now.
pub(super) fn flush_spool(ctx: &RunContext) {
    match records::flush_pending(&ctx.state, &ctx.config().records_dir()) {
        Ok(0) => {}
        Ok(n) => log::info!("wrote {n} spooled job record(s)"),
        Err(e) => log::warn!("spooled job records stay spooled: {e}"),
    }
}

/// The counters of the job's GPUs from this probe, for the Epilog.
fn save_job_start(ctx: &RunContext, job: &JobEnv, check: &NodeCheck) {
    let Some(job_id) = job.job_id else {
        return;
    };
    if job.job_gpus.is_empty() {
        return;
    }
    let start = JobStart::from_snapshot(
        job_id,
        &ctx.node,
        &job.job_gpus,
        &check.snapshot,
        check.xid.cursor(),
        ctx.now_ms,
    );
    if let Err(e) = ctx.state.save(StateFile::JobStart(job_id), &start) {
        log::error!(
            "cannot save the start of job {job_id}; its record will lack energy and deltas: {e}"
        );
    }
}

fn write_verdict(ctx: &RunContext, job: &JobEnv, check: &NodeCheck) {
    let Some(job_id) = job.job_id else {
        return;
    };
    let v = JobVerdict {
        job_id,
        node: ctx.node.to_string(),
        mode: job.mode,
        written_at_ms: ctx.now_ms,
        job_gpus: job.job_gpus.clone(),
        findings: verdict::job_findings(&check.findings, &job.job_gpus),
        config_error: ctx.loaded.error.as_ref().map(|e| e.to_string()),
    };
    if let Err(e) = ctx.state.save(StateFile::JobVerdict(job_id), &v) {
        log::error!("cannot write the verdict of job {job_id}: {e}");
    }
}
