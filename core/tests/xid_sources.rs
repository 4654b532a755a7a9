//! The kernel log as real nodes write it: the lost-GPU message as one
//! multi-line record in every source's form, a record cut by a scan,
//! lines users can forge, over-long lines and storms.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gpu_health_core::finding::{drain_reason, Action};
use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};
use gpu_health_core::xid::{
    read_since, read_source, scan, Cursor, LogSource, MemoryRing, XidConfig, XidEvent, XidState,
    MAX_FINDINGS,
};

/// 2026-11-29T14:30:00Z
const NOW_MS: u64 = 1_795_962_600_000;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kmsg")
        .join(name)
}

fn snapshot() -> NodeSnapshot {
    let gpu = |index: u32, pci: &str| GpuSnapshot {
        index,
        pci_bus_id: Some(pci.to_string()),
        ..GpuSnapshot::default()
    };
    NodeSnapshot {
        gpus: vec![
            gpu(1, "0000:18:00.0"),
            gpu(3, "0000:b3:00.0"),
            gpu(4, "0000:5d:00.0"),
            gpu(5, "0000:c1:00.0"),
        ],
        ..NodeSnapshot::default()
    }
}

fn trusting() -> XidConfig {
    XidConfig {
        syslog_may_drain: true,
        ..XidConfig::default()
    }
}

fn lost(events: &[XidEvent]) -> Vec<(Option<u32>, bool)> {
    events
        .iter()
        .map(|e| {
            assert_eq!((e.code, e.fallen_off_bus), (79, true), "{e:?}");
            (e.gpu, e.forgeable)
        })
        .collect()
}

#[test]
fn lost_gpu_message_in_every_source_form() {
    let read = |name: &str| {
        read_since(&fixture(name), None, &trusting(), &snapshot(), NOW_MS)
            .unwrap()
            .events
    };
    // dmesg: indented continuation lines, new and old wording; the
    // "not supported" message and a continuation under a foreign record
    // are not lost GPUs.
    assert_eq!(
        lost(&read("lost-gpu-dmesg.txt")),
        [(Some(3), false), (Some(4), false)]
    );
    // /dev/kmsg: one record, newlines escaped as \x0a; a user's (facility
    // 1) copy of the message is not the kernel's.
    assert_eq!(
        lost(&read("lost-gpu-kmsg.txt")),
        [(Some(3), false), (Some(4), false)]
    );
    // rsyslog: #012 for each newline; a `user:` line is no kernel record.
    assert_eq!(
        lost(&read("lost-gpu-rsyslog.txt")),
        [(Some(3), true), (Some(4), true)]
    );
    // journalctl -k saved as text: indented like dmesg, under a syslog tag.
    assert_eq!(lost(&read("lost-gpu-journalctl.txt")), [(Some(3), true)]);
    // The live ring reads the same records as the dump.
    let dump = std::fs::read(fixture("lost-gpu-kmsg.txt")).unwrap();
    let mut ring = MemoryRing::from_dump(&dump);
    let events = read_source(
        LogSource::Kmsg(&mut ring),
        None,
        &trusting(),
        &snapshot(),
        NOW_MS,
    )
    .unwrap()
    .events;
    assert_eq!(lost(&events), [(Some(3), false), (Some(4), false)]);
}

#[test]
fn lost_gpu_message_drains_from_kernel_sources_and_warns_from_syslog() {
    let dir = tempfile::tempdir().unwrap();
    for (name, expected) in [
        ("lost-gpu-dmesg.txt", Action::Drain),
        ("lost-gpu-kmsg.txt", Action::Drain),
        ("lost-gpu-rsyslog.txt", Action::Warn),
        ("lost-gpu-journalctl.txt", Action::Warn),
    ] {
        let s = scan(
            &fixture(name),
            XidState::fresh(),
            &XidConfig {
                boot_id_path: dir.path().join("none"),
                ..XidConfig::default()
            },
            &snapshot(),
            NOW_MS,
        );
        let gravest = s.findings.iter().map(|f| f.action).max();
        assert_eq!(gravest, Some(expected), "{name}: {:?}", s.findings);
        if expected == Action::Drain {
            assert_eq!(
                drain_reason(&s.findings).unwrap(),
                "gpu-health: Xid 79 GPU3 0000:b3:00.0 fallen off the bus; Xid 79 GPU4 0000:5d:00.0 fallen off the bus (drain)",
                "{name}"
            );
        } else {
            assert!(
                s.findings[0].message.contains("xid.syslog_may_drain"),
                "{name}: the warning says why it does not drain"
            );
        }
    }
}

