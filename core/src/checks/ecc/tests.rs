use crate::checks::fixtures::*;
use crate::checks::EccHistory;
use crate::config::Config;
use crate::finding::Action;
use crate::snapshot::*;

#[test]
fn dbe_drains_with_gpu_and_ecc_in_summary() {
    let mut s = healthy();
    s.gpus[3].ecc = Some(EccCounts {
        volatile_uncorrected: 2,
        aggregate_uncorrected: 2,
        ..Default::default()
    });
    let f = only(&run(&s)).clone();
    assert_eq!(f.action, Action::Drain);
    assert_eq!(
        f.summary,
        "ECC DBE GPU3 0000:1b:00.0 volatile uncorrected=2"
    );
    // Aggregate alone (an old, already handled error) is not a fresh DBE.
    s.gpus[3].ecc = Some(EccCounts {
        aggregate_uncorrected: 2,
        ..Default::default()
    });
    assert!(run(&s).is_empty());
}

#[test]
fn corrected_rate_warns_then_drains() {
    let mut s = healthy();
    let mut h = EccHistory::default();
    h.record([("GPU-00000001".to_string(), 100)], NOW - 3_600_000);
    s.gpus[1].ecc = Some(EccCounts {
        aggregate_corrected: 105,
        ..Default::default()
    });
    assert!(run_with(&s, &Config::default(), &h).is_empty());
    s.gpus[1].ecc = Some(EccCounts {
        aggregate_corrected: 150,
        ..Default::default()
    });
    assert_eq!(
        only(&run_with(&s, &Config::default(), &h)).action,
        Action::Warn
    );
    s.gpus[1].ecc = Some(EccCounts {
        aggregate_corrected: 5000,
        ..Default::default()
    });
    assert_eq!(
        only(&run_with(&s, &Config::default(), &h)).action,
        Action::Drain
    );
    // Counter went backwards: no rate.
    s.gpus[1].ecc = Some(EccCounts {
        aggregate_corrected: 1,
        ..Default::default()
    });
    assert!(run_with(&s, &Config::default(), &h).is_empty());
}

#[test]
fn history_ignores_short_spans_and_old_samples() {
    let mut h = EccHistory::default();
    h.record([("g".to_string(), 0)], NOW - 10_000);
    assert_eq!(h.rate_per_hour("g", 1000, NOW), None);
    let mut h = EccHistory::default();
    h.record([("g".to_string(), 0)], NOW - 48 * 3_600_000);
    assert_eq!(h.rate_per_hour("g", 1000, NOW), None);
    h.record([("g".to_string(), 10)], NOW - 3_600_000);
    assert_eq!(h.gpus["g"].len(), 1);
    assert_eq!(h.rate_per_hour("g", 20, NOW), Some(10.0));
}

#[test]
fn history_reports_whether_it_changed() {
    let mut h = EccHistory::default();
    assert!(h.record([("g".to_string(), 5)], NOW - 120_000));
    // Within a minute of the last sample: nothing to keep.
    assert!(!h.record([("g".to_string(), 6)], NOW - 100_000));
    assert!(h.record([("g".to_string(), 7)], NOW));
    // A counter that went back restarts the series.
    assert!(h.record([("g".to_string(), 1)], NOW));
    assert_eq!(h.gpus["g"], vec![(NOW, 1)]);
}
