//! The real prolog and epilog binaries against the NVML stand-in
//! (nvml-sim): energy, peak memory, concurrent epilogs, absent figures,
//! drains after faults, the spool.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

const EPILOG: &str = env!("CARGO_BIN_EXE_gpu-health-epilog");

/// target/<profile>, from this test's executable (target/<profile>/deps/x).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The prolog binary and the stand-in library, built first if missing
/// (they belong to other packages of the workspace).
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = profile_dir();
        let prolog = dir.join("gpu-health-prolog");
        let lib = dir.join("libnvml_sim.so");
        if !prolog.exists() || !lib.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "gpu-health-prolog", "-p", "nvml-sim"]);
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let st = cmd.status().expect("run cargo build");
            assert!(
                st.success(),
                "cargo build of the prolog and nvml-sim failed"
            );
        }
        (prolog, lib)
    })
}

fn shipped(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nvml-sim/scenarios")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A node: config, state and records directories, kernel log, scenario.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new(scenario: &Value, extra_config: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("kern.log"), "").unwrap();
        std::fs::create_dir(d.join("sys")).unwrap();
        let cfg = format!(
            "nvml_library = \"{lib}\"\nnvml_deadline_ms = 5000\nstate_dir = \"{d}/state\"\n\
             records_dir = \"{d}/records\"\nkernel_log = \"{d}/kern.log\"\nsysfs_root = \"{d}/sys\"\n\
             scontrol = \"/bin/false\"\nprometheus_textfile = \"{d}/gpu-health.prom\"\n{extra_config}",
            lib = built().1.display(),
            d = d.display()
        );
        std::fs::write(d.join("gpu-health.toml"), cfg).unwrap();
        let node = Node { dir };
        node.set_scenario(scenario);
        node
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn set_scenario(&self, scenario: &Value) {
        std::fs::write(self.path("scenario.json"), scenario.to_string()).unwrap();
    }

    fn command(&self, program: &Path, job: &str, gpus: &str) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("GPU_HEALTH_CONFIG", self.path("gpu-health.toml"))
            .env("NVML_SIM_SCENARIO", self.path("scenario.json"))
            .env("SLURM_JOB_ID", job)
            .env("SLURMD_NODENAME", "n1")
            .env("SLURM_JOB_GPUS", gpus)
            .env("SLURM_JOB_USER", "alice")
            .env("SLURM_JOB_UID", "1000")
            .env("SLURM_JOB_PARTITION", "gpu")
            .env("SLURM_JOB_EXIT_CODE", "0");
        c
    }

    fn prolog(&self, job: &str, gpus: &str) -> Output {
        let out = self.command(&built().0, job, gpus).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "prolog: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn epilog(&self, job: &str, gpus: &str) -> Output {
        let out = self.command(Path::new(EPILOG), job, gpus).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "epilog: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.path("records/jobs.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).expect("intact JSON line"))
            .collect()
    }
}

/// h100x8-healthy with the job's processes started `ago_ms` before each
/// query (the shipped 5 s would need 5 s jobs).
fn healthy(ago_ms: u64) -> Value {
    let mut s = shipped("h100x8-healthy.json");
    for g in s["gpus"].as_array_mut().unwrap() {
        g["accounting"]["processes"][0]["started_ms_ago"] = ago_ms.into();
    }
    s
}

fn draw_w(s: &Value, gpu: usize) -> f64 {
    s["gpus"][gpu]["power"]["draw_mw"].as_f64().unwrap() / 1000.0
}

