//! A node returns to service only on proof: what the acceptance tier
//! measured must cover everything the node had before its fault (every
//! GPU, every HCA with an active port), a fault during the tier fails it,
//! the tier's first step runs whenever the health check has the time for
//! it, and a fault that needs a person, found while gpu-health's reboot
//! waits, keeps Slurm from returning the node after that reboot, and the
//! reboot count holds when the state directory is emptied at every boot. Through the real binary as the health check, a stand-in
//! scontrol that keeps the node's state and pending reboot, and stand-in
//! gate programs that print recorded outputs.

mod common;

use common::rebooting::{xid_line, Rebooting};

/// A node whose tier runs the gates `gates` (TOML list items) with
/// `lines` more in `[acceptance]`.
fn proving(gates: &str, lines: &str) -> Rebooting {
    Rebooting::new(
        "h100x8-healthy",
        &format!("[acceptance]\nenabled = true\ngates = [{gates}]\n{lines}"),
    )
}

/// Xid 79 drains the node for a reboot that keeps it drained; then the
/// node comes back from it.
fn fault_then_reboot(r: &Rebooting) {
    r.xid79();
    let run = r.health_check();
    assert!(r.reason().ends_with(" (reboot)"), "{}", run.log);
    assert_eq!(r.reboots().len(), 1, "{}", run.log);
    assert!(r.come_back("boot-2"), "a reboot was pending");
}

#[test]
fn a_gpu_without_a_host_to_device_figure_keeps_the_node_drained() {
    let r = proving("\"host-to-device\"", "");
    let nvbandwidth = r.gate("nvbandwidth", "nvbandwidth/h2d-h100x8-na.txt", "");
    r.configure(&format!(
        "[acceptance]\nenabled = true\ngates = [\"host-to-device\"]\nnvbandwidth = {nvbandwidth:?}\n"
    ));
    fault_then_reboot(&r);
    let run = r.health_check();
    assert_eq!(r.gate_runs(), 1, "{}", run.log);
    let reason = r.reason();
    assert!(
        reason.contains("GPU2") && reason.contains("not judged"),
        "GPU2 printed N/A: no figure, no return: {reason:?}\n{}",
        run.log
    );
}

/// The HCAs of a node: a copy of a sysfs fixture tree (8 InfiniBand
/// HCAs, mlx5_5 down) under the node's directory.
fn with_hcas(r: &Rebooting) -> std::path::PathBuf {
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/sysfs/ib-ndr8-one-down");
    let to = r.n.path("sys");
    let ok = std::process::Command::new("cp")
        .arg("-r")
        .arg(&from)
        .arg(&to)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    to
}

fn set_port_states(sys: &std::path::Path, state: &str) {
    let ib = sys.join("class/infiniband");
    for hca in std::fs::read_dir(ib).unwrap() {
        std::fs::write(hca.unwrap().path().join("ports/1/state"), state).unwrap();
    }
}

#[test]
fn hcas_active_before_the_fault_and_down_after_the_reboot_keep_it_drained() {
    let r = proving("\"rdma\"", "");
    let sys = with_hcas(&r);
    let ib_bw = r.gate("ib_write_bw", "perftest/write_bw-ndr-gbits.txt", "");
    r.configure_with(
        &format!("sysfs_root = {sys:?}\n"),
        &format!("[acceptance]\nenabled = true\ngates = [\"rdma\"]\nib_bw = {ib_bw:?}\n"),
    );
    fault_then_reboot(&r);
    set_port_states(&sys, "1: DOWN\n");
    let run = r.health_check();
    let reason = r.reason();
    assert!(
        !reason.is_empty() && reason.contains("mlx5_0"),
        "seven HCAs had an active port before the fault and none has one now: {reason:?}\n{}",
        run.log
    );
    assert_eq!(r.gate_runs(), 0, "no loopback on a port that is down");
}

