//! The shipped alerting rules (packaging/prometheus/gpu-health.rules.yml)
//! on textfiles the real binaries wrote: each case runs a health check or
//! a Prolog on a stand-in node, turns its textfile into promtool's input
//! series (as node_exporter would serve it, `instance="n1"`), and checks
//! with `promtool test rules` which alerts fire, at which severity, at
//! each time, and that no other does (`ALERTS{alertstate="firing"}` is
//! compared whole).
//!
//! promtool's clock starts at 0: the file's times (`*_timestamp_seconds`,
//! the file's modification time that node_exporter serves as
//! `node_textfile_mtime_seconds`) are shifted by the Unix second the
//! case began, so that the write happens at about 0 s.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use gpu_health_testkit::{
    output, promtool_check_metrics, workspace_binary, ClusterMode, FakeCluster, SimNode,
};

/// The file label node_exporter gives the textfile (Debian's directory).
const FILE: &str = "/var/lib/prometheus/node-exporter/gpu-health.prom";

struct Node {
    sim: SimNode,
    cluster: FakeCluster,
    config: std::path::PathBuf,
    /// The Unix second the case began: promtool's 0.
    base: u64,
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

impl Node {
    fn new(scenario: &str, nodes: &[&str], dropin: &str) -> Node {
        let sim = SimNode::new(scenario);
        let cluster = FakeCluster::new(&sim.path("cluster"), nodes);
        let prom = sim.path("gpu-health.prom");
        let config = sim.write_config(&format!("prometheus_textfile = \"{}\"\n", prom.display()));
        std::fs::create_dir_all(sim.path("gpu-health.d")).unwrap();
        std::fs::write(
            sim.path("gpu-health.d/n1.toml"),
            format!("scontrol = {:?}\n{dropin}", cluster.scontrol()),
        )
        .unwrap();
        Node {
            sim,
            cluster,
            config,
            base: now_s(),
        }
    }

    fn run(&self, program: &Path, args: &[&str]) -> String {
        let (_, out, err) = output(
            Command::new(program)
                .args(args)
                .env_clear()
                .env("GPU_HEALTH_CONFIG", &self.config)
                .env("SLURMD_NODENAME", "n1")
                .env("SLURM_JOB_ID", "42")
                .env("SLURM_JOB_GPUS", "0")
                .env("SLURM_JOB_USER", "alice"),
        );
        format!("{out}{err}")
    }

    fn health_check(&self) -> String {
        let cli = gpu_health_testkit::program(env!("CARGO_BIN_EXE_gpu-health"));
        self.run(&cli, &["health-check"])
    }

    fn prolog(&self) -> String {
        self.run(
            &workspace_binary("gpu-health-prolog", "gpu-health-prolog"),
            &[],
        )
    }

    /// promtool's input series for the textfile, served unchanged for
    /// `minutes`; `fresh`: rewritten every minute by a run that saw the
    /// same (its run times and the file's time advance).
    fn series(&self, minutes: u32, fresh: bool) -> String {
        let path = self.sim.path("gpu-health.prom");
        let text = std::fs::read_to_string(&path).expect("the textfile was written");
        promtool_check_metrics(&text);
        let mtime = std::fs::metadata(&path)
            .unwrap()
            .modified()
            .unwrap()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let mut samples: Vec<(String, f64)> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (name, v) = l.rsplit_once(' ').expect("a sample line");
                (name.to_string(), v.parse().expect("a sample value"))
            })
            .collect();
        samples.push((
            format!("node_textfile_mtime_seconds{{file=\"{FILE}\"}}"),
            mtime,
        ));
        let mut out = String::new();
        for (name, v) in samples {
            let (metric, labels) = match name.split_once('{') {
                Some((m, l)) => (m.to_string(), format!("{},", l.trim_end_matches('}'))),
                None => (name.clone(), String::new()),
            };
            let time = metric.ends_with("_timestamp_seconds") || metric.ends_with("mtime_seconds");
            let v = if time { v - self.base as f64 } else { v };
            let runs = metric.starts_with("gpu_health_last_")
                || metric == "gpu_health_power_probe_timestamp_seconds"
                || metric == "node_textfile_mtime_seconds";
            let step = if fresh && runs { "+60" } else { "+0" };
            let _ = writeln!(
                out,
                "      - series: '{metric}{{{labels}instance=\"n1\"}}'\n        values: \"{v}{step}x{minutes}\"",
            );
        }
        out
    }
}

