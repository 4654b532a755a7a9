//! Node scan: cursors of files and of the kmsg ring, look-back, policy,
//! repeat rules, corrupt state.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gpu_health_core::finding::{drain_reason, Action};
use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};
use gpu_health_core::state::{StateDir, StateError, StateFile};
use gpu_health_core::xid::{
    self, read_since, Cursor, LogSource, MemoryRing, PolicyAction, ScanOutcome, XidConfig, XidRule,
    XidState,
};

/// The node's saved Xid state, as the run layer loads it from the state
/// directory holding `cursor`: missing, corrupt or unsafe means a fresh
/// start, with a note.
fn saved(cursor: &Path) -> (XidState, Option<String>) {
    let state = StateDir::open(cursor.parent().unwrap());
    match state.load::<XidState>(()) {
        Ok(s) => XidState::checked(s),
        Err(e) => (XidState::fresh(), Some(format!("Xid cursor unusable: {e}"))),
    }
}

fn scan_source(
    source: LogSource<'_>,
    cursor: &Path,
    cfg: &XidConfig,
    snap: &NodeSnapshot,
    now_ms: u64,
) -> ScanOutcome {
    let (state, note) = saved(cursor);
    let mut out = xid::scan_source(source, state, cfg, snap, now_ms);
    out.notes.extend(note);
    out
}

fn scan(
    log: &Path,
    cursor: &Path,
    cfg: &XidConfig,
    snap: &NodeSnapshot,
    now_ms: u64,
) -> ScanOutcome {
    scan_source(LogSource::Path(log), cursor, cfg, snap, now_ms)
}

/// What a run does after acting: save the scan's state.
fn commit(cursor: &Path, state: &XidState) -> Result<(), StateError> {
    StateDir::open(cursor.parent().unwrap()).save((), state)
}

/// 2026-11-29T14:30:00Z
const NOW_MS: u64 = 1_795_962_600_000;
const HOUR_MS: u64 = 3_600_000;

fn snapshot() -> NodeSnapshot {
    NodeSnapshot {
        gpus: vec![
            GpuSnapshot {
                index: 1,
                pci_bus_id: Some("0000:18:00.0".into()),
                ..GpuSnapshot::default()
            },
            GpuSnapshot {
                index: 5,
                pci_bus_id: Some("0000:c1:00.0".into()),
                ..GpuSnapshot::default()
            },
        ],
        ..NodeSnapshot::default()
    }
}

