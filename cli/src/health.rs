//! `gpu-health health-check`: the HealthCheckProgram run, by hand.

use gpu_health_core::config::{Config, ConfigError};
use gpu_health_core::finding::Action;
use gpu_health_core::ops::health::{self, HealthAction};

pub fn run(args: &[String], cfg: &Config, config_error: Option<&ConfigError>) -> i32 {
    if let Some(a) = args.first() {
        eprintln!("gpu-health health-check: unknown argument {a:?} (it takes none)");
        return 2;
    }
    if let Some(e) = config_error {
        eprintln!("gpu-health: configuration error (no drain in this run): {e}");
    }
    let node = crate::resume::this_node();
    gpu_health_core::logging::set_target(&node, cfg.log_file.as_deref());
    let report = health::run(cfg, config_error.is_none(), &node, gpu_health_core::time::unix_ms());
    for f in report.findings.iter().filter(|f| f.action > Action::Info) {
        println!("{:<6} {:<18} {}", f.action.severity(), f.check, f.message);
    }
    match &report.action {
        HealthAction::Nothing => println!("{node}: nothing to do"),
        HealthAction::Drained(r) => println!("{node}: drained: {r}"),
        HealthAction::NotDrained(why) => println!("{node}: NOT drained: {why}"),
        HealthAction::Returned => println!("{node}: returned to service"),
        HealthAction::StaysDrained(why) => println!("{node}: stays drained: {why}"),
    }
    report.exit_code()
}