#[test]
fn a_gpu_that_falls_off_the_bus_during_the_tier_fails_the_proof() {
    let r = proving("\"all-reduce\"", "");
    let kernel_log = r.n.path("kernel.log");
    // Stamped when the gate runs: after the boot.
    let line = xid_line("79, pid=4100, name=all_reduce_perf, GPU has fallen off the bus.");
    let (_, rest) = line.split_once(' ').unwrap();
    let all_reduce = r.gate(
        "all_reduce_perf",
        "nccl/h100x8-good.txt",
        &format!(
            "printf '%s %s\\n' \"$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)\" {:?} >> {kernel_log:?}",
            rest.trim_end()
        ),
    );
    r.configure(&format!(
        "[acceptance]\nenabled = true\ngates = [\"all-reduce\"]\nall_reduce_perf = {all_reduce:?}\n"
    ));
    fault_then_reboot(&r);
    let run = r.health_check();
    assert_eq!(r.gate_runs(), 1, "{}", run.log);
    let reason = r.reason();
    assert!(
        reason.starts_with("gpu-health: Xid 79"),
        "the Xid 79 of the tier's time drains again: {reason:?}\n{}\nkernel log: {:?}",
        run.log,
        std::fs::read_to_string(&kernel_log)
    );
}

#[test]
fn the_first_step_of_the_tier_runs_after_a_slow_start() {
    let r = proving("\"all-reduce\"", "");
    let all_reduce = r.gate("all_reduce_perf", "nccl/h100x8-good.txt", "");
    // scontrol's `show node` takes 10.2 s (a busy controller), within
    // the run's Slurm budget of 10.5 s.
    let slow = common::script(
        &r.n,
        "slow-scontrol",
        &format!(
            "if [ \"$1 $2\" = \"show node\" ] && [ -f {:?} ]; then sleep 10.2; fi\nexec {:?} \"$@\"",
            r.n.path("slow"),
            r.c.scontrol()
        ),
    );
    // The step's limit is the most a step gets after a boot (35 s): 60 s
    // less 10.5 s spent less 12 s kept for after the tier leaves 37.5 s.
    r.configure_with(
        "scontrol_timeout_ms = 10500\nnvml_deadline_ms = 500\n",
        &format!(
            "[acceptance]\nenabled = true\ngates = [\"all-reduce\"]\nall_reduce_perf = {all_reduce:?}\n\
             all_reduce_timeout_s = 35\n"
        ),
    );
    let dropin = r.n.path("gpu-health.d/n1.toml");
    let text = std::fs::read_to_string(&dropin).unwrap();
    std::fs::write(
        &dropin,
        text.replacen(
            &format!("scontrol = {:?}", r.c.scontrol()),
            &format!("scontrol = {slow:?}"),
            1,
        ),
    )
    .unwrap();
    fault_then_reboot(&r);
    std::fs::write(r.n.path("slow"), "").unwrap();
    let run = r.health_check();
    assert_eq!(
        r.gate_runs(),
        1,
        "10.5 s spent, 35 s needed: the step fits a health check\n{}",
        run.log
    );
    assert_eq!(r.c.reason("n1"), None, "returned\n{}", run.log);
}

#[test]
fn a_step_that_waits_says_why() {
    let r = proving("\"all-reduce\"", "");
    let all_reduce = r.gate("all_reduce_perf", "nccl/h100x8-good.txt", "");
    // 10 s NVML deadline + 40 s for Slurm + 1 s leave 9 s: a 35 s step
    // never fits, and the node stays drained saying so.
    r.configure_with(
        "scontrol_timeout_ms = 40000\n",
        &format!(
            "[acceptance]\nenabled = true\ngates = [\"all-reduce\"]\nall_reduce_perf = {all_reduce:?}\n\
             all_reduce_timeout_s = 35\n"
        ),
    );
    fault_then_reboot(&r);
    let run = r.health_check();
    assert_eq!(r.gate_runs(), 0, "{}", run.log);
    assert!(r.reason().ends_with(" (reboot)"), "{}", run.log);
    let line = run
        .log
        .lines()
        .find(|l| l.contains("acceptance step all-reduce waits"))
        .unwrap_or_else(|| panic!("a line says why the step waits\n{}", run.log));
    assert!(line.contains("WARN") || line.contains("warn"), "{line}");
    assert!(line.contains("of the health check's 60 s"), "{line}");
}

