//! The real prolog binary against every shipped NVML scenario, through the
//! real nvml-wrapper path (the stand-in library built in this workspace).
//!
//! Draining needs a live slurmctld (covered by ci/e2e); here scontrol is a
//! path that does not exist, so the prolog logs the reason it would have
//! set, and the test reads it from the log file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The stand-in libnvidia-ml (ci/test builds the workspace before testing).
fn sim_library() -> PathBuf {
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

struct Node {
    dir: tempfile::TempDir,
}

struct Run {
    code: i32,
    log: String,
    elapsed: Duration,
}

impl Node {
    fn new(scenario: &str) -> Node {
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

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn set_scenario(&self, name: &str) {
        let src = workspace()
            .join("nvml-sim/scenarios")
            .join(format!("{name}.json"));
        std::fs::copy(src, self.path("lib/scenario.json")).unwrap();
    }

    fn write_config(&self, extra: &str) {
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
        std::fs::create_dir_all(self.path("gpu-health.d")).unwrap();
        std::fs::write(
            self.path("gpu-health.d/n1.toml"),
            "[brake]\nenabled = false\n",
        )
        .unwrap();
    }

    fn prolog(&self, job: &str, gpus: &str) -> Run {
        let _ = std::fs::remove_file(self.path("gpu-health.log"));
        let t0 = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"))
            .env_clear()
            .env("GPU_HEALTH_CONFIG", self.path("gpu-health.toml"))
            .env("SLURMD_NODENAME", "n1")
            .env("SLURM_JOB_ID", job)
            .env("SLURM_JOB_GPUS", gpus)
            .output()
            .unwrap();
        let log = std::fs::read_to_string(self.path("gpu-health.log")).unwrap_or_default();
        Run {
            code: out.status.code().unwrap_or(-1),
            log,
            elapsed: t0.elapsed(),
        }
    }

    fn verdict(&self, job: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.path(&format!("state/jobs/{job}.json"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

fn drain_reason(run: &Run) -> Option<String> {
    let line = run
        .log
        .lines()
        .find(|l| l.contains("could not drain n1 ("))?;
    let start = line.find("(gpu-health:")? + 1;
    let end = line[start..].find("): ")? + start;
    Some(line[start..end].to_string())
}

#[test]
fn healthy_scenarios_pass_and_write_verdicts() {
    for s in ["h100x8-healthy", "a100x8-healthy", "l40sx4-pcie-only"] {
        let n = Node::new(s);
        let r = n.prolog("101", "0,1,2,3");
        assert_eq!(r.code, 0, "{s}: {}", r.log);
        let v = n.verdict("101");
        assert_eq!(v["job_gpus"], serde_json::json!([0, 1, 2, 3]), "{s}");
        assert_eq!(v["findings"], serde_json::json!([]), "{s}: {v}");
        assert_eq!(v["mode"], "warn");
        assert!(n.path("state/node-snapshot.json").is_file());
    }
}

#[test]
fn fatal_scenarios_drain_with_precise_reasons() {
    for (s, reason) in [
        (
            "h100x8-dbe",
            "gpu-health: ECC DBE GPU3 0000:5d:00.0 volatile uncorrected=",
        ),
        (
            "h100x8-fallen-off",
            "gpu-health: GPU count 7 of 8; GPU5 lost (fallen off the bus) (drain)",
        ),
        ("h100x8-remap-failure", "gpu-health: row remap failure GPU"),
    ] {
        let n = Node::new(s);
        let r = n.prolog("102", "0");
        assert_eq!(r.code, 1, "{s}: {}", r.log);
        let got = drain_reason(&r).unwrap_or_default();
        assert!(
            got.starts_with(reason),
            "{s}: reason {got:?}, log:\n{}",
            r.log
        );
        assert!(got.ends_with("(drain)"), "{got}");
    }
}

#[test]
fn warnings_reach_the_verdict_of_jobs_on_that_gpu_only() {
    let n = Node::new("h100x8-pcie-degraded");
    let r = n.prolog("103", "2,3");
    assert_eq!(r.code, 0, "{}", r.log);
    let f = &n.verdict("103")["findings"];
    assert_eq!(f.as_array().unwrap().len(), 1, "{f}");
    assert_eq!(f[0]["check"], "pcie-link");
    assert_eq!(f[0]["action"], "warn");
    assert_eq!(
        f[0]["summary"],
        "PCIe Gen4 x8 of Gen5 x16 GPU2 0000:3a:00.0"
    );
    n.prolog("104", "0,1");
    assert_eq!(n.verdict("104")["findings"], serde_json::json!([]));

    let n = Node::new("h100x8-nvlink-down");
    assert_eq!(n.prolog("105", "0-7").code, 0);
    let f = &n.verdict("105")["findings"];
    assert!(
        f.as_array()
            .unwrap()
            .iter()
            .any(|x| x["check"] == "nvlink" && x["action"] == "warn"),
        "{f}"
    );
}

#[test]
fn nvml_hang_is_abandoned_at_the_deadline() {
    let n = Node::new("nvml-hang");
    let r = n.prolog("106", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(
        r.elapsed < Duration::from_millis(1500 + 1500),
        "took {:?}",
        r.elapsed
    );
    assert_eq!(
        drain_reason(&r).as_deref(),
        Some("gpu-health: NVML did not answer in 1500 ms (drain)")
    );
}

#[test]
fn growing_corrected_ecc_drains_with_history() {
    let n = Node::new("h100x8-sbe-growing");
    assert_eq!(n.prolog("107", "0").code, 0, "first run has no history");
    // Pretend the first sample was taken an hour ago, an hour's growth
    // (the scenario's corrected_per_hour) ago.
    let hist_path = n.path("state/ecc-history.json");
    let mut h: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&hist_path).unwrap()).unwrap();
    for samples in h["gpus"].as_object_mut().unwrap().values_mut() {
        let t = samples[0][0].as_u64().unwrap();
        let c = samples[0][1].as_u64().unwrap();
        samples[0] = serde_json::json!([t - 3_600_000, c.saturating_sub(36_000)]);
    }
    std::fs::write(&hist_path, h.to_string()).unwrap();
    let r = n.prolog("108", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(
        drain_reason(&r).unwrap().contains("ECC SBE rate GPU"),
        "{}",
        r.log
    );
}

#[test]
fn xid_in_kernel_log_drains_once() {
    let n = Node::new("h100x8-healthy");
    assert_eq!(n.prolog("109", "0").code, 0);
    std::fs::write(
        n.path("kernel.log"),
        "[ 9000.100000] NVRM: Xid (PCI:0000:5d:00): 79, pid=2210, GPU has fallen off the bus.\n",
    )
    .unwrap();
    let r = n.prolog("110", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(
        drain_reason(&r).as_deref(),
        Some("gpu-health: Xid 79 GPU3 0000:5d:00.0 pid=2210 (drain)")
    );
    // The cursor moved: the same record is not judged again.
    assert_eq!(n.prolog("111", "0").code, 0);
}

#[test]
fn malformed_config_never_drains() {
    let n = Node::new("h100x8-dbe");
    // The node's file is broken: the prolog keeps going on defaults.
    let cfg = std::fs::read_to_string(n.path("gpu-health.toml")).unwrap();
    std::fs::write(
        n.path("gpu-health.toml"),
        format!("{cfg}nvml_deadline_ms = = 3\n"),
    )
    .unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"))
        .env_clear()
        .env("GPU_HEALTH_CONFIG", n.path("gpu-health.toml"))
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_JOB_ID", "112")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("configuration error") && err.contains("line 7"),
        "{err}"
    );
}

#[test]
fn mode_and_hostile_environment() {
    let n = Node::new("h100x8-healthy");
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"))
        .env_clear()
        .env("GPU_HEALTH_CONFIG", n.path("gpu-health.toml"))
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_JOB_ID", "113")
        .env("SLURM_JOB_GPUS", "0,1")
        .env("SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health", "strict")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(n.verdict("113")["mode"], "strict");
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"))
        .env_clear()
        .env("GPU_HEALTH_CONFIG", n.path("gpu-health.toml"))
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_JOB_ID", "../../../etc/passwd")
        .env("SLURM_JOB_GPUS", "0;rm -rf /")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!n.path("state/jobs/../../../etc/passwd.json").exists());
}
