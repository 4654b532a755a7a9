//! The job-start snapshot the prolog saves for the epilog:
//! `<state_dir>/jobs/<job id>.start.json`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::snapshot::{EccCounts, GpuSnapshot, NodeSnapshot, RemappedRows};
use crate::state::{self, StateError, StatePaths};
use crate::xid::Cursor;

pub const START_VERSION: u32 = 1;

/// Counters of the job's GPUs when the job started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStart {
    pub version: u32,
    pub job_id: String,
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
        job_id: &str,
        node: &str,
        job_gpus: &[u32],
        snapshot: &NodeSnapshot,
        cursor: Option<&Cursor>,
        start_ms: u64,
    ) -> JobStart {
        JobStart {
            version: START_VERSION,
            job_id: job_id.to_string(),
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
            nvml_error: snapshot.nvml_error.as_ref().map(|e| format!("{e:?}")),
        }
    }

    pub fn gpu(&self, index: u32) -> Option<&GpuCounters> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

/// `<state_dir>/jobs/<job id>.start.json`.
pub fn start_path(state_dir: &Path, job_id: &str) -> PathBuf {
    StatePaths::new(state_dir)
        .jobs_dir()
        .join(format!("{job_id}.start.json"))
}

/// Save atomically (the jobs directory is created root-only).
pub fn save(state_dir: &Path, start: &JobStart) -> Result<(), StateError> {
    let paths = StatePaths::new(state_dir);
    state::ensure_private_dir(&paths.jobs_dir())?;
    state::save_json(&start_path(state_dir, &start.job_id), start, false)
}

/// `Ok(None)` when the prolog left nothing for this job.
pub fn load(state_dir: &Path, job_id: &str) -> Result<Option<JobStart>, StateError> {
    state::load_json(&start_path(state_dir, job_id))
}

/// Remove start snapshots older than `max_age` (jobs whose Epilog never
/// ran: node crash, Epilog not configured). Returns how many went.
pub fn remove_stale(state_dir: &Path, max_age: std::time::Duration) -> usize {
    let dir = StatePaths::new(state_dir).jobs_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        if !name.to_string_lossy().ends_with(".start.json") {
            continue;
        }
        let old = e
            .metadata()
            .ok()
            .filter(|m| m.file_type().is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > max_age);
        if old && std::fs::remove_file(e.path()).is_ok() {
            log::info!("removed stale job start snapshot {}", e.path().display());
            removed += 1;
        }
    }
    removed
}
