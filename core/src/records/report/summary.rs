//! Per-job figures summed across nodes (`gpu-health report`).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::records::record::{GpuRecord, JobRecord};

/// One job, all its nodes' records together. `G` is what is kept of its
/// GPUs (see [`GpuSink`]); the job's figures are summed over them either
/// way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary<G = Vec<SummaryGpu>> {
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
    /// Sum over the nodes of each node's sampled peak (the job's GPUs on
    /// it together; nodes are sampled at different moments, so an upper
    /// bound of the job's peak).
    pub peak_power_w: Option<f64>,
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
    /// Drains the epilog was asked for but could not make (`node: why`).
    pub drain_failed: Vec<String>,
    /// Nodes whose record had no start snapshot.
    pub start_snapshot_missing: Vec<String>,
    pub gpus: G,
}

/// A GPU of the job, with its node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryGpu {
    pub node: String,
    #[serde(flatten)]
    pub gpu: GpuRecord,
    pub peak_memory_pct: Option<f64>,
}

/// What a [`JobSummary`] keeps of its GPUs. A report of many jobs that
/// does not show every GPU field keeps less than the full records (an
/// 8-GPU record holds about 3 KiB of GPU data).
pub trait GpuSink: Default {
    /// What is kept of one record's GPUs. Made by [`GpuSink::part`] on
    /// a parse worker, so that the parts not kept are dropped there.
    type Part: Send;
    /// Only the GPUs flagged `near_oom` are kept: the report may skip
    /// the records without one before parsing them.
    const ONLY_NEAR_OOM: bool = false;
    /// The part kept of the GPUs of `node`'s record.
    fn part(node: &str, gpus: Vec<GpuRecord>) -> Self::Part;
    /// Adds a record's part (records in file order).
    fn append(&mut self, part: Self::Part);
    /// How many GPUs were added.
    fn count(&self) -> usize;
}

/// Every GPU record, with its node.
impl GpuSink for Vec<SummaryGpu> {
    type Part = Vec<SummaryGpu>;

    fn part(node: &str, gpus: Vec<GpuRecord>) -> Self::Part {
        gpus.into_iter()
            .map(|gpu| SummaryGpu {
                node: node.to_string(),
                peak_memory_pct: memory_pct(gpu.peak_memory_bytes, gpu.memory_total_bytes),
                gpu,
            })
            .collect()
    }

    fn append(&mut self, mut part: Self::Part) {
        Vec::append(self, &mut part);
    }

    fn count(&self) -> usize {
        self.len()
    }
}

/// Which jobs `gpu-health report` shows. The default selects everything.
///
/// The job's user is the first non-null `user` of its records. With
/// `user` set, records of other users are dropped before grouping and
/// records without a user (`user: null`) are kept, so a job shows when at
/// least one of its records names the user, with its user-less records
/// counted too. Jobs with one user per job, the normal case, come out the
/// same as filtering the full summary; a job whose records name different
/// users shows each user only their own records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportFilter {
    /// Only this job id.
    pub job: Option<String>,
    /// Only jobs of this user.
    pub user: Option<String>,
    /// Only jobs whose last end (largest `end_ms` over their nodes) is at
    /// or after this Unix ms.
    pub since_ms: Option<u64>,
    /// Only the records of this node.
    pub node: Option<String>,
    /// Only jobs whose last end is before this Unix ms.
    pub until_ms: Option<u64>,
}

impl ReportFilter {
    /// Whether the record may belong to a selected job. `since_ms` is not
    /// looked at: it depends on the job's other records.
    pub fn keeps_record(&self, r: &JobRecord) -> bool {
        self.job.as_ref().is_none_or(|id| *id == r.job_id)
            && self.node.as_ref().is_none_or(|n| *n == r.node)
            && self
                .user
                .as_ref()
                .is_none_or(|u| r.user.as_ref().is_none_or(|ru| ru == u))
    }

    /// Whether a job summed from records that [`Self::keeps_record`]
    /// kept is selected.
    pub fn keeps_job<G>(&self, j: &JobSummary<G>) -> bool {
        self.job.as_ref().is_none_or(|id| *id == j.job_id)
            && self
                .user
                .as_ref()
                .is_none_or(|u| j.user.as_ref() == Some(u))
            && self.since_ms.is_none_or(|s| j.end_ms >= s)
            && self.until_ms.is_none_or(|u| j.end_ms < u)
    }
}

