//! The only place in gpu-health that talks to NVML.
//!
//! Reads everything the checks, the epilog and the SPANK plugin need into a
//! [`NodeSnapshot`]. A query that fails is noted in `query_errors` and its
//! field stays `None`; a GPU that answers `GPU_IS_LOST` is marked lost.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, P2pCapabilitiesIndex, P2pStatus, PerformancePolicy, TemperatureSensor,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use crate::snapshot::{
    normalize_pci, AccountedProcess, EccCounts, FabricInfo, GpuLink, GpuSnapshot, NodeSnapshot,
    NvLinkState, NvmlFailure, PcieLink, RemappedRows, RunningProcess,
};

/// The library name the real driver installs.
pub const SYSTEM_LIBRARY: &str = "libnvidia-ml.so.1";

/// nvml.h `NVML_NVLINK_MAX_LINKS`.
const MAX_NVLINKS: u32 = 18;

/// nvml.h field ids of the remapped-rows counters (Ampere and newer).
const FI_REMAPPED_COR: u32 = 142;
const FI_REMAPPED_UNC: u32 = 143;
const FI_REMAPPED_PENDING: u32 = 144;
const FI_REMAPPED_FAILURE: u32 = 145;
/// nvml.h `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` (R550 and newer).
const FI_RECOVERY_ACTION: u32 = 230;
/// nvml.h `NVML_ERROR_NOT_SUPPORTED`.
const NVML_ERROR_NOT_SUPPORTED: u32 = 3;

/// What the probe should read besides the health fields.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProbeOptions {
    /// Read accounted processes (epilog: peak memory).
    pub accounting_processes: bool,
    /// Turn accounting mode on where it is off (prolog, as root).
    pub enable_accounting: bool,
    /// Read the GPU-to-GPU link matrix.
    pub topology: bool,
}

impl ProbeOptions {
    /// What the Prolog reads: accounting turned on for the job's
    /// processes, and the link matrix for the SPANK plugin.
    pub const PROLOG: ProbeOptions = ProbeOptions {
        accounting_processes: false,
        enable_accounting: true,
        topology: true,
    };
}

/// Probe NVML in this process. May block as long as the driver does; use
/// [`super::probe_with_deadline`] from anything Slurm waits on.
///
/// NVML is shut down before the answer is returned, inside the caller's
/// deadline: with persistence mode off, closing NVML's handles is where
/// the driver may tear the GPUs down, and a teardown that hangs is a
/// fault to report, not one to leave behind in the probe's exit after the
/// answer was sent.
pub fn probe_in_process(library: Option<&Path>, opts: ProbeOptions) -> NodeSnapshot {
    let mut snap = NodeSnapshot::default();
    let mut builder = Nvml::builder();
    let lib: &OsStr = match library {
        Some(p) => p.as_os_str(),
        None => OsStr::new(SYSTEM_LIBRARY),
    };
    builder.lib_path(lib);
    let nvml = match builder.init() {
        Ok(n) => n,
        Err(e) => {
            snap.nvml_error = Some(match e {
                NvmlError::LibloadingError(_) | NvmlError::FailedToLoadSymbol(_) => {
                    NvmlFailure::LibraryMissing {
                        detail: format!("{}: {e}", lib.to_string_lossy()),
                    }
                }
                other => NvmlFailure::InitFailed {
                    detail: other.to_string(),
                },
            });
            return snap;
        }
    };
    snap.driver_version = nvml.sys_driver_version().ok();
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            snap.nvml_error = Some(NvmlFailure::InitFailed {
                detail: format!("device count: {e}"),
            });
            return snap;
        }
    };
    let mut devices = Vec::new();
    // A library that claims more devices than a node can hold is broken;
    // the count check reports the difference.
    for index in 0..count.min(crate::snapshot::MAX_GPUS as u32) {
        match nvml.device_by_index(index) {
            Ok(dev) => {
                let mut mdev = dev;
                snap.gpus.push(probe_device(&mut mdev, index, opts));
                devices.push(Some(mdev));
            }
            Err(e) => {
                let gpu = GpuSnapshot {
                    index,
                    lost: matches!(e, NvmlError::GpuLost),
                    query_errors: vec![format!("handle: {e}")],
                    ..GpuSnapshot::default()
                };
                snap.gpus.push(gpu);
                devices.push(None);
            }
        }
    }
    if opts.topology {
        snap.topology = Some(link_matrix(&devices));
    }
    snap
}

