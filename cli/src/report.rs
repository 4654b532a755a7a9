//! `gpu-health report`: per-job GPU energy, peak memory and health deltas
//! from the records the epilogs wrote (summed across nodes when the
//! records directory is shared).

use std::fmt::{self, Write as _};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use gpu_health_core::config::Config;
use gpu_health_core::records::{self, GpuRecord, GpuSink, JobSummary, ReportFilter, SummaryGpu};
use gpu_health_core::state;
use gpu_health_core::time::{format_utc_ms, parse_since, unix_ms};

mod near_oom;
mod power;
use near_oom::NearOomGpus;

const USAGE: &str = "\
usage: gpu-health report [--job ID] [--user NAME] [--since DATE] [--near-oom | --power [--svg FILE]]
                         [--json|--csv] [--dir DIR]

  --job ID       only this job
  --user NAME    only this user's jobs
  --since DATE   only jobs that ended at or after DATE (UTC):
                 YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]
  --near-oom     only the GPUs whose peak memory came near their memory
                 (thresholds.near_oom_share), with what the user can try
  --power        energy and power per node and per rack ([[power.racks]]),
                 the hours a rack passed its budget
  --svg FILE     with --power: a chart of each rack's power per hour and
                 its budget, written to FILE
  --json         one object per job (JSON array), with its GPUs
  --csv          one line per job
  --dir DIR      records directory (default: records_dir of the configuration)
  -h, --help     this text

Options take their value as `--job 42` or `--job=42`.
";

#[derive(Debug, Default, PartialEq)]
struct Args {
    filter: ReportFilter,
    format: Format,
    dir: Option<PathBuf>,
    near_oom: bool,
    power: bool,
    svg: Option<PathBuf>,
}

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

/// The value of `option`. A separate word that looks like an option is
/// taken as a forgotten value (`--job --user bob`), not as the value;
/// `--job=-x` passes such a value on purpose.
fn value(p: &mut lexopt::Parser, option: &str) -> Result<String, String> {
    let v = match p.optional_value() {
        Some(v) => v,
        None => {
            let v = p
                .value()
                .map_err(|_| format!("option '{option}' needs a value"))?;
            if v.to_string_lossy().starts_with('-') && v.len() > 1 {
                return Err(format!(
                    "option '{option}' needs a value, found option {v:?} \
                     (write {option}=VALUE for a value that starts with '-')"
                ));
            }
            v
        }
    };
    v.into_string()
        .map_err(|v| format!("option '{option}': value {v:?} is not UTF-8"))
}

fn set_format(out: &mut Args, format: Format) -> Result<(), String> {
    if out.format != Format::Table && out.format != format {
        return Err("--json and --csv exclude each other".into());
    }
    out.format = format;
    Ok(())
}

fn parse_args(args: &[String]) -> Result<Command, String> {
    use lexopt::Arg::{Long, Short};
    let mut out = Args::default();
    let mut p = lexopt::Parser::from_args(args.iter());
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Long("help") | Short('h') => return Ok(Command::Help),
            Long("job") => out.filter.job = Some(value(&mut p, "--job")?),
            Long("user") => out.filter.user = Some(value(&mut p, "--user")?),
            Long("since") => {
                let since = parse_since(&value(&mut p, "--since")?)
                    .map_err(|e| format!("option '--since': {e}"))?;
                out.filter.since_ms = Some(since);
            }
            Long("dir") => out.dir = Some(PathBuf::from(value(&mut p, "--dir")?)),
            Long("json") => set_format(&mut out, Format::Json)?,
            Long("csv") => set_format(&mut out, Format::Csv)?,
            Long("near-oom") => out.near_oom = true,
            Long("power") => out.power = true,
            Long("svg") => out.svg = Some(PathBuf::from(value(&mut p, "--svg")?)),
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if out.svg.is_some() && !out.power {
        return Err("--svg goes with --power".into());
    }
    if out.power && (out.near_oom || out.format != Format::Table) {
        return Err(
            "--power shows a table (and --svg a chart); it takes no --near-oom, --json or --csv"
                .into(),
        );
    }
    Ok(Command::Report(out))
}

