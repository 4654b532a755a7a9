use super::*;
use std::path::Path;

fn resolve(json: &str) -> Result<Scenario, String> {
    Scenario::from_json(json, Path::new("test.json")).map_err(|e| e.to_string())
}

fn error_of(json: &str) -> String {
    match resolve(json) {
        Ok(_) => panic!("accepted: {json}"),
        Err(e) => e,
    }
}

#[test]
fn builtin_defaults_are_complete_and_healthy() {
    let s = resolve(r#"{"count": 1}"#).unwrap();
    let gpu = &s.gpus[0];
    assert_eq!(gpu.spec.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(gpu.pci.nvml_bus_id(), "00000000:18:00.0");
    assert_eq!(gpu.spec.nvlink.count, 18);
    assert!(gpu.spec.ecc.enabled && !gpu.is_lost());
    assert_eq!(s.topology.nvlink, NvLinkTopology::Auto);
}

#[test]
fn count_defaults_to_described_gpus() {
    assert_eq!(resolve(r#"{"gpus": [{}, {}, {}]}"#).unwrap().gpus.len(), 3);
    assert_eq!(resolve(r#"{"gpus": {"4": {}}}"#).unwrap().gpus.len(), 5);
    assert_eq!(resolve("{}").unwrap().visible_count(), 0);
}

#[test]
fn typos_and_inconsistencies_are_rejected_with_the_place_named() {
    assert!(error_of(r#"{"count": 1, "gpus": [{"nvlink": {"cont": 2}}]}"#).contains("cont"));
    assert!(error_of(r#"{"count": 2, "gpus": {"5": {}}}"#).contains("GPU 5"));
    assert!(error_of(r#"{"cuont": 2}"#).contains("cuont"));
    assert!(
        error_of(r#"{"count": 1, "defaults": {"nvlink": {"count": 19}}}"#).contains("nvlink.count")
    );
    assert!(
        error_of(r#"{"count": 1, "defaults": {"nvlink": {"count": 2, "inactive": [2]}}}"#)
            .contains("inactive")
    );
    assert!(error_of(
        r#"{"count": 2, "gpus": [{"pci_bus_id": "3b:00.0"}, {"pci_bus_id": "0000:3B:00.0"}]}"#
    )
    .contains("used twice"));
    assert!(error_of(r#"{"count": 1, "defaults": {"pci_bus_id": "xyz"}}"#).contains("pci_bus_id"));
    assert!(error_of(r#"{"count": 2, "topology": {"nvlink": [[0, 2]]}}"#).contains("bad pair"));
    assert!(error_of(r#"{"count": 2, "topology": {"same_numa": "NEAR"}}"#).contains("NEAR"));
    assert!(error_of(r#"{"count": 1, "init_error": "SOMETIMES"}"#).contains("SOMETIMES"));
    assert!(error_of(r#"{"count": 1, "defaults": {"lost_mode": "gone"}}"#).contains("gone"));
    let process = r#"{"count": 1, "defaults": {"accounting": {"processes": [{"pid": 1, "max_memory_bytes": 1}]}}}"#;
    assert!(error_of(process).contains("exactly one"));
    assert!(error_of(r#"{"count": 65}"#).contains("65"));
}

#[test]
fn pci_addresses_in_every_common_form() {
    let nvml = PciAddress::parse("00000000:3B:00.0").unwrap();
    assert_eq!(PciAddress::parse("0000:3b:00.0"), Some(nvml));
    assert_eq!(PciAddress::parse("3b:00.0"), Some(nvml));
    assert_eq!(nvml.legacy_bus_id(), "0000:3B:00.0");
    assert_eq!(PciAddress::parse("3b:00.8"), None);
    assert_eq!(PciAddress::parse("3b:20.0"), None);
}

#[test]
fn explicit_pairs_and_numa_levels() {
    let s = resolve(
        r#"{"count": 4, "topology": {"nvlink": [[1, 0], [2, 3]], "same_numa": "HOSTBRIDGE"}}"#,
    )
    .unwrap();
    let g = &s.gpus;
    assert!(s.nvlinked(&g[0], &g[1]) && s.nvlinked(&g[3], &g[2]));
    assert!(!s.nvlinked(&g[0], &g[2]));
    assert_eq!(s.common_ancestor(&g[0], &g[1]), 30);
    assert_eq!(s.common_ancestor(&g[1], &g[2]), 50);
    assert_eq!(s.common_ancestor(&g[2], &g[2]), 0);
}

#[test]
fn auto_topology_needs_nvlinks_on_both_gpus() {
    let s = resolve(r#"{"count": 3, "gpus": {"2": {"nvlink": {"count": 0}}}}"#).unwrap();
    let g = &s.gpus;
    assert!(s.nvlinked(&g[0], &g[1]));
    assert!(!s.nvlinked(&g[0], &g[2]));
}

#[test]
fn counters_grow_with_time_since_driver_load() {
    let s = resolve(
        r#"{"count": 1, "driver_loaded_unix_ms": 1000000,
            "defaults": {"energy_base_mj": 5, "power": {"draw_mw": 700000},
                         "ecc": {"volatile_corrected": 3, "corrected_per_hour": 3600}}}"#,
    )
    .unwrap();
    let gpu = &s.gpus[0];
    let loaded = s.driver_loaded_unix_ms;
    assert_eq!(gpu.energy_mj(loaded + 10_000, loaded), 5 + 7_000_000);
    assert_eq!(gpu.energy_mj(loaded - 1, loaded), 5);
    assert_eq!(gpu.ecc_count(false, false, loaded + 2_000, loaded), 5);
    assert_eq!(gpu.ecc_count(true, false, loaded + 2_000, loaded), 0);
}

#[test]
fn hangs_match_call_and_gpu() {
    let s = resolve(
        r#"{"count": 2, "hangs": [{"call": "nvmlDeviceGetTemperature", "gpu": 1, "ms": 5},
                                  {"call": "any", "ms": 7, "gpu": 0}]}"#,
    )
    .unwrap();
    assert_eq!(s.hang_ms("nvmlDeviceGetTemperature", Some(1)), Some(5));
    assert_eq!(s.hang_ms("nvmlDeviceGetTemperature", Some(0)), Some(7));
    assert_eq!(s.hang_ms("nvmlDeviceGetTemperature", None), None);
}

#[test]
fn every_shipped_scenario_resolves() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        seen += 1;
    }
    assert_eq!(seen, 15);
}

#[test]
fn hidden_gpus_leave_the_enumeration_and_indices_close_up() {
    let mut s = resolve(r#"{"count": 4}"#).unwrap();
    s.hide_gpus(|g| g.minor_number == 0 || g.minor_number == 2);
    assert_eq!(s.visible_count(), 2);
    assert_eq!(s.visible_gpu(0).unwrap().minor_number, 1);
    assert_eq!(s.visible_gpu(1).unwrap().minor_number, 3);
    assert_eq!(s.nvml_index_of(3), Some(1));
    assert_eq!(s.nvml_index_of(0), None);
}
