//! `run_tier` with stand-in programs: small scripts that print recorded
//! outputs, sleep past their limit or fail, run without a shell by the
//! tier with its limits.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpu_health_core::acceptance::{
    run_tier, run_tier_within, GateName, Hca, TierInput, Verdict, Within,
};
use gpu_health_core::config::Config;
use gpu_health_core::finding::Action;
use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/acceptance")
        .join(name)
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn h100x8() -> NodeSnapshot {
    NodeSnapshot {
        gpus: (0..8)
            .map(|i| GpuSnapshot {
                index: i,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn ndr(names: &[&str]) -> Vec<Hca> {
    names
        .iter()
        .map(|n| Hca {
            name: n.to_string(),
            rate_gbps: Some(400.0),
        })
        .collect()
}

/// Stand-ins printing the good recorded outputs; each run is logged
/// (with its arguments) in `calls`.
fn good_tools(dir: &Path) -> Config {
    let log = dir.join("calls");
    let mut c = Config::default();
    let a = &mut c.acceptance;
    a.enabled = true;
    a.gates = vec![GateName::AllReduce, GateName::HostToDevice, GateName::Rdma];
    a.all_reduce_perf = script(
        dir,
        "all_reduce_perf",
        &format!(
            "echo all_reduce_perf \"$@\" >> {log:?}\ncat {:?}",
            fixture("nccl/h100x8-good.txt")
        ),
    );
    a.nvbandwidth = script(
        dir,
        "nvbandwidth",
        &format!(
            "echo nvbandwidth \"$@\" >> {log:?}\ncat {:?}",
            fixture("nvbandwidth/h2d-h100x8-good.txt")
        ),
    );
    // The server (no host) waits for its client; the client prints.
    a.ib_bw = script(
        dir,
        "ib_write_bw",
        &format!(
            "echo ib_write_bw \"$@\" >> {log:?}\n\
             for last; do :; done\n\
             if [ \"$last\" = localhost ]; then cat {:?}; else echo $$ >> {:?}; exec sleep 60; fi",
            fixture("perftest/write_bw-ndr-gbits.txt"),
            dir.join("servers"),
        ),
    );
    c
}

fn calls(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("calls")).unwrap_or_default()
}

#[test]
fn every_gate_passes_on_a_good_node() {
    let d = tempfile::tempdir().unwrap();
    let c = good_tools(d.path());
    let snap = h100x8();
    let hcas = ndr(&["mlx5_0", "mlx5_1"]);
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &hcas,
        search_path: &[],
        job_running: None,
        had: &Default::default(),
    });
    assert_eq!(out.exit_code(), 0, "{out:#?}");
    assert!(out.may_return());
    assert!(out.findings.is_empty(), "{:?}", out.findings);
    // 1 all-reduce + 8 GPUs + 2 HCAs.
    assert_eq!(out.results.len(), 11);
    let log = calls(d.path());
    assert!(
        log.contains("all_reduce_perf -b 1G -e 8G -f 2 -g 8\n"),
        "{log}"
    );
    assert!(
        log.contains("nvbandwidth -t host_to_device_memcpy_ce\n"),
        "{log}"
    );
    assert!(
        log.contains("ib_write_bw -d mlx5_1 -F --report_gbits -D 3 localhost\n"),
        "{log}"
    );
    assert!(
        log.contains("ib_write_bw -d mlx5_1 -F --report_gbits -D 3\n"),
        "{log}"
    );
    // Every loopback server was killed.
    let servers = std::fs::read_to_string(d.path().join("servers")).unwrap();
    assert_eq!(servers.lines().count(), 2);
    for pid in servers.lines() {
        let pid: i32 = pid.trim().parse().unwrap();
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "loopback server {pid} still runs");
    }
}

