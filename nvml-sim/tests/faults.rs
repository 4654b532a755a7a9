//! Faults and edge cases: init failures, hangs, lost GPUs, unsupported
//! calls, time-driven counters, defaults, and the raw C contract.

mod common;

use common::compare::assert_matches;
use common::raw::RawLib;
use common::SimNode;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use serde_json::json;
use std::ffi::c_void;
use std::os::raw::{c_char, c_uint};
use std::time::{Duration, Instant};

#[test]
fn init_error_by_name_and_number() {
    let node = SimNode::with_json(&json!({"count": 2, "init_error": "NO_PERMISSION"}));
    assert!(matches!(node.init(), Err(NvmlError::NoPermission)));
    let node = SimNode::with_json(&json!({"count": 2, "init_error": 18}));
    assert!(matches!(node.init(), Err(NvmlError::LibRmVersionMismatch)));
    let node =
        SimNode::with_json(&json!({"count": 2, "init_error": "NVML_ERROR_DRIVER_NOT_LOADED"}));
    assert!(matches!(node.init(), Err(NvmlError::DriverNotLoaded)));
}

#[test]
fn missing_scenario_fails_init_and_says_why() {
    let node = SimNode::without_scenario();
    assert!(matches!(node.init(), Err(NvmlError::DriverNotLoaded)));
    let raw = RawLib::open(&node.library());
    assert_eq!(raw.call0("nvmlInit_v2"), 9);
    let why = raw.error_string(9);
    assert!(why.starts_with("Driver Not Loaded"), "{why}");
    assert!(
        why.contains(&*node.scenario_file().to_string_lossy()),
        "{why}"
    );
}

#[test]
fn invalid_scenario_fails_init_with_the_field_named() {
    let node = SimNode::with_json(&json!({"count": 1, "defaults": {"temprature_c": 40}}));
    assert!(matches!(node.init(), Err(NvmlError::Unknown)));
    let raw = RawLib::open(&node.library());
    assert_eq!(raw.call0("nvmlInit_v2"), 999);
    assert!(raw.error_string(999).contains("temprature_c"));

    let node = SimNode::with_text("{ not json");
    assert!(matches!(node.init(), Err(NvmlError::Unknown)));
    let node = SimNode::with_json(&json!({"count": 1, "hangs": [{"call": "nvmlBogus", "ms": 1}]}));
    assert!(matches!(node.init(), Err(NvmlError::Unknown)));
}

#[test]
fn minimal_scenario_gets_full_defaults() {
    let node = SimNode::with_json(&json!({"count": 3}));
    let nvml = node.nvml();
    assert_matches(&nvml, &node.model());
    let uuids: Vec<String> = (0..3)
        .map(|i| nvml.device_by_index(i).unwrap().uuid().unwrap())
        .collect();
    assert!(
        uuids.iter().all(|u| u.starts_with("GPU-") && u.len() == 40),
        "{uuids:?}"
    );
    assert_ne!(uuids[0], uuids[1]);
    // Generated identities are stable from one load to the next.
    let again = SimNode::with_json(&json!({"count": 3})).nvml();
    assert_eq!(again.device_by_index(2).unwrap().uuid().unwrap(), uuids[2]);
    let bus = nvml.device_by_index(1).unwrap().pci_info().unwrap().bus_id;
    assert_eq!(bus, "00000000:2A:00.0");
}

#[test]
fn per_gpu_overrides_as_array_and_as_map() {
    let array = SimNode::with_json(&json!({
        "defaults": {"temperature_c": 50},
        "gpus": [{}, {"temperature_c": 91, "pcie": {"width": 4}}]
    }));
    let nvml = array.nvml();
    assert_eq!(nvml.device_count().unwrap(), 2);
    let gpu1 = nvml.device_by_index(1).unwrap();
    assert_eq!(gpu1.temperature(TemperatureSensor::Gpu).unwrap(), 91);
    assert_eq!(gpu1.current_pcie_link_width().unwrap(), 4);
    assert_eq!(gpu1.current_pcie_link_gen().unwrap(), 5);
    let gpu0 = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu0.temperature(TemperatureSensor::Gpu).unwrap(), 50);

    let map = SimNode::with_json(&json!({"count": 4, "gpus": {"3": {"throttle_reasons": "0x48"}}}));
    let nvml = map.nvml();
    assert_matches(&nvml, &map.model());
    let raw = nvml
        .device_by_index(3)
        .unwrap()
        .current_throttle_reasons()
        .unwrap();
    assert_eq!(raw.bits(), 0x48);
}

