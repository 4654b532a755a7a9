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

/// Run the diag on `gpus` (all GPUs when empty).
pub fn run_diag(cfg: &DcgmConfig, search_path: &[PathBuf], gpus: &[u32]) -> DcgmOutcome {
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
        Ok(done) => interpret(done.status.code(), &done.stdout, &done.stderr),
    }
}

/// Pure: dcgmi's exit status and output to an outcome.
pub fn interpret(code: Option<i32>, stdout: &str, stderr: &str) -> DcgmOutcome {
    if let Some(doc) = json_document(stdout) {
        if let Some(results) = collect_results(&doc) {
            if !results.is_empty() {
                return judge(&results);
            }
        }
        if let Some(err) = runtime_error(&doc) {
            return unavailable(&err);
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

/// The JSON object in dcgmi's output (older versions print a line of
/// text before it).
fn json_document(stdout: &str) -> Option<Value> {
    let start = stdout.find('{')?;
    let end = stdout.rfind('}')?;
    serde_json::from_str(stdout.get(start..=end)?).ok()
}

fn runtime_error(doc: &Value) -> Option<String> {
    let d = doc.get("DCGM GPU Diagnostic").unwrap_or(doc);
    ["runtime_error", "error", "errors"]
        .iter()
        .find_map(|k| d.get(*k))
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
}

/// One test result for one GPU (or for all, deployment tests).
#[derive(Debug, Clone, PartialEq)]
struct TestResult {
    category: Option<String>,
    test: String,
    gpu: Option<u32>,
    status: String,
    warnings: Vec<String>,
    hardware_error_category: bool,
}

/// DCGM 3.x (`"DCGM GPU Diagnostic": {"test_categories": [...]}`) and
/// 4.x (top-level `"tests": [...]`, results per entity).
fn collect_results(doc: &Value) -> Option<Vec<TestResult>> {
    let mut out = Vec::new();
    if let Some(cats) = doc
        .get("DCGM GPU Diagnostic")
        .and_then(|d| d.get("test_categories"))
        .and_then(Value::as_array)
    {
        for cat in cats {
            let category = cat
                .get("category")
                .and_then(Value::as_str)
                .map(str::to_string);
            for t in cat
                .get("tests")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                push_test(&mut out, category.clone(), t);
            }
        }
        return Some(out);
    }
    let tests = doc.get("tests").and_then(Value::as_array)?;
    for t in tests {
        let category = t
            .get("category")
            .and_then(Value::as_str)
            .map(str::to_string);
        push_test(&mut out, category, t);
    }
    Some(out)
}

fn push_test(out: &mut Vec<TestResult>, category: Option<String>, t: &Value) {
    let test = t
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("unnamed")
        .to_string();
    for r in t
        .get("results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let gpu = ["gpu_id", "gpu_ids", "entity_id"]
            .iter()
            .find_map(|k| r.get(*k))
            .and_then(|v| match v {
                Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
                Value::String(s) => s.trim().parse().ok(),
                _ => None,
            });
        let mut warnings = Vec::new();
        let mut hardware_error_category = false;
        for w in r
            .get("warnings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match w {
                Value::String(s) => warnings.push(s.clone()),
                Value::Object(o) => {
                    if let Some(s) = o.get("warning").and_then(Value::as_str) {
                        warnings.push(s.to_string());
                    }
                    // DCGM_FR_EC_HARDWARE_* are 9..=15.
                    if o.get("error_category")
                        .and_then(Value::as_u64)
                        .is_some_and(|c| (9..=15).contains(&c))
                    {
                        hardware_error_category = true;
                    }
                }
                _ => {}
            }
        }
        out.push(TestResult {
            category: category.clone(),
            test: test.clone(),
            gpu,
            status: r
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_ascii_lowercase(),
            warnings,
            hardware_error_category,
        });
    }
}

/// Deployment checks whose failure means broken hardware, not setup.
const HARDWARE_DEPLOYMENT_WORDS: &[&str] = &["row remap", "page retire", "inforom"];

fn is_hardware(r: &TestResult) -> bool {
    let name = r.test.to_ascii_lowercase();
    let text = r.warnings.join(" ").to_ascii_lowercase();
    let deployment = r
        .category
        .as_deref()
        .is_some_and(|c| c.eq_ignore_ascii_case("deployment"))
        || name == "software";
    if !deployment {
        return true;
    }
    r.hardware_error_category
        || HARDWARE_DEPLOYMENT_WORDS
            .iter()
            .any(|w| name.contains(w) || text.contains(w))
}

fn judge(results: &[TestResult]) -> DcgmOutcome {
    let failed: Vec<&TestResult> = results.iter().filter(|r| r.status == "fail").collect();
    if failed.is_empty() {
        return DcgmOutcome::Passed {
            tests: results.len(),
        };
    }
    let findings = failed
        .into_iter()
        .map(|r| {
            let action = if is_hardware(r) {
                Action::Drain
            } else {
                Action::Warn
            };
            let detail = if r.warnings.is_empty() {
                String::new()
            } else {
                format!(": {}", one_line(&r.warnings.join("; ")))
            };
            let message = format!(
                "DCGM diagnostic test {:?} failed{}{}",
                r.test,
                r.gpu.map(|g| format!(" on GPU{g}")).unwrap_or_default(),
                detail
            );
            match r.gpu {
                Some(g) => Finding::gpu(
                    "dcgm",
                    action,
                    g,
                    None,
                    format!("DCGM {} GPU{g} failed", r.test),
                    message,
                ),
                None => Finding::node("dcgm", action, format!("DCGM {} failed", r.test), message),
            }
        })
        .collect();
    DcgmOutcome::Failed(findings)
}

/// Largest output kept from dcgmi.
const MAX_OUTPUT: usize = 4 << 20;

#[cfg(test)]
mod tests;
