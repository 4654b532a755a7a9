//! Helpers for the integration tests of gpu-health's binaries: a simulated
//! GPU node in a temp dir, laid out as the test cluster lays out its nodes
//! (`lib/libnvidia-ml.so.1` = the NVML stand-in built in this workspace,
//! `lib/scenario.json` beside it, a kernel-log file, a state directory).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The stand-in libnvidia-ml built for this test run (ci/test builds the
/// workspace before testing; `cargo test -p nvml-sim` builds it too).
pub fn sim_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let profile = deps.parent().expect("profile dir").to_path_buf();
    [profile.join("libnvml_sim.so"), deps.join("libnvml_sim.so")]
        .into_iter()
        .find(|p| p.is_file())
        .expect("libnvml_sim.so not built: run `cargo build -p nvml-sim` first")
}

/// A shipped scenario file, by name without `.json`.
pub fn scenario(name: &str) -> PathBuf {
    workspace()
        .join("nvml-sim/scenarios")
        .join(format!("{name}.json"))
}

/// A simulated node on disk.
pub struct SimNode {
    pub dir: tempfile::TempDir,
}

impl SimNode {
    pub fn new(scenario_name: &str) -> SimNode {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("lib")).expect("lib dir");
        std::fs::copy(sim_library(), dir.path().join("lib/libnvidia-ml.so.1"))
            .expect("copy the NVML stand-in");
        std::fs::write(dir.path().join("kernel.log"), "").expect("kernel log");
        let node = SimNode { dir };
        node.set_scenario(scenario_name);
        node
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Switch to a shipped scenario (read at the next nvmlInit).
    pub fn set_scenario(&self, name: &str) {
        std::fs::copy(scenario(name), self.path("lib/scenario.json")).expect("copy scenario");
    }

    /// The configuration lines that point gpu-health at this node: NVML
    /// library, kernel log, state dir, log file, a 1.5 s NVML deadline and
    /// an scontrol that does not exist (no slurmctld in these tests).
    pub fn base_config(&self) -> String {
        format!(
            "nvml_library = {:?}\nkernel_log = {:?}\nstate_dir = {:?}\nlog_file = {:?}\n\
             scontrol = \"/nonexistent/scontrol\"\nnvml_deadline_ms = 1500\n",
            self.path("lib/libnvidia-ml.so.1"),
            self.path("kernel.log"),
            self.path("state"),
            self.path("gpu-health.log"),
        )
    }

    /// Write `gpu-health.toml` (base lines + `extra`) and return its path.
    pub fn write_config(&self, extra: &str) -> PathBuf {
        let p = self.path("gpu-health.toml");
        std::fs::write(&p, format!("{}{extra}", self.base_config())).expect("write config");
        p
    }
}

/// Run a command to its end: exit code (-1 when killed), stdout, stderr.
pub fn output(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run the command");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
