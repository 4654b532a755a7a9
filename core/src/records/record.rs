//! The job record: one JSON line per job and node in `jobs.jsonl`.
//!
//! Every figure that could not be measured is `null` with a reason beside
//! it; nothing is estimated. See docs/records.md for the field list.

use serde::{Deserialize, Serialize};

use crate::xid::XidEvent;

/// Format version of [`JobRecord`]; readers accept unknown fields.
pub const RECORD_VERSION: u32 = 1;

/// What the epilog measured for one job on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub version: u32,
    pub job_id: String,
    pub node: String,
    pub user: Option<String>,
    pub uid: Option<u32>,
    pub partition: Option<String>,
    /// `SLURM_JOB_EXIT_CODE` as Slurm passed it (a wait status).
    pub exit_code: Option<i64>,
    /// Unix ms when the prolog ran; `None` without a start snapshot.
    pub start_ms: Option<u64>,
    /// Unix ms when the epilog ran.
    pub end_ms: u64,
    pub duration_s: Option<f64>,
    pub start_snapshot_missing: bool,
    pub start_snapshot_missing_reason: Option<String>,
    /// NVML could not be used at job end (every GPU figure is then absent).
    pub nvml_error: Option<String>,
    pub gpus: Vec<GpuRecord>,
    /// Xid events on the job's GPUs while it ran, in log order.
    pub xids: Vec<XidEvent>,
    /// Why `xids` could not be read (empty then means "unknown").
    pub xids_absent_reason: Option<String>,
    /// The drain reason when the epilog drained the node.
    pub drained: Option<String>,
    /// The drain reason when draining was called for but failed (or was
    /// held back by a configuration error), with why.
    pub drain_failed: Option<String>,
    /// The job's GPUs on this node together at the sample that drew most
    /// (job start, each health check, job end), in W. Last, so
    /// that older readers of the array form are not shifted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_power_w: Option<f64>,
}

/// One GPU of the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuRecord {
    /// NVML index (as in SLURM_JOB_GPUS).
    pub index: u32,
    pub uuid: Option<String>,
    pub pci: Option<String>,
    pub name: Option<String>,
    pub energy_j: Option<f64>,
    pub energy_absent_reason: Option<String>,
    /// Energy over the time between the two counter readings.
    pub mean_power_w: Option<f64>,
    /// The highest power of the samples gpu-health took on the GPU during
    /// the job (job start, each health check, job end), and how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_samples: Option<u32>,
    pub peak_memory_bytes: Option<u64>,
    pub peak_memory_absent_reason: Option<String>,
    pub memory_total_bytes: Option<u64>,
    /// The peak reached `thresholds.near_oom_share` of the GPU's memory:
    /// the job was close to running out (see `gpu-health report --near-oom`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub near_oom: bool,
    /// The GPU was in MIG mode at job end: no peak memory (NVML keeps no
    /// accounting there), and the energy is the whole GPU's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mig: bool,
    /// Mean share of time the GPU's SMs / its memory were busy for the
    /// job's processes (NVML accounting statistics, weighted by each
    /// process's run time), in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_utilization_pct: Option<f64>,
    /// Seconds of the job that the power policy (the thermal one) held
    /// the GPU's clocks below what was asked: the difference of NVML's
    /// violation counters at job start and end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_throttled_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thermal_throttled_s: Option<f64>,
    pub ecc_corrected_delta: Option<u64>,
    pub ecc_uncorrected_delta: Option<u64>,
    pub remapped_correctable_delta: Option<u64>,
    pub remapped_uncorrectable_delta: Option<u64>,
    pub nvlink_errors_delta: Option<u64>,
    pub pcie_replay_delta: Option<u64>,
    /// Why a delta is absent (counter unreadable, went backwards...).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl JobRecord {
    /// The record as one JSON line (without the newline).
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}
