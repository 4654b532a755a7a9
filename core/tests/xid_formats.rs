//! The kernel log as other sites write it (issue 25): every form of
//! util-linux's `dmesg` (`--decode`, each `--time-format`, the caller id),
//! Xids of a MIG GPU instance, dates in other languages or that cannot be
//! read at all, and SXid lines without the line that starts their report.

use std::path::{Path, PathBuf};

use gpu_health_core::finding::{drain_reason, Action};
use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};
use gpu_health_core::xid::{
    read_since, scan, EventKind, Policy, PolicyAction, Stamp, TimeContext, XidConfig, XidEvent,
    XidState,
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
            gpu(2, "0000:3b:00.0"),
            gpu(5, "0000:c1:00.0"),
        ],
        ..NodeSnapshot::default()
    }
}

fn read(name: &str) -> Vec<XidEvent> {
    read_since(
        &fixture(name),
        None,
        &XidConfig::default(),
        &snapshot(),
        NOW_MS,
    )
    .unwrap()
    .events
}

fn said(events: &[XidEvent]) -> Vec<(EventKind, u32, Option<&str>)> {
    events
        .iter()
        .map(|e| (e.kind, e.code, e.pci.as_deref()))
        .collect()
}

/// Unix ms of a UTC time.
fn utc_ms(y: i32, mo: u8, d: u8, h: u8, mi: u8, s: u8) -> u64 {
    let days = {
        // Days from 1970-01-01 (civil calendar).
        let (y, m) = if mo <= 2 {
            (i64::from(y) - 1, i64::from(mo) + 9)
        } else {
            (i64::from(y), i64::from(mo) - 3)
        };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * m + 2) / 5 + i64::from(d) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    };
    let secs = days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
    u64::try_from(secs * 1000).unwrap()
}

/// Unix ms of a local time, as the readers resolve it (the test's time
/// zone, whatever it is).
fn local_ms(year: Option<i32>, month: u8, day: u8, hour: u8, min: u8, sec: u8) -> Option<u64> {
    let ctx = TimeContext {
        boot_ms: None,
        now_ms: NOW_MS as i64,
    };
    let stamp = Stamp::Local {
        year,
        month,
        day,
        hour,
        min,
        sec,
        ms: 0,
    };
    ctx.resolve(&stamp).map(|t| t as u64)
}

/// `dmesg --decode --time-format iso` (the first form): each
/// `kern` record is read, its time from the ISO stamp; a record of any
/// other facility (`user`, `local0`, `syslog`: written from user space)
/// is never an Xid.
#[test]
fn dmesg_decode_iso_and_the_facility() {
    let ev = read("dmesg-decode-iso.txt");
    assert_eq!(
        said(&ev),
        [
            (EventKind::Xid, 79, Some("0000:3b:00.0")),
            (EventKind::Xid, 94, Some("0000:18:00.0")),
            (EventKind::Sxid, 20034, Some("0000:a9:00.0")),
            (EventKind::Xid, 79, Some("0000:c1:00.0")),
        ]
    );
    assert_eq!(ev[0].time_ms, Some(utc_ms(2025, 1, 21, 4, 41, 44) + 283));
    assert_eq!(
        ev[1].time_ms,
        Some(utc_ms(2025, 1, 21, 4, 41, 46) + 500),
        "+01:00"
    );
    assert!(ev[3].fallen_off_bus, "continuation lines joined");
    assert!(ev.iter().all(|e| !e.forgeable));
    assert_eq!(ev[0].summary(), "Xid 79 GPU2 0000:3b:00.0");
    let s = scan(
        &fixture("dmesg-decode-iso.txt"),
        XidState::fresh(),
        &XidConfig::default(),
        &snapshot(),
        NOW_MS,
    );
    // The look-back of a first scan is 24 h: these records are older.
    assert_eq!(s.skipped_old, 4, "{:?}", s.notes);
}

