//! Escalation by repetition through the real prolog binary and the fault
//! ledger: Xid 31 three times on one GPU is kept for an admin, the same
//! code on three GPUs returns by itself once the node checks clean.

mod common;

use std::time::Duration;

use common::Node;
use gpu_health_testkit::FakeCluster;

fn node() -> (Node, FakeCluster) {
    let n = Node::new("h100x8-healthy");
    let c = FakeCluster::new(&n.path("cluster"), &["n1", "n2", "n3", "n4"]);
    n.write_dropin(&format!(
        "scontrol = {:?}\n[recovery]\nquiet_time_s = 1\n\
         [xid]\nsyslog_may_drain = true\n[brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\n",
        c.scontrol()
    ));
    (n, c)
}

/// Xid 31 `mins_ago` minutes ago on `pci` (GPU0 0000:18:00, GPU1
/// 0000:2a:00, GPU3 0000:5d:00), as syslog writes it (with a wall-clock
/// time: bursts are told apart by it).
fn xid31(n: &Node, mins_ago: u64, pci: &str) {
    use std::io::Write;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = gpu_health_core::time::format_utc_ms(now_ms - mins_ago * 60_000);
    let line = format!(
        "{at} n1 kernel: NVRM: Xid (PCI:{pci}): 31, pid=4000, name=python3, Ch 00000008, MMU Fault\n"
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(n.path("kernel.log"))
        .unwrap();
    f.write_all(line.as_bytes()).unwrap();
}

fn health_check(n: &Node) -> common::Run {
    let mut cmd = n.command("1", "");
    cmd.env_remove("SLURM_JOB_ID").env_remove("SLURM_JOB_GPUS");
    n.run(cmd)
}

#[test]
fn xid_31_three_times_on_one_gpu_is_kept_for_an_admin() {
    let (n, c) = node();
    assert_eq!(health_check(&n).code, 0);
    for (i, t) in [30, 20, 10].into_iter().enumerate() {
        xid31(&n, t, "0000:18:00");
        let r = health_check(&n);
        let reason = c.reason("n1").unwrap_or_default();
        let want = if i < 2 {
            "(drain-until-clean)"
        } else {
            "(drain)"
        };
        assert!(
            reason.starts_with("gpu-health: Xid 31 GPU0") && reason.ends_with(want),
            "run {i}: {reason}\n{}",
            r.log
        );
        if i == 2 {
            assert!(r.log.contains("escalated to drain"), "{}", r.log);
        }
        // A job lets the admin return the node in between: each burst is
        // its own drain.
        if i < 2 {
            c.resume("n1");
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let r = health_check(&n);
    assert!(c.reason("n1").is_some(), "returned: {}", r.log);
}

#[test]
fn xid_31_on_three_gpus_returns_by_itself() {
    let (n, c) = node();
    assert_eq!(health_check(&n).code, 0);
    for (t, pci) in [(30, "0000:18:00"), (20, "0000:2a:00"), (10, "0000:5d:00")] {
        xid31(&n, t, pci);
        let r = health_check(&n);
        let reason = c.reason("n1").unwrap_or_default();
        assert!(
            reason.ends_with("(drain-until-clean)"),
            "{reason}\n{}",
            r.log
        );
    }
    std::thread::sleep(Duration::from_millis(1500));
    let r = health_check(&n);
    assert_eq!(c.reason("n1"), None, "{}", r.log);
}
