//! `gpu-health config check [FILE] [--node NAME]`: every error of a
//! configuration file and a node's drop-in, each with its file, line and
//! table; exit 0 (none) or 1 (some), like `promtool check config`.

use std::path::PathBuf;

use gpu_health_core::config::{self, check_config, NamedBy};
use gpu_health_core::ids::{self, NodeName};
use gpu_health_core::text::printable;

use crate::commands::CONFIG_CHECK;
use crate::spec::Parsed;

pub fn run(p: &Parsed) -> i32 {
    let env = |k: &str| std::env::var(k).ok();
    let (path, named_by) = match (p.operand(0), p.value("config")) {
        (Some(_), Some(_)) => {
            return crate::usage_error(&CONFIG_CHECK, "give the file once: FILE or --config FILE")
        }
        (Some(f), None) | (None, Some(f)) => (PathBuf::from(f), NamedBy::Option),
        (None, None) => config::config_path(env),
    };
    let node = match p.value("node") {
        Some(n) => match NodeName::parse(n) {
            Ok(n) => n,
            Err(e) => return crate::usage_error(&CONFIG_CHECK, &format!("option '--node': {e}")),
        },
        None => ids::this_node(env).0,
    };
    let checked = check_config(&path, named_by.must_exist(), Some(&node));
    let shown = printable(&path.display().to_string()).into_owned();
    for problem in &checked.problems {
        println!("{}", printable(&problem.to_string()));
        if let Some(place) = &problem.place {
            println!("{}", place.caret());
        }
    }
    let files = match &checked.dropin {
        Some(d) => format!("{shown} and {}", printable(&d.display().to_string())),
        None => shown.clone(),
    };
    let n = checked.problems.len();
    if n > 0 {
        let affected = if checked.runs_affected() {
            "the Prolog, Epilog, health check and plugin fall back and drain nothing until fixed"
        } else if checked.problems.iter().any(|p| p.not_read) {
            "the runs do not read the paths named; the rest is in force"
        } else {
            "report-only: only `gpu-health report --power` is affected"
        };
        println!(
            "{n} error{} in {files} for node {node} ({affected})",
            if n == 1 { "" } else { "s" }
        );
        return 1;
    }
    if !checked.exists {
        println!(
            "{shown} does not exist ({}): the built-in defaults are in force for node {node}",
            named_by.describe()
        );
        return 0;
    }
    println!("{files}: OK for node {node}");
    if let Some(c) = &checked.config {
        println!(
            "  state_dir {}, kernel_log {}, records_dir {}",
            printable(&c.state_dir.display().to_string()),
            printable(&c.kernel_log.display().to_string()),
            printable(&c.records_dir().display().to_string())
        );
    }
    0
}
