//! A diag report judged: a failed hardware test drains, a failed
//! deployment test warns, and a pass needs proof for every GPU asked
//! about (a GPU with no result, or whose tests were skipped or not run,
//! is not proven: the diag could not judge it).

use std::collections::BTreeSet;

use super::report::{Entity, Report, Status, TestResult, Warning};
use super::{one_line, DcgmOutcome};
use crate::finding::{Action, Finding};

/// Deployment checks whose failure means broken hardware, not setup.
const HARDWARE_DEPLOYMENT_WORDS: &[&str] = &["row remap", "page retire", "inforom"];

/// `dcgmErrorCategory_t` names (NVIDIA/DCGM `dcgmlib/dcgm_errors.h`).
const CATEGORIES: &[&str] = &[
    "none",
    "performance threshold",
    "performance violation",
    "software configuration",
    "software library",
    "software XID",
    "software CUDA",
    "software EUD",
    "software other",
    "hardware thermal",
    "hardware memory",
    "hardware NVLink",
    "hardware NVSwitch",
    "hardware PCIe",
    "hardware power",
    "hardware other",
    "internal other",
];

/// `dcgmErrorSeverity_t` names (same header).
const SEVERITIES: &[&str] = &[
    "none", "monitor", "isolate", "unknown", "triage", "config", "reset",
];