/// The same Xid in each of util-linux's time formats (raw, ctime, delta,
/// reltime, iso, notime, decoded, `-r`, the caller id, two formats at
/// once, ctime in other languages): every one is read; the time is known
/// where the format gives it, unknown where it does not or cannot be read.
#[test]
fn every_util_linux_time_format() {
    let ev = read("dmesg-time-formats.txt");
    let pids: Vec<u32> = ev.iter().map(|e| e.pid.unwrap()).collect();
    assert_eq!(pids, (1..=21).collect::<Vec<_>>(), "user records dropped");
    assert!(ev.iter().all(|e| e.code == 13 && !e.forgeable));
    let time = |pid: usize| ev[pid - 1].time_ms;
    let mono = |pid: usize| ev[pid - 1].monotonic_us;
    let ctime = local_ms(Some(2025), 1, 21, 4, 41, 44);
    assert!(ctime.is_some());
    for pid in [2, 3, 13, 17, 18, 19] {
        assert_eq!(time(pid), ctime, "pid {pid}");
    }
    for (pid, us) in [
        (1, 1_843_308_145),
        (4, 1_843_308_147),
        (12, 1_843_308_152),
        (14, 1_843_308_154),
        (15, 1_843_308_155),
    ] {
        assert_eq!((time(pid), mono(pid)), (None, Some(us)), "pid {pid}");
    }
    assert_eq!(time(6), local_ms(Some(2026), 1, 21, 4, 41, 0), "reltime");
    assert_eq!(time(9), Some(utc_ms(2025, 1, 21, 4, 41, 44) + 283), "iso");
    for pid in [5, 7, 8, 10, 11, 16, 20, 21] {
        assert_eq!((time(pid), mono(pid)), (None, None), "pid {pid}");
    }
}

/// journalctl and syslog write the month in the locale's words: known
/// ones give the time, any other date that cannot be read gives time
/// unknown. No Xid is lost for its date.
#[test]
fn localized_and_unreadable_dates_keep_the_event() {
    let ev = read("syslog-localized.txt");
    let pids: Vec<u32> = ev.iter().map(|e| e.pid.unwrap()).collect();
    assert_eq!(pids, (1..=11).collect::<Vec<_>>());
    assert!(ev
        .iter()
        .all(|e| e.code == 48 && e.gpu == Some(1) && e.forgeable));
    let year = Some(2026);
    for (i, want) in [
        local_ms(year, 4, 29, 14, 0, 1),
        local_ms(year, 3, 29, 14, 0, 2),
        local_ms(Some(2025), 12, 29, 14, 0, 3),
        local_ms(year, 4, 29, 14, 0, 4),
        local_ms(year, 11, 29, 14, 0, 5),
    ]
    .into_iter()
    .enumerate()
    {
        assert!(want.is_some());
        assert_eq!(ev[i].time_ms, want, "pid {}", i + 1);
    }
    for e in &ev[5..] {
        assert_eq!(e.time_ms, None, "pid {:?}: {}", e.pid, e.message);
    }
}

/// A first scan judges records of unknown time (it cannot know they are
/// old), and the cursor after it finds nothing new in the same file.
#[test]
fn unknown_times_are_judged_and_the_cursor_holds() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    std::fs::write(
        &log,
        "Απρ 29 14:00:06 gpu017 kernel: NVRM: Xid (PCI:0000:c1:00): 79, pid=1, GPU has fallen off the bus.\n\
         [Τρ 21 Ιαν 04:41:44 2025] NVRM: Xid (PCI:0000:3b:00): 48, pid=2, name=a, DBE\n",
    )
    .unwrap();
    let cfg = XidConfig {
        syslog_may_drain: true,
        ..XidConfig::default()
    };
    let s = scan(&log, XidState::fresh(), &cfg, &snapshot(), NOW_MS);
    assert_eq!(s.skipped_old, 0);
    assert_eq!(
        drain_reason(&s.findings).unwrap(),
        "gpu-health: Xid 79 GPU5 0000:c1:00.0; Xid 48 GPU2 0000:3b:00.0 (drain)"
    );
    let again = scan(&log, s.state.clone(), &cfg, &snapshot(), NOW_MS);
    assert!(again.events.is_empty() && again.findings.is_empty());
}

/// An Xid of a MIG GPU instance keeps its GPU, and the finding names the
/// instance as the driver does.
#[test]
fn mig_xids_name_the_gpu_instance() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    std::fs::write(
        &log,
        "[ 6001.0] NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid=7194, name=train, Contained: CE User Channel (0x9). RST: No, D-RST: No\n\
         [ 6002.0] NVRM: Xid (PCI:0000:c1:00 GPU-I:01 GPU-CI:02): 95, pid='<unknown>', name=<unknown>, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No\n",
    )
    .unwrap();
    let s = scan(
        &log,
        XidState::fresh(),
        &XidConfig::default(),
        &snapshot(),
        NOW_MS,
    );
    let summaries: Vec<&str> = s.findings.iter().map(|f| f.summary.as_str()).collect();
    assert_eq!(
        summaries,
        [
            "Xid 94 GPU2 0000:3b:00.0 GPU-I:05",
            "Xid 95 GPU5 0000:c1:00.0 GPU-I:01"
        ]
    );
    assert_eq!(
        drain_reason(&s.findings).unwrap(),
        "gpu-health: Xid 95 GPU5 0000:c1:00.0 GPU-I:01 (drain)"
    );
}