/// Peak memory as a percentage of the GPU's memory.
pub fn memory_pct(peak: Option<u64>, total: Option<u64>) -> Option<f64> {
    match (peak, total) {
        (Some(p), Some(t)) if t > 0 => Some(p as f64 * 100.0 / t as f64),
        _ => None,
    }
}

/// Up to this many nodes a job's node list is searched linearly (cheaper
/// than hashing for the usual few nodes); bigger jobs get a set.
const LINEAR_NODES: usize = 32;

/// Groups records by job as they come, in linear time.
#[derive(Debug)]
pub struct Summarizer<G = Vec<SummaryGpu>> {
    jobs: Vec<JobSummary<G>>,
    /// Job id to its index in `jobs` (first appearance order).
    index: HashMap<String, usize>,
    /// Node name to its index in the job's `nodes`, for the jobs with
    /// more than [`LINEAR_NODES`] nodes.
    big_jobs: HashMap<usize, HashMap<String, usize>>,
    /// (job, node, end) of every record added: indices, not names, so
    /// that a record costs no copy of its strings here.
    seen: HashSet<(usize, usize, u64)>,
}

impl<G> Default for Summarizer<G> {
    fn default() -> Self {
        Self {
            jobs: Vec::new(),
            index: HashMap::new(),
            big_jobs: HashMap::new(),
            seen: HashSet::new(),
        }
    }
}

impl<G: GpuSink> Summarizer<G> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a record to its job; takes it by value so that its GPUs move
    /// into the summary instead of being copied. A record with the same
    /// job, node and end as one added before (spooled and then written
    /// twice after a crash) is not added again: returns false then.
    pub fn add(&mut self, r: JobRecord) -> bool {
        self.add_prepared(Self::prepare(r))
    }

    /// The part of [`Self::add`] that needs no summary, for a worker
    /// thread: splits the GPUs into what the sums need and the sink's part.
    pub fn prepare(mut r: JobRecord) -> PreparedRecord<G::Part> {
        let gpus = std::mem::take(&mut r.gpus);
        let mut p = PreparedRecord {
            energy_and_power: Vec::with_capacity(gpus.len()),
            peak: None,
            deltas: [0; 6],
            part: None,
            record: r,
        };
        for g in &gpus {
            p.energy_and_power.push((g.energy_j, g.mean_power_w));
            if let Some(peak) = g.peak_memory_bytes {
                // Strictly greater: the first GPU with the largest peak
                // gives the share, as in a GPU-by-GPU pass.
                if p.peak.is_none_or(|(m, _)| peak > m) {
                    p.peak = Some((peak, memory_pct(Some(peak), g.memory_total_bytes)));
                }
            }
            let deltas = [
                g.ecc_corrected_delta,
                g.ecc_uncorrected_delta,
                g.remapped_correctable_delta,
                g.remapped_uncorrectable_delta,
                g.nvlink_errors_delta,
                g.pcie_replay_delta,
            ];
            // Saturating sums of unsigned counts do not depend on the
            // grouping, so a per-record sum is exact.
            for (acc, v) in p.deltas.iter_mut().zip(deltas) {
                *acc = acc.saturating_add(v.unwrap_or(0));
            }
        }
        p.part = Some(G::part(&p.record.node, gpus));
        p
    }

    /// [`Self::add`] of a record made ready by [`Self::prepare`].
    pub fn add_prepared(&mut self, p: PreparedRecord<G::Part>) -> bool {
        let r = &p.record;
        let idx = match self.index.get(&r.job_id) {
            Some(&i) => i,
            None => {
                self.jobs.push(empty(r));
                self.index.insert(r.job_id.clone(), self.jobs.len() - 1);
                self.jobs.len() - 1
            }
        };
        let job = &mut self.jobs[idx];
        let known = if job.nodes.len() < LINEAR_NODES {
            job.nodes.iter().position(|n| *n == r.node)
        } else {
            let names = self.big_jobs.entry(idx).or_insert_with(|| {
                let names = job.nodes.iter().cloned();
                names.zip(0..).collect()
            });
            let known = names.get(&r.node).copied();
            if known.is_none() {
                names.insert(r.node.clone(), job.nodes.len());
            }
            known
        };
        let node = known.unwrap_or_else(|| {
            job.nodes.push(r.node.clone());
            job.nodes.len() - 1
        });
        if !self.seen.insert((idx, node, r.end_ms)) {
            return false;
        }
        add(job, p);
        true
    }

    /// The selected jobs, ordered by their last end; jobs that end at the
    /// same ms keep the order of their first record.
    pub fn finish(self, filter: &ReportFilter) -> Vec<JobSummary<G>> {
        let mut jobs = self.jobs;
        jobs.retain(|j| filter.keeps_job(j));
        // Stable: ties keep first-appearance order. (Sorting index pairs
        // moves less but holds a second copy of every summary.)
        jobs.sort_by_key(|j| j.end_ms);
        jobs
    }
}

