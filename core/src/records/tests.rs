//! Unit tests of the record arithmetic and every absent-figure case.

use super::*;
use crate::finding::Action;
use crate::ids::{JobId, NodeName};
use crate::records::read;
use crate::snapshot::{
    AccountedProcess, EccCounts, GpuSnapshot, NodeSnapshot, NvLinkState, NvmlFailure, PcieLink,
    RemappedRows,
};
use crate::state::RECORDS_FILE as JOBS_FILE;

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
    assert!(
        text.contains(
            "gpu_health_job_gpu_energy_joules{job=\"42\",user=\"a\\\"b\\\\c\",gpu=\"0\"} 500\n"
        ),
        "{text}"
    );
    assert!(!text
        .contains("gpu_health_job_gpu_energy_joules{job=\"42\",user=\"a\\\"b\\\\c\",gpu=\"1\"}"));
    assert!(text.contains("# TYPE gpu_health_job_duration_seconds gauge"));
    assert!(text.contains("gpu_health_job_duration_seconds{job=\"42\",user=\"a\\\"b\\\\c\"} 100\n"));
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

/// A one-node record of `job` for the report tests.
fn rec(job: &str, node: &str, user: Option<&str>, end_ms: u64) -> JobRecord {
    JobRecord {
        version: RECORD_VERSION,
        job_id: job.into(),
        node: node.into(),
        user: user.map(String::from),
        uid: None,
        partition: None,
        exit_code: None,
        start_ms: Some(end_ms.saturating_sub(10)),
        end_ms,
        duration_s: Some(0.01),
        start_snapshot_missing: false,
        start_snapshot_missing_reason: None,
        nvml_error: None,
        gpus: vec![GpuRecord {
            index: 0,
            energy_j: Some(1.5),
            mean_power_w: Some(100.0),
            peak_memory_bytes: Some(end_ms),
            memory_total_bytes: Some(1000),
            ecc_corrected_delta: Some(1),
            ..GpuRecord::default()
        }],
        xids: Vec::new(),
        xids_absent_reason: None,
        drained: None,
        drain_failed: None,
    }
}

fn ids(jobs: &[JobSummary]) -> Vec<&str> {
    jobs.iter().map(|j| j.job_id.as_str()).collect()
}

fn write_jobs_file(dir: &std::path::Path, lines: &[String]) {
    std::fs::write(dir.join(JOBS_FILE), lines.join("\n") + "\n").unwrap();
}

#[test]
fn summary_orders_by_last_end_and_ties_keep_first_appearance() {
    let records = [
        rec("b", "n1", None, 20),
        rec("a", "n1", None, 10),
        rec("c", "n1", None, 20),
        rec("a", "n2", None, 30),
        rec("d", "n1", None, 20),
    ];
    assert_eq!(ids(&summarize(&records)), ["b", "c", "d", "a"]);
}

#[test]
fn duplicates_count_once_and_big_jobs_keep_their_nodes() {
    let mut records: Vec<JobRecord> = (0..100)
        .map(|n| rec("big", &format!("n{n}"), Some("u"), 5))
        .collect();
    // The same record written twice, and a requeued run on a node again.
    records.push(rec("big", "n70", Some("u"), 5));
    records.push(rec("big", "n70", Some("u"), 9));
    let jobs = summarize(&records);
    assert_eq!(jobs.len(), 1);
    let j = &jobs[0];
    assert_eq!(j.nodes.len(), 100);
    assert_eq!(j.nodes[70], "n70");
    assert_eq!(j.gpus.len(), 101);
    assert_eq!(j.energy_j, Some(1.5 * 101.0));
    assert_eq!(j.ecc_corrected_delta, 101);
}

#[test]
fn many_jobs_are_grouped_in_linear_time() {
    // 60,000 jobs: a search of the job list per record (the old way)
    // makes 1.8e9 comparisons; a map makes 60,000 look-ups.
    let records: Vec<JobRecord> = (0..60_000u64)
        .map(|i| rec(&i.to_string(), "n1", None, 60_000 - i))
        .collect();
    let t = std::time::Instant::now();
    let jobs = summarize(&records);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(jobs.len(), 60_000);
    assert_eq!(jobs[0].job_id, "59999");
}

#[test]
fn peak_memory_share_is_the_first_largest_gpu() {
    let mut r = rec("1", "n1", None, 5);
    let g = |peak, total| GpuRecord {
        peak_memory_bytes: Some(peak),
        memory_total_bytes: Some(total),
        ..GpuRecord::default()
    };
    r.gpus = vec![g(50, 100), g(80, 100), g(80, 200)];
    let mut r2 = rec("1", "n2", None, 6);
    r2.gpus = vec![g(80, 400)];
    let j = &summarize(&[r, r2])[0];
    assert_eq!(
        (j.peak_memory_bytes, j.peak_memory_pct),
        (Some(80), Some(80.0))
    );
}

