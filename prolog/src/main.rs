//! gpu-health-prolog: Slurm `Prolog=` and `HealthCheckProgram=`.
//!
//! Exit 0 lets the job start; exit 1 after draining the node makes Slurm
//! requeue it. Without SLURM_JOB_ID (HealthCheckProgram gets none, and no
//! arguments) or with `--health-check` it runs the health check instead.
//! Everything else lives in gpu_health_core::gate and ::ops.

use gpu_health_core::finding::Action;
use gpu_health_core::ops::{dcgm, health};
use gpu_health_core::{config, gate, logging, probe, state, verdict};

fn main() {
    logging::init("gpu-health-prolog", log::Level::Warn);
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", HELP);
        return;
    }
    if args.iter().any(|a| a == "--version") {
        println!("gpu-health-prolog {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let health_check =
        args.iter().any(|a| a == "--health-check") || std::env::var_os("SLURM_JOB_ID").is_none();
    // A panic is gpu-health's own fault: it must not become a non-zero
    // exit, which Slurm answers by draining the node ("Prolog error").
    let code = std::panic::catch_unwind(|| {
        if health_check {
            run_health_check()
        } else {
            run()
        }
    })
    .unwrap_or_else(|_| {
        log::error!("internal error in gpu-health-prolog; letting the job start");
        0
    });
    std::process::exit(code);
}

const HELP: &str = "\
gpu-health-prolog: Slurm Prolog of gpu-health.

Run by slurmd as Prolog= (with PrologFlags=Alloc). Probes the node's GPUs
through NVML (with a deadline), reads new kernel-log Xid records, and
drains the node with a 'gpu-health:' reason when it finds a fatal fault
(exit 1: Slurm requeues the job). Otherwise writes the job's verdict to
<state_dir>/jobs/<job id>.json and exits 0.

Health check: with --health-check, or when SLURM_JOB_ID is not set (as
slurmd runs HealthCheckProgram: no arguments, only SLURMD_NODENAME), it
runs the same checks without a job, drains with the same rules, and
returns drain-until-clean drains to service after a quiet time (see
docs/operations.md).

Environment: SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_GPUS,
SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health (off|warn|strict),
GPU_HEALTH_CONFIG (configuration file; default gpu-health.toml beside
$SLURM_CONF, else /etc/slurm/gpu-health.toml).
";

fn run() -> i32 {
    let now_ms = gpu_health_core::time::unix_ms();
    let ctx = gate::JobContext::from_env(|k| std::env::var(k).ok(), gate::hostname);
    let loaded = config::load_or_default(Some(&ctx.node));
    let cfg = &loaded.config;
    logging::set_target(&ctx.node, cfg.log_file.as_deref());
    if let Some(e) = &loaded.error {
        // Repeated after the log file is known, so the node's log shows it.
        log::error!(
            "configuration error, no drain in this run (fallback in force, see above): {e}"
        );
    }
    for n in &ctx.notes {
        log::warn!("{n}");
    }
    let opts = probe::ProbeOptions {
        enable_accounting: true,
        topology: true,
        accounting_processes: false,
    };
    let mut check = gate::check_node_for_drain(cfg, opts, now_ms);
    if ctx.mode == verdict::Mode::Strict && cfg.dcgm.strict_jobs {
        let outcome = dcgm::run_diag(&cfg.dcgm, &ctx.job_gpus);
        log::info!("strict job: {}", outcome.describe());
        check.findings.extend(outcome.findings());
    }
    let decision = gate::decide(&check.findings, loaded.error.is_none());
    for f in &check.findings {
        match f.action {
            Action::Info => log::info!("{}: {}", f.check, f.message),
            _ => log::warn!("{}: {}", f.check, f.message),
        }
    }
    if let Some(why) = &decision.held_back {
        log::error!("{why}");
    }
    gate::persist(cfg, &mut check, now_ms);
    gpu_health_core::records::save_job_start(cfg, &ctx, &check, now_ms);
    // Drain before writing the verdict: a drain the brake held back is
    // told to the job there.
    let code = match &decision.drain_reason {
        Some(reason) => {
            let outcome = gate::drain_findings(cfg, &ctx.node, &check.findings, reason, now_ms);
            match gate::not_drained_note(&outcome) {
                // Drained, or scontrol failed (Slurm then drains with
                // "Prolog error"): the job must not start here.
                None => 1,
                Some(_) if matches!(outcome, gate::DrainOutcome::Failed(_)) => 1,
                // Held back by the brake or drained by someone else: the
                // job runs, warned (strict jobs are refused by the plugin).
                Some(note) => {
                    log::error!(
                        "job {} starts on a faulty node: {}",
                        ctx.job_id.as_deref().unwrap_or("-"),
                        note.message
                    );
                    check.findings.push(note);
                    0
                }
            }
        }
        None => 0,
    };
    if let Some(job_id) = &ctx.job_id {
        write_verdict(
            cfg,
            &ctx,
            job_id,
            &check,
            loaded.error.as_ref().map(|e| e.to_string()),
            now_ms,
        );
    }
    log::info!(
        "job {} on {}: {} findings, exit {code}, probe {} us",
        ctx.job_id.as_deref().unwrap_or("-"),
        ctx.node,
        check.findings.len(),
        check.snapshot.probe_us
    );
    code
}

/// HealthCheckProgram: no job, the node's own checks and the automatic
/// return of drain-until-clean drains.
fn run_health_check() -> i32 {
    let now_ms = gpu_health_core::time::unix_ms();
    let node = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(gate::hostname);
    let loaded = config::load_or_default(Some(&node));
    let cfg = &loaded.config;
    logging::set_target(&node, cfg.log_file.as_deref());
    if let Some(e) = &loaded.error {
        log::error!(
            "configuration error, no drain in this run (fallback in force, see above): {e}"
        );
    }
    health::run(cfg, loaded.error.is_none(), &node, now_ms).exit_code()
}

fn write_verdict(
    cfg: &config::Config,
    ctx: &gate::JobContext,
    job_id: &str,
    check: &gate::NodeCheck,
    config_error: Option<String>,
    now_ms: u64,
) {
    let paths = state::StatePaths::new(&cfg.state_dir);
    let v = verdict::JobVerdict {
        job_id: job_id.to_string(),
        node: ctx.node.clone(),
        mode: ctx.mode,
        written_at_ms: now_ms,
        job_gpus: ctx.job_gpus.clone(),
        findings: verdict::job_findings(&check.findings, &ctx.job_gpus),
        config_error,
    };
    let saved = state::ensure_private_dir(&paths.jobs_dir())
        .and_then(|()| state::save_json(&paths.verdict(job_id), &v, false));
    if let Err(e) = saved {
        log::error!("cannot write the verdict of job {job_id}: {e}");
    }
}
