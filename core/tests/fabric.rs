//! Fabric reading and NCCL derivation over the sysfs fixture trees.

use std::path::{Path, PathBuf};

use gpu_health_core::fabric::nccl::{derive_nccl_env, FabricKind, NcclPolicy, Source};
use gpu_health_core::fabric::{read_fabric, Fabric, LinkLayer};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn fabric(name: &str) -> Fabric {
    read_fabric(&fixture(name)).unwrap()
}

#[test]
fn ib_ndr8_lists_every_port_with_its_state_and_rate() {
    let f = fabric("ib-ndr8-one-down");
    assert_eq!(f.ports.len(), 8);
    let names: Vec<String> = f.ports.iter().map(|p| p.hca_name()).collect();
    assert_eq!(names[0], "mlx5_0:1");
    assert_eq!(names[7], "mlx5_7:1");
    for p in &f.ports {
        assert_eq!(p.link_layer, LinkLayer::InfiniBand);
        if p.device == "mlx5_5" {
            assert!(!p.is_active() && !p.is_link_up(), "{p:?}");
            assert_eq!(p.state.as_deref(), Some("1: DOWN"));
        } else {
            assert!(p.is_active() && p.is_link_up(), "{p:?}");
            assert_eq!(p.rate.as_deref(), Some("400 Gb/sec (4X NDR)"));
            assert_eq!(p.rate_gbps, Some(400.0));
        }
        // Only the link-local GID is set on IB; zero entries are dropped.
        assert_eq!(p.gids.len(), 1);
        assert!(p.gids[0].is_link_local());
    }
    assert_eq!(f.active_ports().count(), 7);
}

#[test]
fn ib_derives_exact_hca_list_of_active_ports_and_timeout() {
    let env = derive_nccl_env(&fabric("ib-ndr8-one-down"), &NcclPolicy::default());
    assert_eq!(env.kind, FabricKind::InfiniBand);
    assert_eq!(
        env.get("NCCL_IB_HCA"),
        Some("=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_6:1,mlx5_7:1")
    );
    assert_eq!(env.get("NCCL_IB_TIMEOUT"), Some("22"));
    assert_eq!(env.get("NCCL_IB_GID_INDEX"), None);
    assert_eq!(env.get("NCCL_IB_TC"), None);
    assert_eq!(env.vars.len(), 2);
    assert!(
        env.notes.iter().any(|n| n.contains("not ACTIVE")),
        "{:?}",
        env.notes
    );
}

#[test]
fn roce_picks_the_roce_v2_ipv4_gid_index() {
    let f = fabric("roce-v2");
    assert_eq!(f.ports.len(), 2);
    let p = &f.ports[0];
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    // fe80 v1, fe80 v2, IPv4 v1, IPv4 v2: only index 3 is routable RoCE v2.
    assert_eq!(p.gids.len(), 4);
    assert_eq!(p.gids[3].gid_type.as_deref(), Some("RoCE v2"));
    assert_eq!(p.gids[3].netdev.as_deref(), Some("ens1f0np0"));
    assert_eq!(p.roce_v2_ipv4_gid_index(), Some(3));

    let policy = NcclPolicy {
        ib_timeout: 20,
        ib_tc: Some(106),
        ib_sl: Some(3),
        ..NcclPolicy::default()
    };
    let env = derive_nccl_env(&f, &policy);
    assert_eq!(env.kind, FabricKind::Roce);
    assert_eq!(env.get("NCCL_IB_HCA"), Some("=mlx5_0:1,mlx5_1:1"));
    assert_eq!(env.get("NCCL_IB_GID_INDEX"), Some("3"));
    assert_eq!(env.get("NCCL_IB_TIMEOUT"), Some("20"));
    assert_eq!(env.get("NCCL_IB_TC"), Some("106"));
    assert_eq!(env.get("NCCL_IB_SL"), Some("3"));
}

#[test]
fn roce_without_tc_sl_sets_none() {
    let env = derive_nccl_env(&fabric("roce-v2"), &NcclPolicy::default());
    assert_eq!(env.get("NCCL_IB_TC"), None);
    assert_eq!(env.get("NCCL_IB_SL"), None);
}

