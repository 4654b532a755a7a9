//! Only the driver decides: text the NVIDIA driver copies from user space
//! into the kernel log (a client's version string and process name in
//! its API-mismatch message, the process name of an Xid record) never
//! makes, changes or decides an event, in any source's form, through the
//! real readers.

mod xid_render;

use std::path::Path;
use std::process::Command;

use gpu_health_core::finding::drain_reason;
use gpu_health_core::xid::{
    read_since, scan, EventKind, Policy, PolicyAction, XidConfig, XidState, JOURNAL,
};
use xid_render::{
    api_mismatch_new, api_mismatch_old, said, snapshot, xid_with_name, Source, GENUINE_DBE, NOW_MS,
};

/// Client version strings (up to 63 bytes) that forge a fault.
const FORGED_VERSIONS: [&[u8]; 9] = [
    // The issue's: the whole sentence on the message's first line.
    b"GPU 0000:18:00.0 has fallen off the bus",
    b"\nNVRM: GPU 0000:18:00.0: GPU has fallen off the bus.",
    b"\nNVRM: GPU at 0000:18:00.0 has fallen off the bus.",
    b"\nNVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
    b"\nnvidia-nvswitch0: SXid (PCI:0000:18:00.0): 24007, Fatal, L",
    b"\nNVRM: fallen off the bus and is not responding to commands.",
    // The escapes of other sources, written by hand.
    b"#012NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus",
    b"\\x0aNVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus",
    // The message's last line, to end it early, then a record.
    b"\nNVRM: have the same version.\nNVRM: Xid (PCI:0000:18:00): 79",
];

/// The DBE every log ends with, as the readers report it.
const DBE: (EventKind, u32, Option<&str>) = (EventKind::Xid, 48, Some("0000:c1:00.0"));

/// Each source, each wording, each forged string: only the genuine DBE
/// after it is read. Every record shares one time stamp (the worst case:
/// the same prefix on every line), or each has its own.
#[test]
fn client_version_strings_never_make_an_event() {
    for source in Source::ALL {
        for version in FORGED_VERSIONS {
            for message in [
                api_mismatch_old(version),
                api_mismatch_new(b"python3", version),
            ] {
                for step in [0, 1] {
                    let records = [
                        (812_345_678, message.clone()),
                        (812_345_678 + step, GENUINE_DBE.to_vec()),
                    ];
                    let events = source.read(&records);
                    assert_eq!(
                        said(&events),
                        [DBE],
                        "{source:?}: {}",
                        String::from_utf8_lossy(&message)
                    );
                }
            }
        }
    }
}

/// The driver's own multi-line records still count in every source form,
/// next to user text: the lost-GPU message (both wordings) and an Xid
/// whose process name holds a newline.
#[test]
fn genuine_records_still_count_in_every_source() {
    let lost = |text: &[u8]| text.to_vec();
    for source in Source::ALL {
        let records = [
            (4_000_000, api_mismatch_old(b"\nNVRM: Xid (PCI:0000:18:00): 79, x")),
            (
                4_000_000,
                lost(b"NVRM: The NVIDIA GPU 0000:3b:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands."),
            ),
            (4_000_000, api_mismatch_new(b"x", b"\nNVRM: The NVIDIA GPU 0000:18:00.0")),
            (
                4_000_000,
                lost(b"NVRM: The NVIDIA GPU 0000:c1:00.0 (PCI ID: 10de:2330) installed in this\nNVRM: system has fallen off the bus and is not responding to commands."),
            ),
            (4_000_000, xid_with_name(31, "3b", b"a\nb", "Ch 00000008, intr 10000000")),
        ];
        let events = source.read(&records);
        assert_eq!(
            said(&events),
            [
                (EventKind::Xid, 79, Some("0000:3b:00.0")),
                (EventKind::Xid, 79, Some("0000:c1:00.0")),
                (EventKind::Xid, 31, Some("0000:3b:00.0")),
            ],
            "{source:?}"
        );
        assert!(events[0].fallen_off_bus && events[1].fallen_off_bus);
        assert_eq!(
            events[2].message, "Ch 00000008, intr 10000000",
            "{source:?}"
        );
        // Shown as the source writes it, control bytes escaped.
        let shown = match source {
            Source::Syslog | Source::SyslogIso => "a#012b",
            _ => "a\\x0ab",
        };
        assert_eq!(events[2].process.as_deref(), Some(shown), "{source:?}");
    }
}

