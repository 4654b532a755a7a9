//! The node's fault ledger, against the real prolog binary and a
//! stand-in slurmctld that keeps State, Reason and Comment for a 4-node
//! partition (`gpu_health_testkit::FakeCluster`). Each test is one way a
//! fault used to be lost, softened or shown to the wrong user (issue "One
//! ledger of a node's faults"); the assertions are on what Slurm was asked
//! to do and what jobs were told, so they also run against older builds:
//! `GPU_HEALTH_TEST_BIN_DIR=<dir of an old build> cargo test --test ledger`.

mod common;

use std::time::{Duration, Instant};

use common::Node;
use gpu_health_testkit::{ClusterMode, FakeCluster};

/// GPU3 of the simulated H100 node is 0000:5d:00.0, GPU0 0000:18:00.0,
/// GPU1 0000:2a:00.0.
fn xid_line(t: u32, pci: &str, code: u32, pid: u32, name: &str, text: &str) -> String {
    format!("[ {t}.100000] NVRM: Xid (PCI:{pci}): {code}, pid={pid}, name={name}, {text}\n")
}

const XID79_REASON: &str = "gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)";
const OTHER_NODES_DRAIN: &str = "gpu-health: Xid 48 GPU0 0000:18:00.0 (drain)";

/// A node `n1` of a 4-node partition, brake on with short waits; `extra`
/// drop-in keys.
fn cluster_node(scenario: &str, drained: &[&str], extra: &str) -> (Node, FakeCluster) {
    let n = Node::new(scenario);
    let c = FakeCluster::new(&n.path("cluster"), &["n1", "n2", "n3", "n4"]);
    for d in drained {
        c.drain(d, OTHER_NODES_DRAIN);
    }
    set_dropin(&n, &c, extra);
    (n, c)
}

fn set_dropin(n: &Node, c: &FakeCluster, extra: &str) {
    n.write_dropin(&format!(
        "scontrol = {:?}\n{extra}\n[brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\n",
        c.scontrol()
    ));
}

fn append(n: &Node, line: &str) {
    use std::io::Write;
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
fn a_fault_held_back_survives_a_config_error_run() {
    for slurm_down in [false, true] {
        // n2 is drained by gpu-health: the brake allows one of four.
        let (n, c) = cluster_node("h100x8-healthy", &["n2"], "");
        assert_eq!(n.prolog("1", "0").code, 0);
        append(
            &n,
            &xid_line(
                9000,
                "0000:5d:00",
                79,
                2210,
                "python3",
                "GPU has fallen off the bus.",
            ),
        );
        if slurm_down {
            c.resume("n2");
            c.set_mode(ClusterMode::Fails);
        }
        let r = n.prolog("2", "0");
        assert_eq!(c.reason("n1"), None, "{}", r.log);
        // A typo in the node's drop-in: no run may drain meanwhile.
        set_dropin(&n, &c, "nvml_deadine_ms = 5");
        let r = n.prolog("3", "0");
        assert!(r.log.contains("configuration error"), "{}", r.log);
        assert_eq!(c.reason("n1"), None);
        // Fixed; then the brake has room (or slurmctld is back).
        set_dropin(&n, &c, "");
        c.set_mode(ClusterMode::Works);
        c.resume("n2");
        let r = n.prolog("4", "0");
        assert_eq!(r.code, 1, "slurm_down={slurm_down}: {}", r.log);
        assert_eq!(
            c.reason("n1").as_deref(),
            Some(XID79_REASON),
            "slurm_down={slurm_down}: {}",
            r.log
        );
    }
}

#[test]
fn a_milder_fault_never_softens_a_drain_nor_returns_the_node() {
    let (n, c) = cluster_node("h100x8-healthy", &[], "[recovery]\nquiet_time_s = 1");
    assert_eq!(health_check(&n).code, 0);
    append(
        &n,
        &xid_line(
            9000,
            "0000:18:00",
            48,
            7,
            "train",
            "An uncorrectable double bit error",
        ),
    );
    let r = health_check(&n);
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(c.reason("n1").unwrap().ends_with("(drain)"));
    // A job still running on GPU1 hits an application fault.
    append(
        &n,
        &xid_line(9100, "0000:2a:00", 31, 8, "python3", "MMU Fault"),
    );
    let r = health_check(&n);
    let reason = c.reason("n1").unwrap();
    assert!(
        reason.contains("Xid 48 GPU0")
            && reason.contains("Xid 31 GPU1")
            && reason.ends_with("(drain)"),
        "{reason}\n{}",
        r.log
    );
    // Clean and quiet: a node with an open (drain) fault stays drained.
    std::thread::sleep(Duration::from_millis(1500));
    let r = health_check(&n);
    assert!(c.reason("n1").is_some(), "returned with a DBE: {}", r.log);
    assert!(r.log.contains("gpu-health resume"), "{}", r.log);
}

#[test]
fn jobs_with_new_pids_add_nothing_while_a_drain_is_held_back() {
    let (n, c) = cluster_node("h100x8-healthy", &["n2"], "");
    assert_eq!(n.prolog("1", "0").code, 0);
    append(
        &n,
        &xid_line(
            9000,
            "0000:5d:00",
            79,
            2210,
            "python3",
            "GPU has fallen off the bus.",
        ),
    );
    for job in 0..30u32 {
        append(
            &n,
            &xid_line(
                9100 + job,
                "0000:2a:00",
                31,
                4000 + job,
                "python3",
                "MMU Fault",
            ),
        );
        let r = n.prolog(&format!("{}", 100 + job), "1");
        assert_eq!(r.code, 0, "held back, warned: {}", r.log);
    }
    let v = n.verdict("129");
    let findings = v["findings"].as_array().unwrap();
    assert!(
        findings.len() <= 4,
        "one line per fault, not per job: {} findings: {v}",
        findings.len()
    );
    // The brake frees: the node drains for both, as the gravest says.
    c.resume("n2");
    let r = n.prolog("200", "1");
    assert_eq!(r.code, 1, "{}", r.log);
    let reason = c.reason("n1").unwrap();
    assert!(
        reason.contains("Xid 79 GPU3") && reason.ends_with("(drain)"),
        "{reason}"
    );
}

#[test]
fn the_next_user_never_sees_another_jobs_pid_or_program() {
    let (n, _c) = cluster_node("h100x8-healthy", &["n2"], "");
    assert_eq!(n.prolog("1", "3").code, 0);
    append(
        &n,
        &xid_line(
            9000,
            "0000:5d:00",
            79,
            2210,
            "secretproc",
            "GPU has fallen off the bus.",
        ),
    );
    for job in ["2", "3"] {
        let r = n.prolog(job, "3");
        assert_eq!(r.code, 0, "held back: {}", r.log);
        let v = n.verdict(job).to_string();
        assert!(v.contains("Xid 79"), "{v}");
        assert!(
            !v.contains("2210") && !v.contains("secretproc"),
            "job {job} sees another job's process: {v}"
        );
    }
}

#[test]
fn concurrent_prologs_drain_once_and_start_no_job() {
    let (n, c) = cluster_node("h100x8-healthy", &[], "");
    assert_eq!(n.prolog("1", "0").code, 0);
    append(
        &n,
        &xid_line(
            9000,
            "0000:5d:00",
            79,
            2210,
            "python3",
            "GPU has fallen off the bus.",
        ),
    );
    let children: Vec<_> = (0..8)
        .map(|i| n.command(&format!("3{i}"), &i.to_string()).spawn().unwrap())
        .collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|mut ch| ch.wait().unwrap().code().unwrap_or(-1))
        .collect();
    assert_eq!(codes, vec![1; 8], "no job starts on the faulty node");
    assert_eq!(c.reason("n1").as_deref(), Some(XID79_REASON));
    assert_eq!(c.drains(), 1, "{:?}", c.calls());
    // No claim left behind: the drain replaced it by its time stamp.
    let comment = c.comment("n1").unwrap_or_default();
    assert!(comment.starts_with("gpu-health-drained:"), "{comment}");
}

