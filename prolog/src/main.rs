//! gpu-health-prolog: Slurm `Prolog=` (and `HealthCheckProgram=`).
//!
//! Exit 0 lets the job start; exit 1 after draining the node makes Slurm
//! requeue it. Everything else lives in gpu_health_core::gate.

use gpu_health_core::{config, gate, logging, probe, state, verdict};

fn main() {
    logging::init("gpu-health-prolog", log::Level::Warn);
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{}", HELP);
        return;
    }
    std::process::exit(run());
}

const HELP: &str = "\
gpu-health-prolog: Slurm Prolog of gpu-health.

Run by slurmd as Prolog= (with PrologFlags=Alloc). Probes the node's GPUs
through NVML (with a deadline), reads new kernel-log Xid records, and
drains the node with a 'gpu-health:' reason when it finds a fatal fault
(exit 1: Slurm requeues the job). Otherwise writes the job's verdict to
<state_dir>/jobs/<job id>.json and exits 0.

Environment: SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_GPUS,
SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health (off|warn|strict),
GPU_HEALTH_CONFIG (configuration file; default gpu-health.toml beside
$SLURM_CONF, else /etc/slurm/gpu-health.toml).
";

fn run() -> i32 {
    let now_ms = probe::unix_ms();
    let ctx = gate::JobContext::from_env(|k| std::env::var(k).ok(), gate::hostname);
    let loaded = config::load_or_default(Some(&ctx.node));
    let cfg = &loaded.config;
    logging::set_target(&ctx.node, cfg.log_file.as_deref());
    if let Some(e) = &loaded.error {
        // Repeated after the log file is known, so the node's log shows it.
        log::error!("configuration error, defaults in force, no drain in this run: {e}");
    }
    for n in &ctx.notes {
        log::warn!("{n}");
    }
    let opts = probe::ProbeOptions {
        enable_accounting: true,
        topology: true,
        accounting_processes: false,
    };
    let mut check = gate::check_node(cfg, opts, now_ms);
    let decision = gate::decide(&check.findings, loaded.error.is_none());
    for f in &check.findings {
        match f.action {
            gpu_health_core::finding::Action::Info => log::info!("{}: {}", f.check, f.message),
            _ => log::warn!("{}: {}", f.check, f.message),
        }
    }
    if let Some(why) = &decision.held_back {
        log::error!("{why}");
    }
    gate::persist(cfg, &mut check, now_ms);
    gpu_health_core::records::save_job_start(cfg, &ctx, &check, now_ms);
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
    let code = match &decision.drain_reason {
        Some(reason) => {
            gate::drain(cfg, &ctx.node, reason);
            1
        }
        None => 0,
    };
    log::info!(
        "job {} on {}: {} findings, exit {code}, probe {} us",
        ctx.job_id.as_deref().unwrap_or("-"),
        ctx.node,
        check.findings.len(),
        check.snapshot.probe_us
    );
    code
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
