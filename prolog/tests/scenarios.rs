//! The real prolog binary against every shipped NVML scenario, through the
//! real nvml-wrapper path (the stand-in library built in this workspace).
//!
//! Draining needs a live slurmctld (covered by ci/e2e); here scontrol is a
//! path that does not exist, so the prolog logs the reason it would have
//! set, and the test reads it from the log file.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{drain_reason, Node};
use gpu_health_testkit::Scontrol;

#[test]
fn healthy_scenarios_pass_and_write_verdicts() {
    for s in [
        "h100x8-healthy",
        "a100x8-healthy",
        "l40sx4-pcie-only",
        "h100x8-mig",
    ] {
        let n = Node::new(s);
        let r = n.prolog("101", "0,1,2,3");
        assert_eq!(r.code, 0, "{s}: {}", r.log);
        let v = n.verdict("101");
        assert_eq!(v["job_gpus"], serde_json::json!([0, 1, 2, 3]), "{s}");
        assert_eq!(v["findings"], serde_json::json!([]), "{s}: {v}");
        assert_eq!(v["mode"], "warn");
        assert!(n.path("state/node-snapshot.json").is_file());
    }
}

#[test]
fn fatal_scenarios_drain_with_precise_reasons() {
    for (s, reason) in [
        (
            "h100x8-dbe",
            "gpu-health: ECC DBE GPU3 0000:5d:00.0 volatile uncorrected=",
        ),
        (
            "h100x8-fallen-off",
            "gpu-health: GPU count 7 of 8; GPU5 lost (fallen off the bus) (drain)",
        ),
        ("h100x8-remap-failure", "gpu-health: row remap failure GPU"),
    ] {
        let n = Node::new(s);
        let r = n.prolog("102", "0");
        assert_eq!(r.code, 1, "{s}: {}", r.log);
        let got = drain_reason(&r).unwrap_or_default();
        assert!(
            got.starts_with(reason),
            "{s}: reason {got:?}, log:\n{}",
            r.log
        );
        assert!(got.ends_with("(drain)"), "{got}");
    }
}

#[test]
fn warnings_reach_the_verdict_of_jobs_on_that_gpu_only() {
    let n = Node::new("h100x8-pcie-degraded");
    let r = n.prolog("103", "2,3");
    assert_eq!(r.code, 0, "{}", r.log);
    let f = &n.verdict("103")["findings"];
    assert_eq!(f.as_array().unwrap().len(), 1, "{f}");
    assert_eq!(f[0]["check"], "pcie-link");
    assert_eq!(f[0]["action"], "warn");
    assert_eq!(
        f[0]["summary"],
        "PCIe Gen4 x8 of Gen5 x16 GPU2 0000:3a:00.0"
    );
    n.prolog("104", "0,1");
    assert_eq!(n.verdict("104")["findings"], serde_json::json!([]));

    // Links down from the first look (never active since boot): on
    // record, no warning. Up once, then down: a warning.
    let n = Node::new("h100x8-nvlink-down");
    assert_eq!(n.prolog("105", "0-7").code, 0);
    let f = n.verdict("105")["findings"].clone();
    let kinds: Vec<(&str, &str)> = f
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["check"].as_str().unwrap(), x["action"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, vec![("nvlink-unused", "info")], "{f}");
    let n = Node::new("h100x8-healthy");
    assert_eq!(n.prolog("106", "0-7").code, 0);
    n.set_scenario("h100x8-nvlink-down");
    assert_eq!(n.prolog("107", "0-7").code, 0);
    let f = &n.verdict("107")["findings"];
    assert!(
        f.as_array()
            .unwrap()
            .iter()
            .any(|x| x["check"] == "nvlink" && x["action"] == "warn"),
        "{f}"
    );
}

/// The NVLink history holds for one boot, the boot `xid.boot_id_path`
/// names (it used to read /proc's whatever the configuration said): a
/// link seen up before a reboot and down after it is one that never
/// trained in this boot (info), not one that went down (warn).
#[test]
fn nvlink_history_follows_the_configured_boot_id() {
    let n = Node::new("h100x8-healthy");
    let boot_id = n.path("boot_id");
    std::fs::write(&boot_id, "boot-1\n").unwrap();
    n.write_config(&format!("[xid]\nboot_id_path = {boot_id:?}\n"));
    assert_eq!(n.prolog("120", "0-7").code, 0);
    let history: serde_json::Value =
        serde_json::from_slice(&std::fs::read(n.path("state/nvlink-history.json")).unwrap())
            .unwrap();
    assert_eq!(history["boot_id"], "boot-1", "{history}");
    std::fs::write(&boot_id, "boot-2\n").unwrap();
    n.set_scenario("h100x8-nvlink-down");
    assert_eq!(n.prolog("121", "0-7").code, 0);
    let f = &n.verdict("121")["findings"];
    let checks: Vec<&str> = f
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["check"].as_str().unwrap())
        .collect();
    assert_eq!(checks, vec!["nvlink-unused"], "{f}");
}

