//! The Prolog run: check the node before a job starts, drain it when a
//! fault asks for it (exit 1: Slurm requeues the job), and tell the job
//! what was found (its verdict, read by the SPANK plugin) and the Epilog
//! what the counters were (the job's start snapshot).
//!
//! The healthy path calls no Slurm command: one NVML probe, the checks,
//! the kernel-log scan, a few state files, the node's run lock.

use crate::checks::JobContext;
use crate::finding::{Action, Finding};
use crate::ledger::Ledger;
use crate::probe::{self, ProbeOptions};
use crate::records::{self, JobStart};
use crate::verdict::{self, JobVerdict};

use super::act::{self, Turn};
use super::node_check::{self, NodeCheck};
use super::{JobEnv, RunContext};

/// The Prolog of `job`. Returns the exit code: 0 lets the job start, 1
/// keeps it off the node (Slurm requeues it): the node was drained, or
/// its drain could not be made because Slurm failed (Slurm then drains
/// the node itself, see `act::keeps_job_off`).
pub fn run(ctx: &RunContext, job: &JobEnv) -> i32 {
    for n in &job.notes {
        log::warn!("{n}");
    }

    let opts = ProbeOptions::PROLOG;
    // With PrologFlags=RunInJob the Prolog runs in the job's cgroup, whose
    // device rules may hide the node's other GPUs from NVML.
    let job_view = job
        .job_id
        .filter(|j| probe::seen_from_job(j.get()))
        .map(|_| job.job_gpus.len());
    let on = JobContext {
        gpus: job.job_gpus.clone(),
        mode: job.mode,
    };
    // The checks' slow probes (a strict job's DCGM diagnostic) too.
    let probed = node_check::probe(ctx, opts, job_view, Some(&on));
    flush_spool(ctx);
    let mut turn = match Turn::take(ctx) {
        Ok(t) => t,
        Err(busy) => return without_turn(ctx, job, &on, probed, job_view, &busy),
    };
    let lost = turn.loaded.unreadable.clone();
    let mut check = node_check::judge(ctx, probed, job_view, Some(&on), lost.is_some());
    if let Some(why) = lost {
        check.findings.push(ledger_lost(why));
    }
    log_findings(&check.findings);
    let outcome = act::act(&mut turn, &check.findings, &act::node_run_view(ctx));
    let saved = turn.commit();
    node_check::commit(ctx, &check, Some(&on), ctx.config_ok() && saved);
    let keep_off = act::keeps_job_off(&outcome);
    let mut told = check.findings.clone();
    told.extend(open_faults(turn.ledger(), &check.findings));
    drop(turn);
    records::metrics::after_check(
        &ctx.state,
        ctx.config(),
        &records::metrics::CheckSeen {
            run: records::metrics::RunKind::Prolog,
            now_ms: ctx.now_ms,
            config_ok: ctx.config_ok(),
            snapshot: &check.snapshot,
            findings: &check.findings,
            xid_events: check.xid_events(),
            xid_read_from: check.xid_read_from(),
            boot_id: ctx.boot_id(),
        },
    );

    save_job_start(ctx, job, &check);
    let code = i32::from(keep_off);
    if let Some(note) = act::not_drained_note(&outcome) {
        if code == 0 {
            // Held back (brake, configuration error): the job runs,
            // warned; strict jobs are refused by the plugin.
            log::error!(
                "job {} starts on a node with a fault that was not drained: {}",
                job.job_id.map_or("-".into(), |j| j.to_string()),
                note.message
            );
        }
        told.push(note);
    }
    write_verdict(ctx, job, told);
    log::info!(
        "job {} on {}: {} findings, exit {code}, probe {} us",
        job.job_id.map_or("-".into(), |j| j.to_string()),
        ctx.node,
        check.findings.len(),
        check.snapshot.probe_us
    );
    code
}

/// Another run of this node holds its turn past this run's budget (it is
/// acting on what it found). This run changes no state: it judges the
/// node read-only, and keeps the job off when it or the ledger has a
/// draining fault.
fn without_turn(
    ctx: &RunContext,
    job: &JobEnv,
    on: &JobContext,
    probed: node_check::Probed,
    job_view: Option<usize>,
    busy: &act::Busy,
) -> i32 {
    log::warn!("{}", act::busy_note(&ctx.node, busy));
    let check = node_check::judge(ctx, probed, job_view, Some(on), false);
    log_findings(&check.findings);
    let ledger = act::peek(ctx).unwrap_or_else(|| Ledger::new(ctx.node.as_str()));
    // The run in its turn drains (or holds back) for these; this one
    // cannot know which, so the job goes elsewhere, as when Slurm fails.
    let keep_off = ctx.config_ok()
        && (ledger.open_faults().next().is_some()
            || check.findings.iter().any(|f| f.action.drains()));
    save_job_start(ctx, job, &check);
    let mut told = check.findings.clone();
    told.extend(open_faults(&ledger, &check.findings));
    write_verdict(ctx, job, told);
    i32::from(keep_off)
}

/// The ledger's open faults the run did not find itself, for the job: a
/// fault held back earlier (brake, Slurm, configuration) still warns
/// every job and refuses strict ones.
fn open_faults(ledger: &Ledger, own: &[Finding]) -> Vec<Finding> {
    let held = ledger.held.as_ref();
    ledger
        .open_faults()
        .filter(|f| !own.iter().any(|o| crate::ledger::FaultId::of(o) == f.id))
        .map(|f| {
            let mut finding = f.finding();
            let why = held.map_or("not drained yet", |h| h.cause.as_str());
            finding.message = format!(
                "{} (pending since {}: {why})",
                finding.message,
                crate::time::format_utc_ms(f.first_ms)
            );
            finding
        })
        .collect()
}

/// The finding that says the fault ledger was lost (not a drain: a bad
/// file never drains a node).
pub(super) fn ledger_lost(why: String) -> Finding {
    Finding::node(
        "ledger",
        Action::Warn,
        "fault ledger unreadable".into(),
        why,
    )
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
        check.kernel_log_cursor().as_ref(),
        ctx.now_ms,
    );
    if let Err(e) = ctx.state.save(job_id, &start) {
        log::error!(
            "cannot save the start of job {job_id}; its record will lack energy and deltas: {e}"
        );
    }
}

fn write_verdict(ctx: &RunContext, job: &JobEnv, findings: Vec<Finding>) {
    let Some(job_id) = job.job_id else {
        return;
    };
    let v = JobVerdict {
        job_id,
        node: ctx.node.to_string(),
        mode: job.mode,
        written_at_ms: ctx.now_ms,
        job_gpus: job.job_gpus.clone(),
        findings: verdict::job_findings(&findings, &job.job_gpus),
        config_error: ctx.loaded.error.as_ref().map(|e| e.to_string()),
    };
    if let Err(e) = ctx.state.save(job_id, &v) {
        log::error!("cannot write the verdict of job {job_id}: {e}");
    }
}
