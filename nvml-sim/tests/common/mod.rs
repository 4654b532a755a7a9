//! Helpers shared by the integration tests: every test gets its own copy of
//! the built library in a temp dir with its own `scenario.json` beside it
//! (the dladdr lookup), so tests in one binary never share state.

#![allow(dead_code)]

use nvml_sim::Scenario;
use nvml_wrapper::Nvml;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// The cdylib cargo built for this test run.
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    let candidates = [
        deps.join("libnvml_sim.so"),
        deps.parent().expect("profile dir").join("libnvml_sim.so"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("libnvml_sim.so not found in {candidates:?}"))
}

pub fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

pub fn shipped_json(name: &str) -> Value {
    let text = std::fs::read_to_string(shipped(name)).expect("read shipped scenario");
    serde_json::from_str(&text).expect("shipped scenario is JSON")
}

/// A node directory `<tmp>/lib/{libnvidia-ml.so.1,scenario.json}`, as the
/// cluster harness lays it out.
pub struct SimNode {
    pub dir: tempfile::TempDir,
}

impl SimNode {
    pub fn with_json(scenario: &Value) -> SimNode {
        Self::with_text(&serde_json::to_string_pretty(scenario).expect("serialise"))
    }

    pub fn with_text(scenario: &str) -> SimNode {
        let node = Self::without_scenario();
        std::fs::write(node.scenario_file(), scenario).expect("write scenario");
        node
    }

    pub fn shipped(name: &str) -> SimNode {
        Self::with_json(&shipped_json(name))
    }

    pub fn without_scenario() -> SimNode {
        forbid_env_override();
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::copy(built_library(), dir.path().join("libnvidia-ml.so.1")).expect("copy lib");
        SimNode { dir }
    }

    pub fn library(&self) -> PathBuf {
        self.dir.path().join("libnvidia-ml.so.1")
    }

    pub fn scenario_file(&self) -> PathBuf {
        self.dir.path().join("scenario.json")
    }

    pub fn init(&self) -> Result<Nvml, nvml_wrapper::error::NvmlError> {
        let lib = self.library();
        Nvml::builder().lib_path(lib.as_os_str()).init()
    }

    pub fn nvml(&self) -> Nvml {
        self.init().expect("nvmlInit through nvml-wrapper")
    }

    /// The scenario as the library resolves it (same code, via the rlib).
    pub fn model(&self) -> Scenario {
        Scenario::load(&self.scenario_file()).expect("scenario resolves")
    }
}

/// These tests rely on the file beside the library; an inherited
/// NVML_SIM_SCENARIO would override it.
fn forbid_env_override() {
    static CHECK: Once = Once::new();
    CHECK.call_once(|| {
        assert!(
            std::env::var_os("NVML_SIM_SCENARIO").is_none(),
            "unset NVML_SIM_SCENARIO to run these tests"
        );
    });
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}
pub mod compare;
pub mod raw;
