//! `gpu-health resume NODE`: return a node gpu-health drained, after the
//! checks pass once more on the node itself.

use gpu_health_core::config::{Config, ConfigError};
use gpu_health_core::finding::is_own_reason;
use gpu_health_core::ops::{dcgm, drain, drain_state, recovery};
use gpu_health_core::probe::ProbeOptions;
use gpu_health_core::{gate, logging, slurm};

const USAGE: &str = "usage: gpu-health resume NODE [--force]";

/// This node's Slurm name: SLURMD_NODENAME, else the short host name.
pub fn this_node() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(gate::hostname)
}

pub fn run(args: &[String], cfg: &Config, config_error: Option<&ConfigError>) -> i32 {
    let mut node = None;
    let mut force = false;
    for a in args {
        match a.as_str() {
            "--force" => force = true,
            s if s.starts_with('-') => {
                eprintln!("gpu-health resume: unknown option {s:?}\n{USAGE}");
                return 2;
            }
            s if node.is_none() => node = Some(s.to_string()),
            s => {
                eprintln!("gpu-health resume: one node at a time ({s:?})\n{USAGE}");
                return 2;
            }
        }
    }
    let Some(node) = node else {
        eprintln!("{USAGE}");
        return 2;
    };
    if !slurm::valid_node_name(&node) {
        eprintln!("gpu-health resume: {node:?} is not a node name");
        return 2;
    }
    let me = this_node();
    logging::set_target(&me, cfg.log_file.as_deref());
    if node != me && !force {
        eprintln!(
            "gpu-health resume: this is {me}, not {node}: the checks must run on the node \
             itself. Run it on {node} (or add --force when {node} is this machine under \
             another name)."
        );
        return 2;
    }
    if let Some(e) = config_error {
        eprintln!("gpu-health resume: configuration error, the checks cannot be trusted: {e}");
        return 2;
    }
    let info = match drain::scontrol(cfg).show_nodes(Some(&node)) {
        Ok(nodes) => nodes.into_iter().find(|n| n.name == node),
        Err(e) => {
            eprintln!("gpu-health resume: cannot ask Slurm about {node}: {e}");
            return 2;
        }
    };
    let Some(info) = info else {
        eprintln!("gpu-health resume: Slurm does not know {node}");
        return 2;
    };
    let reason = info.reason.clone().filter(|_| info.is_drained());
    let held = drain_state::load_held_back(&cfg.state_dir);
    match &reason {
        None if held.is_none() => {
            println!("{node} is not drained ({}); nothing to do", info.state);
            return 0;
        }
        Some(r) if !is_own_reason(r) => {
            eprintln!(
                "gpu-health resume: {node} is drained by someone else ({r:?}); gpu-health only \
                 resumes its own drains. If you mean it: scontrol update NodeName={node} State=RESUME"
            );
            return 2;
        }
        _ => {}
    }
    let problems = checks_now(cfg);
    if !problems.is_empty() {
        eprintln!("refusing to resume {node}: the checks still fail:");
        for p in &problems {
            eprintln!("  - {p}");
        }
        return 1;
    }
    drain_state::clear_held_back(&cfg.state_dir);
    let Some(reason) = reason else {
        println!("{node} is not drained; cleared the findings the drain brake held back");
        return 0;
    };
    match drain::resume_own(cfg, &node) {
        Ok(()) => {
            println!("resumed {node} (was: {reason})");
            0
        }
        Err(e) => {
            eprintln!("gpu-health resume: scontrol failed: {e}");
            2
        }
    }
}

/// Everything that stands against returning this node now: the checks
/// (read-only: the kernel-log cursor is not moved) and, when installed,
/// DCGM's diagnostic.
fn checks_now(cfg: &Config) -> Vec<String> {
    let now = gpu_health_core::time::unix_ms();
    let opts = ProbeOptions {
        topology: true,
        ..Default::default()
    };
    let mut check = gate::check_node(cfg, opts, now);
    if cfg.dcgm.before_return {
        let outcome = dcgm::run_diag(&cfg.dcgm, &[]);
        println!("{}", outcome.describe());
        check.findings.extend(outcome.findings());
    }
    recovery::clean_now(&check.findings, &check.snapshot, true)
}
