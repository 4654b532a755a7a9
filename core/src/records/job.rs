//! The two edges: the prolog saves the job's start, the epilog turns the
//! job's end into a record and acts on what it shows.

use std::path::Path;
use std::time::Duration;

use crate::config::Config;
use crate::finding::Finding;
use crate::gate::{self, JobContext, NodeCheck};
use crate::probe::{self, ProbeOptions};
use crate::snapshot::NodeSnapshot;
use crate::state::StatePaths;
use crate::xid::{self, Cursor, Policy, RepeatHistory, XidEvent};

use super::compute::{build_record, delta_findings, during_job, JobEnd, JobMeta, NO_START};
use super::record::JobRecord;
use super::start::{self, JobStart};
use super::store::{self, Stored};

/// Prolog: flush spooled records, then save the counters of the job's
/// GPUs from the prolog's own probe. Never fails (errors are logged).
pub fn save_job_start(cfg: &Config, ctx: &JobContext, check: &NodeCheck, now_ms: u64) {
    flush_spool(cfg);
    let Some(job_id) = ctx.job_id.as_deref() else {
        return;
    };
    if ctx.job_gpus.is_empty() {
        return;
    }
    let cursor = check.xid.cursor();
    let start = JobStart::from_snapshot(
        job_id,
        &ctx.node,
        &ctx.job_gpus,
        &check.snapshot,
        cursor,
        now_ms,
    );
    if let Err(e) = start::save(&cfg.state_dir, &start) {
        log::error!(
            "cannot save the start of job {job_id}; its record will lack energy and deltas: {e}"
        );
    }
}

fn flush_spool(cfg: &Config) {
    match store::flush_pending(&cfg.state_dir, &cfg.records_dir()) {
        Ok(0) => {}
        Ok(n) => log::info!("wrote {n} spooled job record(s)"),
        Err(e) => log::warn!("spooled job records stay spooled: {e}"),
    }
}

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

/// Epilog: probe, build the record, drain after a fatal fault, store the
/// record, update the textfile, remove the job's state files. Never fails.
/// `config_ok`: the configuration file was usable (else nothing drains).
pub fn finish_job(
    cfg: &Config,
    config_ok: bool,
    ctx: &JobContext,
    meta: &JobMeta,
    now_ms: u64,
) -> EpilogOutcome {
    flush_spool(cfg);
    let nothing = EpilogOutcome {
        record: None,
        stored: None,
    };
    let Some(job_id) = ctx.job_id.as_deref() else {
        log::warn!("no SLURM_JOB_ID: no job record");
        return nothing;
    };
    let start = match start::load(&cfg.state_dir, job_id) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(NO_START.to_string()),
        Err(e) => Err(format!("start snapshot unusable: {e}")),
    };
    let job_gpus = match (&ctx.job_gpus, &start) {
        (g, _) if !g.is_empty() => g.clone(),
        (_, Ok(s)) => s.job_gpus.clone(),
        _ => Vec::new(),
    };
    if job_gpus.is_empty() {
        remove_state_files(&cfg.state_dir, job_id);
        return nothing;
    }
    let opts = ProbeOptions {
        accounting_processes: true,
        enable_accounting: false,
        topology: false,
    };
    let deadline = Duration::from_millis(cfg.nvml_deadline_ms);
    let snapshot = probe::probe_with_deadline(cfg.nvml_library.as_deref(), opts, deadline);
    let cursor = start
        .as_ref()
        .ok()
        .and_then(|s| s.kernel_log_cursor.as_ref());
    let xids = job_xids(cfg, cursor, &snapshot, &start, &job_gpus, now_ms);
    let mut record = build_record(
        start.as_ref().map_err(Clone::clone),
        JobEnd {
            job_id,
            node: &ctx.node,
            meta,
            end_ms: now_ms,
            job_gpus: &job_gpus,
            snapshot: &snapshot,
            xids,
        },
    );
    act_on_faults(cfg, config_ok, &ctx.node, &mut record, now_ms);
    let stored = match record.to_line() {
        Ok(line) => store::store_line(&cfg.state_dir, &cfg.records_dir(), now_ms, job_id, &line),
        Err(e) => Stored::Lost {
            why: format!("cannot serialise the record: {e}"),
        },
    };
    if let Some(textfile) = &cfg.prometheus_textfile {
        if let Err(e) = super::prometheus::update(&cfg.state_dir, textfile, &record) {
            log::warn!("prometheus textfile not updated: {e}");
        }
    }
    remove_state_files(&cfg.state_dir, job_id);
    start::remove_stale(&cfg.state_dir, STALE_START);
    EpilogOutcome {
        record: Some(record),
        stored: Some(stored),
    }
}

/// Xid events on the job's GPUs since the prolog's cursor. The node's own
/// cursor is not touched: the next node check judges them again.
fn job_xids(
    cfg: &Config,
    cursor: Option<&Cursor>,
    snapshot: &NodeSnapshot,
    start: &Result<JobStart, String>,
    job_gpus: &[u32],
    now_ms: u64,
) -> Result<Vec<XidEvent>, String> {
    let cursor = match (cursor, start) {
        (Some(c), _) => c,
        (None, Err(_)) => return Err(NO_START.into()),
        (None, Ok(_)) => return Err("the prolog had no kernel-log position".into()),
    };
    let read = xid::read_since(&cfg.kernel_log, Some(cursor), &cfg.xid, snapshot, now_ms)
        .map_err(|e| format!("kernel log unreadable: {e}"))?;
    let window_start = start.as_ref().map(|s| s.start_ms).unwrap_or(0);
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
                .or_else(|| start.as_ref().ok()?.gpu(i)?.pci.as_deref())
        })
        .collect();
    Ok(read
        .events
        .into_iter()
        .filter(|e| {
            e.kind == xid::EventKind::Xid
                && (!read.restarted || e.time_ms.is_some_and(|t| t >= window_start))
                && (e.gpu.is_some_and(|g| job_gpus.contains(&g))
                    || e.pci.as_deref().is_some_and(|p| job_pcis.contains(&p)))
        })
        .collect())
}

/// Drain the node when a fatal Xid or a new uncorrectable ECC error hit
/// the job's GPUs; note the outcome in the record.
fn act_on_faults(cfg: &Config, config_ok: bool, node: &str, record: &mut JobRecord, now_ms: u64) {
    let policy = Policy::from_config(&cfg.xid);
    let mut findings: Vec<Finding> =
        xid::judge(&record.xids, &policy, &mut RepeatHistory::default(), now_ms)
            .into_iter()
            .map(|mut f| {
                f.summary = during_job(&f.summary, &record.job_id);
                f
            })
            .collect();
    findings.extend(delta_findings(record));
    for f in findings.iter().filter(|f| f.action.drains()) {
        log::error!("job {}: {}", record.job_id, f.message);
    }
    let decision = gate::decide(&findings, config_ok);
    if let Some(held) = decision.held_back {
        log::error!("{held}");
        record.drain_failed = Some(held);
    }
    if let Some(reason) = decision.drain_reason {
        match gate::drain_findings(cfg, node, &findings, &reason, now_ms) {
            gate::DrainOutcome::Drained => record.drained = Some(reason),
            gate::DrainOutcome::HeldBack(why)
            | gate::DrainOutcome::Foreign(why)
            | gate::DrainOutcome::Failed(why) => record.drain_failed = Some(why),
        }
    }
}

fn remove_state_files(state_dir: &Path, job_id: &str) {
    let paths = StatePaths::new(state_dir);
    for p in [start::start_path(state_dir, job_id), paths.verdict(job_id)] {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("cannot remove {}: {e}", p.display()),
        }
    }
}
