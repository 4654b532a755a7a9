//! `gpu-health check` against shipped scenarios: exit codes and JSON.

use std::process::Command;

use gpu_health_testkit::{output, SimNode};

/// Run `gpu-health check ARGS` on a simulated node.
fn check(scenario_name: &str, config_extra: &str, args: &[&str]) -> (i32, String, String) {
    let node = SimNode::new(scenario_name);
    let cfg = node.write_config(config_extra);
    output(
        Command::new(gpu_health_testkit::program(env!(
            "CARGO_BIN_EXE_gpu-health"
        )))
        .arg("check")
        .args(args)
        .env_clear()
        .env("GPU_HEALTH_CONFIG", &cfg),
    )
}

#[test]
fn exit_codes_follow_the_worst_finding() {
    for (s, code) in [
        ("h100x8-healthy", 0),
        ("a100x8-healthy", 0),
        ("l40sx4-pcie-only", 0),
        ("h100x8-pcie-degraded", 0),
        ("h100x8-nvlink-down", 0),
        ("h100x8-mig", 0),
        ("h100x8-dbe", 1),
        ("h100x8-fallen-off", 1),
        ("h100x8-remap-failure", 1),
        ("nvml-hang", 1),
    ] {
        let (got, out, err) = check(s, "", &[]);
        assert_eq!(got, code, "{s}\n{out}\n{err}");
    }
}

#[test]
fn json_lists_findings() {
    let (code, out, _) = check("h100x8-dbe", "", &["--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let f = v["findings"].as_array().unwrap();
    assert_eq!(f.len(), 1, "{out}");
    assert_eq!(f[0]["check"], "ecc-uncorrected");
    assert_eq!(f[0]["gpu"], 3);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    // Issue 24: one vocabulary, the action itself (was "fatal").
    assert_eq!(v["worst"], "drain");
}

#[test]
fn table_names_each_gpu() {
    let (code, out, _) = check("h100x8-pcie-degraded", "", &[]);
    assert_eq!(code, 0);
    assert!(
        out.contains("pcie-link") && out.contains("0000:3a:00.0"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("NVIDIA H100")).count(),
        7,
        "{out}"
    );
}

#[test]
fn usage_and_config_errors_exit_2() {
    let (code, _, err) = check("h100x8-healthy", "", &["--bogus"]);
    assert_eq!(code, 2);
    assert!(err.contains("--bogus"));
    let (code, _, err) = check("h100x8-healthy", "thresholds = 3\n", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("thresholds"), "{err}");
}

/// Node Problem Detector's custom-plugin convention, on the real NVML
/// code path: one line, exit 0 healthy / 1 problem / 2 unknown.
#[test]
fn npd_mode_on_shipped_scenarios() {
    for (s, code, start) in [
        ("h100x8-healthy", 0, "gpu-health: ok, 8 GPUs"),
        (
            "h100x8-pcie-degraded",
            0,
            "gpu-health: ok, 8 GPUs, 1 warnings",
        ),
        ("h100x8-dbe", 1, "gpu-health: ECC"),
        ("h100x8-fallen-off", 1, "gpu-health: "),
    ] {
        let (got, out, err) = check(s, "", &["--npd"]);
        assert_eq!(got, code, "{s}\n{out}\n{err}");
        assert_eq!(out.lines().count(), 1, "{s}: one line\n{out}");
        assert!(
            out.starts_with(start) && out.trim_end().len() <= 80,
            "{s}: {out}"
        );
    }
    // Issue 24: the line says where the error is (was: "the
    // configuration has an error").
    let (got, out, _) = check("h100x8-healthy", "thresholds = 3\n", &["--npd"]);
    assert_eq!(got, 2);
    assert!(
        out.trim()
            .starts_with("gpu-health: unknown, configuration error in gpu-health.toml line "),
        "{out}"
    );
}

/// The shipped Node Problem Detector config runs this mode of the
/// installed binary, with a timeout above the probe's deadline.
#[test]
fn the_shipped_npd_config_runs_check_npd() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/npd/gpu-health-npd.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v["plugin"], "custom");
    let rule = &v["rules"][0];
    assert_eq!(rule["path"], "/usr/sbin/gpu-health");
    assert_eq!(rule["args"], serde_json::json!(["check", "--npd"]));
    assert_eq!(rule["condition"], v["conditions"][0]["type"]);
    assert_eq!(v["pluginConfig"]["max_output_length"], 80);
    let secs = |s: &serde_json::Value| {
        s.as_str()
            .unwrap()
            .trim_end_matches('s')
            .parse::<u64>()
            .unwrap()
    };
    let deadline_s = gpu_health_core::config::Config::default().nvml_deadline_ms / 1000;
    assert!(
        secs(&rule["timeout"]) > deadline_s,
        "the probe's deadline fits in the timeout"
    );
}