/// A first scan, default policy, of a log holding `text`.
fn first_scan_of(log: &Path, text: &str) -> gpu_health_core::xid::ScanOutcome {
    std::fs::write(log, text).unwrap();
    scan(
        log,
        XidState::fresh(),
        &XidConfig::default(),
        &snapshot(),
        NOW_MS,
    )
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn cursor_offset(c: Option<&Cursor>) -> u64 {
    match c {
        Some(Cursor::File { offset, .. }) => *offset,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_message_cut_by_the_end_of_a_scan_is_read_whole_next_time() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = XidConfig::default();
    for (first, rest) in [
        // One record with indented continuation lines.
        (
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n",
            "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n               NVRM: fallen off the bus and is not responding to commands.\n",
        ),
        // One record per line (older kernels and drivers).
        (
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n[ 1843.308146] NVRM: (PCI ID: 10de:26b5) installed in this system has\n",
            "[ 1843.308147] NVRM: fallen off the bus and is not responding to commands.\n",
        ),
    ] {
        let log = dir.path().join("kern.log");
        std::fs::write(&log, format!("[ 1.0] boot\n{first}")).unwrap();
        let a = read_since(&log, None, &cfg, &snapshot(), NOW_MS).unwrap();
        assert!(a.events.is_empty(), "{:?}", a.events);
        assert_eq!(
            cursor_offset(a.cursor.as_ref()),
            "[ 1.0] boot\n".len() as u64,
            "the cursor waits at the header"
        );
        append(&log, rest);
        let b = read_since(&log, a.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
        assert_eq!(lost(&b.events), [(Some(3), false)], "{first:?}");
        // And the next scan does not count it again.
        let c = read_since(&log, b.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
        assert!(c.events.is_empty());
    }
    // /dev/kmsg with one record per line: the cursor waits at the header's
    // sequence number.
    let header = "3,10,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\n";
    let fallen = "3,11,1843308150,-;NVRM: fallen off the bus and is not responding to commands.\n";
    let boot = std::fs::write(dir.path().join("boot_id"), "b1\n");
    boot.unwrap();
    let cfg = XidConfig {
        boot_id_path: dir.path().join("boot_id"),
        ..XidConfig::default()
    };
    let mut ring = MemoryRing::from_dump(header.as_bytes());
    let a = read_source(LogSource::Kmsg(&mut ring), None, &cfg, &snapshot(), NOW_MS).unwrap();
    assert!(a.events.is_empty());
    assert!(matches!(a.cursor, Some(Cursor::Kmsg { next_seq: 10, .. })));
    let mut ring = MemoryRing::from_dump(format!("{header}{fallen}").as_bytes());
    let b = read_source(
        LogSource::Kmsg(&mut ring),
        a.cursor.as_ref(),
        &cfg,
        &snapshot(),
        NOW_MS,
    )
    .unwrap();
    assert_eq!(lost(&b.events), [(Some(3), false)]);
    assert!(matches!(b.cursor, Some(Cursor::Kmsg { next_seq: 12, .. })));
}

#[test]
fn a_log_file_others_may_write_cannot_drain() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    std::fs::write(
        &log,
        "[  812.4] NVRM: Xid (PCI:0000:c1:00): 79, pid=2210, GPU has fallen off the bus.\n",
    )
    .unwrap();
    let judge = |cfg: &XidConfig| {
        let s = scan(&log, XidState::fresh(), cfg, &snapshot(), NOW_MS);
        (s.findings[0].action, s.notes.join("; "))
    };
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(judge(&XidConfig::default()).0, Action::Drain);
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (action, notes) = judge(&XidConfig::default());
    assert_eq!(action, Action::Warn);
    assert!(notes.contains("every user"), "{notes}");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o664)).unwrap();
    assert_eq!(judge(&XidConfig::default()).0, Action::Warn);
    assert_eq!(judge(&trusting()).0, Action::Drain, "the admin's opt-in");
}

#[test]
fn lines_longer_than_the_buffer_are_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    let cfg = XidConfig::default();
    // A user line of 5 MiB whose part past 4 MiB looks like an Xid record.
    let forged = "[  900.0] NVRM: Xid (PCI:0000:18:00): 48, forged DBE";
    let long = "x".repeat((4 << 20) - 3);
    let real = "[  901.0] NVRM: Xid (PCI:0000:c1:00): 79, GPU has fallen off the bus.\n";
    std::fs::write(
        &log,
        format!("[ 1.0] a{long}{forged}{}\n{real}", "y".repeat(1 << 20)),
    )
    .unwrap();
    let r = read_since(&log, None, &cfg, &snapshot(), NOW_MS).unwrap();
    let codes: Vec<u32> = r.events.iter().map(|e| e.code).collect();
    assert_eq!(codes, [79], "only the real record");
    // Still being written (no newline yet): the next scan starts at the
    // line, not in it.
    let log2 = dir.path().join("kern2.log");
    std::fs::write(&log2, format!("[ 1.0] ok\n[ 2.0] {long}")).unwrap();
    let a = read_since(&log2, None, &cfg, &snapshot(), NOW_MS).unwrap();
    assert_eq!(cursor_offset(a.cursor.as_ref()), "[ 1.0] ok\n".len() as u64);
    append(&log2, &format!("{forged}\n{real}"));
    let b = read_since(&log2, a.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
    let codes: Vec<u32> = b.events.iter().map(|e| e.code).collect();
    assert_eq!(codes, [79]);
}

#[test]
fn a_storm_of_distinct_events_keeps_the_draining_one_and_summarises() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    let mut text = String::from(
        "[  100.0] NVRM: Xid (PCI:0000:c1:00): 79, pid=2210, GPU has fallen off the bus.\n",
    );
    // 60,000 distinct (code, PCI) pairs of warn-class events.
    for i in 0..60_000u32 {
        let (bus, dev) = (i % 256, (i / 256) % 32);
        let code = [13, 45, 68, 94][(i % 4) as usize];
        text.push_str(&format!(
            "[  200.{i:06}] NVRM: Xid (PCI:{:04x}:{bus:02x}:{dev:02x}): {code}, pid={i}, storm\n",
            i / 8192
        ));
    }
    let s = first_scan_of(&log, &text);
    assert_eq!(
        drain_reason(&s.findings).unwrap(),
        "gpu-health: Xid 79 GPU5 0000:c1:00.0 (drain)"
    );
    assert!(s.findings.len() <= MAX_FINDINGS, "{}", s.findings.len());
    assert!(
        s.findings
            .iter()
            .any(|f| f.message.contains("events since the last check")),
        "folded counts are shown"
    );
    let total: u64 = s.events.iter().map(|e| e.count).sum();
    assert_eq!(total, 60_001, "every event is counted somewhere");
    assert!(s.events.len() <= gpu_health_core::xid::MAX_EVENTS);
    assert!(
        s.notes.iter().any(|n| n.contains("folded")),
        "{:?}",
        s.notes
    );
}

