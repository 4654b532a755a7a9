//! Judging: recorded outputs + the threshold table + the configuration
//! to verdicts and findings, without running anything.

use std::path::PathBuf;

use gpu_health_core::acceptance::judge::{judge_all_reduce, judge_dcgm, judge_h2d, judge_rdma};
use gpu_health_core::acceptance::thresholds::{self, in_force, row_for, TABLE};
use gpu_health_core::acceptance::{GateName, ToolRun, Verdict};
use gpu_health_core::checks::dcgm::DcgmOutcome;
use gpu_health_core::config::{self, AcceptanceConfig, ModelThresholds};
use gpu_health_core::finding::{drain_reason, Action, Finding};

const H100: &str = "NVIDIA H100 80GB HBM3";

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/acceptance")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn printed(name: &str) -> ToolRun {
    ToolRun::Ended {
        code: Some(0),
        stdout: fixture(name),
        stderr: String::new(),
    }
}

fn cfg() -> AcceptanceConfig {
    AcceptanceConfig::default()
}

#[test]
fn the_table_matches_nvml_names() {
    for (name, label) in [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("nvidia h100 80gb hbm3 ", "H100 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
    ] {
        assert_eq!(row_for(name).map(|r| r.label), Some(label), "{name}");
    }
    assert!(row_for("NVIDIA L40S").is_none());
    assert!(row_for("NVIDIA H100").is_none(), "no prefix matches");
    // Every row says where its figures come from, and no two rows share
    // an NVML name.
    let mut names = Vec::new();
    for r in TABLE {
        assert!(!r.source.is_empty(), "{}", r.label);
        for n in r.nvml_names {
            assert!(!names.contains(n), "{n} twice");
            names.push(*n);
        }
    }
    // Azure's H100 figures (peers.md).
    let h = row_for(H100).unwrap();
    assert_eq!((h.all_reduce_gbs, h.h2d_gbs), (Some(460.0), Some(52.0)));
}

#[test]
fn the_configuration_overrides_the_table_per_model() {
    let mut c = cfg();
    c.models.insert(
        "H100 SXM".into(),
        ModelThresholds {
            all_reduce_gbs: Some(400.0),
            ..Default::default()
        },
    );
    c.models.insert(
        "NVIDIA L40S".into(),
        ModelThresholds {
            h2d_gbs: Some(20.0),
            rdma_gbps: Some(180.0),
            ..Default::default()
        },
    );
    let t = in_force(&c, H100);
    assert_eq!(t.label, "H100 SXM");
    assert_eq!(t.all_reduce_gbs, Some(400.0));
    assert_eq!(t.h2d_gbs, Some(52.0), "the table's where not overridden");
    assert!(t.all_reduce_from_config);
    let l = in_force(&c, "NVIDIA L40S");
    assert_eq!(l.label, "NVIDIA L40S");
    assert_eq!(
        (l.all_reduce_gbs, l.h2d_gbs, l.rdma_gbps),
        (None, Some(20.0), Some(180.0))
    );
    assert_eq!(l.rdma_fraction, 0.9);
}

#[test]
fn a_good_all_reduce_passes() {
    let r = judge_all_reduce(&printed("nccl/h100x8-good.txt"), &in_force(&cfg(), H100), 8);
    assert_eq!(r.verdict, Verdict::Passed, "{r:?}");
    assert_eq!((r.figure, r.threshold), (Some(481.98), Some(460.0)));
    assert!(r.finding().is_none());
}

#[test]
fn a_slow_all_reduce_fails_with_figure_and_threshold_in_the_reason() {
    let r = judge_all_reduce(&printed("nccl/h100x8-slow.txt"), &in_force(&cfg(), H100), 8);
    assert_eq!(r.verdict, Verdict::Failed);
    let f = r.finding().unwrap();
    assert_eq!(f.check, "gate-allreduce");
    assert_eq!(f.action, Action::Drain);
    assert_eq!(f.gpu, None);
    assert_eq!(f.summary, "all-reduce 313.0 GB/s < 460 GB/s (H100 SXM)");
    let reason = drain_reason(&[f]).unwrap();
    assert_eq!(
        reason,
        "gpu-health: all-reduce 313.0 GB/s < 460 GB/s (H100 SXM) (drain)"
    );
    assert!(reason.len() <= 255);
}

#[test]
fn a_wrong_result_fails_even_with_good_bandwidth() {
    let r = judge_all_reduce(
        &printed("nccl/h100x8-wrong.txt"),
        &in_force(&cfg(), H100),
        8,
    );
    assert_eq!(r.verdict, Verdict::Failed);
    let f = r.finding().unwrap();
    assert_eq!(f.action, Action::Drain);
    assert!(f.summary.contains("wrong results: 3"), "{}", f.summary);
    // Even when all_reduce_perf says so with a failure status.
    let run = ToolRun::Ended {
        code: Some(1),
        stdout: fixture("nccl/h100x8-wrong.txt"),
        stderr: String::new(),
    };
    let r = judge_all_reduce(&run, &in_force(&cfg(), H100), 8);
    assert_eq!(r.verdict, Verdict::Failed);
}

#[test]
fn an_unknown_model_is_not_judged_and_not_a_failure() {
    let r = judge_all_reduce(
        &printed("nccl/h100x8-good.txt"),
        &in_force(&cfg(), "NVIDIA L40S"),
        8,
    );
    assert_eq!(r.verdict, Verdict::NotJudged);
    assert!(!r.holds);
    assert!(
        r.detail.contains("no threshold for NVIDIA L40S"),
        "{}",
        r.detail
    );
    let f = r.finding().unwrap();
    assert_eq!(f.action, Action::Info);
    // The configuration can give one.
    let mut c = cfg();
    c.models.insert(
        "NVIDIA L40S".into(),
        ModelThresholds {
            all_reduce_gbs: Some(500.0),
            ..Default::default()
        },
    );
    let r = judge_all_reduce(
        &printed("nccl/h100x8-good.txt"),
        &in_force(&c, "NVIDIA L40S"),
        8,
    );
    assert_eq!(r.verdict, Verdict::Failed);
}

#[test]
fn the_tables_all_reduce_figure_is_for_eight_gpus() {
    let r = judge_all_reduce(&printed("nccl/h100x8-good.txt"), &in_force(&cfg(), H100), 4);
    assert_eq!(r.verdict, Verdict::NotJudged);
    assert!(!r.holds);
    assert!(r.detail.contains("for 4 GPUs"), "{}", r.detail);
}

#[test]
fn a_time_out_a_bad_status_or_garbage_is_not_judged_and_holds_the_node() {
    let th = in_force(&cfg(), H100);
    for (run, why) in [
        (
            ToolRun::TimedOut { ms: 300_000 },
            "no result within 300 s (killed)",
        ),
        (
            ToolRun::Missing {
                program: "all_reduce_perf".into(),
            },
            "all_reduce_perf not found",
        ),
        (
            ToolRun::Ended {
                code: Some(3),
                stdout: fixture("nccl/h100x8-good.txt"),
                stderr: "NCCL WARN bad\n".into(),
            },
            "exited with status 3: NCCL WARN bad",
        ),
        (
            ToolRun::Ended {
                code: None,
                stdout: String::new(),
                stderr: String::new(),
            },
            "killed by a signal: no output",
        ),
        (
            printed("nccl/cuda-error.txt"),
            // Issue 36: the reason is what stopped it.
            "all_reduce_perf stopped: gpu017: Test NCCL failure common.cu:1279",
        ),
        (
            printed("nccl/h100x8-truncated.txt"),
            "ends before its summary",
        ),
    ] {
        let r = judge_all_reduce(&run, &th, 8);
        assert_eq!(r.verdict, Verdict::NotJudged, "{why}");
        assert!(r.holds, "{why}");
        assert!(r.detail.contains(why), "{why}: {}", r.detail);
        let f = r.finding().unwrap();
        assert_eq!(f.action, Action::Drain, "{why}");
        assert!(
            f.summary.starts_with("all-reduce not judged: "),
            "{}",
            f.summary
        );
        assert!(f.summary.len() <= 120);
    }
}

#[test]
fn host_to_device_is_judged_per_gpu() {
    let th = in_force(&cfg(), H100);
    let good = judge_h2d(&printed("nvbandwidth/h2d-h100x8-good.txt"), &th);
    assert_eq!(good.len(), 8);
    assert!(good.iter().all(|r| r.verdict == Verdict::Passed));
    let slow = judge_h2d(&printed("nvbandwidth/h2d-h100x8-gpu3-slow.txt"), &th);
    let failed: Vec<_> = slow
        .iter()
        .filter(|r| r.verdict == Verdict::Failed)
        .collect();
    assert_eq!(failed.len(), 1);
    let f = failed[0].finding().unwrap();
    assert_eq!((f.check.as_str(), f.gpu), ("gate-h2d", Some(3)));
    assert_eq!(f.summary, "H2D GPU3 26.0 GB/s < 52 GB/s (H100 SXM)");
    let waived = judge_h2d(&printed("nvbandwidth/h2d-waived.txt"), &th);
    assert_eq!(waived.len(), 1);
    assert_eq!(waived[0].verdict, Verdict::NotJudged);
    assert!(waived[0].holds);
}

#[test]
fn rdma_is_judged_against_a_share_of_the_ports_rate() {
    let th = in_force(&cfg(), H100);
    let good = judge_rdma(
        "mlx5_0",
        Some(400.0),
        &printed("perftest/write_bw-ndr-gbits.txt"),
        &th,
    );
    assert_eq!(good.verdict, Verdict::Passed);
    assert_eq!(good.threshold, Some(360.0));
    let slow = judge_rdma(
        "mlx5_3",
        Some(400.0),
        &printed("perftest/write_bw-ndr-slow-gbits.txt"),
        &th,
    );
    assert_eq!(slow.verdict, Verdict::Failed);
    let f = slow.finding().unwrap();
    assert_eq!(f.check, "gate-rdma");
    assert_eq!(
        f.summary,
        "RDMA mlx5_3 198.1 Gb/s < 360 Gb/s (400 Gb/s link)"
    );
    // The MiB/s form is judged the same.
    let mib = judge_rdma(
        "mlx5_0",
        Some(400.0),
        &printed("perftest/write_bw-ndr-mib.txt"),
        &th,
    );
    assert_eq!(mib.verdict, Verdict::Passed);
    // Unknown rate: no threshold, not a failure.
    let unknown = judge_rdma(
        "mlx5_0",
        None,
        &printed("perftest/write_bw-ndr-gbits.txt"),
        &th,
    );
    assert_eq!(unknown.verdict, Verdict::NotJudged);
    assert!(!unknown.holds);
    // A failed connection holds the node.
    let failed = ToolRun::Ended {
        code: Some(1),
        stdout: String::new(),
        stderr: fixture("perftest/connect-failed.txt"),
    };
    let r = judge_rdma("mlx5_0", Some(400.0), &failed, &th);
    assert_eq!(r.verdict, Verdict::NotJudged);
    assert!(r.holds);
    assert!(
        r.detail.contains("Unable to init the socket connection"),
        "{}",
        r.detail
    );
}

#[test]
fn dcgm_failures_fail_the_gate_and_busy_dcgm_is_not_judged() {
    let th = in_force(&cfg(), H100);
    let hw = Finding::gpu(
        "dcgm",
        Action::Drain,
        2,
        None,
        "DCGM Memory GPU2 failed".into(),
        "x".into(),
    );
    let soft = Finding::node(
        "dcgm",
        Action::Warn,
        "DCGM Persistence failed".into(),
        "y".into(),
    );
    let r = judge_dcgm(&DcgmOutcome::Failed(vec![hw, soft.clone()]), &th, 2);
    assert_eq!(r.verdict, Verdict::Failed);
    assert!(r.detail.contains("DCGM Memory GPU2 failed"), "{}", r.detail);
    let r = judge_dcgm(&DcgmOutcome::Failed(vec![soft]), &th, 2);
    assert_eq!(r.verdict, Verdict::Passed);
    let r = judge_dcgm(&DcgmOutcome::Passed { tests: 12 }, &th, 3);
    assert_eq!(r.verdict, Verdict::Passed);
    assert_eq!(r.detail, "level 3: 12 results, none failed");
    let r = judge_dcgm(
        &DcgmOutcome::Unavailable {
            why: "GPUs busy (resource in use)".into(),
            timed_out: false,
        },
        &th,
        2,
    );
    assert_eq!((r.verdict, r.holds), (Verdict::NotJudged, true));
    assert_eq!(r.gate, GateName::Dcgm);
}

#[test]
fn acceptance_configuration_loads_and_refuses_mistakes() {
    let p = std::path::Path::new("/etc/slurm/gpu-health.toml");
    let c = config::parse(
        p,
        "[acceptance]\nenabled = true\ngates = [\"all-reduce\", \"rdma\"]\ntimeout_s = 900\n\
         [acceptance.models.\"NVIDIA H100 80GB HBM3\"]\nall_reduce_gbs = 420.0\n",
        None,
    )
    .unwrap();
    assert!(c.acceptance.enabled);
    assert_eq!(c.acceptance.gates, [GateName::AllReduce, GateName::Rdma]);
    assert_eq!(in_force(&c.acceptance, H100).all_reduce_gbs, Some(420.0));
    for (bad, why) in [
        (
            "[acceptance]\ntimeout_s = 5\n",
            "acceptance.timeout_s = 5 is outside 60..=21600",
        ),
        (
            "[acceptance]\ngates = [\"burn\"]\n",
            "unknown variant `burn`",
        ),
        (
            "[acceptance]\ngates = [\"rdma\", \"rdma\"]\n",
            "lists \"rdma\" twice",
        ),
        (
            "[acceptance]\nib_bw_timeout_s = 100000\n",
            "acceptance.ib_bw_timeout_s",
        ),
        (
            "[acceptance]\nrdma_min_fraction = 1.5\n",
            "acceptance.rdma_min_fraction",
        ),
        (
            "[acceptance.models.B200]\nh2d_gbs = 0.0\n",
            "(in [acceptance.models.\"B200\"])",
        ),
        (
            "[acceptance.models.B200]\nh2d = 3.0\n",
            "unknown field `h2d`",
        ),
        ("[acceptance]\ndcgm_level = 9\n", "acceptance.dcgm_level"),
    ] {
        let e = config::parse(p, bad, None).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

/// docs/acceptance.md shows the table as the code has it.
#[test]
fn the_documented_table_is_the_codes() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/acceptance.md");
    let doc = std::fs::read_to_string(&p).unwrap();
    let table = thresholds::markdown_table();
    assert!(
        doc.contains(&table),
        "docs/acceptance.md lacks the table; it should read:\n{table}"
    );
}