#[test]
fn nothing_runs_while_a_job_runs() {
    let d = tempfile::tempdir().unwrap();
    let c = good_tools(d.path());
    let snap = h100x8();
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &ndr(&["mlx5_0"]),
        search_path: &[],
        job_running: Some("job 4242".into()),
        had: &Default::default(),
    });
    assert_eq!(out.exit_code(), 2);
    assert!(!out.may_return());
    assert!(out.refused.as_deref().unwrap().contains("job 4242"));
    assert!(out.results.is_empty());
    assert_eq!(calls(d.path()), "", "a tool ran under a job");
}

#[test]
fn a_slow_gpu_and_a_slow_hca_fail_with_their_figures() {
    let d = tempfile::tempdir().unwrap();
    let mut c = good_tools(d.path());
    c.acceptance.nvbandwidth = script(
        d.path(),
        "nvbandwidth-slow",
        &format!("cat {:?}", fixture("nvbandwidth/h2d-h100x8-gpu3-slow.txt")),
    );
    c.acceptance.ib_bw = script(
        d.path(),
        "ib_write_bw-slow",
        &format!(
            "for last; do :; done\n[ \"$last\" = localhost ] && cat {:?}\nexit 0",
            fixture("perftest/write_bw-ndr-slow-gbits.txt")
        ),
    );
    let snap = h100x8();
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &ndr(&["mlx5_2"]),
        search_path: &[],
        job_running: None,
        had: &Default::default(),
    });
    assert_eq!(out.exit_code(), 1);
    assert!(!out.may_return());
    let summaries: Vec<&str> = out.findings.iter().map(|f| f.summary.as_str()).collect();
    assert_eq!(
        summaries,
        [
            "H2D GPU3 26.0 GB/s < 52 GB/s (H100 SXM)",
            "RDMA mlx5_2 198.1 Gb/s < 360 Gb/s (400 Gb/s link)"
        ]
    );
    assert!(out.findings.iter().all(|f| f.action == Action::Drain));
}

#[test]
fn a_hung_tool_is_killed_at_its_limit_and_not_judged() {
    let d = tempfile::tempdir().unwrap();
    let mut c = good_tools(d.path());
    c.acceptance.all_reduce_perf = script(d.path(), "all_reduce_hangs", "exec sleep 60");
    c.acceptance.all_reduce_timeout_s = 1;
    c.acceptance.nvbandwidth = script(
        d.path(),
        "nvbandwidth-fails",
        "echo 'CUDA_ERROR_NO_DEVICE' >&2\nexit 1",
    );
    c.acceptance.gates = vec![GateName::AllReduce, GateName::HostToDevice];
    let snap = h100x8();
    let t0 = Instant::now();
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &[],
        search_path: &[],
        job_running: None,
        had: &Default::default(),
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(out.exit_code(), 2);
    assert!(!out.may_return());
    assert_eq!(out.results[0].verdict, Verdict::NotJudged);
    assert!(
        out.results[0].detail.contains("no result within 1 s"),
        "{:?}",
        out.results[0]
    );
    assert!(
        out.results[1]
            .detail
            .contains("status 1: CUDA_ERROR_NO_DEVICE"),
        "{:?}",
        out.results[1]
    );
    assert_eq!(
        out.findings[0].summary,
        "all-reduce not judged: no result within 1 s (killed)"
    );
}

#[test]
fn the_whole_tier_is_bounded() {
    let d = tempfile::tempdir().unwrap();
    let mut c = good_tools(d.path());
    c.acceptance.all_reduce_perf = script(d.path(), "all_reduce_hangs", "exec sleep 60");
    // Below the configurable floor, set directly: the bound is the
    // tier's, whatever each gate's own limit.
    c.acceptance.timeout_s = 1;
    let snap = h100x8();
    let t0 = Instant::now();
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &ndr(&["mlx5_0"]),
        search_path: &[],
        job_running: None,
        had: &Default::default(),
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let later: Vec<_> = out.results.iter().skip(1).collect();
    assert!(!later.is_empty());
    for r in later {
        assert_eq!(r.verdict, Verdict::NotJudged);
        assert!(r.detail.contains("were spent"), "{r:?}");
    }
    assert_eq!(
        calls(d.path()),
        "",
        "no gate ran after the tier's time was spent"
    );
}

