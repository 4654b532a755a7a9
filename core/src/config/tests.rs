use super::*;
use crate::ids::NodeName;

fn p() -> PathBuf {
    PathBuf::from("/etc/slurm/gpu-health.toml")
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn empty_file_is_all_defaults() {
    assert_eq!(parse(&p(), "", None).unwrap(), Config::default());
}

#[test]
fn keys_override_defaults() {
    let c = parse(
        &p(),
        "nvml_deadline_ms = 500\n[thresholds]\nmax_temperature_c = 80\n",
        None,
    )
    .unwrap();
    assert_eq!(c.nvml_deadline_ms, 500);
    assert_eq!(c.thresholds.max_temperature_c, 80);
    assert_eq!(
        c.thresholds.sbe_warn_per_hour,
        Thresholds::default().sbe_warn_per_hour
    );
}

#[test]
fn syntax_error_names_line() {
    let e = parse(&p(), "state_dir = \"/x\"\nnvml_deadline_ms = = 3\n", None).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("line 2"), "{s}");
}

#[test]
fn wrong_type_names_key() {
    let s = parse(&p(), "nvml_deadline_ms = \"soon\"\n", None)
        .unwrap_err()
        .to_string();
    assert!(
        s.contains("nvml_deadline_ms") && s.contains("line 1"),
        "{s}"
    );
}

#[test]
fn unknown_key_is_an_error() {
    let s = parse(&p(), "nvml_deadine_ms = 5\n", None)
        .unwrap_err()
        .to_string();
    assert!(s.contains("nvml_deadine_ms"), "{s}");
}

/// Issue 24: a typo after `[dcgm]` names the table, and the error is
/// one line with its place (no caret box flattened into it).
#[test]
fn a_typo_names_its_table_and_line() {
    let s = parse(&p(), "state_dir = \"/x\"\n[dcgm]\nlevle = 2\n", None)
        .unwrap_err()
        .to_string();
    assert!(
        s.starts_with("/etc/slurm/gpu-health.toml: line 3, column 1 (in [dcgm]: levle = 2): unknown field `levle`"),
        "{s}"
    );
    assert!(!s.contains('|') && !s.contains('\n'), "{s}");
}

/// Issue 24: `GPU_HEALTH_CONFIG` naming a missing file is an error
/// (defaults in force, nothing drains), not a silent run on defaults.
#[test]
fn a_missing_file_that_someone_named_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("gpu-health.toml");
    let n1 = NodeName::parse("n1").unwrap();
    let named = missing.to_string_lossy().into_owned();
    let env = |k: &str| (k == "GPU_HEALTH_CONFIG").then(|| named.clone());
    let loaded = load_for_node(None, &n1, env);
    assert!(!loaded.ok());
    assert_eq!(loaded.named_by, NamedBy::Environment);
    assert!(
        loaded
            .error_line()
            .unwrap()
            .ends_with("gpu-health.toml: no such file (named by GPU_HEALTH_CONFIG)"),
        "{:?}",
        loaded.error_line()
    );
    assert_eq!(loaded.config, Config::default());
    let loaded = load_for_node(Some(&missing), &n1, no_env);
    assert!(loaded
        .error
        .unwrap()
        .to_string()
        .contains("named by --config"));
    // The default place may be empty: a node without a file.
    assert_eq!(
        config_path(no_env),
        (PathBuf::from(DEFAULT_CONFIG_PATH), NamedBy::Default)
    );
}

#[test]
fn absurd_thresholds_are_refused() {
    assert!(parse(&p(), "nvml_deadline_ms = 0\n", None).is_err());
    assert!(parse(
        &p(),
        "[thresholds]\nsbe_warn_per_hour = 10.0\nsbe_fatal_per_hour = 1.0\n",
        None
    )
    .is_err());
    assert!(parse(&p(), "[thresholds]\nmin_power_limit_ratio = nan\n", None).is_err());
    assert!(parse(&p(), "expected_gpus = 100000\n", None).is_err());
}