#[test]
fn nvml_hang_is_abandoned_at_the_deadline() {
    let n = Node::new("nvml-hang");
    let r = n.prolog("106", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(
        r.elapsed < Duration::from_millis(1500 + 1500),
        "took {:?}",
        r.elapsed
    );
    assert_eq!(
        drain_reason(&r).as_deref(),
        Some("gpu-health: NVML did not answer in 1500 ms (drain)")
    );
}

#[test]
fn growing_corrected_ecc_drains_with_history() {
    let n = Node::new("h100x8-sbe-growing");
    assert_eq!(n.prolog("107", "0").code, 0, "first run has no history");
    // Pretend the first sample was taken an hour ago, an hour's growth
    // (the scenario's corrected_per_hour) ago.
    let hist_path = n.path("state/ecc-history.json");
    let mut h: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&hist_path).unwrap()).unwrap();
    for samples in h["gpus"].as_object_mut().unwrap().values_mut() {
        let t = samples[0][0].as_u64().unwrap();
        let c = samples[0][1].as_u64().unwrap();
        samples[0] = serde_json::json!([t - 3_600_000, c.saturating_sub(36_000)]);
    }
    std::fs::write(&hist_path, h.to_string()).unwrap();
    let r = n.prolog("108", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(
        drain_reason(&r).unwrap().contains("ECC SBE rate GPU"),
        "{}",
        r.log
    );
}

#[test]
fn xid_in_kernel_log_drains_once() {
    let n = Node::new("h100x8-healthy");
    let scontrol = n.scontrol(Scontrol::Works);
    n.write_dropin(&format!(
        "scontrol = {scontrol:?}\n[brake]\nenabled = false\n"
    ));
    assert_eq!(n.prolog("109", "0").code, 0);
    std::fs::write(
        n.path("kernel.log"),
        "[ 9000.100000] NVRM: Xid (PCI:0000:5d:00): 79, pid=2210, GPU has fallen off the bus.\n",
    )
    .unwrap();
    let r = n.prolog("110", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(
        n.drained_reason().as_deref(),
        Some("gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)")
    );
    // Drained, then the cursor moved: the same record is not judged again
    // and nothing is pending.
    assert_eq!(n.prolog("111", "0").code, 1, "the node is drained");
    let ledger = std::fs::read_to_string(n.path("state/ledger.json")).unwrap();
    assert!(!ledger.contains("pending"), "{ledger}");
    assert_eq!(
        n.scontrol_calls()
            .iter()
            .filter(|c| c.contains("State=DRAIN"))
            .count(),
        1,
        "drained once: {:?}",
        n.scontrol_calls()
    );
}

#[test]
fn malformed_config_never_drains() {
    let n = Node::new("h100x8-dbe");
    // The node's drop-in is broken: the main file stays in force (so the
    // test never falls back to the host's default paths), nothing drains.
    n.write_dropin("[brake]\nenabled = false\nnvml_deadline_ms = = 3\n");
    let r = n.prolog("112", "3");
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(
        r.log.contains("configuration error") && r.log.contains("line 3"),
        "{}",
        r.log
    );
    assert!(
        r.log
            .contains("would have drained: gpu-health: ECC DBE GPU3"),
        "{}",
        r.log
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(n.path("state/jobs/112.json")).unwrap())
            .unwrap();
    assert!(
        v["config_error"].as_str().unwrap().contains("n1.toml"),
        "{v}"
    );
}

#[test]
fn mode_and_hostile_environment() {
    let n = Node::new("h100x8-healthy");
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"))
        .env_clear()
        .env("GPU_HEALTH_CONFIG", n.path("gpu-health.toml"))
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_JOB_ID", "113")
        .env("SLURM_JOB_GPUS", "0,1")
        .env("SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health", "strict")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(n.verdict("113")["mode"], "strict");
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"))
        .env_clear()
        .env("GPU_HEALTH_CONFIG", n.path("gpu-health.toml"))
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_JOB_ID", "../../../etc/passwd")
        .env("SLURM_JOB_GPUS", "0;rm -rf /")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!n.path("state/jobs/../../../etc/passwd.json").exists());
}
