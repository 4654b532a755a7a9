//! gpu-health-prolog: Slurm `Prolog=` and `HealthCheckProgram=`.
//!
//! Exit 0 lets the job start; exit 1 after draining the node makes Slurm
//! requeue it. As HealthCheckProgram (no SLURM_SCRIPT_CONTEXT, no job) or
//! with `--health-check` it runs the health check instead
//! (gpu_health_core::run::invocation).
//! The runs live in gpu_health_core::run.
//!
//! `main` is the C entry itself (`#![no_main]`): std's runtime start is
//! skipped, as it is a measurable part of a run paid before every job
//! (gpu_health_core::entry says what it did that still is done).

#![no_main]

use std::ffi::{c_char, c_int};

use gpu_health_core::logging;
use gpu_health_core::run::{
    self, health_check, prolog, Invocation, JobEnv, RunContext, StateAccess,
};

/// The process's entry, called by the C runtime with the arguments, which
/// std reads on its own (`std::env::args_os`). Ends through
/// `std::process::exit`, which flushes stdout. Nothing may unwind out of
/// it (a C frame): the run is `run::guarded`, and what comes before it
/// writes without panicking.
#[no_mangle]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    gpu_health_core::entry::prepare();
    logging::init("gpu-health-prolog", log::Level::Warn);
    let mut health = false;
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--help" | "-h") => print_and_exit(HELP),
            Some("--version") => print_and_exit(&format!(
                "gpu-health-prolog {}\n",
                env!("CARGO_PKG_VERSION")
            )),
            Some("--health-check") => health = true,
            // Slurm passes none; an unknown word must not stop a job start.
            _ => log::warn!("ignoring unknown argument {arg:?}"),
        }
    }
    let env = |k: &str| std::env::var(k).ok();
    // A panic is gpu-health's own fault: it must not become a non-zero
    // exit, which Slurm answers by draining the node ("Prolog error").
    let code = run::guarded("gpu-health-prolog", 0, || {
        let which = run::invocation(env, health);
        let ctx = RunContext::start(env, None, StateAccess::Write);
        match which {
            Invocation::HealthCheck => health_check::run(&ctx).exit_code(),
            Invocation::Prolog => prolog::run(&ctx, &JobEnv::from_env(env)),
            Invocation::Misplaced(why) => {
                log::error!("{why}");
                0
            }
        }
    });
    std::process::exit(code);
}

/// `--help` and `--version`: a closed or broken stdout is not an error
/// worth more than its exit code.
fn print_and_exit(text: &str) -> ! {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let ok = out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok();
    std::process::exit(if ok { 0 } else { 1 });
}

const HELP: &str = "\
gpu-health-prolog: Slurm Prolog of gpu-health.

Run by slurmd as Prolog= (with PrologFlags=Alloc). Probes the node's GPUs
through NVML (with a deadline), reads new kernel-log Xid records, and
drains the node with a 'gpu-health:' reason when it finds a fatal fault
(exit 1: Slurm requeues the job). Otherwise writes the job's verdict to
<state_dir>/jobs/<job id>.json and exits 0.

Health check: with --health-check, or when neither SLURM_SCRIPT_CONTEXT
(prolog_slurmd) nor SLURM_JOB_ID is set (as slurmd runs
HealthCheckProgram: no arguments, only SLURMD_NODENAME), it runs the same
checks without a job, drains with the same rules, and
returns drain-until-clean drains to service after a quiet time (see
docs/operations.md).

Environment: SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_GPUS,
SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health (off|warn|strict),
GPU_HEALTH_CONFIG (configuration file; default gpu-health.toml beside
$SLURM_CONF, else /etc/slurm/gpu-health.toml).
";