#[test]
fn dropin_overrides_single_keys() {
    let d = PathBuf::from("/etc/slurm/gpu-health.d/n1.toml");
    let c = parse(
        &p(),
        "state_dir = \"/a\"\n[thresholds]\nmax_temperature_c = 80\n",
        Some((
            &d,
            "state_dir = \"/b\"\n[thresholds]\nsbe_warn_per_hour = 1.0\n",
        )),
    )
    .unwrap();
    assert_eq!(c.state_dir, PathBuf::from("/b"));
    assert_eq!(c.thresholds.max_temperature_c, 80);
    assert_eq!(c.thresholds.sbe_warn_per_hour, 1.0);
}

#[test]
fn dropin_path_is_named_by_the_node() {
    let n1 = NodeName::parse("n1").unwrap();
    assert_eq!(
        node_dropin_path(&p(), &n1),
        Some(PathBuf::from("/etc/slurm/gpu-health.d/n1.toml"))
    );
}

#[test]
fn deadline_below_what_nvml_can_meet_is_an_error() {
    let s = parse(&p(), "nvml_deadline_ms = 50\n", None)
        .unwrap_err()
        .to_string();
    assert!(s.contains("200..=120000"), "{s}");
    assert!(parse(&p(), "nvml_deadline_ms = 200\n", None).is_ok());
}

#[test]
fn every_loader_expands_the_node_name() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("gpu-health.toml");
    std::fs::write(
        &main,
        "state_dir = \"/var/lib/gpu-health/%n\"\nlog_file = \"/var/log/gh-%n.log\"\n",
    )
    .unwrap();
    let n7 = NodeName::parse("n7").unwrap();
    let loaded = load_for_node(Some(&main), &n7, no_env);
    assert!(loaded.ok());
    assert_eq!(
        loaded.config.state_dir,
        PathBuf::from("/var/lib/gpu-health/n7")
    );
    assert_eq!(
        loaded.config.log_file,
        Some(PathBuf::from("/var/log/gh-n7.log"))
    );
    // A broken drop-in: the main file is in force, still expanded.
    std::fs::create_dir(d.path().join("gpu-health.d")).unwrap();
    std::fs::write(
        d.path().join("gpu-health.d/n7.toml"),
        "nvml_deadine_ms = 5\n",
    )
    .unwrap();
    let loaded = load_for_node(Some(&main), &n7, no_env);
    assert!(loaded
        .error_line()
        .unwrap()
        .contains("without the node drop-in"));
    assert_eq!(
        loaded.config.state_dir,
        PathBuf::from("/var/lib/gpu-health/n7")
    );
}

#[test]
fn a_fifo_or_directory_as_configuration_is_an_error_not_a_hang() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("gpu-health.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let n1 = NodeName::parse("n1").unwrap();
    let t0 = std::time::Instant::now();
    let loaded = load_for_node(Some(&fifo), &n1, no_env);
    assert!(loaded
        .error
        .unwrap()
        .to_string()
        .contains("not a regular file"));
    assert!(t0.elapsed() < std::time::Duration::from_secs(1));
    assert!(load(d.path(), None).is_err());
}

/// `[power]` sections with a mistake, and what the report's error says.
fn power_mistakes() -> Vec<(String, &'static str)> {
    let rack = "[[power.racks]]\nname = \"r01\"\nsupply_kw = 8.0\ncooling_kw = 10.0\n";
    vec![
        (
            format!("{rack}nodes = [\"gpu1\", \"gpu1\"]\n"),
            "listed twice",
        ),
        (
            format!("{rack}nodes = [\"gpu[1-999999999]\"]\n"),
            "more than 100000",
        ),
        (
            format!("{rack}nodes = [\"gpu[1-3\"]\n"),
            "unbalanced brackets",
        ),
        (format!("{rack}nodes = [\"a\"]\nbogus = 1\n"), "bogus"),
        (format!("{rack}nodes = \"a\"\n"), "nodes"),
        ("[power]\nracks = 5\n".to_string(), "[power]"),
        ("power = 5\n".to_string(), "[power]"),
    ]
}

