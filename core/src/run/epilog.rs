//! The Epilog run: the job's record (energy, sampled peak power, peak
//! memory, health deltas, Xids during the job), a drain when the job's GPUs broke meanwhile, the
//! Prometheus textfile, and the end of the job's state files.
//!
//! Order: decide and act on the job's faults first (drain, else keep them
//! pending), then store the record that says what was done, then remove
//! the job's state files.

use std::time::Duration;

use crate::config::Config;
use crate::finding::Finding;
use crate::ids::JobId;
use crate::ledger::{Plan, RunView};
use crate::probe::{self, ProbeOptions};
use crate::records::{
    self, build_record, delta_findings, during_job, JobEnd, JobMeta, JobRecord, JobStart,
    PowerPeaks, Stored, NO_START,
};
use crate::snapshot::NodeSnapshot;
use crate::state::StateFile;
use crate::xid::{self, Policy, RepeatHistory, XidEvent};

use super::act::{self, Turn};
use super::{prolog, JobEnv, RunContext};

/// Start snapshots older than this belong to jobs whose Epilog never ran
/// (longer than any sane time limit).
const STALE_START: Duration = Duration::from_secs(60 * 86_400);

/// What the epilog did.
#[derive(Debug)]
pub struct EpilogOutcome {
    /// `None` for a job without GPUs on this node (nothing to measure).
    pub record: Option<JobRecord>,
    pub stored: Option<Stored>,
}

/// The Epilog of `job`. Never fails (an Epilog that exits non-zero makes
/// Slurm drain the node with a vague reason).
pub fn run(ctx: &RunContext, job: &JobEnv, meta: &JobMeta) -> EpilogOutcome {
    for n in &job.notes {
        log::warn!("{n}");
    }
    let out = finish_job(ctx, job, meta);
    if let (Some(r), Some(stored)) = (&out.record, &out.stored) {
        log::info!(
            "job {} on {}: {} GPU(s), {:.0} J, record {stored}",
            r.job_id,
            r.node,
            r.gpus.len(),
            r.gpus.iter().filter_map(|g| g.energy_j).sum::<f64>()
        );
    }
    out
}

fn finish_job(ctx: &RunContext, job: &JobEnv, meta: &JobMeta) -> EpilogOutcome {
    let cfg = ctx.config();
    prolog::flush_spool(ctx);
    let nothing = EpilogOutcome {
        record: None,
        stored: None,
    };
    let Some(job_id) = job.job_id else {
        log::warn!("no SLURM_JOB_ID: no job record");
        return nothing;
    };
    let start = job_start(ctx, job_id);
    let job_gpus = match (&job.job_gpus, &start) {
        (g, _) if !g.is_empty() => g.clone(),
        (_, Ok(s)) => s.job_gpus.clone(),
        _ => Vec::new(),
    };
    if job_gpus.is_empty() {
        remove_job_files(ctx, job_id);
        return nothing;
    }
    let snapshot = probe_job(ctx, job_id);
    let xids = job_xids(cfg, &snapshot, &start, &job_gpus, ctx.now_ms);
    let power_peaks = match ctx.state.load::<PowerPeaks>(job_id) {
        Ok(p) => p,
        Err(e) => {
            log::info!("job {job_id}: health-check power samples unreadable: {e}");
            None
        }
    };
    let mut record = build_record(
        start.as_ref().map_err(Clone::clone),
        JobEnd {
            job_id,
            node: ctx.node.clone(),
            meta,
            end_ms: ctx.now_ms,
            job_gpus: &job_gpus,
            snapshot: &snapshot,
            xids,
            power_peaks: power_peaks.as_ref(),
        },
    );
    let share = cfg.thresholds.near_oom_share;
    for gpu in records::flag_near_oom(&mut record, share) {
        log::warn!(
            "job {job_id}: GPU{gpu}'s peak memory reached {:.0}% of its memory (near out of memory)",
            share * 100.0
        );
    }
    act_on_faults(ctx, job_id, &mut record);
    let stored = keep_record(ctx, job_id, &record, &snapshot);
    EpilogOutcome {
        record: Some(record),
        stored: Some(stored),
    }
}

/// The job's start snapshot (the Prolog's), or why there is none.
fn job_start(ctx: &RunContext, job_id: JobId) -> Result<JobStart, String> {
    match ctx.state.load::<JobStart>(job_id) {
        Ok(Some(s)) if s.job_id == job_id => Ok(s),
        Ok(Some(_)) => Err("start snapshot of another job under this job's name".to_string()),
        Ok(None) => Err(NO_START.to_string()),
        Err(e) => Err(format!("start snapshot unusable: {e}")),
    }
}

/// The job's GPUs at its end, numbered as on the node.
fn probe_job(ctx: &RunContext, job_id: JobId) -> NodeSnapshot {
    let cfg = ctx.config();
    let opts = ProbeOptions {
        accounting_processes: true,
        enable_accounting: false,
        topology: false,
    };
    let deadline = Duration::from_millis(cfg.nvml_deadline_ms);
    let mut snapshot = probe::probe_with_deadline(cfg.nvml_library.as_deref(), opts, deadline);
    probe::number_as_on_node_in_job(&mut snapshot, &cfg.sysfs_root, job_id.get());
    snapshot
}

