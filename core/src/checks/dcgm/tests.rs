use super::*;

fn recorded(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ci/fixtures/dcgmi")
        .join(name);
    std::fs::read_to_string(p).unwrap_or_default()
}

fn replay(mode: &str) -> DcgmOutcome {
    replay_for(mode, &[])
}

/// `mode`'s recorded answer judged for a node with `gpus`.
fn replay_for(mode: &str, gpus: &[u32]) -> DcgmOutcome {
    let rc = recorded(&format!("{mode}.rc")).trim().parse().unwrap_or(0);
    interpret(
        Some(rc),
        &recorded(&format!("{mode}.out")),
        &recorded(&format!("{mode}.err")),
        gpus,
    )
}

fn why(o: &DcgmOutcome) -> &str {
    match o {
        DcgmOutcome::Unavailable { why, .. } => why,
        other => panic!("not unavailable: {other:?}"),
    }
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
fn passes_as_dcgm_3_and_4_print_it() {
    assert_eq!(
        replay_for("pass", &[0, 1]),
        DcgmOutcome::Passed { tests: 9 }
    );
    assert!(replay("pass").findings().is_empty());
    // Issue 36: DCGM 4's own shape was "not judged".
    let eight: Vec<u32> = (0..8).collect();
    assert_eq!(
        replay_for("pass-v4", &eight),
        DcgmOutcome::Passed { tests: 16 }
    );
    assert_eq!(replay("pass-v4"), DcgmOutcome::Passed { tests: 16 });
}

#[test]
fn hardware_failure_drains_naming_the_gpu_and_the_version() {
    let DcgmOutcome::Failed(f) = replay_for("fail", &[0, 1]) else {
        panic!("{:?}", replay("fail"))
    };
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].action, Action::Drain);
    assert_eq!(f[0].gpu, Some(1));
    assert_eq!(f[0].summary, "DCGM Page Retirement/Row Remap GPU1 failed");
    for part in ["DCGM 3.3.9: ", "row remapping failed", "DCGM error 80"] {
        assert!(f[0].message.contains(part), "{part}: {}", f[0].message);
    }

    let DcgmOutcome::Failed(f) = replay_for("fail-v4", &[0, 1, 2, 3]) else {
        panic!("{:?}", replay("fail-v4"))
    };
    assert_eq!(f.len(), 1, "the test summary repeats GPU3's failure: {f:?}");
    assert_eq!((f[0].action, f[0].gpu), (Action::Drain, Some(3)));
    assert_eq!(f[0].summary, "DCGM memory GPU3 failed");
    for part in [
        "DCGM 4.6.0: ",
        "faulty memory",
        "DCGM error 52",
        "hardware memory",
        "severity isolate",
    ] {
        assert!(f[0].message.contains(part), "{part}: {}", f[0].message);
    }
    // A fault is told even when the diag did not cover every GPU.
    assert!(matches!(
        replay_for("fail-v4", &[0, 1, 2, 3, 4]),
        DcgmOutcome::Failed(_)
    ));
}

#[test]
fn deployment_failure_only_warns() {
    for (mode, version) in [("fail-software", "3.3.9"), ("fail-software-v4", "4.6.0")] {
        let o = replay_for(mode, &[0, 1]);
        let DcgmOutcome::Failed(f) = &o else {
            panic!("{mode}: {o:?}")
        };
        assert_eq!(f.len(), 1, "{mode}: {f:?}");
        assert_eq!((f[0].action, f[0].gpu), (Action::Warn, Some(0)), "{mode}");
        assert!(f[0].message.contains(version), "{}", f[0].message);
        assert!(f[0].message.contains("severity config"), "{}", f[0].message);
    }
}

#[test]
fn all_skipped_is_not_a_pass() {
    for gpus in [&[0, 1][..], &[]] {
        let o = replay_for("skip-v4", gpus);
        let w = why(&o);
        assert!(w.starts_with("DCGM 4.6.0: "), "{w}");
        assert!(w.contains("skipped"), "{w}");
        assert_eq!(o.findings()[0].action, Action::Info);
    }
}

#[test]
fn fewer_gpus_than_the_node_has_is_not_a_pass() {
    let nine: Vec<u32> = (0..9).collect();
    let o = replay_for("pass-v4", &nine);
    assert!(why(&o).contains("GPU8 has no result"), "{o:?}");
    let o = replay_for("fail-software-v4", &[0, 1, 2]);
    let w = why(&o);
    assert!(
        w.contains("GPU2 has no result") && w.contains("warnings: DCGM software GPU0 failed"),
        "{w}"
    );
    // DCGM 3.x deployment checks run on the whole group; a per-GPU test
    // skipped on one GPU leaves it unproven.
    let doc = r#"{"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
            {"gpu_id": "0", "status": "Pass"}, {"gpu_id": "1", "status": "Skip"}]}]}]},
        "version": "3.3.9"}"#;
    let o = interpret(Some(0), doc, "", &[0, 1]);
    assert!(why(&o).contains("GPU1 GPU Memory skipped"), "{o:?}");
}

