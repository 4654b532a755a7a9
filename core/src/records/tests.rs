//! Unit tests of the record arithmetic and every absent-figure case.

use super::*;
use crate::finding::Action;
use crate::ids::{JobId, NodeName};
use crate::snapshot::{
    AccountedProcess, EccCounts, GpuSnapshot, NodeSnapshot, NvLinkState, NvmlFailure, PcieLink,
    RemappedRows,
};

const T0: u64 = 1_700_000_000_000;

fn gpu(index: u32, energy_mj: Option<u64>) -> GpuSnapshot {
    GpuSnapshot {
        index,
        uuid: Some(format!("GPU-{index}")),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + index)),
        memory_total_bytes: Some(80 << 30),
        energy_mj,
        ecc: Some(EccCounts::default()),
        remapped_rows: Some(RemappedRows::default()),
        pcie: Some(PcieLink {
            replay_counter: Some(5),
            ..PcieLink::default()
        }),
        nvlinks: vec![
            NvLinkState {
                link: 0,
                active: true,
                error_total: Some(1),
            },
            NvLinkState {
                link: 1,
                active: true,
                error_total: Some(2),
            },
        ],
        accounting_mode: Some(true),
        ..GpuSnapshot::default()
    }
}

fn node(taken_at_ms: u64, gpus: Vec<GpuSnapshot>) -> NodeSnapshot {
    NodeSnapshot {
        taken_at_ms,
        gpus,
        ..NodeSnapshot::default()
    }
}

fn proc_(start_ms: u64, mem: Option<u64>) -> AccountedProcess {
    AccountedProcess {
        pid: 1,
        max_memory_bytes: mem,
        start_time_us: start_ms * 1000,
        time_ms: 0,
        is_running: false,
        gpu_utilization: None,
        memory_utilization: None,
    }
}

fn n1() -> NodeName {
    NodeName::parse("n1").unwrap()
}

fn start_of(snap: &NodeSnapshot, gpus: &[u32]) -> JobStart {
    JobStart::from_snapshot(JobId::from(42), &n1(), gpus, snap, None, T0)
}

fn end<'a>(meta: &'a JobMeta, gpus: &'a [u32], snap: &'a NodeSnapshot) -> JobEnd<'a> {
    JobEnd {
        job_id: JobId::from(42),
        node: n1(),
        meta,
        end_ms: T0 + 100_000,
        job_gpus: gpus,
        snapshot: snap,
        xids: Ok(Vec::new()),
        power_peaks: None,
    }
}

#[test]
fn energy_is_the_counter_difference() {
    assert_eq!(energy_j(Some(1_000), Some(61_500)), Ok(60.5));
    assert_eq!(energy_j(Some(7), Some(7)), Ok(0.0));
}

#[test]
fn energy_absent_cases_have_reasons() {
    assert!(energy_j(Some(10), Some(9))
        .unwrap_err()
        .contains("driver was reloaded"));
    assert!(energy_j(None, Some(9))
        .unwrap_err()
        .contains("no energy counter at job start"));
    assert!(energy_j(Some(9), None)
        .unwrap_err()
        .contains("unreadable at job end"));
}

#[test]
fn mean_power_needs_a_positive_interval() {
    assert_eq!(mean_power_w(600.0, 1_000, 2_000), Some(600.0));
    assert_eq!(mean_power_w(600.0, 1_000, 1_000), None);
    assert_eq!(mean_power_w(600.0, 2_000, 1_000), None);
}

#[test]
fn peak_memory_takes_the_largest_process_inside_the_window() {
    let mut g = gpu(0, Some(0));
    g.accounted_processes = vec![
        proc_(T0 - 1, Some(70 << 30)), // previous job
        proc_(T0 + 10, Some(10 << 30)),
        proc_(T0 + 20, Some(30 << 30)),
        proc_(T0 + 30, None),
        proc_(T0 + 200_000, Some(60 << 30)), // after the job
    ];
    assert_eq!(peak_memory(Some(true), &g, T0, T0 + 100_000), Ok(30 << 30));
}

#[test]
fn peak_memory_absent_cases_have_reasons() {
    let mut g = gpu(0, Some(0));
    let r = |a: Option<bool>, g: &GpuSnapshot| peak_memory(a, g, T0, T0 + 1000).unwrap_err();
    assert!(r(Some(false), &g).contains("off at job start"));
    assert!(r(None, &g).contains("MIG"));
    assert!(r(Some(true), &g).contains("no accounted process"));
    g.accounted_processes = vec![proc_(T0 + 1, None)];
    assert!(r(Some(true), &g).contains("no memory figure"));
    g.accounting_mode = Some(false);
    assert!(r(Some(true), &g).contains("off at job end"));
    g.accounting_mode = None;
    assert!(r(Some(true), &g).contains("MIG"));
}

