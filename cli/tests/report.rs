//! `gpu-health report` as issue 24 found it: drain failures and notes
//! not shown, no `--node`, `--until` or `--limit`, unrounded floats,
//! `--power` without `--json`/`--csv`, a chart without legend, axis or a
//! visible single hour, and a bad `--svg` path found after the table.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_health_core::records::{GpuRecord, JobRecord};
use gpu_health_testkit::output;

const H: u64 = 3_600_000;
/// 2026-11-29T00:00:00Z.
const DAY: u64 = 1_795_910_400_000;

/// Midnight UTC ten days ago: the power report leaves out records more
/// than a day ahead of the clock.
fn days_ago() -> u64 {
    let now = gpu_health_core::time::unix_ms();
    (now / (24 * H) - 10) * 24 * H
}

fn record(job: &str, node: &str, start_ms: u64, end_ms: u64) -> JobRecord {
    JobRecord {
        version: 1,
        job_id: job.into(),
        node: node.into(),
        user: Some("alice".into()),
        uid: None,
        partition: None,
        exit_code: None,
        start_ms: Some(start_ms),
        end_ms,
        duration_s: Some((end_ms - start_ms) as f64 / 1000.0),
        start_snapshot_missing: false,
        start_snapshot_missing_reason: None,
        nvml_error: None,
        gpus: vec![GpuRecord {
            index: 0,
            energy_j: Some(700.0 * ((end_ms - start_ms) / 1000) as f64),
            mean_power_w: Some(700.0),
            ..GpuRecord::default()
        }],
        xids: Vec::new(),
        xids_absent_reason: None,
        drained: None,
        drain_failed: None,
        peak_power_w: None,
    }
}

struct Records {
    dir: tempfile::TempDir,
}

impl Records {
    fn new(records: &[JobRecord]) -> Records {
        let dir = tempfile::tempdir().unwrap();
        let lines: String = records
            .iter()
            .map(|r| r.to_line().unwrap() + "\n")
            .collect();
        std::fs::write(dir.path().join("jobs.jsonl"), lines).unwrap();
        std::fs::write(
            dir.path().join("gpu-health.toml"),
            "[[power.racks]]\nname = \"r01\"\nnodes = [\"n[1-2]\"]\nsupply_kw = 8.0\ncooling_kw = 12.0\n\
             [[power.racks]]\nname = \"r02\"\nnodes = [\"n9\"]\nsupply_kw = 20.0\ncooling_kw = 10.0\n",
        )
        .unwrap();
        Records { dir }
    }

    fn report(&self, args: &[&str]) -> (i32, String, String) {
        output(
            Command::new(gpu_health_testkit::program(env!(
                "CARGO_BIN_EXE_gpu-health"
            )))
            .arg("report")
            .arg("--dir")
            .arg(self.dir.path().join(""))
            .args(args)
            .env_clear()
            .env("GPU_HEALTH_CONFIG", self.dir.path().join("gpu-health.toml")),
        )
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
}

#[test]
fn a_drain_that_failed_is_shown() {
    let mut r = record("42", "n1", DAY, DAY + H);
    r.drain_failed =
        Some("gpu-health: ECC DBE during job 42 GPU3 (drain): held by the drain brake".into());
    let recs = Records::new(&[r]);
    let (code, out, _) = recs.report(&[]);
    assert_eq!(code, 0);
    assert!(
        out.contains("    DRAIN FAILED n1: gpu-health: ECC DBE during job 42 GPU3 (drain): held by the drain brake"),
        "{out}"
    );
    let (_, csv, _) = recs.report(&["--csv"]);
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",drained,drain_failed"),
        "{csv}"
    );
    assert!(
        csv.lines().nth(1).unwrap().ends_with(
            ",n1: gpu-health: ECC DBE during job 42 GPU3 (drain): held by the drain brake"
        ),
        "{csv}"
    );
    let (_, json, _) = recs.report(&["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v[0]["drain_failed"][0]
            .as_str()
            .unwrap()
            .starts_with("n1: "),
        "{json}"
    );
}