#[test]
fn mig_events_record_the_instance() {
    let ev = read("dmesg-decode-iso.txt");
    assert_eq!((ev[1].gpu, ev[1].gpu_instance), (Some(1), Some(5)));
    assert_eq!(ev[0].gpu_instance, None);
    assert_eq!(ev[1].place(), "Xid 94 GPU1 0000:18:00.0 GPU-I:05");
}

/// SXid lines as the NVSwitch driver prints them: the report's first
/// line, then `Severity ...` and `Data {...}` lines with the same code,
/// which belong to it. Without their first line they are the SXid: a lone
/// `Severity 1` (fatal) drains, a lone `Data` line warns.
#[test]
fn lone_sxid_lines_are_read_as_the_driver_prints_them() {
    let ev = read("sxid-lone.txt");
    assert_eq!(
        said(&ev),
        [
            (EventKind::Sxid, 12028, Some("0000:05:00.0")),
            (EventKind::Sxid, 20034, Some("0000:a9:00.0")),
            (EventKind::Sxid, 22013, Some("0000:a9:00.0")),
            (EventKind::Sxid, 12028, Some("0000:07:00.0")),
        ]
    );
    assert!(ev[0].message.starts_with("Non-fatal, Link 32"));
    assert!(ev[1].message.starts_with("Data {0x00000000, 0x00100000"));
    let policy = Policy::from_config(&XidConfig::default());
    let actions: Vec<PolicyAction> = ev.iter().map(|e| policy.decide(e).action).collect();
    assert_eq!(
        actions,
        [
            PolicyAction::Warn,
            PolicyAction::Warn,
            PolicyAction::Drain,
            PolicyAction::Warn
        ]
    );
    let s = scan(
        &fixture("sxid-lone.txt"),
        XidState::fresh(),
        &XidConfig::default(),
        &snapshot(),
        NOW_MS,
    );
    let gravest = s.findings.iter().map(|f| f.action).max();
    assert_eq!(gravest, Some(Action::Drain));
    assert_eq!(
        drain_reason(&s.findings).unwrap(),
        "gpu-health: SXid 22013 0000:a9:00.0 (drain)"
    );
}

/// A scan that ends between an SXid's first line and its detail lines
/// (the driver still writing): the next scan does not count the details
/// as an SXid of their own, in a file or the kmsg ring.
#[test]
fn an_sxid_report_cut_by_a_scan_counts_once() {
    use gpu_health_core::xid::{read_source, Cursor, LogSource, MemoryRing};
    let header = "nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM Fault Up";
    let severity = "nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 20034, Severity 1 Engine instance 30 Sub-engine instance 00";
    let data = "nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 20034, Data {0x00000000, 0x00100000}";
    let lone = "nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 22013, Data {0x00000001, 0x00000000}";
    let cfg = XidConfig::default();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    std::fs::write(&log, format!("[ 1.0] boot\n[ 2.0] {header}\n")).unwrap();
    let a = read_since(&log, None, &cfg, &snapshot(), NOW_MS).unwrap();
    assert_eq!(
        said(&a.events),
        [(EventKind::Sxid, 20034, Some("0000:a9:00.0"))]
    );
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(
        &mut f,
        format!("[ 2.1] {severity}\n[ 2.2] {data}\n[ 3.0] {lone}\n").as_bytes(),
    )
    .unwrap();
    let b = read_since(&log, a.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
    assert_eq!(
        said(&b.events),
        [(EventKind::Sxid, 22013, Some("0000:a9:00.0"))],
        "only the other code's lone line"
    );

    let boot = dir.path().join("boot_id");
    std::fs::write(&boot, "b1\n").unwrap();
    let cfg = XidConfig {
        boot_id_path: boot,
        ..XidConfig::default()
    };
    let ring = |lines: &[&str]| {
        let dump: String = lines
            .iter()
            .enumerate()
            .map(|(i, l)| format!("3,{},{},-;{l}\n", 10 + i, 1_000 + i))
            .collect();
        MemoryRing::from_dump(dump.as_bytes())
    };
    let mut first = ring(&[header]);
    let a = read_source(LogSource::Kmsg(&mut first), None, &cfg, &snapshot(), NOW_MS).unwrap();
    assert_eq!(a.events.len(), 1);
    assert!(matches!(a.cursor, Some(Cursor::Kmsg { next_seq: 11, .. })));
    let mut later = ring(&[header, severity, data, lone]);
    let b = read_source(
        LogSource::Kmsg(&mut later),
        a.cursor.as_ref(),
        &cfg,
        &snapshot(),
        NOW_MS,
    )
    .unwrap();
    assert_eq!(
        said(&b.events),
        [(EventKind::Sxid, 22013, Some("0000:a9:00.0"))]
    );
}
