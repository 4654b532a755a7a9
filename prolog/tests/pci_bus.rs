//! The PCI bus's GPUs are read again only when the bus listing or the
//! boot changed (`run::pci_bus`), and what is kept counts as a fresh read.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{drain_reason, Node};

/// The h100x8-healthy scenario's GPUs, as sysfs names them.
const GPUS: [&str; 8] = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
];

/// A node whose sysfs tree lists the eight GPUs and a NIC, with its own
/// boot id file.
fn node() -> Node {
    let n = Node::new("h100x8-healthy");
    for bdf in GPUS {
        device(&n, bdf, "0x10de", "0x030200");
    }
    device(&n, "0000:3b:00.0", "0x15b3", "0x020700");
    boot(&n, "boot-1");
    n.write_config(&format!(
        "sysfs_root = {:?}\n[xid]\nboot_id_path = {:?}\n",
        n.path("sysfs"),
        n.path("boot_id")
    ));
    n
}

fn device(n: &Node, bdf: &str, vendor: &str, class: &str) {
    let d = n.path("sysfs/bus/pci/devices").join(bdf);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
    std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
}

fn boot(n: &Node, id: &str) {
    std::fs::write(n.path("boot_id"), format!("{id}\n")).unwrap();
}

/// The GPUs `pci-bus.json` holds, and the file's inode (a new one: the
/// bus was read again and the answer saved).
fn kept(n: &Node) -> (Vec<String>, u64) {
    let p = n.path("state/pci-bus.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let gpus = v["nvidia_gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_string())
        .collect();
    (gpus, std::fs::metadata(&p).unwrap().ino())
}

#[test]
fn the_bus_is_read_again_when_its_listing_or_the_boot_changes() {
    let n = node();
    let r = n.prolog("1", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    let (gpus, first) = kept(&n);
    assert_eq!(gpus, GPUS);

    // The kernel never changes a listed device's vendor; a tree edited in
    // place shows that the kept answer was used (no read, no new file).
    let moved = n.path("sysfs/bus/pci/devices/0000:18:00.0/vendor");
    std::fs::write(&moved, "0x8086\n").unwrap();
    let r = n.prolog("2", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert_eq!(kept(&n), (GPUS.map(String::from).to_vec(), first));

    // Another boot: read again.
    boot(&n, "boot-2");
    let r = n.prolog("3", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    let (gpus, after_boot) = kept(&n);
    assert_eq!(gpus, GPUS[1..]);
    assert_ne!(after_boot, first);

    // A device added: read again.
    device(&n, "0000:4e:00.0", "0x10de", "0x030200");
    let r = n.prolog("4", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    let (gpus, _) = kept(&n);
    assert_eq!(gpus.len(), 8);
    assert!(gpus.contains(&"0000:4e:00.0".to_string()), "{gpus:?}");
}

#[test]
fn a_gpu_added_to_the_bus_is_counted_by_the_next_run() {
    let n = node();
    assert_eq!(n.prolog("10", "0").code, 0);
    assert_eq!(n.prolog("11", "0").code, 0);
    device(&n, "0000:ff:00.0", "0x10de", "0x030200");
    let r = n.prolog("12", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(
        drain_reason(&r).as_deref(),
        Some("gpu-health: GPU count 8 of 9 missing 0000:ff:00.0 (drain)"),
        "{}",
        r.log
    );
}

#[test]
fn an_incomplete_read_is_not_kept() {
    let n = node();
    let vendor = n.path("sysfs/bus/pci/devices/0000:3b:00.0/vendor");
    std::fs::remove_file(&vendor).unwrap();
    let c = std::ffi::CString::new(vendor.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let r = n.prolog("20", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(
        r.log.contains("PCI device 0000:3b:00.0 skipped"),
        "{}",
        r.log
    );
    assert!(!n.path("state/pci-bus.json").exists());
    // Every run reads it again (and says so again).
    let r = n.prolog("21", "0");
    assert!(
        r.log.contains("PCI device 0000:3b:00.0 skipped"),
        "{}",
        r.log
    );
}

#[test]
fn a_kept_answer_that_is_not_whole_or_not_a_bus_is_read_again() {
    let n = node();
    assert_eq!(n.prolog("30", "0").code, 0);
    let p = n.path("state/pci-bus.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    // The right key, an answer no read gives.
    v["nvidia_gpus"] = serde_json::json!(["x\ny"]);
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    let r = n.prolog("31", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(r.log.contains("holds what no PCI bus lists"), "{}", r.log);
    assert_eq!(kept(&n).0, GPUS);
    // Cut in half.
    let whole = std::fs::read(&p).unwrap();
    std::fs::write(&p, &whole[..whole.len() / 2]).unwrap();
    let r = n.prolog("32", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(r.log.contains("the PCI bus is read again"), "{}", r.log);
    assert_eq!(kept(&n).0, GPUS);
}
