//! The job report's writers: the table (with a line per GPU, rendered as
//! the records are read), JSON and CSV (figures rounded to what they
//! mean).

use std::fmt::Write as _;
use std::io::{self, Write};

use gpu_health_core::records::{self, GpuRecord, GpuSink, JobSummary};
use gpu_health_core::time::format_utc_ms;

use super::format::{csv_field, csv_figure, opt, write_rounded_json, Fixed, Gib, Term};

/// CSV shows no GPU, only how many.
#[derive(Debug, Default)]
pub(crate) struct GpuCount(usize);

impl GpuSink for GpuCount {
    type Part = usize;

    fn part(_node: &str, gpus: Vec<GpuRecord>) -> usize {
        gpus.len()
    }

    fn append(&mut self, part: usize) {
        self.0 += part;
    }

    fn count(&self) -> usize {
        self.0
    }
}

/// The table's GPU lines of a job, rendered on the parse workers as the
/// records are read: far less memory than the records for a table of
/// every job.
#[derive(Debug, Default)]
pub(crate) struct TableGpus {
    count: usize,
    lines: String,
}

impl GpuSink for TableGpus {
    type Part = TableGpus;

    fn part(node: &str, gpus: Vec<GpuRecord>) -> TableGpus {
        let mut out = TableGpus {
            count: gpus.len(),
            lines: String::with_capacity(gpus.len() * 96),
        };
        for r in &gpus {
            let pct = records::memory_pct(r.peak_memory_bytes, r.memory_total_bytes);
            // Writing to a String cannot fail.
            let _ = write!(
                out.lines,
                "    {} GPU{} {}  {} J  {} W (max {} W)  peak {}",
                Term(node),
                r.index,
                Term(r.pci.as_deref().unwrap_or("-")),
                Fixed(r.energy_j, 1),
                Fixed(r.mean_power_w, 1),
                Fixed(r.peak_power_w, 1),
                Gib(r.peak_memory_bytes, pct)
            );
            for why in [&r.energy_absent_reason, &r.peak_memory_absent_reason]
                .into_iter()
                .flatten()
            {
                let _ = write!(out.lines, "  [{}]", Term(why));
            }
            if mean_above_peak(r.mean_power_w, r.peak_power_w) {
                let _ = write!(
                    out.lines,
                    "  [mean above the sampled max: the samples missed its busiest moments]"
                );
            }
            out.lines.push('\n');
        }
        out
    }

    fn append(&mut self, part: TableGpus) {
        self.count += part.count;
        self.lines.push_str(&part.lines);
    }

    fn count(&self) -> usize {
        self.count
    }
}

pub(crate) fn write_json(out: &mut dyn Write, jobs: &[JobSummary]) -> io::Result<()> {
    write_rounded_json(out, jobs)
}

pub(crate) fn write_table(out: &mut dyn Write, jobs: &[JobSummary<TableGpus>]) -> io::Result<()> {
    if jobs.is_empty() {
        return out.write_all(b"no job records\n");
    }
    writeln!(
        out,
        "{:<12} {:<10} {:>5} {:>4} {:>12} {:>9} {:>8} {:>8} {:>18} {:>9} {:>5} {:>6} {:>6} {:>4}",
        "JOB",
        "USER",
        "NODES",
        "GPUS",
        "ENERGY_J",
        "KWH",
        "MEAN_W",
        "PEAK_W",
        "PEAK_MEM",
        "ECC_C/U",
        "REMAP",
        "NVLINK",
        "PCIE",
        "XIDS"
    )?;
    for j in jobs {
        writeln!(
            out,
            "{:<12} {:<10} {:>5} {:>4} {:>12} {:>9} {:>8} {:>8} {:>18} {:>9} {:>5} {:>6} {:>6} {:>4}",
            Term(&j.job_id),
            Term(j.user.as_deref().unwrap_or("-")),
            j.nodes.len(),
            j.gpus.count,
            Fixed(j.energy_j, 1),
            Fixed(j.energy_kwh, 4),
            Fixed(j.mean_power_w, 1),
            Fixed(j.peak_power_w, 1),
            Gib(j.peak_memory_bytes, j.peak_memory_pct),
            format!("{}/{}", j.ecc_corrected_delta, j.ecc_uncorrected_delta),
            j.remapped_correctable_delta
                .saturating_add(j.remapped_uncorrectable_delta),
            j.nvlink_errors_delta,
            j.pcie_replay_delta,
            j.xid_events
        )?;
        out.write_all(j.gpus.lines.as_bytes())?;
        if j.gpus_without_energy > 0 {
            writeln!(
                out,
                "    note: {} GPU(s) without an energy figure; the sum is a lower bound",
                j.gpus_without_energy
            )?;
        }
        if !j.start_snapshot_missing.is_empty() {
            writeln!(
                out,
                "    note: no start snapshot on {}",
                Term(&j.start_snapshot_missing.join(","))
            )?;
        }
        for d in &j.drained {
            writeln!(out, "    drained {}", Term(d))?;
        }
        for d in &j.drain_failed {
            writeln!(out, "    DRAIN FAILED {}", Term(d))?;
        }
        if mean_above_peak(j.mean_power_w, j.peak_power_w) {
            writeln!(
                out,
                "    note: mean power above the sampled peak: power is sampled at job start, \
                 each health check and job end, and the samples missed the busiest moments"
            )?;
        }
    }
    Ok(())
}

pub(crate) fn write_csv(out: &mut dyn Write, jobs: &[JobSummary<GpuCount>]) -> io::Result<()> {
    out.write_all(
        b"job_id,user,partition,nodes,gpus,start,end,duration_s,energy_j,energy_kwh,gpus_without_energy,\
         mean_power_w,peak_power_w,peak_memory_bytes,peak_memory_pct,ecc_corrected_delta,ecc_uncorrected_delta,\
         remapped_correctable_delta,remapped_uncorrectable_delta,nvlink_errors_delta,pcie_replay_delta,\
         xid_events,drained,drain_failed\n",
    )?;
    for j in jobs {
        let fields = [
            j.job_id.clone(),
            opt(j.user.as_deref()),
            opt(j.partition.as_deref()),
            j.nodes.join(" "),
            j.gpus.count().to_string(),
            opt(j.start_ms.map(format_utc_ms)),
            format_utc_ms(j.end_ms),
            csv_figure("duration_s", j.duration_s),
            csv_figure("energy_j", j.energy_j),
            csv_figure("energy_kwh", j.energy_kwh),
            j.gpus_without_energy.to_string(),
            csv_figure("mean_power_w", j.mean_power_w),
            csv_figure("peak_power_w", j.peak_power_w),
            opt(j.peak_memory_bytes),
            csv_figure("peak_memory_pct", j.peak_memory_pct),
            j.ecc_corrected_delta.to_string(),
            j.ecc_uncorrected_delta.to_string(),
            j.remapped_correctable_delta.to_string(),
            j.remapped_uncorrectable_delta.to_string(),
            j.nvlink_errors_delta.to_string(),
            j.pcie_replay_delta.to_string(),
            j.xid_events.to_string(),
            j.drained.join("; "),
            j.drain_failed.join("; "),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        writeln!(out, "{}", line.join(","))?;
    }
    Ok(())
}

/// Whether a mean power is above the sampled peak beside it (by more
/// than the rounding of the figures).
fn mean_above_peak(mean: Option<f64>, peak: Option<f64>) -> bool {
    matches!((mean, peak), (Some(m), Some(p)) if m > p + 0.05)
}
