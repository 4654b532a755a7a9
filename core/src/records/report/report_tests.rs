//! The report's reading, grouping and filtering of records.

use super::read;
use super::*;
use crate::records::{GpuRecord, JobRecord, RECORD_VERSION};
use crate::state::RECORDS_FILE as JOBS_FILE;

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
        peak_power_w: None,
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
        ..ReportFilter::default()
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
        ..ReportFilter::default()
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
