//! Per-job GPU records: energy, peak memory and health deltas.
//!
//! The prolog saves a [`JobStart`] (counters of the job's GPUs and the
//! kernel-log cursor, [`save_job_start`]); the epilog probes again,
//! [`build_record`] computes the figures (pure), and [`finish_job`]
//! appends the [`JobRecord`] to `<records_dir>/jobs.jsonl`, updates the
//! Prometheus textfile, drains the node after a fatal fault, and removes
//! the job's state files. `gpu-health report` reads the records back with
//! [`read_records`]. Formats: docs/records.md.

mod compute;
mod job;
mod prometheus;
mod read;
mod record;
mod start;
mod store;
mod summary;

pub use compute::{
    build_record, counter_delta, delta_findings, describe_nvml_failure, during_job, energy_j,
    mean_power_w, peak_memory, JobEnd, JobMeta, NO_START,
};
pub use job::{finish_job, save_job_start, EpilogOutcome};
pub use prometheus::{render as render_prometheus, update as update_prometheus, RECENT_JOBS};
pub use read::{read_records, ReadRecords};
pub use record::{GpuRecord, JobRecord, RECORD_VERSION};
pub use start::{
    nvlink_error_total, remove_stale as remove_stale_starts, start_path, GpuCounters, JobStart,
    START_VERSION,
};
pub use store::{
    append_lines, flush_pending, jobs_file, pending_dir, spool, store_line, StoreError, Stored,
    JOBS_FILE,
};
pub use summary::{memory_pct, summarize, JobSummary, SummaryGpu};

#[cfg(test)]
mod tests;
