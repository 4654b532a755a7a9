//! `gpu-health report`: per-job GPU energy, peak memory and health deltas
//! from the records the epilogs wrote (summed across nodes when the
//! records directory is shared). Its options: `commands::REPORT`.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use gpu_health_core::config::Config;
use gpu_health_core::records::{self, GpuSink, JobSummary, ReportFilter, SummaryGpu};
use gpu_health_core::run::RunContext;
use gpu_health_core::state;
use gpu_health_core::time::{parse_since, unix_ms};

mod format;
mod near_oom;
mod power;
mod power_out;
mod table;
use format::Term;
#[cfg(test)]
use format::{Dec, Fixed, Gib};
use near_oom::NearOomGpus;
#[cfg(test)]
use table::{write_csv, write_table};
use table::{GpuCount, TableGpus};

use crate::commands::REPORT;
use crate::spec::Parsed;
#[cfg(test)]
use crate::spec::{self, Outcome};

#[derive(Debug, Default, PartialEq)]
struct Args {
    filter: ReportFilter,
    format: Format,
    dir: Option<PathBuf>,
    near_oom: bool,
    power: bool,
    svg: Option<PathBuf>,
    /// Only the jobs that ended last.
    limit: Option<usize>,
}

#[cfg(test)]
#[derive(Debug, PartialEq)]
enum Command {
    Help,
    Report(Args),
}

#[derive(Debug, Default, PartialEq, Clone, Copy)]
enum Format {
    #[default]
    Table,
    Json,
    Csv,
}

fn date(p: &Parsed, option: &str) -> Result<Option<u64>, String> {
    p.value(option)
        .map(|v| parse_since(v).map_err(|e| format!("option '--{option}': {e}")))
        .transpose()
}

/// The report's arguments from what the table parsed.
fn args_of(p: &Parsed) -> Result<Args, String> {
    let limit = match p.value("limit") {
        None => None,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(format!(
                    "option '--limit' wants a number of jobs, at least 1, not {:?}",
                    gpu_health_core::text::printable(v)
                ))
            }
        },
    };
    Ok(Args {
        filter: ReportFilter {
            job: p.value("job").map(String::from),
            user: p.value("user").map(String::from),
            node: p.value("node").map(String::from),
            since_ms: date(p, "since")?,
            until_ms: date(p, "until")?,
        },
        format: if p.flag("json") {
            Format::Json
        } else if p.flag("csv") {
            Format::Csv
        } else {
            Format::Table
        },
        dir: p.value("dir").map(PathBuf::from),
        near_oom: p.flag("near-oom"),
        power: p.flag("power"),
        svg: p.value("svg").map(PathBuf::from),
        limit,
    })
}

#[cfg(test)]
fn parse_args(args: &[String]) -> Result<Command, String> {
    match spec::parse(&REPORT, args)? {
        Outcome::Help => Ok(Command::Help),
        Outcome::Run(p) => args_of(&p).map(Command::Report),
    }
}

/// The command, as `main` runs it.
pub fn run_parsed(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let args = match args_of(p) {
        Ok(a) => a,
        Err(e) => return crate::usage_error(&REPORT, &e),
    };
    let ctx = start();
    let config_error = ctx.loaded.error.as_ref().map(|e| e.to_string());
    if let Some(e) = &config_error {
        // JSON and CSV stay what tools read; the table says it.
        if args.format == Format::Table {
            println!(
                "configuration error: {} (records_dir of the fallback in force; gpu-health config check)",
                Term(e)
            );
        } else {
            eprintln!("gpu-health report: configuration error: {}", Term(e));
        }
    }
    let code = report_with(&args, ctx.config());
    if config_error.is_some() && code == 0 {
        2
    } else {
        code
    }
}

/// `report ARGS` with the configuration `cfg` (tests).
#[cfg(test)]
pub fn run(args: &[String], cfg: &Config) -> i32 {
    match parse_args(args) {
        Ok(Command::Help) => {
            print!("{}", crate::generate::help(&REPORT));
            0
        }
        Ok(Command::Report(a)) => report_with(&a, cfg),
        Err(e) => crate::usage_error(&REPORT, &e),
    }
}

fn report_with(args: &Args, cfg: &Config) -> i32 {
    let dir = args.dir.clone().unwrap_or_else(|| cfg.records_dir());
    if args.power {
        return power_report(&dir, args, cfg);
    }
    let (filter, limit) = (&args.filter, args.limit);
    // Each format keeps only what it shows of the GPUs (see GpuSink).
    if args.near_oom {
        return match args.format {
            Format::Json => report::<NearOomGpus>(&dir, filter, limit, near_oom::write_json),
            Format::Csv => report::<NearOomGpus>(&dir, filter, limit, near_oom::write_csv),
            Format::Table => report::<NearOomGpus>(&dir, filter, limit, near_oom::write_table),
        };
    }
    match args.format {
        Format::Json => report::<Vec<SummaryGpu>>(&dir, filter, limit, table::write_json),
        Format::Csv => report::<GpuCount>(&dir, filter, limit, table::write_csv),
        Format::Table => report::<TableGpus>(&dir, filter, limit, table::write_table),
    }
}

