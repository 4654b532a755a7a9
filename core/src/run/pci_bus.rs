//! The NVIDIA GPUs on the PCI bus, read again only when the bus changed.
//!
//! The GPU count check compares NVML with the PCI bus, so every run lists
//! `<sysfs_root>/bus/pci/devices` and reads each device's `vendor` (and
//! an NVIDIA device's `class`): six system calls per device, and an HGX
//! node has one to two hundred PCI functions. The kernel fixes a device's
//! vendor and class when it adds the device, so what one boot's listing
//! held is what the same listing holds later: the answer is kept in
//! `pci-bus.json` with the boot id and the listing's fingerprint
//! (`PciListing::fingerprint`: names and entry numbers), and the devices
//! are read again when either changes (a device added, removed or
//! re-added, a reboot) or when the last read was not complete.
//!
//! A GPU that falls off the bus keeps its entry (its vendor file is the
//! kernel's copy), so the kept answer is what a read would say; one that
//! the kernel removes changes the listing. A tree an admin points
//! `sysfs_root` at is a copy, not the kernel's: edits inside a device's
//! directory are not seen until its listing changes (docs/operations.md).

use serde::{Deserialize, Serialize};

use crate::probe::sysfs::{self, PciListing};
use crate::snapshot::normalize_pci;
use crate::state::{StateFile, StateValue};

use super::RunContext;

/// Which devices count as GPUs (`sysfs::scan_nvidia_gpus`): a release
/// that changes the rule raises it, so that an answer kept by an older
/// one is not used.
const RULE: u32 = 1;

/// What `pci-bus.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciBusSeen {
    /// [`RULE`] when it was read (0: a file from before the rule had a
    /// number, read again without a warning).
    #[serde(default)]
    pub rule: u32,
    pub boot_id: String,
    /// The configured `sysfs_root` the bus was read under.
    pub sysfs_root: String,
    /// `PciListing::fingerprint` of the listing that was read.
    pub listing: String,
    /// Normalised bus ids, sorted.
    pub nvidia_gpus: Vec<String>,
}

impl StateValue for PciBusSeen {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::PciBus
    }
}

/// Whether a run may replace `pci-bus.json` (the runs that act do; the
/// admin's read-only views only read it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Save,
    ReadOnly,
}

/// The NVIDIA GPUs on the PCI bus, sorted (see the module's text).
pub fn nvidia_gpus(ctx: &RunContext, keep: Keep) -> Vec<String> {
    let cfg = ctx.config();
    let Some(listing) = PciListing::read_or_warn(&cfg.sysfs_root) else {
        return Vec::new();
    };
    // No boot id (an unreadable /proc): nothing is kept, every run reads.
    let now = PciBusSeen {
        rule: RULE,
        boot_id: ctx.boot_id().to_string(),
        sysfs_root: cfg.sysfs_root.to_string_lossy().into_owned(),
        listing: listing.fingerprint(),
        nvidia_gpus: Vec::new(),
    };
    if !now.boot_id.is_empty() {
        match ctx.state.load::<PciBusSeen>(()) {
            Ok(Some(kept)) if kept.is_for(&now) => {
                if let Some(gpus) = kept.checked_gpus() {
                    return gpus;
                }
                log::warn!("pci-bus.json holds what no PCI bus lists: read again");
            }
            Ok(_) => {}
            Err(e) => log::warn!("{e}: the PCI bus is read again"),
        }
    }
    let scan = sysfs::scan_nvidia_gpus(&cfg.sysfs_root, &listing);
    if scan.complete && !now.boot_id.is_empty() && keep == Keep::Save {
        let seen = PciBusSeen {
            nvidia_gpus: scan.nvidia_gpus.clone(),
            ..now
        };
        // Outside the run's turn: two runs at once write the same answer,
        // each file whole (atomic), and a failed write only means a read
        // next time.
        if let Err(e) = ctx.state.save((), &seen) {
            log::debug!("PCI bus answer not kept: {e}");
        }
    }
    scan.nvidia_gpus
}

impl PciBusSeen {
    /// Read by the same rule in the same boot, under the same root, from
    /// the same listing.
    fn is_for(&self, now: &PciBusSeen) -> bool {
        self.rule == now.rule
            && self.boot_id == now.boot_id
            && self.sysfs_root == now.sysfs_root
            && self.listing == now.listing
    }

    /// The kept GPUs as a read gives them (normalised bus ids, sorted, at
    /// most a node's worth); `None` for anything else.
    fn checked_gpus(self) -> Option<Vec<String>> {
        if self.nvidia_gpus.len() > crate::snapshot::MAX_GPUS
            || !self.nvidia_gpus.is_sorted()
            || self
                .nvidia_gpus
                .iter()
                .any(|g| normalize_pci(g).as_deref() != Some(g.as_str()))
        {
            return None;
        }
        Some(self.nvidia_gpus)
    }
}