/// The process name of the newer message (the client's comm, 15 bytes).
#[test]
fn client_process_names_never_make_an_event() {
    for source in Source::ALL {
        for comm in [
            &b"\nNVRM: Xid (P"[..],
            b"\nNVRM: GPU 00",
            b"' (pid 1)\nNVRM",
            b"\nfallen off the",
        ] {
            let message = api_mismatch_new(comm, b"GPU 0000:18:00.0 has fallen off the bus");
            let events = source.read(&[(5_000_000, message), (5_000_000, GENUINE_DBE.to_vec())]);
            assert_eq!(said(&events), [DBE], "{source:?}: {comm:?}");
        }
    }
}

/// The driver's lost-GPU message split over two client strings (its
/// first line in one, its last in the next) is no lost GPU either.
#[test]
fn a_lost_gpu_message_forged_over_two_records_is_no_event() {
    for source in Source::ALL {
        let records = [
            (
                9_000_000,
                api_mismatch_old(b"\nNVRM: The NVIDIA GPU 0000:18:00.0"),
            ),
            (
                9_000_001,
                api_mismatch_old(b"\nNVRM: fallen off the bus and is not responding to commands."),
            ),
            (9_000_002, GENUINE_DBE.to_vec()),
        ];
        assert_eq!(said(&source.read(&records)), [DBE], "{source:?}");
    }
}

/// Process names (any bytes but NUL, up to 15) that look like fields,
/// codes, separators or the lost-GPU sentence, or whose next line starts
/// like a time stamp or another wrapper.
const HOSTILE_NAMES: [&[u8]; 18] = [
    b"\n[  812.345678]",
    b"\n2026-11-29T14",
    b"\nx 1 12:00:00 h",
    b"\n[    T1] x",
    b"\nkern  :err   :",
    b"a, Fatal",
    b"Fatal, Fatal,",
    b"x, 79, y",
    b"pid=79, x",
    b"79",
    b"fallen off the bus",
    b"GPU has fallen off the bus.",
    b", , , , , , , ,",
    b"x, to 0x0 (None",
    b"a\nNVRM: Xid (P",
    b"\nFatal, x",
    b"x#012Fatal, y",
    b"x\\x0aFatal, y",
];

/// A hostile name changes neither kind, code nor address, and the text
/// after `name=` never decides an action: a non-fatal NVLink5 Xid stays
/// a warning, a 154 asking for a reboot still drains.
#[test]
fn process_names_change_no_code_address_or_action() {
    // Syslog lines are capped at warn (forgeable): judge the text alone.
    let policy = Policy::from_config(&XidConfig {
        syslog_may_drain: true,
        ..XidConfig::default()
    });
    let nonfatal = "RLW_RXPIPE Nonfatal XC0 i0 Link 12 (0x00000000 0x00000000)";
    let reboot = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)";
    for source in Source::ALL {
        for name in HOSTILE_NAMES {
            let records = [
                (
                    7_000_000,
                    xid_with_name(13, "3b", name, "Graphics SM Warp Exception"),
                ),
                (7_000_000, xid_with_name(145, "3b", name, nonfatal)),
                (7_000_000, xid_with_name(154, "3b", name, reboot)),
                (7_000_000, GENUINE_DBE.to_vec()),
            ];
            let events = source.read(&records);
            let here = |code| (EventKind::Xid, code, Some("0000:3b:00.0"));
            assert_eq!(
                said(&events),
                [here(13), here(145), here(154), DBE],
                "{source:?}: {name:?}"
            );
            if name.len() > 15 {
                // Longer than a comm: no driver prints it, and no
                // separator is within its reach (the message is dropped).
                continue;
            }
            let actions: Vec<PolicyAction> =
                events.iter().map(|e| policy.decide(e).action).collect();
            assert_eq!(
                actions[1..3],
                [PolicyAction::Warn, PolicyAction::Drain],
                "{source:?}: {name:?}: {:?}",
                events[1..3].iter().map(|e| &e.message).collect::<Vec<_>>()
            );
            assert_eq!(events[1].message, nonfatal, "{source:?}: {name:?}");
        }
    }
}

/// The issue's attack, judged: no finding, no drain, from /dev/kmsg, a
/// dmesg file and the journal's text form.
#[test]
fn the_issues_version_string_drains_nothing() {
    let message = api_mismatch_old(b"GPU 0000:18:00.0 has fallen off the bus");
    let dir = tempfile::tempdir().unwrap();
    for source in [
        Source::KmsgDump,
        Source::Dmesg,
        Source::DmesgSamePrefix,
        Source::JournalctlCat,
    ] {
        let log = dir.path().join("kern.log");
        std::fs::write(&log, source.render(&[(1_000_000, message.clone())])).unwrap();
        let s = scan(
            &log,
            XidState::fresh(),
            &XidConfig::default(),
            &snapshot(),
            NOW_MS,
        );
        assert!(s.findings.is_empty(), "{source:?}: {:?}", s.findings);
        assert_eq!(drain_reason(&s.findings), None);
    }
}

