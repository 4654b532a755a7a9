//! gpu-health-epilog: Slurm `Epilog=`.
//!
//! Writes the job's GPU record (energy, peak memory, health deltas) and
//! drains the node after a fatal fault during the job. Always exits 0: a
//! failing Epilog makes Slurm drain the node with a vague reason, and
//! gpu-health drains with its own. The run lives in gpu_health_core::run.

use gpu_health_core::logging;
use gpu_health_core::records::JobMeta;
use gpu_health_core::run::{self, epilog, JobEnv, RunContext, StateAccess};

fn main() {
    logging::init("gpu-health-epilog", log::Level::Warn);
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--help" | "-h" => {
                print!("{HELP}");
                return;
            }
            "--version" => {
                println!("gpu-health-epilog {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            other => log::warn!("ignoring unknown argument {other:?}"),
        }
    }
    let env = |k: &str| std::env::var(k).ok();
    run::guarded("gpu-health-epilog", (), || {
        let ctx = RunContext::start(env, None, StateAccess::Write);
        epilog::run(&ctx, &JobEnv::from_env(env), &JobMeta::from_env(env));
    });
    std::process::exit(0);
}

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
