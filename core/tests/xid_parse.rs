//! Parser and reader over realistic samples of every supported format.

use std::path::{Path, PathBuf};

use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};
use gpu_health_core::xid::{
    parse_line, read_since, EventKind, Payload, Policy, PolicyAction, Stamp, XidConfig, XidEvent,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kmsg")
        .join(name)
}

/// 2026-11-29T14:30:00Z
const NOW_MS: u64 = 1_795_962_600_000;

fn snapshot() -> NodeSnapshot {
    let gpu = |index: u32, pci: &str| GpuSnapshot {
        index,
        uuid: Some(format!("GPU-{index:08}-0000-0000-0000-000000000000")),
        pci_bus_id: Some(pci.to_string()),
        ..GpuSnapshot::default()
    };
    NodeSnapshot {
        gpus: vec![
            gpu(1, "0000:18:00.0"),
            gpu(2, "0000:3b:00.0"),
            gpu(5, "0000:c1:00.0"),
            gpu(7, "0008:01:00.0"),
        ],
        ..NodeSnapshot::default()
    }
}

fn read_all(name: &str) -> Vec<XidEvent> {
    let cfg = XidConfig::default();
    read_since(&fixture(name), None, &cfg, &snapshot(), NOW_MS)
        .unwrap()
        .events
}

fn codes(events: &[XidEvent]) -> Vec<(EventKind, u32, Option<&str>)> {
    events
        .iter()
        .map(|e| (e.kind, e.code, e.pci.as_deref()))
        .collect()
}

#[test]
fn kmsg_dump_records_with_dictionary_lines() {
    let ev = read_all("kmsg-dump.txt");
    assert_eq!(
        codes(&ev),
        vec![
            (EventKind::Xid, 31, Some("0000:18:00.0")),
            (EventKind::Xid, 79, Some("0000:3b:00.0")),
            (EventKind::Xid, 94, Some("0008:01:00.0")),
            (EventKind::Xid, 79, Some("0000:b3:00.0")),
            (EventKind::Sxid, 12028, Some("0000:05:00.0")),
            (EventKind::Sxid, 24007, Some("0000:c5:00.0")),
            (EventKind::Xid, 48, Some("0000:b5:00.0")),
        ]
    );
    let x31 = &ev[0];
    assert_eq!(x31.pid, Some(51234));
    assert_eq!(x31.process.as_deref(), Some("python3"));
    assert_eq!(x31.gpu, Some(1));
    assert!(x31.uuid.as_deref().unwrap().starts_with("GPU-00000001"));
    assert_eq!(x31.seq, Some(1870));
    assert_eq!(x31.monotonic_us, Some(812_345_678));
    assert_eq!(x31.time_ms, None, "a dump has no boot time");
    assert!(x31
        .message
        .starts_with("Ch 00000008, intr 10000000. MMU Fault"));
    assert_eq!(ev[2].gpu, Some(7), "domain 0008 matched to NVML's bus id");
    assert!(ev[3].fallen_off_bus && ev[3].gpu.is_none());
    assert_eq!(ev[3].summary(), "Xid 79 0000:b3:00.0 fallen off the bus");
    let dbe = &ev[6];
    assert_eq!((dbe.pid, dbe.process.as_deref()), (None, None));
    assert!(dbe.message.starts_with("An uncorrectable double bit error"));
}

#[test]
fn user_space_writes_to_kmsg_are_not_xids() {
    assert!(read_all("kmsg-user-decoys.txt").is_empty());
}

#[test]
fn dmesg_monotonic_and_154() {
    let ev = read_all("dmesg.txt");
    assert_eq!(
        ev.iter().map(|e| e.code).collect::<Vec<_>>(),
        vec![31, 79, 94, 79, 12028, 48, 154]
    );
    assert_eq!(ev[1].pid, None);
    assert_eq!(ev[1].summary(), "Xid 79 GPU2 0000:3b:00.0");
    assert_eq!(ev[0].monotonic_us, Some(812_345_678));
    let policy = Policy::from_config(&XidConfig::default());
    assert_eq!(policy.decide(&ev[6]).action, PolicyAction::Drain);
}

#[test]
fn dmesg_t_local_wall_time() {
    let ev = read_all("dmesg-T.txt");
    assert_eq!(
        ev.iter().map(|e| e.code).collect::<Vec<_>>(),
        vec![31, 79, 94]
    );
    let t0 = ev[0].time_ms.unwrap();
    assert_eq!(ev[1].time_ms.unwrap() - t0, 1000);
    // Local time of some zone: within 15 h of the UTC reading.
    let utc = 1_795_960_801_000u64;
    assert!(t0.abs_diff(utc) <= 15 * 3_600_000, "{t0}");
    // The pid is the user's: kept for the node's log, never in a summary.
    assert_eq!(ev[1].summary(), "Xid 79 GPU2 0000:3b:00.0");
    assert_eq!(ev[1].pid, Some(2210));
}

