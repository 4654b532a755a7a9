//! Reboots through Slurm (`[remediation]`, issue 26) through the real
//! prolog binary and a stand-in scontrol: an Xid 79 drains the node and
//! asks Slurm for `scontrol reboot ASAP nextstate=RESUME`; the same fault
//! back after two reboots stays drained for hardware inspection; with
//! `reboot = false` (the default) the drain is today's.

mod common;

use common::Node;
use gpu_health_testkit::FakeCluster;

/// A node with a fake cluster; scontrol answers `reboot` (the fake
/// cluster does not know it) by writing the call down.
fn node(remediation: &str) -> (Node, FakeCluster) {
    use std::os::unix::fs::PermissionsExt;
    let n = Node::new("h100x8-healthy");
    let c = FakeCluster::new(&n.path("cluster"), &["n1", "n2", "n3", "n4"]);
    let wrapper = n.path("scontrol");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = reboot ]; then echo \"$*\" >> {:?}; exit 0; fi\nexec {:?} \"$@\"\n",
            n.path("cluster/calls"),
            c.scontrol()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    boot(&n, "boot-1");
    n.write_dropin(&format!(
        "scontrol = {wrapper:?}\n[xid]\nsyslog_may_drain = true\nboot_id_path = {:?}\n\
         [brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\nmax_drained_fraction = 1.0\n{remediation}",
        n.path("boot_id")
    ));
    (n, c)
}

fn boot(n: &Node, id: &str) {
    std::fs::write(n.path("boot_id"), format!("{id}\n")).unwrap();
}

/// An Xid 79 on GPU3, as syslog writes it.
fn xid79(n: &Node) {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = gpu_health_core::time::format_utc_ms(now_ms - 1_000);
    let line = format!(
        "{at} n1 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=4000, name=python3, GPU has fallen off the bus.\n"
    );
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

#[test]
fn xid_79_reboots_twice_then_hardware_inspection() {
    let (n, c) = node("[remediation]\nreboot = true\n");
    for round in 1..=2 {
        xid79(&n);
        let r = health_check(&n);
        let reason = c.reason("n1").unwrap_or_default();
        assert!(
            reason.starts_with("gpu-health: Xid 79") && reason.ends_with(" (reboot)"),
            "round {round}: {reason}\n{}",
            r.log
        );
        let asked = reboots(&c);
        assert_eq!(asked.len(), round, "{asked:?}\n{}", r.log);
        assert_eq!(
            asked[round - 1],
            format!("reboot ASAP nextstate=RESUME reason={reason} n1")
        );
        // Slurm reboots the node and returns it (nextstate=RESUME); the
        // new boot's kernel log starts empty.
        boot(&n, &format!("boot-{}", round + 1));
        c.resume("n1");
        std::fs::write(n.path("kernel.log"), "").unwrap();
        let r = health_check(&n);
        assert_eq!(c.reason("n1"), None, "round {round}: cleared\n{}", r.log);
    }
    // Back after two reboots: hardware inspection, no third reboot.
    xid79(&n);
    let r = health_check(&n);
    let reason = c.reason("n1").unwrap_or_default();
    assert!(
        reason.ends_with(" (hardware inspection)") && reason.contains("2 reboots in 168 h"),
        "{reason}\n{}",
        r.log
    );
    assert_eq!(reboots(&c).len(), 2);
}

#[test]
fn without_remediation_an_xid_79_drains_as_before() {
    let (n, c) = node("");
    xid79(&n);
    let r = health_check(&n);
    let reason = c.reason("n1").unwrap_or_default();
    assert!(
        reason.starts_with("gpu-health: Xid 79") && reason.ends_with(" (drain)"),
        "{reason}\n{}",
        r.log
    );
    assert!(reboots(&c).is_empty());
    assert!(c
        .comment("n1")
        .is_some_and(|m| m.starts_with("gpu-health-drained:")));
}
