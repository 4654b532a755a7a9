//! The deeper tier: `dcgmi diag -r 1` on chosen GPUs, with a hard time
//! limit, its JSON turned into findings.
//!
//! When it runs (see docs/operations.md): in the prolog of a strict job
//! (on the job's GPUs) and before a node returns to service (automatic
//! return and `gpu-health resume`, on all GPUs). What it concludes:
//! - a failed hardware test (memory, PCIe, row remap, inforom, stress...)
//!   is a confirmed hardware fault: `drain` (an admin must look);
//! - a failed deployment/software test (persistence mode, environment,
//!   graphics processes...) is a `warn`: the GPU is not broken;
//! - "resource in use", no host engine, an unparsable answer or a
//!   time-out are not GPU faults: `info` (time-out: `warn`), never a drain.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::DcgmConfig;
use crate::finding::{Action, Finding};
use crate::process::{self, RunError};

mod check;
mod report;
mod verdict;
pub use check::{Dcgm, Diag};

/// Where dcgmi may be besides PATH (HealthCheckProgram runs without PATH).
const SYSTEM_DIRS: &[&str] = &["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin"];

/// The dcgmi to run, or `None` when it is not installed (or disabled).
/// A bare name is looked for in `search_path` (the run's `PATH`), then in
/// the system's directories.
pub fn resolve(cfg: &DcgmConfig, search_path: &[PathBuf]) -> Option<PathBuf> {
    if !cfg.enabled {
        return None;
    }
    if cfg.dcgmi.components().count() > 1 {
        return is_executable(&cfg.dcgmi).then(|| cfg.dcgmi.clone());
    }
    search_path
        .iter()
        .cloned()
        .chain(SYSTEM_DIRS.iter().map(PathBuf::from))
        .filter(|d| d.is_absolute())
        .map(|d| d.join(&cfg.dcgmi))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What one diag run concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DcgmOutcome {
    /// No dcgmi (or `[dcgm] enabled = false`): nothing ran.
    NotInstalled,
    Passed {
        tests: usize,
    },
    /// At least one test failed: the findings say which and how grave.
    Failed(Vec<Finding>),
    /// The diag could not judge the GPUs (busy, no host engine, time-out,
    /// garbage). Not a GPU fault.
    Unavailable {
        why: String,
        timed_out: bool,
    },
}

impl DcgmOutcome {
    /// Findings to add to a run's own.
    pub fn findings(&self) -> Vec<Finding> {
        match self {
            DcgmOutcome::NotInstalled | DcgmOutcome::Passed { .. } => Vec::new(),
            DcgmOutcome::Failed(f) => f.clone(),
            DcgmOutcome::Unavailable { why, timed_out } => vec![Finding::node(
                "dcgm",
                if *timed_out {
                    Action::Warn
                } else {
                    Action::Info
                },
                "DCGM diag not run".into(),
                format!("DCGM diagnostic could not judge the GPUs (not a GPU fault): {why}"),
            )],
        }
    }

    pub fn describe(&self) -> String {
        match self {
            DcgmOutcome::NotInstalled => "dcgmi not installed".into(),
            DcgmOutcome::Passed { tests } => format!("DCGM diag passed ({tests} results)"),
            DcgmOutcome::Failed(f) => format!(
                "DCGM diag failed: {}",
                f.iter()
                    .map(|f| f.summary.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            DcgmOutcome::Unavailable { why, .. } => format!("DCGM diag unavailable: {why}"),
        }
    }
}

/// Run the diag on `gpus` (all GPUs when empty); it passes only when
/// every GPU of `expected` (the job's, or all the node has) is proven.
pub fn run_diag(
    cfg: &DcgmConfig,
    search_path: &[PathBuf],
    gpus: &[u32],
    expected: &[u32],
) -> DcgmOutcome {
    let Some(dcgmi) = resolve(cfg, search_path) else {
        return DcgmOutcome::NotInstalled;
    };
    let level = cfg.level.to_string();
    let list = gpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut args = vec!["diag", "-r", level.as_str(), "-j"];
    if !gpus.is_empty() {
        args.extend(["-i", list.as_str()]);
    }
    let timeout = Duration::from_millis(cfg.timeout_ms);
    let t0 = Instant::now();
    let out = process::run(&dcgmi, &args, timeout, MAX_OUTPUT);
    log::info!(
        "{} {} finished in {} ms",
        dcgmi.display(),
        args.join(" "),
        t0.elapsed().as_millis()
    );
    match out {
        Err(RunError::Spawn { source, .. }) => DcgmOutcome::Unavailable {
            why: format!("cannot run {}: {source}", dcgmi.display()),
            timed_out: false,
        },
        Err(RunError::Timeout { .. }) => DcgmOutcome::Unavailable {
            why: format!("no answer within {} ms (killed)", cfg.timeout_ms),
            timed_out: true,
        },
        Ok(done) => interpret(done.status.code(), &done.stdout, &done.stderr, expected),
    }
}

/// Pure: dcgmi's exit status and output to an outcome.
/// `expected`: the GPUs the diag must prove (empty: those it names).
pub fn interpret(code: Option<i32>, stdout: &str, stderr: &str, expected: &[u32]) -> DcgmOutcome {
    if let Some(doc) = json_document(stdout) {
        let Some(report) = report::read(&doc) else {
            return unavailable(&format!(
                "dcgmi printed JSON with neither {:?} (DCGM 4.x) nor {:?} (3.x): not a diag report",
                report::V4_KEY,
                report::V3_KEY
            ));
        };
        if report.results.iter().any(|r| !r.summary) {
            return verdict::judge(&report, expected);
        }
        if let Some(err) = &report.runtime_error {
            return unavailable(&format!("{}: {err}", report.printed_by));
        }
        if !report.results.is_empty() {
            return verdict::judge(&report, expected);
        }
    }
    let text = format!("{} {}", stdout.trim(), stderr.trim());
    let status = code.map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
    let why = if text.trim().is_empty() {
        format!("dcgmi exited with {status} and printed nothing")
    } else {
        format!("dcgmi exited with {status}: {}", one_line(&text))
    };
    unavailable(&why)
}

fn unavailable(text: &str) -> DcgmOutcome {
    let lower = text.to_ascii_lowercase();
    let why = if lower.contains("in use") {
        format!("GPUs busy (resource in use): {}", one_line(text))
    } else if lower.contains("host engine")
        || lower.contains("hostengine")
        || lower.contains("establish a connection")
    {
        format!("DCGM host engine not reachable: {}", one_line(text))
    } else {
        one_line(text)
    };
    DcgmOutcome::Unavailable {
        why,
        timed_out: false,
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(300)
        .collect()
}

/// The JSON document in dcgmi's output: the first line that opens an
/// object and parses (text may come before it, and after it). At most 8
/// lines are tried, so that a large garbled answer costs one pass.
fn json_document(stdout: &str) -> Option<Value> {
    let mut offset = 0;
    let mut tries = 0;
    for line in stdout.split_inclusive('\n') {
        let start = offset + (line.len() - line.trim_start().len());
        offset += line.len();
        if !line.trim_start().starts_with('{') {
            continue;
        }
        let mut de = serde_json::Deserializer::from_str(&stdout[start..]).into_iter::<Value>();
        if let Some(Ok(v)) = de.next() {
            return Some(v);
        }
        tries += 1;
        if tries == 8 {
            return None;
        }
    }
    None
}

/// Largest output kept from dcgmi.
const MAX_OUTPUT: usize = 4 << 20;

#[cfg(test)]
mod tests;
