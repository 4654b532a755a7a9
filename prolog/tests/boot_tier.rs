//! The acceptance tier after any boot (`[acceptance] after_any_boot`,
//! issue 26) through the real binary as the health check, a stand-in
//! scontrol and stand-in gate programs that print recorded outputs: the
//! first boot gpu-health sees is only written down; a boot it did not ask
//! for (a crash, an admin's reboot) drains the node until the tier passed
//! on it; the next health check runs the gates and returns the node, or
//! keeps it drained with the failed gate's figure and threshold.

mod common;

use common::{acceptance_fixture as fixture, script, Node};
use gpu_health_testkit::FakeCluster;

const DUE: &str = "gpu-health: acceptance due after a boot (drain)";

/// A healthy node in a fake cluster, the tier on with `after_any_boot`
/// as given; the gates print `nccl` (an nccl-tests fixture) and a good
/// nvbandwidth table; each gate run is noted in `gates.log`. Booted as
/// `boot-1`.
fn node(nccl: &str, any_boot: bool) -> (Node, FakeCluster) {
    let n = Node::new("h100x8-healthy");
    let c = FakeCluster::new(&n.path("cluster"), &["n1", "n2", "n3", "n4"]);
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
    n.write_dropin(&format!(
        "scontrol = {:?}\n[xid]\nboot_id_path = {:?}\n\
         [brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\nmax_drained_fraction = 1.0\n\
         [acceptance]\nenabled = true\nafter_any_boot = {any_boot}\n\
         gates = [\"all-reduce\", \"host-to-device\"]\n\
         all_reduce_perf = {all_reduce:?}\nnvbandwidth = {nvbandwidth:?}\n",
        c.scontrol(),
        n.path("boot_id")
    ));
    (n, c)
}

fn boot(n: &Node, id: &str) {
    std::fs::write(n.path("boot_id"), format!("{id}\n")).unwrap();
}

fn health_check(n: &Node) -> common::Run {
    let mut cmd = n.command("1", "");
    cmd.env_remove("SLURM_JOB_ID").env_remove("SLURM_JOB_GPUS");
    n.run(cmd)
}

fn gate_runs(n: &Node) -> usize {
    std::fs::read_to_string(n.path("gates.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Seen in boot-1 (only written down), then the first health check of
/// boot-2, which gpu-health did not ask for: drained for the tier, no
/// gate run yet.
fn booted_again(n: &Node, c: &FakeCluster) {
    let r = health_check(n);
    assert_eq!(
        c.reason("n1"),
        None,
        "the first boot drains nothing\n{}",
        r.log
    );
    assert_eq!(c.drains(), 0, "{}", r.log);
    assert!(n.path("state/ledger.json").exists(), "the boot is kept");
    let r = health_check(n);
    assert_eq!(c.reason("n1"), None, "the same boot: nothing\n{}", r.log);
    boot(n, "boot-2");
    let r = health_check(n);
    assert_eq!(c.reason("n1").as_deref(), Some(DUE), "{}", r.log);
    assert_eq!(gate_runs(n), 0, "not in the run that drained\n{}", r.log);
}

#[test]
fn a_boot_not_asked_for_is_proven_and_the_node_returns() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    booted_again(&n, &c);
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "{}", r.log);
    assert_eq!(c.reason("n1"), None, "returned\n{}", r.log);
    assert!(r.log.contains("passed the acceptance tier"), "{}", r.log);
    // Proven in this boot: the next health check runs nothing.
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "{}", r.log);
    assert_eq!(c.reason("n1"), None, "{}", r.log);
}

#[test]
fn a_slow_all_reduce_after_a_boot_keeps_the_node_drained_with_its_figure() {
    let (n, c) = node("nccl/h100x8-slow.txt", true);
    booted_again(&n, &c);
    let r = health_check(&n);
    assert_eq!(
        c.reason("n1").unwrap_or_default(),
        "gpu-health: acceptance failed: all-reduce 313.0 GB/s < 460 GB/s (H100 SXM) (drain)",
        "{}",
        r.log
    );
    // Drained for a person: no other tier.
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 2, "{}", r.log);
    assert!(c.reason("n1").is_some());
}

#[test]
fn without_after_any_boot_a_new_boot_drains_nothing() {
    let (n, c) = node("nccl/h100x8-good.txt", false);
    health_check(&n);
    boot(&n, "boot-2");
    let r = health_check(&n);
    assert_eq!(c.reason("n1"), None, "{}", r.log);
    assert_eq!(c.drains(), 0, "{}", r.log);
    assert_eq!(gate_runs(&n), 0);
    assert!(!r.log.contains("booted without"), "{}", r.log);
    // No boot kept: a healthy node keeps no ledger, as before the key.
    assert!(!n.path("state/ledger.json").exists(), "{}", r.log);
}

#[test]
fn someone_who_resumes_the_node_before_the_tier_ends_the_proof() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    booted_again(&n, &c);
    c.resume("n1");
    let r = health_check(&n);
    assert_eq!(gate_runs(&n), 0, "{}", r.log);
    assert_eq!(c.reason("n1"), None, "left in service\n{}", r.log);
}

#[test]
fn a_job_whose_prolog_is_the_first_run_of_the_boot_stays_off_the_node() {
    let (n, c) = node("nccl/h100x8-good.txt", true);
    let r = n.run(n.command("7", "0,1"));
    assert_eq!(r.code, 0, "the first boot seen: the job runs\n{}", r.log);
    boot(&n, "boot-2");
    let r = n.run(n.command("8", "0,1"));
    assert_eq!(r.code, 1, "requeued by Slurm\n{}", r.log);
    assert_eq!(c.reason("n1").as_deref(), Some(DUE), "{}", r.log);
    assert_eq!(gate_runs(&n), 0, "never on a job's start path");
}

/// Issue 35, item 10: a boot id file any user can write is not read.
/// Before, a user who wrote a new id into it drained a healthy node with
/// `after_any_boot` (and could have made a pending reboot look taken).
#[test]
fn a_boot_id_users_can_write_is_not_read_and_drains_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let (n, c) = node("nccl/h100x8-good.txt", true);
    let r = health_check(&n);
    assert_eq!(c.reason("n1"), None, "{}", r.log);
    std::fs::set_permissions(n.path("boot_id"), std::fs::Permissions::from_mode(0o666)).unwrap();
    boot(&n, "written-by-a-user");
    let r = health_check(&n);
    assert_eq!(
        c.reason("n1"),
        None,
        "a user's boot id drains nothing\n{}",
        r.log
    );
    assert_eq!(c.drains(), 0, "{}", r.log);
    assert!(
        r.log.contains("can be written by every user (mode o+w)"),
        "said loudly: {}",
        r.log
    );
    // Root's file again, same boot as first seen: still nothing.
    std::fs::set_permissions(n.path("boot_id"), std::fs::Permissions::from_mode(0o644)).unwrap();
    boot(&n, "boot-1");
    let r = health_check(&n);
    assert_eq!(c.reason("n1"), None, "{}", r.log);
}
