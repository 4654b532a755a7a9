//! `gpu-health check` against shipped scenarios: exit codes and JSON.

use std::path::{Path, PathBuf};
use std::process::Command;

fn sim_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.parent().unwrap().join("libnvml_sim.so"),
        deps.join("libnvml_sim.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libnvml_sim.so not built: run `cargo build -p nvml-sim` first")
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nvml-sim/scenarios")
        .join(format!("{name}.json"))
}

fn check(scenario_name: &str, config_extra: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gpu-health.toml");
    std::fs::write(dir.path().join("kernel.log"), "").unwrap();
    std::fs::write(
        &cfg,
        format!(
            "nvml_library = {:?}\nkernel_log = {:?}\nstate_dir = {:?}\nnvml_deadline_ms = 2000\n{config_extra}",
            sim_library(),
            dir.path().join("kernel.log"),
            dir.path().join("state"),
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-health"))
        .arg("check")
        .args(args)
        .env_clear()
        .env("GPU_HEALTH_CONFIG", &cfg)
        .env("NVML_SIM_SCENARIO", scenario(scenario_name))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
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
