//! `gpu-health resume NODE`: return a node gpu-health drained, after the
//! checks pass once more on the node itself (gpu_health_core::run::resume).

use gpu_health_core::ids::NodeName;
use gpu_health_core::run::resume::{self, ResumeOutcome};
use gpu_health_core::run::RunContext;
use lexopt::ValueExt;

const USAGE: &str = "usage: gpu-health resume NODE [--force] [--forget-pending]";

pub fn run(args: &[String], start: impl FnOnce() -> RunContext) -> i32 {
    let (node, force, forget) = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!(
                "{USAGE}\n\nOn NODE itself: re-run the checks and, when they pass, resume the \
                 node's gpu-health drain and close its faults.\n  --force           \
                 NODE is this machine under another name\n  --forget-pending  \
                 on a node that is not drained, close the faults held back earlier \
                 (without it they stay, and the next check acts on them)"
            );
            return 0;
        }
        Err(e) => return crate::usage_error("resume", e, USAGE),
    };
    let ctx = start();
    let outcome = resume::run(&ctx, &node, force, forget);
    match &outcome {
        ResumeOutcome::Resumed(was) => println!("resumed {node} (was: {was})"),
        ResumeOutcome::NotDrained {
            state,
            pending,
            forgotten,
        } => {
            if pending.is_empty() {
                println!("{node} is not drained ({state}); nothing to do");
            } else if *forgotten {
                println!(
                    "{node} is not drained ({state}); forgot its {} pending fault(s): {}",
                    pending.len(),
                    pending.join("; ")
                );
            } else {
                println!(
                    "{node} is not drained ({state}) but has {} fault(s) held back, which the next check acts on: {}\n\
                     (to close them as looked at: gpu-health resume {node} --forget-pending)",
                    pending.len(),
                    pending.join("; ")
                );
            }
        }
        ResumeOutcome::Refused(problems) => {
            eprintln!("refusing to resume {node}: the checks still fail:");
            for p in problems {
                eprintln!("  - {p}");
            }
        }
        ResumeOutcome::Error(e) => eprintln!("gpu-health resume: {e}"),
    }
    outcome.exit_code()
}

/// `Ok(None)` for --help; else the node, `--force`, `--forget-pending`.
fn parse(args: &[String]) -> Result<Option<(NodeName, bool, bool)>, lexopt::Error> {
    use lexopt::Arg::{Long, Short, Value};
    let mut parser = lexopt::Parser::from_args(args);
    let mut node = None;
    let mut force = false;
    let mut forget = false;
    while let Some(arg) = parser.next()? {
        match arg {
            Long("force") => force = true,
            Long("forget-pending") => forget = true,
            Long("help") | Short('h') => return Ok(None),
            Value(v) if node.is_none() => {
                let v = v.string()?;
                let n = NodeName::parse(&v).map_err(|e| lexopt::Error::Custom(e.into()))?;
                node = Some(n);
            }
            Value(v) => {
                return Err(lexopt::Error::Custom(
                    format!("one node at a time ({:?})", v.to_string_lossy()).into(),
                ))
            }
            other => return Err(other.unexpected()),
        }
    }
    let node = node.ok_or(lexopt::Error::MissingValue {
        option: Some("NODE".into()),
    })?;
    Ok(Some((node, force, forget)))
}
