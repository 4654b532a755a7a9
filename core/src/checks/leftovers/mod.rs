//! Leftovers: the job's GPUs at job start (the Prolog only: at any other
//! time processes on a GPU are simply the running jobs').

use super::{Check, CheckInput, Place};
use crate::config::Thresholds;
use crate::finding::{Action, Finding};
use crate::snapshot::NodeSnapshot;

pub struct Leftovers;

impl Check for Leftovers {
    fn name(&self) -> &'static str {
        "leftovers"
    }
    fn section(&self) -> Option<&'static str> {
        Some("thresholds")
    }
    fn place(&self) -> Place {
        Place::Job
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        match input.job {
            Some(job) => leftovers(input.snapshot, &job.gpus, &input.config.thresholds),
            None => Vec::new(),
        }
    }
    fn doc(&self) -> &'static str {
        "| `leftovers` | warn | at job start a job's GPU has a compute process on it, or more than `thresholds.leftover_memory_mib` in use (an earlier job's stray process) |"
    }
}

/// Leftovers: compute processes still on the job's GPUs, or memory in use
/// above `thresholds.leftover_memory_mib`, when the job starts. An earlier
/// job's stray process makes this one run out of memory: warn (strict
/// jobs are refused). The pids go to the node's log only.
pub fn leftovers(snapshot: &NodeSnapshot, job_gpus: &[u32], t: &Thresholds) -> Vec<Finding> {
    let limit = t.leftover_memory_mib.saturating_mul(1 << 20);
    let mut out = Vec::new();
    for g in job_gpus.iter().filter_map(|&i| snapshot.gpu_by_index(i)) {
        if g.lost {
            continue;
        }
        let used = g.memory_used_bytes.unwrap_or(0);
        let procs = &g.running_processes;
        if procs.is_empty() && used <= limit {
            continue;
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let held: u64 = procs.iter().filter_map(|p| p.used_memory_bytes).sum();
        let label = match &g.pci_bus_id {
            Some(p) => format!("GPU{} {p}", g.index),
            None => format!("GPU{}", g.index),
        };
        let what = if procs.is_empty() {
            format!("{:.1} GiB of memory in use and no process", gib(used))
        } else {
            format!(
                "{} process(es) still running, holding {:.1} GiB ({:.1} GiB in use)",
                procs.len(),
                gib(held),
                gib(used)
            )
        };
        let mut f = Finding::gpu(
            "leftovers",
            Action::Warn,
            g.index,
            g.pci_bus_id.as_deref(),
            format!("leftovers {label}"),
            format!("{label} at job start: {what}; an earlier job's processes may leave this job short of memory"),
        );
        if !procs.is_empty() {
            let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
            f.culprit = Some(format!("pid {}", pids.join(",")));
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{GpuSnapshot, RunningProcess};

    const GIB: u64 = 1 << 30;

    fn gpu(index: u32, used: u64, pids: &[u32]) -> GpuSnapshot {
        GpuSnapshot {
            index,
            pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + index)),
            memory_used_bytes: Some(used),
            running_processes: pids
                .iter()
                .map(|&pid| RunningProcess {
                    pid,
                    used_memory_bytes: Some(30 * GIB),
                })
                .collect(),
            ..GpuSnapshot::default()
        }
    }

    #[test]
    fn processes_or_memory_left_on_the_jobs_gpus_warn() {
        let snap = NodeSnapshot {
            gpus: vec![
                gpu(0, 4 << 20, &[]),
                gpu(1, 30 * GIB, &[7001]),
                gpu(2, 3 * GIB, &[]),
                gpu(3, 30 * GIB, &[7002]),
            ],
            ..NodeSnapshot::default()
        };
        let t = Thresholds::default();
        let found = leftovers(&snap, &[0, 1, 2], &t);
        let got: Vec<(u32, Action)> = found.iter().map(|f| (f.gpu.unwrap(), f.action)).collect();
        assert_eq!(
            got,
            vec![(1, Action::Warn), (2, Action::Warn)],
            "GPU3 is not the job's"
        );
        assert!(
            found[0]
                .message
                .contains("1 process(es) still running, holding 30.0 GiB"),
            "{}",
            found[0].message
        );
        assert!(!found[0].message.contains("7001"), "no pid for the user");
        assert_eq!(found[0].culprit.as_deref(), Some("pid 7001"));
        assert!(found[0].log_line().contains("7001"));
        assert!(found[1]
            .message
            .contains("3.0 GiB of memory in use and no process"));
    }
}