/// Whether `--svg FILE` can be written: its directory exists and FILE is
/// not a directory. Asked before anything is printed, so that a mistyped
/// path fails at once, not after the whole table.
fn svg_writable(path: &Path) -> Result<(), String> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let shown = || Term(&path.display().to_string()).to_string();
    if path.file_name().is_none() {
        return Err(format!("--svg {}: not a file path", shown()));
    }
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "--svg {}: {} is not a directory",
                shown(),
                parent.display()
            ))
        }
        Err(e) => return Err(format!("--svg {}: its directory: {e}", shown())),
    }
    // A symlink there is replaced, never followed; a directory cannot be.
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(format!("--svg {}: is a directory", shown()));
    }
    // SAFETY: a valid NUL-terminated path; access(2) only reads.
    let c = std::ffi::CString::new(parent.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("--svg {}: a NUL in the path", shown()))?;
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(format!(
            "--svg {}: cannot write in {}: {}",
            shown(),
            parent.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// `--power`: the table (or the hourly series per rack as JSON or CSV)
/// to stdout, the chart to `--svg`. The racks are parsed here, the only
/// place that reads `[power]`: a mistake in them is a configuration
/// error of this command (exit 2), of no other run.
fn power_report(dir: &Path, args: &Args, cfg: &Config) -> i32 {
    let racks = match cfg.power.racks() {
        Ok(racks) => racks,
        Err(e) => {
            eprintln!(
                "gpu-health report: configuration error: {}",
                Term(&e.to_string())
            );
            return 2;
        }
    };
    if let Some(path) = &args.svg {
        if let Err(e) = svg_writable(path) {
            eprintln!("gpu-health report: {e}");
            return 1;
        }
    }
    let read = records::read_energies(dir, &args.filter);
    for e in &read.errors {
        eprintln!("gpu-health report: {}", Term(e));
    }
    warn_malformed(read.malformed, dir, filter_narrows(&args.filter));
    let (r, left_out) = power::report(&read, &racks, unix_ms());
    // The chart first: a reader that leaves early (`| head -1`) ends the
    // command at its next print (SIGPIPE, as any filter); the file it
    // asked for is written by then.
    if let Some(path) = &args.svg {
        // Run as root into a directory of the admin's choosing: never
        // through a symlink at the path, and never half written.
        if let Err(e) = state::write_user_file(path, power::svg(&r).as_bytes(), 0o644) {
            eprintln!("gpu-health report: {}", Term(&e.to_string()));
            return 1;
        }
    }
    let mut out = BufWriter::new(io::stdout().lock());
    let written = match args.format {
        Format::Table => power::write_table(&mut out, &r, left_out),
        Format::Json => power_out::write_json(&mut out, &r, left_out),
        Format::Csv => power_out::write_csv(&mut out, &r),
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("gpu-health report: writing the report: {e}");
            return 1;
        }
    }
    0
}

/// Whether lines are checked for the filter's job or user before they are
/// parsed.
fn filter_narrows(filter: &ReportFilter) -> bool {
    filter.job.is_some() || filter.user.is_some()
}

/// Says how many lines were not records. `prechecked`: lines that cannot
/// matter to the report were not parsed at all, so not counted.
fn warn_malformed(malformed: usize, dir: &Path, prechecked: bool) {
    if malformed == 0 {
        return;
    }
    let checked = if prechecked {
        " (of the lines that could match)"
    } else {
        ""
    };
    eprintln!(
        "gpu-health report: skipped {malformed} malformed line(s) in {}{checked}",
        dir.display()
    );
}

/// Reads the jobs (the `limit` that ended last), writes them with
/// `write` to stdout; the exit status.
fn report<G: GpuSink>(
    dir: &Path,
    filter: &ReportFilter,
    limit: Option<usize>,
    write: fn(&mut dyn Write, &[JobSummary<G>]) -> io::Result<()>,
) -> i32 {
    let mut read = records::read_jobs::<G>(dir, filter);
    for e in &read.errors {
        eprintln!("gpu-health report: {}", Term(e));
    }
    warn_malformed(
        read.malformed,
        dir,
        filter_narrows(filter) || G::ONLY_NEAR_OOM,
    );
    if let Some(n) = limit {
        // Ordered by their last end: the last `n` ended last.
        let extra = read.jobs.len().saturating_sub(n);
        read.jobs.drain(..extra);
    }
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    match write(&mut out, &read.jobs).and_then(|()| out.flush()) {
        Ok(()) => {}
        // The reader went away (`| head`): what it wanted it has.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return 0,
        Err(e) => {
            eprintln!("gpu-health report: writing the report: {e}");
            return 1;
        }
    }
    if read.jobs.is_empty() && filter.job.is_some() {
        eprintln!(
            "gpu-health report: no record of that job in {}",
            dir.display()
        );
        return 1;
    }
    0
}

#[cfg(test)]
mod power_tests;
#[cfg(test)]
mod tests;
