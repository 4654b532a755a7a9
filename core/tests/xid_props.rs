//! Property tests: arbitrary bytes and lines never panic or hang the parser
//! or the readers.

use std::io::Write;

use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::xid::{parse_line, read_since, read_source, LogSource, MemoryRing, XidConfig};
use proptest::prelude::*;

/// Pieces real lines are made of, so that generated lines get deep into
/// the parser instead of failing at the first byte.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("NVRM: ".to_string()),
        Just("Xid ".to_string()),
        Just("(PCI:0000:3b:00): ".to_string()),
        Just("SXid ".to_string()),
        Just("nvidia-nvswitch3: ".to_string()),
        Just("The NVIDIA GPU 0000:b3:00.0".to_string()),
        Just("fallen off the bus".to_string()),
        Just("pid=".to_string()),
        Just("name=".to_string()),
        Just("'<unknown>', ".to_string()),
        Just("kernel: ".to_string()),
        Just("[  12.345678] ".to_string()),
        Just("[Sun Nov 29 14:00:01 2026] ".to_string()),
        Just("Nov 29 14:00:01 host ".to_string()),
        Just("2026-11-29T14:00:01.5+01:00 ".to_string()),
        Just("4,1870,812345678,-;".to_string()),
        Just("<3>".to_string()),
        Just("kern  :err   : ".to_string()),
        "[0-9]{1,25}".prop_map(|s| s),
        "[ -~]{0,12}".prop_map(|s| s),
        Just(",".to_string()),
        Just("\n".to_string()),
    ]
}

fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::collection::vec(fragment(), 0..12).prop_map(|v| v.concat().into_bytes()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics(l in line()) {
        let _ = parse_line(&l);
    }

    #[test]
    fn parsed_pci_is_normalised(l in line()) {
        if let Some(r) = parse_line(&l) {
            let pci = match r.payload {
                gpu_health_core::xid::Payload::Xid { pci, .. } => pci,
                gpu_health_core::xid::Payload::Sxid { pci, .. } => pci,
                gpu_health_core::xid::Payload::SxidDetail { pci, .. } => pci,
                gpu_health_core::xid::Payload::GpuHeader { pci } => Some(pci),
                gpu_health_core::xid::Payload::FallenOff { pci } => pci,
            };
            if let Some(p) = pci {
                prop_assert_eq!(p.len(), 12);
                prop_assert_eq!(gpu_health_core::snapshot::normalize_pci(&p), Some(p.clone()));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn readers_never_panic(lines in proptest::collection::vec(line(), 0..60)) {
        let text: Vec<u8> = lines.join(&b'\n');
        let cfg = XidConfig::default();
        let snap = NodeSnapshot::default();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&text).unwrap();
        let out = read_since(file.path(), None, &cfg, &snap, 1_795_962_600_000).unwrap();
        // Reading again from the cursor finds nothing new.
        let again = read_since(file.path(), out.cursor.as_ref(), &cfg, &snap, 1_795_962_600_000).unwrap();
        prop_assert!(again.events.is_empty());
        let mut ring = MemoryRing::from_dump(&text);
        let _ = read_source(LogSource::Kmsg(&mut ring), None, &cfg, &snap, 1_795_962_600_000);
    }
}

/// What the events of a read say, for comparing reads.
fn said(events: &[gpu_health_core::xid::XidEvent]) -> Vec<(u32, Option<String>, bool)> {
    events
        .iter()
        .map(|e| (e.code, e.pci.clone(), e.fallen_off_bus))
        .collect()
}

/// Realistic lines, among them multi-line records and their pieces.
fn record_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(
            "[  12.345678] NVRM: Xid (PCI:0000:3b:00): 79, pid=7, GPU has fallen off the bus."
                .to_string()
        ),
        Just("[  12.345679] NVRM: The NVIDIA GPU 0000:b3:00.0".to_string()),
        Just("               NVRM: (PCI ID: 10de:26b5) installed in this system has".to_string()),
        Just(
            "               NVRM: fallen off the bus and is not responding to commands."
                .to_string()
        ),
        Just("4,1870,812345678,-;NVRM: Xid (PCI:0000:18:00): 31, pid=5, MMU Fault".to_string()),
        Just(" SUBSYSTEM=pci".to_string()),
        Just(
            "[  13.0] nvidia-nvswitch2: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32"
                .to_string()
        ),
        Just("[  14.0] e1000e 0000:00:1f.6 eno1: NIC Link is Up".to_string()),
        // An SXid's report, its detail lines apart from its first.
        Just(
            "[  15.0] nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM Fault Up"
                .to_string()
        ),
        Just(
            "[  15.1] nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 20034, Severity 1 Engine instance 30 Sub-engine instance 00"
                .to_string()
        ),
        Just(
            "[  15.2] nvidia-nvswitch3: SXid (PCI:0000:a9:00.0): 20034, Data {0x00000000, 0x00100000}"
                .to_string()
        ),
        // Stamps of other forms, other languages, or none readable.
        Just(
            "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:18:00 GPU-I:05): 94, pid=1, x"
                .to_string()
        ),
        Just("kwi 29 14:00:01 gpu017 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=2, x".to_string()),
        Just("[Τρ 21 Ιαν 04:41:44 2025] [    T42] NVRM: Xid (PCI:0000:18:00): 13, pid=3, x".to_string()),
        Just("user  :warn  : [  16.0] NVRM: Xid (PCI:0000:18:00): 79, forged".to_string()),
        "[ -~]{0,80}".prop_map(|s| s),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A file read in two scans, cut at any byte, gives the events one
    /// read of the whole file gives: a record cut by a scan is not lost,
    /// nor counted twice.
    #[test]
    fn a_scan_boundary_anywhere_changes_nothing(
        lines in proptest::collection::vec(record_line(), 1..40),
        cut in 0.0f64..1.0,
    ) {
        let text = lines.join("\n") + "\n";
        let cfg = XidConfig::default();
        let snap = NodeSnapshot::default();
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("whole.log");
        std::fs::write(&whole, &text).unwrap();
        let once = read_since(&whole, None, &cfg, &snap, 1_795_962_600_000).unwrap();
        let at = ((text.len() as f64) * cut) as usize;
        let split = dir.path().join("split.log");
        std::fs::write(&split, &text.as_bytes()[..at]).unwrap();
        let first = read_since(&split, None, &cfg, &snap, 1_795_962_600_000).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&split).unwrap();
        f.write_all(&text.as_bytes()[at..]).unwrap();
        let second = read_since(&split, first.cursor.as_ref(), &cfg, &snap, 1_795_962_600_000).unwrap();
        let mut twice = said(&first.events);
        twice.extend(said(&second.events));
        prop_assert_eq!(twice, said(&once.events));
    }

    /// Truncated, rewritten or grown in any way between scans: no panic,
    /// and the cursor never points past the end of the file.
    #[test]
    fn truncation_between_scans_is_survived(
        before in proptest::collection::vec(line(), 0..30),
        keep in 0.0f64..1.0,
        after in proptest::collection::vec(line(), 0..30),
    ) {
        let cfg = XidConfig::default();
        let snap = NodeSnapshot::default();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kern.log");
        let text = before.join(&b'\n');
        std::fs::write(&log, &text).unwrap();
        let a = read_since(&log, None, &cfg, &snap, 1_795_962_600_000).unwrap();
        let kept = ((text.len() as f64) * keep) as usize;
        let mut rest = text[..kept].to_vec();
        rest.extend(after.join(&b'\n'));
        std::fs::write(&log, &rest).unwrap();
        let b = read_since(&log, a.cursor.as_ref(), &cfg, &snap, 1_795_962_600_000).unwrap();
        if let Some(gpu_health_core::xid::Cursor::File { offset, .. }) = b.cursor {
            prop_assert!(offset <= rest.len() as u64);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Lines of any length, up to past the reader's 4 MiB buffer, with an
    /// Xid-looking tail: never an event from the over-long line's tail.
    #[test]
    fn lines_of_any_length(len in prop_oneof![0usize..5000, (4usize << 20) - 64..(4 << 20) + 64, 5usize << 20..6 << 20]) {
        let cfg = XidConfig::default();
        let snap = NodeSnapshot::default();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kern.log");
        let mut text = "u".repeat(len);
        text.push_str("[ 1.0] NVRM: Xid (PCI:0000:18:00): 48, tail\n[ 2.0] NVRM: Xid (PCI:0000:c1:00): 79, real\n");
        std::fs::write(&log, &text).unwrap();
        let r = read_since(&log, None, &cfg, &snap, 1_795_962_600_000).unwrap();
        let codes: Vec<u32> = r.events.iter().map(|e| e.code).collect();
        // Short or long, the junk line is no kernel record (it starts with
        // the junk), and past the buffer its tail is not read as a line.
        prop_assert_eq!(codes, vec![79]);
    }
}

/// The case the property above found: a user's line that, with its
/// newline, fills the reader's 4 MiB buffer exactly. The reader held it
/// back (an indented line might follow), dropped it as over-long, and then
/// looked for the end of a line that had already ended: it swallowed the
/// next line, a real Xid 79, with it.
#[test]
fn a_line_that_fills_the_buffer_hides_no_next_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kern.log");
    let junk_tail = "[ 1.0] NVRM: Xid (PCI:0000:18:00): 48, tail";
    for filler in [
        (4 << 20) - 1 - junk_tail.len(),
        (4 << 20) - 2 - junk_tail.len(),
    ] {
        let mut text = "u".repeat(filler);
        text.push_str(junk_tail);
        text.push_str("\n[ 2.0] NVRM: Xid (PCI:0000:c1:00): 79, real\n");
        std::fs::write(&log, &text).unwrap();
        let r = read_since(
            &log,
            None,
            &XidConfig::default(),
            &NodeSnapshot::default(),
            1_795_962_600_000,
        )
        .unwrap();
        let codes: Vec<u32> = r.events.iter().map(|e| e.code).collect();
        assert_eq!(
            codes,
            vec![79],
            "junk line of {} bytes",
            filler + junk_tail.len()
        );
    }
}

mod xid_render;

use gpu_health_core::xid::{EventKind, Policy, PolicyAction};
use xid_render::{api_mismatch_new, api_mismatch_old, xid_with_name, Source, GENUINE_DBE};

/// Pieces of hostile user text: line breaks of every source, separators,
/// prefixes, records and the driver's fixed lines.
fn user_fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(1u8..=255, 1..6),
        "[ -~]{1,8}".prop_map(String::into_bytes),
        prop_oneof![
            Just("\n"),
            Just(", "),
            Just(","),
            Just("#012"),
            Just("\\x0a"),
            Just("NVRM: "),
            Just("Xid (PCI:0000:18:00): 79, "),
            Just("nvidia-nvswitch0: SXid (PCI:0000:18:00.0): 24007, Fatal"),
            Just("The NVIDIA GPU 0000:18:00.0"),
            Just("GPU 0000:18:00.0: GPU has fallen off the bus."),
            Just("fallen off the bus and is not responding to commands."),
            Just("NVRM: have the same version."),
            Just("NVRM: components have the same version."),
            Just("[  812.345678] "),
            Just("Nov 29 14:00:00 gpu017 kernel: "),
            Just("3,1,1,-;"),
            Just("pid="),
            Just("name="),
            Just("Fatal"),
            Just(" to 0x2 (Node Reboot Required)"),
        ]
        .prop_map(|s| s.as_bytes().to_vec()),
    ]
}

