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
