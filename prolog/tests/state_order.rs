//! Decide, act, then commit; one owner of the state directory. Each test
//! is one way a fault used to be lost or forged (issue "One owner for a
//! node's state and for the order of every run"), run against the real
//! prolog binary with a stand-in scontrol (the failure paths need a
//! slurmctld that fails on demand; the live-Slurm paths are in ci/e2e).
//!
//! The assertions are on what Slurm was asked to do (the stand-in's
//! drain state), so they also hold for older builds:
//! `GPU_HEALTH_TEST_BIN_DIR=<dir of an old build> cargo test --test state_order`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::Node;
use gpu_health_testkit::Scontrol;

const XID79: &str =
    "[ 9000.100000] NVRM: Xid (PCI:0000:5d:00): 79, pid=2210, GPU has fallen off the bus.\n";
const XID79_REASON: &str = "gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)";

/// A healthy node whose scontrol is `how`, brake off (one node: the test
/// is about the order of a run, not the brake), with `extra` drop-in keys.
fn node(how: Scontrol, extra: &str) -> Node {
    let n = Node::new("h100x8-healthy");
    set_scontrol(&n, how, extra);
    n
}

fn set_scontrol(n: &Node, how: Scontrol, extra: &str) {
    let s = n.scontrol(how);
    n.write_dropin(&format!(
        "scontrol = {s:?}\n{extra}[brake]\nenabled = false\n"
    ));
}

fn health_check(n: &Node) -> common::Run {
    let mut cmd = n.command("1", "");
    cmd.env_remove("SLURM_JOB_ID").env_remove("SLURM_JOB_GPUS");
    n.run(cmd)
}