fn append(path: &Path, text: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Syslog line at `mins_ago` minutes before NOW (UTC ISO stamp).
fn iso_line(mins_ago: i64, msg: &str) -> String {
    let t = (NOW_MS as i64 - mins_ago * 60_000) as u64 / 1000;
    let days = t / 86_400;
    let secs = t % 86_400;
    // NOW is 2026-11-29; the tests stay within a few days of it.
    let day = 29 - (20_786 - days);
    format!(
        "2026-11-{day:02}T{:02}:{:02}:{:02}+00:00 gpu017 kernel: {msg}\n",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

const X79: &str = "NVRM: Xid (PCI:0000:c1:00): 79, pid=2210, GPU has fallen off the bus.";
const X31: &str = "NVRM: Xid (PCI:0000:18:00): 31, pid=77, name=python3, MMU Fault";
const NOISE: &str = "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex";

struct Env {
    _dir: tempfile::TempDir,
    log: PathBuf,
    cursor: PathBuf,
    cfg: XidConfig,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    // The cursor tests write syslog lines: let them act as the kernel's
    // (`forgeable_syslog_lines_warn_unless_trusted` tests the default).
    let cfg = XidConfig {
        boot_id_path: dir.path().join("boot_id"),
        uptime_path: dir.path().join("uptime"),
        syslog_may_drain: true,
        ..XidConfig::default()
    };
    std::fs::write(&cfg.boot_id_path, "3f1c2a5e-0000-4000-8000-000000000001\n").unwrap();
    std::fs::write(&cfg.uptime_path, "7200.00 14000.00\n").unwrap();
    Env {
        log: dir.path().join("kern.log"),
        cursor: StateDir::open(&dir.path().join("state")).path_of(StateFile::KernelLogCursor),
        _dir: dir,
        cfg,
    }
}

#[test]
fn iso_helper_is_right() {
    assert_eq!(
        iso_line(30, "x"),
        "2026-11-29T14:00:00+00:00 gpu017 kernel: x\n"
    );
    assert!(iso_line(25 * 60, "x").starts_with("2026-11-28T13:30:00"));
}

#[test]
fn file_scan_reads_only_what_is_new_and_waits_for_commit() {
    let e = env();
    append(&e.log, &iso_line(50, NOISE));
    append(&e.log, &iso_line(40, X79));
    let first = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(first.events.len(), 1);
    assert_eq!(first.findings.len(), 1);
    let f = &first.findings[0];
    assert_eq!(f.summary, "Xid 79 GPU5 0000:c1:00.0");
    assert_eq!(
        (f.check.as_str(), f.action, f.gpu),
        ("xid", Action::Drain, Some(5))
    );
    assert!(
        f.message.contains("GPU has fallen off the bus"),
        "{}",
        f.message
    );
    assert_eq!(
        drain_reason(&first.findings).unwrap(),
        "gpu-health: Xid 79 GPU5 0000:c1:00.0 (drain)"
    );

    // Not committed: the next scan sees the Xid again.
    let again = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(again.events.len(), 1);
    commit(&e.cursor, &again.state).unwrap();
    let mode = std::fs::metadata(&e.cursor).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let quiet = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert!(quiet.events.is_empty() && quiet.findings.is_empty());

    // A line still being written is left for the next scan.
    append(&e.log, &iso_line(5, X31)[..30]);
    let partial = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert!(partial.events.is_empty());
    commit(&e.cursor, &partial.state).unwrap();
    append(&e.log, &iso_line(5, X31)[30..]);
    let done = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(done.events.len(), 1);
    assert_eq!(done.findings[0].action, Action::DrainUntilClean);
    assert_eq!(done.findings[0].summary, "Xid 31 GPU1 0000:18:00.0");
}

#[test]
fn truncated_and_rewritten_files_start_over() {
    let e = env();
    append(&e.log, &iso_line(40, NOISE).repeat(20));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    commit(&e.cursor, &s.state).unwrap();
    // Truncated (copytruncate), then a new Xid.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&e.log)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&e.log, &iso_line(10, X79));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(s.events.len(), 1);
    assert!(
        s.notes.iter().any(|n| n.contains("truncated")),
        "{:?}",
        s.notes
    );
    commit(&e.cursor, &s.state).unwrap();
    // Rewritten in place at the same length: the tail hash notices.
    let text = std::fs::read_to_string(&e.log).unwrap();
    std::fs::write(&e.log, text.replace("pid=2210", "pid=2211")).unwrap();
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert!(
        s.notes.iter().any(|n| n.contains("rewritten")),
        "{:?}",
        s.notes
    );
    assert_eq!(s.events[0].pid, Some(2211));
}

#[test]
fn rotation_finishes_the_old_file_then_reads_the_new() {
    let e = env();
    append(&e.log, &iso_line(40, NOISE));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    commit(&e.cursor, &s.state).unwrap();
    append(&e.log, &iso_line(30, X31));
    let rotated = e.log.with_file_name("kern.log.1");
    std::fs::rename(&e.log, &rotated).unwrap();
    append(&e.log, &iso_line(20, X79));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    let codes: Vec<u32> = s.events.iter().map(|e| e.code).collect();
    assert_eq!(codes, vec![31, 79]);
    assert!(s.notes.iter().any(|n| n.contains("rotated")));
}

#[test]
fn first_run_judges_only_the_look_back() {
    let e = env();
    append(&e.log, &iso_line(30 * 60, X79)); // 30 h ago
    append(&e.log, &iso_line(60, X31)); // 1 h ago
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(
        s.events.iter().map(|e| e.code).collect::<Vec<_>>(),
        vec![31]
    );
    assert_eq!(s.skipped_old, 1);
    let cfg = XidConfig {
        lookback_hours: 48,
        ..e.cfg.clone()
    };
    let s = scan(&e.log, &e.cursor, &cfg, &snapshot(), NOW_MS);
    assert_eq!(s.events.len(), 2);
}

#[test]
fn first_run_dates_monotonic_records_from_the_end_of_the_file() {
    let e = env();
    let old = "[  100.000000] NVRM: Xid (PCI:0000:c1:00): 79, GPU has fallen off the bus.\n";
    let new = "[190000.000000] NVRM: Xid (PCI:0000:18:00): 31, pid=5, MMU Fault\n";
    let last = "[200000.000000] usb 1-1: USB disconnect, device number 2\n";
    append(&e.log, &format!("{old}{new}{last}"));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(
        s.events.iter().map(|e| e.code).collect::<Vec<_>>(),
        vec![31]
    );
}

#[test]
fn corrupt_cursor_is_reported_and_replaced() {
    let e = env();
    append(&e.log, &iso_line(30 * 60, X79));
    append(&e.log, &iso_line(10, X31));
    std::fs::write(&e.cursor, b"{\"version\":1,\"cursor\":{\"source\":\"fi").unwrap();
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert!(
        s.notes.iter().any(|n| n.contains("corrupt")),
        "{:?}",
        s.notes
    );
    assert_eq!(s.events.len(), 1, "fresh start uses the look-back");
    commit(&e.cursor, &s.state).unwrap();
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert!(s.notes.is_empty() && s.events.is_empty(), "{:?}", s.notes);
}

#[test]
fn cursor_symlink_is_not_followed() {
    let e = env();
    let target = e.cursor.with_file_name("elsewhere");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, &e.cursor).unwrap();
    append(&e.log, &iso_line(10, X31));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert!(!s.notes.is_empty());
    commit(&e.cursor, &s.state).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    assert!(!std::fs::symlink_metadata(&e.cursor)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn unreadable_log_is_a_warning_not_a_drain() {
    let e = env();
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(s.findings.len(), 1);
    assert_eq!(s.findings[0].summary, "kernel log unreadable");
    assert_eq!(s.findings[0].action, Action::Warn);
    assert!(drain_reason(&s.findings).is_none());
}

#[test]
fn overrides_and_repeat_rule() {
    let mut e = env();
    e.cfg.actions.insert("79".into(), PolicyAction::Ignore);
    e.cfg.rules.insert(
        "31".into(),
        XidRule {
            action: Some(PolicyAction::Drain),
            repeat: 3,
            window_minutes: 60,
            // Only the repeat rule here (xid_rules.rs tests escalation).
            escalate_after: Some(0),
            ..XidRule::default()
        },
    );
    e.cfg.validate().unwrap();
    append(&e.log, &iso_line(50, X79));
    append(&e.log, &iso_line(50, X31));
    append(&e.log, &iso_line(40, X31));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(s.events.len(), 3);
    assert_eq!(s.findings.len(), 1, "79 ignored");
    assert_eq!(s.findings[0].action, Action::Info);
    assert!(s.findings[0].message.contains("2 of 3 within 60 min"));
    commit(&e.cursor, &s.state).unwrap();
    // Third one within the hour: the rule fires.
    append(&e.log, &iso_line(5, X31));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(s.findings[0].action, Action::Drain);
    commit(&e.cursor, &s.state).unwrap();
    // Two hours later one more: the window has moved on.
    append(&e.log, &iso_line(-120, X31));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS + 2 * HOUR_MS);
    assert_eq!(s.findings[0].action, Action::Info);
}

fn kmsg_ring(records: &[(u64, u64, &str)]) -> MemoryRing {
    let text: String = records
        .iter()
        .map(|(seq, us, msg)| format!("3,{seq},{us},-;{msg}\n SUBSYSTEM=pci\n"))
        .collect();
    MemoryRing::from_dump(text.as_bytes())
}

#[test]
fn kmsg_ring_cursor_reboot_wrap_and_cursor_ahead() {
    let e = env();
    let snap = snapshot();
    // Boot 1: 7200 s of uptime; an Xid 79 at 7000 s and one at 100 s
    // (2 h ago, inside the look-back).
    let mut ring = kmsg_ring(&[(10, 100_000_000, X31), (11, 7_000_000_000, X79)]);
    let s = scan_source(LogSource::Kmsg(&mut ring), &e.cursor, &e.cfg, &snap, NOW_MS);
    assert_eq!(s.events.len(), 2);
    assert_eq!(
        s.events[1].time_ms,
        Some(NOW_MS - 200_000),
        "boot time = now - uptime"
    );
    assert_eq!(s.events[1].seq, Some(11));
    commit(&e.cursor, &s.state).unwrap();
    let Some(Cursor::Kmsg { next_seq, .. }) = s.cursor() else {
        panic!("{:?}", s.cursor())
    };
    assert_eq!(*next_seq, 12);

    // Same boot, the ring wrapped: seq 12..=14 were lost, then 15.
    let mut ring =
        kmsg_ring(&[(15, 7_100_000_000, X31), (16, 7_100_000_100, NOISE)]).overwrite_before(0);
    let s = scan_source(LogSource::Kmsg(&mut ring), &e.cursor, &e.cfg, &snap, NOW_MS);
    assert_eq!(s.events.len(), 1);
    assert_eq!(s.lost_records, 3);
    assert!(s.notes.iter().any(|n| n.contains("overwritten")));
    commit(&e.cursor, &s.state).unwrap();

    // Cursor ahead of the ring (not the ring it was taken on).
    let mut ring = kmsg_ring(&[(3, 50_000_000, X79)]);
    let s = scan_source(LogSource::Kmsg(&mut ring), &e.cursor, &e.cfg, &snap, NOW_MS);
    assert_eq!(s.events.len(), 1);
    assert!(s.notes.iter().any(|n| n.contains("ahead")), "{:?}", s.notes);
    commit(&e.cursor, &s.state).unwrap();

    // Reboot: a new boot id; the new ring starts at seq 0 again.
    std::fs::write(
        &e.cfg.boot_id_path,
        "3f1c2a5e-0000-4000-8000-000000000002\n",
    )
    .unwrap();
    let mut ring = kmsg_ring(&[
        (0, 1_000, NOISE),
        (1, 2_000_000, X79),
        (2, 3_000_000, NOISE),
    ]);
    let s = scan_source(LogSource::Kmsg(&mut ring), &e.cursor, &e.cfg, &snap, NOW_MS);
    assert_eq!(s.events.len(), 1);
    assert!(
        s.notes.iter().any(|n| n.contains("rebooted")),
        "{:?}",
        s.notes
    );
    commit(&e.cursor, &s.state).unwrap();
    let mut ring = kmsg_ring(&[(1, 2_000_000, X79), (2, 3_000_000, NOISE)]);
    let s = scan_source(LogSource::Kmsg(&mut ring), &e.cursor, &e.cfg, &snap, NOW_MS);
    assert!(s.events.is_empty() && s.notes.is_empty(), "{:?}", s.notes);
}

#[test]
fn kmsg_first_run_look_back_uses_boot_time() {
    let e = env();
    std::fs::write(&e.cfg.uptime_path, "200000.00 1.00\n").unwrap();
    let mut ring = kmsg_ring(&[(1, 1_000_000_000, X79), (2, 199_000_000_000, X31)]);
    let s = scan_source(
        LogSource::Kmsg(&mut ring),
        &e.cursor,
        &e.cfg,
        &snapshot(),
        NOW_MS,
    );
    assert_eq!(
        s.events.iter().map(|e| e.code).collect::<Vec<_>>(),
        vec![31]
    );
}

#[test]
fn epilog_reads_between_cursors_without_touching_the_node_cursor() {
    let e = env();
    append(&e.log, &iso_line(50, X31));
    let prolog = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    commit(&e.cursor, &prolog.state).unwrap();
    let job_start: Cursor =
        serde_json::from_str(&serde_json::to_string(prolog.cursor().unwrap()).unwrap()).unwrap();
    append(&e.log, &iso_line(20, X79));
    let during = read_since(&e.log, Some(&job_start), &e.cfg, &snapshot(), NOW_MS).unwrap();
    assert_eq!(during.events.len(), 1);
    assert_eq!(during.events[0].gpu, Some(5));
    assert_ne!(during.cursor.as_ref(), Some(&job_start));
    // The node cursor still stands at the job start.
    let next = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(next.events.len(), 1);
}

#[test]
fn xid_storm_is_folded_not_lost() {
    let e = env();
    let mut text = iso_line(50, X79);
    let x13 = iso_line(
        40,
        "NVRM: Xid (PCI:0000:18:00): 13, pid=9, Graphics Exception",
    );
    text.push_str(&x13.repeat(gpu_health_core::xid::MAX_EVENTS + 10_000));
    append(&e.log, &text);
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert!(s.events.len() <= gpu_health_core::xid::MAX_EVENTS);
    assert_eq!(s.events[0].code, 79, "the early Xid 79 survives the storm");
    assert!(
        s.notes.iter().any(|n| n.contains("folded")),
        "{:?}",
        s.notes
    );
    assert_eq!(
        drain_reason(&s.findings).unwrap(),
        "gpu-health: Xid 79 GPU5 0000:c1:00.0 (drain)"
    );
}

#[test]
fn fallen_off_line_without_its_header_still_counts() {
    let e = env();
    append(
        &e.log,
        "[ 10.0] NVRM: fallen off the bus and is not responding to commands.\n",
    );
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(s.findings.len(), 1);
    assert_eq!(s.findings[0].summary, "Xid 79 fallen off the bus");
    assert_eq!(s.findings[0].action, Action::Drain);
    // Beside an Xid 79 it adds nothing.
    append(&e.log, &format!("[ 11.0] {X79}\n"));
    let s = scan(&e.log, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
    assert_eq!(s.events.len(), 2);
    assert_eq!(s.findings.len(), 1);
    assert_eq!(s.findings[0].summary, "Xid 79 GPU5 0000:c1:00.0");
}

#[test]
fn a_kernel_log_that_is_no_log_is_an_error_not_a_hang() {
    let e = env();
    let fifo = e.log.with_file_name("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let dir = e.log.with_file_name("a-directory");
    std::fs::create_dir(&dir).unwrap();
    let t0 = std::time::Instant::now();
    for p in [
        fifo.as_path(),
        &dir,
        Path::new("/dev/zero"),
        Path::new("/dev/null"),
    ] {
        let r = read_since(p, None, &e.cfg, &snapshot(), NOW_MS);
        let err = r.expect_err("not a kernel log").to_string();
        assert!(
            err.contains("neither /dev/kmsg nor a regular file"),
            "{err}"
        );
        let s = scan(p, &e.cursor, &e.cfg, &snapshot(), NOW_MS);
        assert_eq!(s.findings[0].summary, "kernel log unreadable");
    }
    assert!(t0.elapsed() < std::time::Duration::from_secs(1));
}
