//! The journal as a kernel-log source, against real journal files:
//! Debian's systemd-journal-remote writes them from the journal export
//! format, journalctl reads them (no running journald needed). The test
//! command installs systemd-journal-remote.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_health_core::finding::Action;
use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};
use gpu_health_core::xid::{read_since, scan, Cursor, XidConfig, XidState, JOURNAL};

/// 2026-11-29T14:30:00Z
const NOW_MS: u64 = 1_795_962_600_000;
const BOOT: &str = "0123456789abcdef0123456789abcdef";

fn journal_remote() -> PathBuf {
    ["/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("systemd-journal-remote is needed (apt-get install systemd-journal-remote; ./ci/test installs it)")
}

/// One journal entry: (seconds before NOW, transport, message).
type Entry<'a> = (u64, &'a str, &'a str);

/// Append entries to the journal file `file` (created when missing).
fn write_journal(file: &Path, entries: &[Entry]) {
    let mut export: Vec<u8> = Vec::new();
    for (ago, transport, message) in entries {
        let us = (NOW_MS - ago * 1000) * 1000;
        let mut field = |k: &str, v: &[u8]| {
            if v.contains(&b'\n') {
                export.extend_from_slice(k.as_bytes());
                export.push(b'\n');
                export.extend_from_slice(&(v.len() as u64).to_le_bytes());
                export.extend_from_slice(v);
                export.push(b'\n');
            } else {
                export.extend_from_slice(format!("{k}=").as_bytes());
                export.extend_from_slice(v);
                export.push(b'\n');
            }
        };
        field("__REALTIME_TIMESTAMP", us.to_string().as_bytes());
        field(
            "__MONOTONIC_TIMESTAMP",
            (us % 1_000_000_000).to_string().as_bytes(),
        );
        field("_BOOT_ID", BOOT.as_bytes());
        field("_TRANSPORT", transport.as_bytes());
        if *transport != "kernel" {
            field("SYSLOG_IDENTIFIER", b"kernel");
        }
        field("MESSAGE", message.as_bytes());
        export.push(b'\n');
    }
    let src = file.with_extension("export");
    std::fs::write(&src, &export).unwrap();
    let out = Command::new(journal_remote())
        .arg(format!("--output={}", file.display()))
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn config(file: &Path) -> XidConfig {
    XidConfig {
        journal_path: Some(file.to_path_buf()),
        ..XidConfig::default()
    }
}

fn snapshot() -> NodeSnapshot {
    NodeSnapshot {
        gpus: vec![
            GpuSnapshot {
                index: 1,
                pci_bus_id: Some("0000:18:00.0".into()),
                ..GpuSnapshot::default()
            },
            GpuSnapshot {
                index: 3,
                pci_bus_id: Some("0000:b3:00.0".into()),
                ..GpuSnapshot::default()
            },
        ],
        ..NodeSnapshot::default()
    }
}

fn scan_journal(cfg: &XidConfig, state: XidState) -> gpu_health_core::xid::ScanOutcome {
    scan(Path::new(JOURNAL), state, cfg, &snapshot(), NOW_MS)
}

const LOST: &str = "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.";

#[test]
fn kernel_entries_only_from_the_saved_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.journal");
    write_journal(
        &file,
        &[
            // Older than the look-back: not judged on the first scan.
            (
                30 * 3600,
                "kernel",
                "NVRM: Xid (PCI:0000:18:00): 48, old DBE",
            ),
            (
                600,
                "kernel",
                "NVRM: Xid (PCI:0000:18:00): 31, pid=7, name=python3, MMU Fault",
            ),
            (590, "kernel", "e1000e 0000:00:1f.6 eno1: NIC Link is Up"),
            // `logger -t kernel` writes through syslog: not a kernel entry.
            (580, "syslog", "NVRM: Xid (PCI:0000:18:00): 79, forged"),
            (570, "stdout", "NVRM: Xid (PCI:0000:18:00): 79, forged too"),
        ],
    );
    let cfg = config(&file);
    let path = Path::new(JOURNAL);
    let a = read_since(path, None, &cfg, &snapshot(), NOW_MS).unwrap();
    let codes: Vec<u32> = a.events.iter().map(|e| e.code).collect();
    assert_eq!(codes, [31], "kernel entries of the look-back only");
    assert_eq!(a.events[0].gpu, Some(1));
    assert_eq!(a.events[0].time_ms, Some(NOW_MS - 600_000));
    assert!(!a.events[0].forgeable);
    let Some(Cursor::Journal { cursor }) = &a.cursor else {
        panic!("{:?}", a.cursor)
    };
    assert!(cursor.starts_with("s="), "{cursor}");
    // Nothing new: nothing read, the cursor stays.
    let b = read_since(path, a.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
    assert!(b.events.is_empty());
    assert_eq!(b.cursor, a.cursor);
    // New entries, among them the lost-GPU message as one entry with
    // newlines in its MESSAGE.
    write_journal(
        &file,
        &[
            (60, "kernel", LOST),
            (50, "syslog", "NVRM: Xid (PCI:0000:18:00): 48, forged"),
        ],
    );
    let c = read_since(path, b.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
    assert_eq!(c.events.len(), 1, "{:?}", c.events);
    assert!(c.events[0].fallen_off_bus && c.events[0].gpu == Some(3));
    assert_ne!(c.cursor, b.cursor);
    // Kernel entries without an NVIDIA record move the cursor too, so the
    // next scan does not search them again.
    write_journal(&file, &[(40, "kernel", "usb 1-1: new device")]);
    let d = read_since(path, c.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
    assert!(d.events.is_empty());
    assert_ne!(d.cursor, c.cursor, "past the skipped entry");
    let e = read_since(path, d.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
    assert_eq!(e.cursor, d.cursor);
}

#[test]
fn a_lost_gpu_in_the_journal_drains_and_a_bad_cursor_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.journal");
    write_journal(&file, &[(60, "kernel", LOST)]);
    let cfg = config(&file);
    let s = scan_journal(&cfg, XidState::fresh());
    assert_eq!(s.findings.len(), 1);
    assert_eq!(s.findings[0].action, Action::Drain);
    assert_eq!(
        s.findings[0].summary,
        "Xid 79 GPU3 0000:b3:00.0 fallen off the bus"
    );
    let stale = XidState {
        cursor: Some(Cursor::Journal {
            cursor: "not-a-cursor".into(),
        }),
        ..XidState::fresh()
    };
    let s = scan_journal(&cfg, stale);
    assert_eq!(
        s.findings.len(),
        1,
        "the look-back is read instead: {:?}",
        s.notes
    );
    assert!(
        s.notes.iter().any(|n| n.contains("cursor")),
        "{:?}",
        s.notes
    );
    assert!(matches!(s.state.cursor, Some(Cursor::Journal { .. })));
}

#[test]
fn no_journalctl_is_a_warning_not_a_drain() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = XidConfig {
        journalctl: dir.path().join("no-such-journalctl"),
        ..config(&dir.path().join("none.journal"))
    };
    let s = scan_journal(&cfg, XidState::fresh());
    assert_eq!(s.findings.len(), 1);
    assert_eq!(s.findings[0].action, Action::Warn);
    assert_eq!(s.findings[0].summary, "kernel log unreadable");
    assert_eq!(s.state.cursor, None);
}

/// An executable stand-in `name` in `dir` (for journalctl).
fn stand_in(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// One line of `journalctl -o json` for a kernel entry `i` seconds after
/// a minute before NOW.
fn json_entry(i: u64, message: &str) -> String {
    let us = (NOW_MS - 60_000 + i * 1000) * 1000;
    serde_json::json!({
        "__CURSOR": format!("s=standin;i={i}"),
        "__REALTIME_TIMESTAMP": us.to_string(),
        "__MONOTONIC_TIMESTAMP": (us % 1_000_000_000).to_string(),
        "_BOOT_ID": BOOT,
        "_TRANSPORT": "kernel",
        "MESSAGE": message,
    })
    .to_string()
}

const XID_79: &str =
    "NVRM: Xid (PCI:0000:b3:00): 79, pid=1234, name=python3, GPU has fallen off the bus.";

fn journal_cursor(s: &gpu_health_core::xid::ScanOutcome) -> &str {
    match s.cursor() {
        Some(Cursor::Journal { cursor }) => cursor,
        c => panic!("{c:?}"),
    }
}

/// Whether process `pid` is gone (or a zombie waiting for init).
fn gone(pid: i32) -> bool {
    (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(s) => s.contains(") Z "),
        }
    })
}

#[test]
fn an_endless_backlog_is_read_a_share_at_a_time() {
    // journalctl with an endless backlog after the cursor: an Xid 79,
    // then NVRM lines that are no Xids, for ever. The read takes its
    // share, stops journalctl, and moves the cursor to the last entry
    // it read; it never waits for the end of the backlog.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let filler = format!(
        "NVRM: nvAssertOkFailedNoLog: Assertion failed: {}",
        "0".repeat(3500)
    );
    std::fs::write(
        dir.path().join("endless.awk"),
        format!(
            "BEGIN {{ for (i = 2; ; i++) printf \"{{\\\"__CURSOR\\\":\\\"s=standin;i=%d\\\",\\\"__REALTIME_TIMESTAMP\\\":\\\"{}\\\",\\\"_TRANSPORT\\\":\\\"kernel\\\",\\\"MESSAGE\\\":\\\"{filler}\\\"}}\\n\", i }}\n",
            (NOW_MS - 30_000) * 1000
        ),
    )
    .unwrap();
    let journalctl = stand_in(
        dir.path(),
        "journalctl",
        &format!(
            "echo $$ > {d}/pid\nprintf '%s\\n' '{}'\nexec awk -f {d}/endless.awk",
            json_entry(1, XID_79)
        ),
    );
    let cfg = XidConfig {
        journalctl,
        journal_timeout_ms: 60_000,
        ..config(&dir.path().join("none.journal"))
    };
    let t0 = std::time::Instant::now();
    let s = scan_journal(&cfg, XidState::fresh());
    let took = t0.elapsed();
    assert_eq!(s.findings.len(), 1, "{:?} {:?}", s.findings, s.notes);
    assert_eq!(s.findings[0].action, Action::Drain);
    assert!(
        s.findings[0].summary.starts_with("Xid 79 GPU3"),
        "{:?}",
        s.findings
    );
    let cursor = journal_cursor(&s);
    let read: u64 = cursor
        .strip_prefix("s=standin;i=")
        .unwrap()
        .parse()
        .unwrap();
    // 64 MiB of 3.6 KB entries.
    assert!((10_000..30_000).contains(&read), "{cursor}");
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("the rest is read next time")),
        "{:?}",
        s.notes
    );
    assert!(took < std::time::Duration::from_secs(30), "{took:?}");
    let pid: i32 = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "journalctl stand-in {pid} still runs");
}

