use super::*;
use crate::checks::LinkHistory;
use crate::config::Config;
use crate::finding::Action;
use crate::snapshot::*;

const NOW: u64 = 1_800_000_000_000;

fn healthy_gpu(i: u32) -> GpuSnapshot {
    GpuSnapshot {
        index: i,
        uuid: Some(format!("GPU-{i:08}")),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + i)),
        temperature_c: Some(45),
        power_usage_mw: Some(300_000),
        power_limit_mw: Some(700_000),
        default_power_limit_mw: Some(700_000),
        ecc: Some(EccCounts::default()),
        remapped_rows: Some(RemappedRows::default()),
        retired_pages_pending: Some(false),
        pcie: Some(PcieLink {
            current_gen: 5,
            max_gen: 5,
            current_width: 16,
            max_width: 16,
            replay_counter: Some(0),
        }),
        nvlinks: (0..18)
            .map(|l| NvLinkState {
                link: l,
                active: true,
                error_total: Some(0),
            })
            .collect(),
        throttle_reasons: Some(0),
        persistence_mode: Some(true),
        accounting_mode: Some(true),
        ..GpuSnapshot::default()
    }
}

fn healthy() -> NodeSnapshot {
    NodeSnapshot {
        gpus: (0..8).map(healthy_gpu).collect(),
        ..NodeSnapshot::default()
    }
}

fn run(snap: &NodeSnapshot) -> Vec<Finding> {
    run_with(snap, &Config::default(), &EccHistory::default())
}

/// Every link of the healthy node seen active earlier in this boot.
fn links_seen() -> LinkHistory {
    let mut h = LinkHistory::default();
    let healthy = healthy();
    h.record(healthy.gpus.iter().flat_map(|g| {
        let uuid = g.uuid.as_deref().unwrap_or("");
        g.nvlinks.iter().map(move |l| (uuid, l.link))
    }));
    h
}

fn run_with(snap: &NodeSnapshot, config: &Config, history: &EccHistory) -> Vec<Finding> {
    run_seen(snap, config, history, &links_seen())
}

fn run_seen(
    snap: &NodeSnapshot,
    config: &Config,
    history: &EccHistory,
    links: &LinkHistory,
) -> Vec<Finding> {
    evaluate(&CheckInput {
        job_view: None,
        snapshot: snap,
        config,
        history,
        links,
        now_ms: NOW,
    })
}

fn only(findings: &[Finding]) -> &Finding {
    assert_eq!(findings.len(), 1, "{findings:#?}");
    &findings[0]
}

#[test]
fn healthy_node_has_no_findings() {
    assert!(run(&healthy()).is_empty());
}

#[test]
fn nvml_timeout_drains() {
    let s = NodeSnapshot {
        nvml_error: Some(NvmlFailure::Timeout { deadline_ms: 3000 }),
        ..Default::default()
    };
    let f = only(&run(&s)).clone();
    assert_eq!(f.action, Action::Drain);
    assert_eq!(f.summary, "NVML did not answer in 3000 ms");
}

#[test]
fn missing_library_drains_only_when_gpus_are_expected() {
    let mut s = NodeSnapshot {
        nvml_error: Some(NvmlFailure::LibraryMissing { detail: "x".into() }),
        ..Default::default()
    };
    assert_eq!(only(&run(&s)).action, Action::Warn);
    s.pci_gpus = vec!["0000:18:00.0".into()];
    assert_eq!(only(&run(&s)).action, Action::Drain);
    s.nvml_error = Some(NvmlFailure::ProbeCrashed { detail: "y".into() });
    assert_eq!(only(&run(&s)).action, Action::Warn);
}

#[test]
fn lost_gpu_and_count_drain() {
    let mut s = healthy();
    s.gpus[5] = GpuSnapshot {
        index: 5,
        lost: true,
        ..Default::default()
    };
    let f = run(&s);
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(f.iter().all(|f| f.action == Action::Drain));
    assert_eq!(f[0].summary, "GPU count 7 of 8");
    assert_eq!(f[1].gpu, Some(5));
}

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
        evaluate(&CheckInput {
            job_view: Some(k),
            snapshot: &s,
            config: &Config::default(),
            history: &EccHistory::default(),
            links: &links_seen(),
            now_ms: NOW,
        })
    };
    let f = only(&job_view(2)).clone();
    assert_eq!((f.check.as_str(), f.action), ("gpu-count", Action::Info));
    assert!(f.message.contains("RunInJob"), "{}", f.message);
    // A job of 3 GPUs that sees 2: one is really missing.
    assert_eq!(only(&job_view(3)).action, Action::Drain);
    // Outside a job's cgroup the same picture drains.
    assert_eq!(only(&run(&s)).action, Action::Drain);
}

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
fn remap_failure_drains_pending_warns() {
    let mut s = healthy();
    s.gpus[2].remapped_rows = Some(RemappedRows {
        uncorrectable: 3,
        failure: true,
        ..Default::default()
    });
    s.gpus[4].remapped_rows = Some(RemappedRows {
        pending: true,
        ..Default::default()
    });
    s.gpus[6].retired_pages_pending = Some(true);
    let f = run(&s);
    let actions: Vec<(Option<u32>, Action)> = f.iter().map(|f| (f.gpu, f.action)).collect();
    assert_eq!(
        actions,
        vec![
            (Some(2), Action::Drain),
            (Some(4), Action::Warn),
            (Some(6), Action::Warn)
        ]
    );
}

