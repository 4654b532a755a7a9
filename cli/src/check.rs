//! `gpu-health check`: the prolog's probe and checks, printed, never acted on.

use gpu_health_core::finding::{drain_reason, Action, Finding};
use gpu_health_core::probe;
use gpu_health_core::run::{node_check, RunContext};
use gpu_health_core::text::printable;
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

const USAGE: &str = "usage: gpu-health check [--json | --npd]";

/// Kubernetes Node Problem Detector's custom plugins: exit 0 healthy, 1 a
/// problem, 2 unknown, and one short line (NPD keeps `max_output_length`
/// bytes of it, 80 by default).
const NPD_LINE_MAX: usize = 80;

pub fn run(args: &[String], start: impl FnOnce() -> RunContext) -> i32 {
    let mut json = false;
    let mut npd = false;
    let mut parser = lexopt::Parser::from_args(args);
    loop {
        match parser.next() {
            Ok(None) => break,
            Ok(Some(lexopt::Arg::Long("json"))) => json = true,
            Ok(Some(lexopt::Arg::Long("npd"))) => npd = true,
            Ok(Some(lexopt::Arg::Long("help") | lexopt::Arg::Short('h'))) => {
                println!("{USAGE}\n\nProbe this node as the Prolog does and print the findings; never drains.\nExit 0 healthy, 1 a fatal finding, 2 a usage or configuration error.\n  --npd  one status line for Kubernetes Node Problem Detector's custom plugins\n         (exit 0 healthy, 1 problem, 2 unknown)");
                return 0;
            }
            Ok(Some(arg)) => return crate::usage_error("check", arg.unexpected(), USAGE),
            Err(e) => return crate::usage_error("check", e, USAGE),
        }
    }
    let ctx = start();
    let opts = probe::ProbeOptions {
        topology: true,
        ..Default::default()
    };
    let check = node_check::check_node(&ctx, opts);
    if npd {
        let (code, line) = npd_status(ctx.config_ok(), &check.findings, check.snapshot.gpus.len());
        println!("{line}");
        return code;
    }
    let worst = check.findings.iter().map(|f| f.action).max();
    let report = Report {
        node: ctx.node.to_string(),
        config_error: ctx.loaded.error.as_ref().map(|e| e.to_string()),
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
    if !ctx.config_ok() {
        2
    } else if worst.is_some_and(Action::drains) {
        1
    } else {
        0
    }
}

/// The NPD exit code and status line. Unknown when the configuration
/// could not be used (the checks ran on defaults); a problem when a
/// finding would drain (the line is its drain reason); else healthy.
fn npd_status(config_ok: bool, findings: &[Finding], gpus: usize) -> (i32, String) {
    let (code, line) = if !config_ok {
        (
            2,
            "gpu-health: unknown, the configuration has an error".to_string(),
        )
    } else if let Some(reason) = drain_reason(findings) {
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

fn print_table(r: &Report<'_>) {
    println!(
        "node {}  driver {}  probe {:.1} ms  {} GPUs",
        r.node,
        printable(r.driver_version.unwrap_or("-")),
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
            printable(&f.message)
        );
    }
    for g in &r.gpus {
        let mine: Vec<&Finding> = r
            .findings
            .iter()
            .filter(|f| f.gpu == Some(g.index))
            .collect();
        let pci = printable(g.pci.unwrap_or("-"));
        if mine.is_empty() {
            let mig = if g.mig_mode == Some(true) {
                " (MIG mode: no per-job peak memory)"
            } else {
                ""
            };
            println!(
                "{:<5} {:<13} {:<22} {:<6} {}{mig}",
                g.index,
                pci,
                "all",
                "ok",
                printable(g.name.unwrap_or(""))
            );
        }
        for f in mine {
            println!(
                "{:<5} {:<13} {:<22} {:<6} {}",
                g.index,
                pci,
                f.check,
                f.action.severity(),
                printable(&f.message)
            );
        }
    }
    println!("verdict: {}", r.worst);
}

#[cfg(test)]
mod tests {
    use super::*;

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
            npd_status(true, &[], 8),
            (0, "gpu-health: ok, 8 GPUs".into())
        );
        assert_eq!(
            npd_status(true, std::slice::from_ref(&warn), 8),
            (0, "gpu-health: ok, 8 GPUs, 1 warnings".into())
        );
        let (code, line) = npd_status(true, &[warn, dbe], 8);
        assert_eq!(code, 1);
        assert!(line.starts_with("gpu-health: ECC DBE GPU3"), "{line}");
        assert!(line.len() <= NPD_LINE_MAX && line.ends_with("..."));
        assert_eq!(npd_status(false, &[], 8).0, 2);
    }
}