/// An uncorrectable ECC error (Xid 48): a fault for a person.
const DBE: &str = "48, pid=4200, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 0.";

/// Xid 79 drains the node and asks Slurm's reboot with nextstate=RESUME
/// (no tier), which waits for the running jobs.
fn xid79_waits_for_its_reboot(r: &Rebooting) {
    r.xid79();
    let run = r.health_check();
    assert_eq!(
        r.c.reboot_pending("n1").as_deref(),
        Some("RESUME"),
        "{}",
        run.log
    );
}

#[test]
fn a_fault_for_a_person_while_the_reboot_waits_keeps_slurm_from_returning_it() {
    // No tier: the reboot is asked with nextstate=RESUME.
    let r = Rebooting::new("h100x8-healthy", "");
    xid79_waits_for_its_reboot(&r);
    // The jobs still run; an uncorrectable ECC error comes (Xid 48).
    r.xid(DBE);
    let run = r.health_check();
    assert!(r.reason().ends_with(" (drain)"), "{}", run.log);
    assert_ne!(
        r.c.reboot_pending("n1").as_deref(),
        Some("RESUME"),
        "Slurm must not return the node after the reboot\n{}",
        run.log
    );
    r.come_back("boot-2");
    let after = r.reason();
    assert!(
        after.contains("Xid 48") && after.ends_with(" (drain)"),
        "still drained for the DBE after the boot: {after:?}"
    );
    let run = r.health_check();
    assert!(r.reason().ends_with(" (drain)"), "{}", run.log);
}

#[test]
fn a_reboot_someone_withdrew_already_is_forgotten_and_the_node_stays_drained() {
    let r = Rebooting::new("h100x8-healthy", "");
    xid79_waits_for_its_reboot(&r);
    // An admin cancels it (the node stays drained, as on every series).
    let out = std::process::Command::new(r.c.scontrol())
        .args(["cancel_reboot", "n1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    r.xid(DBE);
    let run = r.health_check();
    assert!(r.reason().ends_with(" (drain)"), "{}", run.log);
    assert!(run.log.contains("no reboot of it pending"), "{}", run.log);
    let run = r.health_check();
    let cancels =
        r.c.calls()
            .iter()
            .filter(|l| l.starts_with("cancel_reboot"))
            .count();
    assert_eq!(
        cancels, 2,
        "the admin's and gpu-health's one refused, none after\n{}",
        run.log
    );
    assert!(r.reason().ends_with(" (drain)"), "{}", run.log);
}

#[test]
fn the_reboot_count_holds_when_the_state_directory_is_emptied_at_every_boot() {
    let r = Rebooting::new("h100x8-healthy", "");
    for round in 1..=2 {
        r.xid79();
        let run = r.health_check();
        assert!(
            r.reason().ends_with(" (reboot)"),
            "round {round}\n{}",
            run.log
        );
        assert_eq!(r.reboots().len(), round, "{}", run.log);
        assert!(r.come_back(&format!("boot-{}", round + 1)));
        // A diskless node: the state directory is empty after a boot.
        std::fs::remove_dir_all(r.n.path("state")).unwrap();
        std::fs::create_dir(r.n.path("state")).unwrap();
        let run = r.health_check();
        assert_eq!(r.c.reason("n1"), None, "round {round}\n{}", run.log);
    }
    r.xid79();
    let run = r.health_check();
    let reason = r.reason();
    assert!(
        reason.ends_with(" (hardware inspection)"),
        "back after two reboots: {reason:?}\n{}",
        run.log
    );
    assert_eq!(r.reboots().len(), 2, "no third reboot");
    // The inspection drain kept them in the Comment beside its stamp.
    let comment = r.c.comment("n1").unwrap_or_default();
    assert!(
        comment.contains("gpu-health-drained:") && comment.matches("=Xid_79").count() == 2,
        "{comment:?}"
    );
}