#[test]
fn pcie_width_warns_generation_informs() {
    let mut s = healthy();
    s.gpus[2].pcie = Some(PcieLink {
        current_gen: 4,
        max_gen: 5,
        current_width: 8,
        max_width: 16,
        replay_counter: None,
    });
    let f = only(&run(&s)).clone();
    assert_eq!(f.action, Action::Warn);
    assert_eq!(f.summary, "PCIe Gen4 x8 of Gen5 x16 GPU2 0000:1a:00.0");
    s.gpus[2].pcie = Some(PcieLink {
        current_gen: 1,
        max_gen: 5,
        current_width: 16,
        max_width: 16,
        replay_counter: None,
    });
    assert_eq!(only(&run(&s)).action, Action::Info);
}

#[test]
fn nvlink_thermal_power_throttle_persistence() {
    let mut s = healthy();
    s.gpus[0].nvlinks[3].active = false;
    s.gpus[1].temperature_c = Some(95);
    s.gpus[2].power_limit_mw = Some(400_000);
    s.gpus[3].throttle_reasons = Some(throttle::HW_THERMAL_SLOWDOWN | 0x1);
    s.gpus[4].persistence_mode = Some(false);
    let f = run(&s);
    let checks: Vec<(&str, Action)> = f.iter().map(|f| (f.check.as_str(), f.action)).collect();
    assert_eq!(
        checks,
        vec![
            ("nvlink", Action::Warn),
            ("temperature", Action::Warn),
            ("power-limit", Action::Warn),
            ("clock-events", Action::Warn),
            ("persistence-mode", Action::Info),
        ]
    );
    assert_eq!(f[0].summary, "NVLink 1 of 18 inactive GPU0 0000:18:00.0");
}

#[test]
fn pcie_only_boards_have_no_nvlink_finding() {
    let mut s = healthy();
    for g in &mut s.gpus {
        g.nvlinks.clear();
    }
    assert!(run(&s).is_empty());
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

/// A link never active since boot is on record (info) but warns nobody; a
/// link seen active earlier in this boot that is down now warns; a new
/// boot forgets what was seen.
#[test]
fn nvlinks_never_active_since_boot_do_not_warn() {
    let mut s = healthy();
    s.gpus[0].nvlinks[3].active = false;
    s.gpus[0].nvlinks[17].active = false;
    let cfg = Config::default();
    let ecc = EccHistory::default();
    let mut seen = LinkHistory::default().for_boot("boot-1");
    // Links 0-16 of GPU0 were seen up (17 never), every link of the others.
    seen.record(s.gpus.iter().flat_map(|g| {
        let uuid = g.uuid.as_deref().unwrap_or("");
        g.nvlinks
            .iter()
            .filter(move |l| !(g.index == 0 && l.link == 17))
            .map(move |l| (uuid, l.link))
    }));
    let f = run_seen(&s, &cfg, &ecc, &seen);
    let got: Vec<(&str, Action, &str)> = f
        .iter()
        .map(|f| (f.check.as_str(), f.action, f.summary.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "nvlink",
                Action::Warn,
                "NVLink 1 of 18 inactive GPU0 0000:18:00.0"
            ),
            (
                "nvlink-unused",
                Action::Info,
                "NVLink 1 of 18 never active GPU0 0000:18:00.0"
            ),
        ]
    );
    assert!(
        f[0].message.contains("links 3 went down since boot"),
        "{}",
        f[0].message
    );
    // After a reboot nothing was seen yet: both are only on record.
    let rebooted = seen.for_boot("boot-2");
    let f = run_seen(&s, &cfg, &ecc, &rebooted);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].check.as_str(), f[0].action),
        ("nvlink-unused", Action::Info)
    );
    assert!(f[0]
        .message
        .contains("links 3,17 have not been active since boot"));
}
