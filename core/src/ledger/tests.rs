use super::*;
use crate::config::{RecoveryConfig, RemediationConfig};
use crate::finding::drain_reason;

const MIN: u64 = 60_000;

/// A run that sees the whole node (also the reboot, proof and boot
/// tests' view).
pub(super) fn view(now_ms: u64) -> RunView<'static> {
    RunView {
        clock: Clock::wall(now_ms),
        config_ok: true,
        scans_kernel_log: true,
        at_job_end: false,
    }
}

pub(super) fn xid(code: u32, gpu: u32, action: Action, pid: u32) -> Finding {
    let mut f = Finding::gpu(
        "xid",
        action,
        gpu,
        Some("0000:18:00.0"),
        format!("Xid {code} GPU{gpu} 0000:18:00.0"),
        format!("Xid {code} on GPU{gpu}"),
    );
    f.code = Some(code);
    f.culprit = Some(format!("pid {pid} (python3)"));
    f
}

/// An uncorrectable ECC error on GPU2: a person's to clear.
fn dbe_on_gpu2() -> Finding {
    Finding::gpu(
        "ecc-uncorrected",
        Action::Drain,
        2,
        None,
        "ECC DBE GPU2".into(),
        "m".into(),
    )
}

pub(super) fn cfg() -> RecoveryConfig {
    RecoveryConfig {
        quiet_time_s: 600,
        ..RecoveryConfig::default()
    }
}

fn rem() -> RemediationConfig {
    RemediationConfig::default()
}

fn drained(l: &mut Ledger, now: u64) {
    let Plan::Drain { reason, .. } = l.plan(true) else {
        panic!("no drain planned: {l:?}");
    };
    l.record(&Recorded::Drained { reason }, true, now);
}

#[test]
fn one_entry_per_fault_whatever_the_pid() {
    let mut l = Ledger::new("n1");
    for job in 0..500 {
        l.observe(
            &[xid(31, 1, Action::DrainUntilClean, 1000 + job)],
            &view(job as u64),
            &cfg(),
            &rem(),
        );
        l.record(
            &Recorded::NotActed {
                cause: PendingCause::Brake,
                why: "brake".into(),
            },
            true,
            job as u64,
        );
    }
    assert_eq!(l.faults.len(), 1);
    assert!(
        !l.faults[0].summary.contains("pid"),
        "{}",
        l.faults[0].summary
    );
    assert_eq!(
        l.faults[0].handling,
        Handling::Pending {
            cause: PendingCause::Brake,
            since_ms: 0
        }
    );
    let bytes = serde_json::to_vec(&l).unwrap();
    assert!(bytes.len() < 4096, "{} bytes", bytes.len());
}

#[test]
fn a_milder_fault_never_softens_a_graver_one() {
    let mut l = Ledger::new("n1");
    l.observe(&[xid(48, 0, Action::Drain, 1)], &view(0), &cfg(), &rem());
    drained(&mut l, 0);
    assert_eq!(l.drain.as_ref().unwrap().kind, Action::Drain);
    // A job on GPU1 gets an Xid 31, and GPU0's fault is seen again milder.
    l.observe(
        &[
            xid(31, 1, Action::DrainUntilClean, 2),
            xid(48, 0, Action::Warn, 3),
        ],
        &view(MIN),
        &cfg(),
        &rem(),
    );
    let Plan::Drain { reason, .. } = l.plan(true) else {
        panic!()
    };
    assert!(reason.ends_with("(drain)"), "{reason}");
    assert!(
        reason.starts_with("gpu-health: Xid 48 GPU0"),
        "gravest first: {reason}"
    );
    drained(&mut l, MIN);
    assert_eq!(
        l.fault(&FaultId::of(&xid(48, 0, Action::Drain, 0)))
            .unwrap()
            .action,
        Action::Drain
    );
    // Quiet for days: a node with an open drain fault never returns by itself.
    assert!(matches!(
        l.may_return(&cfg(), &[], 30 * 24 * 60 * MIN),
        ReturnDecision::NotOurs(w) if w.contains("Xid 48")
    ));
}

