//! The admin command as an admin meets it (issue 24): loud configuration
//! errors, `config check`, one vocabulary, exit statuses and options from
//! one table per command, help, completions and the man page.

use std::path::Path;
use std::process::Command;

use gpu_health_testkit::{output, SimNode};

fn gpu_health() -> Command {
    let mut c = Command::new(gpu_health_testkit::program(env!(
        "CARGO_BIN_EXE_gpu-health"
    )));
    c.env_clear().env("SLURMD_NODENAME", "n1");
    c
}

fn run(args: &[&str], config: Option<&Path>) -> (i32, String, String) {
    let mut c = gpu_health();
    c.args(args);
    if let Some(cfg) = config {
        c.env("GPU_HEALTH_CONFIG", cfg);
    }
    output(&mut c)
}

#[test]
fn config_check_names_every_error_with_file_line_and_table() {
    let node = SimNode::new("h100x8-healthy");
    let cfg =
        node.write_config("nvml_deadine_ms = 5\n[dcgm]\nlevle = 2\n[brake]\nsettle_ms = 20000\n");
    let (code, out, err) = run(&["config", "check"], Some(&cfg));
    assert_eq!(code, 1, "{out}{err}");
    let file = cfg.display().to_string();
    for want in [
        format!("{file}:8:1: top level: unknown field `nvml_deadine_ms`"),
        format!("{file}:10:1: [dcgm]: unknown field `levle`"),
        "   10 | levle = 2\n      | ^^^^^".to_string(),
        "4 errors in ".to_string(),
    ] {
        assert!(out.contains(&want), "{want}\n{out}");
    }
    // The range rule is found once the shape is right.
    let cfg = node.write_config("[brake]\nsettle_ms = 20000\n");
    let (code, out, _) = run(&["config", "check", cfg.to_str().unwrap()], None);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "{}:9:1: [brake]: brake.settle_ms = 20000 is outside 100..=10000",
            cfg.display()
        )),
        "{out}"
    );
    let cfg = node.write_config("");
    let (code, out, _) = run(&["config", "check", "--node", "n7"], Some(&cfg));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": OK for node n7"), "{out}");
}

/// Issue 24: `GPU_HEALTH_CONFIG` naming a missing file ran on defaults
/// without a word.
#[test]
fn a_missing_file_named_by_gpu_health_config_is_an_error() {
    let missing = Path::new("/nonexistent/gpu-health.toml");
    let (code, out, _) = run(&["check"], Some(missing));
    assert_eq!(code, 2, "{out}");
    assert!(
        out.starts_with(
            "configuration error: cannot read /nonexistent/gpu-health.toml: no such file (named by GPU_HEALTH_CONFIG)"
        ),
        "{out}"
    );
    let (code, out, _) = run(&["config", "check"], Some(missing));
    assert_eq!(code, 1);
    assert!(out.contains("gpu-health.toml: no such file"), "{out}");
}

/// Issue 24: a typo made `check` print a verdict in the table with the
/// error only on stderr; the table says it now, and its LEVEL column
/// (`fatal` for both drains) is the ACTION.
#[test]
fn check_shows_the_configuration_error_and_the_action() {
    let node = SimNode::new("h100x8-dbe");
    let cfg = node.write_config("[dcgm]\nlevle = 2\n");
    let (code, out, err) = run(&["check"], Some(&cfg));
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("configuration error: "), "{out}");
    assert!(
        out.contains("(in [dcgm]: levle = 2): unknown field `levle`"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("verdict: ")
            && l.contains("configuration error: nothing would drain")),
        "{out}"
    );
    // Where the node is in its lifecycle (no ledger: in service).
    assert!(out.contains("\nlifecycle: in service\n"), "{out}");
    // What the prolog would do follows the verdict, on the defaults too.
    assert!(
        out.lines().last().unwrap().starts_with("the prolog would "),
        "{out}"
    );
    // And on stderr, as it was found: one line, no doubled prefix.
    assert!(
        err.starts_with("gpu-health: error: configuration error, using the built-in defaults"),
        "{err}"
    );
    let cfg = node.write_config("");
    let (code, out, _) = run(&["check"], Some(&cfg));
    assert_eq!(code, 1);
    assert!(out.contains(" ACTION "), "{out}");
    let row = out.lines().find(|l| l.contains("ecc-uncorrected")).unwrap();
    assert!(row.contains(" drain "), "{row}");
    assert!(!out.contains("fatal"), "{out}");
    assert!(out.lines().any(|l| l == "verdict: drain"), "{out}");
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("the prolog would drain: gpu-health: ECC DBE GPU3"),
        "{out}"
    );
}

/// Issue 24: `check --json --npd` and `watch --json --csv` were accepted
/// (the last won).
#[test]
fn conflicting_output_flags_are_errors() {
    for args in [
        &["check", "--json", "--npd"][..],
        &["watch", "--json", "--csv"],
        &["report", "--json", "--csv"],
        &["report", "--near-oom", "--power"],
    ] {
        let (code, _, err) = run(args, None);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains("exclude each other"), "{args:?}: {err}");
    }
}

