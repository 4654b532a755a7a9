//! A node returns to service only on proof: a fault that needs a person,
//! found while gpu-health's reboot waits, keeps Slurm from returning the
//! node after that reboot. Through the real binary as the health check
//! and a stand-in scontrol that keeps the node's state and pending reboot.

mod common;

use common::rebooting::Rebooting;

#[test]
fn a_fault_for_a_person_while_the_reboot_waits_keeps_slurm_from_returning_it() {
    // No tier: the reboot is asked with nextstate=RESUME.
    let r = Rebooting::new("h100x8-healthy", "");
    r.xid79();
    let run = r.health_check();
    assert_eq!(
        r.c.reboot_pending("n1").as_deref(),
        Some("RESUME"),
        "{}",
        run.log
    );
    // The jobs still run; an uncorrectable ECC error comes (Xid 48).
    r.xid("48, pid=4200, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 0.");
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
    r.xid79();
    let run = r.health_check();
    assert_eq!(
        r.c.reboot_pending("n1").as_deref(),
        Some("RESUME"),
        "{}",
        run.log
    );
    // An admin cancels it (the node stays drained, as on every series).
    let out = std::process::Command::new(r.c.scontrol())
        .args(["cancel_reboot", "n1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    r.xid("48, pid=4200, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 0.");
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
