//! Every shipped scenario, loaded through nvml-wrapper exactly as gpu-health
//! loads the real libnvidia-ml: all values must come through as written.

mod common;

use common::compare::assert_matches;
use common::SimNode;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, P2pCapabilitiesIndex, P2pStatus, TemperatureSensor, TopologyLevel,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

const HGX_BUS_IDS: [&str; 8] = [
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
];
const GIB: u64 = 1 << 30;

fn open(name: &str) -> (SimNode, Nvml) {
    let node = SimNode::shipped(name);
    let nvml = node.nvml();
    assert_matches(&nvml, &node.model());
    (node, nvml)
}

fn volatile_uncorrected(nvml: &Nvml, index: u32) -> u64 {
    nvml.device_by_index(index)
        .unwrap()
        .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        .unwrap()
}

/// The H100 node's identity is the same in every h100x8 scenario, so a
/// node keeps its GPUs when the harness swaps scenarios.
fn assert_hgx_h100_identity(nvml: &Nvml, healthy: &Nvml, skip: Option<u32>) {
    assert_eq!(nvml.device_count().unwrap(), 8);
    for index in (0..8).filter(|i| Some(*i) != skip) {
        let device = nvml.device_by_index(index).unwrap();
        let reference = healthy.device_by_index(index).unwrap();
        assert_eq!(device.uuid().unwrap(), reference.uuid().unwrap());
        assert_eq!(
            device.pci_info().unwrap().bus_id,
            HGX_BUS_IDS[index as usize]
        );
    }
}

#[test]
fn h100x8_healthy() {
    let (_node, nvml) = open("h100x8-healthy.json");
    assert_eq!(nvml.device_count().unwrap(), 8);
    for index in 0..8u32 {
        let device = nvml.device_by_index(index).unwrap();
        assert_eq!(device.name().unwrap(), "NVIDIA H100 80GB HBM3");
        assert_eq!(
            device.pci_info().unwrap().bus_id,
            HGX_BUS_IDS[index as usize]
        );
        assert_eq!(device.memory_info().unwrap().total, 81559 * 1024 * 1024);
        let temperature = device.temperature(TemperatureSensor::Gpu).unwrap();
        assert!((40..=50).contains(&temperature));
        let power = device.power_usage().unwrap();
        assert!((300_000..=700_000).contains(&power));
        assert_eq!(device.enforced_power_limit().unwrap(), 700_000);
        assert_eq!(
            (
                device.current_pcie_link_gen().unwrap(),
                device.current_pcie_link_width().unwrap()
            ),
            (5, 16)
        );
        assert!((0..18).all(|l| device.link_wrapper_for(l).is_active().unwrap()));
        assert!(device.is_in_persistent_mode().unwrap());
        assert!(device.is_accounting_enabled().unwrap());
        let pids = device.accounting_pids().unwrap();
        assert_eq!(pids, vec![41000 + index]);
        let stats = device.accounting_stats_for(pids[0]).unwrap();
        assert_eq!(stats.max_memory_usage, Some(40 * GIB));
        let age_ms = common::now_ms() as i64 - (stats.start_time / 1000) as i64;
        assert!((4_900..=6_000).contains(&age_ms), "process age {age_ms} ms");
        assert!(stats.is_running);
        assert_eq!(volatile_uncorrected(&nvml, index), 0);
    }
    let (a, b) = (
        nvml.device_by_index(0).unwrap(),
        nvml.device_by_index(7).unwrap(),
    );
    assert_eq!(
        a.p2p_status(&b, P2pCapabilitiesIndex::NvLink).unwrap(),
        P2pStatus::Ok
    );
    assert_eq!(
        nvml.topology_common_ancestor(&a, &b).unwrap(),
        TopologyLevel::System
    );
    let c = nvml.device_by_index(1).unwrap();
    assert_eq!(
        nvml.topology_common_ancestor(&a, &c).unwrap(),
        TopologyLevel::Node
    );
}

#[test]
fn h100x8_dbe() {
    let (_node, nvml) = open("h100x8-dbe.json");
    let (_h, healthy) = open("h100x8-healthy.json");
    assert_hgx_h100_identity(&nvml, &healthy, None);
    for index in 0..8 {
        let expected = if index == 3 { 2 } else { 0 };
        assert_eq!(volatile_uncorrected(&nvml, index), expected, "GPU {index}");
    }
}

#[test]
fn h100x8_fallen_off() {
    let (_node, nvml) = open("h100x8-fallen-off.json");
    let (_h, healthy) = open("h100x8-healthy.json");
    assert_hgx_h100_identity(&nvml, &healthy, Some(5));
    assert!(matches!(nvml.device_by_index(5), Err(NvmlError::GpuLost)));
}

