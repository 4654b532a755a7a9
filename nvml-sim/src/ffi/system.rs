//! Library lifetime, system queries and device enumeration.

use super::{guard, hang, put, put_str};
use crate::abi::{
    NvmlDevice, NvmlReturn, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
};
use crate::runtime;
use crate::scenario::{Gpu, LostMode, PciAddress, Scenario};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_uint};
use std::panic::catch_unwind;

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> NvmlReturn {
    guard(|| result(runtime::init("nvmlInit_v2")))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInit() -> NvmlReturn {
    guard(|| result(runtime::init("nvmlInit")))
}

/// Flags (NO_GPUS, NO_ATTACH) change nothing here.
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    guard(|| result(runtime::init("nvmlInitWithFlags")))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(|| result(runtime::shutdown()))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(code: NvmlReturn) -> *const c_char {
    const FALLBACK: &[u8] = b"Unknown Error\0";
    catch_unwind(|| runtime::error_string(code).as_ptr()).unwrap_or(FALLBACK.as_ptr().cast())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    on_system("nvmlSystemGetDriverVersion", |s| {
        put_str(version, length, &s.driver_version)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    on_system("nvmlSystemGetNVMLVersion", |s| {
        put_str(version, length, &s.nvml_version)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> NvmlReturn {
    on_system("nvmlSystemGetCudaDriverVersion", |s| {
        put(version, s.cuda_driver_version)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> NvmlReturn {
    on_system("nvmlSystemGetCudaDriverVersion_v2", |s| {
        put(version, s.cuda_driver_version)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    on_system("nvmlDeviceGetCount_v2", |s| put(count, s.visible_count()))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> NvmlReturn {
    on_system("nvmlDeviceGetCount", |s| put(count, s.visible_count()))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    by_index("nvmlDeviceGetHandleByIndex_v2", index, device)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    by_index("nvmlDeviceGetHandleByIndex", index, device)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    by_match("nvmlDeviceGetHandleByUUID", uuid, device, |gpu, text| {
        gpu.uuid == text
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    by_match(
        "nvmlDeviceGetHandleByPciBusId_v2",
        bus_id,
        device,
        |gpu, text| PciAddress::parse(text) == Some(gpu.pci),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    by_match(
        "nvmlDeviceGetHandleByPciBusId",
        bus_id,
        device,
        |gpu, text| PciAddress::parse(text) == Some(gpu.pci),
    )
}

fn result(code: NvmlReturn) -> Result<(), NvmlReturn> {
    match code {
        0 => Ok(()),
        err => Err(err),
    }
}

fn on_system(
    call: &'static str,
    body: impl FnOnce(&Scenario) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    guard(|| {
        let scenario = runtime::current()?;
        hang(&scenario, call, None);
        body(&scenario)
    })
}

fn by_index(call: &'static str, index: c_uint, device: *mut NvmlDevice) -> NvmlReturn {
    guard(|| {
        let scenario = runtime::current()?;
        let gpu = scenario
            .visible_gpu(index)
            .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        hang(&scenario, call, Some(gpu.position));
        hand_out(gpu, index, device)
    })
}

fn by_match(
    call: &'static str,
    key: *const c_char,
    device: *mut NvmlDevice,
    matches: impl Fn(&Gpu, &str) -> bool,
) -> NvmlReturn {
    guard(|| {
        let scenario = runtime::current()?;
        hang(&scenario, call, None);
        if key.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; nvml.h requires a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(key) }
            .to_str()
            .map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
        let index = (0..scenario.visible_count())
            .find(|&i| scenario.visible_gpu(i).is_some_and(|g| matches(g, text)))
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        let gpu = scenario.visible_gpu(index).ok_or(NVML_ERROR_NOT_FOUND)?;
        hand_out(gpu, index, device)
    })
}

fn hand_out(gpu: &Gpu, index: u32, device: *mut NvmlDevice) -> Result<(), NvmlReturn> {
    if gpu.lost_mode() == Some(LostMode::HandleFails) {
        return Err(NVML_ERROR_GPU_IS_LOST);
    }
    put(device, runtime::handle_for(index))
}
