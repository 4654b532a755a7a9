//! `gpu-health report`: per-job GPU energy, peak memory and health deltas
//! from the records the epilogs wrote (summed across nodes when the
//! records directory is shared).

use std::fmt::Write as _;
use std::path::PathBuf;

use gpu_health_core::config::Config;
use gpu_health_core::records::{self, JobSummary};
use gpu_health_core::time::format_utc_ms;

const USAGE: &str = "\
usage: gpu-health report [--job ID] [--user NAME] [--since DATE] [--json|--csv] [--dir DIR]

  --job ID       only this job
  --user NAME    only this user's jobs
  --since DATE   only jobs that ended at or after DATE (UTC):
                 YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]
  --json         one object per job (JSON array), with its GPUs
  --csv          one line per job
  --dir DIR      records directory (default: records_dir of the configuration)
";

#[derive(Debug, Default, PartialEq)]
struct Args {
    job: Option<String>,
    user: Option<String>,
    since_ms: Option<u64>,
    format: Format,
    dir: Option<PathBuf>,
}

#[derive(Debug, Default, PartialEq, Clone, Copy)]
enum Format {
    #[default]
    Table,
    Json,
    Csv,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut out = Args::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--job" => out.job = Some(value("--job")?),
            "--user" => out.user = Some(value("--user")?),
            "--since" => {
                out.since_ms = Some(gpu_health_core::time::parse_since(&value("--since")?)?)
            }
            "--dir" => out.dir = Some(PathBuf::from(value("--dir")?)),
            "--json" | "--csv" if out.format != Format::Table => {
                return Err("--json and --csv exclude each other".into())
            }
            "--json" => out.format = Format::Json,
            "--csv" => out.format = Format::Csv,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(out)
}

pub fn run(args: &[String], cfg: &Config) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return 0;
    }
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpu-health report: {e}\n\n{USAGE}");
            return 2;
        }
    };
    let dir = args.dir.clone().unwrap_or_else(|| cfg.records_dir());
    let read = records::read_records(&dir);
    for e in &read.errors {
        eprintln!("gpu-health report: {e}");
    }
    if read.malformed > 0 {
        eprintln!(
            "gpu-health report: skipped {} malformed line(s) in {}",
            read.malformed,
            dir.display()
        );
    }
    let jobs: Vec<JobSummary> = records::summarize(&read.records)
        .into_iter()
        .filter(|j| args.job.as_ref().is_none_or(|id| *id == j.job_id))
        .filter(|j| args.user.is_none() || j.user == args.user)
        .filter(|j| args.since_ms.is_none_or(|s| j.end_ms >= s))
        .collect();
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&jobs)
            .map(|s| s + "\n")
            .unwrap_or_default(),
        Format::Csv => csv(&jobs),
        Format::Table => table(&jobs),
    };
    print!("{text}");
    if jobs.is_empty() && args.job.is_some() {
        eprintln!(
            "gpu-health report: no record of that job in {}",
            dir.display()
        );
        return 1;
    }
    0
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn fixed(v: Option<f64>, places: usize) -> String {
    v.map(|v| format!("{v:.places$}"))
        .unwrap_or_else(|| "-".into())
}

fn gib(bytes: Option<u64>, pct: Option<f64>) -> String {
    match (bytes, pct) {
        (Some(b), Some(p)) => format!("{:.1} GiB ({p:.0}%)", b as f64 / (1u64 << 30) as f64),
        (Some(b), None) => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        _ => "-".into(),
    }
}

