//! The scenario file as written (JSON), before defaults are applied.
//!
//! Per-GPU objects are partial: `BUILTIN_GPU` (a healthy H100 SXM5) is
//! overlaid with the file's `defaults`, then with the GPU's own entry, and
//! only the result is deserialised into [`GpuSpec`], where every field is
//! required and unknown fields are rejected (so typos fail loudly).

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::collections::BTreeMap;

/// Every per-GPU field with its default: a healthy, idle H100 80GB HBM3 on
/// an HGX board. `null` fields are derived from the GPU's position.
pub const BUILTIN_GPU: &str = r#"{
  "name": "NVIDIA H100 80GB HBM3",
  "uuid": null,
  "serial": null,
  "pci_bus_id": null,
  "pci_device_id": "0x233010DE",
  "pci_subsystem_id": "0x16C110DE",
  "minor_number": null,
  "numa_node": null,
  "memory": { "total_mib": 81559, "reserved_mib": 506, "used_mib": 4 },
  "temperature_c": 34,
  "fan_speed_pct": null,
  "power": { "draw_mw": 72000, "limit_mw": 700000, "default_limit_mw": 700000 },
  "energy_base_mj": 0,
  "ecc": {
    "enabled": true,
    "volatile_corrected": 0, "volatile_uncorrected": 0,
    "aggregate_corrected": 0, "aggregate_uncorrected": 0,
    "corrected_per_hour": 0
  },
  "remapped_rows": { "correctable": 0, "uncorrectable": 0, "pending": false, "failure": false },
  "retired_pages_pending": false,
  "pcie": { "gen": 5, "max_gen": 5, "width": 16, "max_width": 16, "replay_counter": 0 },
  "nvlink": { "count": 18, "inactive": [], "errors": {} },
  "throttle_reasons": 0,
  "violation": { "power_share": 0.0, "thermal_share": 0.0 },
  "utilization": { "gpu_pct": 0, "memory_pct": 0, "encoder_pct": 0, "decoder_pct": 0 },
  "running_processes": [],
  "clocks": {
    "graphics_mhz": 1980, "sm_mhz": 1980, "memory_mhz": 2619, "video_mhz": 1755,
    "max_graphics_mhz": 1980, "max_sm_mhz": 1980, "max_memory_mhz": 2619, "max_video_mhz": 1755
  },
  "performance_state": 0,
  "compute_mode": 0,
  "cuda_compute_capability": [9, 0],
  "pcie_throughput_kbps": { "tx": 0, "rx": 0 },
  "mig_mode": { "current": 0, "pending": 0 },
  "fabric": { "state": 3, "status": 0, "clique_id": 1 },
  "recovery_action": 0,
  "persistence_mode": true,
  "accounting": { "enabled": true, "buffer_size": 4000, "processes": [] },
  "lost": false,
  "lost_mode": "handle_fails",
  "not_supported": []
}"#;

/// The top level of a scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    #[serde(default = "default_nvml_version")]
    pub nvml_version: String,
    #[serde(default = "default_cuda_version")]
    pub cuda_driver_version: i32,
    /// When the driver was "loaded": the energy counter and the corrected
    /// ECC growth count from here. Default: the machine's boot time.
    #[serde(default)]
    pub driver_loaded_unix_ms: Option<u64>,
    /// nvmlInit fails with this code (a number or a name such as
    /// "DRIVER_NOT_LOADED").
    #[serde(default)]
    pub init_error: Option<ReturnCodeSpec>,
    /// Number of GPUs; default: as many as `gpus` describes.
    #[serde(default)]
    pub count: Option<u32>,
    /// Partial GPU object applied to every GPU.
    #[serde(default)]
    pub defaults: Option<Value>,
    /// Per-GPU partial objects: an array in GPU order, or an object keyed
    /// by the GPU's position ("3").
    #[serde(default)]
    pub gpus: Option<Value>,
    #[serde(default)]
    pub topology: TopologySpec,
    #[serde(default)]
    pub hangs: Vec<HangSpec>,
}

