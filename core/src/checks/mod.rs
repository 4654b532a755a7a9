//! Pure checks: snapshot + configuration + saved history -> findings.
//!
//! Nothing here touches NVML, files or Slurm, so every rule is tested
//! without hardware. One function per check; [`evaluate`] runs them all.

mod gpu;
pub mod history;
mod job;
mod node;

use crate::config::Config;
use crate::finding::Finding;
use crate::snapshot::NodeSnapshot;

pub use history::{EccHistory, LinkHistory};
pub use job::leftovers;

/// Everything the checks may read.
pub struct CheckInput<'a> {
    pub snapshot: &'a NodeSnapshot,
    pub config: &'a Config,
    /// Corrected-ECC samples from earlier runs (before this snapshot).
    pub history: &'a EccHistory,
    /// NVLinks seen active since this boot by earlier runs.
    pub links: &'a LinkHistory,
    /// Unix ms of this run.
    pub now_ms: u64,
    /// `Some(k)`: this run sees the node from inside a job's cgroup (a
    /// Prolog with `PrologFlags=RunInJob`), whose device rules may show
    /// NVML only the job's `k` GPUs.
    pub job_view: Option<usize>,
}

/// Run every check. Findings come node-wide first, then by GPU index.
pub fn evaluate(input: &CheckInput<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    node::nvml_available(input, &mut out);
    node::gpu_count(input, &mut out);
    for g in &input.snapshot.gpus {
        gpu::lost(g, &mut out);
        if g.lost {
            continue;
        }
        gpu::ecc_uncorrected(g, &mut out);
        gpu::ecc_corrected_rate(g, input, &mut out);
        gpu::remapped_rows(g, &mut out);
        gpu::retired_pages(g, &mut out);
        gpu::pcie_link(g, &mut out);
        gpu::nvlink(g, input.links, &mut out);
        gpu::temperature(g, &input.config.thresholds, &mut out);
        gpu::power_limit(g, &input.config.thresholds, &mut out);
        gpu::clock_events(g, &mut out);
        gpu::persistence(g, &input.config.thresholds, &mut out);
        gpu::fabric(g, &mut out);
        gpu::recovery_action(g, &mut out);
    }
    out
}

#[cfg(test)]
mod tests;