#[test]
fn efa_derives_nothing_unless_the_admin_asks() {
    let f = fabric("efa");
    assert_eq!(f.ports.len(), 1);
    assert_eq!(f.ports[0].link_layer, LinkLayer::Other("Unknown".into()));
    let env = derive_nccl_env(&f, &NcclPolicy::default());
    assert_eq!(env.kind, FabricKind::Unusable);
    assert!(env.vars.is_empty(), "{:?}", env.vars);

    let policy = NcclPolicy {
        set: vec![("FI_EFA_USE_DEVICE_RDMA".into(), "1".into())],
        ..NcclPolicy::default()
    };
    let env = derive_nccl_env(&f, &policy);
    assert_eq!(env.get("FI_EFA_USE_DEVICE_RDMA"), Some("1"));
    assert_eq!(env.vars[0].source, Source::Admin);
    assert_eq!(env.get("NCCL_IB_TIMEOUT"), None);
}

#[test]
fn no_rdma_means_empty_fabric_and_no_vars() {
    let f = fabric("none");
    assert!(f.ports.is_empty());
    let env = derive_nccl_env(&f, &NcclPolicy::default());
    assert_eq!(env.kind, FabricKind::None);
    assert!(env.vars.is_empty());
    // A root that does not exist at all reads the same.
    assert!(read_fabric(Path::new("/nonexistent/sysfs"))
        .unwrap()
        .ports
        .is_empty());
}

#[test]
fn admin_set_wins_over_derived_value() {
    let policy = NcclPolicy {
        set: vec![
            ("NCCL_IB_TIMEOUT".into(), "23".into()),
            ("NCCL_NET_GDR_LEVEL".into(), "PHB".into()),
        ],
        ..NcclPolicy::default()
    };
    let env = derive_nccl_env(&fabric("ib-ndr8-one-down"), &policy);
    assert_eq!(env.get("NCCL_IB_TIMEOUT"), Some("23"));
    assert_eq!(env.get("NCCL_NET_GDR_LEVEL"), Some("PHB"));
    assert_eq!(
        env.vars
            .iter()
            .filter(|v| v.name == "NCCL_IB_TIMEOUT")
            .count(),
        1
    );
}

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

fn roce_port(root: &Path, dev: &str, gids: &[(&str, &str)]) {
    let d = root.join("class/infiniband").join(dev).join("ports/1");
    write(&d.join("link_layer"), "Ethernet\n");
    write(&d.join("state"), "4: ACTIVE\n");
    write(&d.join("phys_state"), "5: LinkUp\n");
    write(&d.join("rate"), "100 Gb/sec (4X EDR)\n");
    for (i, (addr, ty)) in gids.iter().enumerate() {
        write(&d.join("gids").join(i.to_string()), addr);
        write(&d.join("gid_attrs/types").join(i.to_string()), ty);
    }
}

const LL: &str = "fe80:0000:0000:0000:0a42:a1ff:fe5b:0001";
const V4: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";

#[test]
fn roce_port_without_ipv4_gid_is_left_out() {
    let t = tempfile::tempdir().unwrap();
    roce_port(
        t.path(),
        "mlx5_0",
        &[
            (LL, "IB/RoCE v1"),
            (LL, "RoCE v2"),
            (V4, "IB/RoCE v1"),
            (V4, "RoCE v2"),
        ],
    );
    roce_port(t.path(), "mlx5_1", &[(LL, "IB/RoCE v1"), (LL, "RoCE v2")]);
    let env = derive_nccl_env(&read_fabric(t.path()).unwrap(), &NcclPolicy::default());
    assert_eq!(env.get("NCCL_IB_HCA"), Some("=mlx5_0:1"));
    assert_eq!(env.get("NCCL_IB_GID_INDEX"), Some("3"));
    assert!(
        env.notes.iter().any(|n| n.contains("mlx5_1:1")),
        "{:?}",
        env.notes
    );
}

