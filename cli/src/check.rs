//! `gpu-health check`: the prolog's probe and checks, printed, never acted on.

use gpu_health_core::checks::JobContext;
use gpu_health_core::config::ConfigError;
use gpu_health_core::finding::{drain_reason, Action, Finding};
use gpu_health_core::ids::JobId;
use gpu_health_core::ledger::NodeState;
use gpu_health_core::probe;
use gpu_health_core::run::preview::{self, WouldDo};
use gpu_health_core::run::{node_check, RunContext};
use gpu_health_core::text::printable;
use gpu_health_core::verdict::{parse_gpu_list, JobVerdict, Mode};
use serde::Serialize;

use crate::spec::Parsed;

#[derive(Serialize)]
struct Report<'a> {
    node: String,
    config_error: Option<String>,
    probe_us: u64,
    driver_version: Option<&'a str>,
    gpus: Vec<GpuLine<'a>>,
    findings: &'a [Finding],
    /// The gravest action of the findings (`info`, `warn`,
    /// `drain-until-clean`, `drain`), `ok` without findings.
    worst: &'static str,
    /// What the Prolog would do for a job starting now: `drain` (with the
    /// reason), `warn` (strict jobs refused), `hold` (configuration
    /// error), `nothing`.
    prolog_would: PrologWould,
    /// The acceptance tier the node waits for after a boot, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    acceptance_due: Option<String>,
    /// Where the node is in its lifecycle, as its fault ledger says
    /// (docs/operations.md, "Node lifecycle").
    lifecycle: &'static str,
}

#[derive(Serialize)]
struct PrologWould {
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    text: String,
}

impl PrologWould {
    fn of(w: &WouldDo) -> PrologWould {
        let (action, reason) = match w {
            WouldDo::Drain { reason, kind } => (kind.as_str(), Some(reason.clone())),
            WouldDo::Hold { why } => ("hold", Some(why.clone())),
            WouldDo::WarnStrict { .. } => ("warn", None),
            WouldDo::Nothing => ("nothing", None),
        };
        PrologWould {
            action,
            reason,
            text: w.describe(),
        }
    }
}

/// The job `--gpus` or `--job` names, if one; an error says why not.
fn job_of(p: &Parsed, ctx: &RunContext) -> Result<Option<JobContext>, String> {
    if let Some(list) = p.value("gpus") {
        let gpus = parse_gpu_list(list).map_err(|e| format!("--gpus: {e}"))?;
        return Ok(Some(JobContext {
            gpus,
            mode: Mode::Warn,
        }));
    }
    let Some(id) = p.value("job") else {
        return Ok(None);
    };
    let job = JobId::parse(id).map_err(|e| format!("--job: {e}"))?;
    match ctx.state.load::<JobVerdict>(job) {
        Ok(Some(v)) => Ok(Some(JobContext {
            gpus: v.job_gpus,
            mode: v.mode,
        })),
        Ok(None) => Err(format!(
            "--job {job}: no verdict of that job on this node (its Prolog did not run here)"
        )),
        Err(e) => Err(format!("--job {job}: {e}")),
    }
}

#[derive(Serialize)]
struct GpuLine<'a> {
    index: u32,
    name: Option<&'a str>,
    uuid: Option<&'a str>,
    pci: Option<&'a str>,
    lost: bool,
    /// The values nvidia-smi, gpustat and nvitop also show (the NVML
    /// stand-in's test compares them).
    memory_total_bytes: Option<u64>,
    memory_used_bytes: Option<u64>,
    temperature_c: Option<u32>,
    power_usage_mw: Option<u32>,
    power_limit_mw: Option<u32>,
    fan_speed_pct: Option<u32>,
    persistence_mode: Option<bool>,
    mig_mode: Option<bool>,
}

/// Kubernetes Node Problem Detector's custom plugins: exit 0 healthy, 1 a
/// problem, 2 unknown, and one short line (NPD keeps `max_output_length`
/// bytes of it, 80 by default).
const NPD_LINE_MAX: usize = 80;