#[test]
fn h100x8_remap_failure() {
    let (node, nvml) = open("h100x8-remap-failure.json");
    let model = node.model();
    let failing: Vec<u32> = model
        .gpus
        .iter()
        .filter(|g| g.spec.remapped_rows.as_ref().is_some_and(|r| r.failure))
        .map(|g| g.position)
        .collect();
    assert_eq!(failing, vec![1]);
    // The failure flag itself, as the probe reads it (field 145).
    let device = nvml.device_by_index(1).unwrap();
    let field = device
        .field_values_for(&[nvml_wrapper::structs::device::FieldId(145)])
        .unwrap();
    let value = field[0].as_ref().unwrap().value.as_ref().unwrap();
    assert_eq!(*value, nvml_wrapper::enums::device::SampleValue::U32(1));
}

#[test]
fn h100x8_pcie_degraded() {
    let (_node, nvml) = open("h100x8-pcie-degraded.json");
    for index in 0..8 {
        let device = nvml.device_by_index(index).unwrap();
        let current = (
            device.current_pcie_link_gen().unwrap(),
            device.current_pcie_link_width().unwrap(),
        );
        let max = (
            device.max_pcie_link_gen().unwrap(),
            device.max_pcie_link_width().unwrap(),
        );
        assert_eq!(max, (5, 16));
        assert_eq!(
            current,
            if index == 2 { (4, 8) } else { (5, 16) },
            "GPU {index}"
        );
    }
}

#[test]
fn h100x8_nvlink_down() {
    let (_node, nvml) = open("h100x8-nvlink-down.json");
    for index in 0..8 {
        let device = nvml.device_by_index(index).unwrap();
        let down: Vec<u32> = (0..18)
            .filter(|&l| !device.link_wrapper_for(l).is_active().unwrap())
            .collect();
        assert_eq!(
            down,
            if index == 6 { vec![4, 5] } else { vec![] },
            "GPU {index}"
        );
    }
    let device = nvml.device_by_index(6).unwrap();
    let replay = device
        .link_wrapper_for(4)
        .error_counter(ErrorCounter::DlReplay)
        .unwrap();
    assert_eq!(replay, 1523);
}

#[test]
fn h100x8_sbe_growing() {
    let (_node, nvml) = open("h100x8-sbe-growing.json");
    let device = nvml.device_by_index(4).unwrap();
    let read = || {
        device
            .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .unwrap()
    };
    let first = read();
    assert!(first >= 1200);
    std::thread::sleep(std::time::Duration::from_millis(600));
    let grown = read() - first;
    // 36000 per hour = 10 per second: about 6 in 600 ms.
    assert!((4..=9).contains(&grown), "grew by {grown}");
    let other = nvml.device_by_index(0).unwrap();
    assert_eq!(
        other
            .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .unwrap(),
        0
    );
}

#[test]
fn a100x8_healthy() {
    let (_node, nvml) = open("a100x8-healthy.json");
    assert_eq!(nvml.device_count().unwrap(), 8);
    for index in 0..8 {
        let device = nvml.device_by_index(index).unwrap();
        assert_eq!(device.name().unwrap(), "NVIDIA A100-SXM4-80GB");
        assert_eq!(device.max_pcie_link_gen().unwrap(), 4);
        let links: Vec<bool> = (0..12)
            .map(|l| device.link_wrapper_for(l).is_active().unwrap())
            .collect();
        assert!(links.iter().all(|&a| a));
        assert!(device.link_wrapper_for(12).is_active().is_err());
    }
}

#[test]
fn l40sx4_pcie_only() {
    let (_node, nvml) = open("l40sx4-pcie-only.json");
    assert_eq!(nvml.device_count().unwrap(), 4);
    let devices: Vec<_> = (0..4).map(|i| nvml.device_by_index(i).unwrap()).collect();
    for device in &devices {
        assert_eq!(device.name().unwrap(), "NVIDIA L40S");
        assert!(matches!(
            device.link_wrapper_for(0).is_active(),
            Err(NvmlError::NotSupported)
        ));
    }
    for a in &devices {
        for b in &devices {
            if a.index().unwrap() != b.index().unwrap() {
                assert_eq!(
                    a.p2p_status(b, P2pCapabilitiesIndex::NvLink).unwrap(),
                    P2pStatus::NotSupported
                );
                let level = nvml.topology_common_ancestor(a, b).unwrap();
                assert!(matches!(level, TopologyLevel::Node | TopologyLevel::System));
            }
        }
    }
}

/// The shipped hang lasts 60 s: check its definition, then run the same
/// scenario with the hang shortened to 400 ms.
#[test]
fn nvml_hang() {
    let shipped = SimNode::shipped("nvml-hang.json").model();
    let hang = &shipped.hangs[0];
    assert_eq!(
        (hang.call.as_str(), hang.gpu, hang.ms),
        ("nvmlDeviceGetHandleByIndex_v2", Some(4), 60_000)
    );

    let mut json = common::shipped_json("nvml-hang.json");
    json["hangs"][0]["ms"] = 400.into();
    let node = SimNode::with_json(&json);
    let nvml = node.nvml();
    let timed = |index| {
        let start = std::time::Instant::now();
        nvml.device_by_index(index).unwrap();
        start.elapsed().as_millis()
    };
    assert!(timed(3) < 100);
    let blocked = timed(4);
    assert!((400..1500).contains(&blocked), "blocked {blocked} ms");
}
