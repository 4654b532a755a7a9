use super::format::csv_field;
use super::table::write_json;
use super::*;
use gpu_health_core::records::{GpuRecord, JobRecord};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn parsed(v: &[&str]) -> Args {
    match parse_args(&s(v)) {
        Ok(Command::Report(a)) => a,
        other => panic!("{v:?}: {other:?}"),
    }
}

fn error(v: &[&str]) -> String {
    parse_args(&s(v)).unwrap_err()
}

/// The records summed as `run` sums them for `write`, and written.
fn render<G: GpuSink>(
    records: &[JobRecord],
    write: fn(&mut dyn Write, &[JobSummary<G>]) -> io::Result<()>,
) -> String {
    let mut s = records::Summarizer::<G>::new();
    records.iter().for_each(|r| _ = s.add(r.clone()));
    let mut out = Vec::new();
    write(&mut out, &s.finish(&ReportFilter::default())).unwrap();
    String::from_utf8(out).unwrap()
}

fn table(records: &[JobRecord]) -> String {
    render(records, write_table)
}

fn csv(records: &[JobRecord]) -> String {
    render(records, write_csv)
}

#[test]
fn arguments() {
    let a = parsed(&[
        "--job",
        "42",
        "--user",
        "bob",
        "--since",
        "2025-01-02",
        "--csv",
    ]);
    assert_eq!(a.filter.job.as_deref(), Some("42"));
    assert_eq!(a.filter.user.as_deref(), Some("bob"));
    assert_eq!(a.filter.since_ms, Some(1_735_776_000_000));
    assert_eq!(a.format, Format::Csv);
    assert!(parse_args(&s(&["--json", "--csv"])).is_err());
    assert!(parse_args(&s(&["--job"])).is_err());
    assert!(parse_args(&s(&["--since", "tomorrow"])).is_err());
    assert!(parse_args(&s(&["--bogus"])).is_err());
}

#[test]
fn values_joined_with_equals_and_help() {
    let a = parsed(&["--job=42", "--user=bob", "--since=2025-01-02", "--dir=/r"]);
    assert_eq!(a.filter.job.as_deref(), Some("42"));
    assert_eq!(a.filter.user.as_deref(), Some("bob"));
    assert_eq!(a.filter.since_ms, Some(1_735_776_000_000));
    assert_eq!(a.dir, Some(PathBuf::from("/r")));
    assert_eq!(parsed(&["--job=-1"]).filter.job.as_deref(), Some("-1"));
    assert_eq!(parsed(&["--json", "--json"]).format, Format::Json);
    assert_eq!(parse_args(&s(&["-h"])), Ok(Command::Help));
    assert_eq!(parse_args(&s(&["--dir", "d", "--help"])), Ok(Command::Help));
    assert_eq!(run(&s(&["--help"]), &Config::default()), 0);
}

#[test]
fn usage_errors_name_the_option() {
    assert_eq!(error(&["--job"]), "option '--job' needs a value");
    assert!(error(&["--job", "--user", "bob"]).starts_with("option '--job' needs a value"));
    assert_eq!(error(&["--bogus"]), "invalid option '--bogus'");
    assert_eq!(error(&["-x"]), "invalid option '-x'");
    assert!(error(&["--json=yes"]).contains("'--json'"));
    assert!(error(&["extra"]).contains("\"extra\""));
    assert!(error(&["--since", "tomorrow"]).starts_with("option '--since': "));
    let cfg = Config::default();
    assert_eq!(run(&s(&["--user"]), &cfg), 2);
    assert_eq!(run(&s(&["--bogus"]), &cfg), 2);
}