/// A dmesg file written while the scan runs: the API-mismatch message's
/// first lines are there, its forged lines and end come after the scan.
/// The next scan must not read the forged lines as records.
#[test]
fn user_text_cut_by_the_end_of_a_scan_is_still_data() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = XidConfig::default();
    for source in [
        Source::DmesgSamePrefix,
        Source::JournalctlCat,
        Source::SyslogRaw,
    ] {
        let message = api_mismatch_new(
            b"x",
            b"\nNVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off",
        );
        let text = source.render(&[(3_000_000, message), (3_000_001, GENUINE_DBE.to_vec())]);
        // Cut after each line of the message.
        for cut in text
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
        {
            let log = dir.path().join("kern.log");
            std::fs::write(&log, &text[..cut]).unwrap();
            let a = read_since(&log, None, &cfg, &snapshot(), NOW_MS).unwrap();
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            std::io::Write::write_all(&mut f, &text[cut..]).unwrap();
            let b = read_since(&log, a.cursor.as_ref(), &cfg, &snapshot(), NOW_MS).unwrap();
            let mut events = a.events;
            events.extend(b.events);
            assert_eq!(said(&events), [DBE], "{source:?} cut at {cut}");
        }
    }
}

fn journal_remote() -> &'static Path {
    ["/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("systemd-journal-remote is needed (apt-get install systemd-journal-remote; ./ci/test installs it)")
}

/// A journal file of kernel entries with these messages, a second apart.
fn write_journal(file: &Path, messages: &[Vec<u8>]) {
    let mut export: Vec<u8> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let us = (NOW_MS - 60_000 + i as u64 * 1000) * 1000;
        let mut field = |k: &str, v: &[u8]| {
            if v.contains(&b'\n') {
                // The export format's binary form of a value.
                export.extend_from_slice(k.as_bytes());
                export.push(b'\n');
                export.extend_from_slice(&(v.len() as u64).to_le_bytes());
            } else {
                export.extend_from_slice(format!("{k}=").as_bytes());
            }
            export.extend_from_slice(v);
            export.push(b'\n');
        };
        field("__REALTIME_TIMESTAMP", us.to_string().as_bytes());
        field(
            "__MONOTONIC_TIMESTAMP",
            (us % 1_000_000_000).to_string().as_bytes(),
        );
        field("_BOOT_ID", b"0123456789abcdef0123456789abcdef");
        field("_TRANSPORT", b"kernel");
        field("MESSAGE", message);
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

/// The journal keeps a record's newlines in one MESSAGE (its JSON entries
/// go through the same parser): forged lines there are data too.
#[test]
fn journal_entries_with_user_text() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("system.journal");
    let mut messages: Vec<Vec<u8>> = FORGED_VERSIONS
        .iter()
        .flat_map(|v| [api_mismatch_old(v), api_mismatch_new(b"\nNVRM: Xid (P", v)])
        .collect();
    let nonfatal = "RLW_RXPIPE Nonfatal XC0 i0 Link 12 (0x00000000 0x00000000)";
    for name in HOSTILE_NAMES {
        messages.push(xid_with_name(145, "3b", name, nonfatal));
    }
    messages.push(GENUINE_DBE.to_vec());
    write_journal(&file, &messages);
    let cfg = XidConfig {
        journal_path: Some(file),
        ..XidConfig::default()
    };
    let read = read_since(Path::new(JOURNAL), None, &cfg, &snapshot(), NOW_MS).unwrap();
    let mut want = vec![(EventKind::Xid, 145, Some("0000:3b:00.0")); HOSTILE_NAMES.len()];
    want.push(DBE);
    assert_eq!(said(&read.events), want, "{:?}", read.notes);
    let policy = Policy::from_config(&cfg);
    for ev in &read.events[..HOSTILE_NAMES.len()] {
        if ev.process.as_ref().is_some_and(|p| p.len() <= 15) {
            assert_eq!(ev.message, nonfatal, "{:?}", ev.process);
        }
        assert_eq!(policy.decide(ev).action, PolicyAction::Warn);
    }
}