#[test]
fn filter_by_job_and_user_before_grouping() {
    let records = [
        rec("1", "n1", None, 10), // user unknown on this node
        rec("1", "n2", Some("alice"), 11),
        rec("2", "n1", Some("bob"), 12),
        rec("3", "n1", None, 13),        // no node knows the user
        rec("4", "n1", Some("bob"), 14), // records naming different users
        rec("4", "n2", Some("alice"), 15),
    ];
    let f = |job: Option<&str>, user: Option<&str>| ReportFilter {
        job: job.map(String::from),
        user: user.map(String::from),
        since_ms: None,
    };
    let alice = summarize_filtered(&records, &f(None, Some("alice")));
    assert_eq!(ids(&alice), ["1", "4"]);
    assert_eq!(alice[0].nodes, ["n1", "n2"], "user-less records count");
    assert_eq!(alice[1].nodes, ["n2"], "only alice's record of job 4");
    assert_eq!(alice[1].user.as_deref(), Some("alice"));
    let bob = summarize_filtered(&records, &f(None, Some("bob")));
    assert_eq!(ids(&bob), ["2", "4"]);
    assert_eq!(bob[1].nodes, ["n1"]);
    assert_eq!(
        ids(&summarize_filtered(&records, &f(Some("1"), None))),
        ["1"]
    );
    assert!(summarize_filtered(&records, &f(Some("2"), Some("alice"))).is_empty());
    // One user per job (the normal case): the same as filtering the sum.
    let consistent = &records[..4];
    for user in ["alice", "bob", "carol"] {
        let all: Vec<JobSummary> = summarize(consistent)
            .into_iter()
            .filter(|j| j.user.as_deref() == Some(user))
            .collect();
        assert_eq!(summarize_filtered(consistent, &f(None, Some(user))), all);
    }
}

#[test]
fn since_applies_to_the_last_end_of_the_job() {
    let records = [
        rec("1", "n1", None, 100),
        rec("1", "n2", None, 300), // job 1 ends at 300
        rec("2", "n1", None, 150),
        rec("3", "n1", None, 200),
    ];
    let since = ReportFilter {
        since_ms: Some(200),
        ..ReportFilter::default()
    };
    let jobs = summarize_filtered(&records, &since);
    assert_eq!(ids(&jobs), ["3", "1"]);
    assert_eq!(jobs[1].nodes, ["n1", "n2"], "the early node still counts");
    assert_eq!(jobs[1].start_ms, Some(90));
}

#[test]
fn job_precheck_never_drops_a_record_of_the_job() {
    let d = tempfile::tempdir().unwrap();
    let line = |job: &str, node: &str| rec(job, node, Some("u"), 7).to_line().unwrap();
    let plain = line("42", "a");
    let lines = vec![
        plain.clone(),
        line("420", "b"),
        line("4", "c"),
        line("7", "42"), // the id elsewhere in the line
        plain.replace("\"job_id\":\"42\"", "\"job_id\" :\t\"42\""),
        plain
            .replace("\"job_id\":\"42\"", "\"job_id\":\"4\\u0032\"")
            .replace("\"node\":\"a\"", "\"node\":\"e\""),
        plain
            .replace("\"job_id\"", "\"job\\u005fid\"")
            .replace("\"node\":\"a\"", "\"node\":\"f\""),
        format!(" {}", plain.replace("\"node\":\"a\"", "\"node\":\"g\"")),
    ];
    write_jobs_file(d.path(), &lines);
    let job = ReportFilter {
        job: Some("42".into()),
        ..ReportFilter::default()
    };
    for workers in [1, 3] {
        let read = read::read_records_with(d.path(), &job, workers);
        let nodes: Vec<&str> = read.records.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(nodes, ["a", "e", "f", "g"], "workers {workers}");
        assert_eq!(read.malformed, 0);
    }
    // A record as a JSON array (serde takes that too) is parsed, not skipped.
    let r = rec("42", "h", None, 7);
    let array = format!(
        "[1,\"42\",\"h\",null,null,null,null,{},7,0.01,false,null,null,[],[],null,null,null]",
        r.start_ms.unwrap()
    );
    assert_eq!(serde_json::from_str::<JobRecord>(&array).unwrap().node, "h");
    write_jobs_file(d.path(), &[array]);
    assert_eq!(read::read_records_with(d.path(), &job, 1).records.len(), 1);
}