#[test]
fn more_findings_than_the_cap_become_one_summary_with_the_gravest_action() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    let mut text = String::new();
    for i in 0..40u32 {
        text.push_str(&format!(
            "[  200.{i:06}] NVRM: Xid (PCI:0000:{:02x}:00): 13, pid={i}, exception\n",
            i + 1
        ));
    }
    // A drain-class event among them, after the first 32.
    text.push_str("[  300.0] NVRM: Xid (PCI:0000:c1:00): 62, pid=1, halt\n");
    let s = first_scan_of(&log, &text);
    assert_eq!(s.findings.len(), MAX_FINDINGS);
    assert_eq!(s.findings[0].summary, "Xid 62 GPU5 0000:c1:00.0");
    let summary = s.findings.last().unwrap();
    assert_eq!(
        summary.summary,
        format!("Xid storm +{} more", 41 - (MAX_FINDINGS - 1))
    );
    assert_eq!(summary.action, Action::Warn);
    assert!(summary.message.contains("Xid 13"), "{}", summary.message);
}

#[test]
fn older_and_newer_wordings_of_a_lost_gpu_and_154() {
    use gpu_health_core::xid::{parse_line, recovery_action, Payload, PolicyAction};
    let pci = |line: &str| match parse_line(line.as_bytes()).map(|r| r.payload) {
        Some(Payload::FallenOff { pci }) => pci,
        other => panic!("{line}: {other:?}"),
    };
    // Older drivers: no Xid, the address after "GPU at".
    assert_eq!(
        pci("Sep 18 20:58:08 host kernel: [ 1936.510073] NVRM: GPU at 0000:01:00.0 has fallen off the bus."),
        Some("0000:01:00.0".into())
    );
    assert_eq!(
        pci("[6781741.548783] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus."),
        Some("0000:91:00.0".into())
    );
    // Upper-case hex and no `PCI:` prefix in the Xid address.
    match parse_line(b"[449410.3] NVRM: Xid (0000:D8:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error")
        .map(|r| r.payload)
    {
        Some(Payload::Xid { code, pci, .. }) => {
            assert_eq!((code, pci.as_deref()), (74, Some("0000:d8:00.0")))
        }
        other => panic!("{other:?}"),
    }
    // Labels newer drivers print: the number decides.
    for to in ["0x2 (OS Reboot)", "0x1 (PF FLR)", "0x4 (Drain and Reset)"] {
        let m = format!("GPU recovery action changed from 0x0 (None) to {to}");
        assert_eq!(recovery_action(&m), PolicyAction::Drain, "{to}");
    }
}
