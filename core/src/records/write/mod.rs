//! What the prolog and the epilog write: the job's start counters, the
//! record's figures (pure), the records file or its spool, the sampled
//! power peaks, the Prometheus textfile.

mod compute;
mod job_power;
pub mod metrics;
mod metrics_render;
mod metrics_state;
#[cfg(test)]
mod metrics_tests;
mod metrics_xids;
mod prometheus;
mod start;
mod store;

pub use compute::{
    build_record, counter_delta, delta_findings, describe_nvml_failure, during_job, energy_j,
    mean_power_w, peak_memory, peak_power, JobEnd, JobMeta, NO_START,
};
pub use job_power::{sample_running_jobs, GpuPeak, PowerPeaks, TotalPeak, PEAKS_VERSION};
pub use metrics::LivePower;
pub use metrics_render::{render as render_textfile, CAUSES, VERDICTS};
pub use prometheus::{
    refresh_live as refresh_prometheus_live, render as render_prometheus,
    update as update_prometheus, RECENT_JOBS,
};
pub use start::{nvlink_error_total, GpuCounters, JobStart, START_VERSION};
pub use store::{flush_pending, store_line, Stored};