#[test]
fn node_until_and_limit_select_jobs() {
    let recs = Records::new(&[
        record("1", "n1", DAY, DAY + H),
        record("2", "n2", DAY, DAY + 2 * H),
        record("3", "n1", DAY, DAY + 3 * H),
        record("3", "n2", DAY, DAY + 3 * H),
        record("4", "n1", DAY, DAY + 4 * H),
    ]);
    let ids = |args: &[&str]| {
        let (code, csv, err) = recs.report(&[&["--csv"][..], args].concat());
        assert_eq!(code, 0, "{err}");
        csv.lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                format!("{}@{}", f[0], f[3])
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&["--node", "n2"]), ["2@n2", "3@n2"]);
    assert_eq!(ids(&["--until", "2026-11-29T03:00"]), ["1@n1", "2@n2"]);
    assert_eq!(ids(&["--limit", "2"]), ["3@n1 n2", "4@n1"]);
    assert_eq!(
        ids(&["--since", "2026-11-29T02:00", "--until", "2026-11-29T04:00"]),
        ["2@n2", "3@n1 n2"]
    );
    let (code, _, err) = recs.report(&["--limit", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--limit"), "{err}");
}

/// Issue 24: CSV and JSON carried `611.0937808489635`; a mean above the
/// sampled max went without a word.
#[test]
fn figures_are_rounded_and_a_mean_above_the_peak_is_said() {
    let mut r = record("42", "n1", DAY, DAY + H);
    r.gpus[0].mean_power_w = Some(611.0937808489635);
    r.gpus[0].peak_power_w = Some(600.0);
    r.peak_power_w = Some(600.0);
    let recs = Records::new(&[r]);
    let (_, csv, _) = recs.report(&["--csv"]);
    assert!(csv.contains(",611.1,600,"), "{csv}");
    let (_, json, _) = recs.report(&["--json"]);
    assert!(json.contains("\"mean_power_w\": 611.1,"), "{json}");
    assert!(!json.contains("611.09"), "{json}");
    let (_, table, _) = recs.report(&[]);
    assert!(table.contains("[mean above the sampled max"), "{table}");
    assert!(
        table.contains("note: mean power above the sampled peak"),
        "{table}"
    );
}

#[test]
fn power_series_as_json_and_csv() {
    let recs = Records::new(&[
        record("1", "n1", DAY + 10 * H, DAY + 12 * H),
        record("2", "n2", DAY + 10 * H, DAY + 11 * H),
    ]);
    let (code, json, err) = recs.report(&["--power", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let r01 = &v["racks"][0];
    assert_eq!(r01["budget_w"], 8000.0);
    assert_eq!(r01["budget_source"], "supply");
    assert_eq!(v["racks"][1]["budget_source"], "cooling");
    assert_eq!(r01["hours"][0]["hour"], "2026-11-29T10:00:00Z");
    assert_eq!(r01["hours"][0]["power_w"], 1400.0);
    assert_eq!(r01["hours"][1]["power_w"], 700.0);
    let (code, csv, _) = recs.report(&["--power", "--csv"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "rack,hour,power_w,budget_w,budget_source,over_budget"
    );
    assert_eq!(lines[1], "r01,2026-11-29T10:00:00Z,1400,8000,supply,false");
}

/// Issue 24: a bad `--svg` path failed only after the whole table.
#[test]
fn a_bad_svg_path_fails_before_anything_is_printed() {
    let recs = Records::new(&[record("1", "n1", DAY, DAY + H)]);
    let (code, out, err) = recs.report(&["--power", "--svg", "/nonexistent/dir/power.svg"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "", "nothing printed");
    assert!(err.contains("/nonexistent/dir/power.svg"), "{err}");
}

/// The chart for `records`, rendered to PNG by librsvg (kept under
/// `$GPU_HEALTH_CHART_DIR/<name>.png` to look at, when set).
fn chart(name: &str, records: &[JobRecord]) -> String {
    let recs = Records::new(records);
    let svg = recs.path("power.svg");
    let (code, _, err) = recs.report(&["--power", "--svg", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let png = match std::env::var_os("GPU_HEALTH_CHART_DIR") {
        Some(d) => Path::new(&d).join(format!("{name}.png")),
        None => recs.path("power.png"),
    };
    let run = Command::new("rsvg-convert")
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
    text
}

/// Issue 24: one hour of data drew nothing (a one-point polyline); no
/// legend, only the first and last time, one scale per rack, the
/// budget's source untold, an empty rack blank.
#[test]
fn the_chart_of_one_hour_one_week_and_an_empty_rack() {
    let hour = chart(
        "one-hour",
        &[record("1", "n1", days_ago() + 10 * H, days_ago() + 11 * H)],
    );
    assert!(
        hour.contains("<circle cx="),
        "the single hour is a dot\n{hour}"
    );
    assert!(
        hour.contains("mean power per hour") && hour.contains("hour over budget"),
        "a legend"
    );
    assert!(
        hour.contains("budget 8.0 kW, set by its supply (cooling 12.0 kW)"),
        "{hour}"
    );
    assert!(
        hour.contains("budget 10.0 kW, set by its cooling (supply 20.0 kW)"),
        "{hour}"
    );
    assert!(
        hour.contains(">no data</text>"),
        "rack r02 has no record\n{hour}"
    );
    let tick = &gpu_health_core::time::format_utc_ms(days_ago() + 10 * H)[5..13];
    assert!(
        hour.contains(&format!(">{}:00</text>", tick.replace('T', " "))),
        "a time tick\n{hour}"
    );
    let start = days_ago();
    let week: Vec<JobRecord> = (0..7)
        .map(|d| {
            record(
                &d.to_string(),
                "n1",
                start + d * 24 * H,
                start + d * 24 * H + 20 * H,
            )
        })
        .collect();
    let week = chart("one-week", &week);
    let second_day = &gpu_health_core::time::format_utc_ms(start + 24 * H)[..10];
    assert!(
        week.contains(&format!(">{second_day}</text>")),
        "day ticks\n{week}"
    );
    // One kW scale for both racks: the same tick labels in each panel.
    assert_eq!(week.matches(">10 kW</text>").count(), 2, "{week}");
    let empty = chart("empty", &[]);
    assert_eq!(empty.matches(">no data</text>").count(), 2, "{empty}");
}

/// Issue 37: `report --power --svg F | head -1` ended at the first print
/// the reader no longer took (SIGPIPE) before F was written.
#[test]
fn the_chart_is_written_when_the_reader_leaves_early() {
    use std::process::Stdio;
    let recs = Records::new(&[record("1", "n1", days_ago(), days_ago() + H)]);
    let svg = recs.path("power.svg");
    let mut child = Command::new(gpu_health_testkit::program(env!(
        "CARGO_BIN_EXE_gpu-health"
    )))
    .arg("report")
    .arg("--dir")
    .arg(recs.dir.path().join(""))
    .args(["--power", "--svg"])
    .arg(&svg)
    .env_clear()
    .env("GPU_HEALTH_CONFIG", recs.path("gpu-health.toml"))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The reader is gone before the command prints anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&svg).unwrap_or_else(|e| {
        panic!(
            "{} not written ({e}); status {:?}: {}",
            svg.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
}

/// Issue 37: an empty rack's "no data" was drawn on a white box over the
/// middle of its panel, where its budget line may run.
#[test]
fn an_empty_racks_no_data_leaves_its_budget_line_seen() {
    let recs = Records::new(&[]);
    // Budgets of 10 and 6 kW: the scale goes to 12 kW, so rack r02's
    // budget line runs through the middle of its panel.
    std::fs::write(
        recs.path("gpu-health.toml"),
        "[[power.racks]]\nname = \"r01\"\nnodes = [\"n1\"]\nsupply_kw = 10.0\ncooling_kw = 12.0\n\
         [[power.racks]]\nname = \"r02\"\nnodes = [\"n9\"]\nsupply_kw = 6.0\ncooling_kw = 10.0\n",
    )
    .unwrap();
    let svg = recs.path("power.svg");
    let (code, _, err) = recs.report(&["--power", "--svg", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let attr = |line: &str, name: &str| -> f64 {
        let at = line.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        line[at..].split('"').next().unwrap().parse().unwrap()
    };
    let mut budget_y = None;
    let mut empty = 0;
    for line in text.lines() {
        if line.contains("stroke-dasharray=\"8 4\"") {
            budget_y = Some(attr(line, "y1"));
        }
        if line.contains(">no data</text>") {
            let by = budget_y.expect("a budget line before the panel's text");
            let ty = attr(line, "y");
            // The text spans about 12 px above its baseline, 3 below.
            assert!(
                by < ty - 14.0 || by > ty + 4.0,
                "the budget line at y={by} runs through \"no data\" at y={ty}\n{text}"
            );
            empty += 1;
        }
    }
    assert_eq!(empty, 2, "{text}");
}

/// Issue 37: `--since` took dates only; sacct's `now-1days` is what an
/// admin types.
#[test]
fn since_takes_a_time_relative_to_now() {
    let now = gpu_health_core::time::unix_ms();
    let recs = Records::new(&[
        record("old", "n1", now - 50 * H, now - 49 * H),
        record("new", "n1", now - 3 * H, now - 2 * H),
    ]);
    let jobs = |since: &str| -> Vec<String> {
        let (code, out, err) = recs.report(&["--csv", "--since", since]);
        assert_eq!(code, 0, "{since}: {err}");
        out.lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(jobs("now-1days"), ["new"]);
    assert_eq!(jobs("now-3days"), ["old", "new"]);
    assert_eq!(jobs("now-90minutes"), Vec::<String>::new());
    assert_eq!(jobs("now-150minutes"), ["new"]);
    let (code, _, err) = recs.report(&["--since", "now-1fortnight"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("now-1days"), "{err}");
}