pub fn run(args: &[String], cfg: &Config) -> i32 {
    let args = match parse_args(args) {
        Ok(Command::Help) => {
            print!("{USAGE}");
            return 0;
        }
        Ok(Command::Report(a)) => a,
        Err(e) => {
            eprintln!("gpu-health report: {}\n\n{USAGE}", Term(&e));
            return 2;
        }
    };
    let dir = args.dir.clone().unwrap_or_else(|| cfg.records_dir());
    if args.power {
        return power_report(&dir, &args, cfg);
    }
    // Each format keeps only what it shows of the GPUs (see GpuSink).
    if args.near_oom {
        return match args.format {
            Format::Json => report::<NearOomGpus>(&dir, &args.filter, near_oom::write_json),
            Format::Csv => report::<NearOomGpus>(&dir, &args.filter, near_oom::write_csv),
            Format::Table => report::<NearOomGpus>(&dir, &args.filter, near_oom::write_table),
        };
    }
    match args.format {
        Format::Json => report::<Vec<SummaryGpu>>(&dir, &args.filter, write_json),
        Format::Csv => report::<GpuCount>(&dir, &args.filter, write_csv),
        Format::Table => report::<TableGpus>(&dir, &args.filter, write_table),
    }
}

/// `--power`: the table to stdout, the chart to `--svg`. The racks are
/// parsed here, the only place that reads `[power]`: a mistake in them is
/// a configuration error of this command (exit 2), of no other run.
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
    let read = records::read_energies(dir, &args.filter);
    for e in &read.errors {
        eprintln!("gpu-health report: {}", Term(e));
    }
    warn_malformed(read.malformed, dir, filter_narrows(&args.filter));
    let (r, left_out) = power::report(&read, &racks, unix_ms());
    let mut out = BufWriter::new(io::stdout().lock());
    if let Err(e) = power::write_table(&mut out, &r, left_out).and_then(|()| out.flush()) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("gpu-health report: writing the report: {e}");
            return 1;
        }
    }
    if let Some(path) = &args.svg {
        // Run as root into a directory of the admin's choosing: never
        // through a symlink at the path, and never half written.
        if let Err(e) = state::write_user_file(path, power::svg(&r).as_bytes(), 0o644) {
            eprintln!("gpu-health report: {}", Term(&e.to_string()));
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

/// Reads the jobs, writes them with `write` to stdout; the exit status.
fn report<G: GpuSink>(
    dir: &Path,
    filter: &ReportFilter,
    write: fn(&mut dyn Write, &[JobSummary<G>]) -> io::Result<()>,
) -> i32 {
    let read = records::read_jobs::<G>(dir, filter);
    for e in &read.errors {
        eprintln!("gpu-health report: {}", Term(e));
    }
    warn_malformed(
        read.malformed,
        dir,
        filter_narrows(filter) || G::ONLY_NEAR_OOM,
    );
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

/// CSV shows no GPU, only how many.
#[derive(Debug, Default)]
struct GpuCount(usize);

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
struct TableGpus {
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

/// Text from a record, shown on a terminal: control characters (C0, DEL,
/// C1) become `?`, so that a record cannot move the cursor, clear the
/// screen or change colours. Padding (`{:<12}`) applies.
struct Term<'a>(&'a str);

impl fmt::Display for Term<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Bytes first: C0 and DEL are single bytes, C1 characters start
        // with 0xC2 in UTF-8; most texts have none of these.
        let suspect = |b: &u8| *b < 0x20 || *b == 0x7f || *b == 0xc2;
        if !self.0.as_bytes().iter().any(suspect) || !self.0.chars().any(char::is_control) {
            return f.pad(self.0);
        }
        let shown: String = self
            .0
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        f.pad(&shown)
    }
}

fn opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Pads `text` when the format asks for a width; writes it as is (no
/// allocation) otherwise.
fn pad_with(f: &mut fmt::Formatter<'_>, text: fmt::Arguments<'_>) -> fmt::Result {
    if f.width().is_some() {
        f.pad(&text.to_string())
    } else {
        f.write_fmt(text)
    }
}

/// `{:.N}` of a figure (N = `.1`), the same digits, in integer
/// arithmetic for what a report has (non-negative, below 2^52, at most 4
/// places): the general float formatter was most of the cost of a table
/// of millions of GPU lines. Anything else goes to the formatter.
struct Dec(f64, usize);

impl fmt::Display for Dec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SCALE: [u128; 5] = [1, 10, 100, 1_000, 10_000];
        let (v, places) = (self.0, self.1);
        let bits = v.to_bits();
        let biased = ((bits >> 52) & 0x7ff) as i32;
        // Normal numbers in [2^-70, 2^52): v = mantissa * 2^-shift exactly.
        if v.is_sign_negative() || places >= SCALE.len() || !(-70..52).contains(&(biased - 1023)) {
            return write!(f, "{v:.places$}");
        }
        let mantissa = u128::from((bits & ((1 << 52) - 1)) | (1 << 52));
        // 52 minus the exponent: 1..=122, so the shifts below fit u128.
        let shift = (1075 - biased) as u32;
        let scaled = mantissa * SCALE[places];
        let (mut q, rest) = (scaled >> shift, scaled & ((1 << shift) - 1));
        let half = 1 << (shift - 1);
        // Round to nearest, ties to even, as the formatter does.
        if rest > half || (rest == half && q & 1 == 1) {
            q += 1;
        }
        let unit = SCALE[places];
        // Below 2^52 the integer part fits u64 (printed faster than u128).
        let (int, frac) = ((q / unit) as u64, (q % unit) as u64);
        if places == 0 {
            write!(f, "{int}")
        } else {
            write!(f, "{int}.{frac:0places$}")
        }
    }
}

