//! `journalctl` text in every form it prints (issue 36): `-o short`,
//! `short-iso`, `short-iso-precise`, `short-precise`, `short-monotonic`,
//! `short-unix`, `short-full`, each with and without `--no-hostname`;
//! `-k -o cat`; and a screen of the pager that cut long lines. The
//! fixtures are journalctl's own output (tests/fixtures/journalctl/README.md).

use std::path::{Path, PathBuf};

use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::xid::{read_since, EventKind, XidConfig, XidEvent};

/// 2026-11-29T14:30:00Z
const NOW_MS: u64 = 1_795_962_600_000;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/journalctl")
        .join(name)
}

fn read(name: &str) -> Vec<XidEvent> {
    read_since(
        &fixture(name),
        None,
        &XidConfig::default(),
        &NodeSnapshot::default(),
        NOW_MS,
    )
    .unwrap()
    .events
}

/// The kernel's four Xids of the journal, in order (the two a program
/// wrote, `python3[4242]:` and `kernel[4243]:`, are not among them).
const KERNEL_XIDS: [(u32, &str); 4] = [
    (43, "0000:00:05.0"),
    (31, "0000:00:07.0"),
    (94, "0000:00:08.0"),
    (109, "0000:cb:00.0"),
];

fn said(ev: &[XidEvent]) -> Vec<(u32, &str)> {
    ev.iter()
        .map(|e| {
            assert_eq!(e.kind, EventKind::Xid);
            (e.code, e.pci.as_deref().unwrap_or("?"))
        })
        .collect()
}

/// Unix ms of 2026-11-29T13:30:<sec>.<ms>Z.
fn at(sec: u64, ms: u64) -> Option<u64> {
    Some(NOW_MS - 3_600_000 + sec * 1000 + ms)
}

#[test]
fn every_short_form_with_and_without_the_host_gives_the_kernel_xids() {
    for form in [
        "short",
        "short-iso",
        "short-iso-precise",
        "short-precise",
        "short-monotonic",
        "short-unix",
        "short-full",
    ] {
        for name in [format!("{form}.txt"), format!("{form}-no-hostname.txt")] {
            let ev = read(&name);
            assert_eq!(said(&ev), KERNEL_XIDS, "{name}");
            // A syslog-shaped line may have been written by anyone: it
            // warns and never drains by itself.
            assert!(ev.iter().all(|e| e.forgeable), "{name}");
            assert_eq!(ev[0].pid, Some(1_045_242), "{name}");
            assert_eq!(ev[0].process.as_deref(), Some("pt_main_thread"), "{name}");
            assert_eq!(ev[0].message, "Ch 00000008", "{name}");
        }
    }
}

#[test]
fn each_form_keeps_its_time() {
    let cases: [(&str, Option<u64>); 6] = [
        ("short-no-hostname.txt", at(1, 0)),
        ("short-precise-no-hostname.txt", at(1, 200)),
        ("short-iso-no-hostname.txt", at(1, 0)),
        ("short-iso-precise.txt", at(1, 200)),
        ("short-unix-no-hostname.txt", at(1, 200)),
        ("short-full-no-hostname.txt", at(1, 0)),
    ];
    for (name, time) in cases {
        assert_eq!(read(name)[0].time_ms, time, "{name}");
    }
    for name in ["short-monotonic.txt", "short-monotonic-no-hostname.txt"] {
        assert_eq!(read(name)[0].monotonic_us, Some(813_444_301), "{name}");
    }
}

#[test]
fn the_kernels_journal_as_cat_and_as_the_pager_cut_it() {
    let ev = read("cat-k.txt");
    assert_eq!(said(&ev), KERNEL_XIDS);
    assert!(ev[1].message.ends_with("ACCESS_TYPE_VIRT_WRITE"));
    // `less -S` marks a cut line with `>`: each record is read up to it.
    let ev = read("short-k-paged.txt");
    assert_eq!(said(&ev), KERNEL_XIDS);
    assert_eq!(ev[0].pid, Some(1_045_242));
    assert!(ev.iter().all(|e| e.forgeable));
}

/// A line cut inside the code gives no code at all (never a shorter one),
/// and a program's own tag before `kernel:` never passes for the host.
#[test]
fn cut_codes_and_programs_posing_as_the_host_are_not_read() {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("journal.txt");
    std::fs::write(
        &log,
        "Nov 29 13:30:01 gpu017 kernel: NVRM: Xid (PCI:0000:00:05): 4>\n\
         Nov 29 13:30:02 job[77]: kernel: NVRM: Xid (PCI:0000:00:05): 79, pid=1, name=x, y\n\
         [  814.700000] job[77]: kernel: NVRM: Xid (PCI:0000:00:05): 79, pid=1, name=x, y\n\
         1795959002.500000 job[77]: NVRM: Xid (PCI:0000:00:05): 79, pid=1, name=x, y\n\
         Sun 2026-11-29 13:30:02 UTC gpu017 job[77]: NVRM: Xid (PCI:0000:00:05): 79, pid=1, name=x, y\n",
    )
    .unwrap();
    let ev = read_since(
        &log,
        None,
        &XidConfig::default(),
        &NodeSnapshot::default(),
        NOW_MS,
    )
    .unwrap()
    .events;
    assert!(ev.is_empty(), "{ev:?}");
}