/// User text of at most `max` bytes, any byte but NUL.
fn user_text(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(user_fragment(), 0..12).prop_map(move |parts| {
        let mut text = parts.concat();
        text.truncate(max);
        text
    })
}

fn source() -> impl Strategy<Value = Source> {
    proptest::sample::select(Source::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Any client version string (63 bytes) and process name (15), in
    /// either wording of the API-mismatch message and any source: no
    /// event but the genuine one after it (in a syslog file with its
    /// escapes off, where users write lines anyway, no event that can
    /// drain).
    #[test]
    fn client_text_never_makes_an_event(
        version in user_text(63),
        comm in user_text(15),
        newer in any::<bool>(),
        same_stamp in any::<bool>(),
        source in source(),
    ) {
        let message = if newer { api_mismatch_new(&comm, &version) } else { api_mismatch_old(&version) };
        let records = [(812_345_678, message), (812_345_678 + u64::from(!same_stamp), GENUINE_DBE.to_vec())];
        let events = source.read(&records);
        let dbe = (EventKind::Xid, 48, Some("0000:c1:00.0"));
        if source == Source::SyslogRaw {
            prop_assert!(events.iter().all(|e| e.forgeable), "{:?}", xid_render::said(&events));
            prop_assert_eq!(xid_render::said(&events).last().copied(), Some(dbe));
        } else {
            prop_assert_eq!(xid_render::said(&events), vec![dbe]);
        }
    }

    /// Any process name (15 bytes) in an Xid record, in any source: the
    /// kind, code and address are the record's, the message and action
    /// those the record has with a plain name, and the next record is
    /// read (journalctl's short form shows a record with control bytes
    /// as "[blob data]": then only the next one).
    #[test]
    fn process_names_never_change_an_event(
        name in user_text(15),
        record in 0usize..4,
        same_stamp in any::<bool>(),
        source in source(),
    ) {
        let (code, message) = [
            (13, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"),
            (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 12 (0x00000000 0x00000000)"),
            (145, "NETIR_LINK_EVT Fatal XC0 i0 Link 12 (0x00000000 0x00000000)"),
            (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"),
        ][record];
        let step = u64::from(!same_stamp);
        let read = |name: &[u8]| {
            source.read(&[(7_000_000, xid_with_name(code, "3b", name, message)), (7_000_000 + step, GENUINE_DBE.to_vec())])
        };
        let events = read(&name);
        let plain = read(b"python3");
        let shown = !matches!(source, Source::JournalctlShort | Source::JournalctlShortLocalized)
            || std::str::from_utf8(&name).is_ok_and(|s| s.chars().all(|c| c == '\n' || !c.is_control()));
        let want = if shown { xid_render::said(&plain) } else { xid_render::said(&plain)[1..].to_vec() };
        prop_assert_eq!(xid_render::said(&events), want);
        if shown {
            prop_assert_eq!(&events[0].message, &plain[0].message);
            let policy = Policy::from_config(&XidConfig { syslog_may_drain: true, ..XidConfig::default() });
            let action = |e| policy.decide(e).action;
            prop_assert_eq!(action(&events[0]), action(&plain[0]));
            prop_assert_ne!(action(&plain[0]), PolicyAction::Ignore);
        }
    }
}
