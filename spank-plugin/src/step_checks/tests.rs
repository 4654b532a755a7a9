use super::*;
use gpu_health_core::finding::Finding;

fn verdict(findings: Vec<Finding>) -> VerdictRead {
    VerdictRead::Found(JobVerdict {
        job_id: "42".into(),
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
    let r = health_report(Mode::Strict, "n1", 42, &verdict(vec![pcie_warn(3)]));
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
    let r = health_report(Mode::Warn, "n1", 42, &verdict(vec![pcie_warn(2)]));
    assert!(r.refusals.is_empty());
    assert_eq!(r.warnings.len(), 1);
    assert!(r.lines()[0].starts_with("gpu-health: warning: node n1: GPU2"));
}

#[test]
fn gpu_is_named_when_the_finding_text_does_not() {
    let mut f = pcie_warn(3);
    f.message = "PCIe link degraded; also see GPU30".into();
    let r = health_report(Mode::Strict, "n1", 42, &verdict(vec![f]));
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
    let r = health_report(Mode::Strict, "n1", 42, &verdict(vec![pcie_warn(5), info]));
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
    let r = health_report(Mode::Strict, "n1", 42, &verdict(vec![f]));
    assert!(r.refusals[0].contains("node n1: 7 of 8 GPUs"), "{:?}", r);
}

#[test]
fn missing_verdict_refuses_only_strict() {
    let r = health_report(Mode::Strict, "n1", 42, &VerdictRead::Missing);
    assert!(
        r.refusals[0].contains("no gpu-health verdict for job 42"),
        "{r:?}"
    );
    assert_eq!(
        health_report(Mode::Warn, "n1", 42, &VerdictRead::Missing),
        StepReport::default()
    );
    assert_eq!(
        health_report(Mode::Off, "n1", 42, &verdict(vec![pcie_warn(3)])),
        StepReport::default()
    );
}

#[test]
fn verdict_files_are_read_from_the_state_dir() {
    let t = tempfile::tempdir().unwrap();
    assert_eq!(read_verdict(t.path(), 7), VerdictRead::Missing);
    std::fs::create_dir_all(t.path().join("jobs")).unwrap();
    std::fs::write(t.path().join("jobs/7.json"), "{not json").unwrap();
    assert!(matches!(
        read_verdict(t.path(), 7),
        VerdictRead::Unreadable(_)
    ));
    let VerdictRead::Found(v) = verdict(vec![pcie_warn(3)]) else {
        unreachable!()
    };
    std::fs::write(
        t.path().join("jobs/7.json"),
        serde_json::to_vec(&v).unwrap(),
    )
    .unwrap();
    assert_eq!(read_verdict(t.path(), 7), VerdictRead::Found(v));

    assert_eq!(read_topology(t.path()), None);
    let snap = NodeSnapshot {
        topology: Some(vec![
            vec![GpuLink::Itself, GpuLink::Pcie],
            vec![GpuLink::Pcie, GpuLink::Itself],
        ]),
        ..NodeSnapshot::default()
    };
    std::fs::write(
        t.path().join("node-snapshot.json"),
        serde_json::to_vec(&snap).unwrap(),
    )
    .unwrap();
    assert_eq!(read_topology(t.path()), snap.topology);
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