/// At `minute`, exactly these alerts fire: (alertname, its other labels).
type Expect<'a> = (u32, &'a [(&'a str, &'a str)]);

/// Run promtool on `node`'s textfile with the shipped rules: at each
/// time, the alerts `expect` names and no other fire.
fn alerts(node: &Node, fresh: bool, expect: &[Expect<'_>]) {
    let minutes = expect.iter().map(|e| e.0).max().unwrap_or(0) + 2;
    let rules = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/prometheus/gpu-health.rules.yml")
        .canonicalize()
        .unwrap();
    let mut yml = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{}    promql_expr_test:\n",
        rules.display(),
        node.series(minutes, fresh)
    );
    for (minute, firing) in expect {
        let _ = writeln!(
            yml,
            "      - expr: 'ALERTS{{alertstate=\"firing\"}}'\n        eval_time: {minute}m\n        exp_samples:{}",
            if firing.is_empty() { " []" } else { "" }
        );
        for (name, labels) in *firing {
            let sep = if labels.is_empty() { "" } else { "," };
            let _ = writeln!(
                yml,
                "          - labels: 'ALERTS{{alertname=\"{name}\",alertstate=\"firing\",instance=\"n1\"{sep}{labels}}}'\n            value: 1",
            );
        }
    }
    let file = node.sim.path("alerts.test.yml");
    std::fs::write(&file, &yml).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .expect("promtool (apt-get install prometheus; ./ci/test installs it)");
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}\n{yml}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const DRAIN: &str = r#"kind="drain",severity="critical""#;
const GPU3_DRAINS: &str = r#"gpu="3",uuid="GPU-55a85b78-b1d6-af86-91ce-a68fd48afdf8",pci_bus_id="0000:5d:00.0",verdict="drain",severity="critical""#;
const XID31: &str = "[ 5.0] NVRM: Xid (PCI:0000:18:00): 31, pid=2210, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f0a_bc000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n";

#[test]
fn a_healthy_node_fires_nothing() {
    let node = Node::new("h100x8-healthy", &["n1"], "");
    let out = node.health_check();
    assert_eq!(node.cluster.reason("n1"), None, "{out}");
    alerts(&node, true, &[(1, &[]), (30, &[]), (60, &[])]);
}

