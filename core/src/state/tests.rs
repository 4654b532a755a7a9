use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::*;

/// The tests' stand-in for a typed file of the node (the mechanism, not
/// the type, is under test).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Probe(Vec<i32>);

impl StateValue for Probe {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::EccHistory
    }
}

/// The same for a per-job file.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct PerJob(String);

impl StateValue for PerJob {
    type Key = JobId;
    fn file(job: JobId) -> StateFile {
        StateFile::JobStart(job)
    }
}

fn job(n: u32) -> JobId {
    JobId::from(n)
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// A run lock directory no test may reach.
const NO_FALLBACK: &str = "/nonexistent/gpu-health-run";

fn state() -> (tempfile::TempDir, StateDir) {
    let d = tempfile::tempdir().unwrap();
    let s = StateDir::open(&d.path().join("state"));
    assert_eq!(s.problem(), None);
    (d, s)
}

#[test]
fn atomic_write_replaces_and_reads_back() {
    let (_d, s) = state();
    s.save((), &Probe(vec![1, 2, 3])).unwrap();
    s.save((), &Probe(vec![4])).unwrap();
    assert_eq!(s.load::<Probe>(()).unwrap(), Some(Probe(vec![4])));
    assert_eq!(s.load::<PerJob>(job(1)).unwrap(), None);
    let names: Vec<_> = std::fs::read_dir(s.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temporary files left: {names:?}");
    assert_eq!(mode(&s.path_of(StateFile::EccHistory)), 0o600);
    assert_eq!(mode(s.root()), 0o700);
}

#[test]
fn job_files_live_in_their_subdirectory() {
    let (_d, s) = state();
    s.save_bytes(StateFile::JobVerdict(job(7)), b"\"v\"")
        .unwrap();
    s.save(job(7), &PerJob("s".into())).unwrap();
    assert!(s.root().join("jobs/7.json").is_file());
    assert!(s.root().join("jobs/7.start.json").is_file());
    assert_eq!(mode(&s.root().join("jobs")), 0o700);
    assert!(s.remove(StateFile::JobStart(job(7))).unwrap());
    assert!(!s.remove(StateFile::JobStart(job(7))).unwrap());
    assert_eq!(s.load::<PerJob>(job(8)).unwrap(), None);
}

#[test]
fn planted_symlink_is_refused_and_replaced_not_followed() {
    let (d, s) = state();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let p = s.path_of(StateFile::NodeSnapshot);
    std::os::unix::fs::symlink(&victim, &p).unwrap();
    assert!(matches!(
        s.load_bytes(StateFile::NodeSnapshot),
        Err(StateError::Unsafe { .. })
    ));
    s.save_bytes(StateFile::NodeSnapshot, b"1").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(!std::fs::symlink_metadata(&p)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn fifo_and_device_links_never_hang_or_grow() {
    let (_d, s) = state();
    s.save_bytes(StateFile::JobVerdict(job(1)), b"0").unwrap();
    let fifo = s.path_of(StateFile::JobVerdict(job(2)));
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/zero", s.path_of(StateFile::JobVerdict(job(3)))).unwrap();
    let t0 = Instant::now();
    assert!(matches!(
        s.load_bytes(StateFile::JobVerdict(job(2))),
        Err(StateError::Unsafe { .. })
    ));
    assert!(matches!(
        s.load_bytes(StateFile::JobVerdict(job(3))),
        Err(StateError::Unsafe { .. })
    ));
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn corrupt_and_oversized_files_are_errors() {
    let (_d, s) = state();
    let p = s.path_of(StateFile::EccHistory);
    std::fs::write(&p, "{\"trunc").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(matches!(
        s.load::<Probe>(()),
        Err(StateError::Corrupt { .. })
    ));
    let big = StateFile::SpooledRecord {
        end_ms: 1,
        job: job(1),
    };
    // Never written past its cap, never read past it.
    assert!(matches!(
        s.save_bytes(big, &vec![b' '; (2 << 20) as usize]),
        Err(StateError::Corrupt { .. })
    ));
    s.save_bytes(big, b"{}").unwrap();
    std::fs::write(s.path_of(big), vec![b' '; 2 << 20]).unwrap();
    assert!(matches!(s.load_bytes(big), Err(StateError::Corrupt { .. })));
}

#[test]
fn group_writable_files_are_refused() {
    let (_d, s) = state();
    s.save_bytes(StateFile::Ledger, b"1").unwrap();
    let p = s.path_of(StateFile::Ledger);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(matches!(
        s.load_bytes(StateFile::Ledger),
        Err(StateError::Unsafe { .. })
    ));
}

#[test]
fn an_unsafe_directory_is_neither_read_nor_written() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("state");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("ledger.json"), "{\"planted\":1}").unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = StateDir::open(&root);
    assert!(
        s.problem().unwrap().contains("writable"),
        "{:?}",
        s.problem()
    );
    assert_eq!(s.load_bytes(StateFile::Ledger).unwrap(), None);
    assert!(matches!(
        s.save((), &Probe(vec![1])),
        Err(StateError::Unusable { .. })
    ));
    assert!(matches!(
        s.remove(StateFile::Ledger),
        Err(StateError::Unusable { .. })
    ));
    assert!(matches!(
        s.rename(StateFile::Ledger, StateFile::LedgerUnreadable),
        Err(StateError::Unusable { .. })
    ));
    // The run lock is taken outside it (issue 35, item 5).
    let held = s.lock_run(Duration::ZERO, &d.path().join("run")).unwrap();
    assert!(held.is_some());
    assert!(!root.join("run.lock").exists());
    assert!(d.path().join("run/run.lock").is_file());
    assert!(root.join("ledger.json").exists());
    assert!(!root.join("ecc-history.json").exists());
}

#[test]
fn a_directory_owned_by_someone_else_is_unusable() {
    if dir::euid() != 0 {
        return; // only root can give a directory away
    }
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("state");
    std::fs::create_dir(&root).unwrap();
    std::os::unix::fs::chown(&root, Some(65534), None).unwrap();
    let s = StateDir::open(&root);
    assert!(s.problem().unwrap().contains("owned by uid 65534"));
}

#[test]
fn symlinked_state_dir_or_subdirectory_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("5.start.json"), "{}").unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    assert!(StateDir::open(&link).problem().unwrap().contains("symlink"));

    let s = StateDir::open(&d.path().join("state"));
    std::os::unix::fs::symlink(&elsewhere, s.root().join("jobs")).unwrap();
    assert!(matches!(
        s.load_bytes(StateFile::JobStart(job(5))),
        Err(StateError::Unsafe { .. })
    ));
    assert!(s.remove(StateFile::JobStart(job(5))).is_err());
    assert!(s.save(job(5), &PerJob("x".into())).is_err());
    assert!(elsewhere.join("5.start.json").exists());
    assert!(!elsewhere.join("5.json").exists());
}

#[test]
fn missing_directory_for_readers() {
    let d = tempfile::tempdir().unwrap();
    let s = StateDir::open_existing(&d.path().join("none"));
    assert_eq!(s.problem(), Some("does not exist"));
    assert_eq!(s.load_bytes(StateFile::NodeSnapshot).unwrap(), None);
    assert!(!d.path().join("none").exists());
}

#[test]
fn update_is_a_locked_read_change_write() {
    let (_d, s) = state();
    let r = s
        .update((), |v: Option<Probe>| {
            (
                Some(Probe(vec![v.map_or(0, |p| p.0.len() as i32) + 1])),
                "first",
            )
        })
        .unwrap();
    assert_eq!(r, "first");
    s.update((), |v: Option<Probe>| {
        (
            v.map(|mut p| {
                p.0.push(2);
                p
            }),
            (),
        )
    })
    .unwrap();
    assert_eq!(s.load::<Probe>(()).unwrap(), Some(Probe(vec![1, 2])));
    s.update((), |_: Option<Probe>| (None, ())).unwrap();
    assert!(!s.path_of(StateFile::EccHistory).exists());
}

#[test]
fn spool_listing_and_stale_starts() {
    let (_d, s) = state();
    assert!(s.spooled().unwrap().is_empty());
    let a = StateFile::SpooledRecord {
        end_ms: 20,
        job: job(2),
    };
    let b = StateFile::SpooledRecord {
        end_ms: 10,
        job: job(9),
    };
    s.save_bytes(a, b"{}").unwrap();
    s.save_bytes(b, b"{}").unwrap();
    std::fs::write(s.root().join("pending/garbage.json"), "x").unwrap();
    assert_eq!(s.spooled().unwrap(), vec![b, a]);
    let held = s.try_lock_spool().unwrap().unwrap();
    assert!(
        s.try_lock_spool().unwrap().is_none(),
        "second flusher waits"
    );
    drop(held);
    assert!(s.try_lock_spool().unwrap().is_some());

    s.save(job(3), &PerJob("1".into())).unwrap();
    assert!(s.stale_job_starts(Duration::from_secs(3600)).is_empty());
    assert_eq!(s.stale_job_starts(Duration::ZERO), vec![job(3)]);
}

#[test]
fn regular_files_outside_state() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("gpu-health.toml");
    std::fs::write(&f, "x = 1\n").unwrap();
    assert_eq!(read_regular_file(&f, 100).unwrap().unwrap(), b"x = 1\n");
    assert_eq!(
        read_regular_file(&d.path().join("none"), 100).unwrap(),
        None
    );
    assert!(read_regular_file(&f, 3).is_err());
    assert!(read_regular_file(d.path(), 100).is_err());
    assert!(read_regular_file(Path::new("/dev/zero"), 100).is_err());

    let prom = d.path().join("gpu-health.prom");
    write_file_atomic(&prom, b"x 1\n", 0o644).unwrap();
    assert_eq!(mode(&prom), 0o644);
    assert!(write_file_atomic(&d.path().join("no/such/dir/x.prom"), b"", 0o644).is_err());
}

