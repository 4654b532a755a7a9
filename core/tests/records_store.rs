//! Storing job records: appends under the lock, the pending spool, and
//! reading back (malformed lines counted, duplicates once).

use std::path::{Path, PathBuf};

use gpu_health_core::ids::JobId;
use gpu_health_core::records::{
    flush_pending, read_records, store_line, JobRecord, Stored, RECORD_VERSION,
};
use gpu_health_core::state::{RecordsDir, StateDir, StateError, StateFile, RECORDS_FILE};

fn append_lines(dir: &Path, lines: &[String]) -> Result<(), StateError> {
    RecordsDir::open(dir)?.append(lines)
}

fn jobs_file(dir: &Path) -> PathBuf {
    dir.join(RECORDS_FILE)
}

fn job(n: u32) -> JobId {
    JobId::from(n)
}

fn record(job: &str, node: &str, end_ms: u64) -> JobRecord {
    JobRecord {
        version: RECORD_VERSION,
        job_id: job.into(),
        node: node.into(),
        user: Some("alice".into()),
        uid: Some(1000),
        partition: None,
        exit_code: Some(0),
        start_ms: Some(end_ms.saturating_sub(1000)),
        end_ms,
        duration_s: Some(1.0),
        start_snapshot_missing: false,
        start_snapshot_missing_reason: None,
        nvml_error: None,
        gpus: Vec::new(),
        xids: Vec::new(),
        xids_absent_reason: None,
        drained: None,
        drain_failed: None,
        peak_power_w: None,
    }
}

fn line(job: &str, node: &str, end_ms: u64) -> String {
    record(job, node, end_ms).to_line().unwrap()
}

#[test]
fn concurrent_appends_never_interleave() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("records");
    // Long lines (as 8-GPU records are) make torn writes visible.
    let pad = "x".repeat(6000);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (dir, pad) = (&dir, &pad);
            s.spawn(move || {
                for i in 0..40 {
                    let mut r = record(&format!("{t}{i:03}"), &format!("n{t}"), 1000 + i);
                    r.partition = Some(pad.clone());
                    append_lines(dir, &[r.to_line().unwrap()]).unwrap();
                }
            });
        }
    });
    let back = read_records(&dir);
    assert_eq!(back.malformed, 0);
    assert_eq!(back.records.len(), 320);
    let mode = std::fs::metadata(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o700);
}

#[test]
fn a_torn_last_line_does_not_swallow_the_next_record() {
    let d = tempfile::tempdir().unwrap();
    append_lines(d.path(), &[line("1", "n1", 5)]).unwrap();
    let f = jobs_file(d.path());
    let mut text = std::fs::read_to_string(&f).unwrap();
    text.push_str("{\"job_id\":\"2\",\"tor");
    std::fs::write(&f, text).unwrap();
    append_lines(d.path(), &[line("3", "n1", 7)]).unwrap();
    let back = read_records(d.path());
    assert_eq!(back.malformed, 1);
    let ids: Vec<_> = back.records.iter().map(|r| r.job_id.as_str()).collect();
    assert_eq!(ids, ["1", "3"]);
}

#[test]
fn unwritable_records_dir_spools_and_the_next_run_flushes() {
    let d = tempfile::tempdir().unwrap();
    let state = StateDir::open(&d.path().join("state"));
    let pending_dir = d.path().join("state/pending");
    let records = d.path().join("records");
    // A file where the directory should be: appends fail (root ignores
    // permission bits, so this is how a test makes the dir unusable).
    std::fs::write(&records, "not a dir").unwrap();
    let stored = store_line(&state, &records, 10, job(77), &line("77", "n1", 10));
    assert!(matches!(stored, Stored::Spooled { .. }), "{stored:?}");
    let stored = store_line(&state, &records, 11, job(78), &line("78", "n1", 11));
    assert!(matches!(stored, Stored::Spooled { .. }), "{stored:?}");
    assert!(flush_pending(&state, &records).is_err());
    assert_eq!(std::fs::read_dir(&pending_dir).unwrap().count(), 2);
    std::fs::remove_file(&records).unwrap();
    assert_eq!(flush_pending(&state, &records).unwrap(), 2);
    assert_eq!(std::fs::read_dir(&pending_dir).unwrap().count(), 0);
    let ids: Vec<_> = read_records(&records)
        .records
        .into_iter()
        .map(|r| r.job_id)
        .collect();
    assert_eq!(ids, ["77", "78"], "spooled records keep their order");
}

#[test]
fn nothing_to_flush_is_fine_and_duplicates_count_once() {
    let d = tempfile::tempdir().unwrap();
    let state = StateDir::open(&d.path().join("state"));
    assert_eq!(flush_pending(&state, &d.path().join("r")).unwrap(), 0);
    let l = line("5", "n1", 9);
    append_lines(d.path(), &[l.clone(), l, line("5", "n2", 9)]).unwrap();
    let back = read_records(d.path());
    assert_eq!(back.records.len(), 2);
}

#[test]
fn rotated_files_are_read_and_compressed_ones_skipped() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("jobs.jsonl.1"), line("1", "n", 1) + "\n").unwrap();
    std::fs::write(d.path().join("jobs.jsonl.2.gz"), "garbage").unwrap();
    std::fs::write(d.path().join("other.txt"), "garbage").unwrap();
    append_lines(d.path(), &[line("2", "n", 2)]).unwrap();
    let back = read_records(d.path());
    assert_eq!(back.malformed, 0);
    assert_eq!(back.records.len(), 2);
}

#[test]
fn records_file_symlink_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let dir = d.path().join("r");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&victim, jobs_file(&dir)).unwrap();
    assert!(append_lines(&dir, &[line("1", "n", 1)]).is_err());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}

#[test]
fn stale_start_snapshots_are_listed_fresh_ones_not() {
    use std::time::Duration;
    let d = tempfile::tempdir().unwrap();
    let state = StateDir::open(&d.path().join("state"));
    // Only names and times count here: any bytes will do.
    for f in [
        StateFile::JobStart(job(1)),
        StateFile::JobStart(job(2)),
        StateFile::JobVerdict(job(1)),
    ] {
        let p = state.path_of(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "1").unwrap();
    }
    for f in [StateFile::JobStart(job(1)), StateFile::JobVerdict(job(1))] {
        let g = std::fs::File::options()
            .write(true)
            .open(state.path_of(f))
            .unwrap();
        g.set_modified(std::time::SystemTime::now() - Duration::from_secs(90 * 86_400))
            .unwrap();
    }
    assert_eq!(
        state.stale_job_starts(Duration::from_secs(60 * 86_400)),
        vec![job(1)],
        "verdicts are the prolog's business"
    );
}