#[test]
fn a_textfile_nobody_rewrites_goes_stale() {
    let node = Node::new("h100x8-healthy", &["n1"], "");
    let out = node.health_check();
    assert_eq!(node.cluster.reason("n1"), None, "{out}");
    let file = format!(r#"file="{FILE}",severity="warning""#);
    alerts(
        &node,
        false,
        &[
            (14, &[]),
            (
                16,
                &[
                    ("GpuHealthCheckStale", r#"severity="warning""#),
                    ("GpuHealthTextfileStale", &file),
                ],
            ),
        ],
    );
}

#[test]
fn a_node_whose_health_check_never_ran() {
    let node = Node::new("h100x8-healthy", &["n1"], "");
    let out = node.prolog();
    let text = std::fs::read_to_string(node.sim.path("gpu-health.prom")).unwrap_or_default();
    assert!(
        text.contains("\ngpu_health_last_prolog_timestamp_seconds ")
            && !text.contains("\ngpu_health_last_health_check_timestamp_seconds "),
        "the Prolog wrote the textfile, no health check: {out}\n{text}"
    );
    let version = format!(
        r#"version="{}",severity="warning""#,
        env!("CARGO_PKG_VERSION")
    );
    alerts(
        &node,
        true,
        &[(14, &[]), (16, &[("GpuHealthCheckNeverRan", &version)])],
    );
}

#[test]
fn a_drain_that_waits_for_an_admin_pages_at_once() {
    let node = Node::new("h100x8-dbe", &["n1"], "");
    let out = node.health_check();
    assert!(node.cluster.reason("n1").is_some(), "drained: {out}");
    alerts(
        &node,
        true,
        &[
            (1, &[("GpuHealthNodeDrained", DRAIN)]),
            (60, &[("GpuHealthNodeDrained", DRAIN)]),
        ],
    );
}

#[test]
fn a_drain_until_clean_warns_only_when_it_lasts() {
    let node = Node::new("h100x8-healthy", &["n1"], "");
    std::fs::write(node.sim.path("kernel.log"), XID31).unwrap();
    let out = node.health_check();
    let reason = node.cluster.reason("n1").unwrap_or_default();
    assert!(reason.contains("(drain-until-clean)"), "{reason:?} {out}");
    let until_clean = r#"kind="drain-until-clean",severity="warning""#;
    alerts(
        &node,
        true,
        &[
            (1, &[]),
            (44, &[]),
            (46, &[("GpuHealthNodeDrainedUntilClean", until_clean)]),
        ],
    );
}

#[test]
fn a_drain_the_brake_holds_back_pages_in_steps() {
    let node = Node::new("h100x8-dbe", &["n1", "n2"], "");
    node.cluster
        .drain("n2", "gpu-health: Xid 48 GPU0 0000:18:00.0 (drain)");
    let out = node.health_check();
    assert_eq!(node.cluster.reason("n1"), None, "the brake held it: {out}");
    let finding = ("GpuHealthGpuFindingDrains", GPU3_DRAINS);
    let brake = ("GpuHealthBrakeHolding", r#"severity="critical""#);
    let pending = (
        "GpuHealthDrainPending",
        r#"cause="brake",severity="critical""#,
    );
    alerts(
        &node,
        true,
        &[
            (1, &[finding]),
            (4, &[finding]),
            (6, &[finding, brake]),
            (10, &[finding, brake]),
            (11, &[finding, brake, pending]),
        ],
    );
}

#[test]
fn a_fault_on_a_node_someone_else_drained_pages_nothing() {
    let node = Node::new("h100x8-dbe", &["n1"], "");
    node.cluster.drain("n1", "PSU swap, ticket 4711");
    let out = node.health_check();
    assert_eq!(
        node.cluster.reason("n1").as_deref(),
        Some("PSU swap, ticket 4711"),
        "{out}"
    );
    let text = std::fs::read_to_string(node.sim.path("gpu-health.prom")).unwrap();
    assert!(
        text.contains("gpu_health_pending_faults{cause=\"drained-by-someone-else\"} 1"),
        "{text}"
    );
    alerts(&node, true, &[(1, &[]), (11, &[]), (60, &[])]);
}

#[test]
fn a_pending_fault_on_a_node_gpu_health_drained_pages_nothing_more() {
    // Drained until clean for an Xid 31; then a DBE whose graver drain
    // slurmctld refuses: pending (slurm-failed) on a node that is out.
    let node = Node::new("h100x8-healthy", &["n1"], "");
    std::fs::write(node.sim.path("kernel.log"), XID31).unwrap();
    let out = node.health_check();
    assert!(node.cluster.reason("n1").is_some(), "{out}");
    node.sim.set_scenario("h100x8-dbe");
    node.cluster.set_mode(ClusterMode::UpdatesFail);
    let out = node.health_check();
    let text = std::fs::read_to_string(node.sim.path("gpu-health.prom")).unwrap();
    assert!(
        text.contains("gpu_health_pending_faults{cause=\"slurm-failed\"} 1")
            && text.contains("gpu_health_node_drained{kind=\"drain-until-clean\"} 1"),
        "{out}\n{text}"
    );
    let until_clean = r#"kind="drain-until-clean",severity="warning""#;
    alerts(
        &node,
        true,
        &[
            (11, &[]),
            (46, &[("GpuHealthNodeDrainedUntilClean", until_clean)]),
        ],
    );
}

#[test]
fn a_configuration_error_warns_after_ten_minutes() {
    let node = Node::new("h100x8-healthy", &["n1"], "[dcgm]\nlevle = 2\n");
    let out = node.health_check();
    assert!(out.contains("configuration error:"), "{out}");
    alerts(
        &node,
        true,
        &[
            (9, &[]),
            (
                11,
                &[("GpuHealthConfigurationError", r#"severity="warning""#)],
            ),
        ],
    );
}
