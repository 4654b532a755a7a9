//! Pure arithmetic of a job record: counter differences, mean power, peak
//! memory, and the findings that drain the node after a job.

use crate::finding::{Action, Finding};
use crate::ids::{JobId, NodeName};
use crate::snapshot::{AccountedProcess, GpuSnapshot, NodeSnapshot, NvmlFailure};

use super::job_power::{GpuPeak, PowerPeaks};
use super::start::{nvlink_error_total, GpuCounters, JobStart};
use crate::records::record::{GpuRecord, JobRecord, RECORD_VERSION};
use crate::xid::XidEvent;

/// Who ran the job (from the Epilog environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobMeta {
    pub user: Option<String>,
    pub uid: Option<u32>,
    pub partition: Option<String>,
    pub exit_code: Option<i64>,
}

impl JobMeta {
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> JobMeta {
        let text = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        JobMeta {
            user: text("SLURM_JOB_USER"),
            uid: text("SLURM_JOB_UID").and_then(|v| v.parse().ok()),
            partition: text("SLURM_JOB_PARTITION"),
            exit_code: text("SLURM_JOB_EXIT_CODE").and_then(|v| v.parse().ok()),
        }
    }
}

/// Everything known at job end, for [`build_record`].
pub struct JobEnd<'a> {
    pub job_id: JobId,
    pub node: NodeName,
    pub meta: &'a JobMeta,
    /// Unix ms when the epilog started.
    pub end_ms: u64,
    /// The job's GPUs (NVML indices).
    pub job_gpus: &'a [u32],
    /// The epilog's probe, with accounted processes.
    pub snapshot: &'a NodeSnapshot,
    /// Xid events on the job's GPUs, or why they are unknown.
    pub xids: Result<Vec<XidEvent>, String>,
    /// The power samples the health checks took during the job.
    pub power_peaks: Option<&'a PowerPeaks>,
}

/// Why there is no start snapshot, for the record.
pub const NO_START: &str =
    "no start snapshot: the prolog did not run for this job on this node, or the node rebooted";

pub fn describe_nvml_failure(f: &NvmlFailure) -> String {
    f.to_string()
}

