//! The acceptance tier after a reboot (`[acceptance] after_reboot`,
//! issue 26) through the real binary as the health check, a stand-in
//! scontrol and stand-in gate programs that print recorded outputs: the
//! reboot is asked without `nextstate=RESUME` (Slurm keeps the node
//! drained), the first health check of the new boot runs the gates, and
//! the node returns (every gate passed) or stays drained with the failed
//! gate's figure and threshold in its reason.

mod common;

use common::{acceptance_fixture as fixture, script, Node};
use gpu_health_testkit::FakeCluster;

/// A node with a fake cluster whose scontrol writes `reboot` down; the
/// gates print `nccl` (an nccl-tests fixture) and a good nvbandwidth
/// table; each gate run is noted in `gates.log`.
fn node(nccl: &str, acceptance: bool) -> (Node, FakeCluster) {
    let n = Node::new("h100x8-healthy");
    let c = FakeCluster::new(&n.path("cluster"), &["n1", "n2", "n3", "n4"]);
    let wrapper = script(
        &n,
        "scontrol",
        &format!(
            "if [ \"$1\" = reboot ]; then echo \"$*\" >> {:?}; exit 0; fi\nexec {:?} \"$@\"",
            n.path("cluster/calls"),
            c.scontrol()
        ),
    );
    let log = n.path("gates.log");
    let all_reduce = script(
        &n,
        "all_reduce_perf",
        &format!("echo all_reduce_perf >> {log:?}\ncat {:?}", fixture(nccl)),
    );
    let nvbandwidth = script(
        &n,
        "nvbandwidth",
        &format!(
            "echo nvbandwidth >> {log:?}\ncat {:?}",
            fixture("nvbandwidth/h2d-h100x8-good.txt")
        ),
    );
    boot(&n, "boot-1");
    let tier = if acceptance {
        format!(
            "[acceptance]\nenabled = true\ngates = [\"all-reduce\", \"host-to-device\"]\n\
             all_reduce_perf = {all_reduce:?}\nnvbandwidth = {nvbandwidth:?}\n"
        )
    } else {
        String::new()
    };
    n.write_dropin(&format!(
        "scontrol = {wrapper:?}\n[xid]\nsyslog_may_drain = true\nboot_id_path = {:?}\n\
         [brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\nmax_drained_fraction = 1.0\n\
         [remediation]\nreboot = true\n[recovery]\nquiet_time_s = 1\n{tier}",
        n.path("boot_id")
    ));
    (n, c)
}

fn boot(n: &Node, id: &str) {
    std::fs::write(n.path("boot_id"), format!("{id}\n")).unwrap();
}

fn xid79(n: &Node) {
    xid(n, "79, pid=4000, name=python3, GPU has fallen off the bus.");
}

/// The kernel log holds one Xid record of a second ago (`rest`: from
/// the code on).
fn xid(n: &Node, rest: &str) {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = gpu_health_core::time::format_utc_ms(now_ms - 1_000);
    let line = format!("{at} n1 kernel: NVRM: Xid (PCI:0000:5d:00): {rest}\n");
    std::fs::write(n.path("kernel.log"), line).unwrap();
}

fn health_check(n: &Node) -> common::Run {
    let mut cmd = n.command("1", "");
    cmd.env_remove("SLURM_JOB_ID").env_remove("SLURM_JOB_GPUS");
    n.run(cmd)
}

fn reboots(c: &FakeCluster) -> Vec<String> {
    c.calls()
        .into_iter()
        .filter(|l| l.starts_with("reboot"))
        .collect()
}

fn gate_runs(n: &Node) -> usize {
    std::fs::read_to_string(n.path("gates.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Xid 79, the reboot asked; then the node back as a new boot, still
/// drained (Slurm keeps an ASAP reboot's drain without nextstate), and
/// its kernel log empty.
fn rebooted(n: &Node, c: &FakeCluster) -> String {
    xid79(n);
    let r = health_check(n);
    let reason = c.reason("n1").unwrap_or_default();
    assert!(reason.ends_with(" (reboot)"), "{reason}\n{}", r.log);
    assert_eq!(
        reboots(c),
        [format!("reboot reason={reason} n1")],
        "neither ASAP nor nextstate: Slurm keeps the node drained\n{}",
        r.log
    );
    assert_eq!(gate_runs(n), 0, "no gate before the reboot");
    boot(n, "boot-2");
    std::fs::write(n.path("kernel.log"), "").unwrap();
    reason
}

#[test]
fn the_gates_pass_after_the_reboot_and_the_node_returns() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    rebooted(&n, &c);
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "{}", r.log);
    assert_eq!(c.reason("n1"), None, "returned\n{}", r.log);
    assert!(r.log.contains("passed the acceptance tier"), "{}", r.log);
    // Proven and returned: the next health check runs nothing.
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "{}", r.log);
    assert_eq!(reboots(&c).len(), 1);
}

#[test]
fn a_slow_all_reduce_keeps_the_node_drained_with_its_figure() {
    let (n, c) = node("nccl/h100x8-slow.txt", true);
    rebooted(&n, &c);
    let r = health_check(&n);
    let reason = c.reason("n1").unwrap_or_default();
    assert_eq!(
        reason,
        "gpu-health: acceptance failed: all-reduce 313.0 GB/s < 460 GB/s (H100 SXM) (drain)",
        "{}",
        r.log
    );
    // Drained for a person: no other tier, no other reboot.
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "{}", r.log);
    assert_eq!(reboots(&c).len(), 1);
    assert!(c.reason("n1").is_some());
}

