//! node_exporter textfile with the figures of this node's most recent
//! jobs. The list of recent records is kept in the state directory
//! (`StateFile::RecentJobs`); the textfile is replaced by atomic rename.

use std::fmt::Write as _;
use std::path::Path;

use crate::records::record::JobRecord;
use crate::snapshot::NodeSnapshot;
use crate::state::{self, StateDir, StateError, StateFile};

/// How many jobs the textfile shows (one series per GPU each: 8-GPU jobs
/// give a few hundred series).
pub const RECENT_JOBS: usize = 16;

/// The node's power as the latest probe saw it (the epilog at job end, the
/// health check every HealthCheckInterval): what the textfile shows live.
#[derive(Debug, Clone, PartialEq)]
pub struct LivePower {
    /// (GPU index, draw W, enforced limit W).
    pub gpus: Vec<(u32, Option<f64>, Option<f64>)>,
    /// Unix ms of the probe.
    pub at_ms: u64,
}

impl LivePower {
    pub fn of(snapshot: &NodeSnapshot) -> LivePower {
        let w = |mw: Option<u32>| mw.map(|v| f64::from(v) / 1000.0);
        LivePower {
            gpus: snapshot
                .gpus
                .iter()
                .map(|g| (g.index, w(g.power_usage_mw), w(g.power_limit_mw)))
                .collect(),
            at_ms: snapshot.taken_at_ms,
        }
    }
}

/// Rewrite the textfile with the recent jobs as they are and `live` (the
/// health check's refresh of the live figures).
pub fn refresh_live(state: &StateDir, textfile: &Path, live: &LivePower) -> Result<(), StateError> {
    let recent: Vec<JobRecord> = state.load(())?.unwrap_or_default();
    state::write_file_atomic(textfile, render_with(&recent, Some(live)).as_bytes(), 0o644)
}

/// Add `record` to the recent list and rewrite the textfile (readable by
/// node_exporter, which does not run as root: mode 0644).
pub fn update(
    state: &StateDir,
    textfile: &Path,
    record: &JobRecord,
    live: Option<&LivePower>,
) -> Result<(), StateError> {
    // Locked: concurrent epilogs read, change and write the same list,
    // and the textfile is written under the same lock, so that the last
    // one written holds every job (not an older list of a slower epilog).
    state.update((), |r: Option<Vec<JobRecord>>| {
        let mut recent = r.unwrap_or_default();
        recent.retain(|r| r.job_id != record.job_id);
        recent.push(record.clone());
        if recent.len() > RECENT_JOBS {
            recent.drain(..recent.len() - RECENT_JOBS);
        }
        let written =
            state::write_file_atomic(textfile, render_with(&recent, live).as_bytes(), 0o644);
        (Some(recent), written)
    })?
}

/// The latest job records of the node, for the textfile.
impl crate::state::StateValue for Vec<JobRecord> {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::RecentJobs
    }
}

/// A live GPU figure: name, help, value of one (index, draw, limit).
type LiveFamily = (
    &'static str,
    &'static str,
    fn(&(u32, Option<f64>, Option<f64>)) -> Option<f64>,
);

fn render_live(out: &mut String, live: &LivePower) {
    let families: [LiveFamily; 2] = [
        (
            "gpu_health_gpu_power_watts",
            "GPU power draw at the latest probe",
            |g| g.1,
        ),
        (
            "gpu_health_gpu_power_limit_watts",
            "GPU enforced power limit",
            |g| g.2,
        ),
    ];
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for g in &live.gpus {
            if let Some(v) = value(g).filter(|v| v.is_finite()) {
                let _ = writeln!(out, "{name}{{gpu=\"{}\"}} {v}", g.0);
            }
        }
    }
    let total: f64 = live.gpus.iter().filter_map(|g| g.1).sum();
    let _ = writeln!(out, "# HELP gpu_health_node_gpu_power_watts Sum of the node's GPU power draw at the latest probe");
    let _ = writeln!(out, "# TYPE gpu_health_node_gpu_power_watts gauge");
    let _ = writeln!(out, "gpu_health_node_gpu_power_watts {total}");
    let _ = writeln!(out, "# HELP gpu_health_power_probe_timestamp_seconds When the live power was probed (Unix time)");
    let _ = writeln!(out, "# TYPE gpu_health_power_probe_timestamp_seconds gauge");
    let _ = writeln!(
        out,
        "gpu_health_power_probe_timestamp_seconds {}",
        live.at_ms as f64 / 1000.0
    );
}

