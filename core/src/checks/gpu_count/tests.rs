use crate::checks::fixtures::*;
use crate::checks::EccHistory;
use crate::config::Config;
use crate::finding::Action;

#[test]
fn count_uses_sysfs_and_config() {
    let mut s = healthy();
    s.gpus.truncate(7);
    // NVML alone cannot tell a GPU is missing...
    assert!(run(&s).is_empty());
    // ...sysfs can.
    s.pci_gpus = (0..8)
        .map(|i| format!("0000:{:02x}:00.0", 0x18 + i))
        .collect();
    let f = only(&run(&s)).clone();
    assert_eq!(f.summary, "GPU count 7 of 8 missing 0000:1f:00.0");
    s.pci_gpus.clear();
    let c = Config {
        expected_gpus: Some(8),
        ..Config::default()
    };
    assert_eq!(
        only(&run_with(&s, &c, &EccHistory::default())).check,
        "gpu-count"
    );
}

#[test]
fn a_prolog_inside_the_jobs_cgroup_counts_only_what_it_can_see() {
    // PrologFlags=RunInJob + ConstrainDevices: NVML shows the job's 2 GPUs
    // of 8 (renumbered 0 and 1); sysfs lists all 8.
    let mut s = healthy();
    s.gpus.truncate(2);
    s.pci_gpus = (0..8)
        .map(|i| format!("0000:{:02x}:00.0", 0x18 + i))
        .collect();
    let job_view = |k| {
        run_seen_as(
            &s,
            &Config::default(),
            &EccHistory::default(),
            &links_seen(),
            Some(k),
        )
    };
    let f = only(&job_view(2)).clone();
    assert_eq!((f.check.as_str(), f.action), ("gpu-count", Action::Info));
    assert!(f.message.contains("RunInJob"), "{}", f.message);
    // A job of 3 GPUs that sees 2: one is really missing.
    assert_eq!(only(&job_view(3)).action, Action::Drain);
    // Outside a job's cgroup the same picture drains.
    assert_eq!(only(&run(&s)).action, Action::Drain);
}
