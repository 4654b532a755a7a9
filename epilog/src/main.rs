//! gpu-health-epilog: Slurm `Epilog=`.
//!
//! Writes the job's GPU record (energy, peak memory, health deltas) and
//! drains the node after a fatal fault during the job. Always exits 0: a
//! failing Epilog makes Slurm drain the node with a vague reason, and
//! gpu-health drains with its own. Everything lives in
//! gpu_health_core::records.

use gpu_health_core::{config, gate, logging, records};

const HELP: &str = "\
gpu-health-epilog: Slurm Epilog of gpu-health.

Run by slurmd as Epilog=. Reads the job's GPUs again through NVML (with a
deadline) and appends one JSON record per job and node to
<records_dir>/jobs.jsonl: energy (J), mean power, peak memory, ECC,
row-remap, NVLink and PCIe counter deltas, Xid events during the job
(see docs/records.md; `gpu-health report` reads them). Drains the node
with a 'gpu-health:' reason after a fatal Xid or a new uncorrectable ECC
error during the job. Exits 0.

Environment: SLURM_JOB_ID, SLURMD_NODENAME, SLURM_JOB_GPUS, SLURM_JOB_USER,
SLURM_JOB_UID, SLURM_JOB_PARTITION, SLURM_JOB_EXIT_CODE, GPU_HEALTH_CONFIG
(configuration file; default gpu-health.toml beside $SLURM_CONF, else
/etc/slurm/gpu-health.toml).
";

fn main() {
    logging::init("gpu-health-epilog", log::Level::Warn);
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return;
    }
    if std::env::args().skip(1).any(|a| a == "--version") {
        println!("gpu-health-epilog {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    // A panic must not become a non-zero exit (Slurm would drain the node
    // with "Epilog error").
    if std::panic::catch_unwind(run).is_err() {
        log::error!("internal error in the epilog; no job record written");
    }
    std::process::exit(0);
}

fn run() {
    let now_ms = gpu_health_core::time::unix_ms();
    let env = |k: &str| std::env::var(k).ok();
    let ctx = gate::JobContext::from_env(env, gate::hostname);
    let meta = records::JobMeta::from_env(env);
    let loaded = config::load_or_default(Some(&ctx.node));
    let cfg = &loaded.config;
    logging::set_target(&ctx.node, cfg.log_file.as_deref());
    if let Some(e) = &loaded.error {
        log::error!("configuration error, defaults in force, no drain in this run: {e}");
    }
    for n in &ctx.notes {
        log::warn!("{n}");
    }
    let out = records::finish_job(cfg, loaded.error.is_none(), &ctx, &meta, now_ms);
    if let (Some(r), Some(stored)) = (&out.record, &out.stored) {
        log::info!(
            "job {} on {}: {} GPU(s), {:.0} J, record {stored:?}",
            r.job_id,
            r.node,
            r.gpus.len(),
            r.gpus.iter().filter_map(|g| g.energy_j).sum::<f64>()
        );
    }
}
