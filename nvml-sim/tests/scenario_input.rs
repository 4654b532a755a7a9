//! What nvml-sim accepts as a scenario file: only a regular file (symlinks
//! followed) of at most MAX_SCENARIO_BYTES. The library is loaded into
//! other processes, so a FIFO, a device or a directory named as the
//! scenario must fail the load at once instead of blocking or reading
//! without end.
//!
//! Loads that, if broken, would block or grow without bound run in a child
//! process (this test binary running `child_load`) under a deadline and a
//! memory limit, so that a regression fails the test instead of hanging
//! the suite or exhausting the machine.

mod common;

use common::raw::RawLib;
use common::SimNode;
use nvml_sim::scenario::MAX_SCENARIO_BYTES;
use nvml_sim::Scenario;
use nvml_wrapper::error::NvmlError;
use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Names the scenario `child_load` loads; set only for the child.
const CHILD_SCENARIO_ENV: &str = "NVML_SIM_TEST_CHILD_SCENARIO";
/// Precedes the outcome in what `child_load` prints.
const CHILD_RESULT_PREFIX: &str = "child load result: ";
/// Far above the milliseconds a refused load takes, even on a busy machine.
const CHILD_DEADLINE: Duration = Duration::from_secs(10);
/// Address space for the child: ample for the test binary, small enough
/// that reading /dev/zero fails within a second.
const CHILD_ADDRESS_SPACE_BYTES: u64 = 1 << 30;

#[test]
#[ignore = "child process of the tests that call load_in_child"]
fn child_load() {
    let Some(path) = std::env::var_os(CHILD_SCENARIO_ENV) else {
        return;
    };
    let limit = libc::rlimit {
        rlim_cur: CHILD_ADDRESS_SPACE_BYTES as libc::rlim_t,
        rlim_max: CHILD_ADDRESS_SPACE_BYTES as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct it is given; the limit applies
    // only to this child process.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
    let outcome = match Scenario::load(Path::new(&path)) {
        Ok(_) => "loaded".to_string(),
        Err(e) => format!("error: {e}"),
    };
    println!("{CHILD_RESULT_PREFIX}{outcome}");
}

/// `Scenario::load(path)` run in a child process: "loaded" or
/// "error: <message>". Fails the test if the child does not finish within
/// CHILD_DEADLINE or dies.
fn load_in_child(path: &Path) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_load",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_SCENARIO_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > CHILD_DEADLINE {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let report = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    let status = status.unwrap_or_else(|| {
        panic!("loading {path:?} did not finish within {CHILD_DEADLINE:?}\n{report}")
    });
    assert!(
        status.success(),
        "loading {path:?}: child {status}\n{report}"
    );
    stdout
        .lines()
        // libtest writes "test child_load ... " before it on the same line.
        .find_map(|line| line.split_once(CHILD_RESULT_PREFIX))
        .map(|(_, outcome)| outcome)
        .unwrap_or_else(|| panic!("child reported no result\n{report}"))
        .to_string()
}

fn load_error(path: &Path) -> String {
    match Scenario::load(path) {
        Ok(_) => panic!("{path:?} was accepted as a scenario"),
        Err(e) => e.to_string(),
    }
}

/// `{"count": 1}` padded with spaces to `size` bytes: valid, so only its
/// size can be the reason to refuse it.
fn padded_scenario(size: u64) -> String {
    let mut text = String::from(r#"{"count": 1}"#);
    text.push_str(&" ".repeat(size as usize - text.len()));
    text
}

#[test]
fn fifo_as_scenario_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("scenario.json");
    let name = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let outcome = load_in_child(&fifo);
    assert_eq!(
        outcome,
        format!(
            "error: scenario {} is a FIFO, not a regular file",
            fifo.display()
        )
    );
}

#[test]
fn symlink_to_dev_zero_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("scenario.json");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let outcome = load_in_child(&link);
    assert_eq!(
        outcome,
        format!(
            "error: scenario {} is a character device, not a regular file",
            link.display()
        )
    );
}

#[test]
fn directory_as_scenario_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = load_error(dir.path());
    assert_eq!(
        error,
        format!(
            "scenario {} is a directory, not a regular file",
            dir.path().display()
        )
    );
}

#[test]
fn scenario_over_the_size_cap_is_refused_with_the_cap_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.json");
    std::fs::write(&path, padded_scenario(MAX_SCENARIO_BYTES + 1)).unwrap();
    let error = load_error(&path);
    assert_eq!(
        error,
        format!(
            "scenario {} is larger than the {MAX_SCENARIO_BYTES}-byte cap on scenario files",
            path.display()
        )
    );
}

#[test]
fn scenario_of_exactly_the_size_cap_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.json");
    std::fs::write(&path, padded_scenario(MAX_SCENARIO_BYTES)).unwrap();
    assert_eq!(Scenario::load(&path).unwrap().gpus.len(), 1);
}

#[test]
fn init_reports_a_directory_as_no_scenario() {
    let node = SimNode::without_scenario();
    std::fs::create_dir(node.scenario_file()).unwrap();
    assert!(matches!(node.init(), Err(NvmlError::DriverNotLoaded)));
    let raw = RawLib::open(&node.library());
    assert_eq!(raw.call0("nvmlInit_v2"), 9);
    let why = raw.error_string(9);
    assert!(
        why.starts_with("Driver Not Loaded (nvml-sim: no scenario"),
        "{why}"
    );
    assert!(why.contains("is a directory, not a regular file"), "{why}");
}

#[test]
fn init_reports_an_oversized_scenario_as_unknown_error() {
    let node = SimNode::with_text(&padded_scenario(MAX_SCENARIO_BYTES + 1));
    assert!(matches!(node.init(), Err(NvmlError::Unknown)));
    let raw = RawLib::open(&node.library());
    assert_eq!(raw.call0("nvmlInit_v2"), 999);
    let why = raw.error_string(999);
    assert!(
        why.contains(&format!("larger than the {MAX_SCENARIO_BYTES}-byte cap")),
        "{why}"
    );
}