#[test]
fn roce_ports_that_disagree_get_no_gid_index() {
    let t = tempfile::tempdir().unwrap();
    roce_port(t.path(), "mlx5_0", &[(LL, "RoCE v2"), (V4, "RoCE v2")]);
    roce_port(
        t.path(),
        "mlx5_1",
        &[
            (LL, "IB/RoCE v1"),
            (LL, "RoCE v2"),
            (V4, "IB/RoCE v1"),
            (V4, "RoCE v2"),
        ],
    );
    let env = derive_nccl_env(&read_fabric(t.path()).unwrap(), &NcclPolicy::default());
    assert_eq!(env.kind, FabricKind::Roce);
    assert_eq!(env.get("NCCL_IB_HCA"), Some("=mlx5_0:1,mlx5_1:1"));
    assert_eq!(env.get("NCCL_IB_GID_INDEX"), None);
}

#[test]
fn ib_beats_roce_when_both_are_active() {
    let t = tempfile::tempdir().unwrap();
    roce_port(t.path(), "mlx5_9", &[(V4, "RoCE v2")]);
    let d = t.path().join("class/infiniband/mlx5_0/ports/1");
    write(&d.join("link_layer"), "InfiniBand\n");
    write(&d.join("state"), "4: ACTIVE\n");
    let env = derive_nccl_env(&read_fabric(t.path()).unwrap(), &NcclPolicy::default());
    assert_eq!(env.kind, FabricKind::InfiniBand);
    assert_eq!(env.get("NCCL_IB_HCA"), Some("=mlx5_0:1"));
    // A missing rate file is "unknown", not zero.
    let f = read_fabric(t.path()).unwrap();
    assert_eq!(f.port("mlx5_0", 1).unwrap().rate_gbps, None);
}

// What sysfs never holds: FIFOs, huge files, directories where attributes
// belong, names that would change what NCCL_IB_HCA selects or reach a
// terminal. The plugin runs this at every step launch inside slurmstepd:
// each case must finish at once and say why.

/// `f()` on another thread; fails the test when it has not returned
/// within `secs` (the old reader blocked forever opening a FIFO).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("still running after {secs} s: the sysfs read hangs"))
}

fn ib_port(root: &Path, dev: &str) -> PathBuf {
    let d = root.join("class/infiniband").join(dev).join("ports/1");
    write(&d.join("link_layer"), "InfiniBand\n");
    write(&d.join("state"), "4: ACTIVE\n");
    write(&d.join("phys_state"), "5: LinkUp\n");
    write(&d.join("rate"), "400 Gb/sec (4X NDR)\n");
    d
}

fn mkfifo(p: &Path) {
    let _ = std::fs::remove_file(p);
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {p:?}"
    );
}

/// Read, derive and explain the tree at `root` within 10 s: the
/// NCCL_IB_HCA value and the notes.
fn derive_within(root: &Path) -> (Option<String>, Vec<String>) {
    let root = root.to_path_buf();
    within(10, move || {
        let f = read_fabric(&root).unwrap();
        let policy = NcclPolicy::default();
        let env = derive_nccl_env(&f, &policy);
        let notes = gpu_health_core::fabric::explain::explain(&f, &policy, &env).notes;
        (env.get("NCCL_IB_HCA").map(str::to_string), notes)
    })
}

fn has_note(notes: &[String], parts: &[&str]) -> bool {
    notes.iter().any(|n| parts.iter().all(|p| n.contains(p)))
}

#[test]
fn fifo_or_directory_at_an_attribute_leaves_that_port_out_without_a_hang() {
    let t = tempfile::tempdir().unwrap();
    ib_port(t.path(), "mlx5_0");
    let fifo = ib_port(t.path(), "mlx5_1");
    mkfifo(&fifo.join("state"));
    let dir = ib_port(t.path(), "mlx5_2");
    std::fs::remove_file(dir.join("rate")).unwrap();
    std::fs::create_dir(dir.join("rate")).unwrap();
    let gid_fifo = ib_port(t.path(), "mlx5_3");
    std::fs::create_dir_all(gid_fifo.join("gids")).unwrap();
    mkfifo(&gid_fifo.join("gids/0"));
    let (hca, notes) = derive_within(t.path());
    assert_eq!(hca.as_deref(), Some("=mlx5_0:1"), "{notes:?}");
    assert!(
        has_note(
            &notes,
            &["mlx5_1:1 left out", "state: a FIFO, not a regular file"]
        ),
        "{notes:?}"
    );
    assert!(
        has_note(&notes, &["mlx5_2:1 left out", "rate: a directory"]),
        "{notes:?}"
    );
    assert!(
        has_note(&notes, &["mlx5_3:1 left out", "gids/0: a FIFO"]),
        "{notes:?}"
    );
}

