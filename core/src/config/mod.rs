//! gpu-health configuration: one TOML file, every key with a default.
//! Plain settings: this module decides nothing and runs nothing; the
//! sections are read by the modules that act on them.
//!
//! Where the file is and how a node's drop-in and `%n` apply: [`load`].
//! A broken file never stops gpu-health: the caller gets the best
//! configuration that still parses plus the error, logs it loudly, and
//! must not drain a node in that run.

mod acceptance;
mod check;
mod keys;
mod load;
pub mod place;
mod power;
mod remediation;
mod sections;
mod xid;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use acceptance::{AcceptanceConfig, GateName, ModelThresholds};
pub use check::{check_config, CheckedConfig, Problem};
pub use keys::{check as check_range, range_of, KeyRange, NVML_DEADLINE_FLOOR_MS, RANGES};
pub use load::{
    config_path, load, load_for_node, node_dropin_path, parse, Loaded, NamedBy, MAX_CONFIG_BYTES,
};
pub use power::{
    check_racks, expand as expand_node_range, PowerSection, Rack, RackConfig, MAX_POWER_NODES,
};
pub use remediation::RemediationConfig;
pub use sections::{
    parse_port_name, BrakeConfig, BrakeScope, DcgmConfig, PortAction, RdmaConfig, RecoveryConfig,
    StepEndConfig, BRAKE_DECIDE_RESERVE_MS,
};
pub use xid::{CodeKey, PolicyAction, XidConfig, XidRule};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/slurm/gpu-health.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {why}")]
    Read { path: PathBuf, why: String },
    /// toml's message, with the line, column, table and the line's text
    /// when toml gives its place.
    #[error("{path}: {}{message}", place.as_ref().map(|p| format!("{p}: ")).unwrap_or_default())]
    Parse {
        path: PathBuf,
        message: String,
        place: Option<place::Place>,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// libnvidia-ml to load; `None` = the system's `libnvidia-ml.so.1`.
    pub nvml_library: Option<PathBuf>,
    /// The NVML probe is abandoned after this long (a hung GPU must not
    /// hold a job start).
    pub nvml_deadline_ms: u64,
    /// `/dev/kmsg`, or a file read incrementally.
    pub kernel_log: PathBuf,
    /// Root-owned directory for cursors, job verdicts, job start snapshots.
    pub state_dir: PathBuf,
    /// Root-owned directory of the run lock when `state_dir` cannot be
    /// used (another owner, writable by others, read-only, full): the
    /// node's runs still take turns.
    pub run_lock_dir: PathBuf,
    /// Where job records go; `None` = `<state_dir>/records`.
    pub records_dir: Option<PathBuf>,
    /// node_exporter textfile with the latest jobs' figures, if wanted.
    pub prometheus_textfile: Option<PathBuf>,
    /// GPUs this node must have; `None` = NVIDIA GPUs sysfs lists on the
    /// PCI bus, or NVML's count when sysfs lists none.
    pub expected_gpus: Option<u32>,
    /// Root of sysfs (fixture trees in tests).
    pub sysfs_root: PathBuf,
    /// scontrol, used on the failing path only.
    pub scontrol: PathBuf,
    /// The longest one run waits for Slurm, all its scontrol calls and the
    /// brake's wait together: bounds how long a draining Prolog
    /// holds a job start.
    pub scontrol_timeout_ms: u64,
    /// Extra log file (the log always goes to stderr, which slurmd drops).
    pub log_file: Option<PathBuf>,
    pub thresholds: Thresholds,
    pub xid: XidConfig,
    /// Drain brake (docs/operations.md).
    pub brake: BrakeConfig,
    /// Automatic return of drain-until-clean drains.
    pub recovery: RecoveryConfig,
    /// Reboots through Slurm for faults a reboot clears.
    pub remediation: RemediationConfig,
    /// `dcgmi diag` tier.
    pub dcgm: DcgmConfig,
    /// RDMA ports the node must have up.
    pub rdma: RdmaConfig,
    /// Racks for `gpu-health report --power`: kept as written and parsed
    /// by the report alone ([`PowerSection::racks`]), so that no run that
    /// can drain a node reads it.
    pub power: PowerSection,
    /// The SPANK plugin's work at the end of a step.
    pub step_end: StepEndConfig,
    /// The acceptance tier before a return (docs/acceptance.md).
    pub acceptance: AcceptanceConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// Warn above this GPU temperature.
    pub max_temperature_c: u32,
    /// Corrected ECC errors per hour that warn.
    pub sbe_warn_per_hour: f64,
    /// Corrected ECC errors per hour that drain.
    pub sbe_fatal_per_hour: f64,
    /// Warn when the enforced power limit is below this share of the default.
    pub min_power_limit_ratio: f64,
    /// Warn when persistence mode is off (costly NVML init on every job).
    pub require_persistence_mode: bool,
    /// A job's GPU whose peak memory reached this share of its memory is
    /// flagged near out of memory in the job record.
    pub near_oom_share: f64,
    /// At job start, memory in use on a job's GPU above this many MiB (or
    /// any compute process on it) is an earlier job's leftover: warn.
    pub leftover_memory_mib: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_temperature_c: 87,
            sbe_warn_per_hour: 10.0,
            sbe_fatal_per_hour: 1000.0,
            min_power_limit_ratio: 0.9,
            require_persistence_mode: true,
            near_oom_share: 0.95,
            leftover_memory_mib: 2048,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            nvml_library: None,
            nvml_deadline_ms: 10_000,
            kernel_log: PathBuf::from("/dev/kmsg"),
            state_dir: PathBuf::from("/var/lib/gpu-health"),
            run_lock_dir: PathBuf::from("/run/gpu-health"),
            records_dir: None,
            prometheus_textfile: None,
            expected_gpus: None,
            sysfs_root: PathBuf::from("/sys"),
            scontrol: PathBuf::from("/usr/bin/scontrol"),
            scontrol_timeout_ms: 2_500,
            log_file: None,
            thresholds: Thresholds::default(),
            xid: XidConfig::default(),
            brake: BrakeConfig::default(),
            recovery: RecoveryConfig::default(),
            remediation: RemediationConfig::default(),
            dcgm: DcgmConfig::default(),
            rdma: RdmaConfig::default(),
            power: PowerSection::default(),
            step_end: StepEndConfig::default(),
            acceptance: AcceptanceConfig::default(),
        }
    }
}