#[test]
fn a_missing_gate_program_keeps_the_node_drained() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    std::fs::remove_file(n.path("all_reduce_perf")).unwrap();
    rebooted(&n, &c);
    let r = health_check(&n);
    let reason = c.reason("n1").unwrap_or_default();
    assert!(
        reason.starts_with("gpu-health: acceptance failed: all-reduce not judged: ")
            && reason.contains("all_reduce_perf not found"),
        "{reason}\n{}",
        r.log
    );
}

#[test]
fn without_the_tier_the_reboot_returns_the_node_as_before() {
    let (n, c) = node("nccl/h100x8-good.txt", false);
    xid79(&n);
    health_check(&n);
    let reason = c.reason("n1").unwrap_or_default();
    assert_eq!(
        reboots(&c),
        [format!("reboot ASAP nextstate=RESUME reason={reason} n1")]
    );
}

#[test]
fn a_drain_until_clean_fault_after_the_reboot_returns_only_through_the_gates() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    rebooted(&n, &c);
    // The first run of the new boot finds an Xid 43 (drain-until-clean).
    xid(&n, "43, pid=4100, name=python3, Ch 00000010");
    let r = health_check(&n);
    let reason = c.reason("n1").unwrap_or_default();
    assert!(
        reason.ends_with("(drain-until-clean)"),
        "{reason}\n{}",
        r.log
    );
    assert_eq!(gate_runs(&n), 0, "no tier while a fault is open\n{}", r.log);
    // Clean and quiet past its quiet time: the tier, not the quiet time,
    // returns the node.
    std::thread::sleep(std::time::Duration::from_millis(2_100));
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "the gates ran\n{}", r.log);
    assert_eq!(c.reason("n1"), None, "returned\n{}", r.log);
    assert!(r.log.contains("passed the acceptance tier"), "{}", r.log);
    assert_eq!(reboots(&c).len(), 1);
}

#[test]
fn a_configuration_that_does_not_load_runs_no_tier() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    rebooted(&n, &c);
    let dropin = n.path("gpu-health.d/n1.toml");
    let good = std::fs::read_to_string(&dropin).unwrap();
    std::fs::write(&dropin, format!("{good}\nnvml_deadline_ms = = 3\n")).unwrap();
    let r = health_check(&n);
    assert!(
        r.log
            .contains("the acceptance tier waits for a configuration that loads"),
        "{}",
        r.log
    );
    assert_eq!(gate_runs(&n), 0, "{}", r.log);
    assert!(c.reason("n1").is_some(), "still drained\n{}", r.log);
    // Fixed: the next health check proves and returns it.
    std::fs::write(&dropin, good).unwrap();
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "{}", r.log);
    assert_eq!(c.reason("n1"), None, "returned\n{}", r.log);
}

#[test]
fn a_tier_longer_than_a_health_check_goes_on_in_the_next_one() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    // With 20 s for Slurm, the health check's 60 s less the 23 s kept for
    // the end of the run (NVML's 1.5 s deadline, scontrol's 20 s, 1 s)
    // leave 37 s: after an all-reduce of 3 s that is less than the
    // nvbandwidth gate's own 35 s limit (its 40 s are cut to 35 after a
    // boot, with a note).
    let all_reduce = n.path("all_reduce_perf");
    let body = std::fs::read_to_string(&all_reduce).unwrap();
    std::fs::write(&all_reduce, body.replacen("\n", "\nsleep 3\n", 1)).unwrap();
    let dropin = n.path("gpu-health.d/n1.toml");
    let text = std::fs::read_to_string(&dropin).unwrap();
    std::fs::write(
        &dropin,
        format!(
            "scontrol_timeout_ms = 20000\n{text}all_reduce_timeout_s = 35\nnvbandwidth_timeout_s = 40\n"
        ),
    )
    .unwrap();
    rebooted(&n, &c);
    let r = health_check(&n);
    assert!(
        r.log
            .contains("1 step(s) passed, 1 left for the next health check (host-to-device)"),
        "{}",
        r.log
    );
    assert!(c.reason("n1").is_some(), "not yet returned\n{}", r.log);
    assert!(
        r.log
            .contains("acceptance.nvbandwidth_timeout_s = 40 is cut to 35 s"),
        "{}",
        r.log
    );
    let r = health_check(&n);
    assert_eq!(c.reason("n1"), None, "returned\n{}", r.log);
    let runs = std::fs::read_to_string(n.path("gates.log")).unwrap();
    assert_eq!(runs, "all_reduce_perf\nnvbandwidth\n", "each gate once");
}

#[test]
fn turning_the_tier_off_returns_a_node_that_waits_for_it() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    rebooted(&n, &c);
    let dropin = n.path("gpu-health.d/n1.toml");
    let text = std::fs::read_to_string(&dropin).unwrap();
    std::fs::write(&dropin, text.replace("enabled = true", "enabled = false")).unwrap();
    let r = health_check(&n);
    assert!(r.log.contains("no longer configured"), "{}", r.log);
    assert_eq!(gate_runs(&n), 0, "{}", r.log);
    assert_eq!(c.reason("n1"), None, "returned\n{}", r.log);
}

#[test]
fn one_tier_at_a_time() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    rebooted(&n, &c);
    // Another run's tier holds the lock.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(n.path("state/tier.lock"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let r = health_check(&n);
    drop(lock);
    assert!(
        r.log.contains("another acceptance tier is under way"),
        "{}",
        r.log
    );
    assert_eq!(gate_runs(&n), 0, "{}", r.log);
    let r = health_check(&n);
    assert_eq!(
        c.reason("n1"),
        None,
        "returned once the lock is free\n{}",
        r.log
    );
}