/// A figure with `places` decimals, `-` when absent.
struct Fixed(Option<f64>, usize);

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => pad_with(f, format_args!("{}", Dec(v, self.1))),
            None => f.pad("-"),
        }
    }
}

/// Bytes in GiB, with the share of the GPU's memory when known.
struct Gib(Option<u64>, Option<f64>);

impl fmt::Display for Gib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        match (self.0, self.1) {
            (Some(b), Some(p)) => {
                pad_with(f, format_args!("{} GiB ({}%)", Dec(gib(b), 1), Dec(p, 0)))
            }
            (Some(b), None) => pad_with(f, format_args!("{} GiB", Dec(gib(b), 1))),
            _ => f.pad("-"),
        }
    }
}

fn write_json(out: &mut dyn Write, jobs: &[JobSummary]) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, jobs)?;
    out.write_all(b"\n")
}

fn write_table(out: &mut dyn Write, jobs: &[JobSummary<TableGpus>]) -> io::Result<()> {
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
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write_csv(out: &mut dyn Write, jobs: &[JobSummary<GpuCount>]) -> io::Result<()> {
    out.write_all(
        b"job_id,user,partition,nodes,gpus,start,end,duration_s,energy_j,energy_kwh,gpus_without_energy,\
         mean_power_w,peak_power_w,peak_memory_bytes,peak_memory_pct,ecc_corrected_delta,ecc_uncorrected_delta,\
         remapped_correctable_delta,remapped_uncorrectable_delta,nvlink_errors_delta,pcie_replay_delta,\
         xid_events,drained\n",
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
            opt(j.duration_s),
            opt(j.energy_j),
            opt(j.energy_kwh),
            j.gpus_without_energy.to_string(),
            opt(j.mean_power_w),
            opt(j.peak_power_w),
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
        writeln!(out, "{}", line.join(","))?;
    }
    Ok(())
}

#[cfg(test)]
mod power_tests;
#[cfg(test)]
mod tests;
