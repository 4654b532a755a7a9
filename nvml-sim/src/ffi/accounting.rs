//! Accounting mode and accounted processes (per-job peak memory).

use super::{enable_state, now_ms, on_device, put};
use crate::abi::{
    NvmlAccountingStats, NvmlDevice, NvmlReturn, NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED,
    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED,
};
use crate::runtime;
use crate::scenario::Gpu;
use std::os::raw::c_uint;

/// NVML_VALUE_NOT_AVAILABLE as an unsigned long long.
const NOT_AVAILABLE_U64: u64 = u64::MAX;

/// A GPU in MIG mode keeps no accounting statistics: every accounting
/// call answers NOT_SUPPORTED, as NVML does.
fn outside_mig(gpu: &Gpu) -> Result<(), NvmlReturn> {
    match &gpu.spec.mig_mode {
        Some(m) if m.current == 1 => Err(NVML_ERROR_NOT_SUPPORTED),
        _ => Ok(()),
    }
}

fn accounting_on(gpu: &Gpu) -> bool {
    runtime::accounting_override(gpu.position).unwrap_or(gpu.spec.accounting.enabled)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAccountingMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetAccountingMode", device, |_, g| {
        outside_mig(g)?;
        put(mode, enable_state(accounting_on(g)))
    })
}

/// Changes the mode for the rest of this process only (the scenario file
/// decides what the next process sees).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetAccountingMode(
    device: NvmlDevice,
    mode: c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceSetAccountingMode", device, |_, g| {
        outside_mig(g)?;
        let enabled = match mode {
            NVML_FEATURE_DISABLED => false,
            NVML_FEATURE_ENABLED => true,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        runtime::set_accounting(g.position, enabled);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAccountingBufferSize(
    device: NvmlDevice,
    size: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetAccountingBufferSize", device, |_, g| {
        outside_mig(g)?;
        if !accounting_on(g) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        put(size, g.spec.accounting.buffer_size)
    })
}

/// With a null `pids` or too small `*count`: stores the number needed in
/// `*count` and returns INSUFFICIENT_SIZE (SUCCESS when there are none).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAccountingPids(
    device: NvmlDevice,
    count: *mut c_uint,
    pids: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetAccountingPids", device, |_, g| {
        outside_mig(g)?;
        if !accounting_on(g) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let processes = &g.spec.accounting.processes;
        let needed = processes.len();
        // SAFETY: non-null in/out count from the caller.
        let room = unsafe { *count } as usize;
        put(count, needed as c_uint)?;
        if needed == 0 {
            return Ok(());
        }
        if pids.is_null() || room < needed {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        // SAFETY: the caller gave room >= needed writable entries.
        let out = unsafe { std::slice::from_raw_parts_mut(pids, needed) };
        for (slot, process) in out.iter_mut().zip(processes) {
            *slot = process.pid;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAccountingStats(
    device: NvmlDevice,
    pid: c_uint,
    stats: *mut NvmlAccountingStats,
) -> NvmlReturn {
    on_device("nvmlDeviceGetAccountingStats", device, |_, g| {
        outside_mig(g)?;
        if !accounting_on(g) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        let process = g.process(pid).ok_or(NVML_ERROR_NOT_FOUND)?;
        let running = process.run_time_ms == 0;
        put(
            stats,
            NvmlAccountingStats {
                gpu_utilization: process.gpu_utilization,
                memory_utilization: process.memory_utilization,
                max_memory_usage: process.max_memory_bytes.unwrap_or(NOT_AVAILABLE_U64),
                time: process.run_time_ms,
                start_time: process.start_unix_us(now_ms()),
                is_running: running as c_uint,
                reserved: [0; 5],
            },
        )
    })
}