#[test]
fn huge_file_at_an_attribute_leaves_that_port_out_at_once() {
    let t = tempfile::tempdir().unwrap();
    ib_port(t.path(), "mlx5_0");
    let big = ib_port(t.path(), "mlx5_1");
    // 2 GB, sparse: the old reader read all of it into memory.
    std::fs::File::create(big.join("rate"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let started = std::time::Instant::now();
    let (hca, notes) = derive_within(t.path());
    assert_eq!(hca.as_deref(), Some("=mlx5_0:1"), "{notes:?}");
    assert!(
        has_note(
            &notes,
            &["mlx5_1:1 left out", "rate: larger than 65536 bytes"]
        ),
        "{notes:?}"
    );
    // Not a benchmark: the bound makes it milliseconds, reading 2 GB takes seconds.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn huge_port_directory_leaves_the_device_out() {
    let t = tempfile::tempdir().unwrap();
    ib_port(t.path(), "mlx5_0");
    let ports = t.path().join("class/infiniband/mlx5_1/ports");
    for i in 0..=gpu_health_core::sysfs_read::MAX_DIR_ENTRIES {
        std::fs::create_dir_all(ports.join(i.to_string())).unwrap();
    }
    let (hca, notes) = derive_within(t.path());
    assert_eq!(hca.as_deref(), Some("=mlx5_0:1"));
    assert!(
        has_note(
            &notes,
            &["RDMA device mlx5_1 left out", "more than 4096 entries"]
        ),
        "{notes:?}"
    );
}

#[test]
fn device_names_that_would_corrupt_nccl_ib_hca_or_a_terminal_are_left_out() {
    let t = tempfile::tempdir().unwrap();
    ib_port(t.path(), "mlx5_0");
    for bad in ["mlx5_1,mlx5_9", "\x1b[2J", "mlx5_\n7", "mlx5_2:1", "^mlx5"] {
        ib_port(t.path(), bad);
    }
    let (hca, notes) = derive_within(t.path());
    assert_eq!(hca.as_deref(), Some("=mlx5_0:1"), "{notes:?}");
    for shown in [
        r#""mlx5_1,mlx5_9""#,
        r#""\u{1b}[2J""#,
        r#""mlx5_\n7""#,
        r#""mlx5_2:1""#,
        r#""^mlx5""#,
    ] {
        assert!(
            has_note(&notes, &["RDMA device", shown, "left out"]),
            "{shown} {notes:?}"
        );
    }
    for n in &notes {
        assert!(!n.chars().any(char::is_control), "{n:?}");
    }
}

#[test]
fn unusable_names_and_escapes_in_attributes_never_leave_the_reader() {
    let t = tempfile::tempdir().unwrap();
    roce_port(t.path(), "mlx5_0", &[(LL, "RoCE v2"), (V4, "RoCE v2")]);
    let port = t.path().join("class/infiniband/mlx5_0/ports/1");
    write(&port.join("gid_attrs/ndevs/1"), "eth0,\x1b[31mx\n");
    write(&port.join("rate"), "100 Gb/sec\x1b[2J (4X EDR)\n");
    let root = t.path().to_path_buf();
    let f = within(10, move || read_fabric(&root).unwrap());
    let p = f.port("mlx5_0", 1).unwrap();
    assert_eq!(p.gids[1].netdev, None);
    assert_eq!(p.rate.as_deref(), Some("100 Gb/sec?[2J (4X EDR)"));
    let env = derive_nccl_env(&f, &NcclPolicy::default());
    let e = gpu_health_core::fabric::explain::explain(&f, &NcclPolicy::default(), &env);
    assert!(
        has_note(&e.notes, &["mlx5_0:1 GID 1: network device", "ignored"]),
        "{:?}",
        e.notes
    );
    assert_eq!(env.get("NCCL_IB_HCA"), Some("=mlx5_0:1"));
}
