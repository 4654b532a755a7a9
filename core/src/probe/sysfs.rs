//! What the PCI bus says, independently of the driver: a GPU that fell off
//! the bus is often still listed here while NVML no longer counts it.

use std::path::Path;

use crate::snapshot::normalize_pci;

const NVIDIA_VENDOR: &str = "0x10de";

/// Normalised bus ids of NVIDIA display/3D controllers under
/// `<sysfs_root>/bus/pci/devices` (NVSwitches and audio functions are not
/// GPUs and are skipped). Missing or unreadable trees give an empty list.
pub fn nvidia_gpus_on_pci(sysfs_root: &Path) -> Vec<String> {
    let dir = sysfs_root.join("bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let read =
            |f: &str| std::fs::read_to_string(path.join(f)).map(|s| s.trim().to_ascii_lowercase());
        // The class is read only for NVIDIA devices (one read per device).
        if read("vendor").ok().as_deref() != Some(NVIDIA_VENDOR) {
            continue;
        }
        let Ok(class) = read("class") else { continue };
        // 0x0300xx VGA controller, 0x0302xx 3D controller.
        if class.starts_with("0x0300") || class.starts_with("0x0302") {
            if let Some(bdf) = entry.file_name().to_str().and_then(normalize_pci) {
                out.push(bdf);
            }
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
}
