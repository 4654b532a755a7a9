//! Per-job figures summed across nodes (`gpu-health report`).

use serde::Serialize;

use super::record::{GpuRecord, JobRecord};

/// One job, all its nodes' records together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    pub job_id: String,
    pub user: Option<String>,
    pub partition: Option<String>,
    pub nodes: Vec<String>,
    pub start_ms: Option<u64>,
    pub end_ms: u64,
    /// Longest duration among the nodes.
    pub duration_s: Option<f64>,
    /// Sum over the GPUs that have a figure (`None` when none has).
    pub energy_j: Option<f64>,
    pub energy_kwh: Option<f64>,
    /// GPUs without an energy figure (the sum is then a lower bound).
    pub gpus_without_energy: usize,
    /// Sum of the GPUs' mean powers.
    pub mean_power_w: Option<f64>,
    /// Largest peak memory over the job's GPUs.
    pub peak_memory_bytes: Option<u64>,
    /// That peak as a share of its GPU's memory, in percent.
    pub peak_memory_pct: Option<f64>,
    pub ecc_corrected_delta: u64,
    pub ecc_uncorrected_delta: u64,
    pub remapped_correctable_delta: u64,
    pub remapped_uncorrectable_delta: u64,
    pub nvlink_errors_delta: u64,
    pub pcie_replay_delta: u64,
    pub xid_events: usize,
    /// Drain reasons set by the epilog on any of the job's nodes.
    pub drained: Vec<String>,
    /// Nodes whose record had no start snapshot.
    pub start_snapshot_missing: Vec<String>,
    pub gpus: Vec<SummaryGpu>,
}

/// A GPU of the job, with its node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryGpu {
    pub node: String,
    #[serde(flatten)]
    pub gpu: GpuRecord,
    pub peak_memory_pct: Option<f64>,
}

/// Peak memory as a percentage of the GPU's memory.
pub fn memory_pct(peak: Option<u64>, total: Option<u64>) -> Option<f64> {
    match (peak, total) {
        (Some(p), Some(t)) if t > 0 => Some(p as f64 * 100.0 / t as f64),
        _ => None,
    }
}

/// Pure: group records by job id (in order of the jobs' last end).
pub fn summarize(records: &[JobRecord]) -> Vec<JobSummary> {
    let mut jobs: Vec<JobSummary> = Vec::new();
    for r in records {
        let idx = match jobs.iter().position(|j| j.job_id == r.job_id) {
            Some(i) => i,
            None => {
                jobs.push(empty(r));
                jobs.len() - 1
            }
        };
        add(&mut jobs[idx], r);
    }
    jobs.sort_by_key(|j| j.end_ms);
    jobs
}

fn empty(r: &JobRecord) -> JobSummary {
    JobSummary {
        job_id: r.job_id.clone(),
        user: r.user.clone(),
        partition: r.partition.clone(),
        nodes: Vec::new(),
        start_ms: None,
        end_ms: 0,
        duration_s: None,
        energy_j: None,
        energy_kwh: None,
        gpus_without_energy: 0,
        mean_power_w: None,
        peak_memory_bytes: None,
        peak_memory_pct: None,
        ecc_corrected_delta: 0,
        ecc_uncorrected_delta: 0,
        remapped_correctable_delta: 0,
        remapped_uncorrectable_delta: 0,
        nvlink_errors_delta: 0,
        pcie_replay_delta: 0,
        xid_events: 0,
        drained: Vec::new(),
        start_snapshot_missing: Vec::new(),
        gpus: Vec::new(),
    }
}

fn add_opt(sum: &mut Option<f64>, v: Option<f64>) {
    if let Some(v) = v {
        *sum = Some(sum.unwrap_or(0.0) + v);
    }
}

fn add(j: &mut JobSummary, r: &JobRecord) {
    if !j.nodes.contains(&r.node) {
        j.nodes.push(r.node.clone());
    }
    j.user = j.user.take().or_else(|| r.user.clone());
    j.partition = j.partition.take().or_else(|| r.partition.clone());
    j.start_ms = match (j.start_ms, r.start_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    j.end_ms = j.end_ms.max(r.end_ms);
    j.duration_s = match (j.duration_s, r.duration_s) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    j.xid_events += r.xids.len();
    if let Some(d) = &r.drained {
        j.drained.push(format!("{}: {d}", r.node));
    }
    if r.start_snapshot_missing {
        j.start_snapshot_missing.push(r.node.clone());
    }
    for g in &r.gpus {
        match g.energy_j {
            Some(e) => add_opt(&mut j.energy_j, Some(e)),
            None => j.gpus_without_energy += 1,
        }
        add_opt(&mut j.mean_power_w, g.mean_power_w);
        let pct = memory_pct(g.peak_memory_bytes, g.memory_total_bytes);
        if let Some(p) = g.peak_memory_bytes {
            if j.peak_memory_bytes.is_none_or(|m| p > m) {
                j.peak_memory_bytes = Some(p);
                j.peak_memory_pct = pct;
            }
        }
        let sum = |acc: &mut u64, v: Option<u64>| *acc = acc.saturating_add(v.unwrap_or(0));
        sum(&mut j.ecc_corrected_delta, g.ecc_corrected_delta);
        sum(&mut j.ecc_uncorrected_delta, g.ecc_uncorrected_delta);
        sum(
            &mut j.remapped_correctable_delta,
            g.remapped_correctable_delta,
        );
        sum(
            &mut j.remapped_uncorrectable_delta,
            g.remapped_uncorrectable_delta,
        );
        sum(&mut j.nvlink_errors_delta, g.nvlink_errors_delta);
        sum(&mut j.pcie_replay_delta, g.pcie_replay_delta);
        j.gpus.push(SummaryGpu {
            node: r.node.clone(),
            gpu: g.clone(),
            peak_memory_pct: pct,
        });
    }
    j.energy_kwh = j.energy_j.map(|e| e / 3_600_000.0);
}