/// Pure: group records by job id (in order of the jobs' last end); a
/// record with the same job, node and end as an earlier one counts once.
pub fn summarize(records: &[JobRecord]) -> Vec<JobSummary> {
    summarize_filtered(records, &ReportFilter::default())
}

/// Pure: the jobs of `records` that `filter` selects, summed like
/// [`summarize`]; records that cannot belong to a selected job are
/// dropped before grouping.
pub fn summarize_filtered(records: &[JobRecord], filter: &ReportFilter) -> Vec<JobSummary> {
    let mut s = Summarizer::new();
    for r in records.iter().filter(|r| filter.keeps_record(r)) {
        s.add(r.clone());
    }
    s.finish(filter)
}

fn empty<G: Default>(r: &JobRecord) -> JobSummary<G> {
    JobSummary {
        job_id: r.job_id.clone(),
        user: None,
        partition: None,
        nodes: Vec::new(),
        start_ms: None,
        end_ms: 0,
        duration_s: None,
        energy_j: None,
        energy_kwh: None,
        gpus_without_energy: 0,
        mean_power_w: None,
        peak_power_w: None,
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
        drain_failed: Vec::new(),
        start_snapshot_missing: Vec::new(),
        gpus: G::default(),
    }
}

fn add_opt(sum: &mut Option<f64>, v: Option<f64>) {
    if let Some(v) = v {
        *sum = Some(sum.unwrap_or(0.0) + v);
    }
}

/// A record made ready for [`Summarizer::add_prepared`] by
/// [`Summarizer::prepare`].
#[derive(Debug)]
pub struct PreparedRecord<P> {
    /// The record without its GPUs.
    record: JobRecord,
    /// Each GPU's energy and mean power, in order: floating-point sums
    /// depend on the order, so they are added one by one to the job's.
    energy_and_power: Vec<(Option<f64>, Option<f64>)>,
    /// Largest peak memory of the record's GPUs, with its share.
    peak: Option<(u64, Option<f64>)>,
    /// Sums of the six counter deltas, in [`JobSummary`] order.
    deltas: [u64; 6],
    /// Always set; an Option only while `prepare` builds it.
    part: Option<P>,
}

/// Folds one record into its job (the node list is the caller's).
fn add<G: GpuSink>(j: &mut JobSummary<G>, p: PreparedRecord<G::Part>) {
    let r = p.record;
    if j.user.is_none() {
        j.user = r.user;
    }
    if j.partition.is_none() {
        j.partition = r.partition;
    }
    j.start_ms = match (j.start_ms, r.start_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    j.end_ms = j.end_ms.max(r.end_ms);
    j.duration_s = match (j.duration_s, r.duration_s) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    add_opt(&mut j.peak_power_w, r.peak_power_w);
    j.xid_events += r.xids.len();
    if let Some(d) = &r.drained {
        j.drained.push(format!("{}: {d}", r.node));
    }
    if let Some(d) = &r.drain_failed {
        j.drain_failed.push(format!("{}: {d}", r.node));
    }
    if r.start_snapshot_missing {
        j.start_snapshot_missing.push(r.node);
    }
    for (energy, power) in p.energy_and_power {
        match energy {
            Some(e) => add_opt(&mut j.energy_j, Some(e)),
            None => j.gpus_without_energy += 1,
        }
        add_opt(&mut j.mean_power_w, power);
    }
    if let Some((peak, pct)) = p.peak {
        if j.peak_memory_bytes.is_none_or(|m| peak > m) {
            j.peak_memory_bytes = Some(peak);
            j.peak_memory_pct = pct;
        }
    }
    let sums = [
        &mut j.ecc_corrected_delta,
        &mut j.ecc_uncorrected_delta,
        &mut j.remapped_correctable_delta,
        &mut j.remapped_uncorrectable_delta,
        &mut j.nvlink_errors_delta,
        &mut j.pcie_replay_delta,
    ];
    for (acc, v) in sums.into_iter().zip(p.deltas) {
        *acc = acc.saturating_add(v);
    }
    if let Some(part) = p.part {
        j.gpus.append(part);
    }
    j.energy_kwh = j.energy_j.map(|e| e / 3_600_000.0);
}
