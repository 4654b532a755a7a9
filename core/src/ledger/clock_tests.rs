//! Quiet times under a wall clock stepped back or forward, then set right
//! (issue 35, item 7): they count on the boot clock within a boot.

use super::tests::{cfg, view, xid};
use super::*;
use crate::config::RemediationConfig;

const MIN: u64 = 60_000;

type Now = Clock<'static>;

/// The wall clock (which may be wrong) and the boot clock, in one boot.
fn now(wall_ms: u64, boot_ms: u64) -> Now {
    Clock {
        wall_ms,
        boot_ms: Some(boot_ms),
        boot_id: "boot-a",
    }
}

fn observe(l: &mut Ledger, findings: &[Finding], at: Now) {
    let v = RunView {
        clock: at,
        ..view(0)
    };
    l.observe(findings, &v, &cfg(), &RemediationConfig::default());
}

fn record(l: &mut Ledger, outcome: &Recorded, at: Now) {
    l.record(outcome, true, at);
}

fn may_return(l: &Ledger, at: Now) -> ReturnDecision {
    l.may_return(&cfg(), &[], at)
}

/// Wall time when the tests start (2027), and the boot clock then.
const T: u64 = 1_800_000_000_000;
const B: u64 = 5 * MIN;
const HOUR: u64 = 60 * MIN;

/// An Xid 31 on GPU0: `drain-until-clean`, a fault that goes by itself
/// once the node was quiet long enough.
fn xid31() -> Finding {
    xid(31, 0, Action::DrainUntilClean, 4242)
}

/// The fault found at `at` and held back by the brake.
fn pending_at(at: Now) -> Ledger {
    let mut l = Ledger::new("n1");
    observe(&mut l, &[xid31()], at);
    let held = Recorded::NotActed {
        cause: PendingCause::Brake,
        why: "brake".into(),
    };
    record(&mut l, &held, at);
    assert!(matches!(
        l.faults[0].handling,
        Handling::Pending {
            cause: PendingCause::Brake,
            ..
        }
    ));
    l
}

/// The fault found at `at` and drained until clean.
fn drained_at(at: Now) -> Ledger {
    let mut l = Ledger::new("n1");
    observe(&mut l, &[xid31()], at);
    let Plan::Drain { reason, .. } = l.plan(true) else {
        panic!("no drain planned: {l:?}");
    };
    record(&mut l, &Recorded::Drained { reason }, at);
    l
}

fn waits(l: &Ledger, at: Now) -> bool {
    matches!(may_return(l, at), ReturnDecision::Wait(_))
}

#[test]
fn a_pending_fault_found_with_the_clock_2h_behind_stays_once_it_is_right() {
    // The issue's case: found while the wall clock was 2 h behind, held
    // back by the brake; a minute later the clock is right.
    let mut l = pending_at(now(T - 2 * HOUR, B));
    observe(&mut l, &[], now(T + MIN, B + MIN));
    assert_eq!(l.faults.len(), 1, "the fault went after a minute: {l:?}");
    // It goes once the node was really quiet for the quiet time.
    observe(&mut l, &[], now(T + 11 * MIN, B + 11 * MIN));
    assert!(l.faults.is_empty(), "{l:?}");
}

#[test]
fn a_pending_fault_outlives_a_clock_stepped_back_then_corrected() {
    let mut l = pending_at(now(T, B));
    observe(&mut l, &[], now(T - 2 * HOUR + MIN, B + MIN));
    assert_eq!(l.faults.len(), 1, "{l:?}");
    observe(&mut l, &[], now(T + 2 * MIN, B + 2 * MIN));
    assert_eq!(l.faults.len(), 1, "went early: {l:?}");
    observe(&mut l, &[], now(T + 11 * MIN, B + 11 * MIN));
    assert!(l.faults.is_empty(), "kept past its quiet time: {l:?}");
}

