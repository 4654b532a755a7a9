//! A simulated node for the prolog's integration tests: the stand-in
//! NVML library with a shipped scenario, a kernel-log file, a state dir
//! and a configuration, all in a temp dir.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The stand-in libnvidia-ml (ci/test builds the workspace before testing).
pub fn sim_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.parent().unwrap().join("libnvml_sim.so"),
        deps.join("libnvml_sim.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libnvml_sim.so not built: run `cargo build -p nvml-sim` first")
}

pub struct Node {
    pub dir: tempfile::TempDir,
}

pub struct Run {
    pub code: i32,
    pub log: String,
    pub elapsed: Duration,
}

impl Node {
    pub fn new(scenario: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::copy(sim_library(), lib.join("libnvidia-ml.so.1")).unwrap();
        let node = Node { dir };
        node.set_scenario(scenario);
        std::fs::write(node.path("kernel.log"), "").unwrap();
        node.write_config("");
        node
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn set_scenario(&self, name: &str) {
        let src = workspace()
            .join("nvml-sim/scenarios")
            .join(format!("{name}.json"));
        std::fs::copy(src, self.path("lib/scenario.json")).unwrap();
    }

    pub fn write_config(&self, extra: &str) {
        let text = format!(
            "nvml_library = {:?}\nkernel_log = {:?}\nstate_dir = {:?}\nlog_file = {:?}\n\
             scontrol = \"/nonexistent/scontrol\"\nnvml_deadline_ms = 1500\n{extra}",
            self.path("lib/libnvidia-ml.so.1"),
            self.path("kernel.log"),
            self.path("state"),
            self.path("gpu-health.log"),
        );
        std::fs::write(self.path("gpu-health.toml"), text).unwrap();
        // No slurmctld here: without the drain brake (which fails safe and
        // keeps the node in service) the drain is attempted and its
        // failure logged with the reason. A drop-in keeps the main file's
        // line numbers.
        self.write_dropin("[brake]\nenabled = false\n");
    }

    /// The node's drop-in `gpu-health.d/n1.toml` (overrides main-file keys).
    pub fn write_dropin(&self, text: &str) {
        std::fs::create_dir_all(self.path("gpu-health.d")).unwrap();
        std::fs::write(self.path("gpu-health.d/n1.toml"), text).unwrap();
    }

    /// The prolog command as slurmd would start it for `job`.
    pub fn command(&self, job: &str, gpus: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"));
        c.env_clear()
            .env("GPU_HEALTH_CONFIG", self.path("gpu-health.toml"))
            .env("SLURMD_NODENAME", "n1")
            .env("SLURM_JOB_ID", job)
            .env("SLURM_JOB_GPUS", gpus);
        c
    }

    pub fn run(&self, mut cmd: Command) -> Run {
        let _ = std::fs::remove_file(self.path("gpu-health.log"));
        let t0 = Instant::now();
        let out = cmd.output().unwrap();
        let log = std::fs::read_to_string(self.path("gpu-health.log")).unwrap_or_default();
        let log = format!("{log}{}", String::from_utf8_lossy(&out.stderr));
        Run {
            code: out.status.code().unwrap_or(-1),
            log,
            elapsed: t0.elapsed(),
        }
    }

    pub fn prolog(&self, job: &str, gpus: &str) -> Run {
        self.run(self.command(job, gpus))
    }

    pub fn verdict(&self, job: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.path(&format!("state/jobs/{job}.json"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

/// The reason the prolog would have set (scontrol is absent in these tests).
pub fn drain_reason(run: &Run) -> Option<String> {
    let line = run
        .log
        .lines()
        .find(|l| l.contains("could not drain n1 ("))?;
    let start = line.find("(gpu-health:")? + 1;
    let end = line[start..].find("): ")? + start;
    Some(line[start..end].to_string())
}
