//! `gpu-health resume` and `gpu-health health-check` without a slurmctld:
//! argument handling and the refusals that must come before any Slurm
//! call. Resuming against a live Slurm is covered by ci/e2e/40-operations.sh.

use std::process::Command;

use gpu_health_testkit::{output, SimNode};

/// Run `gpu-health ARGS` on a simulated node n1.
fn run(scenario_name: &str, extra: &str, args: &[&str]) -> (i32, String, String) {
    let node = SimNode::new(scenario_name);
    let cfg = node.write_config(extra);
    output(
        Command::new(env!("CARGO_BIN_EXE_gpu-health"))
            .args(args)
            .env_clear()
            .env("GPU_HEALTH_CONFIG", &cfg)
            .env("SLURMD_NODENAME", "n1"),
    )
}

#[test]
fn resume_refuses_another_node_and_bad_arguments() {
    let (code, _, err) = run("h100x8-healthy", "", &["resume", "n2"]);
    assert_eq!(code, 2);
    assert!(err.contains("this is n1, not n2"), "{err}");
    for args in [
        &["resume"][..],
        &["resume", "n1", "n2"],
        &["resume", "--bogus", "n1"],
        &["resume", "n1;reboot"],
    ] {
        let (code, _, err) = run("h100x8-healthy", "", args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
}

#[test]
fn resume_refuses_on_a_config_error_and_without_slurm() {
    let (code, _, err) = run("h100x8-healthy", "thresholds = 3\n", &["resume", "n1"]);
    assert_eq!(code, 2);
    assert!(err.contains("checks cannot be trusted"), "{err}");
    // --force lets another name through, but Slurm must still answer.
    let (code, _, err) = run("h100x8-healthy", "", &["resume", "n2", "--force"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot ask Slurm about n2"), "{err}");
}

#[test]
fn health_check_reports_and_exits_by_the_worst_finding() {
    let (code, out, _) = run("h100x8-healthy", "", &["health-check"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("n1: nothing to do"), "{out}");
    let (code, out, _) = run("h100x8-dbe", "", &["health-check"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ecc-uncorrected"), "{out}");
    assert!(
        out.contains("NOT drained") && out.contains("fail safe"),
        "the brake cannot count without Slurm: {out}"
    );
    let (code, _, _) = run("h100x8-healthy", "", &["health-check", "x"]);
    assert_eq!(code, 2);
}

/// Every health check refreshes the live power in the node_exporter
/// textfile (when one is configured), from its own probe.
#[test]
fn health_check_refreshes_the_live_power_in_the_textfile() {
    let node = SimNode::new("h100x8-pcie-degraded");
    let prom = node.path("gpu-health.prom");
    let cfg = node.write_config(&format!("prometheus_textfile = \"{}\"\n", prom.display()));
    let (code, out, err) = output(
        Command::new(env!("CARGO_BIN_EXE_gpu-health"))
            .arg("health-check")
            .env_clear()
            .env("GPU_HEALTH_CONFIG", &cfg)
            .env("SLURMD_NODENAME", "n1"),
    );
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(&prom).unwrap();
    gpu_health_testkit::promtool_check_metrics(&text);
    // GPU 2 of the scenario draws 698 W of its 700 W limit; issue 24 added
    // its uuid and PCI address to the labels.
    let gpu2 =
        "gpu=\"2\",uuid=\"GPU-3641e8fa-fd0a-e76c-f87c-4b1401dc7f24\",pci_bus_id=\"0000:3a:00.0\"";
    assert!(
        text.contains(&format!("gpu_health_gpu_power_watts{{{gpu2}}} 698\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("gpu_health_gpu_power_limit_watts{{{gpu2}}} 700\n")),
        "{text}"
    );
    assert!(text.contains("gpu_health_node_gpu_power_watts "), "{text}");
}

/// A fault the brake held back on a node that is not drained is what the
/// next check acts on: `resume` lists it and keeps it, unless told.
#[test]
fn resume_keeps_held_back_faults_unless_told() {
    let node = SimNode::new("h100x8-healthy");
    let cluster = gpu_health_testkit::FakeCluster::new(&node.path("cluster"), &["n1", "n2"]);
    let cfg = node.write_config("");
    std::fs::create_dir_all(node.path("gpu-health.d")).unwrap();
    std::fs::write(
        node.path("gpu-health.d/n1.toml"),
        format!("scontrol = {:?}\n", cluster.scontrol()),
    )
    .unwrap();
    std::fs::create_dir_all(node.path("state")).unwrap();
    // As a run before the ledger kept it (the ledger folds it in).
    std::fs::write(
        node.path("state/pending-drain.json"),
        r#"{"last_ms":1,"why":"drain brake","findings":[{"finding":{"check":"xid","action":"drain","gpu":3,"pci":"0000:5d:00.0","summary":"Xid 79 GPU3 0000:5d:00.0 pid=2210","message":"Xid 79"},"cause":"brake","since_ms":1}]}"#,
    )
    .unwrap();
    let resume = |extra: &[&str]| {
        output(
            Command::new(gpu_health_testkit::program(env!(
                "CARGO_BIN_EXE_gpu-health"
            )))
            .args(["resume", "n1"])
            .args(extra)
            .env_clear()
            .env("GPU_HEALTH_CONFIG", &cfg)
            .env("SLURMD_NODENAME", "n1"),
        )
    };
    let (code, out, err) = resume(&[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("held back") && out.contains("Xid 79 GPU3"),
        "{out}"
    );
    let ledger = std::fs::read_to_string(node.path("state/ledger.json")).unwrap_or_default();
    assert!(ledger.contains("\"code\":79"), "kept: {ledger}");
    let (code, out, err) = resume(&["--forget-pending"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("forgot"), "{out}");
    assert!(!node.path("state/ledger.json").exists());
    assert_eq!(cluster.reason("n1"), None, "never drained by resume");
}