/// Store the record, update the textfile and remove the job's files.
fn keep_record(
    ctx: &RunContext,
    job_id: JobId,
    record: &JobRecord,
    snapshot: &NodeSnapshot,
) -> Stored {
    let cfg = ctx.config();
    let stored = match record.to_line() {
        Ok(line) => records::store_line(&ctx.state, &cfg.records_dir(), ctx.now_ms, job_id, &line),
        Err(e) => Stored::Lost {
            why: format!("cannot serialise the record: {e}"),
        },
    };
    if let Some(textfile) = &cfg.prometheus_textfile {
        if let Err(e) = records::update_prometheus(
            &ctx.state,
            textfile,
            record,
            Some(&records::LivePower::of(snapshot)),
        ) {
            log::warn!("prometheus textfile not updated: {e}");
        }
    }
    remove_job_files(ctx, job_id);
    for stale in ctx.state.stale_job_starts(STALE_START) {
        if ctx.state.remove(StateFile::JobStart(stale)).is_ok() {
            log::info!("removed the stale start snapshot of job {stale}");
        }
    }
    stored
}

/// Xid events on the job's GPUs since the prolog's cursor. The node's own
/// cursor is not touched: the next node check judges them again.
fn job_xids(
    cfg: &Config,
    snapshot: &NodeSnapshot,
    start: &Result<JobStart, String>,
    job_gpus: &[u32],
    now_ms: u64,
) -> Result<Vec<XidEvent>, String> {
    let start = start.as_ref().map_err(|_| NO_START.to_string())?;
    let cursor = start
        .kernel_log_cursor
        .as_ref()
        .ok_or("the prolog had no kernel-log position")?;
    let read = xid::read_since(&cfg.kernel_log, Some(cursor), &cfg.xid, snapshot, now_ms)
        .map_err(|e| format!("kernel log unreadable: {e}"))?;
    if read.restarted {
        // Rotated, truncated or rebooted: the read began at the start of
        // the log, so keep only events dated inside the job's window.
        log::info!(
            "kernel log restarted since job start: {}",
            read.notes.join("; ")
        );
    }
    let job_pcis: Vec<&str> = job_gpus
        .iter()
        .filter_map(|&i| {
            snapshot
                .gpu_by_index(i)
                .and_then(|g| g.pci_bus_id.as_deref())
                .or_else(|| start.gpu(i)?.pci.as_deref())
        })
        .collect();
    Ok(read
        .events
        .into_iter()
        .filter(|e| {
            e.kind == xid::EventKind::Xid
                && (!read.restarted || e.time_ms.is_some_and(|t| t >= start.start_ms))
                && (e.gpu.is_some_and(|g| job_gpus.contains(&g))
                    || e.pci.as_deref().is_some_and(|p| job_pcis.contains(&p)))
        })
        .collect())
}

/// Drain the node when a fatal Xid or a new uncorrectable ECC error hit
/// the job's GPUs, else keep the finding pending; the record says which.
fn act_on_faults(ctx: &RunContext, job_id: JobId, record: &mut JobRecord) {
    let policy = Policy::from_config(&ctx.config().xid);
    let job_text = job_id.to_string();
    let mut findings: Vec<Finding> = xid::judge(
        &record.xids,
        &policy,
        &mut RepeatHistory::default(),
        ctx.now_ms,
        xid::Seen::DuringJob,
    )
    .into_iter()
    .map(|mut f| {
        f.summary = during_job(&f.summary, &job_text);
        f
    })
    .collect();
    findings.extend(delta_findings(record));
    if !findings.iter().any(|f| f.action.drains()) {
        return;
    }
    for f in findings.iter().filter(|f| f.action.drains()) {
        log::error!("job {job_id}: {}", f.log_line());
    }
    let mut turn = match Turn::take(ctx) {
        Ok(t) => t,
        Err(busy) => {
            // The faults of the kernel log are read again by the node's
            // next check; the counters are measured again by its probe.
            let why = act::busy_note(&ctx.node, &busy);
            log::error!("job {job_id}: {why}");
            record.drain_failed = Some(why);
            return;
        }
    };
    let view = RunView {
        clock: ctx.clock(),
        config_ok: ctx.config_ok(),
        scans_kernel_log: false,
        at_job_end: true,
    };
    let outcome = act::act(&mut turn, &findings, &view);
    turn.commit();
    match (&outcome.plan, outcome.not_drained()) {
        (_, Some(why)) => record.drain_failed = Some(why.to_string()),
        (Plan::Drain { reason, .. }, None) if outcome.drained() => {
            record.drained = Some(reason.clone());
        }
        _ => {}
    }
}

/// The job is over: its verdict and start snapshot go (never through a
/// symlinked jobs directory: the state module refuses it).
fn remove_job_files(ctx: &RunContext, job_id: JobId) {
    for f in [
        StateFile::JobStart(job_id),
        StateFile::JobVerdict(job_id),
        StateFile::JobPowerPeaks(job_id),
    ] {
        if let Err(e) = ctx.state.remove(f) {
            log::warn!("cannot remove {}: {e}", ctx.state.path_of(f).display());
        }
    }
}