/// Label values: backslash, quote and newline escaped.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    name: &'static str,
    help: &'static str,
    value: fn(&crate::records::record::GpuRecord) -> Option<f64>,
}

const GPU_FAMILIES: &[Family] = &[
    Family {
        name: "gpu_health_job_gpu_energy_joules",
        help: "GPU energy used by the job (energy counter difference)",
        value: |g| g.energy_j,
    },
    Family {
        name: "gpu_health_job_gpu_mean_power_watts",
        help: "Mean GPU power over the job",
        value: |g| g.mean_power_w,
    },
    Family {
        name: "gpu_health_job_gpu_peak_memory_bytes",
        help: "Largest GPU memory use of the job's processes",
        value: |g| g.peak_memory_bytes.map(|v| v as f64),
    },
    Family {
        name: "gpu_health_job_gpu_memory_total_bytes",
        help: "GPU memory size",
        value: |g| g.memory_total_bytes.map(|v| v as f64),
    },
    Family {
        name: "gpu_health_job_gpu_ecc_corrected_errors",
        help: "Corrected ECC errors during the job",
        value: |g| g.ecc_corrected_delta.map(|v| v as f64),
    },
    Family {
        name: "gpu_health_job_gpu_ecc_uncorrected_errors",
        help: "Uncorrected ECC errors during the job",
        value: |g| g.ecc_uncorrected_delta.map(|v| v as f64),
    },
    Family {
        name: "gpu_health_job_gpu_nvlink_errors",
        help: "NVLink errors during the job",
        value: |g| g.nvlink_errors_delta.map(|v| v as f64),
    },
    Family {
        name: "gpu_health_job_gpu_pcie_replays",
        help: "PCIe replays during the job",
        value: |g| g.pcie_replay_delta.map(|v| v as f64),
    },
];

/// Name, help, value of a per-job series.
type JobFamily = (&'static str, &'static str, fn(&JobRecord) -> Option<f64>);

/// Pure: the textfile for `records` (absent figures have no sample).
pub fn render(records: &[JobRecord]) -> String {
    render_with(records, None)
}

/// [`render`] with the node's live power first.
pub fn render_with(records: &[JobRecord], live: Option<&LivePower>) -> String {
    let mut out = String::new();
    if let Some(live) = live {
        render_live(&mut out, live);
    }
    let job_labels = |r: &JobRecord| {
        format!(
            "job=\"{}\",user=\"{}\"",
            esc(&r.job_id),
            esc(r.user.as_deref().unwrap_or(""))
        )
    };
    for fam in GPU_FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", fam.name, fam.help);
        let _ = writeln!(out, "# TYPE {} gauge", fam.name);
        for r in records {
            for g in &r.gpus {
                if let Some(v) = (fam.value)(g).filter(|v| v.is_finite()) {
                    let _ = writeln!(
                        out,
                        "{}{{{},gpu=\"{}\"}} {v}",
                        fam.name,
                        job_labels(r),
                        g.index
                    );
                }
            }
        }
    }
    let job_families: [JobFamily; 3] = [
        (
            "gpu_health_job_duration_seconds",
            "Job duration on this node",
            |r| r.duration_s,
        ),
        (
            "gpu_health_job_end_timestamp_seconds",
            "When the job ended (Unix time)",
            |r| Some(r.end_ms as f64 / 1000.0),
        ),
        (
            "gpu_health_job_xid_events",
            "Xid events on the job's GPUs during the job",
            |r| {
                r.xids_absent_reason
                    .is_none()
                    .then_some(r.xids.len() as f64)
            },
        ),
    ];
    for (name, help, value) in job_families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for r in records {
            if let Some(v) = value(r).filter(|v| v.is_finite()) {
                let _ = writeln!(out, "{name}{{{}}} {v}", job_labels(r));
            }
        }
    }
    out
}
