use super::*;

fn recorded(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ci/fixtures/dcgmi")
        .join(name);
    std::fs::read_to_string(p).unwrap_or_default()
}

fn replay(mode: &str) -> DcgmOutcome {
    let rc = recorded(&format!("{mode}.rc")).trim().parse().unwrap_or(0);
    interpret(
        Some(rc),
        &recorded(&format!("{mode}.out")),
        &recorded(&format!("{mode}.err")),
    )
}

/// A copy of the stand-in dcgmi with its recordings, set to `mode`.
fn standin(mode: &str) -> (tempfile::TempDir, DcgmConfig) {
    let d = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/fixtures/dcgmi");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), d.path().join(e.file_name())).unwrap();
    }
    std::fs::write(d.path().join("mode"), mode).unwrap();
    let cfg = DcgmConfig {
        dcgmi: d.path().join("dcgmi"),
        timeout_ms: 1_500,
        ..DcgmConfig::default()
    };
    (d, cfg)
}

#[test]
fn passes_in_both_json_shapes() {
    assert_eq!(replay("pass"), DcgmOutcome::Passed { tests: 9 });
    assert_eq!(replay("pass-v4"), DcgmOutcome::Passed { tests: 2 });
    assert!(replay("pass").findings().is_empty());
}

#[test]
fn hardware_failure_drains_naming_the_gpu() {
    let DcgmOutcome::Failed(f) = replay("fail") else {
        panic!("{:?}", replay("fail"))
    };
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].action, Action::Drain);
    assert_eq!(f[0].gpu, Some(1));
    assert_eq!(f[0].summary, "DCGM Page Retirement/Row Remap GPU1 failed");
    assert!(
        f[0].message.contains("row remapping failed"),
        "{}",
        f[0].message
    );

    let DcgmOutcome::Failed(f) = replay("fail-v4") else {
        panic!()
    };
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].action, f[0].gpu), (Action::Drain, Some(3)));
}

#[test]
fn software_failure_only_warns() {
    let DcgmOutcome::Failed(f) = replay("fail-software") else {
        panic!()
    };
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].action, Action::Warn);
    assert_eq!(f[0].gpu, None, "deployment results cover several GPUs");
}

#[test]
fn busy_and_missing_host_engine_are_not_faults() {
    for (mode, word) in [
        ("busy", "resource in use"),
        ("no-host-engine", "host engine not reachable"),
        // Issue 24: a sentence, not Rust's `Some(139)`.
        ("garbage", "exited with status 139"),
    ] {
        let o = replay(mode);
        let DcgmOutcome::Unavailable { why, timed_out } = &o else {
            panic!("{mode}: {o:?}")
        };
        assert!(why.contains(word), "{mode}: {why}");
        assert!(!timed_out);
        let f = o.findings();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Info, "{mode}");
    }
}

#[test]
fn runs_the_standin_with_the_gpu_list() {
    let (d, cfg) = standin("fail");
    let o = run_diag(&cfg, &[], &[1, 3]);
    assert!(matches!(o, DcgmOutcome::Failed(_)), "{o:?}");
    let args = std::fs::read_to_string(d.path().join("last-args")).unwrap();
    assert_eq!(args.trim(), "diag -r 1 -j -i 1,3");
    std::fs::write(d.path().join("mode"), "pass").unwrap();
    assert_eq!(run_diag(&cfg, &[], &[]), DcgmOutcome::Passed { tests: 9 });
    let args = std::fs::read_to_string(d.path().join("last-args")).unwrap();
    assert_eq!(args.trim(), "diag -r 1 -j");
}

#[test]
fn hang_is_killed_at_the_deadline() {
    let (_d, cfg) = standin("hang");
    let t0 = Instant::now();
    let o = run_diag(&cfg, &[], &[0]);
    let took = t0.elapsed();
    assert!(
        matches!(
            o,
            DcgmOutcome::Unavailable {
                timed_out: true,
                ..
            }
        ),
        "{o:?}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(o.findings()[0].action, Action::Warn);
}

#[test]
fn missing_or_disabled_dcgmi_is_not_installed() {
    let cfg = DcgmConfig {
        dcgmi: PathBuf::from("/nonexistent/dcgmi"),
        ..DcgmConfig::default()
    };
    assert_eq!(run_diag(&cfg, &[], &[]), DcgmOutcome::NotInstalled);
    let (_d, mut cfg) = standin("pass");
    cfg.enabled = false;
    assert_eq!(run_diag(&cfg, &[], &[]), DcgmOutcome::NotInstalled);
    let by_name = DcgmConfig {
        dcgmi: PathBuf::from("surely-not-a-dcgmi-binary"),
        ..DcgmConfig::default()
    };
    assert_eq!(resolve(&by_name, &[]), None);
}