fn link_matrix(devices: &[Option<Device<'_>>]) -> Vec<Vec<GpuLink>> {
    let n = devices.len();
    let mut m = vec![vec![GpuLink::Pcie; n]; n];
    for i in 0..n {
        m[i][i] = GpuLink::Itself;
        for j in (i + 1)..n {
            let link = match (&devices[i], &devices[j]) {
                (Some(a), Some(b)) => match a.p2p_status(b, P2pCapabilitiesIndex::NvLink) {
                    Ok(P2pStatus::Ok) => GpuLink::Nvlink,
                    _ => GpuLink::Pcie,
                },
                _ => GpuLink::Pcie,
            };
            m[i][j] = link;
            m[j][i] = link;
        }
    }
    m
}

/// Records the outcome of each query: value, or an error note (and the
/// lost flag when the driver says the GPU is gone).
#[derive(Default)]
struct Reader {
    lost: bool,
    errors: Vec<String>,
}

impl Reader {
    fn get<T>(&mut self, what: &str, r: Result<T, NvmlError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(NvmlError::NotSupported) => None,
            Err(e) => {
                self.lost |= matches!(e, NvmlError::GpuLost);
                self.errors.push(format!("{what}: {e}"));
                None
            }
        }
    }
}

fn probe_device(dev: &mut Device<'_>, index: u32, opts: ProbeOptions) -> GpuSnapshot {
    let mut r = Reader::default();
    let uuid = r.get("uuid", dev.uuid());
    let name = r.get("name", dev.name());
    let pci_bus_id = r
        .get("pci", dev.pci_info())
        .and_then(|p| normalize_pci(&p.bus_id));
    if r.lost {
        // Every further call would fail (and may block): stop here.
        return GpuSnapshot {
            index,
            uuid,
            name,
            pci_bus_id,
            lost: true,
            query_errors: r.errors,
            ..GpuSnapshot::default()
        };
    }
    let mem = r.get("memory", dev.memory_info());
    let mut accounting_mode = r.get("accounting mode", dev.is_accounting_enabled());
    if opts.enable_accounting
        && accounting_mode == Some(false)
        && r.get("enable accounting", dev.set_accounting(true))
            .is_some()
    {
        accounting_mode = Some(true);
    }
    let accounted_processes = if opts.accounting_processes && accounting_mode == Some(true) {
        read_accounting(&mut r, dev)
    } else {
        Vec::new()
    };
    let mut gpu = GpuSnapshot {
        index,
        uuid,
        name,
        pci_bus_id,
        memory_total_bytes: mem.as_ref().map(|m| m.total),
        memory_used_bytes: mem.as_ref().map(|m| m.used),
        utilization_gpu_pct: r.get("utilization", dev.utilization_rates()).map(|u| u.gpu),
        temperature_c: r.get("temperature", dev.temperature(TemperatureSensor::Gpu)),
        fan_speed_pct: r.get("fan speed", dev.fan_speed(0)),
        power_usage_mw: r.get("power", dev.power_usage()),
        power_limit_mw: r.get("power limit", dev.enforced_power_limit()),
        default_power_limit_mw: r.get("default power limit", dev.power_management_limit_default()),
        energy_mj: r.get("energy", dev.total_energy_consumption()),
        ecc: read_ecc(&mut r, dev),
        remapped_rows: read_remapped_rows(&mut r, dev),
        retired_pages_pending: r.get("retired pages", dev.are_pages_pending_retired()),
        pcie: read_pcie(&mut r, dev),
        nvlinks: read_nvlinks(dev),
        throttle_reasons: r
            .get("clock events", dev.current_throttle_reasons())
            .map(|t| t.bits()),
        power_violation_ns: r
            .get(
                "power violation",
                dev.violation_status(PerformancePolicy::Power),
            )
            .map(|v| v.violation_time),
        thermal_violation_ns: r
            .get(
                "thermal violation",
                dev.violation_status(PerformancePolicy::Thermal),
            )
            .map(|v| v.violation_time),
        persistence_mode: r.get("persistence", dev.is_in_persistent_mode()),
        accounting_mode,
        accounted_processes,
        fabric: read_fabric(&mut r, dev),
        mig_mode: r.get("mig mode", dev.mig_mode()).map(|m| m.current == 1),
        recovery_action: r
            .get(
                "recovery action",
                dev.field_values_for(&[FieldId(FI_RECOVERY_ACTION)]),
            )
            .and_then(|v| v.first().and_then(field_u64))
            .and_then(|a| u32::try_from(a).ok()),
        running_processes: r
            .get("running processes", dev.running_compute_processes())
            .unwrap_or_default()
            .into_iter()
            .map(|p| RunningProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect(),
        ..GpuSnapshot::default()
    };
    gpu.lost = r.lost;
    gpu.query_errors = r.errors;
    gpu
}

/// nvml.h's nvmlGpuFabricInfo_t (the unversioned call's struct).
#[repr(C)]
#[derive(Default)]
struct RawFabricInfo {
    cluster_uuid: [u8; 16],
    status: u32,
    clique_id: u32,
    state: u8,
}

/// nvmlDeviceGetGpuFabricInfo, which nvml-wrapper does not wrap: through
/// the library's own symbol table (absent on drivers before R525: `None`).
/// NOT_SUPPORTED, in the return or the state, is a GPU without a fabric.
fn read_fabric(r: &mut Reader, dev: &Device<'_>) -> Option<FabricInfo> {
    let Ok(get) = dev.nvml().lib().nvmlDeviceGetGpuFabricInfo.as_ref() else {
        return None;
    };
    // SAFETY: nvml.h's signature; the handle is valid while `dev` lives
    // and the out-struct is a plain C struct NVML fills.
    let mut info = RawFabricInfo::default();
    let ret = unsafe { get(dev.handle(), std::ptr::from_mut(&mut info).cast()) };
    match ret {
        0 if info.state != 0 => Some(FabricInfo {
            state: info.state,
            status: info.status,
        }),
        0 | NVML_ERROR_NOT_SUPPORTED => None,
        code => {
            r.errors.push(format!("fabric info: NVML error {code}"));
            None
        }
    }
}

fn read_ecc(r: &mut Reader, dev: &Device<'_>) -> Option<EccCounts> {
    let enabled = r.get("ecc mode", dev.is_ecc_enabled())?;
    if !enabled.currently_enabled {
        return None;
    }
    Some(EccCounts {
        volatile_corrected: r.get(
            "ecc",
            dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
        )?,
        volatile_uncorrected: r.get(
            "ecc",
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        )?,
        aggregate_corrected: r.get(
            "ecc",
            dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate),
        )?,
        aggregate_uncorrected: r.get(
            "ecc",
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate),
        )?,
    })
}

