//! Operations features of the real prolog binary without a slurmctld:
//! health-check mode, the brake's fail-safe, held-back findings, the DCGM
//! tier (stand-in dcgmi with recorded answers) and the RDMA port check.
//! Draining against a live Slurm, the automatic return and the brake's
//! arithmetic across nodes are covered by ci/e2e/40-operations.sh.

use std::path::PathBuf;
use std::process::Command;

use gpu_health_testkit::{workspace, SimNode};

struct Node {
    sim: SimNode,
}

struct Run {
    code: i32,
    log: String,
}

impl Node {
    fn new(scenario: &str, extra: &str) -> Node {
        let node = Node {
            sim: SimNode::new(scenario),
        };
        let dcgm = node.path("dcgmi");
        std::fs::create_dir(&dcgm).unwrap();
        for e in std::fs::read_dir(workspace().join("ci/fixtures/dcgmi")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dcgm.join(e.file_name())).unwrap();
        }
        node.set_dcgm_mode("pass");
        node.sim.write_config(&format!(
            "[dcgm]\ndcgmi = {:?}\ntimeout_ms = 2000\n{extra}",
            node.path("dcgmi/dcgmi")
        ));
        node
    }

    fn path(&self, p: &str) -> PathBuf {
        self.sim.path(p)
    }

    fn set_dcgm_mode(&self, mode: &str) {
        std::fs::write(self.path("dcgmi/mode"), mode).unwrap();
    }

    fn run(&self, env: &[(&str, &str)], args: &[&str]) -> Run {
        let _ = std::fs::remove_file(self.path("gpu-health.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpu-health-prolog"));
        cmd.env_clear()
            .env("GPU_HEALTH_CONFIG", self.path("gpu-health.toml"))
            .env("SLURMD_NODENAME", "n1")
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let mut log = std::fs::read_to_string(self.path("gpu-health.log")).unwrap_or_default();
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        Run {
            code: out.status.code().unwrap_or(-1),
            log,
        }
    }

    fn job(&self, job: &str, gpus: &str, mode: &str) -> Run {
        self.run(
            &[
                ("SLURM_JOB_ID", job),
                ("SLURM_JOB_GPUS", gpus),
                ("SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health", mode),
            ],
            &[],
        )
    }

    fn verdict(&self, job: &str) -> serde_json::Value {
        let p = self.path(&format!("state/jobs/{job}.json"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn checks(&self, job: &str) -> Vec<(String, String)> {
        self.verdict(job)["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["check"].as_str().unwrap().to_string(),
                    f["action"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

fn has(checks: &[(String, String)], check: &str, action: &str) -> bool {
    checks.iter().any(|(c, a)| c == check && a == action)
}

#[test]
fn without_a_job_id_it_is_a_health_check() {
    let n = Node::new("h100x8-healthy", "");
    // Slurm runs HealthCheckProgram with no arguments and no job.
    let r = n.run(&[], &[]);
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(
        !n.path("state/jobs").exists(),
        "no verdict in health-check mode"
    );
    assert!(n.path("state/node-snapshot.json").is_file());
    // Clean, nothing in its ledger: it asks Slurm nothing.
    assert!(!r.log.contains("Slurm"), "{}", r.log);
    assert!(!n.path("state/ledger.json").exists());

    let n = Node::new("h100x8-dbe", "");
    let r = n.run(&[("SLURM_JOB_ID", "7")], &["--health-check"]);
    assert_eq!(r.code, 1, "a fault is exit 1: {}", r.log);
    assert!(!n.path("state/jobs/7.json").exists());
}

#[test]
fn without_slurm_nothing_drains_and_no_job_starts_on_the_fault() {
    let n = Node::new("h100x8-dbe", "");
    // The brake cannot claim without Slurm: gpu-health drains nothing
    // (fail safe), keeps the fault pending, and the job does not start
    // on the node merely because Slurm cannot be reached.
    let r = n.job("201", "3", "warn");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(
        r.log.contains("cannot claim a drain") && r.log.contains("not draining (fail safe)"),
        "{}",
        r.log
    );
    let c = n.checks("201");
    assert!(
        has(&c, "ecc-uncorrected", "drain"),
        "{c:?} {}",
        n.verdict("201")
    );
    assert!(has(&c, "brake", "warn"), "{c:?}");
    let ledger = std::fs::read_to_string(n.path("state/ledger.json")).unwrap();
    assert!(ledger.contains("\"slurm-failed\""), "{ledger}");

    // The GPU "recovers" in NVML, but the pending fault stays until the
    // node is drained or an admin clears it.
    n.sim.set_scenario("h100x8-healthy");
    let r = n.job("202", "0-7", "warn");
    assert_eq!(r.code, 1, "{}", r.log);
    let c = n.checks("202");
    assert!(has(&c, "ecc-uncorrected", "drain"), "{c:?}");
    assert!(has(&c, "brake", "warn"), "{c:?}");
    let v = n.verdict("202");
    assert!(v["findings"].to_string().contains("pending since"), "{v}");
}

#[test]
fn strict_jobs_get_the_dcgm_tier_on_their_gpus() {
    let n = Node::new("h100x8-healthy", "[brake]\nenabled = false\n");
    let r = n.job("301", "0,1", "strict");
    assert_eq!(r.code, 0, "{}", r.log);
    assert_eq!(
        std::fs::read_to_string(n.path("dcgmi/last-args"))
            .unwrap()
            .trim(),
        "diag -r 1 -j -i 0,1"
    );
    assert!(n.checks("301").is_empty(), "{:?}", n.checks("301"));

    // A warn-mode job never waits for DCGM.
    std::fs::remove_file(n.path("dcgmi/last-args")).unwrap();
    n.job("302", "0,1", "warn");
    assert!(!n.path("dcgmi/last-args").exists());

    // Busy GPUs or no host engine: a note, not a fault.
    n.set_dcgm_mode("busy");
    assert_eq!(n.job("303", "0,1", "strict").code, 0);
    assert!(
        has(&n.checks("303"), "dcgm", "info"),
        "{:?}",
        n.checks("303")
    );

    // A hang is killed at the DCGM deadline and is not a fault either.
    n.set_dcgm_mode("hang");
    let t0 = std::time::Instant::now();
    assert_eq!(n.job("304", "0,1", "strict").code, 0);
    assert!(t0.elapsed() < std::time::Duration::from_secs(6));
    assert!(
        has(&n.checks("304"), "dcgm", "warn"),
        "{:?}",
        n.checks("304")
    );

    // A hardware failure drains (here scontrol is missing: drain fails,
    // exit 1, Slurm would drain with "Prolog error").
    n.set_dcgm_mode("fail");
    let r = n.job("305", "0,1", "strict");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(
        r.log
            .contains("gpu-health: DCGM Page Retirement/Row Remap GPU1 failed (drain)"),
        "{}",
        r.log
    );
}

#[test]
fn rdma_port_down_warns_the_job() {
    let sysfs = workspace().join("core/tests/fixtures/sysfs/ib-ndr8-one-down");
    let n = Node::new(
        "h100x8-healthy",
        "[rdma]\nexpected_count = 8\nexpected_rate_gbps = 400\n",
    );
    // sysfs_root is a top-level key: put it before the tables.
    let cfg = std::fs::read_to_string(n.path("gpu-health.toml")).unwrap();
    std::fs::write(
        n.path("gpu-health.toml"),
        format!("sysfs_root = {sysfs:?}\n{cfg}"),
    )
    .unwrap();
    let r = n.job("401", "0", "warn");
    assert_eq!(r.code, 0, "{}", r.log);
    let v = n.verdict("401");
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "rdma-ports")
        .cloned()
        .unwrap_or_default();
    assert_eq!(f["action"], "warn", "{v}");
    assert_eq!(f["summary"], "RDMA mlx5_5:1 down", "{v}");
}
