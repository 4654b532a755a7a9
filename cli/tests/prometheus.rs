//! The node's health in the node_exporter textfile (issue 24: it held
//! power and per-job figures, no verdict, no finding, no drain state, no
//! time of the last check), every textfile checked with `promtool check
//! metrics`, and the shipped alerting rules with `promtool test rules`.

use std::path::Path;
use std::process::Command;

use gpu_health_testkit::{output, promtool_check_metrics, FakeCluster, SimNode};

/// A node of `scenario` on a stand-in cluster of `nodes` (n1 first),
/// with a textfile and a kernel log of `kernel_log`.
struct Node {
    sim: SimNode,
    cluster: FakeCluster,
    config: std::path::PathBuf,
}

impl Node {
    fn new(scenario: &str, nodes: &[&str], extra: &str, dropin: &str) -> Node {
        let sim = SimNode::new(scenario);
        let cluster = FakeCluster::new(&sim.path("cluster"), nodes);
        let prom = sim.path("gpu-health.prom");
        let config = sim.write_config(&format!(
            "prometheus_textfile = \"{}\"\n{extra}",
            prom.display()
        ));
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
        }
    }

    fn health_check(&self) -> (i32, String) {
        let (code, out, err) = output(
            Command::new(gpu_health_testkit::program(env!(
                "CARGO_BIN_EXE_gpu-health"
            )))
            .arg("health-check")
            .env_clear()
            .env("GPU_HEALTH_CONFIG", &self.config)
            .env("SLURMD_NODENAME", "n1"),
        );
        (code, format!("{out}{err}"))
    }

    /// The textfile, checked by promtool.
    fn textfile(&self) -> String {
        let text = std::fs::read_to_string(self.sim.path("gpu-health.prom"))
            .expect("the textfile was written");
        promtool_check_metrics(&text);
        text
    }
}

fn has(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "no line {line:?} in\n{text}"
    );
}

const XID_LOG: &str =
    "[ 5.0] NVRM: Xid (PCI:0000:5d:00): 79, pid=2210, GPU has fallen off the bus.\n\
                       [ 6.0] NVRM: Xid (PCI:0000:18:00): 13, pid=2210, Graphics Exception\n";

#[test]
fn a_health_check_puts_the_nodes_health_in_the_textfile() {
    let node = Node::new("h100x8-dbe", &["n1"], "", "");
    std::fs::write(node.sim.path("kernel.log"), XID_LOG).unwrap();
    let (code, out) = node.health_check();
    assert_eq!(code, 1, "{out}");
    assert!(node.cluster.reason("n1").is_some(), "drained: {out}");
    let text = node.textfile();
    let gpu3 =
        "gpu=\"3\",uuid=\"GPU-55a85b78-b1d6-af86-91ce-a68fd48afdf8\",pci_bus_id=\"0000:5d:00.0\"";
    has(
        &text,
        &format!("gpu_health_gpu_verdict{{{gpu3},verdict=\"drain\"}} 1"),
    );
    has(
        &text,
        &format!("gpu_health_gpu_verdict{{{gpu3},verdict=\"ok\"}} 0"),
    );
    has(
        &text,
        &format!("gpu_health_gpu_findings{{{gpu3},check=\"ecc-uncorrected\",action=\"drain\"}} 1"),
    );
    has(&text, "gpu_health_node_verdict{verdict=\"drain\"} 1");
    has(
        &text,
        &format!(
            "gpu_health_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
    );
    has(&text, "gpu_health_node_drained{kind=\"drain\"} 1");
    has(
        &text,
        "gpu_health_node_drained{kind=\"drain-until-clean\"} 0",
    );
    has(&text, "gpu_health_brake_holding 0");
    has(&text, "gpu_health_configuration_error 0");
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"79\"} 1",
    );
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"13\"} 1",
    );
    assert!(
        text.contains("\ngpu_health_last_health_check_timestamp_seconds 1"),
        "{text}"
    );
    assert!(
        text.contains("\ngpu_health_node_drained_since_timestamp_seconds{kind=\"drain\"} 1"),
        "{text}"
    );
    // Power with the GPU's identity, rounded (the stand-in's 612 W).
    has(
        &text,
        "gpu_health_gpu_power_watts{gpu=\"0\",uuid=\"GPU-dbe696cc-cc39-ba1d-044b-2e164de35850\",pci_bus_id=\"0000:18:00.0\"} 612",
    );
    // The next check reads no new event: the counts stay.
    let _ = node.health_check();
    let text = node.textfile();
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"79\"} 1",
    );
}

