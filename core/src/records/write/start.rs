//! The job-start snapshot the prolog saves for the epilog
//! (`StateFile::JobStart`).

use serde::{Deserialize, Serialize};

use crate::ids::{JobId, NodeName};
use crate::snapshot::{EccCounts, GpuSnapshot, NodeSnapshot, RemappedRows};
use crate::xid::Cursor;

pub const START_VERSION: u32 = 1;

/// Counters of the job's GPUs when the job started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStart {
    pub version: u32,
    pub job_id: JobId,
    pub node: String,
    /// Unix ms when the prolog started (the job's window opens here).
    pub start_ms: u64,
    /// Unix ms when the counters were read.
    pub taken_at_ms: u64,
    /// The job's GPUs as SLURM_JOB_GPUS named them.
    pub job_gpus: Vec<u32>,
    pub gpus: Vec<GpuCounters>,
    /// The kernel log position after the prolog's scan.
    pub kernel_log_cursor: Option<Cursor>,
    /// NVML could not be used at job start.
    pub nvml_error: Option<String>,
}

/// One GPU's counters at job start (`None` = could not be read).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuCounters {
    pub index: u32,
    pub uuid: Option<String>,
    pub pci: Option<String>,
    pub energy_mj: Option<u64>,
    pub ecc: Option<EccCounts>,
    pub remapped_rows: Option<RemappedRows>,
    pub nvlink_errors: Option<u64>,
    pub pcie_replay: Option<u64>,
    pub accounting_mode: Option<bool>,
    /// Power drawn when the counters were read: the first sample of the
    /// job's peak power.
    #[serde(default)]
    pub power_mw: Option<u32>,
    #[serde(default)]
    pub power_violation_ns: Option<u64>,
    #[serde(default)]
    pub thermal_violation_ns: Option<u64>,
}

impl GpuCounters {
    pub fn from_snapshot(g: &GpuSnapshot) -> GpuCounters {
        GpuCounters {
            index: g.index,
            uuid: g.uuid.clone(),
            pci: g.pci_bus_id.clone(),
            energy_mj: g.energy_mj,
            ecc: g.ecc,
            remapped_rows: g.remapped_rows,
            nvlink_errors: nvlink_error_total(g),
            pcie_replay: g.pcie.and_then(|p| p.replay_counter),
            accounting_mode: g.accounting_mode,
            power_mw: g.power_usage_mw,
            power_violation_ns: g.power_violation_ns,
            thermal_violation_ns: g.thermal_violation_ns,
        }
    }
}

/// Sum of the error counters of all links that reported them; `None` for
/// a GPU without NVLinks or whose links reported nothing.
pub fn nvlink_error_total(g: &GpuSnapshot) -> Option<u64> {
    g.nvlinks
        .iter()
        .filter_map(|l| l.error_total)
        .fold(None, |acc: Option<u64>, n| {
            Some(acc.unwrap_or(0).saturating_add(n))
        })
}

impl JobStart {
    /// Pure: the start record of `job_gpus` from the prolog's snapshot.
    pub fn from_snapshot(
        job_id: JobId,
        node: &NodeName,
        job_gpus: &[u32],
        snapshot: &NodeSnapshot,
        cursor: Option<&Cursor>,
        start_ms: u64,
    ) -> JobStart {
        JobStart {
            version: START_VERSION,
            job_id,
            node: node.to_string(),
            start_ms,
            taken_at_ms: snapshot.taken_at_ms,
            job_gpus: job_gpus.to_vec(),
            gpus: job_gpus
                .iter()
                .filter_map(|&i| snapshot.gpu_by_index(i))
                .map(GpuCounters::from_snapshot)
                .collect(),
            kernel_log_cursor: cursor.cloned(),
            nvml_error: snapshot.nvml_error.as_ref().map(ToString::to_string),
        }
    }

    pub fn gpu(&self, index: u32) -> Option<&GpuCounters> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

impl crate::state::StateValue for JobStart {
    type Key = JobId;
    fn file(job: JobId) -> crate::state::StateFile {
        crate::state::StateFile::JobStart(job)
    }
}
