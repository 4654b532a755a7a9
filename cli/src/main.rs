//! gpu-health: the admin command. Thin wiring over gpu_health_core.

mod check;
mod health;
mod report;
mod resume;
mod xids;

use gpu_health_core::{config, gate, logging};

const USAGE: &str = "\
usage: gpu-health <command> [options]

commands:
  check [--json]            probe this node and print its findings (never drains)
                            exit 0 healthy, 1 fatal finding, 2 usage/config error
  xids [--json] [--no-probe] [FILE]
                            list NVIDIA Xid events in FILE or the configured kernel log
  report [--job ID] [--user NAME] [--since DATE] [--json|--csv]
                            per-job GPU energy, peak memory, health deltas
  health-check              the HealthCheckProgram run: checks, drains, automatic return
  resume NODE [--force]     on NODE itself: re-run the checks, resume a gpu-health drain if clean
  help, --help              this text (also: gpu-health <command> --help)
  --version                 the version

Configuration: $GPU_HEALTH_CONFIG, else gpu-health.toml beside $SLURM_CONF,
else /etc/slurm/gpu-health.toml (see docs/configuration.md).
";

fn main() {
    logging::init("gpu-health", log::Level::Error);
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() > 1 && args[1..].iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        std::process::exit(0);
    }
    let code = match args.first().map(String::as_str) {
        Some("--version" | "version") => {
            println!("gpu-health {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Some("check") => with_config(|cfg, err| check::run(&args[1..], cfg, err)),
        Some("xids") => with_config(|cfg, _| xids::run(&args[1..], cfg)),
        Some("report") => with_config(|cfg, _| report::run(&args[1..], cfg)),
        Some("health-check") => with_config(|cfg, err| health::run(&args[1..], cfg, err)),
        Some("resume") => with_config(|cfg, err| resume::run(&args[1..], cfg, err)),
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            0
        }
        Some(other) => {
            eprintln!("gpu-health: unknown command {other:?}\n\n{USAGE}");
            2
        }
        None => {
            eprint!("{USAGE}");
            2
        }
    };
    std::process::exit(code);
}

/// Load the configuration for this node and hand it to a command.
fn with_config(f: impl FnOnce(&config::Config, Option<&config::ConfigError>) -> i32) -> i32 {
    let node = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(gate::hostname);
    let loaded = config::load_or_default(Some(&node));
    f(&loaded.config, loaded.error.as_ref())
}
