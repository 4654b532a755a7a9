//! Per-job GPU records: energy, peak memory and health deltas.
//!
//! The prolog saves a [`JobStart`] (counters of the job's GPUs and the
//! kernel-log cursor); the epilog probes again, [`build_record`] computes
//! the figures (pure), and the epilog run (`run::epilog`) stores the
//! [`JobRecord`] ([`store_line`]), updates the Prometheus textfile and
//! drains the node after a fatal fault. `gpu-health report` reads the
//! records back with [`read_records`] or, summed per job and filtered,
//! [`read_jobs`]. Formats: docs/records.md.

mod near_oom;
mod record;
pub mod report;
pub mod write;

pub use near_oom::{
    flag_near_oom, is_near_oom, near_oom_since, step_notice, NearOomGpu, REMEDIES, REMEDIES_SHORT,
};
pub use record::{GpuRecord, JobRecord, RECORD_VERSION};
pub use report::{
    memory_pct, power, read_energies, read_jobs, read_records, read_records_filtered, summarize,
    summarize_filtered, GpuSink, JobSummary, PreparedRecord, ReadEnergies, ReadJobs, ReadRecords,
    ReportFilter, Summarizer, SummaryGpu, MAX_LINE_BYTES,
};
pub use write::{
    build_record, counter_delta, delta_findings, describe_nvml_failure, during_job, energy_j,
    flush_pending, mean_power_w, metrics, nvlink_error_total, peak_memory, peak_power,
    refresh_prometheus_live, render_prometheus, render_textfile, sample_running_jobs, store_line,
    update_prometheus, GpuCounters, GpuPeak, JobEnd, JobMeta, JobStart, LivePower, PowerPeaks,
    Stored, TotalPeak, CAUSES, NO_START, PEAKS_VERSION, RECENT_JOBS, START_VERSION, VERDICTS,
};

#[cfg(test)]
mod tests;