fn field_u64(sample: &Result<FieldValueSample, NvmlError>) -> Option<u64> {
    match sample.as_ref().ok()?.value.as_ref().ok()? {
        SampleValue::U32(v) => Some(u64::from(*v)),
        SampleValue::U64(v) => Some(*v),
        SampleValue::I64(v) => u64::try_from(*v).ok(),
        SampleValue::F64(v) => (v.is_finite() && *v >= 0.0).then_some(*v as u64),
    }
}

fn read_remapped_rows(r: &mut Reader, dev: &Device<'_>) -> Option<RemappedRows> {
    let ids = [
        FI_REMAPPED_COR,
        FI_REMAPPED_UNC,
        FI_REMAPPED_PENDING,
        FI_REMAPPED_FAILURE,
    ]
    .map(FieldId);
    let values = r.get("remapped rows", dev.field_values_for(&ids))?;
    let v: Vec<Option<u64>> = values.iter().map(field_u64).collect();
    Some(RemappedRows {
        correctable: u32::try_from((*v.first()?)?).unwrap_or(u32::MAX),
        uncorrectable: u32::try_from((*v.get(1)?)?).unwrap_or(u32::MAX),
        pending: (*v.get(2)?)? != 0,
        failure: (*v.get(3)?)? != 0,
    })
}

fn read_pcie(r: &mut Reader, dev: &Device<'_>) -> Option<PcieLink> {
    Some(PcieLink {
        current_gen: r.get("pcie gen", dev.current_pcie_link_gen())?,
        max_gen: r.get("pcie max gen", dev.max_pcie_link_gen())?,
        current_width: r.get("pcie width", dev.current_pcie_link_width())?,
        max_width: r.get("pcie max width", dev.max_pcie_link_width())?,
        replay_counter: r
            .get("pcie replay", dev.pcie_replay_counter())
            .map(u64::from),
    })
}

/// Links the GPU does not have answer NotSupported/InvalidArg: they are
/// simply not listed.
fn read_nvlinks(dev: &Device<'_>) -> Vec<NvLinkState> {
    let mut links = Vec::new();
    for link in 0..MAX_NVLINKS {
        let w = dev.link_wrapper_for(link);
        let Ok(active) = w.is_active() else { continue };
        let mut total: Option<u64> = Some(0);
        for c in [
            ErrorCounter::DlReplay,
            ErrorCounter::DlRecovery,
            ErrorCounter::DlCrcFlit,
            ErrorCounter::DlCrcData,
        ] {
            total = match (total, w.error_counter(c)) {
                (Some(t), Ok(v)) => Some(t.saturating_add(v)),
                _ => None,
            };
        }
        links.push(NvLinkState {
            link,
            active,
            error_total: total,
        });
    }
    links
}

fn read_accounting(r: &mut Reader, dev: &Device<'_>) -> Vec<AccountedProcess> {
    let Some(pids) = r.get("accounting pids", dev.accounting_pids()) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(pids.len());
    for pid in pids {
        if let Some(s) = r.get("accounting stats", dev.accounting_stats_for(pid)) {
            out.push(AccountedProcess {
                pid,
                max_memory_bytes: s.max_memory_usage,
                start_time_us: s.start_time,
                time_ms: s.time,
                is_running: s.is_running,
                gpu_utilization: s.gpu_utilization,
                memory_utilization: s.memory_utilization,
            });
        }
    }
    out
}