#[test]
fn malformed_lines_are_skipped_and_unknown_jobs_fail() {
    let d = tempfile::tempdir().unwrap();
    let good = r#"{"version":1,"job_id":"7","node":"n1","user":"u","uid":null,"partition":null,"exit_code":null,"start_ms":1,"end_ms":2,"duration_s":0.001,"start_snapshot_missing":false,"start_snapshot_missing_reason":null,"nvml_error":null,"gpus":[],"xids":[],"xids_absent_reason":null,"drained":null,"drain_failed":null}"#;
    std::fs::write(
        d.path().join(gpu_health_core::state::RECORDS_FILE),
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
    assert!(table(&read.records).contains("7 "));
    assert!(csv(&read.records)
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("7,u,,n1,0,"));
}

fn record(job: &str, node: &str) -> JobRecord {
    JobRecord {
        version: 1,
        job_id: job.into(),
        node: node.into(),
        user: None,
        uid: None,
        partition: None,
        exit_code: None,
        start_ms: None,
        end_ms: 1,
        duration_s: None,
        start_snapshot_missing: false,
        start_snapshot_missing_reason: None,
        nvml_error: None,
        gpus: Vec::new(),
        xids: Vec::new(),
        xids_absent_reason: None,
        drained: None,
        drain_failed: None,
        peak_power_w: None,
    }
}

#[test]
fn table_shows_no_control_characters_from_records() {
    let evil = "\u{1b}[2J\u{1b}]0;owned\u{7}\r\u{7f}\u{9b}31m";
    let mut r = record(&format!("7{evil}"), &format!("n1{evil}"));
    r.user = Some(format!("bob{evil}"));
    r.drained = Some(format!("reason{evil}"));
    r.start_snapshot_missing = true;
    r.gpus = vec![GpuRecord {
        pci: Some(format!("0000:18:00.0{evil}")),
        name: Some(evil.into()),
        energy_absent_reason: Some(format!("why{evil}")),
        peak_memory_absent_reason: Some(evil.into()),
        ..GpuRecord::default()
    }];
    let text = table(std::slice::from_ref(&r));
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert_eq!(text.lines().count(), 6, "{text}");
    assert!(text.contains("bob?[2J?]0;owned????31m"), "{text}");
    // JSON escapes them, CSV quotes only what CSV needs.
    let mut json = Vec::new();
    write_json(&mut json, &records::summarize(std::slice::from_ref(&r))).unwrap();
    let json = String::from_utf8(json).unwrap();
    assert!(
        json.contains(r"bob\u001b[2J\u001b]0;owned\u0007\r"),
        "{json}"
    );
    assert!(csv(&[r]).contains(&format!("\"bob{evil}\"")));
}

#[test]
fn decimals_are_those_of_the_formatter() {
    let mut values = vec![
        0.0,
        0.05,
        0.25,
        0.35,
        0.5,
        1.5,
        2.5,
        0.125,
        9.95,
        99.95,
        1e-30,
        1e-15,
        0.000049,
        123.456,
        4503599627370495.5,
        9007199254740991.0,
        9007199254740993.0,
        1e300,
        f64::MIN_POSITIVE,
        5e-324,
        -0.0,
        -1.25,
        -3.75,
        f64::NAN,
        f64::INFINITY,
    ];
    // Deterministic spread over magnitudes and fractions, ties included
    // (k/8 and k/16 are exact in binary).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..20_000u32 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let mag = 10f64.powi((x >> 60) as i32 - 3);
        values.push((x >> 11) as f64 / (1u64 << 53) as f64 * mag);
        values.push(f64::from(i) / 16.0);
    }
    for v in values {
        for places in 0..6 {
            let want = format!("{v:.places$}");
            assert_eq!(Dec(v, places).to_string(), want, "{v:e} .{places}");
        }
    }
    assert_eq!(format!("{:>8}", Fixed(Some(2.25), 1)), "     2.2");
    assert_eq!(
        format!("{:>8}", Gib(Some(3 << 29), Some(12.5))),
        "1.5 GiB (12%)"
    );
}

/// Counters at their ceiling (a record's deltas saturate there): the
/// table's REMAP column adds two of them without overflowing.
#[test]
fn remapped_rows_at_the_ceiling_add_up_without_overflow() {
    let mut r = record("7", "n1");
    r.gpus = vec![GpuRecord {
        remapped_correctable_delta: Some(u64::MAX),
        remapped_uncorrectable_delta: Some(u64::MAX),
        ..GpuRecord::default()
    }];
    let text = table(&[r]);
    let row = text.lines().nth(1).unwrap();
    assert!(row.contains(&u64::MAX.to_string()), "{text}");
}

