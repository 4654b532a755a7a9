//! Reads everything gpu-health reads through nvml-wrapper and compares it
//! with the scenario model, value by value.

use super::now_ms;
use nvml_sim::scenario::{Gpu, LostMode, Scenario};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, P2pCapabilitiesIndex, P2pStatus, TemperatureSensor, TopologyLevel,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

/// Asserts that `read` (done at some moment) equals `expected(t)` for a t
/// between the moments before and after the read.
fn within<T: PartialOrd + std::fmt::Debug>(
    what: &str,
    read: impl FnOnce() -> T,
    expected: impl Fn(u64) -> T,
) {
    let before = now_ms();
    let value = read();
    let after = now_ms();
    let (lo, hi) = (expected(before), expected(after));
    assert!(
        lo <= value && value <= hi,
        "{what}: {value:?} not in [{lo:?}, {hi:?}]"
    );
}

pub fn assert_matches(nvml: &Nvml, model: &Scenario) {
    assert_eq!(nvml.device_count().unwrap(), model.visible_count());
    assert_eq!(nvml.sys_driver_version().unwrap(), model.driver_version);
    assert_eq!(nvml.sys_nvml_version().unwrap(), model.nvml_version);
    let mut devices = Vec::new();
    for index in 0..model.visible_count() {
        let gpu = model.visible_gpu(index).unwrap();
        match gpu.lost_mode() {
            Some(LostMode::HandleFails) => {
                let err = nvml.device_by_index(index).err();
                assert!(
                    matches!(err, Some(NvmlError::GpuLost)),
                    "GPU {index}: {err:?}"
                );
            }
            Some(LostMode::QueriesFail) => {
                let device = nvml.device_by_index(index).unwrap();
                assert!(matches!(device.uuid(), Err(NvmlError::GpuLost)));
                assert!(matches!(
                    device.temperature(TemperatureSensor::Gpu),
                    Err(NvmlError::GpuLost)
                ));
            }
            Some(LostMode::Absent) => unreachable!("absent GPUs are not visible"),
            None => {
                let device = nvml.device_by_index(index).unwrap();
                assert_device(&device, index, gpu, model);
                devices.push((device, gpu));
            }
        }
    }
    for (a, ga) in &devices {
        for (b, gb) in &devices {
            if ga.position == gb.position {
                continue;
            }
            let level = nvml.topology_common_ancestor(a, b).unwrap();
            assert_eq!(level_value(level), model.common_ancestor(ga, gb));
            let nvlink = a.p2p_status(b, P2pCapabilitiesIndex::NvLink).unwrap();
            let linked = model.nvlinked(ga, gb) && ga.any_link_active() && gb.any_link_active();
            let expected = if linked {
                P2pStatus::Ok
            } else {
                P2pStatus::NotSupported
            };
            assert_eq!(nvlink, expected, "p2p {} -> {}", ga.position, gb.position);
        }
    }
}

fn level_value(level: TopologyLevel) -> u32 {
    match level {
        TopologyLevel::Internal => 0,
        TopologyLevel::Single => 10,
        TopologyLevel::Multiple => 20,
        TopologyLevel::HostBridge => 30,
        TopologyLevel::Node => 40,
        TopologyLevel::System => 50,
    }
}