/// Issue 24: only `step-end` took `--config`.
#[test]
fn every_command_takes_config() {
    let node = SimNode::new("h100x8-healthy");
    let cfg = node.write_config("");
    let c = cfg.to_str().unwrap();
    let (code, out, _) = run(&["check", "--config", c], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" 8 GPUs"), "{out}");
    let log = node.path("kernel.log");
    let (code, out, _) = run(
        &["xids", "--no-probe", "--config", c, log.to_str().unwrap()],
        None,
    );
    assert_eq!((code, out.trim()), (0, "no Xid events"));
    let (code, out, _) = run(&["config", "check", "--config", c], None);
    assert_eq!(code, 0, "{out}");
    let (code, _, err) = run(&["check", "--config", "/nonexistent.toml"], None);
    assert_eq!(code, 2, "{err}");
}

/// Issue 24: `help report` printed the top-level help; `--help` lacked
/// `--npd`, `--near-oom`, `--power`, `--svg`.
#[test]
fn help_names_every_option() {
    let (code, out, _) = run(&["help", "report"], None);
    assert_eq!(code, 0);
    assert!(out.starts_with("usage: gpu-health report "), "{out}");
    let (code, out, _) = run(&["--help"], None);
    assert_eq!(code, 0);
    for option in [
        "--npd",
        "--near-oom",
        "--power",
        "--svg",
        "--until",
        "--limit",
        "--node",
    ] {
        assert!(out.contains(option), "{option}\n{out}");
    }
    let (code, out, _) = run(&["xids", "--help"], None);
    assert_eq!(code, 0);
    assert!(
        out.contains("exit status:\n  0  no event that drains"),
        "{out}"
    );
}

const XIDS: &str = "[ 5.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=2210, GPU has fallen off the bus.\n\
                    [ 6.0] NVRM: Xid (PCI:0000:18:00): 48, pid=2210, An uncorrectable double bit error\n";

/// Issue 24: `xids` exited 0 with Xid 79 and 48 in the file. Like grep:
/// 1 when an event that drains is there, 0 when not, 2 on trouble.
#[test]
fn xids_exit_status_says_whether_an_event_drains() {
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let fatal = write("fatal.log", XIDS);
    let mild = write(
        "mild.log",
        "[ 6.0] NVRM: Xid (PCI:0000:18:00): 13, pid=1, Graphics Exception\n",
    );
    let empty = write("gpu-health.toml", "");
    let cfg = Some(empty.as_path());
    let (code, out, _) = run(&["xids", "--no-probe", fatal.to_str().unwrap()], cfg);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains(" drain ")).count(),
        2,
        "{out}"
    );
    let (code, _, _) = run(&["xids", "--no-probe", mild.to_str().unwrap()], cfg);
    assert_eq!(code, 0);
    let (code, _, err) = run(&["xids", "--no-probe", "/nonexistent/kern.log"], cfg);
    assert_eq!(code, 2, "{err}");
}

/// Issue 24: `xids --catalog 79` printed every row, and the built-in
/// action instead of the site's override.
#[test]
fn the_catalog_of_one_code_shows_the_sites_action() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("gpu-health.toml");
    std::fs::write(&cfg, "[xid.actions]\n79 = \"warn\"\n").unwrap();
    let (code, out, _) = run(&["xids", "--catalog", "79"], Some(&cfg));
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "the header and the row of 79\n{out}");
    assert!(
        lines[1].starts_with("79 ") && lines[1].contains("warn (site)"),
        "{out}"
    );
    assert!(
        lines[1].contains(" drain "),
        "the built-in action beside it: {out}"
    );
}

/// Issue 24: `nccl-env --sysfs-root /nonexistent` said "no RDMA ports"
/// and exited 0.
#[test]
fn nccl_env_fails_on_a_missing_sysfs_root() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("gpu-health.toml");
    std::fs::write(&cfg, "").unwrap();
    let (code, out, err) = run(
        &[
            "nccl-env",
            "--sysfs-root",
            "/nonexistent",
            "--plugstack",
            "/nonexistent",
        ],
        Some(&cfg),
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("sysfs root /nonexistent does not exist"),
        "{err}"
    );
    assert!(!out.contains("no RDMA ports"), "{out}");
}

