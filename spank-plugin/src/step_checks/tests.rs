use super::*;
use gpu_health_core::finding::Finding;
use gpu_health_core::snapshot::NodeSnapshot;

fn verdict(findings: Vec<Finding>) -> VerdictRead {
    VerdictRead::Found(JobVerdict {
        job_id: JobId::from(42),
        node: "n1".into(),
        mode: Mode::Strict,
        written_at_ms: 0,
        job_gpus: vec![2, 3],
        findings,
        config_error: None,
    })
}

fn pcie_warn(gpu: u32) -> Finding {
    Finding::gpu(
        "pcie-link",
        Action::Warn,
        gpu,
        Some("0000:3b:00.0"),
        format!("PCIe GPU{gpu}"),
        format!("GPU{gpu} PCIe link at Gen3 x8, expected Gen5 x16"),
    )
}

#[test]
fn strict_refuses_warning_on_the_jobs_gpu_naming_node_gpu_finding() {
    let r = health_report(
        Mode::Strict,
        "n1",
        JobId::from(42),
        &verdict(vec![pcie_warn(3)]),
    );
    assert_eq!(r.refusals.len(), 1);
    let line = &r.lines()[0];
    assert!(line.contains("node n1: GPU3 PCIe link"), "{line}");
    assert!(
        line.contains("Gen3 x8") && line.contains("[pcie-link]"),
        "{line}"
    );
    assert!(r.lines()[1].contains("--gpu-health=warn"));
}

#[test]
fn warn_prints_the_same_as_a_warning() {
    let r = health_report(
        Mode::Warn,
        "n1",
        JobId::from(42),
        &verdict(vec![pcie_warn(2)]),
    );
    assert!(r.refusals.is_empty());
    assert_eq!(r.warnings.len(), 1);
    assert!(r.lines()[0].starts_with("gpu-health: warning: node n1: GPU2"));
}

#[test]
fn gpu_is_named_when_the_finding_text_does_not() {
    let mut f = pcie_warn(3);
    f.message = "PCIe link degraded; also see GPU30".into();
    let r = health_report(Mode::Strict, "n1", JobId::from(42), &verdict(vec![f]));
    assert!(
        r.refusals[0].starts_with("node n1 GPU3 (0000:3b:00.0): PCIe"),
        "{r:?}"
    );
}

#[test]
fn other_gpus_and_info_findings_are_not_the_jobs_business() {
    let info = Finding::node(
        "persistence",
        Action::Info,
        "p".into(),
        "persistence off".into(),
    );
    let r = health_report(
        Mode::Strict,
        "n1",
        JobId::from(42),
        &verdict(vec![pcie_warn(5), info]),
    );
    assert_eq!(r, StepReport::default());
}

#[test]
fn node_wide_warning_counts() {
    let f = Finding::node(
        "gpu-count",
        Action::Warn,
        "gpus".into(),
        "7 of 8 GPUs".into(),
    );
    let r = health_report(Mode::Strict, "n1", JobId::from(42), &verdict(vec![f]));
    assert!(r.refusals[0].contains("node n1: 7 of 8 GPUs"), "{:?}", r);
}

#[test]
fn missing_verdict_refuses_only_strict() {
    let r = health_report(Mode::Strict, "n1", JobId::from(42), &VerdictRead::Missing);
    assert!(
        r.refusals[0].contains("no gpu-health verdict for job 42"),
        "{r:?}"
    );
    assert_eq!(
        health_report(Mode::Warn, "n1", JobId::from(42), &VerdictRead::Missing),
        StepReport::default()
    );
    assert_eq!(
        health_report(
            Mode::Off,
            "n1",
            JobId::from(42),
            &verdict(vec![pcie_warn(3)])
        ),
        StepReport::default()
    );
}

#[test]
fn verdict_files_are_read_from_the_state_dir() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("state");
    let job = JobId::from(7);
    assert!(matches!(
        read_verdict(&StateDir::open_existing(&root), job),
        VerdictRead::Unreadable(_)
    ));
    let state = StateDir::open(&root);
    assert_eq!(read_verdict(&state, job), VerdictRead::Missing);
    std::fs::create_dir_all(root.join("jobs")).unwrap();
    std::fs::write(root.join("jobs/7.json"), b"{not json").unwrap();
    assert!(matches!(
        read_verdict(&state, job),
        VerdictRead::Unreadable(_)
    ));
    let VerdictRead::Found(v) = verdict(vec![pcie_warn(3)]) else {
        unreachable!()
    };
    state.save(job, &v).unwrap();
    assert_eq!(read_verdict(&state, job), VerdictRead::Found(v));

    assert_eq!(read_topology(&state), None);
    let snap = NodeSnapshot {
        topology: Some(vec![
            vec![GpuLink::Itself, GpuLink::Pcie],
            vec![GpuLink::Pcie, GpuLink::Itself],
        ]),
        ..NodeSnapshot::default()
    };
    state.save((), &NodeTopology::of(&snap)).unwrap();
    assert_eq!(read_topology(&state), snap.topology);
}

