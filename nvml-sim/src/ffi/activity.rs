//! What a GPU is doing now: utilisation, the processes on it, clocks,
//! P-state, compute and display modes, MIG mode, CUDA capability. Served
//! with nvml.h's structs and return codes so that NVIDIA's own Python
//! bindings (pynvml) and the tools on them (gpustat, nvitop) list the
//! simulated GPUs; gpu-health itself reads the running processes (leftovers
//! at job start).

use super::{now_ms, on_device, put};
use crate::abi::{
    NvmlDevice, NvmlProcessInfoV1, NvmlProcessInfoV2, NvmlProcessUtilizationSample, NvmlReturn,
    NvmlUtilization, NVML_CLOCK_GRAPHICS, NVML_CLOCK_MEM, NVML_CLOCK_SM, NVML_CLOCK_VIDEO,
    NVML_ERROR_INSUFFICIENT_SIZE, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED, NVML_NO_INSTANCE, NVML_PCIE_UTIL_RX_BYTES, NVML_PCIE_UTIL_TX_BYTES,
};
use crate::scenario::Gpu;
use std::os::raw::{c_int, c_uint, c_ulonglong};

/// The encoder's and decoder's sample period NVML reports, µs.
const CODEC_PERIOD_US: c_uint = 167_000;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: NvmlDevice,
    utilization: *mut NvmlUtilization,
) -> NvmlReturn {
    on_device("nvmlDeviceGetUtilizationRates", device, |_, g| {
        let u = &g.spec.utilization;
        put(
            utilization,
            NvmlUtilization {
                gpu: u.gpu_pct,
                memory: u.memory_pct,
            },
        )
    })
}

fn codec(util: *mut c_uint, period: *mut c_uint, pct: u32) -> Result<(), NvmlReturn> {
    if period.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    put(util, pct)?;
    put(period, CODEC_PERIOD_US)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: NvmlDevice,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetEncoderUtilization", device, |_, g| {
        codec(util, period_us, g.spec.utilization.encoder_pct)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: NvmlDevice,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetDecoderUtilization", device, |_, g| {
        codec(util, period_us, g.spec.utilization.decoder_pct)
    })
}

