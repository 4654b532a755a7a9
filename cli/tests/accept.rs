//! `gpu-health accept` through the real binary, on a simulated node, with
//! stand-in tools: scripts that print the recorded outputs of
//! core/tests/fixtures/acceptance, hang past their limit or fail.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_health_core::ids::JobId;
use gpu_health_core::state::{StateDir, StateFile};
use gpu_health_testkit::{output, SimNode};

fn fixture(name: &str) -> PathBuf {
    gpu_health_testkit::workspace()
        .join("core/tests/fixtures/acceptance")
        .join(name)
}

/// A sysfs with one NDR HCA port, mlx5_0:1, active.
fn sysfs_with_ndr(dir: &Path) -> PathBuf {
    let root = dir.join("sys");
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(&port).unwrap();
    for (f, v) in [
        ("link_layer", "InfiniBand"),
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("rate", "400 Gb/sec (4X NDR)"),
    ] {
        std::fs::write(port.join(f), format!("{v}\n")).unwrap();
    }
    root
}

/// DCGM 4's answer for 8 GPUs, all passed (ci/fixtures/dcgmi/README.md).
fn dcgm_passes() -> PathBuf {
    gpu_health_testkit::workspace().join("ci/fixtures/dcgmi/pass-v4.out")
}

/// The stand-ins, each printing a recorded output (the loopback server,
/// called without `localhost`, waits to be killed).
struct Tools {
    dcgmi: PathBuf,
    all_reduce: PathBuf,
    nvbandwidth: PathBuf,
    ib_write_bw: PathBuf,
}

fn tools(node: &SimNode, all_reduce: &str, h2d: &str, rdma: &str) -> Tools {
    Tools {
        dcgmi: node.script("dcgmi", &format!("cat {:?}", dcgm_passes())),
        all_reduce: node.script("all_reduce_perf", &format!("cat {:?}", fixture(all_reduce))),
        nvbandwidth: node.script("nvbandwidth", &format!("cat {:?}", fixture(h2d))),
        ib_write_bw: node.script(
            "ib_write_bw",
            &format!(
                "for last; do :; done\nif [ \"$last\" = localhost ]; then cat {:?}; else exec sleep 60; fi",
                fixture(rdma)
            ),
        ),
    }
}

fn config(node: &SimNode, t: &Tools, extra: &str) -> PathBuf {
    node.write_config(&format!(
        "sysfs_root = {:?}\n[dcgm]\ndcgmi = {:?}\n[acceptance]\nenabled = true\n\
         all_reduce_perf = {:?}\nnvbandwidth = {:?}\nib_bw = {:?}\n{extra}",
        sysfs_with_ndr(node.dir.path()),
        t.dcgmi,
        t.all_reduce,
        t.nvbandwidth,
        t.ib_write_bw
    ))
}

fn accept(cfg: &Path, args: &[&str]) -> (i32, String, String) {
    output(
        Command::new(gpu_health_testkit::program(env!(
            "CARGO_BIN_EXE_gpu-health"
        )))
        .arg("accept")
        .args(args)
        .env_clear()
        .env("GPU_HEALTH_CONFIG", cfg),
    )
}

fn good(node: &SimNode) -> Tools {
    tools(
        node,
        "nccl/h100x8-good.txt",
        "nvbandwidth/h2d-h100x8-good.txt",
        "perftest/write_bw-ndr-gbits.txt",
    )
}

#[test]
fn a_good_node_passes_every_gate() {
    let node = SimNode::new("h100x8-healthy");
    let cfg = config(&node, &good(&node), "");
    let (code, out, err) = accept(&cfg, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("NVIDIA H100 80GB HBM3"), "{out}");
    assert!(out.contains("every gate passed"), "{out}");
    let all_reduce = out.lines().find(|l| l.starts_with("all-reduce")).unwrap();
    assert!(
        all_reduce.contains("passed")
            && all_reduce.contains("482.0 GB/s")
            && all_reduce.contains("460.0 GB/s"),
        "{all_reduce}"
    );
    let rdma = out.lines().find(|l| l.starts_with("rdma")).unwrap();
    assert!(
        rdma.contains("mlx5_0") && rdma.contains("360.0 Gb/s"),
        "{rdma}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("host-to-device"))
            .count(),
        8,
        "{out}"
    );
}