#[test]
fn records_append_whole_lines() {
    let d = tempfile::tempdir().unwrap();
    let r = RecordsDir::open(&d.path().join("records")).unwrap();
    let file = d.path().join("records").join(RECORDS_FILE);
    r.append(&["{\"a\":1}".into()]).unwrap();
    std::fs::write(&file, "{\"a\":1}\n{\"torn").unwrap();
    r.append(&["{\"b\":2}".into(), "{\"c\":3}".into()]).unwrap();
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "{\"a\":1}\n{\"torn\n{\"b\":2}\n{\"c\":3}\n"
    );
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &file).unwrap();
    assert!(r.append(&["x".into()]).is_err());
}

#[test]
fn the_run_lock_makes_runs_take_turns_with_a_bounded_wait() {
    let (_d, s) = state();
    let held = s
        .lock_run(Duration::ZERO, Path::new(NO_FALLBACK))
        .unwrap()
        .unwrap();
    let t0 = Instant::now();
    assert!(matches!(
        s.lock_run(Duration::from_millis(100), Path::new(NO_FALLBACK)),
        Err(StateError::Busy { .. })
    ));
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    // A run holding its turn may still update a file under the
    // directory's own lock, and keeps its turn after.
    s.update((), |_: Option<Probe>| (Some(Probe(vec![1])), ()))
        .unwrap();
    assert!(
        s.lock_run(Duration::ZERO, Path::new(NO_FALLBACK)).is_err(),
        "still held"
    );
    drop(held);
    // A bounded wait: a program another test spawns at this moment holds
    // a copy of the lock's descriptor until its exec closes it.
    assert!(s
        .lock_run(Duration::from_secs(2), Path::new(NO_FALLBACK))
        .unwrap()
        .is_some());
    // The lock file is a regular file of ours, never a planted link.
    let lock = s.path_of(StateFile::RunLock);
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &lock).unwrap();
    assert!(matches!(
        s.lock_run(Duration::ZERO, Path::new(NO_FALLBACK)),
        Err(StateError::Unsafe { .. })
    ));
}