#[test]
fn counter_deltas() {
    assert_eq!(counter_delta(Some(3), Some(5)), Ok(2));
    assert!(counter_delta(Some(5), Some(3))
        .unwrap_err()
        .contains("backwards"));
    assert!(counter_delta(None, Some(3)).unwrap_err().contains("start"));
    assert!(counter_delta(Some(3), None).unwrap_err().contains("end"));
}

#[test]
fn full_record_from_two_snapshots() {
    let before = node(
        T0 + 5,
        vec![gpu(0, Some(1_000_000)), gpu(1, Some(2_000_000))],
    );
    let start = start_of(&before, &[1]);
    assert_eq!(start.gpus.len(), 1);
    let mut g1 = gpu(1, Some(2_000_000 + 60_000_000));
    g1.accounted_processes = vec![proc_(T0 + 50, Some(40 << 30))];
    g1.ecc = Some(EccCounts {
        volatile_corrected: 4,
        ..EccCounts::default()
    });
    g1.nvlinks[0].error_total = Some(11);
    g1.pcie.as_mut().unwrap().replay_counter = Some(8);
    let after = node(T0 + 100_005, vec![gpu(0, Some(0)), g1]);
    let meta = JobMeta {
        user: Some("alice".into()),
        uid: Some(1000),
        partition: Some("gpu".into()),
        exit_code: Some(0),
    };
    let rec = build_record(Ok(&start), end(&meta, &[1], &after));
    assert!(!rec.start_snapshot_missing);
    assert_eq!(rec.duration_s, Some(100.0));
    assert_eq!(rec.user.as_deref(), Some("alice"));
    let g = &rec.gpus[0];
    assert_eq!(g.index, 1);
    assert_eq!(g.energy_j, Some(60_000.0));
    assert_eq!(g.mean_power_w, Some(600.0));
    assert_eq!(g.peak_memory_bytes, Some(40 << 30));
    assert_eq!(g.memory_total_bytes, Some(80 << 30));
    assert_eq!(g.ecc_corrected_delta, Some(4));
    assert_eq!(g.ecc_uncorrected_delta, Some(0));
    assert_eq!(g.nvlink_errors_delta, Some(10));
    assert_eq!(g.pcie_replay_delta, Some(3));
    assert_eq!(g.energy_absent_reason, None);
    assert!(g.notes.is_empty(), "{:?}", g.notes);
    assert!(delta_findings(&rec).is_empty());
    let line = rec.to_line().unwrap();
    assert!(!line.contains('\n'));
    assert_eq!(serde_json::from_str::<JobRecord>(&line).unwrap(), rec);
}

#[test]
fn missing_start_snapshot_is_said_everywhere() {
    let after = node(T0, vec![gpu(0, Some(5))]);
    let meta = JobMeta::default();
    let mut e = end(&meta, &[0], &after);
    e.xids = Err(NO_START.into());
    let rec = build_record(Err(NO_START.into()), e);
    assert!(rec.start_snapshot_missing);
    assert_eq!(rec.start_snapshot_missing_reason.as_deref(), Some(NO_START));
    assert_eq!(rec.start_ms, None);
    assert_eq!(rec.duration_s, None);
    let g = &rec.gpus[0];
    assert_eq!(g.energy_j, None);
    assert_eq!(g.energy_absent_reason.as_deref(), Some(NO_START));
    assert_eq!(g.peak_memory_absent_reason.as_deref(), Some(NO_START));
    assert_eq!(g.ecc_uncorrected_delta, None);
    // Identity still comes from the end probe.
    assert_eq!(g.uuid.as_deref(), Some("GPU-0"));
    assert_eq!(rec.xids_absent_reason.as_deref(), Some(NO_START));
}

#[test]
fn nvml_failure_at_end_is_the_reason() {
    let before = node(T0, vec![gpu(0, Some(5))]);
    let start = start_of(&before, &[0]);
    let mut after = node(T0 + 10, vec![]);
    after.nvml_error = Some(NvmlFailure::Timeout { deadline_ms: 500 });
    let meta = JobMeta::default();
    let rec = build_record(Ok(&start), end(&meta, &[0], &after));
    assert!(rec.nvml_error.as_deref().unwrap().contains("500 ms"));
    let g = &rec.gpus[0];
    assert!(g
        .energy_absent_reason
        .as_deref()
        .unwrap()
        .contains("500 ms"));
    assert_eq!(
        g.uuid.as_deref(),
        Some("GPU-0"),
        "identity from the start snapshot"
    );
}