#[test]
fn csv_quotes_what_needs_it() {
    assert_eq!(csv_field("a,b"), "\"a,b\"");
    assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(csv_field("plain"), "plain");
}

/// A 2-node rack whose GPUs draw 5.6 kW (8 x 700 W) each for two hours
/// from 10:00 UTC, with 1.5 kW per node besides: 14.2 kW against an 8 kW
/// feed. The table names the hours over budget; the chart renders.
#[test]
fn power_per_node_and_rack_with_the_hours_over_budget_and_a_chart() {
    const H: u64 = 3_600_000;
    let day = 1_795_910_400_000; // 2026-11-29T00:00:00Z
    let job = |id: &str, node: &str| {
        let mut r = record(id, node);
        r.start_ms = Some(day + 10 * H);
        r.end_ms = day + 12 * H;
        r.gpus = (0..8)
            .map(|i| GpuRecord {
                index: i,
                energy_j: Some(700.0 * 7200.0),
                ..GpuRecord::default()
            })
            .collect();
        r
    };
    // Job 7's gpu002 record is there twice (spooled and written again):
    // it counts once.
    let records = [
        job("7", "gpu001"),
        job("7", "gpu002"),
        job("7", "gpu002"),
        job("8", "gpu003"),
    ];
    let records_dir = tempfile::tempdir().unwrap();
    let lines: String = records
        .iter()
        .map(|r| r.to_line().unwrap() + "\n")
        .collect();
    std::fs::write(records_dir.path().join("jobs.jsonl"), lines).unwrap();
    let read = records::read_energies(records_dir.path(), &ReportFilter::default());
    assert_eq!((read.energies.len(), read.malformed), (3, 0));
    let racks = gpu_health_core::config::check_racks(&[gpu_health_core::config::RackConfig {
        name: "r01".into(),
        nodes: vec!["gpu[001-002]".into()],
        supply_kw: 8.0,
        cooling_kw: 12.0,
        node_overhead_w: 1500.0,
    }])
    .unwrap();
    let (r, left_out) = power::report(&read, &racks, day + 24 * H);
    assert_eq!(left_out, 0);
    let mut out = Vec::new();
    power::write_table(&mut out, &r, left_out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("gpu001"), "{text}");
    let node = text.lines().find(|l| l.starts_with("gpu001")).unwrap();
    assert!(node.contains("11.200") && node.contains("5600.0"), "{node}");
    assert!(
        text.contains("over budget: rack r01 at 2026-11-29T10:00Z: 14.2 kW, budget 8.0 kW"),
        "{text}"
    );
    assert!(
        text.contains("over budget: rack r01 at 2026-11-29T11:00Z"),
        "{text}"
    );
    let chart = power::svg(&r);
    assert!(
        chart.contains("budget 8.0 kW") && chart.contains("<polyline"),
        "{chart}"
    );
    // It renders: rsvg-convert (librsvg, installed by the test command)
    // makes a PNG of it.
    let dir = tempfile::tempdir().unwrap();
    let (svg, png) = (dir.path().join("power.svg"), dir.path().join("power.png"));
    std::fs::write(&svg, &chart).unwrap();
    let run = std::process::Command::new("rsvg-convert")
        .arg("-o")
        .arg(&png)
        .arg(&svg)
        .output()
        .expect("rsvg-convert (apt-get install librsvg2-bin; ./ci/test installs it)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000,
        "{} bytes",
        bytes.len()
    );
    // Width and height from the PNG header: the SVG's size.
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    // Issue 24 added the legend and the time axis: 50 + 200 + 50.
    assert_eq!((be(16), be(20)), (800, 300));
}

#[test]
fn power_arguments() {
    assert!(parsed(&["--power", "--svg", "/tmp/x.svg"]).power);
    assert!(error(&["--svg", "/tmp/x.svg"]).contains("--power"));
    // Issue 24: --power takes --json and --csv (the hourly series).
    assert!(parsed(&["--power", "--json"]).power);
    assert_eq!(
        error(&["--power", "--near-oom"]),
        "--power and --near-oom exclude each other"
    );
}