/// Issue 35, item 5: with the state directory unusable (here writable
/// by others) the runs still take turns, under `run.lock` in
/// `run_lock_dir`, with a bounded wait; that directory is checked as the
/// state directory is.
#[test]
fn an_unusable_state_dir_still_has_a_run_lock_outside_it() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("state");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = StateDir::open(&root);
    assert!(s.problem().is_some());
    let run = d.path().join("run");
    let held = s.lock_run(Duration::ZERO, &run).unwrap().unwrap();
    let other = StateDir::open(&root);
    let t0 = Instant::now();
    assert!(matches!(
        other.lock_run(Duration::from_millis(100), &run),
        Err(StateError::Busy { .. })
    ));
    assert!(t0.elapsed() >= Duration::from_millis(100));
    drop(held);
    assert!(other
        .lock_run(Duration::from_secs(2), &run)
        .unwrap()
        .is_some());
    // A run lock directory others may write is not used either.
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(other.lock_run(Duration::ZERO, &run).unwrap().is_none());
    // Nor one that is a symlink.
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&run, &link).unwrap();
    assert!(other.lock_run(Duration::ZERO, &link).unwrap().is_none());
}

#[test]
fn a_file_is_renamed_within_the_directory_only() {
    let (_d, s) = state();
    s.save_bytes(StateFile::Ledger, b"{}").unwrap();
    s.rename(StateFile::Ledger, StateFile::LedgerUnreadable)
        .unwrap();
    assert!(!s.path_of(StateFile::Ledger).exists());
    assert_eq!(
        s.load_bytes(StateFile::LedgerUnreadable).unwrap().unwrap(),
        b"{}"
    );
    assert!(s
        .rename(StateFile::JobStart(job(1)), StateFile::Ledger)
        .is_err());
}