#[test]
fn swapped_lost_and_unknown_gpus() {
    let before = node(T0, vec![gpu(0, Some(5)), gpu(1, Some(5))]);
    let start = start_of(&before, &[0, 1]);
    let mut swapped = gpu(0, Some(9));
    swapped.uuid = Some("GPU-other".into());
    let mut lost = gpu(1, None);
    lost.lost = true;
    let after = node(T0 + 10, vec![swapped, lost, gpu(2, Some(1))]);
    let meta = JobMeta::default();
    let rec = build_record(Ok(&start), end(&meta, &[0, 1, 2], &after));
    let reason = |i: usize| rec.gpus[i].energy_absent_reason.clone().unwrap();
    assert!(reason(0).contains("UUID changed"));
    assert!(reason(1).contains("lost"));
    assert!(reason(2).contains("not in the start snapshot"));
}

#[test]
fn driver_reload_makes_energy_and_deltas_absent() {
    let mut b = gpu(0, Some(9_000));
    b.ecc = Some(EccCounts {
        volatile_corrected: 9,
        ..EccCounts::default()
    });
    let before = node(T0, vec![b]);
    let start = start_of(&before, &[0]);
    let after = node(T0 + 10, vec![gpu(0, Some(100))]);
    let meta = JobMeta::default();
    let rec = build_record(Ok(&start), end(&meta, &[0], &after));
    let g = &rec.gpus[0];
    assert_eq!(g.energy_j, None);
    assert!(g
        .energy_absent_reason
        .as_deref()
        .unwrap()
        .contains("reloaded"));
    assert_eq!(g.mean_power_w, None);
    assert_eq!(g.ecc_corrected_delta, None);
    assert!(g.notes.iter().any(|n| n.starts_with("ecc corrected")));
}

#[test]
fn new_uncorrectable_ecc_drains_with_job_and_gpu() {
    let before = node(T0, vec![gpu(3, Some(5))]);
    let start = start_of(&before, &[3]);
    let mut g = gpu(3, Some(6));
    g.ecc = Some(EccCounts {
        volatile_uncorrected: 2,
        ..EccCounts::default()
    });
    let after = node(T0 + 10, vec![g]);
    let meta = JobMeta::default();
    let rec = build_record(Ok(&start), end(&meta, &[3], &after));
    let f = delta_findings(&rec);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].action, Action::Drain);
    assert_eq!(
        crate::finding::drain_reason(&f).unwrap(),
        "gpu-health: ECC DBE during job 42 GPU3 0000:1b:00.0 (drain)"
    );
}

#[test]
fn xid_summary_names_the_job() {
    assert_eq!(
        during_job("Xid 79 GPU5 0000:c1:00.0 pid=2210", "7"),
        "Xid 79 during job 7 GPU5 0000:c1:00.0 pid=2210"
    );
    assert_eq!(during_job("Xid 31", "7"), "Xid 31 during job 7");
    assert_eq!(during_job("odd", "7"), "odd during job 7");
}

#[test]
fn meta_from_env() {
    let env = |k: &str| match k {
        "SLURM_JOB_USER" => Some("bob".to_string()),
        "SLURM_JOB_UID" => Some("1001".to_string()),
        "SLURM_JOB_PARTITION" => Some(" ".to_string()),
        "SLURM_JOB_EXIT_CODE" => Some("256".to_string()),
        _ => None,
    };
    let m = JobMeta::from_env(env);
    assert_eq!(
        m,
        JobMeta {
            user: Some("bob".into()),
            uid: Some(1001),
            partition: None,
            exit_code: Some(256),
        }
    );
}