/// `report` judged for `expected` GPUs (when empty: every GPU it names,
/// and at least one).
pub(super) fn judge(report: &Report, expected: &[u32]) -> DcgmOutcome {
    let by = &report.printed_by;
    let findings: Vec<Finding> = report
        .results
        .iter()
        .filter(|r| failed(r) && !(r.summary && entity_failed(report, r)))
        .map(|r| finding(by, r))
        .collect();
    if findings.iter().any(|f| f.action.drains()) {
        return DcgmOutcome::Failed(findings);
    }
    if let Some(gap) = coverage_gap(report, expected) {
        let warned = findings
            .iter()
            .map(|f| f.summary.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let why = if warned.is_empty() {
            format!("{by}: {gap}")
        } else {
            format!("{by}: {gap} (warnings: {warned})")
        };
        return DcgmOutcome::Unavailable {
            why: one_line(&why),
            timed_out: false,
        };
    }
    if findings.is_empty() {
        DcgmOutcome::Passed {
            tests: report.results.iter().filter(|r| !r.summary).count(),
        }
    } else {
        DcgmOutcome::Failed(findings)
    }
}

fn failed(r: &TestResult) -> bool {
    matches!(r.status, Status::Fail | Status::Warn)
}

/// A failed summary is told by its test's failed entity results, when
/// there are any.
fn entity_failed(report: &Report, summary: &TestResult) -> bool {
    report.results.iter().any(|r| {
        !r.summary && failed(r) && r.test == summary.test && r.category == summary.category
    })
}

fn is_deployment(r: &TestResult) -> bool {
    r.category.eq_ignore_ascii_case("deployment") || r.test.eq_ignore_ascii_case("software")
}

fn is_hardware(r: &TestResult) -> bool {
    if !is_deployment(r) {
        return true;
    }
    let name = r.test.to_ascii_lowercase();
    r.warnings.iter().any(|w| {
        let text = w.text.to_ascii_lowercase();
        // DCGM_FR_EC_HARDWARE_* are 9..=15; ISOLATE is 2, RESET 6.
        w.category.is_some_and(|c| (9..=15).contains(&c))
            || matches!(w.severity, Some(2) | Some(6))
            || HARDWARE_DEPLOYMENT_WORDS.iter().any(|k| text.contains(k))
    }) || HARDWARE_DEPLOYMENT_WORDS.iter().any(|k| name.contains(k))
}

fn finding(by: &str, r: &TestResult) -> Finding {
    let action = if r.status == Status::Warn || !is_hardware(r) {
        Action::Warn
    } else {
        Action::Drain
    };
    let verb = if r.status == Status::Warn {
        "warned"
    } else {
        "failed"
    };
    let detail = if r.warnings.is_empty() {
        String::new()
    } else {
        let w: Vec<String> = r.warnings.iter().map(describe).collect();
        format!(": {}", one_line(&w.join("; ")))
    };
    let gpu = match r.entities.as_slice() {
        [Entity::Gpu(g)] => Some(*g),
        _ => None,
    };
    let on = match r.entities.as_slice() {
        [] => String::new(),
        [Entity::Gpu(g)] => format!(" on GPU{g}"),
        many => format!(" on {}", names(many)),
    };
    let message = format!("{by}: diagnostic test {:?} {verb}{on}{detail}", r.test);
    match gpu {
        Some(g) => Finding::gpu(
            "dcgm",
            action,
            g,
            None,
            format!("DCGM {} GPU{g} {verb}", r.test),
            message,
        ),
        None => Finding::node("dcgm", action, format!("DCGM {} {verb}", r.test), message),
    }
}

fn describe(w: &Warning) -> String {
    let mut tags = Vec::new();
    if let Some(id) = w.error_id {
        tags.push(format!("DCGM error {id}"));
    }
    if let Some(c) = w.category {
        tags.push(name(CATEGORIES, c));
    }
    if let Some(s) = w.severity {
        tags.push(format!("severity {}", name(SEVERITIES, s)));
    }
    if tags.is_empty() {
        w.text.clone()
    } else {
        format!("{} ({})", w.text, tags.join(", "))
    }
}

fn name(table: &[&str], i: u64) -> String {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .map_or_else(|| i.to_string(), |s| (*s).to_string())
}

fn names(entities: &[Entity]) -> String {
    entities
        .iter()
        .map(|e| match e {
            Entity::Gpu(g) => format!("GPU{g}"),
            Entity::Other(group, id) => format!("{group} {id}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why not every expected GPU is proven, or `None`. A GPU is proven by a
/// result of a test that ran on it (pass, or a deployment finding) and no
/// skipped or not-run test outside the deployment checks.
fn coverage_gap(report: &Report, expected: &[u32]) -> Option<String> {
    let mut ran = BTreeSet::new();
    let mut unproven: Vec<(u32, String)> = Vec::new();
    // DCGM 3.x deployment checks ran on the whole group: no GPU named.
    let group_ran = report.results.iter().any(|r| {
        !r.summary
            && r.entities.is_empty()
            && matches!(r.status, Status::Pass | Status::Fail | Status::Warn)
    });
    if group_ran {
        ran.extend(expected.iter().copied());
    }
    for r in report.results.iter().filter(|r| !r.summary) {
        for e in &r.entities {
            let Entity::Gpu(g) = e else { continue };
            match r.status {
                Status::Pass | Status::Fail | Status::Warn => {
                    ran.insert(*g);
                }
                Status::Skip | Status::NotRun if is_deployment(r) => {}
                s => unproven.push((*g, format!("{} {}", r.test, word(s)))),
            }
        }
    }
    let wanted: BTreeSet<u32> = if expected.is_empty() {
        ran.iter()
            .copied()
            .chain(unproven.iter().map(|u| u.0))
            .collect()
    } else {
        expected.iter().copied().collect()
    };
    if wanted.is_empty() {
        return (!group_ran).then(|| "no result names a GPU".to_string());
    }
    let gaps: Vec<String> = wanted
        .iter()
        .filter_map(|g| {
            let why: Vec<&str> = unproven
                .iter()
                .filter(|u| u.0 == *g)
                .map(|u| u.1.as_str())
                .collect();
            match (ran.contains(g), why.is_empty()) {
                (true, true) => None,
                (false, true) => Some(format!("GPU{g} has no result")),
                (_, false) => Some(format!("GPU{g} {}", why.join(", "))),
            }
        })
        .collect();
    (!gaps.is_empty()).then(|| format!("not every GPU proven: {}", gaps.join("; ")))
}

fn word(s: Status) -> &'static str {
    match s {
        Status::Skip => "skipped",
        Status::NotRun => "not run",
        Status::Unknown => "status unknown",
        Status::Pass => "passed",
        Status::Fail => "failed",
        Status::Warn => "warned",
    }
}
