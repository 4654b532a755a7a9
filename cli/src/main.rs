//! gpu-health: the admin command. Thin wiring over gpu_health_core: each
//! command's options are read by its table (`commands`, `spec`), which
//! also gives its `--help`, the man page and the shell completions.

mod accept;
mod check;
mod commands;
mod config_cmd;
mod generate;
mod health;
mod nccl_env;
mod report;
mod resume;
mod spec;
mod step_end;
mod watch;
mod xids;

use std::path::Path;

use gpu_health_core::logging;
use gpu_health_core::run::{RunContext, StateAccess};
use gpu_health_core::text::printable;

use spec::{CommandSpec, Outcome, Parsed};

fn main() {
    // `gpu-health xids | head`: a closed pipe ends the command quietly,
    // as for any Unix filter, instead of a panic on the next print.
    // SAFETY: setting a signal's disposition to the default before any
    // other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    logging::init_terminal("gpu-health", log::Level::Error);
    let args: Result<Vec<String>, _> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect();
    let code = match args {
        Ok(args) => dispatch(&args),
        Err(bad) => {
            eprintln!(
                "gpu-health: argument {:?} is not UTF-8\n\n{}",
                bad,
                generate::usage()
            );
            2
        }
    };
    std::process::exit(code);
}

fn dispatch(args: &[String]) -> i32 {
    let Some(first) = args.first() else {
        eprint!("{}", generate::usage());
        return 2;
    };
    match first.as_str() {
        "-h" | "--help" => {
            print!("{}", generate::usage());
            return 0;
        }
        "--version" | "-V" => return version(),
        _ => {}
    }
    // `config check`: a command of two words.
    let (name, rest) = match (first.as_str(), args.get(1).map(String::as_str)) {
        ("config", Some("-h" | "--help")) => {
            print!("{}", generate::help(&commands::CONFIG_CHECK));
            return 0;
        }
        ("config", Some(sub)) if !sub.starts_with('-') => (format!("config {sub}"), &args[2..]),
        ("config", _) => {
            eprintln!(
                "gpu-health config: which? gpu-health config check [FILE]\n\n{}",
                generate::usage()
            );
            return 2;
        }
        (name, _) => (name.to_string(), &args[1..]),
    };
    let Some(spec) = commands::spec_of(&name) else {
        eprintln!(
            "gpu-health: unknown command {:?}\n\n{}",
            printable(&name),
            generate::usage()
        );
        return 2;
    };
    match spec::parse(spec, rest) {
        Err(e) => usage_error(spec, &e),
        Ok(Outcome::Help) => {
            print!("{}", generate::help(spec));
            0
        }
        Ok(Outcome::Run(parsed)) => run(spec, &parsed),
    }
}

/// The start of every run, with `--config` when given. A configuration
/// error goes to stderr as it is found (for a pipe into jq as much as for
/// a person), and each command shows it in its own output too.
fn start(parsed: &Parsed, access: StateAccess) -> RunContext {
    RunContext::start(
        |k| std::env::var(k).ok(),
        parsed.value("config").map(Path::new),
        access,
    )
}

fn run(spec: &'static CommandSpec, p: &Parsed) -> i32 {
    let read = || start(p, StateAccess::Read);
    match spec.name {
        "check" => check::run(p, read),
        "xids" => xids::run(p, read),
        "report" => report::run_parsed(p, read),
        "nccl-env" => nccl_env::run(p, read),
        "watch" => watch::run(p, read),
        "health-check" => health::run(start(p, StateAccess::Write)),
        "resume" => resume::run(p, || start(p, StateAccess::Write)),
        "accept" => accept::run(p, read),
        "step-end" => step_end::run(p, read),
        "config check" => config_cmd::run(p),
        "completions" => match p.operand(0).and_then(generate::complete::script) {
            Some(text) => {
                print!("{text}");
                0
            }
            None => usage_error(
                spec,
                &format!(
                    "no completions for {:?}: one of {}",
                    printable(p.operand(0).unwrap_or("")),
                    generate::complete::SHELLS.join(", ")
                ),
            ),
        },
        "manpage" => {
            // The version this binary is (the packages' own `@VERSION@`
            // substitution then finds none left).
            print!(
                "{}",
                generate::man::page().replace("@VERSION@", env!("CARGO_PKG_VERSION"))
            );
            0
        }
        "help" => match p.operand(0) {
            None => {
                print!("{}", generate::usage());
                0
            }
            Some(name) => match commands::spec_of(name)
                .or_else(|| commands::spec_of(&format!("{name} check")))
            {
                Some(s) => {
                    print!("{}", generate::help(s));
                    0
                }
                None => usage_error(spec, &format!("unknown command {:?}", printable(name))),
            },
        },
        _ => version(),
    }
}

fn version() -> i32 {
    println!("gpu-health {}", env!("CARGO_PKG_VERSION"));
    0
}

/// A usage error of a command: printed with its synopsis, exit 2.
fn usage_error(spec: &CommandSpec, e: &str) -> i32 {
    eprintln!(
        "gpu-health {}: {}\nusage: {}\n(gpu-health {} --help says more)",
        spec.name,
        printable(e),
        generate::synopsis(spec),
        spec.name
    );
    2
}