/// `check` judges as the Prolog would: the saved ECC history (read, never
/// written), the leftovers of a job's GPUs, the faults the node's ledger
/// holds, Xids users could have written marked, and what the Prolog would
/// do.
#[test]
fn check_judges_as_the_prolog_would() {
    let run = |_node: &SimNode, cfg: &std::path::Path, args: &[&str]| {
        output(
            Command::new(gpu_health_testkit::program(env!(
                "CARGO_BIN_EXE_gpu-health"
            )))
            .arg("check")
            .args(args)
            .env_clear()
            .env("GPU_HEALTH_CONFIG", cfg)
            .env("SLURMD_NODENAME", "n1"),
        )
    };
    // Leftovers: only for a job's GPUs.
    let node = SimNode::new("h100x8-leftovers");
    let cfg = node.write_config("");
    let (code, out, err) = run(&node, &cfg, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("leftovers"), "{out}");
    let (code, out, _) = run(&node, &cfg, &["--gpus", "0-7", "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["findings"].to_string().contains("leftovers"), "{out}");
    assert_eq!(v["prolog_would"]["action"], "warn", "{out}");
    let (code, _, err) = run(&node, &cfg, &["--gpus", "0-7", "--job", "3"]);
    assert_eq!(code, 2, "--gpus and --job exclude each other: {err}");

    // Corrected ECC growing 36,000 an hour, against the saved history
    // (as the Prolog left it an hour ago).
    let node = SimNode::new("h100x8-sbe-growing");
    let cfg = node.write_config("");
    let (code, out, err) = run(&node, &cfg, &["--json"]);
    assert_eq!(code, 0, "no history yet: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut gpus = serde_json::Map::new();
    for g in v["gpus"].as_array().unwrap() {
        gpus.insert(
            g["uuid"].as_str().unwrap().to_string(),
            serde_json::json!([[1_000u64, 0u64]]),
        );
    }
    std::fs::create_dir_all(node.path("state")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for samples in gpus.values_mut() {
        *samples = serde_json::json!([[now - 3_600_000, 0u64]]);
    }
    std::fs::write(
        node.path("state/ecc-history.json"),
        serde_json::json!({ "gpus": gpus }).to_string(),
    )
    .unwrap();
    let (code, out, err) = run(&node, &cfg, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("ecc-corrected-rate") && out.contains("would drain"),
        "{out}"
    );
    let after = std::fs::read_to_string(node.path("state/ecc-history.json")).unwrap();
    assert!(
        after.contains(&format!("{}", now - 3_600_000)) && after.matches('[').count() == 2 * 8,
        "check writes no sample: {after}"
    );

    // A fault the ledger holds (held back earlier): the Prolog would
    // drain for it though NVML is clean now.
    let node = SimNode::new("h100x8-healthy");
    let cfg = node.write_config("");
    std::fs::create_dir_all(node.path("state")).unwrap();
    std::fs::write(
        node.path("state/pending-drain.json"),
        r#"{"last_ms":1,"why":"drain brake","findings":[{"finding":{"check":"xid","action":"drain","gpu":3,"pci":"0000:5d:00.0","summary":"Xid 79 GPU3 0000:5d:00.0 pid=2210","message":"Xid 79"},"cause":"brake","since_ms":1}]}"#,
    )
    .unwrap();
    let (code, out, _) = run(&node, &cfg, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the prolog would drain: gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)"),
        "{out}"
    );
    assert!(
        node.path("state/pending-drain.json").exists(),
        "check writes nothing"
    );

    // A syslog line any user can write with `logger -t kernel`.
    let node = SimNode::new("h100x8-healthy");
    let cfg = node.write_config("");
    std::fs::write(
        node.path("kernel.log"),
        format!(
            "{} n1 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=7, GPU has fallen off the bus.\n",
            syslog_time_a_minute_ago()
        ),
    )
    .unwrap();
    let (code, out, _) = run(&node, &cfg, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("warn (forgeable)"), "{out}");
}

/// A classic syslog time stamp (`Dec  2 01:00:00`, UTC) of a minute ago:
/// a fixed date would fall out of the kernel log's look-back.
fn syslog_time_a_minute_ago() -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = (gpu_health_core::time::unix_ms() / 1000).saturating_sub(60) as i64;
    let (_, month, day) = gpu_health_core::time::civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{} {day:>2} {:02}:{:02}:{:02}",
        MONTHS[month as usize - 1],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// A node waiting for its acceptance tier says so, and which steps passed.
#[test]
fn check_shows_the_acceptance_tier_a_node_waits_for() {
    let node = SimNode::new("h100x8-healthy");
    let cfg = node.write_config("");
    std::fs::create_dir_all(node.path("state")).unwrap();
    std::fs::write(
        node.path("state/ledger.json"),
        r#"{"version":1,"node":"n1","drain":{"reason":"gpu-health: Xid 79 GPU3 0000:5d:00.0 (reboot)","kind":"drain","at_ms":1000,"last_fault_ms":1000},"proof":{"since_ms":60000,"boot_id":"b","kinds":["Xid 79"],"steps_passed":["all-reduce"]}}"#,
    )
    .unwrap();
    let (_, out, err) = output(
        Command::new(gpu_health_testkit::program(env!(
            "CARGO_BIN_EXE_gpu-health"
        )))
        .arg("check")
        .env_clear()
        .env("GPU_HEALTH_CONFIG", &cfg)
        .env("SLURMD_NODENAME", "n1"),
    );
    assert!(
        out.contains(
            "acceptance tier due after the reboot gpu-health asked for (Xid 79) since 1970-01-01T00:01:00"
        ) && out.contains("passed so far: all-reduce"),
        "{out}{err}"
    );
}