/// Issue 35, item 5: the same storm with a state directory the runs may
/// not use (writable by others; an NFS export with root_squash, owned by
/// another uid, is the same to them). There was no run lock then: the
/// eight prologs claimed at once, overwrote each other's claim, held back
/// and started their jobs on the faulty GPU. They take turns under the
/// lock in `run_lock_dir` now.
#[test]
fn concurrent_prologs_with_an_unusable_state_dir_still_take_turns() {
    use std::os::unix::fs::PermissionsExt;
    let (n, c) = cluster_node("h100x8-healthy", &[], "");
    std::fs::create_dir(n.path("state")).unwrap();
    std::fs::set_permissions(n.path("state"), std::fs::Permissions::from_mode(0o777)).unwrap();
    append(
        &n,
        &xid_line(
            9000,
            "0000:5d:00",
            79,
            2210,
            "python3",
            "GPU has fallen off the bus.",
        ),
    );
    let children: Vec<_> = (0..8)
        .map(|i| {
            let mut cmd = n.command(&format!("3{i}"), &i.to_string());
            cmd.stderr(std::process::Stdio::null());
            cmd.spawn().unwrap()
        })
        .collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|mut ch| ch.wait().unwrap().code().unwrap_or(-1))
        .collect();
    assert_eq!(codes, vec![1; 8], "no job starts on the faulty node");
    assert_eq!(c.reason("n1").as_deref(), Some(XID79_REASON));
    assert_eq!(c.drains(), 1, "{:?}", c.calls());
    let comment = c.comment("n1").unwrap_or_default();
    assert!(comment.starts_with("gpu-health-drained:"), "{comment}");
    assert!(n.path("run/run.lock").is_file(), "the lock outside it");
}

