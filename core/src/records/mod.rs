//! Per-job GPU records: energy, peak memory and health deltas.
//!
//! The prolog saves a [`JobStart`] (counters of the job's GPUs and the
//! kernel-log cursor); the epilog probes again, [`build_record`] computes
//! the figures (pure), and the epilog run (`run::epilog`) stores the
//! [`JobRecord`] ([`store_line`]), updates the Prometheus textfile and
//! drains the node after a fatal fault. `gpu-health report` reads the
//! records back with [`read_records`] or, summed per job and filtered,
//! [`read_jobs`]. Formats: docs/records.md.

mod compute;
mod job_power;
pub mod metrics;
mod metrics_render;
mod near_oom;
pub mod power;
mod prometheus;
mod read;
mod read_energy;
mod record;
mod start;
mod store;
mod summary;

pub use compute::{
    build_record, counter_delta, delta_findings, describe_nvml_failure, during_job, energy_j,
    mean_power_w, peak_memory, peak_power, JobEnd, JobMeta, NO_START,
};
pub use job_power::{sample_running_jobs, GpuPeak, PowerPeaks, TotalPeak, PEAKS_VERSION};
pub use metrics::LivePower;
pub use metrics_render::{render as render_textfile, CAUSES, VERDICTS};
pub use near_oom::{
    flag_near_oom, is_near_oom, near_oom_since, step_notice, NearOomGpu, REMEDIES, REMEDIES_SHORT,
};
pub use prometheus::{
    refresh_live as refresh_prometheus_live, render as render_prometheus,
    update as update_prometheus, RECENT_JOBS,
};
pub use read::{
    read_jobs, read_records, read_records_filtered, ReadJobs, ReadRecords, MAX_LINE_BYTES,
};
pub use read_energy::{read_energies, ReadEnergies};
pub use record::{GpuRecord, JobRecord, RECORD_VERSION};
pub use start::{nvlink_error_total, GpuCounters, JobStart, START_VERSION};
pub use store::{flush_pending, store_line, Stored};
pub use summary::{
    memory_pct, summarize, summarize_filtered, GpuSink, JobSummary, PreparedRecord, ReportFilter,
    Summarizer, SummaryGpu,
};

#[cfg(test)]
mod metrics_tests;
#[cfg(test)]
mod report_tests;
#[cfg(test)]
mod tests;
