//! `gpu-health accept`: the acceptance tier, now, on this node; printed,
//! never acted on (docs/acceptance.md).

use std::time::Duration;

use gpu_health_core::acceptance::{self, GateName, TierInput, TierOutcome, Verdict};
use gpu_health_core::fabric::read_fabric;
use gpu_health_core::probe::{self, ProbeOptions};
use gpu_health_core::run::RunContext;
use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::state::{StateDir, StateError, StateFile};
use gpu_health_core::text::printable;
use serde::Serialize;

use crate::spec::Parsed;

#[derive(Serialize)]
struct Report<'a> {
    node: String,
    config_error: Option<String>,
    /// Why the tier ran although a job runs (`--force`).
    forced_over: Option<String>,
    hcas: &'a [acceptance::Hca],
    #[serde(flatten)]
    outcome: &'a TierOutcome,
    exit: i32,
}

/// `--gates dcgm,rdma`.
fn gates_of(list: &str) -> Result<Vec<GateName>, String> {
    let mut out = Vec::new();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let Some(g) = GateName::ALL.iter().find(|g| g.as_str() == word) else {
            return Err(format!(
                "--gates: unknown gate {:?}: one of {}",
                printable(word),
                GateName::ALL.map(GateName::as_str).join(", ")
            ));
        };
        if !out.contains(g) {
            out.push(*g);
        }
    }
    if out.is_empty() {
        return Err("--gates: no gate named".into());
    }
    Ok(out)
}

/// Why the node is not idle, if it is not: a job's start snapshot (the
/// Prolog writes it, the Epilog removes it) or a compute process on a GPU.
fn job_running(state: &StateDir, snapshot: &NodeSnapshot) -> Option<String> {
    let jobs = state.job_starts();
    if !jobs.is_empty() {
        let list: Vec<String> = jobs.iter().take(5).map(|j| j.to_string()).collect();
        return Some(format!(
            "job{} {} started here and not ended (state directory)",
            if jobs.len() > 1 { "s" } else { "" },
            list.join(", ")
        ));
    }
    let busy: Vec<String> = snapshot
        .gpus
        .iter()
        .filter(|g| !g.running_processes.is_empty())
        .map(|g| format!("GPU{}", g.index))
        .collect();
    if busy.is_empty() {
        None
    } else {
        Some(format!("compute processes on {}", busy.join(", ")))
    }
}

pub fn run(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let gates = match p.value("gates").map(gates_of).transpose() {
        Ok(g) => g,
        Err(e) => return crate::usage_error(&crate::commands::ACCEPT, &e),
    };
    let ctx = start();
    // One tier at a time: beside a health check's tier (after a reboot),
    // each all-reduce would measure half the bandwidth and fail a good
    // node. A state directory this user cannot lock in holds no tier.
    let _tier = match ctx.state.lock_file(StateFile::TierLock, Duration::ZERO) {
        Err(StateError::Busy { .. }) => {
            eprintln!(
                "gpu-health accept: another acceptance tier runs on {} (a health check proving it after a boot); try again when it is done",
                ctx.node
            );
            return 2;
        }
        Err(e) => {
            log::info!("the tier's lock was not taken: {e}");
            None
        }
        Ok(lock) => lock,
    };
    let mut config = ctx.config().clone();
    if let Some(g) = gates {
        config.acceptance.gates = g;
    }
    let snapshot = probe::probe_with_deadline(
        config.nvml_library.as_deref(),
        ProbeOptions::default(),
        Duration::from_millis(config.nvml_deadline_ms),
    );
    let hcas = match read_fabric(&config.sysfs_root) {
        Ok(f) => acceptance::hcas_of(&config.acceptance, &f),
        Err(e) => {
            log::warn!("cannot list the HCAs: {e}");
            acceptance::hcas_of(&config.acceptance, &Default::default())
        }
    };
    let running = job_running(&ctx.state, &snapshot);
    let force = p.flag("force");
    let outcome = acceptance::run_tier(&TierInput {
        config: &config,
        snapshot: &snapshot,
        hcas: &hcas,
        search_path: &ctx.search_path,
        job_running: if force { None } else { running.clone() },
        had: &Default::default(),
    });
    let config_error = ctx.loaded.error.as_ref().map(|e| e.to_string());
    // A configuration error: the tier ran on the fallback, which is no
    // proof of the site's node.
    let exit = if config_error.is_some() {
        2.max(outcome.exit_code())
    } else {
        outcome.exit_code()
    };
    if p.flag("json") {
        let report = Report {
            node: ctx.node.to_string(),
            config_error,
            forced_over: running.filter(|_| force),
            hcas: &hcas,
            outcome: &outcome,
            exit,
        };
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("gpu-health accept: {e}");
                return 2;
            }
        }
        return exit;
    }
    if let Some(e) = &config_error {
        println!(
            "configuration error: {}\n  (ran with {}: gpu-health config check)",
            printable(e),
            ctx.loaded.fallback
        );
    }
    print_table(&ctx.node.to_string(), &outcome, running.filter(|_| force));
    exit
}

fn print_table(node: &str, outcome: &TierOutcome, forced_over: Option<String>) {
    let model = outcome.model.as_deref().unwrap_or("no GPU");
    println!("{node}: {}", printable(model));
    if let Some(why) = forced_over {
        println!(
            "(--force: {}; the figures measure a shared node)",
            printable(&why)
        );
    }
    if let Some(why) = &outcome.refused {
        println!("refused: {} (--force runs it anyway)", printable(why));
        return;
    }
    println!(
        "{:<15} {:<9} {:<11} {:>12} {:>12}  detail",
        "gate", "on", "verdict", "figure", "threshold"
    );
    let figure = |v: Option<f64>, unit: &str| match v {
        Some(v) => format!("{v:.1} {unit}"),
        None => "-".into(),
    };
    for r in &outcome.results {
        println!(
            "{:<15} {:<9} {:<11} {:>12} {:>12}  {}",
            r.gate.as_str(),
            r.subject
                .as_deref()
                .map_or_else(|| "node".into(), printable),
            r.verdict.as_str(),
            figure(r.figure, r.unit),
            figure(r.threshold, r.unit),
            printable(&r.detail)
        );
    }
    let failed = outcome
        .results
        .iter()
        .filter(|r| r.verdict == Verdict::Failed)
        .count();
    let unjudged = outcome
        .results
        .iter()
        .filter(|r| r.verdict == Verdict::NotJudged)
        .count();
    for f in outcome.findings.iter().filter(|f| f.action.drains()) {
        println!("would drain: {}", printable(&f.summary));
    }
    match (failed, unjudged) {
        (0, 0) => println!("{node}: every gate passed"),
        (0, n) => println!("{node}: {n} not judged (see detail; nothing failed)"),
        (n, _) => println!("{node}: {n} failed"),
    }
}