/// Pure: the record of one job on one node. `start` is the saved start
/// snapshot or why there is none.
pub fn build_record(start: Result<&JobStart, String>, end: JobEnd<'_>) -> JobRecord {
    let nvml_error = end.snapshot.nvml_error.as_ref().map(describe_nvml_failure);
    let (start_ms, missing_reason) = match &start {
        Ok(s) => (Some(s.start_ms), None),
        Err(why) => (None, Some(why.clone())),
    };
    let gpus = end
        .job_gpus
        .iter()
        .map(|&index| {
            let at_start = start.as_ref().ok().map(|s| (*s, s.gpu(index)));
            gpu_record(
                index,
                at_start,
                end.snapshot,
                nvml_error.as_deref(),
                end.end_ms,
                end.power_peaks,
            )
        })
        .collect();
    let peak_power_w = node_peak_power(&start, end.snapshot, end.job_gpus, end.power_peaks);
    let (xids, xids_absent_reason) = match end.xids {
        Ok(x) => (x, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    JobRecord {
        version: RECORD_VERSION,
        job_id: end.job_id.to_string(),
        node: end.node.to_string(),
        user: end.meta.user.clone(),
        uid: end.meta.uid,
        partition: end.meta.partition.clone(),
        exit_code: end.meta.exit_code,
        start_ms,
        end_ms: end.end_ms,
        duration_s: start_ms.map(|s| end.end_ms.saturating_sub(s) as f64 / 1000.0),
        start_snapshot_missing: missing_reason.is_some(),
        start_snapshot_missing_reason: missing_reason,
        nvml_error,
        gpus,
        xids,
        xids_absent_reason,
        drained: None,
        drain_failed: None,
        peak_power_w,
    }
}

/// `at_start`: the start snapshot and this GPU's counters in it, if any.
fn gpu_record(
    index: u32,
    at_start: Option<(&JobStart, Option<&GpuCounters>)>,
    end: &NodeSnapshot,
    nvml_error: Option<&str>,
    end_ms: u64,
    peaks: Option<&PowerPeaks>,
) -> GpuRecord {
    let mut rec = GpuRecord {
        index,
        ..GpuRecord::default()
    };
    let now = end.gpu_by_index(index);
    let before = at_start.and_then(|(_, g)| g);
    rec.uuid = now
        .and_then(|g| g.uuid.clone())
        .or_else(|| before.and_then(|g| g.uuid.clone()));
    rec.pci = now
        .and_then(|g| g.pci_bus_id.clone())
        .or_else(|| before.and_then(|g| g.pci.clone()));
    rec.name = now.and_then(|g| g.name.clone());
    rec.memory_total_bytes = now.and_then(|g| g.memory_total_bytes);
    rec.mig = now.is_some_and(|g| g.mig_mode == Some(true));
    // One reason shared by every figure that needs both snapshots.
    let unpaired: Option<String> = match (at_start, before, now) {
        (None, _, _) => Some(NO_START.into()),
        (Some(_), None, _) => {
            Some("GPU not in the start snapshot (unreadable at job start)".into())
        }
        (_, _, None) => Some(match nvml_error {
            Some(e) => e.to_string(),
            None => "GPU not readable at job end".into(),
        }),
        (_, Some(b), Some(n)) if n.lost => {
            let _ = b;
            Some("GPU lost (fallen off the bus) at job end".into())
        }
        (_, Some(b), Some(n)) if b.uuid.is_some() && n.uuid.is_some() && b.uuid != n.uuid => {
            Some("a different GPU has this index now (UUID changed)".into())
        }
        _ => None,
    };
    let (Some((start, Some(b))), Some(n), None) = (at_start, now, &unpaired) else {
        let why = unpaired.unwrap_or_default();
        rec.energy_absent_reason = Some(why.clone());
        rec.peak_memory_absent_reason = Some(why.clone());
        rec.notes.push(format!("no counter deltas: {why}"));
        return rec;
    };
    match energy_j(b.energy_mj, n.energy_mj) {
        Ok(j) => {
            if rec.mig {
                rec.notes.push(
                    "MIG mode: the energy is the whole GPU's, shared by its MIG instances".into(),
                );
            }
            rec.energy_j = Some(j);
            rec.mean_power_w = mean_power_w(j, start.taken_at_ms, end.taken_at_ms);
        }
        Err(why) => rec.energy_absent_reason = Some(why),
    }
    (rec.peak_power_w, rec.power_samples) = peak_power(
        b.power_mw,
        peaks.and_then(|p| p.gpu(index)),
        n.power_usage_mw,
    );
    match peak_memory(b.accounting_mode, n, start.start_ms, end_ms) {
        Ok(p) => rec.peak_memory_bytes = Some(p),
        Err(why) => rec.peak_memory_absent_reason = Some(why),
    }
    rec.gpu_utilization_pct = utilization(n, start.start_ms, end_ms, |p| p.gpu_utilization);
    rec.memory_utilization_pct = utilization(n, start.start_ms, end_ms, |p| p.memory_utilization);
    let mut delta = |what: &str, a: Option<u64>, z: Option<u64>| -> Option<u64> {
        match counter_delta(a, z) {
            Ok(d) => Some(d),
            Err(why) => {
                rec.notes.push(format!("{what}: {why}"));
                None
            }
        }
    };
    // Not every board reports violations: no note where neither end did.
    let secs = |ns: u64| (ns as f64 / 1e7).round() / 100.0;
    let mut throttled = |what: &str, a: Option<u64>, z: Option<u64>| {
        (a.is_some() || z.is_some())
            .then(|| delta(what, a, z).map(secs))
            .flatten()
    };
    rec.power_throttled_s = throttled(
        "power violation",
        b.power_violation_ns,
        n.power_violation_ns,
    );
    rec.thermal_throttled_s = throttled(
        "thermal violation",
        b.thermal_violation_ns,
        n.thermal_violation_ns,
    );
    let (be, ne) = (b.ecc, n.ecc);
    let ecc_c = delta(
        "ecc corrected",
        be.map(|e| e.volatile_corrected),
        ne.map(|e| e.volatile_corrected),
    );
    let ecc_u = delta(
        "ecc uncorrected",
        be.map(|e| e.volatile_uncorrected),
        ne.map(|e| e.volatile_uncorrected),
    );
    let (br, nr) = (b.remapped_rows, n.remapped_rows);
    let rem_c = delta(
        "remapped rows (correctable)",
        br.map(|r| u64::from(r.correctable)),
        nr.map(|r| u64::from(r.correctable)),
    );
    let rem_u = delta(
        "remapped rows (uncorrectable)",
        br.map(|r| u64::from(r.uncorrectable)),
        nr.map(|r| u64::from(r.uncorrectable)),
    );
    let nvl = delta("nvlink errors", b.nvlink_errors, nvlink_error_total(n));
    let pcie = delta(
        "pcie replays",
        b.pcie_replay,
        n.pcie.and_then(|p| p.replay_counter),
    );
    rec.ecc_corrected_delta = ecc_c;
    rec.ecc_uncorrected_delta = ecc_u;
    rec.remapped_correctable_delta = rem_c;
    rec.remapped_uncorrectable_delta = rem_u;
    rec.nvlink_errors_delta = nvl;
    rec.pcie_replay_delta = pcie;
    rec
}

/// Energy in joules from the counter at start and end (millijoules).
pub fn energy_j(start_mj: Option<u64>, end_mj: Option<u64>) -> Result<f64, String> {
    match (start_mj, end_mj) {
        (None, _) => {
            Err("no energy counter at job start (GPU older than Volta, or unreadable)".into())
        }
        (_, None) => Err("energy counter unreadable at job end".into()),
        (Some(a), Some(z)) if z < a => {
            Err("energy counter went backwards: the driver was reloaded during the job".into())
        }
        (Some(a), Some(z)) => Ok((z - a) as f64 / 1000.0),
    }
}

/// The highest of the job's power samples (start, health checks, end) in
/// W, and how many there were; `(None, None)` without any.
pub fn peak_power(
    start_mw: Option<u32>,
    checks: Option<&GpuPeak>,
    end_mw: Option<u32>,
) -> (Option<f64>, Option<u32>) {
    let mut samples = 0u32;
    let mut max_mw: Option<u32> = None;
    let mut add = |mw: u32, n: u32| {
        samples = samples.saturating_add(n);
        max_mw = Some(max_mw.map_or(mw, |m| m.max(mw)));
    };
    start_mw.into_iter().for_each(|mw| add(mw, 1));
    checks.into_iter().for_each(|c| add(c.max_mw, c.samples));
    end_mw.into_iter().for_each(|mw| add(mw, 1));
    (
        max_mw.map(|mw| f64::from(mw) / 1000.0),
        max_mw.map(|_| samples),
    )
}

/// The job's GPUs together at the sample that drew most: at start (the
/// start snapshot), at the health checks, at end. A GPU not readable at a
/// sample leaves that sample's sum short, never inflated.
fn node_peak_power(
    start: &Result<&JobStart, String>,
    end: &NodeSnapshot,
    job_gpus: &[u32],
    checks: Option<&PowerPeaks>,
) -> Option<f64> {
    let sum = |mws: Vec<Option<u32>>| -> Option<u64> {
        mws.into_iter()
            .flatten()
            .map(u64::from)
            .reduce(|a, b| a + b)
    };
    let at_start = start.as_ref().ok().and_then(|s| {
        sum(job_gpus
            .iter()
            .map(|&i| s.gpu(i).and_then(|g| g.power_mw))
            .collect())
    });
    let at_checks = checks.and_then(|c| c.total).map(|t| t.max_mw);
    let at_end = sum(job_gpus
        .iter()
        .map(|&i| end.gpu_by_index(i).and_then(|g| g.power_usage_mw))
        .collect());
    [at_start, at_checks, at_end]
        .into_iter()
        .flatten()
        .max()
        .map(|mw| mw as f64 / 1000.0)
}

/// Mean power over the interval between the two counter readings.
pub fn mean_power_w(energy_j: f64, start_taken_ms: u64, end_taken_ms: u64) -> Option<f64> {
    let secs = end_taken_ms.checked_sub(start_taken_ms)? as f64 / 1000.0;
    (secs > 0.0).then(|| energy_j / secs)
}

/// The largest max-memory among the accounted processes that started
/// within `[start_ms, end_ms]` on this GPU.
pub fn peak_memory(
    accounting_at_start: Option<bool>,
    end: &GpuSnapshot,
    start_ms: u64,
    end_ms: u64,
) -> Result<u64, String> {
    if end.mig_mode == Some(true) {
        return Err(
            "MIG mode: NVML keeps no per-process accounting on a GPU in MIG mode, so no peak memory"
                .into(),
        );
    }
    match (accounting_at_start, end.accounting_mode) {
        (Some(false), _) => {
            return Err(
                "accounting mode was off at job start (the prolog could not turn it on)".into(),
            )
        }
        (_, Some(false)) => return Err("accounting mode was off at job end".into()),
        (None, _) | (_, None) => {
            return Err("accounting unavailable (MIG mode, or not supported by this GPU)".into())
        }
        _ => {}
    }
    let (lo, hi) = (start_ms.saturating_mul(1000), end_ms.saturating_mul(1000));
    let in_window: Vec<_> = end
        .accounted_processes
        .iter()
        .filter(|p| (lo..=hi).contains(&p.start_time_us))
        .collect();
    if in_window.is_empty() {
        return Err("no accounted process started on this GPU during the job".into());
    }
    in_window
        .iter()
        .filter_map(|p| p.max_memory_bytes)
        .max()
        .ok_or_else(|| "the job's accounted processes report no memory figure".into())
}

/// The mean of a utilisation figure over the job's accounted processes on
/// this GPU, weighted by each one's run time (a running process: the time
/// since it started); `None` when no process gives the figure.
pub fn utilization(
    end: &GpuSnapshot,
    start_ms: u64,
    end_ms: u64,
    figure: impl Fn(&AccountedProcess) -> Option<u32>,
) -> Option<f64> {
    let (lo, hi) = (start_ms.saturating_mul(1000), end_ms.saturating_mul(1000));
    let mut weighted = 0.0;
    let mut total = 0.0;
    for p in end
        .accounted_processes
        .iter()
        .filter(|p| (lo..=hi).contains(&p.start_time_us))
    {
        let Some(pct) = figure(p) else { continue };
        let ran_ms = if p.is_running || p.time_ms == 0 {
            hi.saturating_sub(p.start_time_us) / 1000
        } else {
            p.time_ms
        };
        let w = ran_ms.max(1) as f64;
        weighted += f64::from(pct.min(100)) * w;
        total += w;
    }
    (total > 0.0).then(|| (weighted / total * 10.0).round() / 10.0)
}

/// Difference of a monotonic counter.
pub fn counter_delta(start: Option<u64>, end: Option<u64>) -> Result<u64, &'static str> {
    match (start, end) {
        (None, _) => Err("unreadable at job start"),
        (_, None) => Err("unreadable at job end"),
        (Some(a), Some(z)) if z < a => Err("counter went backwards (driver reloaded or reset)"),
        (Some(a), Some(z)) => Ok(z - a),
    }
}

/// Findings of the job's health deltas: a new uncorrectable ECC error
/// drains the node (as the node check does for any volatile DBE; remapped
/// rows stay with the node check, which only warns while a remap waits).
pub fn delta_findings(record: &JobRecord) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in &record.gpus {
        let where_ = gpu_label(g);
        if let Some(n) = g.ecc_uncorrected_delta.filter(|&n| n > 0) {
            out.push(Finding::gpu(
                "ecc-uncorrected",
                Action::Drain,
                g.index,
                g.pci.as_deref(),
                format!("ECC DBE during job {} {where_}", record.job_id),
                format!(
                    "{n} new uncorrectable ECC error(s) on {where_} during job {}",
                    record.job_id
                ),
            ));
        }
    }
    out
}

/// `GPU3 0000:1b:00.0`.
fn gpu_label(g: &GpuRecord) -> String {
    match &g.pci {
        Some(p) => format!("GPU{} {p}", g.index),
        None => format!("GPU{}", g.index),
    }
}

/// `Xid 79 GPU5 ...` becomes `Xid 79 during job 42 GPU5 ...`.
pub fn during_job(summary: &str, job_id: &str) -> String {
    let mut words = summary.splitn(3, ' ');
    match (words.next(), words.next(), words.next()) {
        (Some(a), Some(b), rest) => {
            let mut s = format!("{a} {b} during job {job_id}");
            if let Some(r) = rest {
                s.push(' ');
                s.push_str(r);
            }
            s
        }
        _ => format!("{summary} during job {job_id}"),
    }
}
