//! gpu-health: the admin command. Thin wiring over gpu_health_core; each
//! command parses its own arguments (lexopt) and prints its own --help.

mod check;
mod health;
mod nccl_env;
mod report;
mod resume;
mod step_end;
mod watch;
mod xids;

use gpu_health_core::logging;
use gpu_health_core::run::{RunContext, StateAccess};
use lexopt::ValueExt;

const USAGE: &str = "\
usage: gpu-health <command> [options]

commands:
  check [--json]            probe this node and print its findings (never drains)
                            exit 0 healthy, 1 fatal finding, 2 usage/config error
  xids [--json] [--no-probe] [FILE]
                            list NVIDIA Xid events in FILE or the configured kernel log
  xids --catalog [--json]   the built-in Xid table (default action, NVIDIA's action)
  watch [-l SECONDS] [--count N] [--csv|--json]
                            power, temperature, fan and health of each GPU, every SECONDS
  nccl-env [--sysfs-root DIR] [--plugstack FILE] [--json]
                            the NCCL variables the SPANK plugin would set here, and why
  report [--job ID] [--user NAME] [--since DATE] [--json|--csv] [--dir DIR]
                            per-job GPU energy, peak memory, health deltas
  health-check              the HealthCheckProgram run: checks, drains, automatic return
  resume NODE [--force]     on NODE itself: re-run the checks, resume a gpu-health drain if clean
  step-end --gpus LIST --since-ms MS
                            (run by the SPANK plugin) the step's GPUs that came near out of memory
  help, --help              this text (also: gpu-health <command> --help)
  --version                 the version

Configuration: $GPU_HEALTH_CONFIG, else gpu-health.toml beside $SLURM_CONF,
else /etc/slurm/gpu-health.toml (see docs/configuration.md).
";

fn main() {
    // `gpu-health xids | head`: a closed pipe ends the command quietly,
    // as for any Unix filter, instead of a panic on the next print.
    // SAFETY: setting a signal's disposition to the default before any
    // other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    logging::init("gpu-health", log::Level::Error);
    let code = match dispatch(lexopt::Parser::from_env()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpu-health: {e}\n\n{USAGE}");
            2
        }
    };
    std::process::exit(code);
}

fn dispatch(mut parser: lexopt::Parser) -> Result<i32, lexopt::Error> {
    use lexopt::Arg::{Long, Short, Value};
    let command = match parser.next()? {
        None => {
            eprint!("{USAGE}");
            return Ok(2);
        }
        Some(Long("help") | Short('h')) => {
            print!("{USAGE}");
            return Ok(0);
        }
        Some(Long("version")) => {
            println!("gpu-health {}", env!("CARGO_PKG_VERSION"));
            return Ok(0);
        }
        Some(Value(v)) => v.string()?,
        Some(other) => return Err(other.unexpected()),
    };
    // The rest belongs to the command, which parses it with its own lexopt
    // parser (and answers its own --help).
    let rest: Vec<String> = parser
        .raw_args()?
        .map(|a| a.into_string().map_err(lexopt::Error::NonUnicodeValue))
        .collect::<Result<_, _>>()?;
    let access = match command.as_str() {
        "health-check" | "resume" => StateAccess::Write,
        _ => StateAccess::Read,
    };
    let start = || RunContext::start(|k| std::env::var(k).ok(), None, access);
    Ok(match command.as_str() {
        "check" => check::run(&rest, start),
        "xids" => xids::run(&rest, start),
        "report" => report::run(&rest, &start().loaded.config),
        "nccl-env" => nccl_env::run(&rest, &start().loaded.config),
        "watch" => watch::run(&rest, start),
        "health-check" => health::run(&rest, start),
        "resume" => resume::run(&rest, start),
        "step-end" => step_end::run(&rest),
        "help" => {
            print!("{USAGE}");
            0
        }
        "version" => {
            println!("gpu-health {}", env!("CARGO_PKG_VERSION"));
            0
        }
        other => {
            eprintln!(
                "gpu-health: unknown command {:?}\n\n{USAGE}",
                gpu_health_core::text::printable(other)
            );
            2
        }
    })
}

/// The usage error of a command: printed with its usage, exit 2.
fn usage_error(command: &str, e: lexopt::Error, usage: &str) -> i32 {
    eprintln!("gpu-health {command}: {e}\n{usage}");
    2
}
