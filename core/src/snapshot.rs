//! The plain, serialisable picture of a node that every check reads.
//!
//! Probes fill it; checks, the Xid engine, the epilog and the SPANK plugin
//! only read it. Every field that a probe may fail to read is an `Option`
//! (absent = "could not be read", never a made-up zero).

use serde::{Deserialize, Serialize};

/// The most GPUs one node can hold as gpu-health sees them: NVML numbers a
/// node's devices below 64 (today's largest nodes have 8 to 16), and
/// `expected_gpus` and job GPU lists are capped at it.
pub const MAX_GPUS: usize = 64;

/// Everything gpu-health learned about one node at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// Unix time in milliseconds when the probe started.
    pub taken_at_ms: u64,
    /// How long the probe took, in microseconds.
    pub probe_us: u64,
    /// NVML could not be used at all (library missing, nvmlInit failed,
    /// deadline passed). `gpus` is then empty.
    pub nvml_error: Option<NvmlFailure>,
    pub driver_version: Option<String>,
    /// NVIDIA GPUs present on the PCI bus per sysfs (normalised bus ids),
    /// whether or not the driver still talks to them.
    pub pci_gpus: Vec<String>,
    pub gpus: Vec<GpuSnapshot>,
    /// GPU-to-GPU links; `links[i][j]` for NVML indices i, j.
    pub topology: Option<Vec<Vec<GpuLink>>>,
}

/// What the SPANK plugin needs of the node's GPUs at step launch: which
/// GPUs there are and how they reach each other. Small, and rewritten only
/// when it changes (`StateFile::NodeTopology`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeTopology {
    /// (NVML index, UUID, PCI bus id) of each GPU.
    pub gpus: Vec<(u32, Option<String>, Option<String>)>,
    /// GPU-to-GPU links; `links[i][j]` for NVML indices i, j.
    pub links: Option<Vec<Vec<GpuLink>>>,
}

impl NodeTopology {
    pub fn of(s: &NodeSnapshot) -> NodeTopology {
        NodeTopology {
            gpus: s
                .gpus
                .iter()
                .map(|g| (g.index, g.uuid.clone(), g.pci_bus_id.clone()))
                .collect(),
            links: s.topology.clone(),
        }
    }
}

/// Why NVML gave us nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NvmlFailure {
    /// The library could not be loaded.
    LibraryMissing { detail: String },
    /// nvmlInit (or device enumeration) returned an error.
    InitFailed { detail: String },
    /// The probe did not finish before the deadline and was abandoned.
    Timeout { deadline_ms: u64 },
    /// The probe child died or returned garbage.
    ProbeCrashed { detail: String },
}

impl std::fmt::Display for NvmlFailure {
    /// A sentence for logs, records and the terminal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlFailure::LibraryMissing { detail } => write!(f, "NVML library missing: {detail}"),
            NvmlFailure::InitFailed { detail } => write!(f, "NVML init failed: {detail}"),
            NvmlFailure::Timeout { deadline_ms } => {
                write!(f, "NVML did not answer within {deadline_ms} ms")
            }
            NvmlFailure::ProbeCrashed { detail } => write!(f, "NVML probe crashed: {detail}"),
        }
    }
}

/// How two GPUs reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuLink {
    /// Same device.
    Itself,
    /// NVLink, directly or through NVSwitch.
    Nvlink,
    /// Only PCIe (any distance) or unknown.
    Pcie,
}