#[test]
fn a_read_cut_short_by_the_timeout_keeps_what_it_read() {
    // journalctl writes three entries and a cursor line, then hangs (and
    // from the cursor of the third, writes nothing and hangs): the read
    // keeps the entries, returns the cursor of the last one (not the
    // cursor line: journalctl did not end by itself) and says why.
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        json_entry(1, "usb 1-1: new high-speed USB device"),
        json_entry(2, XID_79),
        json_entry(3, "NVRM: GPU at PCI:0000:b3:00: GPU-4f1b2c3d"),
        "-- cursor: s=standin;i=99".to_string(),
    ];
    let quoted: Vec<String> = lines.iter().map(|l| format!("'{l}'")).collect();
    let journalctl = stand_in(
        dir.path(),
        "journalctl",
        &format!(
            "for a; do case \"$a\" in --after-cursor=*) exec sleep 30 ;; esac; done\n\
             printf '%s\\n' {}\nexec sleep 30",
            quoted.join(" ")
        ),
    );
    let cfg = XidConfig {
        journalctl,
        journal_timeout_ms: 1_000,
        ..config(&dir.path().join("none.journal"))
    };
    let t0 = std::time::Instant::now();
    let s = scan_journal(&cfg, XidState::fresh());
    let took = t0.elapsed();
    assert_eq!(s.findings.len(), 1, "{:?} {:?}", s.findings, s.notes);
    assert_eq!(s.findings[0].action, Action::Drain);
    assert_eq!(journal_cursor(&s), "s=standin;i=3");
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("did not finish within 1000 ms")),
        "{:?}",
        s.notes
    );
    assert!(took < std::time::Duration::from_secs(3), "{took:?}");
}

