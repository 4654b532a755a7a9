//! What the PCI bus says, independently of the driver: a GPU that fell off
//! the bus is often still listed here while NVML no longer counts it.

use std::path::Path;

use crate::snapshot::normalize_pci;
use crate::sysfs_read::{list_dir, read_attr};

const NVIDIA_VENDOR: &str = "0x10de";

/// PCI functions listed at most: large nodes with SR-IOV have a few
/// thousand; more is not a PCI bus.
const MAX_PCI_FUNCTIONS: usize = 16384;

/// Normalised bus ids of NVIDIA display/3D controllers under
/// `<sysfs_root>/bus/pci/devices` (NVSwitches and audio functions are not
/// GPUs and are skipped). Missing or unreadable trees give an empty list.
/// Reads are bounded ([`crate::sysfs_read`]): a FIFO or a huge file where
/// `vendor` or `class` belongs skips that device with a warning, never a
/// hang.
pub fn nvidia_gpus_on_pci(sysfs_root: &Path) -> Vec<String> {
    let dir = sysfs_root.join("bus/pci/devices");
    let names = match list_dir(&dir, MAX_PCI_FUNCTIONS) {
        Ok(n) => n,
        Err(e) => {
            if !e.is_not_found() {
                log::warn!("PCI devices not listed: {e}");
            }
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for name in names {
        let Some(bdf) = normalize_pci(&name) else {
            continue;
        };
        let path = dir.join(&name);
        let read = |f: &str| match read_attr(&path.join(f)) {
            Ok(s) => Some(s.to_ascii_lowercase()),
            Err(e) => {
                if e.is_anomaly() {
                    log::warn!("PCI device {bdf} skipped: {e}");
                }
                None
            }
        };
        // The class is read only for NVIDIA devices (one read per device).
        if read("vendor").as_deref() != Some(NVIDIA_VENDOR) {
            continue;
        }
        let Some(class) = read("class") else { continue };
        // 0x0300xx VGA controller, 0x0302xx 3D controller.
        if class.starts_with("0x0300") || class.starts_with("0x0302") {
            out.push(bdf);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_only_nvidia_gpus() {
        let root = tempfile::tempdir().unwrap();
        let add = |bdf: &str, vendor: &str, class: &str| {
            let d = root.path().join("bus/pci/devices").join(bdf);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
        };
        add("0000:1b:00.0", "0x10de", "0x030200");
        add("0000:05:00.0", "0x10de", "0x068000"); // NVSwitch
        add("0000:1b:00.1", "0x10de", "0x040300"); // audio
        add("0000:3b:00.0", "0x15b3", "0x020700"); // Mellanox
        add("0000:c1:00.0", "0x10de", "0x030000");
        assert_eq!(
            nvidia_gpus_on_pci(root.path()),
            vec!["0000:1b:00.0", "0000:c1:00.0"]
        );
        assert!(nvidia_gpus_on_pci(&root.path().join("missing")).is_empty());
    }

    #[test]
    fn fifo_and_huge_attributes_skip_the_device_without_a_hang() {
        let root = tempfile::tempdir().unwrap();
        let dev = |bdf: &str| {
            let d = root.path().join("bus/pci/devices").join(bdf);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let good = dev("0000:1b:00.0");
        std::fs::write(good.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(good.join("class"), "0x030200\n").unwrap();
        let fifo = dev("0000:2b:00.0");
        let c = std::ffi::CString::new(fifo.join("vendor").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let huge = dev("0000:3b:00.0");
        std::fs::write(huge.join("vendor"), "0x10de\n").unwrap();
        let f = std::fs::File::create(huge.join("class")).unwrap();
        f.set_len(2 << 30).unwrap();
        assert_eq!(nvidia_gpus_on_pci(root.path()), vec!["0000:1b:00.0"]);
    }
}
