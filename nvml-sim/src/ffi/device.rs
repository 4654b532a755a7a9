//! Identity, memory, thermal, power and PCIe queries of one device.

use super::{enable_state, fill_chars, now_ms, on_device, put, put_str};
use crate::abi::{
    NvmlDevice, NvmlMemory, NvmlMemoryV2, NvmlPciInfo, NvmlReturn, NvmlViolationTime,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED,
    NVML_MEMORY_V2_VERSION, NVML_PERF_POLICIES, NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL,
    NVML_TEMPERATURE_GPU,
};
use crate::scenario::Gpu;
use std::os::raw::{c_char, c_uint, c_ulonglong};

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) -> NvmlReturn {
    on_device("nvmlDeviceGetIndex", device, |s, g| {
        let nvml_index = s
            .nvml_index_of(g.position)
            .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        put(index, nvml_index)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetUUID", device, |_, g| {
        put_str(uuid, length, &g.uuid)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetName", device, |_, g| {
        put_str(name, length, &g.spec.name)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    device: NvmlDevice,
    serial: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetSerial", device, |_, g| {
        put_str(serial, length, &g.serial)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: NvmlDevice,
    minor: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetMinorNumber", device, |_, g| {
        put(minor, g.minor_number)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPciInfo_v3", device, |_, g| {
        put(pci, pci_info(g))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPciInfo_v2", device, |_, g| {
        put(pci, pci_info(g))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPciInfo", device, |_, g| put(pci, pci_info(g)))
}

fn pci_info(gpu: &Gpu) -> NvmlPciInfo {
    let mut info = NvmlPciInfo {
        bus_id_legacy: [0; 16],
        domain: gpu.pci.domain,
        bus: gpu.pci.bus,
        device: gpu.pci.device,
        pci_device_id: gpu.spec.pci_device_id,
        pci_sub_system_id: gpu.spec.pci_subsystem_id,
        bus_id: [0; 32],
    };
    fill_chars(&mut info.bus_id_legacy, &gpu.pci.legacy_bus_id());
    fill_chars(&mut info.bus_id, &gpu.pci.nvml_bus_id());
    info
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    on_device("nvmlDeviceGetMemoryInfo_v2", device, |_, g| {
        if memory.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null, points to the caller's nvmlMemory_v2_t.
        let version = unsafe { (*memory).version };
        if version != NVML_MEMORY_V2_VERSION {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        put(
            memory,
            NvmlMemoryV2 {
                version,
                total: g.memory_total_bytes(),
                reserved: g.memory_reserved_bytes(),
                free: g.memory_free_bytes(),
                used: g.memory_used_bytes(),
            },
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: NvmlDevice,
    memory: *mut NvmlMemory,
) -> NvmlReturn {
    on_device("nvmlDeviceGetMemoryInfo", device, |_, g| {
        put(
            memory,
            NvmlMemory {
                total: g.memory_total_bytes(),
                free: g.memory_free_bytes(),
                used: g.memory_used_bytes() + g.memory_reserved_bytes(),
            },
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: NvmlDevice,
    sensor: c_uint,
    temperature: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetTemperature", device, |_, g| {
        if sensor != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        put(temperature, g.spec.temperature_c)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(
    device: NvmlDevice,
    speed: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetFanSpeed", device, |_, g| {
        match g.spec.fan_speed_pct {
            Some(pct) => put(speed, pct),
            None => Err(NVML_ERROR_NOT_SUPPORTED),
        }
    })
}

/// Power and thermal violations grow at the scenario's share of the time
/// since the driver was loaded; the other policies report none.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetViolationStatus(
    device: NvmlDevice,
    policy: c_uint,
    violation: *mut NvmlViolationTime,
) -> NvmlReturn {
    on_device("nvmlDeviceGetViolationStatus", device, |s, g| {
        if violation.is_null() || !NVML_PERF_POLICIES.contains(&policy) {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let share = match policy {
            NVML_PERF_POLICY_POWER => g.spec.violation.power_share,
            NVML_PERF_POLICY_THERMAL => g.spec.violation.thermal_share,
            _ => 0.0,
        };
        let now = now_ms();
        // SAFETY: checked non-null; nvml.h's contract is a writable struct.
        unsafe {
            violation.write(NvmlViolationTime {
                reference_time: now.saturating_mul(1000),
                violation_time: Gpu::violation_ns(share, now, s.driver_loaded_unix_ms),
            });
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: NvmlDevice,
    mw: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPowerUsage", device, |_, g| {
        put(mw, g.spec.power.draw_mw)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: NvmlDevice,
    mw: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetEnforcedPowerLimit", device, |_, g| {
        put(mw, g.spec.power.limit_mw)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: NvmlDevice,
    mw: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPowerManagementLimit", device, |_, g| {
        put(mw, g.spec.power.limit_mw)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(
    device: NvmlDevice,
    mw: *mut c_uint,
) -> NvmlReturn {
    on_device(
        "nvmlDeviceGetPowerManagementDefaultLimit",
        device,
        |_, g| put(mw, g.spec.power.default_limit_mw),
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: NvmlDevice,
    mj: *mut c_ulonglong,
) -> NvmlReturn {
    on_device("nvmlDeviceGetTotalEnergyConsumption", device, |s, g| {
        put(mj, g.energy_mj(now_ms(), s.driver_loaded_unix_ms))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPersistenceMode", device, |_, g| {
        put(mode, enable_state(g.spec.persistence_mode))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: NvmlDevice,
    value: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetCurrPcieLinkGeneration", device, |_, g| {
        put(value, g.spec.pcie.gen)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: NvmlDevice,
    value: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetCurrPcieLinkWidth", device, |_, g| {
        put(value, g.spec.pcie.width)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    device: NvmlDevice,
    value: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetMaxPcieLinkGeneration", device, |_, g| {
        put(value, g.spec.pcie.max_gen)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    device: NvmlDevice,
    value: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetMaxPcieLinkWidth", device, |_, g| {
        put(value, g.spec.pcie.max_width)
    })
}

/// nvml.h declares the replay counter as `unsigned int *`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(
    device: NvmlDevice,
    value: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetPcieReplayCounter", device, |_, g| {
        put(
            value,
            u32::try_from(g.spec.pcie.replay_counter).unwrap_or(u32::MAX),
        )
    })
}
