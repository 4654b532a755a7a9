//! `gpu-health health-check`: the HealthCheckProgram run, by hand.

use gpu_health_core::finding::Action;
use gpu_health_core::run::health_check::{self, HealthAction};
use gpu_health_core::run::RunContext;

const USAGE: &str = "usage: gpu-health health-check";

pub fn run(args: &[String], start: impl FnOnce() -> RunContext) -> i32 {
    let mut parser = lexopt::Parser::from_args(args);
    match parser.next() {
        Ok(None) => {}
        Ok(Some(lexopt::Arg::Long("help") | lexopt::Arg::Short('h'))) => {
            println!("{USAGE}\n\nThe checks, drains and automatic return of HealthCheckProgram.");
            return 0;
        }
        Ok(Some(arg)) => return crate::usage_error("health-check", arg.unexpected(), USAGE),
        Err(e) => return crate::usage_error("health-check", e, USAGE),
    }
    let ctx = start();
    let report = health_check::run(&ctx);
    for f in report.findings.iter().filter(|f| f.action > Action::Info) {
        println!("{:<6} {:<18} {}", f.action.severity(), f.check, f.message);
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
    report.exit_code()
}
