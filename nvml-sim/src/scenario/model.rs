//! A scenario with every default applied: what the exported functions read.
//!
//! Values that change with time (energy, growing ECC counts, process start
//! times given as an age) are computed from the wall clock at each query, so
//! separate processes (prolog, epilog) see one consistent device.

use super::spec::{GpuSpec, HangSpec, LinkErrors, LostMode, ProcessSpec};
use std::collections::BTreeSet;

/// Most GPUs a scenario may describe (handles are slots of a static table).
pub const MAX_GPUS: usize = 64;

#[derive(Debug, Clone)]
pub struct Scenario {
    pub description: String,
    pub driver_version: String,
    pub nvml_version: String,
    pub cuda_driver_version: i32,
    pub driver_loaded_unix_ms: u64,
    pub init_error: Option<u32>,
    /// Every GPU of the file, by position (including absent ones).
    pub gpus: Vec<Gpu>,
    pub topology: Topology,
    pub hangs: Vec<HangSpec>,
    /// Positions NVML enumerates, in NVML index order.
    pub(crate) visible: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct Topology {
    pub nvlink: NvLinkTopology,
    /// nvmlGpuTopologyLevel_t values.
    pub same_numa: u32,
    pub cross_numa: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvLinkTopology {
    /// Any two GPUs that both have NVLinks are connected (NVSwitch).
    Auto,
    None,
    /// Unordered pairs of positions, stored with the smaller first.
    Pairs(BTreeSet<(u32, u32)>),
}

/// One GPU: the resolved identity plus the fully defaulted spec.
#[derive(Debug, Clone)]
pub struct Gpu {
    /// Place in the scenario's GPU list (= NVML index unless one is absent).
    pub position: u32,
    pub uuid: String,
    pub serial: String,
    pub pci: PciAddress,
    pub minor_number: u32,
    pub numa_node: u32,
    pub spec: GpuSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

impl PciAddress {
    /// Accepts `00000000:3B:00.0`, `0000:3b:00.0` and `3b:00.0`.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let mut parts: Vec<&str> = text.trim().split(':').collect();
        if parts.len() == 2 {
            parts.insert(0, "0");
        }
        let [domain, bus, dev_fn] = parts.as_slice() else {
            return None;
        };
        let (device, function) = dev_fn.split_once('.').unwrap_or((dev_fn, "0"));
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        let addr = PciAddress {
            domain: hex(domain)?,
            bus: hex(bus)?,
            device: hex(device)?,
            function: hex(function)?,
        };
        (addr.bus <= 0xff && addr.device <= 0x1f && addr.function <= 7).then_some(addr)
    }

    /// NVML's `busId` form: `00000000:3B:00.0`.
    pub fn nvml_bus_id(&self) -> String {
        format!(
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }

    /// NVML's `busIdLegacy` form: `0000:3B:00.0`.
    pub fn legacy_bus_id(&self) -> String {
        format!(
            "{:04X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Scenario {
    /// Number of GPUs NVML enumerates.
    pub fn visible_count(&self) -> u32 {
        self.visible.len() as u32
    }

    /// Leave out of NVML's enumeration the GPUs for which `denied` holds,
    /// as the driver leaves out those whose device node the process may
    /// not use. NVML indices of the others close up.
    pub fn hide_gpus(&mut self, denied: impl Fn(&Gpu) -> bool) {
        let gpus = &self.gpus;
        self.visible.retain(|&p| !gpus.get(p).is_some_and(&denied));
    }

    /// The GPU at NVML index `index`.
    pub fn visible_gpu(&self, index: u32) -> Option<&Gpu> {
        let position = *self.visible.get(index as usize)?;
        self.gpus.get(position)
    }

    /// NVML index of the GPU at `position`, if NVML enumerates it.
    pub fn nvml_index_of(&self, position: u32) -> Option<u32> {
        self.visible
            .iter()
            .position(|&p| p == position as usize)
            .map(|i| i as u32)
    }

    /// Whether two GPUs (by position) are connected by NVLink.
    pub fn nvlinked(&self, a: &Gpu, b: &Gpu) -> bool {
        if a.position == b.position {
            return false;
        }
        match &self.topology.nvlink {
            NvLinkTopology::Auto => a.spec.nvlink.count > 0 && b.spec.nvlink.count > 0,
            NvLinkTopology::None => false,
            NvLinkTopology::Pairs(pairs) => {
                let key = (a.position.min(b.position), a.position.max(b.position));
                pairs.contains(&key)
            }
        }
    }

    /// nvmlGpuTopologyLevel_t of the closest common PCIe ancestor.
    pub fn common_ancestor(&self, a: &Gpu, b: &Gpu) -> u32 {
        if a.position == b.position {
            crate::abi::NVML_TOPOLOGY_INTERNAL
        } else if a.numa_node == b.numa_node {
            self.topology.same_numa
        } else {
            self.topology.cross_numa
        }
    }

    /// How long `call` blocks, on GPU `position` when it concerns one.
    pub fn hang_ms(&self, call: &str, position: Option<u32>) -> Option<u64> {
        self.hangs
            .iter()
            .find(|h| {
                (h.call == call || h.call == "any")
                    && match h.gpu {
                        None => true,
                        Some(g) => position == Some(g),
                    }
            })
            .map(|h| h.ms)
    }
}

impl Gpu {
    pub fn is_lost(&self) -> bool {
        self.spec.lost
    }

    pub fn lost_mode(&self) -> Option<LostMode> {
        self.spec.lost.then_some(self.spec.lost_mode)
    }

    pub fn memory_total_bytes(&self) -> u64 {
        self.spec.memory.total_mib.saturating_mul(MIB)
    }
    pub fn memory_reserved_bytes(&self) -> u64 {
        self.spec.memory.reserved_mib.saturating_mul(MIB)
    }
    pub fn memory_used_bytes(&self) -> u64 {
        self.spec.memory.used_mib.saturating_mul(MIB)
    }
    pub fn memory_free_bytes(&self) -> u64 {
        self.memory_total_bytes()
            .saturating_sub(self.memory_reserved_bytes())
            .saturating_sub(self.memory_used_bytes())
    }

    /// Energy counter in mJ: base plus the constant draw integrated since
    /// the driver was loaded.
    pub fn energy_mj(&self, now_ms: u64, loaded_ms: u64) -> u64 {
        let elapsed_ms = now_ms.saturating_sub(loaded_ms) as u128;
        let gained = self.spec.power.draw_mw as u128 * elapsed_ms / 1000;
        self.spec
            .energy_base_mj
            .saturating_add(u64::try_from(gained).unwrap_or(u64::MAX))
    }

    /// Violation time in ns under a policy whose share of the time since
    /// the driver was loaded is `share` (clamped to 0..=1).
    pub fn violation_ns(share: f64, now_ms: u64, loaded_ms: u64) -> u64 {
        let elapsed_ns = now_ms.saturating_sub(loaded_ms) as f64 * 1e6;
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        (elapsed_ns * share) as u64
    }

    /// ECC counter; corrected counts grow by `corrected_per_hour`.
    pub fn ecc_count(
        &self,
        uncorrected: bool,
        aggregate: bool,
        now_ms: u64,
        loaded_ms: u64,
    ) -> u64 {
        let ecc = &self.spec.ecc;
        match (uncorrected, aggregate) {
            (true, false) => ecc.volatile_uncorrected,
            (true, true) => ecc.aggregate_uncorrected,
            (false, aggregate) => {
                let base = if aggregate {
                    ecc.aggregate_corrected
                } else {
                    ecc.volatile_corrected
                };
                let elapsed_ms = now_ms.saturating_sub(loaded_ms) as u128;
                let grown = ecc.corrected_per_hour as u128 * elapsed_ms / 3_600_000;
                base.saturating_add(u64::try_from(grown).unwrap_or(u64::MAX))
            }
        }
    }

    pub fn link_active(&self, link: u32) -> bool {
        link < self.spec.nvlink.count && !self.spec.nvlink.inactive.contains(&link)
    }

    pub fn link_errors(&self, link: u32) -> LinkErrors {
        self.spec
            .nvlink
            .errors
            .get(&link.to_string())
            .copied()
            .unwrap_or_default()
    }

    /// Whether the GPU has at least one active NVLink.
    pub fn any_link_active(&self) -> bool {
        (0..self.spec.nvlink.count).any(|l| self.link_active(l))
    }

    pub fn process(&self, pid: u32) -> Option<&ProcessSpec> {
        self.spec.accounting.processes.iter().find(|p| p.pid == pid)
    }
}

impl ProcessSpec {
    /// Start time in Unix microseconds, as NVML reports it.
    pub fn start_unix_us(&self, now_ms: u64) -> u64 {
        let start_ms = match (self.start_unix_ms, self.started_ms_ago) {
            (Some(abs), _) => abs,
            (None, Some(ago)) => now_ms.saturating_sub(ago),
            (None, None) => now_ms,
        };
        start_ms.saturating_mul(1000)
    }
}

const MIB: u64 = 1024 * 1024;
