//! What the PCI bus says, independently of the driver: a GPU that fell off
//! the bus is often still listed here while NVML no longer counts it.

use std::path::Path;

use crate::snapshot::normalize_pci;
use crate::sysfs_read::{list_dir_numbered, read_attr, SysfsError};

const NVIDIA_VENDOR: &str = "0x10de";

/// PCI functions listed at most: large nodes with SR-IOV have a few
/// thousand; more is not a PCI bus.
const MAX_PCI_FUNCTIONS: usize = 16384;

/// The devices under `<sysfs_root>/bus/pci/devices`, by name and sysfs
/// entry number, as one directory listing gives them.
pub struct PciListing {
    entries: Vec<(String, u64)>,
}

impl PciListing {
    pub fn read(sysfs_root: &Path) -> Result<PciListing, SysfsError> {
        let entries = list_dir_numbered(&devices_dir(sysfs_root), MAX_PCI_FUNCTIONS)?;
        Ok(PciListing { entries })
    }

    /// [`PciListing::read`], saying why there is none unless the tree is
    /// simply missing (no PCI bus in a fixture: no GPU on it).
    pub fn read_or_warn(sysfs_root: &Path) -> Option<PciListing> {
        PciListing::read(sysfs_root)
            .map_err(|e| {
                if !e.is_not_found() {
                    log::warn!("PCI devices not listed: {e}");
                }
            })
            .ok()
    }

    /// Changes when a device is added, removed, or removed and added
    /// again (its entry number changes): the count and the wrapping sum of
    /// each entry's FNV-1a hash over its name and number, so the listing's
    /// order does not matter and nothing is sorted. The kernel sets a
    /// device's vendor and class when it adds the device, so the same
    /// listing in the same boot has the same GPUs.
    pub fn fingerprint(&self) -> String {
        let sum = self.entries.iter().fold(0u64, |sum, (name, number)| {
            let h = fnv1a(FNV_OFFSET, name.as_bytes());
            sum.wrapping_add(fnv1a(fnv1a(h, &[0]), &number.to_le_bytes()))
        });
        format!("{}:{sum:016x}", self.entries.len())
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What one pass over the PCI bus found.
pub struct PciScan {
    /// Normalised bus ids of the NVIDIA GPUs, sorted.
    pub nvidia_gpus: Vec<String>,
    /// Every device's attributes could be read (none was skipped).
    pub complete: bool,
}

fn devices_dir(sysfs_root: &Path) -> std::path::PathBuf {
    sysfs_root.join("bus/pci/devices")
}

/// Normalised bus ids of NVIDIA display/3D controllers under
/// `<sysfs_root>/bus/pci/devices` (NVSwitches and audio functions are not
/// GPUs and are skipped). Missing or unreadable trees give an empty list.
/// Reads are bounded ([`crate::sysfs_read`]): a FIFO or a huge file where
/// `vendor` or `class` belongs skips that device with a warning, never a
/// hang.
pub fn nvidia_gpus_on_pci(sysfs_root: &Path) -> Vec<String> {
    PciListing::read_or_warn(sysfs_root)
        .map(|listing| scan_nvidia_gpus(sysfs_root, &listing).nvidia_gpus)
        .unwrap_or_default()
}

/// [`nvidia_gpus_on_pci`] over the devices of `listing`: one read of
/// `vendor` per device, and of `class` for NVIDIA's.
pub fn scan_nvidia_gpus(sysfs_root: &Path, listing: &PciListing) -> PciScan {
    let dir = devices_dir(sysfs_root);
    let mut scan = PciScan {
        nvidia_gpus: Vec::new(),
        complete: true,
    };
    for (name, _) in &listing.entries {
        let Some(bdf) = normalize_pci(name) else {
            continue;
        };
        let path = dir.join(name);
        let mut read = |f: &str| match read_attr(&path.join(f)) {
            Ok(s) => Some(s.to_ascii_lowercase()),
            Err(e) => {
                scan.complete = false;
                if e.is_anomaly() {
                    log::warn!("PCI device {bdf} skipped: {e}");
                }
                None
            }
        };
        if read("vendor").as_deref() != Some(NVIDIA_VENDOR) {
            continue;
        }
        let Some(class) = read("class") else { continue };
        // 0x0300xx VGA controller, 0x0302xx 3D controller.
        if class.starts_with("0x0300") || class.starts_with("0x0302") {
            scan.nvidia_gpus.push(bdf);
        }
    }
    scan.nvidia_gpus.sort();
    scan
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
        let listing = PciListing::read(root.path()).unwrap();
        assert!(!scan_nvidia_gpus(root.path(), &listing).complete);
    }

    #[test]
    fn the_fingerprint_follows_the_listing() {
        let root = tempfile::tempdir().unwrap();
        let devices = root.path().join("bus/pci/devices");
        let add = |bdf: &str| {
            let d = devices.join(bdf);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("vendor"), "0x10de\n").unwrap();
            std::fs::write(d.join("class"), "0x030200\n").unwrap();
        };
        add("0000:1b:00.0");
        add("0000:2b:00.0");
        let print = || PciListing::read(root.path()).unwrap().fingerprint();
        let first = print();
        assert!(first.starts_with("2:"), "{first}");
        assert_eq!(print(), first, "the same listing");
        let scan = scan_nvidia_gpus(root.path(), &PciListing::read(root.path()).unwrap());
        assert!(scan.complete);
        assert_eq!(scan.nvidia_gpus, vec!["0000:1b:00.0", "0000:2b:00.0"]);
        add("0000:3b:00.0");
        let added = print();
        assert_ne!(added, first, "a device added");
        // Moved aside and back: the same name, another entry number.
        let kept = root.path().join("kept");
        std::fs::rename(devices.join("0000:3b:00.0"), &kept).unwrap();
        assert_eq!(print(), first, "the device removed again");
        add("0000:3b:00.0");
        std::fs::remove_dir_all(&kept).unwrap();
        assert_ne!(print(), added, "the device added again, as a new entry");
    }
}