#[test]
fn runtime_error_and_unknown_words_are_not_judged() {
    let o = replay("runtime-error-v4");
    assert_eq!(
        why(&o),
        "DCGM 4.6.0: Error: Diagnostic could not be run while DCGM is paused."
    );
    let renamed = recorded("pass-v4.out").replace("\"Pass\"", "\"Passed\"");
    let o = interpret(Some(0), &renamed, "", &[]);
    assert!(why(&o).contains("status unknown"), "{o:?}");
    let o = interpret(Some(0), r#"{"tests": []}"#, "", &[]);
    assert!(why(&o).contains("not a diag report"), "{o:?}");
}

#[test]
fn text_before_and_after_the_document_is_skipped() {
    let doc = recorded("pass-v4.out");
    for (before, after) in [
        ("Successfully ran diagnostic for group.\n", ""),
        ("note {not json} here\n", "\ndone {x}\n"),
    ] {
        let o = interpret(Some(0), &format!("{before}{doc}{after}"), "", &[]);
        assert_eq!(o, DcgmOutcome::Passed { tests: 16 }, "{before:?}");
    } // A large garbled answer (dcgmi keeps up to 4 MiB) is one pass, not
      // one search per brace.
    let junk = format!("{}\n", "x{".repeat(1 << 20)).repeat(2);
    let t0 = Instant::now();
    let o = interpret(Some(1), &junk, "", &[]);
    assert!(matches!(o, DcgmOutcome::Unavailable { .. }));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

#[test]
fn other_entities_and_summary_only_failures_are_told() {
    let doc = r#"{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "cpu_eud", "results": [{"entity_group": "CPU", "entity_group_id": 7,
           "entity_id": 0, "status": "Fail"}], "test_summary": {"status": "Fail"}},
        {"name": "pcie", "results": [{"entity_group": "GPU", "entity_group_id": 1,
           "entity_id": 0, "status": "Pass"}], "test_summary": {"status": "Fail",
           "warnings": [{"warning": "NVLink down", "error_id": 1, "error_category": 11,
           "error_severity": 2}]}}]}]}, "metadata": {"version": "4.6.0"}}"#;
    let DcgmOutcome::Failed(f) = interpret(Some(226), doc, "", &[0]) else {
        panic!()
    };
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(
        f[0].message.contains("on CPU 0") && f[0].gpu.is_none(),
        "{f:?}"
    );
    assert!(
        f[1].message.contains("NVLink down") && f[1].action.drains(),
        "{f:?}"
    );
}

#[test]
fn busy_and_missing_host_engine_are_not_faults() {
    for (mode, word) in [
        ("busy", "resource in use"),
        ("no-host-engine", "host engine not reachable"),
        // DCGM 4 with -j: the same error as a JSON runtime_error.
        (
            "busy-v4",
            "DCGM 4.6.0: Error: Unable to complete diagnostic for group",
        ),
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
    let o = run_diag(&cfg, &[], &[1, 3], &[1, 3]);
    assert!(matches!(o, DcgmOutcome::Failed(_)), "{o:?}");
    let args = std::fs::read_to_string(d.path().join("last-args")).unwrap();
    assert_eq!(args.trim(), "diag -r 1 -j -i 1,3");
    std::fs::write(d.path().join("mode"), "pass").unwrap();
    assert_eq!(
        run_diag(&cfg, &[], &[], &[0, 1]),
        DcgmOutcome::Passed { tests: 9 }
    );
    let args = std::fs::read_to_string(d.path().join("last-args")).unwrap();
    assert_eq!(args.trim(), "diag -r 1 -j");
}

#[test]
fn hang_is_killed_at_the_deadline() {
    let (_d, cfg) = standin("hang");
    let t0 = Instant::now();
    let o = run_diag(&cfg, &[], &[0], &[0]);
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
    assert_eq!(run_diag(&cfg, &[], &[], &[]), DcgmOutcome::NotInstalled);
    let (_d, mut cfg) = standin("pass");
    cfg.enabled = false;
    assert_eq!(run_diag(&cfg, &[], &[], &[]), DcgmOutcome::NotInstalled);
    let by_name = DcgmConfig {
        dcgmi: PathBuf::from("surely-not-a-dcgmi-binary"),
        ..DcgmConfig::default()
    };
    assert_eq!(resolve(&by_name, &[]), None);
}