/// Shell completions from the same table: valid scripts, and bash
/// completes an option of the command typed.
#[test]
fn completions_for_bash_zsh_and_fish() {
    let d = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let (code, script, err) = run(&["completions", shell], None);
        assert_eq!(code, 0, "{err}");
        let file = d.path().join(format!("gpu-health.{shell}"));
        std::fs::write(&file, &script).unwrap();
        match Command::new(shell).arg("-n").arg(&file).output() {
            Ok(o) => assert!(
                o.status.success(),
                "{shell} -n: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            // zsh and fish are not on every test machine: bash is.
            Err(_) if shell != "bash" => eprintln!("{shell} not installed: its syntax unchecked"),
            Err(e) => panic!("bash: {e}"),
        }
    }
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let script = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; _gpu_health; echo \"${{COMPREPLY[*]}}\"",
            d.path().join("gpu-health.bash").display(),
            words.join(" "),
            words.len() - 1
        );
        let o = Command::new("bash").arg("-c").arg(script).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(complete("gpu-health report --po"), "--power");
    assert_eq!(complete("gpu-health check --n"), "--npd");
    assert_eq!(complete("gpu-health config ch"), "check");
    assert_eq!(complete("gpu-health completions z"), "zsh");
    assert!(complete("gpu-health w").contains("watch"));
    let (code, _, _) = run(&["completions", "tcsh"], None);
    assert_eq!(code, 2);
}

/// The man page is made from the table and renders without a warning.
#[test]
fn the_man_page_renders() {
    let (code, page, _) = run(&["manpage"], None);
    assert_eq!(code, 0);
    // Issue 37: it printed the packaging's placeholder `@VERSION@`.
    assert!(
        !page.contains("@VERSION@"),
        "the placeholder is left:\n{page}"
    );
    assert!(
        page.lines()
            .next()
            .unwrap_or_default()
            .contains(&format!("\"gpu-health {}\"", env!("CARGO_PKG_VERSION"))),
        "{}",
        page.lines().next().unwrap_or_default()
    );
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("gpu-health.8");
    std::fs::write(&file, &page).unwrap();
    let out = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l"])
        .arg(&file)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .output()
        .expect("man (man-db)");
    let text = String::from_utf8_lossy(&out.stdout);
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && warnings.trim().is_empty(),
        "{warnings}"
    );
    for want in [
        "config check",
        "--npd",
        "--near-oom",
        "--svg FILE",
        "Exit status:",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
}

/// Issue 24: log lines showed Rust's debug text (`Drained("...")`,
/// `Timeout { deadline_ms: .. }`, `Some(139)`). A node drained by
/// someone else, with a DBE, and one whose NVML hangs: every line of the
/// log is a sentence.
#[test]
fn log_lines_have_no_rust_debug_text() {
    for scenario in ["h100x8-dbe", "nvml-hang"] {
        let node = SimNode::new(scenario);
        let cluster = gpu_health_testkit::FakeCluster::new(&node.path("cluster"), &["n1"]);
        cluster.drain("n1", "NHC: check_hw_eth failed");
        let cfg = node.write_config("[dcgm]\nenabled = false\n");
        std::fs::create_dir_all(node.path("gpu-health.d")).unwrap();
        std::fs::write(
            node.path("gpu-health.d/n1.toml"),
            format!("scontrol = {:?}\n", cluster.scontrol()),
        )
        .unwrap();
        for args in [&["health-check"][..], &["check"], &["resume", "n1"]] {
            let _ = run(args, Some(&cfg));
        }
        let log = std::fs::read_to_string(node.path("gpu-health.log")).unwrap();
        assert!(!log.is_empty());
        for line in log.lines() {
            for debug in ["{ ", "Some(", "(\""] {
                assert!(!line.contains(debug), "{scenario}: {debug:?} in: {line}");
            }
        }
    }
}

/// Issue 24: `resume` with `[dcgm]` enabled and no dcgmi said nothing on
/// the terminal (its log only).
#[test]
fn resume_says_when_dcgmi_is_missing() {
    let node = SimNode::new("h100x8-healthy");
    let cluster = gpu_health_testkit::FakeCluster::new(&node.path("cluster"), &["n1"]);
    let cfg = node.write_config("[dcgm]\ndcgmi = \"/nonexistent/dcgmi\"\n");
    std::fs::create_dir_all(node.path("gpu-health.d")).unwrap();
    std::fs::write(
        node.path("gpu-health.d/n1.toml"),
        format!("scontrol = {:?}\n", cluster.scontrol()),
    )
    .unwrap();
    let (code, out, err) = run(&["resume", "n1"], Some(&cfg));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("note: [dcgm] is enabled but /nonexistent/dcgmi is not installed"),
        "{out}"
    );
}

/// Issue 24: one event, one message: the health check's outcome was on
/// stdout and, in other words, twice more on stderr.
#[test]
fn the_health_check_says_its_outcome_once() {
    let node = SimNode::new("h100x8-dbe");
    let cfg = node.write_config("");
    let (code, out, err) = run(&["health-check"], Some(&cfg));
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out.matches("NOT drained").count(), 1, "{out}");
    assert!(
        !err.contains("not drained") && !err.contains("cannot claim"),
        "said on stdout already: {err}"
    );
    // The log file keeps the run's lines.
    let log = std::fs::read_to_string(node.path("gpu-health.log")).unwrap();
    assert!(log.contains("not drained"), "{log}");
}
