//! `report --power` on what it must survive: record times near 2^64,
//! spans of millennia, energies no node draws, a symlink at the chart's
//! path and mistakes in `[power]`.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use gpu_health_core::config;
use gpu_health_core::records::power::{PowerReport, RackPower};
use gpu_health_core::time::unix_ms;

use super::*;

const H: u64 = 3_600_000;

const RACK: &str =
    "[[power.racks]]\nname = \"r01\"\nsupply_kw = 8.0\ncooling_kw = 10.0\nnode_overhead_w = 100\n";

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn parsed_config(text: &str) -> Result<Config, String> {
    config::parse(Path::new("/etc/slurm/gpu-health.toml"), text, None).map_err(|e| e.to_string())
}

/// A rack of n1 and n2.
fn rack_config() -> Config {
    parsed_config(&format!("{RACK}nodes = [\"n[1-2]\"]\n")).unwrap()
}

/// A record line with what the power report reads.
fn line(node: &str, start_ms: u64, end_ms: u64, energy_j: f64) -> String {
    serde_json::json!({
        "version": 1,
        "job_id": format!("{start_ms}-{end_ms}-{energy_j}"),
        "node": node,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "gpus": [{ "index": 0, "energy_j": energy_j }],
    })
    .to_string()
        + "\n"
}

/// One good record: n1 drew 1 kW for the hour before last.
fn good_line() -> String {
    let hour = unix_ms() / H * H;
    line("n1", hour - 2 * H, hour - H, 3.6e6)
}

/// A records directory with `lines`.
fn records_dir(lines: &[String]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("jobs.jsonl"), lines.concat()).unwrap();
    d
}

/// `report ARGS` on a thread, given `secs` to finish: a report that
/// loops fails here instead of hanging the tests (a panic too).
fn run_within(args: Vec<String>, cfg: Config, secs: u64) -> i32 {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run(&args, &cfg));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(code) => code,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("report did not finish in {secs} s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("report panicked"),
    }
}