impl Config {
    pub fn records_dir(&self) -> PathBuf {
        self.records_dir
            .clone()
            .unwrap_or_else(|| crate::state::StateDir::default_records_dir(&self.state_dir))
    }

    /// Refuse values that cannot be meant (they would make gpu-health hang
    /// a job start or drain everything).
    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        self.validate_keys()
            .map_err(|message| ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            })
    }

    fn validate_keys(&self) -> Result<(), String> {
        match self.problems().into_iter().next() {
            Some(first) => Err(first),
            None => Ok(()),
        }
    }

    /// Every range and cross-key rule the values break, each a sentence
    /// that starts with the key it is about (`brake.settle_ms = ...`);
    /// the load refuses the configuration for the first, `gpu-health
    /// config check` shows them all. `[power]` is not looked at (the
    /// power report checks it: [`PowerSection::racks`]).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut push = |r: Result<(), String>| {
            if let Err(e) = r {
                out.push(e);
            }
        };
        push(
            check_range("nvml_deadline_ms", self.nvml_deadline_ms as f64).map_err(|e| {
                format!("{e} (real NVML needs at least {NVML_DEADLINE_FLOOR_MS} ms; Slurm kills prologs after PrologEpilogTimeout)")
            }),
        );
        push(check_range(
            "scontrol_timeout_ms",
            self.scontrol_timeout_ms as f64,
        ));
        if let Some(n) = self.expected_gpus {
            push(check_range("expected_gpus", f64::from(n)));
        }
        let t = &self.thresholds;
        let rates_ok = t.sbe_warn_per_hour.is_finite()
            && t.sbe_warn_per_hour >= 0.0
            && t.sbe_fatal_per_hour.is_finite()
            && t.sbe_fatal_per_hour >= t.sbe_warn_per_hour;
        if !rates_ok {
            push(Err(
                "thresholds: need 0 <= sbe_warn_per_hour <= sbe_fatal_per_hour".into(),
            ));
        }
        push(check_range(
            "thresholds.min_power_limit_ratio",
            t.min_power_limit_ratio,
        ));
        push(check_range("thresholds.near_oom_share", t.near_oom_share));
        push(check_range(
            "thresholds.leftover_memory_mib",
            t.leftover_memory_mib as f64,
        ));
        push(check_range(
            "thresholds.max_temperature_c",
            f64::from(t.max_temperature_c),
        ));
        push(self.xid.validate());
        push(self.brake.validate());
        push(self.recovery.validate());
        push(self.remediation.validate());
        push(self.dcgm.validate());
        push(self.rdma.validate());
        push(self.step_end.validate());
        push(self.acceptance.validate());
        push(self.brake_fits_the_slurm_budget());
        out
    }

    /// With the brake on, a drain needs `claim_timeout_ms + settle_ms`
    /// of waiting plus [`BRAKE_DECIDE_RESERVE_MS`] to decide, all within
    /// the run's Slurm budget (`ops::drain`); a budget smaller than that
    /// would hold back every drain, so it is a configuration error.
    fn brake_fits_the_slurm_budget(&self) -> Result<(), String> {
        let b = &self.brake;
        let needed = b
            .claim_timeout_ms
            .saturating_add(b.settle_ms)
            .saturating_add(BRAKE_DECIDE_RESERVE_MS);
        if !b.enabled || needed <= self.scontrol_timeout_ms {
            return Ok(());
        }
        Err(format!(
            "brake.claim_timeout_ms = {} + brake.settle_ms = {} + {BRAKE_DECIDE_RESERVE_MS} ms \
             to decide = {needed} ms does not fit in scontrol_timeout_ms = {}: the brake \
             could never drain a node; raise scontrol_timeout_ms to at least {needed} or lower \
             brake.settle_ms or brake.claim_timeout_ms",
            b.claim_timeout_ms, b.settle_ms, self.scontrol_timeout_ms
        ))
    }
}

#[cfg(test)]
mod tests;