fn default_driver_version() -> String {
    "550.90.07".into()
}
fn default_nvml_version() -> String {
    "12.550.90.07".into()
}
fn default_cuda_version() -> i32 {
    12040
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ReturnCodeSpec {
    Number(u32),
    Name(String),
}

/// `"auto"`/`"nvswitch"`, `"pcie"`, or the long form.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum TopologySpec {
    Short(String),
    Full(TopologyFull),
}

impl Default for TopologySpec {
    fn default() -> Self {
        TopologySpec::Short("auto".into())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFull {
    /// "auto" (GPUs with NVLinks reach each other through NVSwitch),
    /// "none", or explicit pairs `[[0,1],[2,3]]`.
    #[serde(default = "default_nvlink")]
    pub nvlink: Value,
    /// Common ancestor of two GPUs on the same NUMA node.
    #[serde(default = "default_same_numa")]
    pub same_numa: String,
    /// Common ancestor of two GPUs on different NUMA nodes.
    #[serde(default = "default_cross_numa")]
    pub cross_numa: String,
}

fn default_nvlink() -> Value {
    Value::String("auto".into())
}
fn default_same_numa() -> String {
    "NODE".into()
}
fn default_cross_numa() -> String {
    "SYSTEM".into()
}

/// A call that blocks before it answers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HangSpec {
    /// Exported function name, or "any".
    pub call: String,
    pub ms: u64,
    /// Only on this GPU (position); device calls and GetHandleByIndex.
    #[serde(default)]
    pub gpu: Option<u32>,
}

/// One GPU after defaults were applied.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    pub name: String,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    pub pci_bus_id: Option<String>,
    #[serde(deserialize_with = "u32_number_or_hex")]
    pub pci_device_id: u32,
    #[serde(deserialize_with = "u32_number_or_hex")]
    pub pci_subsystem_id: u32,
    pub minor_number: Option<u32>,
    pub numa_node: Option<u32>,
    pub memory: MemorySpec,
    pub temperature_c: u32,
    /// `null`: NOT_SUPPORTED, as on SXM boards cooled by the chassis.
    pub fan_speed_pct: Option<u32>,
    pub power: PowerSpec,
    pub energy_base_mj: u64,
    pub ecc: EccSpec,
    pub remapped_rows: Option<RemappedRowsSpec>,
    pub retired_pages_pending: bool,
    pub pcie: PcieSpec,
    pub nvlink: NvLinkSpec,
    #[serde(deserialize_with = "u64_number_or_hex")]
    pub throttle_reasons: u64,
    pub violation: ViolationSpec,
    pub utilization: UtilizationSpec,
    /// Processes on the GPU now (`nvmlDeviceGetComputeRunningProcesses`).
    pub running_processes: Vec<RunningProcessSpec>,
    pub clocks: ClocksSpec,
    /// P-state 0..=15.
    pub performance_state: u32,
    /// 0 default, 1 exclusive thread, 2 prohibited, 3 exclusive process.
    pub compute_mode: u32,
    pub cuda_compute_capability: (i32, i32),
    pub pcie_throughput_kbps: PcieThroughputSpec,
    /// `null`: NOT_SUPPORTED (GPUs without MIG).
    pub mig_mode: Option<MigModeSpec>,
    /// `null`: NOT_SUPPORTED (no NVSwitch fabric: PCIe boards, Ampere).
    pub fabric: Option<FabricSpec>,
    /// Field 230; `null`: the driver does not report it (before R550).
    pub recovery_action: Option<u32>,
    pub persistence_mode: bool,
    pub accounting: AccountingSpec,
    pub lost: bool,
    pub lost_mode: LostMode,
    pub not_supported: Vec<String>,
}

/// Percent of the last sample period the GPU (its memory, encoder,
/// decoder) was busy (`nvmlDeviceGetUtilizationRates` and friends).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationSpec {
    pub gpu_pct: u32,
    pub memory_pct: u32,
    pub encoder_pct: u32,
    pub decoder_pct: u32,
}

/// A process using the GPU now.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunningProcessSpec {
    pub pid: u32,
    pub used_memory_mib: u64,
    /// Percent of the sample period its kernels (memory traffic) ran.
    #[serde(default)]
    pub sm_pct: u32,
    #[serde(default)]
    pub memory_pct: u32,
}