#[test]
fn syslog_only_kernel_tag_counts() {
    let ev = read_all("syslog.txt");
    assert_eq!(
        codes(&ev),
        vec![
            (EventKind::Xid, 31, Some("0000:18:00.0")),
            (EventKind::Xid, 79, Some("0000:c1:00.0")),
            (EventKind::Xid, 79, Some("0000:c1:00.0")),
            (EventKind::Xid, 13, Some("0000:18:00.0")),
        ]
    );
    assert_eq!(ev[1].summary(), "Xid 79 GPU5 0000:c1:00.0");
    assert_eq!(ev[1].pid, Some(2210));
    assert!(ev[2].fallen_off_bus);
    assert_eq!(
        ev[2].summary(),
        "Xid 79 GPU5 0000:c1:00.0 fallen off the bus"
    );
    // Year inferred from "now"; the kernel's own [stamp] kept as monotonic.
    assert_eq!(ev[0].monotonic_us, None);
    let t = ev[0].time_ms.unwrap();
    assert!(NOW_MS - t < 16 * 3_600_000 + 1_800_000, "{t}");
    assert!(ev[3].time_ms.unwrap() < t, "Nov  9 is before Nov 29");
}

#[test]
fn journal_iso_time_stamps() {
    let ev = read_all("journal-iso.txt");
    assert_eq!(
        codes(&ev),
        vec![
            (EventKind::Xid, 43, Some("0000:18:00.0")),
            (EventKind::Xid, 45, Some("0000:18:00.0")),
            (EventKind::Sxid, 20034, Some("0000:88:00.0")),
        ]
    );
    assert_eq!(ev[0].time_ms, Some(1_795_960_801_123));
    assert_eq!(ev[1].time_ms, Some(1_795_960_801_000), "+0100 offset");
    assert_eq!(ev[2].time_ms, Some(1_795_960_804_500));
    assert_eq!(ev[2].gpu, None, "an NVSwitch is not a GPU");
    let policy = Policy::from_config(&XidConfig::default());
    let d = policy.decide(&ev[2]);
    assert_eq!(d.action, PolicyAction::Warn, "a syslog line cannot drain");
    assert!(d.forgeable_capped && ev[2].forgeable);
    let trusting = Policy::from_config(&XidConfig {
        syslog_may_drain: true,
        ..XidConfig::default()
    });
    assert_eq!(
        trusting.decide(&ev[2]).action,
        PolicyAction::Drain,
        "fatal SXid"
    );
}

#[test]
fn single_lines_of_every_wrapper() {
    let xid = |line: &str| match parse_line(line.as_bytes()).map(|r| r.payload) {
        Some(Payload::Xid { code, pci, .. }) => Some((code, pci)),
        _ => None,
    };
    let want = Some((79, Some("0000:3b:00.0".to_string())));
    let msg = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.";
    assert_eq!(xid(msg), want, "bare (journalctl -o cat)");
    assert_eq!(xid(&format!("<3>[  12.5] {msg}")), want, "dmesg -r");
    assert_eq!(xid(&format!("<11>[  12.5] {msg}")), None, "dmesg -r, user");
    assert_eq!(
        xid(&format!("kern  :err   : [  12.5] {msg}")),
        want,
        "dmesg -x"
    );
    assert_eq!(xid(&format!("user  :err   : [  12.5] {msg}")), None);
    assert_eq!(xid(&format!("3,5,12500000,-;{msg}\n")), want);
    assert_eq!(xid(&format!("3,5,12500000,-,caller=T12;{msg}")), want);
    assert_eq!(xid(&format!(" {msg}")), None, "continuation line");
    assert_eq!(
        xid("[ 1.0] NVRM: Xid (0000:3b:00): 79, old driver without PCI: tag"),
        want
    );
    assert_eq!(xid("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79"), want);
    assert_eq!(xid("[ 1.0] NVRM: Xid (PCI:0000:3b:00): abc, x"), None);
    assert_eq!(xid("[ 1.0] NVRM: Xid (PCI:0000:3b:00) 79, x"), None);
    assert_eq!(
        xid("Nov 29 14:00:01 host kernel:NVRM: Xid (PCI:0000:3b:00): 79"),
        None
    );
    let fields = |line: &[u8]| match parse_line(line).map(|r| (r.stamp, r.payload)) {
        Some((
            stamp,
            Payload::Xid {
                pid,
                process,
                message,
                ..
            },
        )) => (stamp, pid, process, message),
        other => panic!("{other:?}"),
    };
    let (stamp, pid, process, message) = fields(
        b"[ 812.5] NVRM: Xid (PCI:0000:3b:00): 31, pid=9, name=python3, Ch 00000008, intr 1",
    );
    assert_eq!(stamp, Stamp::Monotonic { us: 812_500_000 });
    assert_eq!(pid, Some(9));
    assert_eq!(process.as_deref(), Some("python3"));
    assert_eq!(message, "Ch 00000008, intr 1");
    // A name may hold `, ` itself: the driver's separator is the last one
    // a 15-byte name can reach, so the name never becomes message text
    // (a message whose own `, ` is that close loses its start instead).
    let (_, _, process, message) =
        fields(b"[ 812.5] NVRM: Xid (PCI:0000:3b:00): 13, pid=9, name=a, b, c");
    assert_eq!((process.as_deref(), message.as_str()), (Some("a, b"), "c"));
}

#[test]
fn non_utf8_bytes_are_tolerated() {
    let mut line =
        b"[ 1.0] NVRM: Xid (PCI:0000:3b:00): 31, pid=1, name=\xff\xfe, bad \xc3 bytes".to_vec();
    let r = parse_line(&line).expect("still an Xid");
    assert!(matches!(r.payload, Payload::Xid { code: 31, .. }));
    line[10] = 0xff;
    assert!(parse_line(&line).is_none());
}
