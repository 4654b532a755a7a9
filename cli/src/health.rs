//! `gpu-health health-check`: the HealthCheckProgram run, by hand.

use gpu_health_core::finding::Action;
use gpu_health_core::run::health_check::{self, HealthAction};
use gpu_health_core::run::RunContext;
use gpu_health_core::text::printable;

pub fn run(ctx: RunContext) -> i32 {
    if let Some(e) = &ctx.loaded.error {
        println!(
            "configuration error: {}\n  (checked with {}; nothing drains in this run: gpu-health config check)",
            printable(&e.to_string()),
            ctx.loaded.fallback
        );
    }
    // What the run logs for slurmd's log (its findings, why it did not
    // drain) is printed below once; the log file keeps the lines.
    gpu_health_core::logging::set_stderr_level(None);
    let report = health_check::run(&ctx);
    gpu_health_core::logging::set_stderr_level(Some(log::Level::Error));
    for f in report.findings.iter().filter(|f| f.action > Action::Info) {
        println!(
            "{:<17} {:<18} {}",
            f.action.as_str(),
            f.check,
            printable(&f.message)
        );
    }
    let node = &report.node;
    match &report.action {
        HealthAction::Nothing => println!("{node}: nothing to do"),
        HealthAction::Drained(r) => println!("{node}: drained: {r}"),
        HealthAction::NotDrained(why) => println!("{node}: NOT drained: {why}"),
        HealthAction::Returned => println!("{node}: returned to service"),
        HealthAction::StaysDrained(why) => println!("{node}: stays drained: {why}"),
        HealthAction::Busy(why) => println!("{node}: {why}"),
    }
    if let Some(log) = &ctx.config().log_file {
        println!(
            "(the run's log lines: {})",
            printable(&log.display().to_string())
        );
    }
    report.exit_code()
}