#[test]
fn prometheus_text_escapes_and_skips_absent() {
    let before = node(T0, vec![gpu(0, Some(0)), gpu(1, None)]);
    let start = start_of(&before, &[0, 1]);
    let after = node(T0 + 1000, vec![gpu(0, Some(500_000)), gpu(1, None)]);
    let meta = JobMeta {
        user: Some("a\"b\\c".into()),
        ..JobMeta::default()
    };
    let rec = build_record(Ok(&start), end(&meta, &[0, 1], &after));
    let text = render_prometheus(&[rec]);
    gpu_health_testkit::promtool_check_metrics(&text);
    // Issue 24: `slurm_job_id`, not `job` (Prometheus's own target
    // label, which node_exporter scrapes turn into `exported_job`).
    assert!(
        text.contains(
            "gpu_health_job_gpu_energy_joules{slurm_job_id=\"42\",user=\"a\\\"b\\\\c\",gpu=\"0\","
        ),
        "{text}"
    );
    let energy = |gpu: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("gpu_health_job_gpu_energy_joules{")
                    && l.contains(&format!(",gpu=\"{gpu}\","))
            })
            .map(str::to_string)
    };
    assert!(energy("0").unwrap().ends_with("} 500"), "{text}");
    assert_eq!(energy("1"), None, "an absent figure has no sample");
    assert!(text.contains("# TYPE gpu_health_job_duration_seconds gauge"));
    assert!(text.contains(
        "gpu_health_job_duration_seconds{slurm_job_id=\"42\",user=\"a\\\"b\\\\c\"} 100\n"
    ));
    assert!(!text.contains("job=\""), "{text}");
}

/// Issue 24: values carried float noise (`611.0937808489635`); they are
/// rounded to what they mean (0.1 W for a mean power).
#[test]
fn prometheus_values_are_rounded() {
    let before = node(T0, vec![gpu(0, Some(0))]);
    let start = start_of(&before, &[0]);
    let after = node(T0 + 1000, vec![gpu(0, Some(500_000))]);
    let mut rec = build_record(Ok(&start), end(&JobMeta::default(), &[0], &after));
    rec.gpus[0].mean_power_w = Some(611.0937808489635);
    let text = render_prometheus(&[rec]);
    gpu_health_testkit::promtool_check_metrics(&text);
    let line = text
        .lines()
        .find(|l| l.starts_with("gpu_health_job_gpu_mean_power_watts{"))
        .unwrap();
    assert!(line.ends_with("} 611.1"), "{line}");
}

#[test]
fn jobs_sum_across_nodes() {
    let meta = JobMeta {
        user: Some("alice".into()),
        ..JobMeta::default()
    };
    let before = node(T0, vec![gpu(0, Some(0)), gpu(1, Some(0))]);
    let start = start_of(&before, &[0, 1]);
    let mut g0 = gpu(0, Some(1_000_000));
    g0.accounted_processes = vec![proc_(T0 + 1, Some(20 << 30))];
    let mut g1 = gpu(1, None);
    g1.accounted_processes = vec![proc_(T0 + 1, Some(60 << 30))];
    g1.ecc = Some(EccCounts {
        volatile_corrected: 2,
        ..EccCounts::default()
    });
    let after = node(T0 + 1000, vec![g0, g1]);
    let mut a = build_record(Ok(&start), end(&meta, &[0, 1], &after));
    let mut b = a.clone();
    b.node = "n2".into();
    b.end_ms += 5;
    a.drained = Some("gpu-health: x (drain)".into());
    let other = JobRecord {
        job_id: "43".into(),
        ..a.clone()
    };
    let jobs = summarize(&[a, other, b]);
    assert_eq!(jobs.len(), 2);
    let j = jobs.iter().find(|j| j.job_id == "42").unwrap();
    assert_eq!(j.nodes, ["n1", "n2"]);
    assert_eq!(j.gpus.len(), 4);
    assert_eq!(j.energy_j, Some(2000.0));
    assert_eq!(j.energy_kwh, Some(2000.0 / 3.6e6));
    assert_eq!(j.gpus_without_energy, 2);
    assert_eq!(j.mean_power_w, Some(2000.0));
    assert_eq!(j.peak_memory_bytes, Some(60 << 30));
    assert_eq!(j.peak_memory_pct, Some(75.0));
    assert_eq!(j.ecc_corrected_delta, 4);
    assert_eq!(j.drained, ["n1: gpu-health: x (drain)"]);
    assert_eq!(j.user.as_deref(), Some("alice"));
    assert_eq!(jobs[1].job_id, "42", "ordered by last end");
}

// ---- gpu-health report: filters, grouping, reading ----

#[test]
fn peak_power_is_the_highest_sample_start_checks_end() {
    let checks = crate::records::GpuPeak {
        index: 0,
        max_mw: 650_000,
        at_ms: 5,
        samples: 4,
    };
    assert_eq!(
        crate::records::peak_power(Some(100_000), Some(&checks), Some(90_000)),
        (Some(650.0), Some(6))
    );
    assert_eq!(
        crate::records::peak_power(Some(700_500), None, Some(90_000)),
        (Some(700.5), Some(2))
    );
    assert_eq!(crate::records::peak_power(None, None, None), (None, None));
}