#[test]
fn a_config_error_run_never_relabels_a_fault_for_dropping() {
    // A good run found an Xid 79 and the brake held it (cursor moved on).
    let mut l = Ledger::new("n1");
    l.observe(&[xid(79, 3, Action::Drain, 1)], &view(0), &cfg(), &rem());
    l.record(
        &Recorded::NotActed {
            cause: PendingCause::Brake,
            why: "brake".into(),
        },
        true,
        0,
    );
    // A run with a typo: it sees no new record (cursor past it), holds.
    let broken = RunView {
        config_ok: false,
        ..view(MIN)
    };
    l.observe(&[], &broken, &cfg(), &rem());
    let Plan::Hold { why } = l.plan(false) else {
        panic!()
    };
    l.record(
        &Recorded::NotActed {
            cause: PendingCause::ConfigError,
            why,
        },
        false,
        MIN,
    );
    // The fix: the next good run still holds the Xid 79 and drains.
    l.observe(&[], &view(2 * MIN), &cfg(), &rem());
    assert!(matches!(l.plan(true), Plan::Drain { reason, .. } if reason.contains("Xid 79")));
}

#[test]
fn what_a_broken_configuration_judged_is_judged_again() {
    let mut l = Ledger::new("n1");
    let broken = RunView {
        config_ok: false,
        ..view(0)
    };
    let dcgm = Finding::node("dcgm", Action::Drain, "DCGM memory".into(), "m".into());
    l.observe(
        &[xid(79, 3, Action::Drain, 1), dcgm],
        &broken,
        &cfg(),
        &rem(),
    );
    assert!(l.faults.iter().all(|f| f.provisional));
    // The good run reads the kernel log again (the cursor did not move):
    // its own judgement replaces the fallback's; DCGM's stays.
    l.observe(&[], &view(1), &cfg(), &rem());
    assert_eq!(l.faults.len(), 1);
    assert_eq!(l.faults[0].id.check, "dcgm");
    // A job's epilog does not read the node's log: it drops nothing.
    let mut l2 = Ledger::new("n1");
    l2.observe(&[xid(79, 3, Action::Drain, 1)], &broken, &cfg(), &rem());
    let epilog = RunView {
        scans_kernel_log: false,
        at_job_end: true,
        ..view(1)
    };
    l2.observe(&[], &epilog, &cfg(), &rem());
    assert_eq!(l2.faults.len(), 1);
}

#[test]
fn pending_until_clean_faults_go_after_a_quiet_time_drain_faults_stay() {
    let mut l = Ledger::new("n1");
    l.observe(
        &[
            xid(31, 1, Action::DrainUntilClean, 1),
            xid(79, 2, Action::Drain, 1),
        ],
        &view(0),
        &cfg(),
        &rem(),
    );
    l.record(
        &Recorded::NotActed {
            cause: PendingCause::Brake,
            why: "b".into(),
        },
        true,
        0,
    );
    l.observe(&[], &view(5 * MIN), &cfg(), &rem());
    assert_eq!(l.faults.len(), 2);
    l.observe(&[], &view(11 * MIN), &cfg(), &rem());
    assert_eq!(l.faults.len(), 1);
    assert_eq!(l.faults[0].action, Action::Drain);
}

#[test]
fn a_clock_set_back_does_not_freeze_quiet_times_or_windows() {
    let year = 365 * 24 * 60 * MIN;
    let mut l = Ledger::new("n1");
    l.observe(
        &[xid(31, 1, Action::DrainUntilClean, 1)],
        &view(year),
        &cfg(),
        &rem(),
    );
    drained(&mut l, year);
    l.returns.push(AutoReturn {
        at_ms: year,
        kinds: vec!["Xid 31".into()],
    });
    // The clock is fixed: a year back.
    l.observe(&[], &view(1_000), &cfg(), &rem());
    assert!(l.faults[0].last_ms <= 1_000 && l.drain.as_ref().unwrap().at_ms <= 1_000);
    assert_eq!(
        l.may_return(&cfg(), &[], 1_000 + 10 * MIN),
        ReturnDecision::Return
    );
    assert_eq!(
        l.returns_for("Xid 31", 1_000 + 8 * 24 * 60 * MIN, 7 * 24 * 60 * MIN),
        0
    );
}

#[test]
fn returns_escalate_until_clean_faults_and_an_admin_starts_over() {
    let mut l = Ledger::new("n1");
    let c = cfg();
    let day = 24 * 60 * MIN;
    for d in 0..3 {
        l.observe(
            &[xid(31, 1, Action::DrainUntilClean, d as u32)],
            &view(d * day),
            &c,
            &rem(),
        );
        drained(&mut l, d * day);
        l.returned(true, d * day + 20 * MIN, c.escalate_window_ms());
    }
    assert_eq!(l.returns.len(), 3);
    l.observe(
        &[xid(31, 2, Action::DrainUntilClean, 9)],
        &view(3 * day),
        &c,
        &rem(),
    );
    assert_eq!(l.faults[0].action, Action::Drain);
    assert!(
        l.faults[0].summary.ends_with("back 3x in 168 h"),
        "{}",
        l.faults[0].summary
    );
    l.returned(false, 3 * day, c.escalate_window_ms());
    assert!(l.is_empty());
}

