//! The epilog and the state contract: what it finds in the state
//! directory is trusted only when the directory is safe, it deletes
//! nothing through a symlink, and a drain it could not make is kept for
//! the next run. The real prolog and epilog against the NVML stand-in,
//! with a stand-in scontrol for the failure paths.
//!
//! Assertions are on observable results (records, files left alone,
//! drains asked of Slurm), so they also hold for older builds:
//! `GPU_HEALTH_TEST_BIN_DIR=<dir of an old build> cargo test --test state_contract`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_health_testkit::{output, program, workspace_binary, Scontrol, SimNode};
use serde_json::Value;

fn node(how: Scontrol) -> SimNode {
    let n = SimNode::new("h100x8-healthy");
    let s = n.scontrol(how);
    n.write_config(&format!("records_dir = {:?}\n", n.path("records")));
    // The node's drop-in overrides the base file's scontrol.
    std::fs::create_dir_all(n.path("gpu-health.d")).unwrap();
    std::fs::write(
        n.path("gpu-health.d/n1.toml"),
        format!("scontrol = {s:?}\n[brake]\nenabled = false\n"),
    )
    .unwrap();
    n
}

fn run(n: &SimNode, program: &Path, job: &str) -> (i32, String) {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("GPU_HEALTH_CONFIG", n.path("gpu-health.toml"))
        .env("SLURMD_NODENAME", "n1")
        .env("SLURM_JOB_ID", job)
        .env("SLURM_JOB_GPUS", "3")
        .env("SLURM_JOB_USER", "alice");
    let (code, _, err) = output(&mut cmd);
    let log = std::fs::read_to_string(n.path("gpu-health.log")).unwrap_or_default();
    (code, format!("{log}{err}"))
}

fn prolog(n: &SimNode, job: &str) -> (i32, String) {
    run(
        n,
        &workspace_binary("gpu-health-prolog", "gpu-health-prolog"),
        job,
    )
}

fn epilog(n: &SimNode, job: &str) -> (i32, String) {
    let (code, log) = run(n, &program(env!("CARGO_BIN_EXE_gpu-health-epilog")), job);
    assert_eq!(code, 0, "the epilog always exits 0: {log}");
    (code, log)
}

fn records(n: &SimNode) -> Vec<Value> {
    std::fs::read_to_string(n.path("records/jobs.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON record"))
        .collect()
}

#[test]
fn a_symlinked_jobs_dir_is_neither_trusted_nor_deleted_through() {
    let n = node(Scontrol::Works);
    let (code, log) = prolog(&n, "42");
    assert_eq!(code, 0, "{log}");
    assert!(n.path("state/jobs/42.start.json").exists(), "{log}");
    // Someone swaps the jobs directory for a link to theirs, holding a
    // forged start snapshot and a file the epilog would delete.
    let theirs = n.path("theirs");
    std::fs::rename(n.path("state/jobs"), &theirs).unwrap();
    std::os::unix::fs::symlink(&theirs, n.path("state/jobs")).unwrap();
    let start = theirs.join("42.start.json");
    let mut forged: Value =
        serde_json::from_str(&std::fs::read_to_string(&start).unwrap()).unwrap();
    forged["start_ms"] = 1.into();
    std::fs::write(&start, forged.to_string()).unwrap();
    epilog(&n, "42");
    let r = &records(&n)[0];
    assert_eq!(
        r["start_snapshot_missing"], true,
        "the forged start is not used: {r}"
    );
    assert!(start.exists(), "nothing deleted through the link");
    assert!(
        theirs.join("42.json").exists(),
        "nothing deleted through the link"
    );
}

#[test]
fn a_spool_in_a_state_dir_others_can_write_is_not_a_record() {
    let n = node(Scontrol::Works);
    std::fs::create_dir_all(n.path("state/pending")).unwrap();
    let planted = r#"{"version":1,"job_id":"666","node":"n1","user":"mallory","uid":0,"partition":null,"exit_code":0,"start_ms":1,"end_ms":2,"duration_s":0.001,"start_snapshot_missing":false,"start_snapshot_missing_reason":null,"nvml_error":null,"gpus":[],"xids":[],"xids_absent_reason":null,"drained":null,"drain_failed":null}"#;
    std::fs::write(n.path("state/pending/0000000000001-666.json"), planted).unwrap();
    std::fs::set_permissions(n.path("state"), std::fs::Permissions::from_mode(0o777)).unwrap();
    epilog(&n, "43");
    assert!(
        records(&n).iter().all(|r| r["job_id"] != "666"),
        "{:?}",
        records(&n)
    );
}

const XID79: &str =
    "[ 9000.100000] NVRM: Xid (PCI:0000:5d:00): 79, pid=2210, GPU has fallen off the bus.\n";

#[test]
fn a_drain_the_epilog_could_not_make_is_kept_for_the_next_run() {
    for how in [Scontrol::Fails, Scontrol::Hangs] {
        let n = node(how);
        assert_eq!(prolog(&n, "44").0, 0);
        // The job's GPU fell off the bus while it ran; slurmctld is away.
        std::fs::write(n.path("kernel.log"), XID79).unwrap();
        let t0 = Instant::now();
        epilog(&n, "44");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{how:?}: the Slurm budget bounds the epilog: {:?}",
            t0.elapsed()
        );
        let r = &records(&n)[0];
        assert!(r["drain_failed"].is_string(), "{how:?}: {r}");
        assert_eq!(n.drained_reason(), None);
        // slurmctld is back: the next job's prolog drains, naming the job
        // the fault hit (the epilog's finding was kept with why).
        let s = n.scontrol(Scontrol::Works);
        assert_eq!(s, n.path("scontrol"));
        let (code, log) = prolog(&n, "45");
        assert_eq!(code, 1, "{how:?}: {log}");
        let reason = n.drained_reason().unwrap_or_default();
        assert!(reason.contains("during job 44"), "{how:?}: {reason}\n{log}");
    }
}