#[test]
fn lost_gpu_modes() {
    let queries = SimNode::with_json(
        &json!({"count": 4, "gpus": {"2": {"lost": true, "lost_mode": "queries_fail"}}}),
    );
    assert_matches(&queries.nvml(), &queries.model());

    let absent = SimNode::with_json(
        &json!({"count": 4, "gpus": {"2": {"lost": true, "lost_mode": "absent"}}}),
    );
    let nvml = absent.nvml();
    assert_matches(&nvml, &absent.model());
    assert_eq!(nvml.device_count().unwrap(), 3);
    // Index 2 is now the board's fourth GPU.
    let bus = nvml.device_by_index(2).unwrap().pci_info().unwrap().bus_id;
    assert_eq!(bus, "00000000:5D:00.0");

    let handle = SimNode::with_json(&json!({"count": 2, "gpus": {"1": {"lost": true}}}));
    assert!(matches!(
        handle.nvml().device_by_index(1),
        Err(NvmlError::GpuLost)
    ));
}

#[test]
fn hang_blocks_only_the_named_call_on_the_named_gpu() {
    let node = SimNode::with_json(&json!({
        "count": 2,
        "hangs": [{"call": "nvmlDeviceGetTemperature", "gpu": 1, "ms": 300}]
    }));
    let nvml = node.nvml();
    let timed = |index: u32| {
        let device = nvml.device_by_index(index).unwrap();
        let start = Instant::now();
        device.temperature(TemperatureSensor::Gpu).unwrap();
        start.elapsed()
    };
    assert!(timed(0) < Duration::from_millis(100));
    let blocked = timed(1);
    assert!(blocked >= Duration::from_millis(300) && blocked < Duration::from_secs(2));

    let any = SimNode::with_json(&json!({"count": 1, "hangs": [{"call": "any", "ms": 200}]}));
    let start = Instant::now();
    let nvml = any.nvml(); // nvmlInit_v2 and nvmlSystemGetDriverVersion both block
    assert!(start.elapsed() >= Duration::from_millis(400));
    drop(nvml);
}

#[test]
fn energy_follows_power_over_wall_time() {
    let node = SimNode::with_json(&json!({"count": 1, "defaults": {"power": {"draw_mw": 700000}}}));
    let nvml = node.nvml();
    let device = nvml.device_by_index(0).unwrap();
    let first = device.total_energy_consumption().unwrap();
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    let second = device.total_energy_consumption().unwrap();
    let elapsed_ms = start.elapsed().as_millis() as u64;
    let gained = second - first;
    // 700 W = 700 mJ per ms; one ms of rounding either side.
    assert!(
        gained >= 700 * 199 && gained <= 700 * (elapsed_ms + 1),
        "gained {gained} mJ in {elapsed_ms} ms"
    );

    // A second, independent copy of the library (as another process would)
    // reads the same counter.
    let other =
        SimNode::with_json(&json!({"count": 1, "defaults": {"power": {"draw_mw": 700000}}}));
    let other_nvml = other.nvml();
    let theirs = other_nvml
        .device_by_index(0)
        .unwrap()
        .total_energy_consumption()
        .unwrap();
    let ours = device.total_energy_consumption().unwrap();
    assert!(ours.abs_diff(theirs) <= 700 * 50, "{ours} vs {theirs}");
}