#[test]
fn found_back_in_service_past_events_are_answered_real_faults_stay() {
    let mut l = Ledger::new("n1");
    let dbe = dbe_on_gpu2();
    l.observe(
        &[xid(79, 3, Action::Drain, 1), dbe.clone()],
        &view(0),
        &cfg(),
        &rem(),
    );
    drained(&mut l, 0);
    // An admin ran scontrol resume; this run found the DBE again (NVML
    // still counts it) but not the Xid (a past kernel-log record).
    l.observe(std::slice::from_ref(&dbe), &view(MIN), &cfg(), &rem());
    assert_eq!(l.returned_by_someone(&[FaultId::of(&dbe)]), 1);
    assert_eq!(l.faults.len(), 1);
    assert_eq!(l.drain, None);
    assert!(
        matches!(l.plan(true), Plan::Drain { ours_already: false, reason, .. } if reason.contains("ECC DBE"))
    );
}

#[test]
fn someone_elses_drain_takes_over_ours() {
    let mut l = Ledger::new("n1");
    l.observe(&[xid(79, 3, Action::Drain, 1)], &view(0), &cfg(), &rem());
    drained(&mut l, 0);
    l.record(
        &Recorded::NotActed {
            cause: PendingCause::DrainedBySomeoneElse,
            why: "admin".into(),
        },
        false,
        MIN,
    );
    assert_eq!(l.drain, None);
    assert!(matches!(
        l.plan(true),
        Plan::Drain {
            look_first: true,
            ours_already: false,
            ..
        }
    ));
}

#[test]
fn the_bound_folds_the_mildest_and_keeps_the_gravest() {
    let mut l = Ledger::new("n1");
    let mut findings: Vec<Finding> = (0..400)
        .map(|c| xid(1000 + c, 0, Action::DrainUntilClean, 1))
        .collect();
    findings.push(xid(79, 5, Action::Drain, 1));
    l.observe(&findings, &view(0), &cfg(), &rem());
    assert_eq!(l.faults.len(), MAX_FAULTS);
    assert!(l
        .faults
        .iter()
        .any(|f| f.id.code == Some(79) && f.action == Action::Drain));
    let over = l.fault(&observe_overflow()).unwrap();
    assert_eq!(over.action, Action::DrainUntilClean);
    // Again and again: still bounded, one overflow entry.
    for round in 1..5 {
        let more: Vec<Finding> = (0..300)
            .map(|c| xid(5000 + round * 1000 + c, 1, Action::DrainUntilClean, 1))
            .collect();
        l.observe(&more, &view(round as u64), &cfg(), &rem());
        assert_eq!(l.faults.len(), MAX_FAULTS);
    }
    assert_eq!(l.gravest(), Some(Action::Drain));
    let bytes = serde_json::to_vec(&l).unwrap();
    assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
    let reason = drain_reason(&l.findings()).unwrap();
    assert!(reason.starts_with("gpu-health: Xid 79 GPU5"), "{reason}");
    assert!(reason.ends_with("(drain)"));
}

/// An Xid storm of `faults` distinct (GPU, code) faults a reboot clears:
/// drained, and the reboot asked for (to be proved after it when
/// `prove`), with reboots on.
fn storm_that_asked_a_reboot(faults: u32, prove: bool) -> (Ledger, RemediationConfig) {
    let on = RemediationConfig {
        reboot: true,
        ..RemediationConfig::default()
    };
    let mut l = Ledger::new("n1");
    let storm: Vec<Finding> = (0..faults)
        .map(|i| xid(1000 + i / 8, i % 8, Action::Drain, 1).with_remedy(Remedy::Reboot))
        .collect();
    l.observe(&storm, &view(0), &cfg(), &on);
    drained(&mut l, 0);
    let kinds = l
        .reboot_wanted(&on, 0)
        .expect("every open fault is cleared by a reboot");
    l.reboot_requested(0, "boot-a", kinds, prove);
    (l, on)
}

