//! `gpu-health report` benchmarks (figures in docs/benchmarks.md, "Report").
//!
//! - `summarize` of 100,000 in-memory records (8 GPUs each, jobs on 1-8
//!   nodes, 300 users), all jobs and one user's;
//! - `read_jobs` of the same records written to a `jobs.jsonl`: the whole
//!   summary, and `--job` of a job in the middle (byte pre-check).
//!
//! Run: `cargo bench -p gpu-health-core --bench report` (about a minute);
//! whole-program timings with the old binary: `ci/bench-report`.

use std::io::{BufWriter, Write};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use gpu_health_core::records::{
    read_jobs, summarize, summarize_filtered, GpuRecord, JobRecord, ReportFilter, SummaryGpu,
    RECORD_VERSION,
};

const RECORDS: usize = 100_000;

/// A deterministic mix: job `i / 4`-ish on 1-8 nodes, all fields filled.
fn records() -> Vec<JobRecord> {
    let mut out = Vec::with_capacity(RECORDS);
    let mut job = 4_000_000u64;
    while out.len() < RECORDS {
        job += 1 + job % 3;
        let nodes = [1, 1, 1, 2, 1, 4, 1, 8][(job % 8) as usize];
        for n in 0..nodes {
            out.push(record(job, n, out.len() as u64));
        }
    }
    out.truncate(RECORDS);
    out
}

fn record(job: u64, n: u64, seq: u64) -> JobRecord {
    let end_ms = 1_733_000_000_000 + seq * 1_000;
    let node = format!("gpu{:04}", (job * 7 + n) % 512);
    let gpus = (0..8u32)
        .map(|index| GpuRecord {
            index,
            uuid: Some(format!("GPU-{job:08x}-{n:04x}-4000-8000-{index:012x}")),
            pci: Some(format!("00000000:{:02X}:00.0", 0x18 + index * 0x11)),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            energy_j: Some(1_000_000.0 + (seq % 977) as f64 * 1.25),
            energy_absent_reason: None,
            mean_power_w: Some(300.0 + f64::from(index) * 10.5),
            peak_memory_bytes: Some((seq % 80 + 1) << 30),
            peak_memory_absent_reason: None,
            memory_total_bytes: Some(85_520_809_984),
            near_oom: false,
            mig: false,
            gpu_utilization_pct: None,
            memory_utilization_pct: None,
            peak_power_w: None,
            power_samples: None,
            power_throttled_s: None,
            thermal_throttled_s: None,
            ecc_corrected_delta: Some(seq % 2),
            ecc_uncorrected_delta: Some(0),
            remapped_correctable_delta: Some(0),
            remapped_uncorrectable_delta: Some(0),
            nvlink_errors_delta: Some(0),
            pcie_replay_delta: Some(seq % 5 / 4),
            notes: Vec::new(),
        })
        .collect();
    JobRecord {
        version: RECORD_VERSION,
        job_id: job.to_string(),
        node,
        user: Some(format!("user{:03}", job % 300)),
        uid: Some(1000 + (job % 300) as u32),
        partition: Some("gpu".into()),
        exit_code: Some(0),
        start_ms: Some(end_ms - 3_600_000),
        end_ms,
        duration_s: Some(3600.0),
        start_snapshot_missing: false,
        start_snapshot_missing_reason: None,
        nvml_error: None,
        gpus,
        xids: Vec::new(),
        xids_absent_reason: None,
        drained: None,
        drain_failed: None,
        peak_power_w: None,
    }
}

fn benches(c: &mut Criterion) {
    let records = records();
    let mut g = c.benchmark_group("report");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("summarize_100k", |b| b.iter(|| summarize(&records)));
    let user = ReportFilter {
        user: Some("user007".into()),
        ..ReportFilter::default()
    };
    g.bench_function("summarize_100k_one_user", |b| {
        b.iter(|| summarize_filtered(&records, &user))
    });

    let dir = tempfile::tempdir().expect("temp dir");
    {
        let file = std::fs::File::create(dir.path().join("jobs.jsonl")).expect("jobs.jsonl");
        let mut out = BufWriter::new(file);
        for r in &records {
            let line = r.to_line().expect("serialise");
            writeln!(out, "{line}").expect("write");
        }
        out.flush().expect("flush");
    }
    let all = ReportFilter::default();
    g.bench_function("read_jobs_100k", |b| {
        b.iter(|| read_jobs::<Vec<SummaryGpu>>(dir.path(), &all))
    });
    let job = ReportFilter {
        job: Some(records[RECORDS / 2].job_id.clone()),
        ..ReportFilter::default()
    };
    g.bench_function("read_jobs_100k_one_job", |b| {
        b.iter(|| read_jobs::<Vec<SummaryGpu>>(dir.path(), &job))
    });
    g.finish();
}

criterion_group!(report_benches, benches);
criterion_main!(report_benches);
