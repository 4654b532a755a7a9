//! NVML_SIM_SCENARIO wins over the file beside the library. Its own test
//! binary (own process), so setting the variable races with nothing.

mod common;

use common::SimNode;
use serde_json::json;

#[test]
fn environment_variable_overrides_file_beside_library() {
    let node = SimNode::with_json(&json!({"count": 2}));
    let chosen = common::shipped("l40sx4-pcie-only.json");
    std::env::set_var("NVML_SIM_SCENARIO", &chosen);
    let nvml = node.nvml();
    assert_eq!(nvml.device_count().unwrap(), 4);
    assert_eq!(
        nvml.device_by_index(0).unwrap().name().unwrap(),
        "NVIDIA L40S"
    );
    drop(nvml);

    // An empty value counts as unset.
    std::env::set_var("NVML_SIM_SCENARIO", "");
    assert_eq!(node.nvml().device_count().unwrap(), 2);
    std::env::remove_var("NVML_SIM_SCENARIO");
}