/// One GPU as NVML reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSnapshot {
    /// NVML index (the global index Slurm's SLURM_JOB_GPUS uses when
    /// gres.conf lists devices in NVML order).
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// Normalised `DDDD:BB:DD.F`, lower case.
    pub pci_bus_id: Option<String>,
    /// The GPU answered NVML_ERROR_GPU_IS_LOST (fallen off the bus).
    pub lost: bool,
    /// Errors of individual queries, "query: error" (not findings by
    /// themselves; shown in `gpu-health check --json`).
    pub query_errors: Vec<String>,
    pub memory_total_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
    /// Percent of the last sample period the GPU ran a kernel
    /// (nvidia-smi's `utilization.gpu`).
    #[serde(default)]
    pub utilization_gpu_pct: Option<u32>,
    pub temperature_c: Option<u32>,
    /// Percent of the fan's maximum; `None` where the board has no fan of
    /// its own (SXM) or NVML does not say.
    #[serde(default)]
    pub fan_speed_pct: Option<u32>,
    pub power_usage_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub default_power_limit_mw: Option<u32>,
    /// Millijoules since the driver was loaded (Volta and newer).
    pub energy_mj: Option<u64>,
    pub ecc: Option<EccCounts>,
    pub remapped_rows: Option<RemappedRows>,
    pub retired_pages_pending: Option<bool>,
    pub pcie: Option<PcieLink>,
    /// One entry per NVLink the GPU has; empty on PCIe-only GPUs.
    pub nvlinks: Vec<NvLinkState>,
    /// NVML clock-event (throttle) reason bit mask.
    pub throttle_reasons: Option<u64>,
    /// Nanoseconds since the driver was loaded that the power policy (and
    /// the thermal one) held the clocks below what was asked
    /// (`nvmlDeviceGetViolationStatus`); `None` where not supported.
    #[serde(default)]
    pub power_violation_ns: Option<u64>,
    #[serde(default)]
    pub thermal_violation_ns: Option<u64>,
    pub persistence_mode: Option<bool>,
    pub accounting_mode: Option<bool>,
    pub accounted_processes: Vec<AccountedProcess>,
    /// NVSwitch fabric registration (Hopper and newer); `None` where the
    /// GPU has none (NOT_SUPPORTED: PCIe-only boards, older GPUs).
    #[serde(default)]
    pub fabric: Option<FabricInfo>,
    /// NVML's persistent recovery action (field 230,
    /// nvmlDeviceGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node reboot,
    /// ...); `None` where the driver does not report it.
    #[serde(default)]
    pub recovery_action: Option<u32>,
    /// Compute processes on the GPU when it was probed.
    #[serde(default)]
    pub running_processes: Vec<RunningProcess>,
    /// MIG mode is on (`None`: the GPU has no MIG, or NVML does not say).
    /// NVML keeps no accounting statistics on a MIG GPU.
    #[serde(default)]
    pub mig_mode: Option<bool>,
}

/// nvmlDeviceGetGpuFabricInfo's answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricInfo {
    /// nvmlGpuFabricState_t: 1 not started, 2 in progress, 3 completed.
    pub state: u8,
    /// The registration's nvmlReturn_t (0: success).
    pub status: u32,
}