pub fn run(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let ctx = start();
    let job = match job_of(p, &ctx) {
        Ok(j) => j,
        Err(e) => return crate::usage_error(&crate::commands::CHECK, &e),
    };
    let opts = probe::ProbeOptions {
        topology: true,
        ..Default::default()
    };
    let check = node_check::check_node_for(&ctx, opts, job.as_ref());
    let would = preview::prolog_would(&ctx, &check);
    let config_error = ctx.loaded.error.as_ref().map(|e| e.to_string());
    if p.flag("npd") {
        let (code, line) = npd_status(
            ctx.loaded.error.as_ref().map(where_in_file).as_deref(),
            &check.findings,
            check.snapshot.gpus.len(),
        );
        println!("{line}");
        return code;
    }
    let worst = check.findings.iter().map(|f| f.action).max();
    let report = Report {
        node: ctx.node.to_string(),
        config_error,
        probe_us: check.snapshot.probe_us,
        driver_version: check.snapshot.driver_version.as_deref(),
        gpus: check
            .snapshot
            .gpus
            .iter()
            .map(|g| GpuLine {
                index: g.index,
                name: g.name.as_deref(),
                uuid: g.uuid.as_deref(),
                pci: g.pci_bus_id.as_deref(),
                lost: g.lost,
                memory_total_bytes: g.memory_total_bytes,
                memory_used_bytes: g.memory_used_bytes,
                temperature_c: g.temperature_c,
                power_usage_mw: g.power_usage_mw,
                power_limit_mw: g.power_limit_mw,
                fan_speed_pct: g.fan_speed_pct,
                persistence_mode: g.persistence_mode,
                mig_mode: g.mig_mode,
            })
            .collect(),
        findings: &check.findings,
        worst: worst.map_or("ok", Action::as_str),
        prolog_would: PrologWould::of(&would),
        acceptance_due: preview::acceptance_due(&ctx),
        lifecycle: gpu_health_core::run::act::peek(&ctx)
            .map_or(NodeState::InService, |l| NodeState::of(&l))
            .as_str(),
    };
    if p.flag("json") {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("gpu-health check: {e}");
                return 2;
            }
        }
    } else {
        print_table(&report, ctx.loaded.fallback);
    }
    if !ctx.config_ok() {
        2
    } else if matches!(would, WouldDo::Drain { .. }) {
        1
    } else {
        0
    }
}

/// Where a configuration error is, briefly (NPD keeps 80 bytes): the
/// file's name and, when known, the line.
fn where_in_file(e: &ConfigError) -> String {
    let (path, line) = match e {
        ConfigError::Parse { path, place, .. } => (path, place.as_ref().map(|p| p.line)),
        ConfigError::Read { path, .. } | ConfigError::Invalid { path, .. } => (path, None),
    };
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    match line {
        Some(l) => format!("{name} line {l}"),
        None => name,
    }
}

/// The findings gravest first (then as found): a line cut short keeps
/// the findings that matter most.
fn gravest_first(findings: &[Finding]) -> Vec<Finding> {
    let mut sorted = findings.to_vec();
    sorted.sort_by_key(|f| std::cmp::Reverse(f.action));
    sorted
}

/// The NPD exit code and status line. Unknown when the configuration
/// could not be used (the checks ran on a fallback); a problem when a
/// finding would drain (the line is its drain reason, gravest first);
/// else healthy.
fn npd_status(config_error: Option<&str>, findings: &[Finding], gpus: usize) -> (i32, String) {
    let (code, line) = if let Some(e) = config_error {
        (
            2,
            format!("gpu-health: unknown, configuration error in {e}"),
        )
    } else if let Some(reason) = drain_reason(&gravest_first(findings)) {
        (1, reason)
    } else {
        let warnings = findings.iter().filter(|f| f.action == Action::Warn).count();
        let mut line = format!("gpu-health: ok, {gpus} GPUs");
        if warnings > 0 {
            line.push_str(&format!(", {warnings} warnings"));
        }
        (0, line)
    };
    let mut line = printable(&line).into_owned();
    if line.len() > NPD_LINE_MAX {
        let mut cut = NPD_LINE_MAX - 3;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str("...");
    }
    (code, line)
}

const ROW: usize = 22;

fn row(gpu: &str, pci: &str, check: &str, action: &str, message: &str) {
    println!(
        "{gpu:<5} {pci:<13} {check:<ROW$} {action:<17} {}",
        printable(message)
    );
}

