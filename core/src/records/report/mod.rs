//! What `gpu-health report` reads: the records back, line by line and
//! bounded, summed per job, and per node and rack for the power report.

pub mod power;
mod read;
mod read_energy;
mod summary;

pub use read::{
    read_jobs, read_records, read_records_filtered, ReadJobs, ReadRecords, MAX_LINE_BYTES,
};
pub use read_energy::{read_energies, ReadEnergies};
pub use summary::{
    memory_pct, summarize, summarize_filtered, GpuSink, JobSummary, PreparedRecord, ReportFilter,
    Summarizer, SummaryGpu,
};

#[cfg(test)]
mod report_tests;
