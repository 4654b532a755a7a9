//! Near out of memory: a GPU whose peak memory reached
//! `thresholds.near_oom_share` of its memory. One rule and one list of
//! remedies for the job record (epilog), `gpu-health report --near-oom`
//! and the notice the SPANK plugin gives the job's user at step end.

use crate::snapshot::NodeSnapshot;

use super::record::JobRecord;
use super::report::memory_pct;
use super::write::peak_memory;

/// What to try, in the order that costs the least.
pub const REMEDIES: &[&str] = &[
    "BF16/FP16 mixed precision (activations and gradients take half the memory)",
    "gradient (activation) checkpointing: recompute activations in the backward pass instead of keeping them",
    "DeepSpeed ZeRO stage 2/3 (or FSDP), with optimizer state offloaded to CPU memory",
    "a smaller micro-batch with gradient accumulation (the same global batch in more steps)",
];

/// The same remedies, short enough for one line of a job's output.
pub const REMEDIES_SHORT: &str = "BF16/FP16 mixed precision, gradient checkpointing, \
DeepSpeed ZeRO 2/3 or FSDP with CPU offload, a smaller micro-batch with gradient accumulation";

/// Pure: whether `peak` reached `share` of `total`.
pub fn is_near_oom(peak: u64, total: u64, share: f64) -> bool {
    total > 0 && peak as f64 >= share * total as f64
}

/// Flag the GPUs whose peak memory reached `share` of their memory;
/// returns the flagged GPUs' indices.
pub fn flag_near_oom(record: &mut JobRecord, share: f64) -> Vec<u32> {
    let mut flagged = Vec::new();
    for g in &mut record.gpus {
        if let (Some(peak), Some(total)) = (g.peak_memory_bytes, g.memory_total_bytes) {
            if is_near_oom(peak, total, share) {
                g.near_oom = true;
                flagged.push(g.index);
            }
        }
    }
    flagged
}

/// One GPU that came near its memory during a window (a step).
#[derive(Debug, Clone, PartialEq)]
pub struct NearOomGpu {
    pub index: u32,
    pub peak_memory_bytes: u64,
    pub memory_total_bytes: u64,
}

impl NearOomGpu {
    /// `GPU3 peaked at 78.9 of 79.6 GiB (99%)`.
    pub fn describe(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let pct =
            memory_pct(Some(self.peak_memory_bytes), Some(self.memory_total_bytes)).unwrap_or(0.0);
        format!(
            "GPU{} peaked at {:.1} of {:.1} GiB ({pct:.0}%)",
            self.index,
            gib(self.peak_memory_bytes),
            gib(self.memory_total_bytes)
        )
    }
}

/// Pure: the GPUs of `gpus` whose accounted processes that started within
/// `[since_ms, until_ms]` peaked at `share` of the GPU's memory or more.
/// A GPU without the figures (accounting off, MIG, no process) is left
/// out: no figure is invented.
pub fn near_oom_since(
    snapshot: &NodeSnapshot,
    gpus: &[u32],
    since_ms: u64,
    until_ms: u64,
    share: f64,
) -> Vec<NearOomGpu> {
    gpus.iter()
        .filter_map(|&i| snapshot.gpu_by_index(i))
        .filter_map(|g| {
            let total = g.memory_total_bytes?;
            let peak = peak_memory(g.accounting_mode, g, since_ms, until_ms).ok()?;
            is_near_oom(peak, total, share).then_some(NearOomGpu {
                index: g.index,
                peak_memory_bytes: peak,
                memory_total_bytes: total,
            })
        })
        .collect()
}

/// The notice for the job's user, one line: which GPUs of `node` came
/// near their memory during `step`, and what to try. `None` when none did.
pub fn step_notice(node: &str, step: &str, gpus: &[NearOomGpu], share: f64) -> Option<String> {
    if gpus.is_empty() {
        return None;
    }
    let list: Vec<String> = gpus.iter().map(NearOomGpu::describe).collect();
    Some(format!(
        "gpu-health: step {step} came near out of GPU memory on {node} (a peak of {:.0}% or more): {}; \
         to need less, cheapest first: {REMEDIES_SHORT}",
        share * 100.0,
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{AccountedProcess, GpuSnapshot};

    fn gpu(index: u32, total: u64, processes: Vec<AccountedProcess>) -> GpuSnapshot {
        GpuSnapshot {
            index,
            memory_total_bytes: Some(total),
            accounting_mode: Some(true),
            accounted_processes: processes,
            ..GpuSnapshot::default()
        }
    }

    fn process(start_ms: u64, max_memory: u64) -> AccountedProcess {
        AccountedProcess {
            pid: 7,
            start_time_us: start_ms * 1000,
            max_memory_bytes: Some(max_memory),
            ..AccountedProcess::default()
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn only_processes_of_the_window_count() {
        let snap = NodeSnapshot {
            gpus: vec![
                // An earlier job's process filled GPU0; this step's did not.
                gpu(
                    0,
                    80 * GIB,
                    vec![process(500, 79 * GIB), process(2_000, 10 * GIB)],
                ),
                gpu(1, 80 * GIB, vec![process(2_000, 78 * GIB)]),
                gpu(2, 80 * GIB, vec![]),
            ],
            ..NodeSnapshot::default()
        };
        let found = near_oom_since(&snap, &[0, 1, 2], 1_000, 9_000, 0.95);
        assert_eq!(
            found,
            vec![NearOomGpu {
                index: 1,
                peak_memory_bytes: 78 * GIB,
                memory_total_bytes: 80 * GIB
            }]
        );
        let line = step_notice("n1", "7.0", &found, 0.95).unwrap_or_default();
        assert!(
            line.starts_with("gpu-health: step 7.0 came near out of GPU memory on n1 (a peak of 95% or more): GPU1 peaked at 78.0 of 80.0 GiB (98%); "),
            "{line}"
        );
        assert!(line.contains("BF16/FP16 mixed precision"), "{line}");
        assert!(
            !line.contains("pid"),
            "no process is named to the user: {line}"
        );
    }

    #[test]
    fn no_figure_no_notice() {
        let mut off = gpu(0, 80 * GIB, vec![process(2_000, 80 * GIB)]);
        off.accounting_mode = None; // MIG, or not supported
        let snap = NodeSnapshot {
            gpus: vec![off],
            ..NodeSnapshot::default()
        };
        assert!(near_oom_since(&snap, &[0], 1_000, 9_000, 0.95).is_empty());
        assert_eq!(step_notice("n1", "1.0", &[], 0.95), None);
    }

    #[test]
    fn the_share_is_inclusive() {
        assert!(is_near_oom(95, 100, 0.95));
        assert!(!is_near_oom(94, 100, 0.95));
        assert!(!is_near_oom(0, 0, 0.95));
    }
}
