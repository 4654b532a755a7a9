//! `gpu-health resume NODE`: return a node gpu-health drained, after the
//! checks pass once more on the node itself (gpu_health_core::run::resume).

use gpu_health_core::checks;
use gpu_health_core::ids::NodeName;
use gpu_health_core::run::resume::{self, ResumeOutcome};
use gpu_health_core::run::RunContext;
use gpu_health_core::text::printable;

use crate::spec::Parsed;

pub fn run(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let node = match p.operand(0).map(NodeName::parse) {
        Some(Ok(n)) => n,
        Some(Err(e)) => return crate::usage_error(&crate::commands::RESUME, &e.to_string()),
        None => return crate::usage_error(&crate::commands::RESUME, "NODE is missing"),
    };
    let (force, forget) = (p.flag("force"), p.flag("forget-pending"));
    let ctx = start();
    let dcgm = &ctx.config().dcgm;
    if ctx.config_ok()
        && dcgm.enabled
        && dcgm.before_return
        && checks::dcgm::resolve(dcgm, &ctx.search_path).is_none()
    {
        // Issue 24: the run says so in its log only.
        println!(
            "note: [dcgm] is enabled but {} is not installed: the checks run without DCGM's diagnostic",
            printable(&dcgm.dcgmi.display().to_string())
        );
    }
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