#[test]
fn missing_tools_and_no_gpus_are_not_judged() {
    let d = tempfile::tempdir().unwrap();
    let mut c = good_tools(d.path());
    c.acceptance.gates = GateName::ALL.to_vec();
    c.dcgm.dcgmi = d.path().join("no-dcgmi");
    c.acceptance.all_reduce_perf = d.path().join("nowhere/all_reduce_perf");
    c.acceptance.nvbandwidth = PathBuf::from("nvbandwidth-not-installed-here");
    let snap = h100x8();
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &[],
        search_path: &[d.path().to_path_buf()],
        job_running: None,
        had: &Default::default(),
    });
    let details: Vec<(GateName, Verdict, bool, &str)> = out
        .results
        .iter()
        .map(|r| (r.gate, r.verdict, r.holds, r.detail.as_str()))
        .collect();
    assert_eq!(details[0].0, GateName::Dcgm);
    assert!(details[0].3.contains("not found"), "{details:?}");
    assert!(
        details[1].3.contains("all_reduce_perf not found"),
        "{details:?}"
    );
    assert!(
        details[2]
            .3
            .contains("nvbandwidth-not-installed-here not found"),
        "{details:?}"
    );
    // No HCA: nothing to judge, and nothing holds the node for it.
    assert_eq!(details[3].0, GateName::Rdma);
    assert!(!details[3].2, "{details:?}");
    assert!(details.iter().all(|d| d.1 == Verdict::NotJudged));
    assert_eq!(out.exit_code(), 2);

    // NVML gave nothing: the GPU gates cannot run.
    let empty = NodeSnapshot::default();
    let c = good_tools(d.path());
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &empty,
        hcas: &[],
        search_path: &[],
        job_running: None,
        had: &Default::default(),
    });
    assert!(
        out.results[0].detail.contains("NVML gave no GPUs"),
        "{:?}",
        out.results[0]
    );
    assert!(!out.may_return());
}

#[test]
fn dcgm_runs_at_the_configured_level() {
    let d = tempfile::tempdir().unwrap();
    let mut c = good_tools(d.path());
    let log = d.path().join("calls");
    c.dcgm.dcgmi = script(
        d.path(),
        "dcgmi",
        &format!(
            "echo dcgmi \"$@\" >> {log:?}\n\
             echo '{{\"DCGM GPU Diagnostic\": {{\"test_categories\": [{{\"category\": \"Hardware\", \
             \"tests\": [{{\"name\": \"Memory\", \"results\": [{{\"gpu_id\": \"2\", \"status\": \"Fail\", \
             \"warnings\": [\"DBE on GPU 2\"]}}]}}]}}]}}}}'"
        ),
    );
    c.acceptance.gates = vec![GateName::Dcgm];
    c.acceptance.dcgm_level = 3;
    let snap = h100x8();
    let out = run_tier(&TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &[],
        search_path: &[],
        job_running: None,
        had: &Default::default(),
    });
    assert_eq!(calls(d.path()), "dcgmi diag -r 3 -j\n");
    assert_eq!(out.results[0].verdict, Verdict::Failed);
    assert_eq!(out.exit_code(), 1);
    assert_eq!(out.findings.len(), 1, "{:?}", out.findings);
    assert_eq!(out.findings[0].check, "dcgm");
    assert_eq!(out.findings[0].gpu, Some(2));
    assert_eq!(out.findings[0].action, Action::Drain);
}

