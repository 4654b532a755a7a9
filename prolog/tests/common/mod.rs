//! A simulated node for the prolog's integration tests: the stand-in
//! NVML library with a shipped scenario, a kernel-log file, a state dir
//! and a configuration, all in a temp dir.

#![allow(dead_code)]

use std::ops::Deref;
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_health_testkit::SimNode;

pub mod rebooting;

/// A simulated node with the prolog's configuration (brake off: there is
/// no slurmctld to count drained nodes).
pub struct Node {
    pub sim: SimNode,
}

impl Deref for Node {
    type Target = SimNode;
    fn deref(&self) -> &SimNode {
        &self.sim
    }
}

pub struct Run {
    pub code: i32,
    pub log: String,
    pub elapsed: Duration,
}

impl Node {
    pub fn new(scenario: &str) -> Node {
        let node = Node {
            sim: SimNode::new(scenario),
        };
        node.write_config("");
        node
    }

    pub fn write_config(&self, extra: &str) {
        self.sim.write_config(extra);
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
        let mut c = Command::new(gpu_health_testkit::program(env!(
            "CARGO_BIN_EXE_gpu-health-prolog"
        )));
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

/// A recorded output of a gate tool (`core/tests/fixtures/acceptance`).
pub fn acceptance_fixture(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/acceptance")
        .join(name)
}

/// An executable shell script `name` in the node's directory, for a
/// stand-in program (scontrol, a gate tool).
pub fn script(n: &Node, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = n.path(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}