pub mod fabric_state {
    pub const NOT_STARTED: u8 = 1;
    pub const IN_PROGRESS: u8 = 2;
    pub const COMPLETED: u8 = 3;
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningProcess {
    pub pid: u32,
    /// `None`: NVML does not say (NVML_VALUE_NOT_AVAILABLE).
    pub used_memory_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EccCounts {
    pub volatile_corrected: u64,
    pub volatile_uncorrected: u64,
    pub aggregate_corrected: u64,
    pub aggregate_uncorrected: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    pub current_gen: u32,
    pub max_gen: u32,
    pub current_width: u32,
    pub max_width: u32,
    pub replay_counter: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvLinkState {
    pub link: u32,
    pub active: bool,
    /// Sum of the link's error counters (replay, recovery, CRC), when read.
    pub error_total: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountedProcess {
    pub pid: u32,
    pub max_memory_bytes: Option<u64>,
    /// Unix time in microseconds.
    pub start_time_us: u64,
    /// Run time in ms; 0 while the process is still running.
    pub time_ms: u64,
    pub is_running: bool,
    /// Percent of its run time the GPU's SMs (and its memory) were busy,
    /// as NVML's accounting statistics say.
    #[serde(default)]
    pub gpu_utilization: Option<u32>,
    #[serde(default)]
    pub memory_utilization: Option<u32>,
}

/// Throttle-reason bits that mean the hardware is protecting itself (from
/// nvml.h `nvmlClocksEventReason*`).
pub mod throttle {
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
}

/// Normalise a PCI address to `DDDD:BB:DD.F` in lower case.
///
/// Accepts NVML's 8-digit domain (`00000000:3B:00.0`), the kernel log's
/// form without function (`0000:3b:00`), and plain `3b:00.0`.
pub fn normalize_pci(addr: &str) -> Option<String> {
    let addr = addr.trim();
    let mut parts = addr.split(':').collect::<Vec<_>>();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    if parts.len() != 3 {
        return None;
    }
    let (dev, func) = match parts[2].split_once('.') {
        Some((d, f)) => (d, f),
        None => (parts[2], "0"),
    };
    let domain = u32::from_str_radix(parts[0], 16).ok()?;
    let bus = u32::from_str_radix(parts[1], 16).ok()?;
    let dev = u32::from_str_radix(dev, 16).ok()?;
    let func = u32::from_str_radix(func, 16).ok()?;
    if domain > 0xffff || bus > 0xff || dev > 0x1f || func > 0x7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

impl NodeSnapshot {
    /// The GPU whose normalised PCI address is `pci`.
    pub fn gpu_by_pci(&self, pci: &str) -> Option<&GpuSnapshot> {
        self.gpus
            .iter()
            .find(|g| g.pci_bus_id.as_deref() == Some(pci))
    }

    pub fn gpu_by_index(&self, index: u32) -> Option<&GpuSnapshot> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// Give every GPU the index it has on the node. Inside a job's device
    /// cgroup NVML enumerates only the job's GPUs and numbers them 0..k;
    /// the node's numbering is their order on the PCI bus (NVML's order),
    /// which sysfs (`pci_gpus`) lists in full. Changes nothing unless
    /// every GPU's bus id is in `pci_gpus`: a guess would name the wrong
    /// GPU in a drain reason.
    pub fn number_as_on_node(&mut self) {
        let places: Option<Vec<u32>> = self
            .gpus
            .iter()
            .map(|g| {
                let bus = g.pci_bus_id.as_deref()?;
                let place = self.pci_gpus.iter().position(|p| p == bus)?;
                u32::try_from(place).ok()
            })
            .collect();
        if let Some(places) = places {
            for (gpu, place) in self.gpus.iter_mut().zip(places) {
                gpu.index = place;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_at(index: u32, bus: &str) -> GpuSnapshot {
        GpuSnapshot {
            index,
            pci_bus_id: Some(bus.into()),
            ..GpuSnapshot::default()
        }
    }

    #[test]
    fn a_job_view_is_numbered_as_on_the_node() {
        let node: Vec<String> = [
            "0000:18:00.0",
            "0000:2a:00.0",
            "0000:3a:00.0",
            "0000:5d:00.0",
        ]
        .map(String::from)
        .to_vec();
        // NVML inside the job's cgroup: the node's GPUs 1 and 3 as 0 and 1.
        let mut snap = NodeSnapshot {
            gpus: vec![gpu_at(0, "0000:2a:00.0"), gpu_at(1, "0000:5d:00.0")],
            pci_gpus: node.clone(),
            ..NodeSnapshot::default()
        };
        snap.number_as_on_node();
        let indices: Vec<u32> = snap.gpus.iter().map(|g| g.index).collect();
        assert_eq!(indices, [1, 3]);

        // One GPU that sysfs does not list: no guessing, NVML's numbers stay.
        let mut odd = NodeSnapshot {
            gpus: vec![gpu_at(0, "0000:2a:00.0"), gpu_at(1, "0000:99:00.0")],
            pci_gpus: node,
            ..NodeSnapshot::default()
        };
        odd.number_as_on_node();
        let indices: Vec<u32> = odd.gpus.iter().map(|g| g.index).collect();
        assert_eq!(indices, [0, 1]);
    }

    #[test]
    fn normalizes_nvml_and_kernel_forms() {
        assert_eq!(
            normalize_pci("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(normalize_pci("0000:3b:00").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(normalize_pci("0008:01:00").as_deref(), Some("0008:01:00.0"));
        assert_eq!(normalize_pci("c1:00.1").as_deref(), Some("0000:c1:00.1"));
        assert_eq!(normalize_pci("zz:00.0"), None);
        assert_eq!(normalize_pci("0000:3b:00.9"), None);
        assert_eq!(normalize_pci(""), None);
    }
}
