//! `gpu-health report --near-oom`: the GPUs whose peak memory reached
//! `thresholds.near_oom_share` of their memory (flagged `near_oom` by the
//! epilog), with the figures and what a user can do, cheapest first.

use std::io::{self, Write};

use gpu_health_core::records::{memory_pct, GpuRecord, GpuSink, JobSummary, REMEDIES};
use serde_json::{json, Value};

use super::format::{round, Gib, Term};

/// One flagged GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct NearOomGpu {
    pub node: String,
    pub index: u32,
    pub pci: Option<String>,
    pub peak_memory_bytes: u64,
    pub memory_total_bytes: u64,
}

/// The flagged GPUs of a job (the others are dropped as they are read).
#[derive(Debug, Default)]
pub struct NearOomGpus(pub Vec<NearOomGpu>);

impl GpuSink for NearOomGpus {
    type Part = Vec<NearOomGpu>;
    const ONLY_NEAR_OOM: bool = true;

    fn part(node: &str, gpus: Vec<GpuRecord>) -> Vec<NearOomGpu> {
        gpus.into_iter()
            .filter(|g| g.near_oom)
            .filter_map(|g| {
                Some(NearOomGpu {
                    node: node.to_string(),
                    index: g.index,
                    pci: g.pci,
                    peak_memory_bytes: g.peak_memory_bytes?,
                    memory_total_bytes: g.memory_total_bytes?,
                })
            })
            .collect()
    }

    fn append(&mut self, part: Vec<NearOomGpu>) {
        self.0.extend(part);
    }

    fn count(&self) -> usize {
        self.0.len()
    }
}

fn flagged(
    jobs: &[JobSummary<NearOomGpus>],
) -> impl Iterator<Item = (&JobSummary<NearOomGpus>, &NearOomGpu)> {
    jobs.iter()
        .flat_map(|j| j.gpus.0.iter().map(move |g| (j, g)))
}

pub fn write_table(out: &mut dyn Write, jobs: &[JobSummary<NearOomGpus>]) -> io::Result<()> {
    if flagged(jobs).next().is_none() {
        return out.write_all(b"no job came near its GPUs' memory\n");
    }
    writeln!(
        out,
        "{:<12} {:<10} {:<12} {:<5} {:<13} {:>22} {:>9}",
        "JOB", "USER", "NODE", "GPU", "PCI", "PEAK_MEM", "TOTAL"
    )?;
    for (j, g) in flagged(jobs) {
        let pct = memory_pct(Some(g.peak_memory_bytes), Some(g.memory_total_bytes));
        writeln!(
            out,
            "{:<12} {:<10} {:<12} {:<5} {:<13} {:>22} {:>5.1} GiB",
            Term(&j.job_id),
            Term(j.user.as_deref().unwrap_or("-")),
            Term(&g.node),
            format!("GPU{}", g.index),
            Term(g.pci.as_deref().unwrap_or("-")),
            Gib(Some(g.peak_memory_bytes), pct),
            g.memory_total_bytes as f64 / (1u64 << 30) as f64
        )?;
    }
    writeln!(out, "\nWhat the jobs' users can try, cheapest first:")?;
    for (i, r) in REMEDIES.iter().enumerate() {
        writeln!(out, "  {}. {r}", i + 1)?;
    }
    Ok(())
}

pub fn write_json(out: &mut dyn Write, jobs: &[JobSummary<NearOomGpus>]) -> io::Result<()> {
    let gpus: Vec<Value> = flagged(jobs)
        .map(|(j, g)| {
            json!({
                "job_id": j.job_id,
                "user": j.user,
                "node": g.node,
                "gpu": g.index,
                "pci": g.pci,
                "peak_memory_bytes": g.peak_memory_bytes,
                "memory_total_bytes": g.memory_total_bytes,
                "peak_memory_pct": memory_pct(Some(g.peak_memory_bytes), Some(g.memory_total_bytes)).map(|p| round(p, 2)),
            })
        })
        .collect();
    let doc = json!({ "near_oom": gpus, "remedies": REMEDIES });
    writeln!(out, "{doc}")
}

pub fn write_csv(out: &mut dyn Write, jobs: &[JobSummary<NearOomGpus>]) -> io::Result<()> {
    writeln!(
        out,
        "job_id,user,node,gpu,pci,peak_memory_bytes,memory_total_bytes"
    )?;
    for (j, g) in flagged(jobs) {
        let field = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        };
        writeln!(
            out,
            "{},{},{},{},{},{},{}",
            field(&j.job_id),
            field(j.user.as_deref().unwrap_or("")),
            field(&g.node),
            g.index,
            field(g.pci.as_deref().unwrap_or("")),
            g.peak_memory_bytes,
            g.memory_total_bytes
        )?;
    }
    Ok(())
}