/// `[power]` is report-only: whatever is wrong in it, the Prolog,
/// Epilog, health check and plugin load the file without an error
/// (and so may drain); the report's parse names the file and rack.
#[test]
fn a_mistake_in_power_never_makes_the_configuration_invalid() {
    let n1 = NodeName::parse("n1").unwrap();
    for (power, _) in power_mistakes() {
        let d = tempfile::tempdir().unwrap();
        let main = d.path().join("gpu-health.toml");
        std::fs::write(&main, format!("state_dir = \"/x/%n\"\n{power}")).unwrap();
        let loaded = load_for_node(Some(&main), &n1, no_env);
        assert!(loaded.ok(), "{power}: {:?}", loaded.error_line());
        assert_eq!(loaded.config.state_dir, PathBuf::from("/x/n1"));
    }
}

#[test]
fn the_report_names_the_file_and_rack_of_a_power_mistake() {
    let d = tempfile::tempdir().unwrap();
    let main = d.path().join("gpu-health.toml");
    for (power, why) in power_mistakes() {
        std::fs::write(&main, &power).unwrap();
        let config = load(&main, None).unwrap();
        let e = config.power.racks().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: ", main.display())) && e.contains(why),
            "{power}: {e}"
        );
    }
}

#[test]
fn power_errors_name_the_drop_in_that_set_the_section() {
    let d = PathBuf::from("/etc/slurm/gpu-health.d/n1.toml");
    let c = parse(
        &p(),
        "state_dir = \"/a\"\n",
        Some((&d, "[[power.racks]]\nname = \"r\"\n")),
    )
    .unwrap();
    assert_eq!(c.power.source(), Some(d.as_path()));
    let e = c.power.racks().unwrap_err().to_string();
    assert!(
        e.starts_with("/etc/slurm/gpu-health.d/n1.toml: [[power.racks]] #1 (\"r\"): "),
        "{e}"
    );
    let c = parse(&p(), "[[power.racks]]\nname = \"r\"\n", None).unwrap();
    assert_eq!(c.power.source(), Some(p().as_path()));
}

/// A braked drain waits `claim_timeout_ms + settle_ms` and keeps
/// `BRAKE_DECIDE_RESERVE_MS` to decide, all within
/// `scontrol_timeout_ms`; a budget without room for that would never
/// drain, so it is refused at load.
#[test]
fn the_brakes_wait_must_fit_the_slurm_budget() {
    let s = parse(&p(), "[brake]\nsettle_ms = 10000\n", None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        s,
        "/etc/slurm/gpu-health.toml: brake.claim_timeout_ms = 1000 + brake.settle_ms = 10000 \
         + 400 ms to decide = 11400 ms does not fit in scontrol_timeout_ms = 2500: the brake \
         could never drain a node; raise scontrol_timeout_ms to at least 11400 or lower \
         brake.settle_ms or brake.claim_timeout_ms"
    );
    // The defaults fit: 1000 + 500 + 400 <= 2500.
    assert!(parse(&p(), "", None).is_ok());
    // Exactly filling the budget is fine; a millisecond more is not.
    assert!(parse(&p(), "[brake]\nsettle_ms = 1100\n", None).is_ok());
    assert!(parse(&p(), "[brake]\nsettle_ms = 1101\n", None).is_err());
    // A drop-in lowering the budget under the main file's brake.
    let d = PathBuf::from("/etc/slurm/gpu-health.d/n1.toml");
    let e = parse(
        &p(),
        "[brake]\nclaim_timeout_ms = 5000\n",
        Some((&d, "scontrol_timeout_ms = 5000\n")),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("/etc/slurm/gpu-health.d/n1.toml: ") && e.contains("= 5900 ms"),
        "{e}"
    );
    // Room made either way, or no brake: accepted.
    assert!(parse(
        &p(),
        "scontrol_timeout_ms = 11400\n[brake]\nsettle_ms = 10000\n",
        None
    )
    .is_ok());
    assert!(parse(&p(), "[brake]\nenabled = false\nsettle_ms = 10000\n", None).is_ok());
}