#[test]
fn energy_and_peak_memory_of_a_job() {
    let mut s = healthy(200);
    // GPU5's clocks are held down by its power limit a quarter of the time.
    s["gpus"][5]["violation"] = serde_json::json!({ "power_share": 0.25, "thermal_share": 0.0 });
    let node = Node::new(&s, "");
    node.prolog("101", "2,5");
    assert!(node.path("state/jobs/101.start.json").exists());
    std::thread::sleep(Duration::from_millis(2000));
    node.epilog("101", "2,5");
    let recs = node.records();
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r["job_id"], "101");
    assert_eq!(r["user"], "alice");
    assert_eq!(r["start_snapshot_missing"], false);
    let duration = r["duration_s"].as_f64().unwrap();
    assert!(duration >= 2.0, "{duration}");
    let gpus = r["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    for (g, idx) in gpus.iter().zip([2usize, 5]) {
        assert_eq!(g["index"], idx);
        let energy = g["energy_j"].as_f64().unwrap();
        let expected = draw_w(&s, idx) * duration;
        assert!(
            (energy - expected).abs() / expected < 0.05,
            "GPU{idx}: {energy} J, expected about {expected} J"
        );
        // The interval runs between the two probes' start times; the
        // counters are read a few ms later in each, which a loaded test
        // machine stretches: 5 % on a 2 s job.
        let power = g["mean_power_w"].as_f64().unwrap();
        assert!(
            (power - draw_w(&s, idx)).abs() / draw_w(&s, idx) < 0.05,
            "GPU{idx}: {power} W"
        );
        let peak = &s["gpus"][idx]["accounting"]["processes"][0]["max_memory_bytes"];
        assert_eq!(&g["peak_memory_bytes"], peak);
        // Utilisation from the accounting statistics, as DCGM's job stats.
        let process = &s["gpus"][idx]["accounting"]["processes"][0];
        assert_eq!(
            g["gpu_utilization_pct"].as_f64(),
            process["gpu_utilization"].as_f64()
        );
        assert_eq!(
            g["memory_utilization_pct"].as_f64(),
            process["memory_utilization"].as_f64()
        );
        assert_eq!(g["ecc_uncorrected_delta"], 0);
        assert_eq!(g["pcie_replay_delta"], 0);
        // Clock-throttle time: the violation counters' difference.
        let share = if idx == 5 { 0.25 } else { 0.0 };
        let throttled = g["power_throttled_s"].as_f64().unwrap();
        assert!(
            (throttled - share * duration).abs() <= 0.05 * duration,
            "GPU{idx}: {throttled} s power-throttled of {duration} s"
        );
        assert_eq!(g["thermal_throttled_s"].as_f64(), Some(0.0));
    }
    assert_eq!(r["xids"].as_array().unwrap().len(), 0);
    assert_eq!(r["xids_absent_reason"], Value::Null);
    assert_eq!(r["drained"], Value::Null);
    assert!(
        !node.path("state/jobs/101.start.json").exists(),
        "start snapshot removed"
    );
    assert!(
        !node.path("state/jobs/101.json").exists(),
        "verdict removed"
    );
    let prom = std::fs::read_to_string(node.path("gpu-health.prom")).unwrap();
    gpu_health_testkit::promtool_check_metrics(&prom);
    // Issue 24: `slurm_job_id` (not Prometheus's own `job`) and the GPU's
    // uuid and PCI address.
    assert!(
        prom.contains(
            "gpu_health_job_gpu_energy_joules{slurm_job_id=\"101\",user=\"alice\",gpu=\"5\",uuid=\"GPU-"
        ),
        "{prom}"
    );
    // The node's power as the epilog's probe saw it, every GPU.
    assert!(
        prom.lines().any(
            |l| l.starts_with("gpu_health_gpu_power_watts{gpu=\"5\",uuid=\"GPU-")
                && l.ends_with(&format!("}} {}", draw_w(&s, 5)))
        ),
        "{prom}"
    );
    let total: f64 = (0..8).map(|i| draw_w(&s, i)).sum();
    assert!(
        prom.contains(&format!("gpu_health_node_gpu_power_watts {total}")),
        "{prom}"
    );
}

#[test]
fn processes_of_earlier_jobs_do_not_count() {
    // The processes started long before the job: accounted, not the job's.
    let node = Node::new(&healthy(3_600_000), "");
    node.prolog("102", "0");
    node.epilog("102", "0");
    let g = &node.records()[0]["gpus"][0];
    assert_eq!(g["peak_memory_bytes"], Value::Null);
    assert!(g["peak_memory_absent_reason"]
        .as_str()
        .unwrap()
        .contains("no accounted process"));
    assert!(g["energy_j"].as_f64().unwrap() >= 0.0);
}