/// The new boot finds a fresh, unrelated drain-until-clean fault.
fn fresh_fault_of_the_new_boot(l: &mut Ledger, on: &RemediationConfig) {
    let fresh = xid(31, 1, Action::DrainUntilClean, 9);
    l.observe(&[fresh], &view(2 * MIN), &cfg(), on);
}

/// An Xid storm a reboot cleared fills the ledger; a fresh fault of the
/// new boot must stay open (found by a review: it was folded in with the
/// cleared ones and took their handling, so nothing drained).
#[test]
fn the_bound_never_hides_a_new_fault_among_ones_a_reboot_cleared() {
    let (mut l, on) = storm_that_asked_a_reboot(256, false);
    assert!(l.boot_seen("boot-b", MIN, on.window_ms()));
    assert!(
        l.open_faults().next().is_none(),
        "all cleared by the reboot"
    );
    fresh_fault_of_the_new_boot(&mut l, &on);
    assert_eq!(
        l.gravest(),
        Some(Action::DrainUntilClean),
        "the fresh fault must stay open: {:?}",
        l.fault(&observe_overflow())
    );
    assert!(matches!(l.plan(true), Plan::Drain { .. }), "it must drain");
}

/// 255 faults a reboot cleared, an uncorrectable ECC error drained before
/// that reboot, then a fresh fault: the ECC error, a person's to clear,
/// must stand (a fold marked it cleared by the reboot).
#[test]
fn the_bound_never_marks_a_drained_fault_as_cleared_by_a_reboot() {
    let (mut l, on) = storm_that_asked_a_reboot(255, true);
    // Before the reboot happens: an uncorrectable ECC error (a person's).
    let dbe = dbe_on_gpu2();
    l.observe(&[dbe], &view(MIN / 2), &cfg(), &on);
    drained(&mut l, MIN / 2);
    assert!(l.boot_seen("boot-b", MIN, on.window_ms()));
    assert_eq!(l.gravest(), Some(Action::Drain), "the DBE stands");
    fresh_fault_of_the_new_boot(&mut l, &on); // 257 faults in all
    assert_eq!(
        l.gravest(),
        Some(Action::Drain),
        "the DBE must stay open: {:?}",
        l.fault(&observe_overflow())
    );
}

fn observe_overflow() -> FaultId {
    FaultId {
        check: "ledger".into(),
        gpu: None,
        code: None,
    }
}

#[test]
fn texts_are_capped_and_pids_never_make_an_identity() {
    let mut l = Ledger::new("n1");
    let mut f = xid(13, 0, Action::Drain, 1);
    f.summary = "x".repeat(10_000);
    f.message = "y".repeat(100_000);
    l.observe(&[f], &view(0), &cfg(), &rem());
    assert!(l.faults[0].summary.len() <= MAX_SUMMARY);
    assert!(l.faults[0].message.len() <= MAX_MESSAGE);
    assert_eq!(
        FaultId::of(&xid(13, 0, Action::Drain, 7)),
        FaultId::of(&xid(13, 0, Action::Warn, 9))
    );
}

#[test]
fn an_automatic_return_needs_our_drain_until_clean_faults_quiet() {
    let mut l = Ledger::new("n1");
    assert!(matches!(
        l.may_return(&cfg(), &[], 0),
        ReturnDecision::NotOurs(_)
    ));
    l.observe(
        &[xid(31, 1, Action::DrainUntilClean, 1)],
        &view(0),
        &cfg(),
        &rem(),
    );
    drained(&mut l, 0);
    assert!(matches!(
        l.may_return(&cfg(), &[], 5 * MIN),
        ReturnDecision::Wait(_)
    ));
    assert!(matches!(
        l.may_return(&cfg(), &["GPU1 lost".into()], 20 * MIN),
        ReturnDecision::Wait(w) if w.contains("GPU1 lost")
    ));
    assert_eq!(l.may_return(&cfg(), &[], 10 * MIN), ReturnDecision::Return);
    let off = RecoveryConfig {
        auto_return: false,
        ..cfg()
    };
    assert!(matches!(
        l.may_return(&off, &[], 20 * MIN),
        ReturnDecision::NotOurs(_)
    ));
    l.returned(true, 20 * MIN, cfg().escalate_window_ms());
    assert!(l.faults.is_empty() && l.drain.is_none());
    assert_eq!(l.returns[0].kinds, vec!["Xid 31".to_string()]);
}