/// Issue 35, item 8: a syslog file stamps its records to the second.
/// An Xid 79 in the same second as the Xid 13 before it, in the same
/// read or in the next, each count once: the count by position dropped
/// the 79 while the node was drained for it.
#[test]
fn xids_of_one_second_in_a_syslog_file_each_count() {
    let node = Node::new(
        "h100x8-healthy",
        &["n1"],
        "[xid]\nsyslog_may_drain = true\n",
        "[brake]\nenabled = false\n",
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // `2026-12-07T22:00:01Z`: no fraction of a second.
    let at = gpu_health_core::time::format_utc_ms(now_ms - 60_000);
    let at = format!("{}Z", &at[..at.len() - 5]);
    let line = |pci: &str, code: u32, text: &str| {
        format!("{at} n1 kernel: NVRM: Xid (PCI:{pci}): {code}, pid=2210, {text}\n")
    };
    let xid13 = line("0000:18:00", 13, "Graphics Exception");
    let xid79 = line("0000:5d:00", 79, "GPU has fallen off the bus.");
    std::fs::write(node.sim.path("kernel.log"), format!("{xid13}{xid79}")).unwrap();
    let (code, out) = node.health_check();
    assert_eq!(code, 1, "{out}");
    let reason = node.cluster.reason("n1").unwrap_or_default();
    assert!(reason.contains("Xid 79 GPU3"), "{reason}\n{out}");
    let text = node.textfile();
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"13\"} 1",
    );
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"79\"} 1",
    );
    // The next read (from the cursor after them): another of that second.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(node.sim.path("kernel.log"))
        .unwrap();
    std::io::Write::write_all(&mut f, xid79.as_bytes()).unwrap();
    let _ = node.health_check();
    let text = node.textfile();
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"79\"} 2",
    );
    // Nothing new: the counts stay.
    let _ = node.health_check();
    let text = node.textfile();
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"79\"} 2",
    );
    has(
        &text,
        "gpu_health_xid_events_total{kind=\"xid\",code=\"13\"} 1",
    );
}

#[test]
fn a_drain_the_brake_holds_back_is_pending_with_its_cause() {
    let node = Node::new("h100x8-dbe", &["n1", "n2"], "", "");
    node.cluster
        .drain("n2", "gpu-health: Xid 48 GPU0 0000:18:00.0 (drain)");
    let (code, out) = node.health_check();
    assert_eq!(code, 1, "{out}");
    assert_eq!(node.cluster.reason("n1"), None, "the brake held it: {out}");
    let text = node.textfile();
    has(&text, "gpu_health_brake_holding 1");
    has(&text, "gpu_health_pending_faults{cause=\"brake\"} 1");
    has(&text, "gpu_health_pending_faults{cause=\"slurm-failed\"} 0");
    has(&text, "gpu_health_node_drained{kind=\"drain\"} 0");
    assert!(
        text.contains("\ngpu_health_pending_since_timestamp_seconds{cause=\"brake\"} 1"),
        "{text}"
    );
    has(
        &text,
        "gpu_health_open_faults{check=\"ecc-uncorrected\",action=\"drain\",handling=\"pending\"} 1",
    );
}

#[test]
fn a_configuration_error_is_in_the_textfile() {
    // The drop-in is broken: the main file (and its textfile) is in force.
    let node = Node::new("h100x8-healthy", &["n1"], "", "[dcgm]\nlevle = 2\n");
    let (code, out) = node.health_check();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("configuration error:") && out.contains("in [dcgm]"),
        "{out}"
    );
    let text = node.textfile();
    has(&text, "gpu_health_configuration_error 1");
    has(&text, "gpu_health_node_verdict{verdict=\"ok\"} 1");
}

#[test]
fn the_alert_rules_pass_promtool() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/prometheus");
    for args in [
        &["check", "rules", "gpu-health.rules.yml"][..],
        &["test", "rules", "gpu-health.rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool (apt-get install prometheus; ./ci/test installs it)");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