#[test]
fn precheck_reads_the_value_after_the_key() {
    let job = ReportFilter {
        job: Some("42".into()),
        user: Some("bob".into()),
        since_ms: None,
    };
    let p = read::LinePrecheck::new(&job);
    assert!(p.may_keep(br#"{"job_id":"42","user":"bob"}"#));
    assert!(p.may_keep(br#"{"job_id":"42","user":null}"#));
    assert!(p.may_keep(br#"{"node":"job_id","job_id" : "42" ,"user": "bob"}"#));
    assert!(!p.may_keep(br#"{"job_id":"42","user":"bobby"}"#));
    assert!(!p.may_keep(br#"{"job_id":"421","user":"bob"}"#));
    assert!(!p.may_keep(br#"{"job_id":"4","user":"bob","x":"42"}"#));
    assert!(!p.may_keep(br#"{"user":"bob"}"#));
    assert!(
        p.may_keep(br#"{"job_id":"4\u0032","user":"bob"}"#),
        "escapes"
    );
    assert!(p.may_keep(br#"["42"]"#), "not an object");
    let all = ReportFilter::default();
    assert!(read::LinePrecheck::new(&all).may_keep(b"anything"));
}

#[test]
fn read_jobs_applies_every_filter_like_the_summary() {
    let d = tempfile::tempdir().unwrap();
    let records = [
        rec("1", "n1", None, 100),
        rec("1", "n2", Some("alice"), 300),
        rec("2", "n1", Some("bob"), 150),
        rec("3", "n1", Some("alice"), 200),
    ];
    let lines: Vec<String> = records.iter().map(|r| r.to_line().unwrap()).collect();
    write_jobs_file(d.path(), &lines);
    let filters = [
        ReportFilter::default(),
        ReportFilter {
            user: Some("alice".into()),
            since_ms: Some(250),
            ..ReportFilter::default()
        },
        ReportFilter {
            job: Some("2".into()),
            ..ReportFilter::default()
        },
    ];
    for f in &filters {
        for workers in [1, 2] {
            let read: ReadJobs = read::read_jobs_with(d.path(), f, workers);
            assert_eq!(read.jobs, summarize_filtered(&records, f), "{f:?}");
        }
    }
    let read = read_jobs::<Vec<SummaryGpu>>(d.path(), &filters[1]);
    assert_eq!(ids(&read.jobs), ["1"]);
}

#[test]
fn chunks_on_workers_keep_the_file_order() {
    let d = tempfile::tempdir().unwrap();
    // About 4 MiB: several chunks for the workers.
    let pad = "p".repeat(2000);
    let lines: Vec<String> = (0..2000)
        .map(|i| {
            let mut r = rec(&(i % 700).to_string(), &format!("n{}", i / 700), None, i);
            r.partition = Some(pad.clone());
            r.to_line().unwrap()
        })
        .collect();
    write_jobs_file(d.path(), &lines);
    let all = ReportFilter::default();
    let one = read::read_records_with(d.path(), &all, 1);
    let many = read::read_records_with(d.path(), &all, 4);
    assert_eq!(one.records.len(), 2000);
    assert_eq!(one.records, many.records);
    let jobs: ReadJobs = read::read_jobs_with(d.path(), &all, 4);
    assert_eq!(jobs.jobs, summarize(&one.records));
}

#[test]
fn overlong_lines_are_malformed_and_the_next_record_is_read() {
    let d = tempfile::tempdir().unwrap();
    let good = rec("1", "n1", None, 5).to_line().unwrap();
    let fits = format!("{good}{}", " ".repeat(MAX_LINE_BYTES - good.len()));
    let too_long = format!("{good}{}", " ".repeat(MAX_LINE_BYTES + 1 - good.len()));
    // A record longer than the read buffer is still one line.
    let mut wide = rec("2", "n1", None, 6);
    wide.partition = Some("w".repeat(200_000));
    let lines = [
        too_long.clone(),
        fits.replace("\"n1\"", "\"n2\""),
        "x".repeat(3 * MAX_LINE_BYTES),
        wide.to_line().unwrap(),
        too_long, // last, without a newline
    ];
    std::fs::write(d.path().join(JOBS_FILE), lines.join("\n")).unwrap();
    let read = read_records(d.path());
    assert_eq!(read.malformed, 3);
    let nodes: Vec<(&str, &str)> = read
        .records
        .iter()
        .map(|r| (r.job_id.as_str(), r.node.as_str()))
        .collect();
    assert_eq!(nodes, [("1", "n2"), ("2", "n1")]);
}

#[test]
fn record_files_must_be_regular_files() {
    let d = tempfile::tempdir().unwrap();
    let fifo = std::ffi::CString::new(
        d.path()
            .join(JOBS_FILE)
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::create_dir(d.path().join("jobs.jsonl.1")).unwrap();
    std::fs::write(
        d.path().join("elsewhere"),
        rec("1", "n", None, 1).to_line().unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink(d.path().join("elsewhere"), d.path().join("jobs.jsonl.2")).unwrap();
    // A FIFO without a writer would block a plain open forever.
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = d.path().to_path_buf();
    std::thread::spawn(move || tx.send(read_records(&dir)).unwrap());
    let read = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("reading a FIFO must not block");
    assert!(read.records.is_empty());
    let errors = &read.errors;
    assert_eq!(errors.len(), 3, "{errors:?}");
    for refused in [
        "jobs.jsonl: a FIFO, not read",
        "jobs.jsonl.1: a directory, not read",
        "jobs.jsonl.2: a symbolic link, not read",
    ] {
        assert!(errors.iter().any(|e| e.ends_with(refused)), "{errors:?}");
    }
}
