//! The NCCL variables a step gets on this node: the fabric under
//! `sysfs_root` read through the core's bounded reader and derived under
//! the admin's policy. Pure apart from those reads, so tested without
//! Slurm; `remote` sets the variables and logs the notes.
//!
//! Runs in slurmstepd's init_post_opt, where a hang stalls the step launch
//! and a failure drains the node: a FIFO or a huge file in sysfs leaves
//! that port out, an unreadable fabric sets nothing, and both are only
//! logged.

use std::path::Path;

use gpu_health_core::fabric::nccl::{derive_nccl_env, NcclPolicy};
use gpu_health_core::fabric::read_fabric;
use gpu_health_core::text::printable;

/// What the step gets, and what to log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepNccl {
    /// (name, value) to set, in order.
    pub vars: Vec<(String, String)>,
    /// Why nothing was derived: `class/infiniband` exists but cannot be
    /// listed. Printable.
    pub unreadable: Option<String>,
    /// For the admin (slurmd's log): devices or ports left out because
    /// sysfs held what it never holds, or their names cannot be used.
    /// Printable.
    pub problems: Vec<String>,
    /// Why ports were left out by the derivation (down, no usable GID).
    pub notes: Vec<String>,
}

/// The variables for this node's fabric under `policy`.
pub fn nccl_for_step(sysfs_root: &Path, policy: &NcclPolicy) -> StepNccl {
    let fabric = match read_fabric(sysfs_root) {
        Ok(f) => f,
        Err(e) => {
            return StepNccl {
                unreadable: Some(format!("RDMA fabric unreadable, no NCCL_IB_* set: {e}")),
                ..StepNccl::default()
            }
        }
    };
    let derived = derive_nccl_env(&fabric, policy);
    StepNccl {
        vars: derived
            .vars
            .into_iter()
            .map(|v| (v.name, v.value))
            .collect(),
        unreadable: None,
        problems: fabric
            .notes
            .iter()
            .map(|n| printable(n).into_owned())
            .collect(),
        notes: derived
            .notes
            .iter()
            .map(|n| printable(n).into_owned())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ib_port(root: &Path, dev: &str) -> std::path::PathBuf {
        let d = root.join("class/infiniband").join(dev).join("ports/1");
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("link_layer", "InfiniBand"),
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "200 Gb/sec (4X HDR)"),
        ] {
            std::fs::write(d.join(f), format!("{v}\n")).unwrap();
        }
        d
    }

    #[test]
    fn fifo_huge_file_and_hostile_names_leave_ports_out_at_once() {
        let t = tempfile::tempdir().unwrap();
        ib_port(t.path(), "mlx5_0");
        let fifo = ib_port(t.path(), "mlx5_1").join("link_layer");
        std::fs::remove_file(&fifo).unwrap();
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::fs::File::create(ib_port(t.path(), "mlx5_2").join("state"))
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        for bad in ["mlx5_0,mlx5_3", "\x1b[2J", "mlx5\n4"] {
            ib_port(t.path(), bad);
        }
        let root = t.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(nccl_for_step(&root, &NcclPolicy::default()));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("still running after 10 s: the step launch would hang");
        assert_eq!(
            got.vars[0],
            ("NCCL_IB_HCA".to_string(), "=mlx5_0:1".to_string())
        );
        let problems = got.problems.join("\n");
        for why in [
            "mlx5_1:1 left out",
            "link_layer: a FIFO",
            "mlx5_2:1 left out",
            "state: larger than 65536 bytes",
            r#""mlx5_0,mlx5_3" left out"#,
            r#""\u{1b}[2J" left out"#,
            r#""mlx5\n4" left out"#,
        ] {
            assert!(problems.contains(why), "{why}\n{problems}");
        }
        assert!(!problems.chars().any(|c| c.is_control() && c != '\n'));
        for (name, value) in &got.vars {
            assert!(
                !value.chars().any(char::is_control) && !name.is_empty(),
                "{name}={value:?}"
            );
        }
    }

    #[test]
    fn unreadable_fabric_sets_nothing_and_says_why() {
        let t = tempfile::tempdir().unwrap();
        // class/infiniband is a file: not listable.
        std::fs::create_dir_all(t.path().join("class")).unwrap();
        std::fs::write(t.path().join("class/infiniband"), "").unwrap();
        let got = nccl_for_step(t.path(), &NcclPolicy::default());
        assert!(got.vars.is_empty());
        let why = got.unreadable.unwrap_or_default();
        assert!(why.contains("RDMA fabric unreadable"), "{why}");
    }
}