#[test]
fn a_dropin_typo_keeps_a_fresh_xid_for_the_run_after_the_fix() {
    let n = node(Scontrol::Works, "");
    assert_eq!(n.prolog("1", "0").code, 0);
    std::fs::write(n.path("kernel.log"), XID79).unwrap();
    // The admin's typo: this run may not drain (configuration error).
    let s = n.scontrol(Scontrol::Works);
    n.write_dropin(&format!(
        "scontrol = {s:?}\nnvml_deadine_ms = 5\n[brake]\nenabled = false\n"
    ));
    let r = n.prolog("2", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(r.log.contains("configuration error"), "{}", r.log);
    assert_eq!(n.drained_reason(), None, "a config error never drains");
    // Fixed: the first run with a good configuration drains for it.
    set_scontrol(&n, Scontrol::Works, "");
    let r = n.prolog("3", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(n.drained_reason().as_deref(), Some(XID79_REASON));
}

#[test]
fn a_failing_or_hanging_scontrol_loses_nothing() {
    for how in [Scontrol::Fails, Scontrol::Hangs] {
        for health in [false, true] {
            let n = node(how, "");
            let run = |n: &Node| {
                if health {
                    health_check(n)
                } else {
                    n.prolog("5", "0")
                }
            };
            assert_eq!(run(&n).code, 0, "{how:?} health={health}");
            std::fs::write(n.path("kernel.log"), XID79).unwrap();
            let r = run(&n);
            assert_eq!(r.code, 1, "{how:?} health={health}: {}", r.log);
            assert!(
                r.elapsed < Duration::from_millis(1500 + 3000),
                "{how:?}: the run's Slurm budget bounds it: {:?}",
                r.elapsed
            );
            assert_eq!(n.drained_reason(), None);
            // slurmctld answers again: the next run drains for the Xid.
            set_scontrol(&n, Scontrol::Works, "");
            let r = run(&n);
            assert_eq!(r.code, 1, "{how:?} health={health}: {}", r.log);
            assert_eq!(
                n.drained_reason().as_deref(),
                Some(XID79_REASON),
                "{how:?} health={health}: {}",
                r.log
            );
            // Acted on: nothing is pending any more.
            let r = run(&n);
            assert!(
                !r.log.contains("pending since"),
                "{how:?} health={health}: {}",
                r.log
            );
        }
    }
}

#[test]
fn a_state_dir_others_can_write_is_not_read() {
    let n = node(Scontrol::Works, "");
    assert_eq!(n.prolog("1", "0").code, 0);
    // Someone else's findings, planted under both the old and new names.
    let planted = r#"{"since_ms":1,"last_ms":1,"why":"x","findings":[{"check":"xid","action":"drain","gpu":null,"pci":null,"summary":"planted by nobody","message":"m"}]}"#;
    let planted_new = r#"{"last_ms":1,"why":"x","findings":[{"finding":{"check":"xid","action":"drain","gpu":null,"pci":null,"summary":"planted by nobody","message":"m"},"cause":"brake","since_ms":1}]}"#;
    std::fs::write(n.path("state/held-back.json"), planted).unwrap();
    std::fs::write(n.path("state/pending-drain.json"), planted_new).unwrap();
    std::fs::set_permissions(n.path("state"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = n.prolog("2", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert_eq!(n.drained_reason(), None, "{}", r.log);
    assert!(r.log.contains("writable"), "said loudly: {}", r.log);
    assert!(
        n.path("state/pending-drain.json").exists(),
        "and not deleted"
    );
}

/// The brake on, as shipped: a state directory the run may not use (here
/// writable by others) must not stop the drain. Found by a review: the
/// claim could not be written down, so every run held back and jobs kept
/// starting on a GPU that had fallen off the bus.
#[test]
fn an_unusable_state_dir_does_not_stop_a_drain_with_the_brake_on() {
    let n = Node::new("h100x8-healthy");
    let c = gpu_health_testkit::FakeCluster::new(&n.path("cluster"), &["n1", "n2", "n3", "n4"]);
    n.write_dropin(&format!(
        "scontrol = {:?}\n[brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\n",
        c.scontrol()
    ));
    std::fs::create_dir(n.path("state")).unwrap();
    std::fs::set_permissions(n.path("state"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(n.path("kernel.log"), XID79).unwrap();
    let r = n.prolog("2", "0");
    assert_eq!(c.reason("n1").as_deref(), Some(XID79_REASON), "{}", r.log);
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(r.log.contains("cannot be written down"), "{}", r.log);
    // The runs after it know nothing of that drain (nothing is kept): they
    // look before claiming, so the drain's stamp in the Comment, which the
    // brake counts, stays (a blind claim replaced it, then its withdrawal
    // blanked it).
    let stamp = c.comment("n1");
    assert!(
        stamp
            .as_deref()
            .is_some_and(|s| s.contains("gpu-health-drained:")),
        "{stamp:?}"
    );
    for _ in 0..2 {
        let again = health_check(&n);
        assert_eq!(c.comment("n1"), stamp, "{}", again.log);
        assert_eq!(
            c.reason("n1").as_deref(),
            Some(XID79_REASON),
            "{}",
            again.log
        );
    }
}

#[test]
fn a_state_dir_owned_by_someone_else_cannot_hide_an_xid() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return; // only root can give a directory away
    }
    let n = node(Scontrol::Works, "");
    std::fs::write(n.path("kernel.log"), XID79).unwrap();
    // A cursor at the end of the log, planted by nobody in a directory
    // nobody owns: it would make the Xid look handled.
    std::fs::create_dir(n.path("state")).unwrap();
    let len = std::fs::metadata(n.path("kernel.log")).unwrap().len();
    let md = std::fs::metadata(n.path("kernel.log")).unwrap();
    use std::os::unix::fs::MetadataExt;
    let cursor = format!(
        r#"{{"version":1,"cursor":{{"source":"file","dev":{},"ino":{},"offset":{len},"tail_len":0,"tail_hash":14695981039346656037}},"history":{{}}}}"#,
        md.dev(),
        md.ino()
    );
    for name in ["kernel-log-cursor.json", "xid-cursor.json"] {
        std::fs::write(n.path(&format!("state/{name}")), &cursor).unwrap();
        std::os::unix::fs::chown(n.path(&format!("state/{name}")), Some(65534), None).unwrap();
    }
    std::os::unix::fs::chown(n.path("state"), Some(65534), None).unwrap();
    let r = n.prolog("2", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(n.drained_reason().as_deref(), Some(XID79_REASON));
    assert!(r.log.contains("owned by uid 65534"), "{}", r.log);
}

#[test]
fn the_draining_prolog_is_bounded_by_the_deadline_and_the_slurm_budget() {
    // Defaults (brake on, scontrol_timeout_ms 2500) and a scontrol that
    // never answers: NVML deadline (1.5 s here) + 3 s at most.
    let n = Node::new("h100x8-dbe");
    let s = n.scontrol(Scontrol::Hangs);
    n.write_dropin(&format!("scontrol = {s:?}\n"));
    let r = n.prolog("9", "3");
    assert_eq!(
        r.code, 1,
        "not drained (fail safe), and no job starts on a DBE merely because Slurm hangs: {}",
        r.log
    );
    assert!(
        r.elapsed < Duration::from_millis(1500 + 3000),
        "{:?}",
        r.elapsed
    );
    // And an NVML that hangs as well: the deadline, then the same budget.
    n.set_scenario("nvml-hang");
    let r = n.prolog("10", "3");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(
        r.elapsed < Duration::from_millis(1500 + 3000),
        "{:?}",
        r.elapsed
    );
}