#[test]
fn eight_epilogs_ending_at_once_leave_eight_records() {
    let node = Node::new(&healthy(100), "");
    for i in 0..8 {
        node.prolog(&format!("{}", 300 + i), &i.to_string());
    }
    std::thread::sleep(Duration::from_millis(300));
    let children: Vec<_> = (0..8)
        .map(|i| {
            node.command(Path::new(EPILOG), &format!("{}", 300 + i), &i.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut recs = node.records();
    assert_eq!(recs.len(), 8);
    recs.sort_by_key(|r| r["job_id"].as_str().unwrap().to_string());
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r["job_id"], format!("{}", 300 + i));
        assert_eq!(r["gpus"][0]["index"], i);
        assert!(r["gpus"][0]["energy_j"].as_f64().unwrap() > 0.0);
    }
    let prom = std::fs::read_to_string(node.path("gpu-health.prom")).unwrap();
    gpu_health_testkit::promtool_check_metrics(&prom);
    for i in 0..8 {
        assert!(
            prom.contains(&format!("slurm_job_id=\"{}\"", 300 + i)),
            "{prom}"
        );
    }
}

#[test]
fn without_a_start_snapshot_the_record_says_so() {
    let node = Node::new(&healthy(100), "");
    node.epilog("103", "1");
    let r = &node.records()[0];
    assert_eq!(r["start_snapshot_missing"], true);
    assert!(r["start_snapshot_missing_reason"]
        .as_str()
        .unwrap()
        .contains("prolog did not run"));
    let g = &r["gpus"][0];
    assert_eq!(g["energy_j"], Value::Null);
    assert!(g["energy_absent_reason"]
        .as_str()
        .unwrap()
        .contains("no start snapshot"));
    assert_eq!(g["uuid"], "GPU-7dd26f96-ee07-e27a-b65e-4bdc34a16660");
}

#[test]
fn new_uncorrectable_ecc_during_the_job_drains() {
    let node = Node::new(&healthy(100), "");
    node.prolog("104", "3");
    node.set_scenario(&shipped("h100x8-dbe.json"));
    node.epilog("104", "3");
    let r = &node.records()[0];
    assert_eq!(r["gpus"][0]["ecc_uncorrected_delta"], 2);
    // scontrol is /bin/false here: the drain was called for and failed.
    let reason = r["drain_failed"].as_str().unwrap();
    assert!(
        reason.contains("gpu-health: ECC DBE during job 104 GPU3 0000:5d:00.0 (drain)"),
        "{reason}"
    );
}

#[test]
fn fatal_xid_on_a_job_gpu_drains_and_others_are_left_out() {
    let node = Node::new(&healthy(100), "");
    std::fs::write(
        node.path("kern.log"),
        "[  10.000000] NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception before the job\n",
    )
    .unwrap();
    node.prolog("105", "0");
    let mut log = std::fs::read_to_string(node.path("kern.log")).unwrap();
    log.push_str(
        "[  20.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=7, GPU has fallen off the bus.\n",
    );
    log.push_str("[  21.000000] NVRM: Xid (PCI:0000:2a:00): 31, pid=8, MMU Fault\n");
    std::fs::write(node.path("kern.log"), log).unwrap();
    node.epilog("105", "0");
    let r = &node.records()[0];
    let xids = r["xids"].as_array().unwrap();
    assert_eq!(xids.len(), 1, "{xids:?}");
    assert_eq!(xids[0]["code"], 79);
    assert_eq!(xids[0]["gpu"], 0);
    let reason = r["drain_failed"].as_str().unwrap();
    assert!(
        reason.contains("Xid 79 during job 105 GPU0 0000:18:00.0"),
        "{reason}"
    );
}

#[test]
fn unwritable_records_dir_spools_until_the_next_run() {
    let node = Node::new(&healthy(100), "");
    std::fs::write(node.path("records"), "a file where the directory belongs").unwrap();
    node.prolog("106", "0");
    node.epilog("106", "0");
    let pending: Vec<_> = std::fs::read_dir(node.path("state/pending"))
        .unwrap()
        .collect();
    assert_eq!(pending.len(), 1);
    std::fs::remove_file(node.path("records")).unwrap();
    node.prolog("107", "1");
    let recs = node.records();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["job_id"], "106");
    assert_eq!(
        std::fs::read_dir(node.path("state/pending"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn a_hung_gpu_does_not_hold_the_epilog() {
    let node = Node::new(&healthy(100), "");
    node.prolog("108", "4");
    node.set_scenario(&shipped("nvml-hang.json"));
    std::fs::write(
        node.path("gpu-health.toml"),
        std::fs::read_to_string(node.path("gpu-health.toml"))
            .unwrap()
            .replace("nvml_deadline_ms = 5000", "nvml_deadline_ms = 300"),
    )
    .unwrap();
    let t = Instant::now();
    node.epilog("108", "4");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let r = &node.records()[0];
    assert!(r["nvml_error"].as_str().unwrap().contains("300 ms"), "{r}");
    assert!(r["gpus"][0]["energy_absent_reason"]
        .as_str()
        .unwrap()
        .contains("300 ms"));
}

/// A job that came within 3% of two GPUs' memory: the record flags those
/// GPUs, the node's log says so, and `gpu-health report --near-oom` lists
/// them with the figures and the remedies.
#[test]
fn near_oom_gpus_are_flagged_and_reported() {
    let mut s = shipped("h100x8-near-oom.json");
    for g in s["gpus"].as_array_mut().unwrap() {
        g["accounting"]["processes"][0]["started_ms_ago"] = 200.into();
    }
    let node = Node::new(&s, "");
    node.prolog("111", "0-7");
    std::thread::sleep(Duration::from_millis(300));
    let out = node.epilog("111", "0-7");
    let r = &node.records()[0];
    let flagged: Vec<u64> = r["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["near_oom"] == true)
        .map(|g| g["index"].as_u64().unwrap())
        .collect();
    assert_eq!(flagged, [1, 6], "{r}");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("GPU1's peak memory reached 95%"), "{log}");
    let report = Command::new(gpu_health_testkit::workspace_binary(
        "gpu-health",
        "gpu-health",
    ))
    .args(["report", "--near-oom", "--dir"])
    .arg(node.path("records"))
    .env_clear()
    .env("GPU_HEALTH_CONFIG", node.path("gpu-health.toml"))
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("111 ")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows[0].contains("GPU1") && rows[0].contains("(97%)"),
        "{text}"
    );
    assert!(text.contains("1. BF16/FP16 mixed precision"), "{text}");
    assert!(
        text.contains("4. a smaller micro-batch with gradient accumulation"),
        "{text}"
    );
}

/// The job's peak power is the highest sample: the prolog's, each health
/// check's while the job runs, the epilog's. Here a health check sees
/// GPU0 at 650 W between a prolog and an epilog that see it idle.
#[test]
fn peak_power_is_sampled_at_the_health_checks() {
    let mut s = healthy(200);
    let node = Node::new(&s, "");
    node.prolog("102", "0,1");
    let idle = |s: &Value, g: usize| draw_w(s, g);
    let (idle0, idle1) = (idle(&s, 0), idle(&s, 1));
    s["gpus"][0]["power"]["draw_mw"] = 650_000.into();
    node.set_scenario(&s);
    let check = node
        .command(&built().0, "102", "0,1")
        .env_remove("SLURM_JOB_ID")
        .arg("--health-check")
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(0),
        "health check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(node.path("state/jobs/102.power.json").exists());
    s["gpus"][0]["power"]["draw_mw"] = ((idle0 * 1000.0) as u64).into();
    node.set_scenario(&s);
    node.epilog("102", "0,1");
    let r = &node.records()[0];
    let g0 = &r["gpus"][0];
    assert_eq!(g0["peak_power_w"].as_f64(), Some(650.0), "{g0}");
    assert_eq!(g0["power_samples"], 3, "prolog, health check, epilog");
    assert_eq!(r["gpus"][1]["peak_power_w"].as_f64(), Some(idle1));
    assert_eq!(
        r["peak_power_w"].as_f64(),
        Some(650.0 + idle1),
        "both GPUs at the health check's sample"
    );
    assert!(
        !node.path("state/jobs/102.power.json").exists(),
        "the epilog removes the samples"
    );
}

/// A job on a MIG GPU and a whole GPU: the MIG one is marked, has its
/// (whole-GPU) energy with a note, and no peak memory, saying why; the
/// other is measured as usual. Nothing drains.
#[test]
fn a_mig_gpu_gets_no_invented_peak_memory() {
    let mut s = healthy(200);
    s["gpus"][0]["mig_mode"] = serde_json::json!({ "current": 1, "pending": 1 });
    let node = Node::new(&s, "");
    node.prolog("103", "0,4");
    std::thread::sleep(Duration::from_millis(1000));
    node.epilog("103", "0,4");
    let r = &node.records()[0];
    let (mig, whole) = (&r["gpus"][0], &r["gpus"][1]);
    assert_eq!(mig["mig"], true, "{mig}");
    assert!(mig["energy_j"].as_f64().unwrap() > 0.0);
    assert_eq!(mig["peak_memory_bytes"], Value::Null);
    assert!(
        mig["peak_memory_absent_reason"]
            .as_str()
            .unwrap()
            .starts_with("MIG mode: NVML keeps no per-process accounting"),
        "{mig}"
    );
    assert!(mig["notes"]
        .to_string()
        .contains("the energy is the whole GPU's"));
    assert_eq!(whole.get("mig"), None, "not written for a whole GPU");
    assert_eq!(
        &whole["peak_memory_bytes"],
        &s["gpus"][4]["accounting"]["processes"][0]["max_memory_bytes"]
    );
    assert_eq!(r["drained"], Value::Null);
}