#[test]
fn a_pending_fault_outlives_a_clock_stepped_forward_then_corrected() {
    let mut l = pending_at(now(T, B));
    observe(&mut l, &[], now(T + 2 * HOUR + MIN, B + MIN));
    assert_eq!(l.faults.len(), 1, "went early: {l:?}");
    observe(&mut l, &[], now(T + 2 * MIN, B + 2 * MIN));
    assert_eq!(l.faults.len(), 1, "{l:?}");
    observe(&mut l, &[], now(T + 11 * MIN, B + 11 * MIN));
    assert!(l.faults.is_empty(), "kept past its quiet time: {l:?}");
}

#[test]
fn a_drained_fault_keeps_its_quiet_time_when_the_clock_steps_back() {
    let mut l = drained_at(now(T, B));
    observe(&mut l, &[], now(T - 2 * HOUR + MIN, B + MIN));
    assert!(waits(&l, now(T - 2 * HOUR + MIN, B + MIN)));
    observe(&mut l, &[], now(T + 2 * MIN, B + 2 * MIN));
    assert!(waits(&l, now(T + 2 * MIN, B + 2 * MIN)), "returned early");
    let later = now(T + 11 * MIN, B + 11 * MIN);
    observe(&mut l, &[], later);
    assert_eq!(may_return(&l, later), ReturnDecision::Return);
}

#[test]
fn a_drained_fault_keeps_its_quiet_time_when_the_clock_steps_forward() {
    let mut l = drained_at(now(T, B));
    let ahead = now(T + 2 * HOUR + MIN, B + MIN);
    observe(&mut l, &[], ahead);
    assert!(waits(&l, ahead), "returned early");
    observe(&mut l, &[], now(T + 2 * MIN, B + 2 * MIN));
    assert!(waits(&l, now(T + 2 * MIN, B + 2 * MIN)));
    let later = now(T + 11 * MIN, B + 11 * MIN);
    observe(&mut l, &[], later);
    assert_eq!(may_return(&l, later), ReturnDecision::Return);
}

#[test]
fn a_fault_found_with_the_clock_ahead_is_not_kept_forever() {
    // Found while the wall clock was 2 h ahead; once it is right the
    // quiet time counts from when it was really found.
    let mut l = drained_at(now(T + 2 * HOUR, B));
    let later = now(T + 11 * MIN, B + 11 * MIN);
    observe(&mut l, &[], later);
    assert_eq!(may_return(&l, later), ReturnDecision::Return);
    let mut p = pending_at(now(T + 2 * HOUR, B));
    observe(&mut p, &[], later);
    assert!(p.faults.is_empty(), "{p:?}");
}

#[test]
fn across_a_boot_the_wall_clock_counts() {
    // Found in boot a; in boot b the boot clock says nothing about it.
    let mut l = pending_at(now(T, B));
    let other = |wall_ms| Clock {
        wall_ms,
        boot_ms: Some(MIN),
        boot_id: "boot-b",
    };
    observe(&mut l, &[], other(T + 5 * MIN));
    assert_eq!(l.faults.len(), 1, "{l:?}");
    observe(&mut l, &[], other(T + 11 * MIN));
    assert!(l.faults.is_empty(), "{l:?}");
}

#[test]
fn a_ledger_written_before_loads_and_counts_on_the_wall_clock() {
    let mut l = drained_at(Clock::wall(T));
    let json = serde_json::to_string(&l).unwrap();
    assert!(!json.contains("last_boot"), "{json}");
    let back: Ledger = serde_json::from_str(&json).unwrap();
    assert_eq!(back, l);
    // Stamped with the boot clock, then read by a run that has none.
    l = drained_at(now(T, B));
    let json = serde_json::to_string(&l).unwrap();
    assert!(
        json.contains(r#""last_boot":{"boot_id":"boot-a","ms":300000}"#),
        "{json}"
    );
    assert!(waits(&l, Clock::wall(T + 9 * MIN)));
    assert_eq!(
        may_return(&l, Clock::wall(T + 10 * MIN)),
        ReturnDecision::Return
    );
}