#[test]
fn a_slow_node_fails_with_its_figures_in_json() {
    let node = SimNode::new("h100x8-healthy");
    let t = tools(
        &node,
        "nccl/h100x8-slow.txt",
        "nvbandwidth/h2d-h100x8-gpu3-slow.txt",
        "perftest/write_bw-ndr-slow-gbits.txt",
    );
    let cfg = config(
        &node,
        &t,
        "gates = [\"all-reduce\", \"host-to-device\", \"rdma\"]\n",
    );
    let (code, out, err) = accept(&cfg, &["--json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["exit"], 1);
    assert_eq!(v["model"], "NVIDIA H100 80GB HBM3");
    let summaries: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["summary"].as_str().unwrap())
        .collect();
    assert_eq!(
        summaries,
        [
            "all-reduce 313.0 GB/s < 460 GB/s (H100 SXM)",
            "H2D GPU3 26.0 GB/s < 52 GB/s (H100 SXM)",
            "RDMA mlx5_0 198.1 Gb/s < 360 Gb/s (400 Gb/s link)"
        ]
    );
    let first = &v["results"][0];
    assert_eq!(first["gate"], "all-reduce");
    assert_eq!(first["verdict"], "failed");
    assert_eq!(first["threshold"], 460.0);
    // It reports; it never drains (no scontrol exists in this test).
    assert!(node.drained_reason().is_none());
}

#[test]
fn a_wrong_result_fails_and_a_hung_tool_is_not_judged() {
    let node = SimNode::new("h100x8-healthy");
    let mut t = tools(
        &node,
        "nccl/h100x8-wrong.txt",
        "nvbandwidth/h2d-h100x8-good.txt",
        "perftest/write_bw-ndr-gbits.txt",
    );
    let cfg = config(&node, &t, "gates = [\"all-reduce\"]\n");
    let (code, out, _) = accept(&cfg, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("wrong results: 3"), "{out}");

    t.nvbandwidth = node.script("nvbandwidth-hangs", "exec sleep 60");
    let cfg = config(
        &node,
        &t,
        "gates = [\"host-to-device\"]\nnvbandwidth_timeout_s = 10\n",
    );
    let t0 = Instant::now();
    let (code, out, _) = accept(&cfg, &[]);
    assert!(t0.elapsed() < Duration::from_secs(25), "{:?}", t0.elapsed());
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("not judged") && out.contains("no result within 10 s (killed)"),
        "{out}"
    );
    assert!(out.contains("would drain: H2D not judged"), "{out}");
}

#[test]
fn a_missing_or_failing_tool_is_not_judged() {
    let node = SimNode::new("h100x8-healthy");
    let mut t = good(&node);
    t.all_reduce = node.path("not-installed/all_reduce_perf");
    t.ib_write_bw = node.script(
        "ib_write_bw-fails",
        "echo \"Couldn't connect to localhost:18515\" >&2\nexit 1",
    );
    let cfg = config(&node, &t, "gates = [\"all-reduce\", \"rdma\"]\n");
    let (code, out, _) = accept(&cfg, &["--json"]);
    assert_eq!(code, 2, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let details: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["detail"].as_str().unwrap())
        .collect();
    assert!(
        details[0].ends_with("all_reduce_perf not found"),
        "{details:?}"
    );
    assert_eq!(
        details[1],
        "exited with status 1: Couldn't connect to localhost:18515"
    );
}

#[test]
fn it_refuses_while_a_job_runs_unless_forced() {
    let node = SimNode::new("h100x8-healthy");
    let log = node.path("ran");
    let mut t = good(&node);
    t.all_reduce = node.script(
        "all_reduce_logs",
        &format!(
            "echo ran >> {log:?}\ncat {:?}",
            fixture("nccl/h100x8-good.txt")
        ),
    );
    let cfg = config(&node, &t, "gates = [\"all-reduce\"]\n");
    let state = StateDir::open(&node.path("state"));
    let start = state.path_of(StateFile::JobStart(JobId::from(4242)));
    std::fs::create_dir_all(start.parent().unwrap()).unwrap();
    for d in [node.path("state"), start.parent().unwrap().to_path_buf()] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    std::fs::write(&start, "{}").unwrap();
    let (code, out, err) = accept(&cfg, &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        out.contains("refused: a job runs on this node (job 4242"),
        "{out}"
    );
    assert!(!log.exists(), "a gate ran under a job");
    let (code, out, _) = accept(&cfg, &["--force"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("--force: job 4242"), "{out}");
    assert!(log.exists());
}

#[test]
fn an_unknown_gate_is_a_usage_error() {
    let node = SimNode::new("h100x8-healthy");
    let cfg = config(&node, &good(&node), "");
    let (code, _, err) = accept(&cfg, &["--gates", "burn"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown gate \"burn\""), "{err}");
}

#[test]
fn a_tier_under_way_keeps_accept_off_the_node() {
    let node = SimNode::new("h100x8-healthy");
    let cfg = config(&node, &good(&node), "");
    std::fs::create_dir_all(node.path("state")).unwrap();
    // A health check's tier holds the node's tier lock (`flock` holds it
    // until its `cat` ends with its input).
    let mut holder = Command::new("flock")
        .arg("--close")
        .arg(node.path("state/tier.lock"))
        .arg("cat")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, out, err) = accept(&cfg, &[]);
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("another acceptance tier runs on"), "{err}");
    assert!(!out.contains("all-reduce"), "no gate ran: {out}");
    let (code, out, err) = accept(&cfg, &[]);
    assert_eq!(code, 0, "free again\n{out}\n{err}");
}