/// nvml.h's two-call protocol: with room for fewer than all entries (a
/// NULL array first), INSUFFICIENT_SIZE and the count needed; else the
/// entries and their count. No entries: SUCCESS with count 0.
fn fill_list<T>(
    count: *mut c_uint,
    infos: *mut T,
    entries: impl ExactSizeIterator<Item = T>,
) -> Result<(), NvmlReturn> {
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let need = entries.len() as c_uint;
    // SAFETY: non-null; nvml.h requires a writable count.
    let room = unsafe { count.read() };
    // SAFETY: as above.
    unsafe { count.write(need) };
    if need == 0 {
        return Ok(());
    }
    if room < need || infos.is_null() {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (i, e) in entries.enumerate() {
        // SAFETY: the caller gave `room` >= `need` writable entries.
        unsafe { infos.add(i).write(e) };
    }
    Ok(())
}

fn processes_v2(g: &Gpu) -> impl ExactSizeIterator<Item = NvmlProcessInfoV2> + '_ {
    g.spec.running_processes.iter().map(|p| NvmlProcessInfoV2 {
        pid: p.pid,
        used_gpu_memory: p.used_memory_mib.saturating_mul(1 << 20),
        gpu_instance_id: NVML_NO_INSTANCE,
        compute_instance_id: NVML_NO_INSTANCE,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfoV2,
) -> NvmlReturn {
    on_device("nvmlDeviceGetComputeRunningProcesses_v3", device, |_, g| {
        fill_list(count, infos, processes_v2(g))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfoV2,
) -> NvmlReturn {
    on_device("nvmlDeviceGetComputeRunningProcesses_v2", device, |_, g| {
        fill_list(count, infos, processes_v2(g))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfoV1,
) -> NvmlReturn {
    on_device("nvmlDeviceGetComputeRunningProcesses", device, |_, g| {
        let v1 = g.spec.running_processes.iter().map(|p| NvmlProcessInfoV1 {
            pid: p.pid,
            used_gpu_memory: p.used_memory_mib.saturating_mul(1 << 20),
        });
        fill_list(count, infos, v1)
    })
}

/// Data-centre GPUs run no graphics contexts: always none (a pid in both
/// lists would show as compute+graphics).
fn no_graphics<T>(
    call: &'static str,
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut T,
) -> NvmlReturn {
    on_device(call, device, |_, _| {
        fill_list(count, infos, std::iter::empty::<T>())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfoV2,
) -> NvmlReturn {
    no_graphics(
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        device,
        count,
        infos,
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfoV2,
) -> NvmlReturn {
    no_graphics(
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
        device,
        count,
        infos,
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfoV1,
) -> NvmlReturn {
    no_graphics(
        "nvmlDeviceGetGraphicsRunningProcesses",
        device,
        count,
        infos,
    )
}

/// One sample per running process, stamped now. None: NOT_FOUND, as NVML
/// answers when no sample is newer than `last_seen_us`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: NvmlDevice,
    samples: *mut NvmlProcessUtilizationSample,
    count: *mut c_uint,
    _last_seen_us: c_ulonglong,
) -> NvmlReturn {
    on_device("nvmlDeviceGetProcessUtilization", device, |_, g| {
        if g.spec.running_processes.is_empty() {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        let now_us = now_ms().saturating_mul(1000);
        let list = g
            .spec
            .running_processes
            .iter()
            .map(|p| NvmlProcessUtilizationSample {
                pid: p.pid,
                time_stamp: now_us,
                sm_util: p.sm_pct,
                mem_util: p.memory_pct,
                enc_util: 0,
                dec_util: 0,
            });
        fill_list(count, samples, list)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    device: NvmlDevice,
    state: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPerformanceState", device, |_, g| {
        put(state, g.spec.performance_state)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetComputeMode", device, |_, g| {
        put(mode, g.spec.compute_mode)
    })
}

/// No display is attached to a data-centre GPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(
    device: NvmlDevice,
    active: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetDisplayActive", device, |_, _| put(active, 0))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetDisplayMode", device, |_, _| put(mode, 0))
}

/// Driver models are Windows' (WDDM/TCC): NOT_SUPPORTED on Linux.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel(
    device: NvmlDevice,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetDriverModel", device, |_, _| {
        Err(NVML_ERROR_NOT_SUPPORTED)
    })
}

/// The stand-in's handles are whole GPUs.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: NvmlDevice,
    is_mig: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceIsMigDeviceHandle", device, |_, _| put(is_mig, 0))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetMigMode", device, |_, g| {
        let m = g.spec.mig_mode.as_ref().ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        if pending.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        put(current, m.current)?;
        put(pending, m.pending)
    })
}

fn clock(g: &Gpu, kind: c_uint, max: bool) -> Result<u32, NvmlReturn> {
    let c = &g.spec.clocks;
    Ok(match (kind, max) {
        (NVML_CLOCK_GRAPHICS, false) => c.graphics_mhz,
        (NVML_CLOCK_SM, false) => c.sm_mhz,
        (NVML_CLOCK_MEM, false) => c.memory_mhz,
        (NVML_CLOCK_VIDEO, false) => c.video_mhz,
        (NVML_CLOCK_GRAPHICS, true) => c.max_graphics_mhz,
        (NVML_CLOCK_SM, true) => c.max_sm_mhz,
        (NVML_CLOCK_MEM, true) => c.max_memory_mhz,
        (NVML_CLOCK_VIDEO, true) => c.max_video_mhz,
        _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: NvmlDevice,
    kind: c_uint,
    mhz: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetClockInfo", device, |_, g| {
        put(mhz, clock(g, kind, false)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: NvmlDevice,
    kind: c_uint,
    mhz: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetMaxClockInfo", device, |_, g| {
        put(mhz, clock(g, kind, true)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: NvmlDevice,
    counter: c_uint,
    kbps: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPcieThroughput", device, |_, g| {
        let t = &g.spec.pcie_throughput_kbps;
        match counter {
            NVML_PCIE_UTIL_TX_BYTES => put(kbps, t.tx),
            NVML_PCIE_UTIL_RX_BYTES => put(kbps, t.rx),
            _ => Err(NVML_ERROR_INVALID_ARGUMENT),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: NvmlDevice,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    on_device("nvmlDeviceGetCudaComputeCapability", device, |_, g| {
        if minor.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let (ma, mi) = g.spec.cuda_compute_capability;
        put(major, ma)?;
        put(minor, mi)
    })
}