fn print_table(r: &Report<'_>, fallback: &str) {
    if let Some(e) = &r.config_error {
        println!(
            "configuration error: {}\n  (checked with {fallback}; the Prolog would drain nothing until it is fixed: gpu-health config check)",
            printable(e)
        );
    }
    println!(
        "node {}  driver {}  probe {:.1} ms  {} GPUs",
        r.node,
        printable(r.driver_version.unwrap_or("-")),
        r.probe_us as f64 / 1000.0,
        r.gpus.len()
    );
    row("GPU", "PCI", "CHECK", "ACTION", "MESSAGE");
    for f in r.findings.iter().filter(|f| f.gpu.is_none()) {
        row("node", "-", &f.check, &action_word(f), &f.message);
    }
    for g in &r.gpus {
        let mine: Vec<&Finding> = r
            .findings
            .iter()
            .filter(|f| f.gpu == Some(g.index))
            .collect();
        let pci = printable(g.pci.unwrap_or("-"));
        let index = g.index.to_string();
        if mine.is_empty() {
            let mig = if g.mig_mode == Some(true) {
                " (MIG mode: no per-job peak memory)"
            } else {
                ""
            };
            let name = format!("{}{mig}", g.name.unwrap_or(""));
            row(&index, &pci, "all", "ok", &name);
        }
        for f in mine {
            row(&index, &pci, &f.check, &action_word(f), &f.message);
        }
    }
    match &r.config_error {
        Some(_) => println!(
            "verdict: {} by {fallback}; configuration error: nothing would drain",
            r.worst
        ),
        None => println!("verdict: {}", r.worst),
    }
    println!("lifecycle: {}", r.lifecycle);
    println!("{}", printable(&r.prolog_would.text));
    if let Some(due) = &r.acceptance_due {
        println!("{}", printable(due));
    }
}

/// The action, and `(forgeable)` for a finding read from a line users can
/// write (it never drains, whatever its code).
fn action_word(f: &Finding) -> String {
    if f.forgeable {
        format!("{} (forgeable)", f.action.as_str())
    } else {
        f.action.as_str().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(action: Action, gpu: u32, summary: &str) -> Finding {
        Finding::gpu("xid", action, gpu, None, summary.into(), "m".into())
    }

    #[test]
    fn npd_convention() {
        let warn = Finding::node("x", Action::Warn, "hot".into(), "m".into());
        let dbe = Finding::gpu(
            "ecc-uncorrected",
            Action::Drain,
            3,
            Some("0000:3b:00.0"),
            "ECC DBE GPU3 0000:3b:00.0 and a long tail of words to pass eighty bytes".into(),
            "m".into(),
        );
        assert_eq!(
            npd_status(None, &[], 8),
            (0, "gpu-health: ok, 8 GPUs".into())
        );
        assert_eq!(
            npd_status(None, std::slice::from_ref(&warn), 8),
            (0, "gpu-health: ok, 8 GPUs, 1 warnings".into())
        );
        let (code, line) = npd_status(None, &[warn, dbe], 8);
        assert_eq!(code, 1);
        assert!(line.starts_with("gpu-health: ECC DBE GPU3"), "{line}");
        assert!(line.len() <= NPD_LINE_MAX && line.ends_with("..."));
        let (code, line) = npd_status(Some("gpu-health.toml line 3"), &[], 8);
        assert_eq!(code, 2);
        assert_eq!(
            line,
            "gpu-health: unknown, configuration error in gpu-health.toml line 3"
        );
    }

    /// Issue 24: the NPD line listed findings in GPU order, so the cut
    /// dropped the drain; the gravest come first now.
    #[test]
    fn npd_keeps_the_drain_when_it_cuts() {
        let findings = [
            xid(
                Action::DrainUntilClean,
                0,
                "Xid 31 GPU0 0000:18:00.0 pid=41234 and more",
            ),
            xid(
                Action::DrainUntilClean,
                1,
                "Xid 31 GPU1 0000:2a:00.0 pid=41235",
            ),
            xid(Action::Drain, 3, "Xid 79 GPU3 0000:5d:00.0"),
        ];
        let (code, line) = npd_status(None, &findings, 8);
        assert_eq!(code, 1);
        assert!(
            line.starts_with("gpu-health: Xid 79 GPU3 0000:5d:00.0; "),
            "{line}"
        );
        assert!(line.len() <= NPD_LINE_MAX);
    }
}