#[test]
fn planted_verdicts_never_hang_or_grow() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("state");
    let state = StateDir::open(&root);
    let _ = &state;
    std::fs::create_dir_all(root.join("jobs")).unwrap();
    std::fs::write(root.join("jobs/1.json"), b"0").unwrap();
    let fifo = root.join("jobs/2.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/zero", root.join("jobs/3.json")).unwrap();
    let t0 = std::time::Instant::now();
    for job in [2, 3] {
        assert!(matches!(
            read_verdict(&state, JobId::from(job)),
            VerdictRead::Unreadable(_)
        ));
    }
    assert!(t0.elapsed() < std::time::Duration::from_secs(1));
    // A state directory others can write is not read at all.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let VerdictRead::Unreadable(why) =
        read_verdict(&StateDir::open_existing(&root), JobId::from(1))
    else {
        panic!("an unsafe state directory must not be read");
    };
    assert!(why.contains("writable"), "{why}");
}

#[test]
fn tp_violations_follow_the_mode_and_are_shortened() {
    let v: Vec<TpViolation> = (0..6)
        .map(|i| TpViolation::NotNvlink {
            group: 0,
            gpu_a: 0,
            gpu_b: i + 1,
            link: Some(GpuLink::Pcie),
        })
        .collect();
    let r = tp_report(Mode::Strict, "n2", 8, &v);
    assert_eq!(r.refusals.len(), 1);
    assert!(
        r.refusals[0].contains("node n2: --tp-size=8") && r.refusals[0].contains("and 2 more"),
        "{r:?}"
    );
    assert_eq!(tp_report(Mode::Warn, "n2", 8, &v).warnings.len(), 1);
    assert_eq!(tp_report(Mode::Off, "n2", 8, &v), StepReport::default());
    assert_eq!(tp_report(Mode::Strict, "n2", 8, &[]), StepReport::default());
}

#[test]
fn job_gpus_prefer_the_verdict() {
    let env = |k: &str| (k == "SLURM_JOB_GPUS").then(|| "4-5".to_string());
    assert_eq!(job_gpus(&verdict(vec![]), env), vec![2, 3]);
    assert_eq!(job_gpus(&VerdictRead::Missing, env), vec![4, 5]);
    assert_eq!(job_gpus(&VerdictRead::Missing, |_| None), Vec::<u32>::new());
}

#[test]
fn step_end_reports_only_the_jobs_own_gpus() {
    // The verdict says the job owns GPUs 2 and 3; the user set 0-7.
    let got = step_end_gpus(Some("0-7"), &verdict(vec![])).unwrap();
    assert_eq!(got.report, vec![2, 3]);
    assert_eq!(got.not_the_jobs, vec![0, 1, 4, 5, 6, 7]);
    // A GPU outside the allocation alone: nothing to report.
    let got = step_end_gpus(Some("6"), &verdict(vec![])).unwrap();
    assert!(got.report.is_empty());
    assert_eq!(got.not_the_jobs, vec![6]);
    // No step list (batch step) or garbage: the job's own.
    for claimed in [None, Some(""), Some("x")] {
        assert_eq!(
            step_end_gpus(claimed, &verdict(vec![])).unwrap().report,
            vec![2, 3]
        );
    }
    assert_eq!(
        step_end_gpus(Some("3"), &verdict(vec![])).unwrap().report,
        vec![3]
    );
}

#[test]
fn step_end_without_the_prologs_record_reports_nothing() {
    let e = step_end_gpus(Some("0-7"), &VerdictRead::Missing).unwrap_err();
    assert!(e.contains("no verdict"), "{e}");
    let e = step_end_gpus(Some("0"), &VerdictRead::Unreadable("corrupt".into())).unwrap_err();
    assert!(e.contains("unreadable: corrupt"), "{e}");
    let mut v = verdict(vec![]);
    if let VerdictRead::Found(j) = &mut v {
        j.job_gpus.clear();
    }
    assert!(step_end_gpus(Some("0"), &v).is_err());
}

#[test]
fn only_steps_of_a_second_or_more_get_the_near_oom_probe() {
    assert!(!long_enough_for_notice(0));
    assert!(!long_enough_for_notice(999));
    assert!(long_enough_for_notice(1000));
    assert!(long_enough_for_notice(3_000));
}
