//! Helpers for the integration tests of gpu-health's binaries: a simulated
//! GPU node in a temp dir, laid out as the test cluster lays out its nodes
//! (`lib/libnvidia-ml.so.1` = the NVML stand-in built in this workspace,
//! `lib/scenario.json` beside it, a kernel-log file, a state directory).

use std::path::{Path, PathBuf};
use std::process::Command;

mod cluster;
pub use cluster::{FakeCluster, Mode as ClusterMode};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The stand-in libnvidia-ml built for this test run (ci/test builds the
/// workspace before testing; `cargo test -p nvml-sim` builds it too).
pub fn sim_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let profile = deps.parent().expect("profile dir").to_path_buf();
    // The newer of the two: `cargo test` refreshes the one in deps/, while
    // an older `cargo build` may have left a stale one beside it.
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [profile.join("libnvml_sim.so"), deps.join("libnvml_sim.so")]
        .into_iter()
        .filter(|p| p.is_file())
        .max_by_key(modified)
        .expect("libnvml_sim.so not built: run `cargo build -p nvml-sim` first")
}

/// The program a test runs: `built` (a `CARGO_BIN_EXE_*` path), or the
/// file of the same name in `$GPU_HEALTH_TEST_BIN_DIR` when that is set,
/// so the same tests can run against another build (an older commit, the
/// installed package).
pub fn program(built: &str) -> PathBuf {
    let built = PathBuf::from(built);
    match (
        std::env::var_os("GPU_HEALTH_TEST_BIN_DIR"),
        built.file_name(),
    ) {
        (Some(dir), Some(name)) if !dir.is_empty() => Path::new(&dir).join(name),
        _ => built,
    }
}

/// A binary of another package of this workspace, from the running test's
/// profile directory, built first when missing (see [`program`] for the
/// override).
pub fn workspace_binary(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("profile dir")
        .to_path_buf();
    let path = profile.join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", package]);
        if profile.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        assert!(
            cmd.status().expect("run cargo build").success(),
            "cargo build -p {package} failed"
        );
    }
    program(&path.to_string_lossy())
}

/// A shipped scenario file, by name without `.json`.
pub fn scenario(name: &str) -> PathBuf {
    workspace()
        .join("nvml-sim/scenarios")
        .join(format!("{name}.json"))
}

/// A simulated node on disk.
pub struct SimNode {
    pub dir: tempfile::TempDir,
}

impl SimNode {
    pub fn new(scenario_name: &str) -> SimNode {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("lib")).expect("lib dir");
        std::fs::copy(sim_library(), dir.path().join("lib/libnvidia-ml.so.1"))
            .expect("copy the NVML stand-in");
        std::fs::write(dir.path().join("kernel.log"), "").expect("kernel log");
        let node = SimNode { dir };
        node.set_scenario(scenario_name);
        node
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Switch to a shipped scenario (read at the next nvmlInit).
    pub fn set_scenario(&self, name: &str) {
        std::fs::copy(scenario(name), self.path("lib/scenario.json")).expect("copy scenario");
    }

    /// The configuration lines that point gpu-health at this node: NVML
    /// library, kernel log, state dir, log file, a 1.5 s NVML deadline and
    /// an scontrol that does not exist (no slurmctld in these tests).
    pub fn base_config(&self) -> String {
        format!(
            "nvml_library = {:?}\nkernel_log = {:?}\nstate_dir = {:?}\nrun_lock_dir = {:?}\n\
             log_file = {:?}\nscontrol = \"/nonexistent/scontrol\"\nnvml_deadline_ms = 1500\n",
            self.path("lib/libnvidia-ml.so.1"),
            self.path("kernel.log"),
            self.path("state"),
            self.path("run"),
            self.path("gpu-health.log"),
        )
    }

    /// Write `gpu-health.toml` (base lines + `extra`) and return its path.
    pub fn write_config(&self, extra: &str) -> PathBuf {
        let p = self.path("gpu-health.toml");
        std::fs::write(&p, format!("{}{extra}", self.base_config())).expect("write config");
        p
    }
}

/// How a stand-in scontrol behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scontrol {
    /// Answers like a slurmctld with one node, `n1`, in partition `gpu`:
    /// `show node` lists it, `update ... State=DRAIN|RESUME` changes it,
    /// `Comment=` (the drain brake's claim) is kept and shown.
    Works,
    /// Exits 1 with a message, as when slurmctld is down.
    Fails,
    /// Never answers (the run's time budget must end it).
    Hangs,
}

impl SimNode {
    /// An executable shell script `name` in the node's directory.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// A stand-in scontrol for the failure paths that need no real Slurm
    /// (the end-to-end tests use a real one). Every call is appended to
    /// `scontrol.calls`; the drain reason is kept in `scontrol.reason`.
    pub fn scontrol(&self, how: Scontrol) -> PathBuf {
        let dir = self.dir.path().display().to_string();
        let body = match how {
            Scontrol::Works => format!(
                r#"echo "$*" >> "{dir}/scontrol.calls"
case "$1 $2" in
"show node")
    comment=""
    [ -f "{dir}/scontrol.comment" ] && comment=" Comment=$(cat "{dir}/scontrol.comment")"
    if [ -f "{dir}/scontrol.reason" ]; then
        echo "NodeName=n1 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu Reason=$(cat "{dir}/scontrol.reason") [root@2026-12-01T00:00:00]$comment"
    else
        echo "NodeName=n1 Arch=x86_64 State=IDLE Partitions=gpu$comment"
    fi
    exit 0 ;;
"update NodeName=n1")
    for arg in "$@"; do
        case "$arg" in
        Comment=) rm -f "{dir}/scontrol.comment" ;;
        Comment=*) printf '%s' "${{arg#Comment=}}" > "{dir}/scontrol.comment" ;;
        esac
    done
    case "$3" in
    State=DRAIN) printf '%s' "${{4#Reason=}}" > "{dir}/scontrol.reason" ;;
    State=RESUME) rm -f "{dir}/scontrol.reason" ;;
    esac
    exit 0 ;;
esac
exit 1"#
            ),
            Scontrol::Fails => format!(
                "echo \"$*\" >> \"{dir}/scontrol.calls\"\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1"
            ),
            Scontrol::Hangs => format!("echo \"$*\" >> \"{dir}/scontrol.calls\"\nexec sleep 30"),
        };
        self.script("scontrol", &body)
    }

    /// The drain reason the stand-in scontrol holds, if drained.
    pub fn drained_reason(&self) -> Option<String> {
        std::fs::read_to_string(self.path("scontrol.reason")).ok()
    }

    /// The calls the stand-in scontrol got.
    pub fn scontrol_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("scontrol.calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Run a command to its end: exit code (-1 when killed), stdout, stderr.
pub fn output(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run the command");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Check a Prometheus textfile with `promtool check metrics` (Debian's
/// `prometheus` package; ./ci/test installs it): the format and
/// Prometheus's naming rules. Panics with promtool's words.
pub fn promtool_check_metrics(text: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus; ./ci/test installs it)");
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