/// Current and maximum clocks in MHz.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClocksSpec {
    pub graphics_mhz: u32,
    pub sm_mhz: u32,
    pub memory_mhz: u32,
    pub video_mhz: u32,
    pub max_graphics_mhz: u32,
    pub max_sm_mhz: u32,
    pub max_memory_mhz: u32,
    pub max_video_mhz: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieThroughputSpec {
    pub tx: u32,
    pub rx: u32,
}

/// nvmlGpuFabricInfo_t: state 1 not started, 2 in progress, 3 completed;
/// status the registration's nvmlReturn_t.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    pub state: u8,
    pub status: u32,
    pub clique_id: u32,
}

/// MIG mode now and after the next GPU reset (0 disabled, 1 enabled).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigModeSpec {
    pub current: u32,
    pub pending: u32,
}

/// Share of the time since the driver was loaded that the clocks were held
/// below what was asked, by the power and by the thermal policy
/// (`nvmlDeviceGetViolationStatus`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViolationSpec {
    pub power_share: f64,
    pub thermal_share: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    pub total_mib: u64,
    pub reserved_mib: u64,
    pub used_mib: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerSpec {
    pub draw_mw: u32,
    pub limit_mw: u32,
    pub default_limit_mw: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccSpec {
    pub enabled: bool,
    pub volatile_corrected: u64,
    pub volatile_uncorrected: u64,
    pub aggregate_corrected: u64,
    pub aggregate_uncorrected: u64,
    /// Corrected errors added per hour since the driver was loaded, to both
    /// the volatile and the aggregate corrected counters.
    pub corrected_per_hour: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRowsSpec {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieSpec {
    pub gen: u32,
    pub max_gen: u32,
    pub width: u32,
    pub max_width: u32,
    pub replay_counter: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvLinkSpec {
    pub count: u32,
    pub inactive: Vec<u32>,
    /// Error counters per link ("3": {...}); links not named read 0.
    pub errors: BTreeMap<String, LinkErrors>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkErrors {
    pub replay: u64,
    pub recovery: u64,
    pub crc_flit: u64,
    pub crc_data: u64,
    pub ecc_data: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountingSpec {
    pub enabled: bool,
    pub buffer_size: u32,
    pub processes: Vec<ProcessSpec>,
}

/// One accounted process. Give its start either as `start_unix_ms` or as
/// `started_ms_ago` (relative to the moment of each query).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub pid: u32,
    /// `null`: NVML reports "not available".
    pub max_memory_bytes: Option<u64>,
    #[serde(default)]
    pub start_unix_ms: Option<u64>,
    #[serde(default)]
    pub started_ms_ago: Option<u64>,
    /// Run time once it ended; 0 = still running.
    #[serde(default)]
    pub run_time_ms: u64,
    #[serde(default)]
    pub gpu_utilization: u32,
    #[serde(default)]
    pub memory_utilization: u32,
}

/// How a lost GPU shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostMode {
    /// nvmlDeviceGetHandleByIndex returns GPU_IS_LOST (the usual case).
    HandleFails,
    /// The handle is given; every query on it returns GPU_IS_LOST.
    QueriesFail,
    /// NVML does not enumerate the GPU at all: the count drops and later
    /// GPUs move down one index.
    Absent,
}

fn u64_number_or_hex<'de, D: Deserializer<'de>>(de: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    match Raw::deserialize(de)? {
        Raw::Number(n) => Ok(n),
        Raw::Text(s) => {
            let t = s.trim();
            let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => t.parse(),
            };
            parsed.map_err(|_| serde::de::Error::custom(format!("not a number: {s:?}")))
        }
    }
}

fn u32_number_or_hex<'de, D: Deserializer<'de>>(de: D) -> Result<u32, D::Error> {
    let v = u64_number_or_hex(de)?;
    u32::try_from(v).map_err(|_| serde::de::Error::custom(format!("{v} does not fit 32 bits")))
}