#[test]
fn unsupported_calls_and_disabled_features() {
    let node = SimNode::with_json(&json!({
        "count": 1,
        "defaults": {
            "not_supported": ["nvmlDeviceGetTotalEnergyConsumption"],
            "remapped_rows": null,
            "ecc": {"enabled": false},
            "accounting": {"enabled": false}
        }
    }));
    let nvml = node.nvml();
    assert_matches(&nvml, &node.model());
    let device = nvml.device_by_index(0).unwrap();
    assert!(matches!(
        device.total_energy_consumption(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        device.accounting_pids(),
        Err(NvmlError::NotSupported)
    ));
}

#[test]
fn accounting_mode_and_finished_processes() {
    let node = SimNode::with_json(&json!({
        "count": 1,
        "defaults": {"accounting": {"processes": [
            {"pid": 7, "max_memory_bytes": 1024, "start_unix_ms": 1_700_000_000_000u64, "run_time_ms": 9000},
            {"pid": 8, "max_memory_bytes": null, "started_ms_ago": 0}
        ]}}
    }));
    let nvml = node.nvml();
    assert_matches(&nvml, &node.model());
    let mut device = nvml.device_by_index(0).unwrap();
    let finished = device.accounting_stats_for(7).unwrap();
    assert_eq!(
        (finished.start_time, finished.time, finished.is_running),
        (1_700_000_000_000_000, 9000, false)
    );
    assert_eq!(
        device.accounting_stats_for(8).unwrap().max_memory_usage,
        None
    );
    assert!(matches!(
        device.accounting_stats_for(9),
        Err(NvmlError::NotFound)
    ));
    device.set_accounting(false).unwrap();
    assert!(!device.is_accounting_enabled().unwrap());
    device.set_accounting(true).unwrap();
    assert_eq!(device.accounting_pids().unwrap(), vec![7, 8]);
}

#[test]
fn every_listed_function_is_exported() {
    let node = SimNode::with_json(&json!({"count": 1}));
    let raw = RawLib::open(&node.library());
    for name in nvml_sim::EXPORTED_FUNCTIONS {
        assert!(raw.has(name), "{name} missing");
    }
    // Left out on purpose: with it nvitop reads running processes with a
    // larger struct than pynvml and gpustat do (docs/nvml-sim.md).
    assert!(!raw.has("nvmlDeviceGetConfComputeMemSizeInfo"));
}

#[test]
fn raw_contract_uninitialized_refcount_and_sizes() {
    let node = SimNode::with_json(&json!({"count": 2}));
    let raw = RawLib::open(&node.library());
    let count: unsafe extern "C" fn(*mut c_uint) -> c_uint = raw.function("nvmlDeviceGetCount_v2");
    let handle: unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_uint =
        raw.function("nvmlDeviceGetHandleByIndex_v2");
    let uuid: unsafe extern "C" fn(*mut c_void, *mut c_char, c_uint) -> c_uint =
        raw.function("nvmlDeviceGetUUID");
    let mut n: c_uint = 0;
    let mut device: *mut c_void = std::ptr::null_mut();
    let mut buffer = [0 as c_char; 96];
    // SAFETY: signatures match nvml.h; pointers are to live locals.
    unsafe {
        assert_eq!(count(&mut n), 1, "UNINITIALIZED before init");
        assert_eq!(raw.call0("nvmlShutdown"), 1);
        assert_eq!(raw.call0("nvmlInit_v2"), 0);
        assert_eq!(raw.call0("nvmlInitWithFlags"), 0);
        assert_eq!(raw.call0("nvmlShutdown"), 0);
        assert_eq!(count(&mut n), 0, "still initialised once");
        assert_eq!(n, 2);
        assert_eq!(count(std::ptr::null_mut()), 2, "INVALID_ARGUMENT");
        assert_eq!(handle(2, &mut device), 2, "index out of range");
        assert_eq!(handle(1, &mut device), 0);
        assert_eq!(uuid(device, buffer.as_mut_ptr(), 8), 7, "INSUFFICIENT_SIZE");
        assert_eq!(uuid(device, buffer.as_mut_ptr(), 96), 0);
        assert_eq!(
            uuid(0x10 as *mut c_void, buffer.as_mut_ptr(), 96),
            2,
            "bad handle"
        );
        assert_eq!(raw.call0("nvmlShutdown"), 0);
        assert_eq!(count(&mut n), 1, "UNINITIALIZED after the last shutdown");
    }
    assert_eq!(raw.error_string(15), "GPU is lost");
}
