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
