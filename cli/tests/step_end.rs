//! `gpu-health step-end` on a simulated node whose GPUs 1, 2 and 6 came
//! near out of memory: only the GPUs the job owns by the Prolog's record
//! (its verdict) are ever reported, whatever the step claims.

use std::process::Command;

use gpu_health_core::ids::JobId;
use gpu_health_core::state::StateDir;
use gpu_health_core::verdict::{JobVerdict, Mode};
use gpu_health_testkit::{output, SimNode};

const NOTICE: &str = "came near out of GPU memory";

/// `h100x8-near-oom` (GPU1 and GPU6 peak at 97%) with GPU2 near as well.
fn near_oom_node() -> SimNode {
    let node = SimNode::new("h100x8-near-oom");
    let path = node.path("lib/scenario.json");
    let mut s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let near = s["gpus"][1].clone();
    s["gpus"][2]["memory"] = near["memory"].clone();
    s["gpus"][2]["accounting"] = near["accounting"].clone();
    std::fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
    node
}

/// What the root Prolog leaves for job `job` on GPUs `gpus`.
fn prolog_recorded(node: &SimNode, job: u32, gpus: &[u32]) {
    let state = StateDir::open(&node.path("state"));
    let verdict = JobVerdict {
        job_id: JobId::from(job),
        node: "n1".into(),
        mode: Mode::Warn,
        written_at_ms: 0,
        job_gpus: gpus.to_vec(),
        findings: Vec::new(),
        config_error: None,
    };
    state.save(JobId::from(job), &verdict).unwrap();
}

/// The plugin's command line for step `job`.0 claiming `gpus`.
fn step_end(node: &SimNode, job: u32, gpus: &str) -> (i32, String, String) {
    let cfg = node.write_config("");
    let since = gpu_health_core::time::unix_ms() - 60_000;
    output(
        Command::new(env!("CARGO_BIN_EXE_gpu-health"))
            .args(["step-end", "--gpus", gpus, "--since-ms"])
            .arg(since.to_string())
            .args(["--job", &job.to_string(), "--step", &format!("{job}.0")])
            .env_clear()
            .env("GPU_HEALTH_CONFIG", &cfg)
            .env("SLURMD_NODENAME", "n1"),
    )
}

fn log(node: &SimNode) -> String {
    std::fs::read_to_string(node.path("gpu-health.log")).unwrap_or_default()
}

#[test]
fn a_step_claiming_every_gpu_hears_only_about_the_jobs_own() {
    let node = near_oom_node();
    prolog_recorded(&node, 42, &[2, 3]);
    let (code, out, err) = step_end(&node, 42, "0-7");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(NOTICE) && out.contains("GPU2 peaked"),
        "{out}\n{err}"
    );
    for other in ["GPU1 ", "GPU6 ", "GPU0 ", "GPU7 "] {
        assert!(!out.contains(other), "{other} is not job 42's: {out}");
    }
    assert!(
        log(&node).contains("GPU(s) 0,1,4,5,6,7 are not the job's (the Prolog recorded 2,3)"),
        "{}",
        log(&node)
    );
}

#[test]
fn a_gpu_outside_the_allocation_is_never_reported() {
    let node = near_oom_node();
    prolog_recorded(&node, 42, &[2, 3]);
    let (code, out, err) = step_end(&node, 42, "6");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "", "GPU6 is another job's");
}

#[test]
fn without_the_prologs_record_nothing_is_reported_and_the_log_says_why() {
    let node = near_oom_node();
    // Job 43 has no verdict on this node.
    prolog_recorded(&node, 42, &[0, 1, 2, 3, 4, 5, 6, 7]);
    let (code, out, err) = step_end(&node, 43, "0-7");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "");
    assert!(
        log(&node).contains("no near-OOM figures: no verdict of the Prolog for job 43"),
        "{}",
        log(&node)
    );
}

#[test]
fn the_jobs_own_near_gpus_are_still_reported() {
    let node = near_oom_node();
    prolog_recorded(&node, 42, &[0, 1, 2, 3, 4, 5, 6, 7]);
    let (code, out, err) = step_end(&node, 42, "0-7");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("GPU1 peaked") && out.contains("GPU2 peaked") && out.contains("GPU6 peaked"),
        "{out}\n{err}"
    );
}
