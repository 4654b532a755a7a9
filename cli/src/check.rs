//! `gpu-health check`: the prolog's probe and checks, printed, never acted on.

use gpu_health_core::config::{Config, ConfigError};
use gpu_health_core::finding::{Action, Finding};
use gpu_health_core::{gate, probe};
use serde::Serialize;

#[derive(Serialize)]
struct Report<'a> {
    node: String,
    config_error: Option<String>,
    probe_us: u64,
    driver_version: Option<&'a str>,
    gpus: Vec<GpuLine<'a>>,
    findings: &'a [Finding],
    worst: &'static str,
}

#[derive(Serialize)]
struct GpuLine<'a> {
    index: u32,
    name: Option<&'a str>,
    uuid: Option<&'a str>,
    pci: Option<&'a str>,
    lost: bool,
}

pub fn run(args: &[String], cfg: &Config, config_error: Option<&ConfigError>) -> i32 {
    let mut json = false;
    for a in args {
        match a.as_str() {
            "--json" => json = true,
            other => {
                eprintln!(
                    "gpu-health check: unknown option {other:?} (usage: gpu-health check [--json])"
                );
                return 2;
            }
        }
    }
    if let Some(e) = config_error {
        eprintln!("gpu-health: configuration error: {e}");
    }
    let now = gpu_health_core::time::unix_ms();
    let opts = probe::ProbeOptions {
        topology: true,
        ..Default::default()
    };
    let check = gate::check_node(cfg, opts, now);
    let worst = check.findings.iter().map(|f| f.action).max();
    let report = Report {
        node: gate::hostname(),
        config_error: config_error.map(|e| e.to_string()),
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
            })
            .collect(),
        findings: &check.findings,
        worst: worst.map(Action::severity).unwrap_or("ok"),
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("gpu-health check: {e}");
                return 2;
            }
        }
    } else {
        print_table(&report);
    }
    if config_error.is_some() {
        2
    } else if worst.is_some_and(Action::drains) {
        1
    } else {
        0
    }
}

fn print_table(r: &Report<'_>) {
    println!(
        "node {}  driver {}  probe {:.1} ms  {} GPUs",
        r.node,
        r.driver_version.unwrap_or("-"),
        r.probe_us as f64 / 1000.0,
        r.gpus.len()
    );
    println!(
        "{:<5} {:<13} {:<22} {:<6} MESSAGE",
        "GPU", "PCI", "CHECK", "LEVEL"
    );
    for f in r.findings.iter().filter(|f| f.gpu.is_none()) {
        println!(
            "{:<5} {:<13} {:<22} {:<6} {}",
            "node",
            "-",
            f.check,
            f.action.severity(),
            f.message
        );
    }
    for g in &r.gpus {
        let mine: Vec<&Finding> = r
            .findings
            .iter()
            .filter(|f| f.gpu == Some(g.index))
            .collect();
        let pci = g.pci.unwrap_or("-");
        if mine.is_empty() {
            println!(
                "{:<5} {:<13} {:<22} {:<6} {}",
                g.index,
                pci,
                "all",
                "ok",
                g.name.unwrap_or("")
            );
        }
        for f in mine {
            println!(
                "{:<5} {:<13} {:<22} {:<6} {}",
                g.index,
                pci,
                f.check,
                f.action.severity(),
                f.message
            );
        }
    }
    println!("verdict: {}", r.worst);
}
