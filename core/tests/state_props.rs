//! Property tests: every parser of files gpu-health reads back (config,
//! verdicts, snapshots, histories, cursors, records) takes arbitrary input
//! without panicking, and round-trips what it wrote.

use std::path::Path;

use gpu_health_core::checks::EccHistory;
use gpu_health_core::config;
use gpu_health_core::ids::JobId;
use gpu_health_core::ids::NodeName;
use gpu_health_core::ledger::{self, Ledger};
use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::state::{StateDir, StateFile};
use gpu_health_core::verdict::{parse_gpu_list, JobVerdict};
use gpu_health_core::xid::XidState;
use proptest::prelude::*;

/// Text that looks like TOML: keys of the real schema, odd values.
fn toml_like() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "nvml_library",
        "nvml_deadline_ms",
        "kernel_log",
        "state_dir",
        "expected_gpus",
        "scontrol",
        "[thresholds]",
        "max_temperature_c",
        "sbe_warn_per_hour",
        "[xid]",
        "lookback_hours",
        "[xid.actions]",
        "31",
        "[brake]",
        "max_drained_fraction",
        "bogus",
    ]);
    let value = prop::sample::select(vec![
        "= 1",
        "= -1",
        "= 0",
        "= 1e309",
        "= nan",
        "= \"x\"",
        "= [1,2]",
        "= {a=1}",
        "= true",
        "=",
        "= \"drain\"",
        "= 18446744073709551616",
        "",
    ]);
    prop::collection::vec((key, value), 0..12)
        .prop_map(|kv| kv.into_iter().map(|(k, v)| format!("{k} {v}\n")).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn config_parser_never_panics(text in toml_like()) {
        let p = Path::new("/etc/slurm/gpu-health.toml");
        if let Ok(c) = config::parse(p, &text, None) {
            // What parses is valid: the deadline stays bounded.
            prop_assert!(c.nvml_deadline_ms >= 200 && c.nvml_deadline_ms <= 120_000);
        }
    }

    #[test]
    fn config_parser_takes_any_text(text in "\\PC*") {
        let _ = config::parse(Path::new("/x.toml"), &text, None);
    }

    #[test]
    fn gpu_lists_never_panic(s in "[0-9,\\- a-z]{0,40}") {
        if let Ok(v) = parse_gpu_list(&s) {
            prop_assert!(v.windows(2).all(|w| w[0] < w[1]));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn state_files_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state"));
        let job = JobId::from(7);
        for f in [
            StateFile::NodeSnapshot,
            StateFile::JobVerdict(job),
            StateFile::EccHistory,
            StateFile::KernelLogCursor,
            StateFile::Ledger,
        ] {
            let path = state.path_of(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let _ = state.load::<JobVerdict>(job);
        let _ = state.load::<NodeSnapshot>(());
        let _ = state.load::<EccHistory>(());
        let _ = state.load::<XidState>(());
        let _ = state.load::<Ledger>(());
        // The ledger's own reader never fails: what it cannot use is
        // moved aside, never silently replaced.
        let n1 = NodeName::parse("n1").unwrap();
        let loaded = ledger::store::load(&state, &n1);
        if loaded.unreadable.is_some() {
            prop_assert!(state.path_of(StateFile::LedgerUnreadable).exists());
        }
    }

    #[test]
    fn truncated_verdicts_are_errors_not_panics(cut in 0usize..400) {
        let v = JobVerdict {
            job_id: JobId::from(42),
            node: "n1".into(),
            mode: gpu_health_core::verdict::Mode::Strict,
            written_at_ms: 1,
            job_gpus: vec![0, 1],
            findings: vec![],
            config_error: Some("x".into()),
        };
        let full = serde_json::to_vec(&v).unwrap();
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state"));
        let f = StateFile::JobVerdict(JobId::from(42));
        let path = state.path_of(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &full[..cut.min(full.len())]).unwrap();
        match state.load::<JobVerdict>(JobId::from(42)) {
            Ok(Some(back)) => prop_assert_eq!(back, v),
            Ok(None) => prop_assert!(false, "file exists"),
            Err(_) => prop_assert!(cut < full.len()),
        }
    }
}
