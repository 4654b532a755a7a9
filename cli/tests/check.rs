//! `gpu-health check` against shipped scenarios: exit codes and JSON.

use std::process::Command;

use gpu_health_testkit::{output, SimNode};

/// Run `gpu-health check ARGS` on a simulated node.
fn check(scenario_name: &str, config_extra: &str, args: &[&str]) -> (i32, String, String) {
    let node = SimNode::new(scenario_name);
    let cfg = node.write_config(config_extra);
    output(
        Command::new(env!("CARGO_BIN_EXE_gpu-health"))
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
    assert_eq!(v["worst"], "fatal");
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
