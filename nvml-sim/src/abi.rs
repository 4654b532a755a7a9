//! The C ABI of NVML as nvml.h defines it: return codes, enum values and the
//! structs the exported functions fill. Written from nvml.h's layout; the
//! integration tests check it against nvml-wrapper's bindings.

use std::os::raw::{c_char, c_int, c_longlong, c_uint, c_ulong, c_ulonglong, c_ushort};

/// `nvmlReturn_t`.
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t`: an opaque pointer; see `runtime::handles`.
pub type NvmlDevice = *mut std::ffi::c_void;

pub const NVML_SUCCESS: NvmlReturn = 0;
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const NVML_ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const NVML_ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// Symbolic names accepted in scenarios (`init_error`), with their values.
pub const RETURN_CODE_NAMES: &[(&str, NvmlReturn)] = &[
    ("SUCCESS", 0),
    ("UNINITIALIZED", 1),
    ("INVALID_ARGUMENT", 2),
    ("NOT_SUPPORTED", 3),
    ("NO_PERMISSION", 4),
    ("ALREADY_INITIALIZED", 5),
    ("NOT_FOUND", 6),
    ("INSUFFICIENT_SIZE", 7),
    ("INSUFFICIENT_POWER", 8),
    ("DRIVER_NOT_LOADED", 9),
    ("TIMEOUT", 10),
    ("IRQ_ISSUE", 11),
    ("LIBRARY_NOT_FOUND", 12),
    ("FUNCTION_NOT_FOUND", 13),
    ("CORRUPTED_INFOROM", 14),
    ("GPU_IS_LOST", 15),
    ("RESET_REQUIRED", 16),
    ("OPERATING_SYSTEM", 17),
    ("LIB_RM_VERSION_MISMATCH", 18),
    ("IN_USE", 19),
    ("MEMORY", 20),
    ("NO_DATA", 21),
    ("UNKNOWN", 999),
];

/// The fixed text nvmlErrorString gives for a code.
pub fn error_text(code: NvmlReturn) -> &'static str {
    match code {
        0 => "Success",
        1 => "Uninitialized",
        2 => "Invalid Argument",
        3 => "Not Supported",
        4 => "Insufficient Permissions",
        5 => "Already Initialized",
        6 => "Not Found",
        7 => "Insufficient Size",
        8 => "Insufficient External Power",
        9 => "Driver Not Loaded",
        10 => "Timeout",
        11 => "Interrupt Request Issue",
        12 => "NVML Shared Library Not Found",
        13 => "Function Not Found",
        14 => "Corrupted infoROM",
        15 => "GPU is lost",
        16 => "GPU requires restart",
        17 => "The operating system has blocked the request",
        18 => "RM has detected an NVML/RM version mismatch",
        19 => "In use by another client",
        20 => "Insufficient Memory",
        21 => "No data",
        25 => "Argument version mismatch",
        _ => "Unknown Error",
    }
}

pub const NVML_FEATURE_DISABLED: c_uint = 0;
pub const NVML_FEATURE_ENABLED: c_uint = 1;

pub const NVML_TEMPERATURE_GPU: c_uint = 0;

pub const NVML_MEMORY_ERROR_TYPE_CORRECTED: c_uint = 0;
pub const NVML_MEMORY_ERROR_TYPE_UNCORRECTED: c_uint = 1;
pub const NVML_VOLATILE_ECC: c_uint = 0;
pub const NVML_AGGREGATE_ECC: c_uint = 1;

/// Highest NVLink count nvml.h allows (`NVML_NVLINK_MAX_LINKS`).
pub const NVML_NVLINK_MAX_LINKS: u32 = 18;
pub const NVML_NVLINK_ERROR_DL_REPLAY: c_uint = 0;
pub const NVML_NVLINK_ERROR_DL_RECOVERY: c_uint = 1;
pub const NVML_NVLINK_ERROR_DL_CRC_FLIT: c_uint = 2;
pub const NVML_NVLINK_ERROR_DL_CRC_DATA: c_uint = 3;
pub const NVML_NVLINK_ERROR_DL_ECC_DATA: c_uint = 4;

pub const NVML_TOPOLOGY_INTERNAL: c_uint = 0;
/// Topology level names accepted in scenarios, with their values.
pub const TOPOLOGY_LEVEL_NAMES: &[(&str, c_uint)] = &[
    ("INTERNAL", 0),
    ("SINGLE", 10),
    ("MULTIPLE", 20),
    ("HOSTBRIDGE", 30),
    ("NODE", 40),
    ("SYSTEM", 50),
];

pub const NVML_P2P_CAPS_INDEX_NVLINK: c_uint = 2;
pub const NVML_P2P_CAPS_INDEX_UNKNOWN: c_uint = 5;
pub const NVML_P2P_STATUS_OK: c_uint = 0;
pub const NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: c_uint = 3;
pub const NVML_P2P_STATUS_NOT_SUPPORTED: c_uint = 5;

pub const NVML_VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
pub const NVML_FI_DEV_REMAPPED_COR: c_uint = 142;
pub const NVML_FI_DEV_REMAPPED_UNC: c_uint = 143;
pub const NVML_FI_DEV_REMAPPED_PENDING: c_uint = 144;
pub const NVML_FI_DEV_REMAPPED_FAILURE: c_uint = 145;
pub const NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: c_uint = 230;

/// `nvmlGpuFabricInfo_t` (the unversioned call's struct).
#[repr(C)]
pub struct NvmlGpuFabricInfo {
    pub cluster_uuid: [u8; 16],
    pub status: NvmlReturn,
    pub clique_id: c_uint,
    pub state: u8,
}

/// `nvmlPciInfo_t` (the v3 layout, also used by v2 and v1 here).
#[repr(C)]
pub struct NvmlPciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlMemory_t` (v1).
#[repr(C)]
pub struct NvmlMemory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2` as NVML_STRUCT_VERSION(Memory, 2) encodes it.
pub const NVML_MEMORY_V2_VERSION: c_uint =
    (std::mem::size_of::<NvmlMemoryV2>() as c_uint) | (2 << 24);

/// `nvmlValue_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union NvmlValue {
    pub d_val: f64,
    pub si_val: c_int,
    pub ui_val: c_uint,
    pub ul_val: c_ulong,
    pub ull_val: c_ulonglong,
    pub sll_val: c_longlong,
    pub us_val: c_ushort,
}