/// Issue 36: DCGM 4's answers as its source prints them; a diag that
/// skipped its tests or left GPUs of the node out holds the node.
#[test]
fn dcgm_4_passes_only_when_every_gpu_of_the_node_is_proven() {
    let snap = h100x8();
    for (mode, verdict) in [
        ("pass-v4", Verdict::Passed),
        ("skip-v4", Verdict::NotJudged),
        ("fail-software-v4", Verdict::NotJudged),
    ] {
        let d = tempfile::tempdir().unwrap();
        let mut c = good_tools(d.path());
        let recorded = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../ci/fixtures/dcgmi")
            .join(format!("{mode}.out"));
        c.dcgm.dcgmi = script(d.path(), "dcgmi", &format!("cat {recorded:?}"));
        c.acceptance.gates = vec![GateName::Dcgm];
        let out = run_tier(&TierInput {
            config: &c,
            snapshot: &snap,
            hcas: &[],
            search_path: &[],
            job_running: None,
            had: &Default::default(),
        });
        let r = &out.results[0];
        assert_eq!(r.verdict, verdict, "{mode}: {r:?}");
        assert_eq!(
            out.may_return(),
            verdict == Verdict::Passed,
            "{mode}: {r:?}"
        );
        if verdict == Verdict::NotJudged {
            assert!(r.detail.contains("DCGM 4.6.0"), "{mode}: {}", r.detail);
        }
    }
}

#[test]
fn the_hcas_are_the_active_ib_and_roce_ones_unless_configured() {
    use gpu_health_core::fabric::{LinkLayer, RdmaPort};
    let port = |device: &str, layer: LinkLayer, active: bool, rate: f64| RdmaPort {
        device: device.into(),
        port: 1,
        link_layer: layer,
        state: Some(if active { "4: ACTIVE" } else { "1: DOWN" }.into()),
        phys_state: Some(if active { "5: LinkUp" } else { "3: Disabled" }.into()),
        rate: None,
        rate_gbps: Some(rate),
        gids: Vec::new(),
    };
    let fabric = gpu_health_core::fabric::Fabric {
        ports: vec![
            port("mlx5_1", LinkLayer::InfiniBand, true, 400.0),
            port("mlx5_0", LinkLayer::Ethernet, true, 200.0),
            port("mlx5_2", LinkLayer::InfiniBand, false, 400.0),
            port("efa_0", LinkLayer::Other("Unknown".into()), true, 100.0),
        ],
        ..Default::default()
    };
    let mut cfg = Config::default().acceptance;
    let names = |h: Vec<Hca>| {
        h.into_iter()
            .map(|h| (h.name, h.rate_gbps))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(gpu_health_core::acceptance::hcas_of(&cfg, &fabric)),
        [
            ("mlx5_0".to_string(), Some(200.0)),
            ("mlx5_1".to_string(), Some(400.0))
        ]
    );
    cfg.hcas = vec!["mlx5_2".into(), "mlx5_9".into()];
    assert_eq!(
        names(gpu_health_core::acceptance::hcas_of(&cfg, &fabric)),
        [
            ("mlx5_2".to_string(), Some(400.0)),
            ("mlx5_9".to_string(), None)
        ]
    );
}

#[test]
fn the_tier_is_wanted_after_the_boots_the_site_chose() {
    use gpu_health_core::acceptance::{wanted, Boot};
    let mut cfg = Config::default().acceptance;
    assert!(!wanted(&cfg, Boot::RequestedReboot), "off by default");
    cfg.enabled = true;
    assert!(wanted(&cfg, Boot::RequestedReboot));
    assert!(!wanted(&cfg, Boot::Other));
    cfg.after_any_boot = true;
    assert!(wanted(&cfg, Boot::Other));
    cfg.after_reboot = false;
    assert!(
        wanted(&cfg, Boot::RequestedReboot),
        "any boot includes a requested one"
    );
}