/// `report --power --svg` over `lines`: its exit status and chart.
fn chart_of(lines: &[String]) -> (i32, String) {
    let records = records_dir(lines);
    let out = tempfile::tempdir().unwrap();
    let svg = out.path().join("power.svg");
    let args = s(&[
        "--power",
        "--dir",
        records.path().to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let code = run_within(args, rack_config(), 20);
    (code, std::fs::read_to_string(&svg).unwrap_or_default())
}

fn assert_drawable(svg: &str) {
    assert!(svg.contains("<polyline"), "{svg}");
    assert!(!svg.contains("inf") && !svg.contains("NaN"), "{svg}");
}

#[test]
fn a_record_with_times_near_2_64_is_skipped_not_looped_on() {
    let (code, svg) = chart_of(&[
        good_line(),
        line("n1", u64::MAX - 1000, u64::MAX, 1.0),
        line("n2", u64::MAX - 5 * H, u64::MAX - H, 1.0),
        line("n2", 1_000, u64::MAX, 1.0),
    ]);
    assert_eq!(code, 0);
    assert_drawable(&svg);
}

#[test]
fn a_span_of_millennia_is_skipped_not_walked_hour_by_hour() {
    // 0..1e15 ms: 1970 to the year 33658, 2.8e8 hours.
    let (code, svg) = chart_of(&[good_line(), line("n1", 0, 1_000_000_000_000_000, 1e9)]);
    assert_eq!(code, 0);
    assert_drawable(&svg);
}

#[test]
fn a_reversed_span_is_skipped() {
    let hour = unix_ms() / H * H;
    let records = records_dir(&[good_line(), line("n1", hour, hour - 3 * H, 1e6)]);
    let read = records::read_energies(records.path(), &ReportFilter::default());
    let racks = rack_config().power.racks().unwrap();
    let (r, left_out) = power::report(&read, &racks, unix_ms());
    assert_eq!((r.skipped.bad_time, left_out), (1, 0));
    let mut out = Vec::new();
    power::write_table(&mut out, &r, left_out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("(1 node records with an end before their start, or a time more than a day ahead of this machine's clock, left out)"),
        "{text}"
    );
    assert_eq!(r.nodes[0].jobs, 1);
}

#[test]
fn energies_no_node_draws_never_reach_the_svg() {
    let hour = unix_ms() / H * H;
    let (code, svg) = chart_of(&[
        good_line(),
        line("n1", hour - 2 * H, hour - H, 1e308),
        line("n2", hour - 2 * H, hour - H, 1e308),
        line("n2", hour - 3 * H, hour - 2 * H, 1.7e308),
    ]);
    assert_eq!(code, 0);
    assert_drawable(&svg);
}

#[test]
fn the_notes_say_what_was_left_out() {
    let hour = unix_ms() / H * H;
    let records = records_dir(&[
        good_line(),
        line("n1", hour - 2 * H, hour - H, 1e308),
        line("n1", 0, 1_000_000_000_000_000, 1.0),
        line("n1", 0, 1_000, 1.0),
    ]);
    let read = records::read_energies(records.path(), &ReportFilter::default());
    let (r, left_out) = power::report(&read, &[], unix_ms());
    let mut out = Vec::new();
    power::write_table(&mut out, &r, left_out).unwrap();
    let text = String::from_utf8(out).unwrap();
    for note in [
        "(1 node records with an end before their start",
        "(1 node records that started more than 10 years ago left out)",
        "(1 node records whose energy is no measurement (not finite, negative, or above 100 kW over the record's time) left out)",
    ] {
        assert!(text.contains(note), "{note}: {text}");
    }
    // Nothing placed at all: the notes still say why.
    let records = records_dir(&[line("n1", 0, 1_000, 1.0)]);
    let read = records::read_energies(records.path(), &ReportFilter::default());
    let (r, left_out) = power::report(&read, &[], unix_ms());
    let mut out = Vec::new();
    power::write_table(&mut out, &r, left_out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("no job records with energy figures\n(1 node records that started"),
        "{text}"
    );
}

#[test]
fn the_svg_draws_only_finite_figures_and_says_so() {
    let rack = RackPower {
        name: "r01".into(),
        nodes: 2,
        budget_w: 8000.0,
        supply_w: 8000.0,
        cooling_w: 10_000.0,
        hours: vec![
            (0, 1000.0),
            (H, f64::INFINITY),
            (2 * H, f64::NAN),
            (3 * H, 1e308),
            (4 * H, -5.0),
            (5 * H, 9000.0),
        ],
        over: vec![(H, f64::INFINITY), (3 * H, 1e308), (5 * H, 9000.0)],
    };
    let svg = power::svg(&PowerReport {
        racks: vec![rack.clone()],
        ..Default::default()
    });
    assert_drawable(&svg);
    assert!(
        svg.contains("4 hourly figure(s) not drawn") && svg.contains("budget 8.0 kW"),
        "{svg}"
    );
    // Red dots: the legend's and the one over-budget hour that can be
    // drawn (the legend is new with issue 24).
    assert_eq!(svg.matches("r=\"4\" fill=\"#d62728\"").count(), 2, "{svg}");
    // A budget that is no figure: no budget line, no `inf`.
    let svg = power::svg(&PowerReport {
        racks: vec![RackPower {
            budget_w: f64::INFINITY,
            ..rack
        }],
        ..Default::default()
    });
    assert_drawable(&svg);
    assert!(svg.contains("budget - kW"), "{svg}");
}

/// Root writes the chart where the admin says: a symlink planted there
/// is replaced, its target left alone.
#[test]
fn the_svg_replaces_a_symlink_at_its_path_and_leaves_its_target_alone() {
    let records = records_dir(&[good_line()]);
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("shadow");
    std::fs::write(&target, "root:*:19000:0:99999:7:::\n").unwrap();
    let svg = out.path().join("power.svg");
    std::os::unix::fs::symlink(&target, &svg).unwrap();
    let args = s(&[
        "--power",
        "--dir",
        records.path().to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(run_within(args, rack_config(), 20), 0);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "root:*:19000:0:99999:7:::\n"
    );
    assert!(std::fs::symlink_metadata(&svg)
        .unwrap()
        .file_type()
        .is_file());
    assert_drawable(&std::fs::read_to_string(&svg).unwrap());
}

/// A mistake in `[power]` loads (it must not stop drains elsewhere) and
/// is the report's configuration error, never a literal node name.
#[test]
fn a_mistake_in_the_racks_is_an_error_of_the_report_alone() {
    let records = records_dir(&[good_line()]);
    let dir = records.path().to_str().unwrap().to_string();
    for nodes in [
        "[\"gpu[1-999999999]\"]",
        "[\"gpu[1-3\"]",
        "[\"n1\", \"n1\"]",
    ] {
        let cfg = parsed_config(&format!("{RACK}nodes = {nodes}\n"))
            .unwrap_or_else(|e| panic!("{nodes}: the configuration does not load: {e}"));
        assert_eq!(
            run_within(s(&["--power", "--dir", &dir]), cfg, 20),
            2,
            "{nodes}"
        );
    }
    // Other reports do not read [power].
    let cfg = parsed_config(&format!("{RACK}nodes = [\"n1\", \"n1\"]\n")).unwrap();
    assert_eq!(run_within(s(&["--dir", &dir]), cfg, 20), 0);
}