/// `nvmlFieldValue_t`.
#[repr(C)]
pub struct NvmlFieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: c_longlong,
    pub latency_usec: c_longlong,
    pub value_type: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: NvmlValue,
}

/// `nvmlPerfPolicyType_t` values nvml.h defines.
pub const NVML_PERF_POLICY_POWER: c_uint = 0;
pub const NVML_PERF_POLICY_THERMAL: c_uint = 1;
pub const NVML_PERF_POLICIES: &[c_uint] = &[0, 1, 2, 3, 4, 5, 10, 11];

/// `nvmlViolationTime_t`.
#[repr(C)]
pub struct NvmlViolationTime {
    /// CPU timestamp, µs.
    pub reference_time: c_ulonglong,
    /// Time the clocks were held down, ns.
    pub violation_time: c_ulonglong,
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct NvmlUtilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlProcessInfo_v1_t`, the unversioned functions' entry.
#[repr(C)]
pub struct NvmlProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t`, also the `_v3` functions' entry
/// (`nvmlProcessInfo_t`).
#[repr(C)]
pub struct NvmlProcessInfoV2 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
pub struct NvmlProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

/// `gpuInstanceId` / `computeInstanceId` of a process on a GPU without MIG.
pub const NVML_NO_INSTANCE: c_uint = 0xFFFF_FFFF;
/// `nvmlClockType_t`: graphics, SM, memory, video.
pub const NVML_CLOCK_GRAPHICS: c_uint = 0;
pub const NVML_CLOCK_SM: c_uint = 1;
pub const NVML_CLOCK_MEM: c_uint = 2;
pub const NVML_CLOCK_VIDEO: c_uint = 3;
/// `nvmlPcieUtilCounter_t`.
pub const NVML_PCIE_UTIL_TX_BYTES: c_uint = 0;
pub const NVML_PCIE_UTIL_RX_BYTES: c_uint = 1;

/// `nvmlAccountingStats_t`.
#[repr(C)]
pub struct NvmlAccountingStats {
    pub gpu_utilization: c_uint,
    pub memory_utilization: c_uint,
    pub max_memory_usage: c_ulonglong,
    pub time: c_ulonglong,
    pub start_time: c_ulonglong,
    pub is_running: c_uint,
    pub reserved: [c_uint; 5],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn struct_sizes_match_nvml_h() {
        assert_eq!(size_of::<NvmlPciInfo>(), 68);
        assert_eq!(size_of::<NvmlMemory>(), 24);
        assert_eq!(size_of::<NvmlViolationTime>(), 16);
        assert_eq!(size_of::<NvmlUtilization>(), 8);
        assert_eq!(size_of::<NvmlGpuFabricInfo>(), 28);
        assert_eq!(size_of::<NvmlProcessInfoV1>(), 16);
        assert_eq!(size_of::<NvmlProcessInfoV2>(), 24);
        assert_eq!(size_of::<NvmlProcessUtilizationSample>(), 32);
        assert_eq!(size_of::<NvmlMemoryV2>(), 40);
        assert_eq!(size_of::<NvmlFieldValue>(), 40);
        assert_eq!(size_of::<NvmlAccountingStats>(), 56);
    }
}