/// After a boot the tier runs in health checks: what does not fit one
/// waits for the next, and what passed is not run again.
#[test]
fn steps_that_do_not_fit_wait_for_the_next_health_check() {
    let d = tempfile::tempdir().unwrap();
    let mut c = good_tools(d.path());
    // A budget of 32 s: the all-reduce (30 s) fits, the nvbandwidth gate
    // (35 s) and each loopback (33 s) do not: they wait, never cut short.
    c.acceptance.nvbandwidth_timeout_s = 35;
    c.acceptance.ib_bw_timeout_s = 33;
    let snap = h100x8();
    let hcas = ndr(&["mlx5_0", "mlx5_1"]);
    let input = TierInput {
        config: &c,
        snapshot: &snap,
        hcas: &hcas,
        search_path: &[],
        job_running: None,
        had: &Default::default(),
    };
    let first = run_tier_within(
        &input,
        &Within {
            done: &[],
            budget: Duration::from_secs(32),
        },
    );
    assert_eq!(first.steps_passed, ["all-reduce"], "{first:#?}");
    assert_eq!(
        first.deferred,
        ["host-to-device", "rdma mlx5_0", "rdma mlx5_1"]
    );
    assert!(!first.may_return() && first.findings.is_empty());
    // The next health check: the rest fits in 45 s; all-reduce not again.
    let second = run_tier_within(
        &input,
        &Within {
            done: &first.steps_passed,
            budget: Duration::from_secs(45),
        },
    );
    assert_eq!(
        second.steps_passed,
        ["host-to-device", "rdma mlx5_0", "rdma mlx5_1"]
    );
    assert!(
        second.deferred.is_empty() && second.may_return(),
        "{second:#?}"
    );
    let log = calls(d.path());
    assert_eq!(log.matches("all_reduce_perf").count(), 1, "{log}");
    assert_eq!(log.matches("nvbandwidth").count(), 1, "{log}");
}

#[test]
fn a_failed_step_is_not_passed_and_the_defaults_fit_a_health_check() {
    let d = tempfile::tempdir().unwrap();
    let mut c = good_tools(d.path());
    c.acceptance.all_reduce_perf = script(
        d.path(),
        "slow_all_reduce",
        &format!("cat {:?}", fixture("nccl/h100x8-slow.txt")),
    );
    let snap = h100x8();
    let out = run_tier_within(
        &TierInput {
            config: &c,
            snapshot: &snap,
            hcas: &[],
            search_path: &[],
            job_running: None,
            had: &Default::default(),
        },
        &Within {
            done: &[],
            budget: Duration::from_secs(45),
        },
    );
    assert!(!out.steps_passed.contains(&"all-reduce".to_string()));
    assert!(out.steps_passed.contains(&"host-to-device".to_string()));
    assert!(!out.may_return());
    // The shipped defaults fit a health check as they are; longer limits
    // and DCGM levels (the old defaults) are a valid configuration, cut
    // to fit after a boot with a note each, and run as set by hand.
    let mut on = Config::default().acceptance;
    on.enabled = true;
    assert_eq!(on.validate(), Ok(()));
    let (fitted, notes) = on.fitted_to_a_health_check();
    assert_eq!(fitted, on, "the defaults fit");
    assert!(notes.is_empty(), "{notes:?}");
    on.dcgm_timeout_s = 600;
    on.dcgm_level = 2;
    on.ib_bw_timeout_s = 60;
    assert_eq!(on.validate(), Ok(()), "never a configuration error");
    let (fitted, notes) = on.fitted_to_a_health_check();
    assert_eq!(
        (
            fitted.dcgm_timeout_s,
            fitted.dcgm_level,
            fitted.ib_bw_timeout_s
        ),
        (35, 1, 35)
    );
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(notes[0].starts_with("acceptance.dcgm_timeout_s = 600 is cut to 35 s"));
    on.gates.retain(|g| *g != GateName::Dcgm);
    let (fitted, notes) = on.fitted_to_a_health_check();
    assert_eq!(fitted.dcgm_level, 2, "no dcgm gate: left as it is");
    assert_eq!(notes.len(), 1, "{notes:?}");
}
