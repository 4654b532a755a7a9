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
    // GPU 2 of the scenario draws 698 W of its 700 W limit.
    assert!(
        text.contains("gpu_health_gpu_power_watts{gpu=\"2\"} 698"),
        "{text}"
    );
    assert!(
        text.contains("gpu_health_gpu_power_limit_watts{gpu=\"2\"} 700"),
        "{text}"
    );
    assert!(text.contains("gpu_health_node_gpu_power_watts "), "{text}");
}
