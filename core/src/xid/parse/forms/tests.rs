use super::*;

fn fallen(body: &str) -> Option<Payload> {
    parse_body(body.as_bytes())
}

#[test]
fn lost_gpu_forms_and_their_pieces() {
    let full = Some(Payload::FallenOff {
        pci: Some("0000:b3:00.0".into()),
    });
    let header = Some(Payload::GpuHeader {
        pci: "0000:b3:00.0".into(),
    });
    let tail = Some(Payload::FallenOff { pci: None });
    for (body, want) in [
        ("NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.", &full),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this\\x0aNVRM: system has fallen off the bus and is not responding to commands.", &full),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0#012NVRM: installed in this system has#012NVRM: fallen off the bus and is not responding to commands.", &full),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0 installed in this system has fallen off the bus and is not responding to commands.", &full),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0", &header),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this", &header),
        ("NVRM: fallen off the bus and is not responding to commands.", &tail),
        ("NVRM: system has fallen off the bus and is not responding to commands.", &tail),
        ("NVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.", &tail),
        ("NVRM: (PCI ID: 10de:26b5) installed in this system has", &None),
        ("NVRM: The NVIDIA GPU 0000:18:00.0 (PCI ID: 10de:2330)\nNVRM: installed in this system is not supported by the", &None),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0 has fallen off the bus and is not responding to commands.", &None),
        ("NVRM: GPU 0000:b3:00.0 has fallen off the bus and is not responding to commands.", &None),
        ("NVRM: x fallen off the bus and is not responding to commands.", &None),
        ("NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.", &full),
        ("NVRM: GPU at 0000:b3:00.0 has fallen off the bus.", &full),
        ("NVRM: GPU at PCI:0000:b3:00: GPU has fallen off the bus.", &full),
        ("NVRM: GPU at PCI:0000:b3:00: GPU-44ec53bd-277c-984f-fa9f-cded30fbfd5d", &None),
        ("NVRM: API mismatch: the client has the version GPU 0000:18:00.0 has fallen off the bus, but", &None),
        ("NVRM: API mismatch: the client has the version \nNVRM: GPU 0000:18:00.0: GPU has fallen off the bus., but", &None),
        ("NVRM: loading GPU 0000:18:00.0: GPU has fallen off the bus.", &None),
    ] {
        assert_eq!(&fallen(body), want, "{body}");
    }
}

#[test]
fn addresses_have_the_drivers_format() {
    let code_pci = |body: &str| match parse_body(body.as_bytes()) {
        Some(Payload::Xid {
            code,
            pci,
            gpu_instance,
            ..
        }) => Some((code, pci.unwrap(), gpu_instance)),
        _ => None,
    };
    let want = |gi| Some((94, "0000:01:00.0".to_string(), gi));
    assert_eq!(
        code_pci("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, x"),
        want(Some(5))
    );
    assert_eq!(
        code_pci("NVRM: Xid (PCI:0000:01:00 GPU-I:13 GPU-CI:01): 94, x"),
        want(Some(13))
    );
    assert_eq!(code_pci("NVRM: Xid (PCI:0000:01:00.0): 94, x"), want(None));
    assert_eq!(code_pci("NVRM: Xid (0000:01:00): 94"), want(None));
    for bad in [
        "NVRM: Xid (): 9, x",
        "NVRM: Xid (PCI:1:00): 94, x",
        "NVRM: Xid (PCI:0000:01:00 x): 94, x",
        "NVRM: Xid (PCI:0000:01:00 GPU-I:): 94, x",
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:x): 94, x",
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05 x): 94, x",
        "NVRM: Xid (PCI:0000:01:00, x): 94, x",
        "NVRM: Xid (PCI:0000:01:00): 94 x",
    ] {
        assert_eq!(code_pci(bad), None, "{bad}");
    }
}

#[test]
fn a_process_name_never_reaches_the_message() {
    let split = |body: &str| match parse_body(body.as_bytes()) {
        Some(Payload::Xid {
            code,
            process,
            message,
            ..
        }) => (code, process.unwrap_or_default(), message),
        other => panic!("{body}: {other:?}"),
    };
    let nvlink = "RLW_RXPIPE Nonfatal XC0 i0 Link 12 (0x00000000 0x00000000)";
    for name in [
        "a, Fatal",
        ", Fatal, x",
        "Fatal, Fatal,",
        "x, to 0x2 (",
        "a\\x0aFatal, x",
    ] {
        let body = format!("NVRM: Xid (PCI:0000:03:00): 145, pid=7, name={name}, {nvlink}");
        let (code, process, message) = split(&body);
        assert_eq!((code, message.as_str()), (145, nvlink), "{body}");
        assert_eq!(process, name);
    }
    // A name with a newline: the message is still the driver's.
    let body = "NVRM: Xid (PCI:0000:03:00): 145, pid=7, name=a\nFatal, x\n, RLW Nonfatal";
    assert_eq!(split(body).2, "RLW Nonfatal");
    assert_eq!(
        split(body).1,
        "a\\x0aFatal, x\\x0a",
        "control bytes shown escaped"
    );
    assert_eq!(
        split("NVRM: Xid (PCI:0000:03:00): 31, pid=7, name=python3, Ch 00000008, intr 1").2,
        "Ch 00000008, intr 1"
    );
    assert_eq!(
        split("NVRM: Xid (PCI:0000:03:00): 31, pid=7, name=python3,").2,
        ""
    );
}

#[test]
fn open_names_and_the_end_of_user_text() {
    let open = |named: &str| {
        xid_name_open(format!("NVRM: Xid (PCI:0000:03:00): 31, pid=7, {named}").as_bytes())
    };
    assert!(open("name=ab"));
    assert!(open("name=ab\ncd"));
    assert!(
        open("name=ab, x"),
        "x may be the name's, the message on the next line"
    );
    assert!(open("name=0123456789abcde,"));
    assert!(!open("name=0123456789abcde, x"));
    assert!(!open("name=python3, Ch 00000008, intr 10000000"));
    assert!(!open("Ch 0"));
    assert!(holds_user_text_end(
        b"NVRM: API mismatch: the client has the version x, but\\x0aNVRM: this kernel module has the version 470.82.00.  Please\\x0aNVRM: make sure that this kernel module and all NVIDIA driver\\x0aNVRM: components have the same version."
    ));
    assert!(!holds_user_text_end(
        b"NVRM: API mismatch: the client has the version \nNVRM: have the same version.\nNVRM: Xid (PCI:0000:18:00): 79, but"
    ));
}
