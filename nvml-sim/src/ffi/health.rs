//! Memory health (ECC, row remapping, page retirement), clock-event
//! reasons, the recovery action and the NVSwitch fabric state of one
//! device.

use super::{enable_state, now_ms, on_device, put};
use crate::abi::{
    NvmlDevice, NvmlFieldValue, NvmlGpuFabricInfo, NvmlReturn, NvmlValue, NVML_AGGREGATE_ECC,
    NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING,
    NVML_FI_DEV_REMAPPED_UNC, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_SUCCESS, NVML_VALUE_TYPE_UNSIGNED_INT, NVML_VOLATILE_ECC,
};
use crate::scenario::Gpu;
use std::os::raw::{c_int, c_uint, c_ulonglong};

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: NvmlDevice,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> NvmlReturn {
    on_device("nvmlDeviceGetTotalEccErrors", device, |s, g| {
        let uncorrected = match error_type {
            NVML_MEMORY_ERROR_TYPE_CORRECTED => false,
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED => true,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        let aggregate = match counter_type {
            NVML_VOLATILE_ECC => false,
            NVML_AGGREGATE_ECC => true,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        if !g.spec.ecc.enabled {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        put(
            count,
            g.ecc_count(uncorrected, aggregate, now_ms(), s.driver_loaded_unix_ms),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetEccMode", device, |_, g| {
        if current.is_null() || pending.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        put(current, enable_state(g.spec.ecc.enabled))?;
        put(pending, enable_state(g.spec.ecc.enabled))
    })
}

/// Answers the row-remapping fields (142..=145); any other field id gets
/// NOT_SUPPORTED in its own entry, as NVML does.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: NvmlDevice,
    values_count: c_int,
    values: *mut NvmlFieldValue,
) -> NvmlReturn {
    on_device("nvmlDeviceGetFieldValues", device, |_, g| {
        let count = usize::try_from(values_count).map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
        if values.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; nvml.h requires `values_count` entries.
        let entries = unsafe { std::slice::from_raw_parts_mut(values, count) };
        let timestamp_us = now_ms().saturating_mul(1000) as i64;
        for entry in entries {
            entry.timestamp = timestamp_us;
            entry.latency_usec = 0;
            match field_value(g, entry.field_id) {
                Some(value) => {
                    entry.value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
                    entry.nvml_return = NVML_SUCCESS;
                    entry.value = NvmlValue { ull_val: 0 };
                    entry.value.ui_val = value;
                }
                None => entry.nvml_return = NVML_ERROR_NOT_SUPPORTED,
            }
        }
        Ok(())
    })
}

fn field_value(gpu: &Gpu, field_id: c_uint) -> Option<c_uint> {
    if field_id == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION {
        return gpu.spec.recovery_action;
    }
    let rows = gpu.spec.remapped_rows.as_ref()?;
    match field_id {
        NVML_FI_DEV_REMAPPED_COR => Some(rows.correctable),
        NVML_FI_DEV_REMAPPED_UNC => Some(rows.uncorrectable),
        NVML_FI_DEV_REMAPPED_PENDING => Some(rows.pending as c_uint),
        NVML_FI_DEV_REMAPPED_FAILURE => Some(rows.failure as c_uint),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: NvmlDevice,
    corr_rows: *mut c_uint,
    unc_rows: *mut c_uint,
    is_pending: *mut c_uint,
    failure_occurred: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetRemappedRows", device, |_, g| {
        let rows = g
            .spec
            .remapped_rows
            .as_ref()
            .ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        let outs = [corr_rows, unc_rows, is_pending, failure_occurred];
        if outs.iter().any(|p| p.is_null()) {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        put(corr_rows, rows.correctable)?;
        put(unc_rows, rows.uncorrectable)?;
        put(is_pending, rows.pending as c_uint)?;
        put(failure_occurred, rows.failure as c_uint)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: NvmlDevice,
    pending: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetRetiredPagesPendingStatus", device, |_, g| {
        put(pending, enable_state(g.spec.retired_pages_pending))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    on_device(
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        device,
        |_, g| put(reasons, g.spec.throttle_reasons),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    on_device("nvmlDeviceGetCurrentClocksEventReasons", device, |_, g| {
        put(reasons, g.spec.throttle_reasons)
    })
}

/// Registration with the NVSwitch fabric (Hopper and newer HGX boards);
/// `fabric: null` answers NOT_SUPPORTED, as PCIe-only boards do.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(
    device: NvmlDevice,
    info: *mut NvmlGpuFabricInfo,
) -> NvmlReturn {
    on_device("nvmlDeviceGetGpuFabricInfo", device, |_, g| {
        let f = g.spec.fabric.as_ref().ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        put(
            info,
            NvmlGpuFabricInfo {
                cluster_uuid: [0; 16],
                status: f.status,
                clique_id: f.clique_id,
                state: f.state,
            },
        )
    })
}