#[test]
fn a_journalctl_without_grep_is_read_without_it() {
    // journalctl built without PCRE2 refuses --grep: the same run reads
    // every kernel entry and picks the NVIDIA records itself.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.journal");
    write_journal(
        &file,
        &[
            (600, "kernel", "usb 1-1: new high-speed USB device"),
            (590, "kernel", XID_79),
            (580, "syslog", "NVRM: Xid (PCI:0000:18:00): 48, forged"),
            (570, "kernel", "e1000e 0000:00:1f.6 eno1: NIC Link is Up"),
        ],
    );
    let journalctl = stand_in(
        dir.path(),
        "journalctl",
        "for a; do case \"$a\" in --grep=*) echo 'Compiled without pattern matching support' >&2; exit 1 ;; esac; done\nexec journalctl \"$@\"",
    );
    let cfg = XidConfig {
        journalctl,
        ..config(&file)
    };
    let s = scan_journal(&cfg, XidState::fresh());
    assert_eq!(s.findings.len(), 1, "{:?} {:?}", s.findings, s.notes);
    assert_eq!(s.findings[0].action, Action::Drain);
    assert_eq!(s.findings[0].summary, "Xid 79 GPU3 0000:b3:00.0");
    let said: Vec<&String> = s
        .notes
        .iter()
        .filter(|n| n.contains("cannot filter"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", s.notes);
    assert!(said[0].contains("pattern matching"), "{said:?}");
    // The cursor is past the last kernel entry: nothing is read twice.
    let again = scan_journal(&cfg, s.state.clone());
    assert!(again.findings.is_empty(), "{:?}", again.findings);
    assert_eq!(again.cursor(), s.cursor());
    write_journal(&file, &[(60, "kernel", LOST)]);
    let later = scan_journal(&cfg, again.state.clone());
    assert_eq!(later.findings.len(), 1, "{:?}", later.notes);
    assert_ne!(later.cursor(), again.cursor());
}

#[test]
fn a_filter_that_finds_nothing_in_time_gives_way() {
    // journalctl --grep that is still searching (a long backlog without
    // NVIDIA records) when most of the time is spent: the rest of the
    // time reads without the filter, so the cursor moves.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.journal");
    write_journal(
        &file,
        &[
            (600, "kernel", "usb 1-1: new high-speed USB device"),
            (590, "kernel", XID_79),
        ],
    );
    let journalctl = stand_in(
        dir.path(),
        "journalctl",
        "for a; do case \"$a\" in --grep=*) exec sleep 30 ;; esac; done\nexec journalctl \"$@\"",
    );
    let cfg = XidConfig {
        journalctl,
        journal_timeout_ms: 2_000,
        ..config(&file)
    };
    let s = scan_journal(&cfg, XidState::fresh());
    assert_eq!(s.findings.len(), 1, "{:?} {:?}", s.findings, s.notes);
    assert_eq!(s.findings[0].action, Action::Drain);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("found nothing within 1500 ms")),
        "{:?}",
        s.notes
    );
    assert!(matches!(s.state.cursor, Some(Cursor::Journal { .. })));
}