fn assert_device(device: &Device, index: u32, gpu: &Gpu, model: &Scenario) {
    let spec = &gpu.spec;
    let loaded = model.driver_loaded_unix_ms;
    assert_eq!(device.index().unwrap(), index);
    assert_eq!(device.uuid().unwrap(), gpu.uuid);
    assert_eq!(device.name().unwrap(), spec.name);
    let pci = device.pci_info().unwrap();
    assert_eq!(pci.bus_id, gpu.pci.nvml_bus_id());
    assert_eq!(
        (pci.domain, pci.bus, pci.device),
        (gpu.pci.domain, gpu.pci.bus, gpu.pci.device)
    );
    assert_eq!(pci.pci_device_id, spec.pci_device_id);
    assert_eq!(pci.pci_sub_system_id, Some(spec.pci_subsystem_id));

    let memory = device.memory_info().unwrap();
    assert_eq!(memory.total, gpu.memory_total_bytes());
    assert_eq!(memory.used, gpu.memory_used_bytes());
    assert_eq!(memory.reserved, gpu.memory_reserved_bytes());
    assert_eq!(memory.free, gpu.memory_free_bytes());

    assert_eq!(
        device.temperature(TemperatureSensor::Gpu).unwrap(),
        spec.temperature_c
    );
    assert_eq!(device.power_usage().unwrap(), spec.power.draw_mw);
    assert_eq!(device.enforced_power_limit().unwrap(), spec.power.limit_mw);
    assert_eq!(
        device.power_management_limit_default().unwrap(),
        spec.power.default_limit_mw
    );
    if spec
        .not_supported
        .iter()
        .any(|c| c == "nvmlDeviceGetTotalEnergyConsumption")
    {
        let err = device.total_energy_consumption().unwrap_err();
        assert!(matches!(err, NvmlError::NotSupported));
    } else {
        within(
            "energy",
            || device.total_energy_consumption().unwrap(),
            |t| gpu.energy_mj(t, loaded),
        );
    }

    let ecc = device.is_ecc_enabled().unwrap();
    assert_eq!(ecc.currently_enabled, spec.ecc.enabled);
    for (error, uncorrected) in [
        (MemoryError::Corrected, false),
        (MemoryError::Uncorrected, true),
    ] {
        for (counter, aggregate) in [(EccCounter::Volatile, false), (EccCounter::Aggregate, true)] {
            if spec.ecc.enabled {
                within(
                    "ecc",
                    || device.total_ecc_errors(error, counter).unwrap(),
                    |t| gpu.ecc_count(uncorrected, aggregate, t, loaded),
                );
            } else {
                assert!(device.total_ecc_errors(error, counter).is_err());
            }
        }
    }

    let fields = device
        .field_values_for(&[FieldId(142), FieldId(143), FieldId(144), FieldId(145)])
        .unwrap();
    match &spec.remapped_rows {
        Some(rows) => {
            let values: Vec<u32> = fields
                .into_iter()
                .map(|f| match f.unwrap().value.unwrap() {
                    SampleValue::U32(v) => v,
                    other => panic!("remap field type {other:?}"),
                })
                .collect();
            let expected = [
                rows.correctable,
                rows.uncorrectable,
                rows.pending as u32,
                rows.failure as u32,
            ];
            assert_eq!(values, expected);
        }
        None => assert!(fields.iter().all(|f| f.as_ref().unwrap().value.is_err())),
    }
    assert_eq!(
        device.are_pages_pending_retired().unwrap(),
        spec.retired_pages_pending
    );

    assert_eq!(device.current_pcie_link_gen().unwrap(), spec.pcie.gen);
    assert_eq!(device.current_pcie_link_width().unwrap(), spec.pcie.width);
    assert_eq!(device.max_pcie_link_gen().unwrap(), spec.pcie.max_gen);
    assert_eq!(device.max_pcie_link_width().unwrap(), spec.pcie.max_width);
    assert_eq!(
        device.pcie_replay_counter().unwrap() as u64,
        spec.pcie.replay_counter
    );

    for link in 0..18 {
        let wrapper = device.link_wrapper_for(link);
        if link < spec.nvlink.count {
            assert_eq!(
                wrapper.is_active().unwrap(),
                gpu.link_active(link),
                "link {link}"
            );
            let errors = gpu.link_errors(link);
            let read = |c| wrapper.error_counter(c).unwrap();
            assert_eq!(read(ErrorCounter::DlReplay), errors.replay);
            assert_eq!(read(ErrorCounter::DlRecovery), errors.recovery);
            assert_eq!(read(ErrorCounter::DlCrcFlit), errors.crc_flit);
            assert_eq!(read(ErrorCounter::DlCrcData), errors.crc_data);
        } else {
            let err = wrapper.is_active().unwrap_err();
            assert!(
                matches!(err, NvmlError::NotSupported),
                "link {link}: {err:?}"
            );
        }
    }

    let reasons = device.current_throttle_reasons().unwrap();
    assert_eq!(
        reasons,
        ThrottleReasons::from_bits_truncate(spec.throttle_reasons)
    );
    assert_eq!(
        device.is_in_persistent_mode().unwrap(),
        spec.persistence_mode
    );

    assert_eq!(
        device.is_accounting_enabled().unwrap(),
        spec.accounting.enabled
    );
    if spec.accounting.enabled {
        assert_eq!(
            device.accounting_buffer_size().unwrap(),
            spec.accounting.buffer_size
        );
        let pids: Vec<u32> = spec.accounting.processes.iter().map(|p| p.pid).collect();
        assert_eq!(device.accounting_pids().unwrap(), pids);
        for process in &spec.accounting.processes {
            let before = now_ms();
            let stats = device.accounting_stats_for(process.pid).unwrap();
            let after = now_ms();
            assert_eq!(stats.max_memory_usage, process.max_memory_bytes);
            assert_eq!(stats.time, process.run_time_ms);
            assert_eq!(stats.is_running, process.run_time_ms == 0);
            assert_eq!(stats.gpu_utilization, Some(process.gpu_utilization));
            let (lo, hi) = (process.start_unix_us(before), process.start_unix_us(after));
            assert!(lo <= stats.start_time && stats.start_time <= hi);
        }
    }
}