#[test]
fn a_hundred_concurrent_health_checks_drain() {
    let (n, c) = cluster_node("h100x8-healthy", &[], "scontrol_timeout_ms = 20000");
    assert_eq!(health_check(&n).code, 0);
    append(
        &n,
        &xid_line(
            9000,
            "0000:5d:00",
            79,
            2210,
            "python3",
            "GPU has fallen off the bus.",
        ),
    );
    let children: Vec<_> = (0..100)
        .map(|_| {
            let mut cmd = n.command("1", "");
            cmd.env_remove("SLURM_JOB_ID").env_remove("SLURM_JOB_GPUS");
            cmd.stderr(std::process::Stdio::null());
            cmd.spawn().unwrap()
        })
        .collect();
    for mut ch in children {
        ch.wait().unwrap();
    }
    assert_eq!(c.reason("n1").as_deref(), Some(XID79_REASON));
    assert_eq!(c.drains(), 1);
    let comment = c.comment("n1").unwrap_or_default();
    assert!(comment.starts_with("gpu-health-drained:"), "{comment}");
}

#[test]
fn a_claim_slurm_refuses_keeps_the_job_off() {
    let (n, c) = cluster_node("h100x8-dbe", &[], "");
    c.set_mode(ClusterMode::UpdatesFail);
    let r = n.prolog("5", "3");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(r.log.contains("cannot claim a drain"), "{}", r.log);
    // Slurm takes updates again: the kept fault drains.
    c.set_mode(ClusterMode::Works);
    let r = n.prolog("6", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(c
        .reason("n1")
        .unwrap()
        .starts_with("gpu-health: ECC DBE GPU3"));
}

#[test]
fn a_drain_made_under_a_clock_a_year_ahead_still_returns() {
    let (n, c) = cluster_node("h100x8-healthy", &[], "[recovery]\nquiet_time_s = 1");
    assert_eq!(health_check(&n).code, 0);
    let reason = "gpu-health: Xid 31 GPU1 0000:2a:00.0 (drain-until-clean)";
    c.drain("n1", reason);
    let year_ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 365 * 86_400_000;
    // As the version before the ledger wrote it (the ledger folds it in).
    std::fs::write(
        n.path("state/drain.json"),
        format!(
            r#"{{"node":"n1","reason":"{reason}","kind":"drain-until-clean","at_ms":{year_ahead},"last_fault_ms":{year_ahead},"findings":["Xid 31 GPU1 0000:2a:00.0"]}}"#
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    loop {
        let r = health_check(&n);
        if c.reason("n1").is_none() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "never returned: {}",
            r.log
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn an_unreadable_ledger_is_set_aside_and_the_kernel_log_read_again() {
    let (n, c) = cluster_node("h100x8-healthy", &["n2"], "");
    assert_eq!(n.prolog("1", "0").code, 0);
    append(
        &n,
        &xid_line(
            9000,
            "0000:5d:00",
            79,
            2210,
            "python3",
            "GPU has fallen off the bus.",
        ),
    );
    assert_eq!(n.prolog("2", "0").code, 0, "held back by the brake");
    std::fs::write(n.path("state/ledger.json"), b"\x00\xff garbage").unwrap();
    c.resume("n2");
    let r = n.prolog("3", "0");
    assert!(r.log.contains("unreadable"), "{}", r.log);
    assert!(n.path("state/ledger.unreadable.json").is_file());
    assert_eq!(r.code, 1, "the Xid 79 is found again: {}", r.log);
    assert_eq!(c.reason("n1").as_deref(), Some(XID79_REASON));
}

/// Issue 35, item 6: n1 was drained by gpu-health through the brake and
/// returned by an admin; its Comment keeps that drain's stamp, which the
/// brake's window counts. A new fault the share holds back (n2 is
/// drained now) must neither erase the stamp with its claim nor blank it
/// with the withdrawal: before, the Comment ended empty and the window
/// forgot the drain, letting one node more drain than allowed.
#[test]
fn a_claim_keeps_the_nodes_own_drain_stamp_and_its_withdrawal_restores_it() {
    let (n, c) = cluster_node("h100x8-healthy", &[], "");
    assert_eq!(n.prolog("1", "0").code, 0);
    let fault = |t| {
        xid_line(
            t,
            "0000:5d:00",
            79,
            2210,
            "python3",
            "GPU has fallen off the bus.",
        )
    };
    append(&n, &fault(9000));
    let r = n.prolog("2", "3");
    assert_eq!(c.reason("n1").as_deref(), Some(XID79_REASON), "{}", r.log);
    let stamp = c.comment("n1").unwrap_or_default();
    assert!(stamp.starts_with("gpu-health-drained:"), "{stamp}");
    c.resume("n1");
    let r = n.prolog("3", "0");
    assert_eq!(r.code, 0, "returned by the admin: {}", r.log);
    c.drain("n2", OTHER_NODES_DRAIN);
    append(&n, &fault(9100));
    let r = n.prolog("4", "3");
    assert!(
        r.log.contains("drain brake: 1 of 4"),
        "held back: {}",
        r.log
    );
    assert_eq!(c.reason("n1"), None, "{}", r.log);
    assert_eq!(c.comment("n1"), Some(stamp.clone()), "{}", r.log);
    let claims: Vec<String> = c
        .calls()
        .into_iter()
        .filter(|l| l.contains("gpu-health-claim:"))
        .collect();
    assert_eq!(claims.len(), 2, "{claims:?}");
    assert!(
        claims[1].ends_with(&format!(",{stamp}")),
        "the claim keeps the stamp: {claims:?}"
    );
}
