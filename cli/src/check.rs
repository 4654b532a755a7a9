//! `gpu-health check`: the prolog's probe and checks, printed, never acted on.

use gpu_health_core::finding::{Action, Finding};
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
}

const USAGE: &str = "usage: gpu-health check [--json]";

pub fn run(args: &[String], start: impl FnOnce() -> RunContext) -> i32 {
    let mut json = false;
    let mut parser = lexopt::Parser::from_args(args);
    loop {
        match parser.next() {
            Ok(None) => break,
            Ok(Some(lexopt::Arg::Long("json"))) => json = true,
            Ok(Some(lexopt::Arg::Long("help") | lexopt::Arg::Short('h'))) => {
                println!("{USAGE}\n\nProbe this node as the Prolog does and print the findings; never drains.\nExit 0 healthy, 1 a fatal finding, 2 a usage or configuration error.");
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
            println!(
                "{:<5} {:<13} {:<22} {:<6} {}",
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