fn table(jobs: &[JobSummary]) -> String {
    let mut out = String::new();
    if jobs.is_empty() {
        return "no job records\n".into();
    }
    let _ = writeln!(
        out,
        "{:<12} {:<10} {:>5} {:>4} {:>12} {:>9} {:>8} {:>18} {:>9} {:>5} {:>6} {:>6} {:>4}",
        "JOB",
        "USER",
        "NODES",
        "GPUS",
        "ENERGY_J",
        "KWH",
        "MEAN_W",
        "PEAK_MEM",
        "ECC_C/U",
        "REMAP",
        "NVLINK",
        "PCIE",
        "XIDS"
    );
    for j in jobs {
        let _ = writeln!(
            out,
            "{:<12} {:<10} {:>5} {:>4} {:>12} {:>9} {:>8} {:>18} {:>9} {:>5} {:>6} {:>6} {:>4}",
            j.job_id,
            j.user.as_deref().unwrap_or("-"),
            j.nodes.len(),
            j.gpus.len(),
            fixed(j.energy_j, 1),
            fixed(j.energy_kwh, 4),
            fixed(j.mean_power_w, 1),
            gib(j.peak_memory_bytes, j.peak_memory_pct),
            format!("{}/{}", j.ecc_corrected_delta, j.ecc_uncorrected_delta),
            j.remapped_correctable_delta + j.remapped_uncorrectable_delta,
            j.nvlink_errors_delta,
            j.pcie_replay_delta,
            j.xid_events
        );
        for g in &j.gpus {
            let r = &g.gpu;
            let mut line = format!(
                "    {} GPU{} {}  {} J  {} W  peak {}",
                g.node,
                r.index,
                r.pci.as_deref().unwrap_or("-"),
                fixed(r.energy_j, 1),
                fixed(r.mean_power_w, 1),
                gib(r.peak_memory_bytes, g.peak_memory_pct)
            );
            for why in [&r.energy_absent_reason, &r.peak_memory_absent_reason]
                .into_iter()
                .flatten()
            {
                let _ = write!(line, "  [{why}]");
            }
            let _ = writeln!(out, "{line}");
        }
        if j.gpus_without_energy > 0 {
            let _ = writeln!(
                out,
                "    note: {} GPU(s) without an energy figure; the sum is a lower bound",
                j.gpus_without_energy
            );
        }
        if !j.start_snapshot_missing.is_empty() {
            let _ = writeln!(
                out,
                "    note: no start snapshot on {}",
                j.start_snapshot_missing.join(",")
            );
        }
        for d in &j.drained {
            let _ = writeln!(out, "    drained {d}");
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(jobs: &[JobSummary]) -> String {
    let mut out = String::from(
        "job_id,user,partition,nodes,gpus,start,end,duration_s,energy_j,energy_kwh,gpus_without_energy,\
         mean_power_w,peak_memory_bytes,peak_memory_pct,ecc_corrected_delta,ecc_uncorrected_delta,\
         remapped_correctable_delta,remapped_uncorrectable_delta,nvlink_errors_delta,pcie_replay_delta,\
         xid_events,drained\n",
    );
    for j in jobs {
        let fields = [
            j.job_id.clone(),
            opt(j.user.as_deref()),
            opt(j.partition.as_deref()),
            j.nodes.join(" "),
            j.gpus.len().to_string(),
            opt(j.start_ms.map(format_utc_ms)),
            format_utc_ms(j.end_ms),
            opt(j.duration_s),
            opt(j.energy_j),
            opt(j.energy_kwh),
            j.gpus_without_energy.to_string(),
            opt(j.mean_power_w),
            opt(j.peak_memory_bytes),
            opt(j.peak_memory_pct.map(|p| format!("{p:.2}"))),
            j.ecc_corrected_delta.to_string(),
            j.ecc_uncorrected_delta.to_string(),
            j.remapped_correctable_delta.to_string(),
            j.remapped_uncorrectable_delta.to_string(),
            j.nvlink_errors_delta.to_string(),
            j.pcie_replay_delta.to_string(),
            j.xid_events.to_string(),
            j.drained.join("; "),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        let _ = writeln!(out, "{}", line.join(","));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let a = parse_args(&s(&[
            "--job",
            "42",
            "--user",
            "bob",
            "--since",
            "2025-01-02",
            "--csv",
        ]))
        .unwrap();
        assert_eq!(a.job.as_deref(), Some("42"));
        assert_eq!(a.user.as_deref(), Some("bob"));
        assert_eq!(a.since_ms, Some(1_735_776_000_000));
        assert_eq!(a.format, Format::Csv);
        assert!(parse_args(&s(&["--json", "--csv"])).is_err());
        assert!(parse_args(&s(&["--job"])).is_err());
        assert!(parse_args(&s(&["--since", "tomorrow"])).is_err());
        assert!(parse_args(&s(&["--bogus"])).is_err());
    }

    #[test]
    fn malformed_lines_are_skipped_and_unknown_jobs_fail() {
        let d = tempfile::tempdir().unwrap();
        let good = r#"{"version":1,"job_id":"7","node":"n1","user":"u","uid":null,"partition":null,"exit_code":null,"start_ms":1,"end_ms":2,"duration_s":0.001,"start_snapshot_missing":false,"start_snapshot_missing_reason":null,"nvml_error":null,"gpus":[],"xids":[],"xids_absent_reason":null,"drained":null,"drain_failed":null}"#;
        std::fs::write(
            d.path().join("jobs.jsonl"),
            format!("{good}\n{{\"torn\n\u{1}garbage\n"),
        )
        .unwrap();
        let read = records::read_records(d.path());
        assert_eq!((read.records.len(), read.malformed), (1, 2));
        let dir = d.path().to_string_lossy().into_owned();
        let cfg = Config::default();
        assert_eq!(run(&s(&["--dir", &dir, "--job", "7", "--json"]), &cfg), 0);
        assert_eq!(run(&s(&["--dir", &dir, "--job", "8"]), &cfg), 1);
        assert_eq!(run(&s(&["--dir", &dir, "--since", "nope"]), &cfg), 2);
        let jobs = records::summarize(&read.records);
        assert!(table(&jobs).contains("7 "));
        assert!(csv(&jobs).lines().nth(1).unwrap().starts_with("7,u,,n1,0,"));
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
