//! gpu-health configuration: one TOML file, every key with a default.
//!
//! Where the file is: `$GPU_HEALTH_CONFIG`, else `gpu-health.toml` beside
//! slurm.conf (`$SLURM_CONF`, which slurmd passes to Prolog and Epilog)
//! when it exists there, else `/etc/slurm/gpu-health.toml`. A per-node drop-in
//! `gpu-health.d/<node>.toml` beside it overrides single keys for one node
//! (heterogeneous clusters; the test cluster gives each node its own
//! scenario that way).
//!
//! A broken file never stops gpu-health: the caller gets the defaults plus
//! the error, logs it loudly, and must not drain a node in that run.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ops::{BrakeConfig, DcgmConfig, RdmaConfig, RecoveryConfig};
use crate::xid::XidConfig;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/slurm/gpu-health.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// toml's message names the line, column and key.
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
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
    /// Where job records go; `None` = `<state_dir>/records`.
    pub records_dir: Option<PathBuf>,
    /// node_exporter textfile with the latest jobs' figures, if wanted.
    pub prometheus_textfile: Option<PathBuf>,
    /// GPUs this node must have; `None` = NVIDIA GPUs sysfs lists on the
    /// PCI bus, or NVML's count when sysfs lists none.
    pub expected_gpus: Option<u32>,
    /// Root of sysfs (fixture trees in tests).
    pub sysfs_root: PathBuf,
    /// scontrol used on the failing path only.
    pub scontrol: PathBuf,
    pub scontrol_timeout_ms: u64,
    /// Extra log file (the log also goes to stderr and syslog).
    pub log_file: Option<PathBuf>,
    pub thresholds: Thresholds,
    pub xid: XidConfig,
    /// Drain brake (docs/operations.md).
    pub brake: BrakeConfig,
    /// Automatic return of drain-until-clean drains.
    pub recovery: RecoveryConfig,
    /// `dcgmi diag` tier.
    pub dcgm: DcgmConfig,
    /// RDMA ports the node must have up.
    pub rdma: RdmaConfig,
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
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_temperature_c: 87,
            sbe_warn_per_hour: 10.0,
            sbe_fatal_per_hour: 1000.0,
            min_power_limit_ratio: 0.9,
            require_persistence_mode: true,
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
            records_dir: None,
            prometheus_textfile: None,
            expected_gpus: None,
            sysfs_root: PathBuf::from("/sys"),
            scontrol: PathBuf::from("/usr/bin/scontrol"),
            scontrol_timeout_ms: 10_000,
            log_file: None,
            thresholds: Thresholds::default(),
            xid: XidConfig::default(),
            brake: BrakeConfig::default(),
            recovery: RecoveryConfig::default(),
            dcgm: DcgmConfig::default(),
            rdma: RdmaConfig::default(),
        }
    }
}

impl Config {
    pub fn records_dir(&self) -> PathBuf {
        self.records_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("records"))
    }

    /// Refuse values that cannot be meant (they would make gpu-health hang
    /// a job start or drain everything).
    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |message: String| {
            Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            })
        };
        if self.nvml_deadline_ms == 0 || self.nvml_deadline_ms > 120_000 {
            return bad(format!(
                "nvml_deadline_ms = {} is outside 1..=120000 (Slurm kills prologs after PrologEpilogTimeout)",
                self.nvml_deadline_ms
            ));
        }
        if self.scontrol_timeout_ms == 0 || self.scontrol_timeout_ms > 120_000 {
            return bad(format!(
                "scontrol_timeout_ms = {} is outside 1..=120000",
                self.scontrol_timeout_ms
            ));
        }
        if self.expected_gpus.is_some_and(|n| n > 64) {
            return bad(format!(
                "expected_gpus = {:?} is more than any node holds",
                self.expected_gpus
            ));
        }
        let t = &self.thresholds;
        let rates_ok = t.sbe_warn_per_hour.is_finite()
            && t.sbe_warn_per_hour >= 0.0
            && t.sbe_fatal_per_hour.is_finite()
            && t.sbe_fatal_per_hour >= t.sbe_warn_per_hour;
        if !rates_ok {
            return bad("thresholds: need 0 <= sbe_warn_per_hour <= sbe_fatal_per_hour".into());
        }
        if !(t.min_power_limit_ratio.is_finite() && (0.0..=1.0).contains(&t.min_power_limit_ratio))
        {
            return bad("thresholds.min_power_limit_ratio must be within 0..=1".into());
        }
        if t.max_temperature_c < 30 || t.max_temperature_c > 150 {
            return bad(format!(
                "thresholds.max_temperature_c = {} is outside 30..=150",
                t.max_temperature_c
            ));
        }
        self.xid
            .validate()
            .and_then(|()| self.brake.validate())
            .and_then(|()| self.recovery.validate())
            .and_then(|()| self.dcgm.validate())
            .and_then(|()| self.rdma.validate())
            .map_err(|message| ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            })
    }
}

/// Where the configuration file is, from the environment.
pub fn config_path() -> PathBuf {
    if let Some(p) = std::env::var_os("GPU_HEALTH_CONFIG").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    // Beside slurm.conf when it is there; in configless Slurm SLURM_CONF
    // points into slurmd's cache, which holds no gpu-health.toml.
    if let Some(conf) = std::env::var_os("SLURM_CONF").filter(|p| !p.is_empty()) {
        if let Some(p) = Path::new(&conf).parent().map(|d| d.join("gpu-health.toml")) {
            if p.exists() {
                return p;
            }
        }
    }
    PathBuf::from(DEFAULT_CONFIG_PATH)
}

/// The per-node drop-in beside `path`, when `node` is a plain host name.
pub fn node_dropin_path(path: &Path, node: &str) -> Option<PathBuf> {
    let plain = !node.is_empty()
        && node.len() <= 64
        && node
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !node.starts_with('.');
    if !plain {
        return None;
    }
    Some(
        path.parent()?
            .join("gpu-health.d")
            .join(format!("{node}.toml")),
    )
}

/// Parse configuration text (plus an optional drop-in) into a `Config`.
pub fn parse(
    path: &Path,
    text: &str,
    dropin: Option<(&Path, &str)>,
) -> Result<Config, ConfigError> {
    // Each file alone first: toml then reports line, column and key.
    let check = |p: &Path, t: &str| -> Result<toml::Table, ConfigError> {
        let err = |e: toml::de::Error| ConfigError::Parse {
            path: p.to_path_buf(),
            message: one_line(&e.to_string()),
        };
        toml::from_str::<Config>(t).map_err(err)?;
        t.parse::<toml::Table>().map_err(err)
    };
    let mut table = check(path, text)?;
    let mut shown = path.to_path_buf();
    if let Some((dpath, dtext)) = dropin {
        merge(&mut table, check(dpath, dtext)?);
        shown = dpath.to_path_buf();
    }
    let config: Config = Config::deserialize(table).map_err(|e| ConfigError::Parse {
        path: shown.clone(),
        message: one_line(&e.to_string()),
    })?;
    config.validate(&shown)?;
    Ok(config)
}

/// Keys of `over` replace those of `base`; tables merge key by key.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Read the configuration from `path` and the node's drop-in.
///
/// A missing main file means defaults (a node without a file is valid);
/// an unreadable or invalid one is an error.
pub fn load(path: &Path, node: Option<&str>) -> Result<Config, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let dropin_path = node.and_then(|n| node_dropin_path(path, n));
    let dropin_text = match &dropin_path {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(ConfigError::Read {
                    path: p.clone(),
                    source,
                })
            }
        },
        None => None,
    };
    let dropin = match (&dropin_path, &dropin_text) {
        (Some(p), Some(t)) => Some((p.as_path(), t.as_str())),
        _ => None,
    };
    parse(path, &text, dropin)
}

/// The configuration in force and, when the file was bad, why.
pub struct Loaded {
    pub config: Config,
    pub path: PathBuf,
    /// Set when the file could not be used: defaults are in force, the
    /// error has been logged, and nothing may drain a node in this run.
    pub error: Option<ConfigError>,
}

/// Load from the environment's path. On error, log loudly and keep going
/// with the best configuration that still parses: the main file without a
/// broken drop-in, else the defaults.
pub fn load_or_default(node: Option<&str>) -> Loaded {
    let path = config_path();
    let mut loaded = match load(&path, node) {
        Ok(config) => Loaded {
            config,
            path,
            error: None,
        },
        Err(e) => {
            let fallback = if node.is_some() {
                load(&path, None).ok()
            } else {
                None
            };
            let what = if fallback.is_some() {
                "the main file without the node drop-in"
            } else {
                "defaults"
            };
            log::error!(
                "gpu-health: configuration error, using {what} and never draining in this run: {e}"
            );
            Loaded {
                config: fallback.unwrap_or_default(),
                path,
                error: Some(e),
            }
        }
    };
    if let Some(n) = node {
        loaded.config.expand_node(n);
    }
    loaded
}

impl Config {
    /// Replace `%n` by the node name in per-node paths, so that one file
    /// can serve nodes that share a file system.
    pub fn expand_node(&mut self, node: &str) {
        let expand = |p: &mut PathBuf| {
            if p.to_string_lossy().contains("%n") {
                *p = PathBuf::from(p.to_string_lossy().replace("%n", node));
            }
        };
        expand(&mut self.state_dir);
        expand(&mut self.kernel_log);
        if let Some(p) = self.records_dir.as_mut() {
            expand(p);
        }
        if let Some(p) = self.log_file.as_mut() {
            expand(p);
        }
        if let Some(p) = self.prometheus_textfile.as_mut() {
            expand(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> PathBuf {
        PathBuf::from("/etc/slurm/gpu-health.toml")
    }

    #[test]
    fn empty_file_is_all_defaults() {
        assert_eq!(parse(&p(), "", None).unwrap(), Config::default());
    }

    #[test]
    fn keys_override_defaults() {
        let c = parse(
            &p(),
            "nvml_deadline_ms = 500\n[thresholds]\nmax_temperature_c = 80\n",
            None,
        )
        .unwrap();
        assert_eq!(c.nvml_deadline_ms, 500);
        assert_eq!(c.thresholds.max_temperature_c, 80);
        assert_eq!(
            c.thresholds.sbe_warn_per_hour,
            Thresholds::default().sbe_warn_per_hour
        );
    }

    #[test]
    fn syntax_error_names_line() {
        let e = parse(&p(), "state_dir = \"/x\"\nnvml_deadline_ms = = 3\n", None).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("line 2"), "{s}");
    }

    #[test]
    fn wrong_type_names_key() {
        let s = parse(&p(), "nvml_deadline_ms = \"soon\"\n", None)
            .unwrap_err()
            .to_string();
        assert!(
            s.contains("nvml_deadline_ms") && s.contains("line 1"),
            "{s}"
        );
    }

    #[test]
    fn unknown_key_is_an_error() {
        let s = parse(&p(), "nvml_deadine_ms = 5\n", None)
            .unwrap_err()
            .to_string();
        assert!(s.contains("nvml_deadine_ms"), "{s}");
    }

    #[test]
    fn absurd_thresholds_are_refused() {
        assert!(parse(&p(), "nvml_deadline_ms = 0\n", None).is_err());
        assert!(parse(
            &p(),
            "[thresholds]\nsbe_warn_per_hour = 10.0\nsbe_fatal_per_hour = 1.0\n",
            None
        )
        .is_err());
        assert!(parse(&p(), "[thresholds]\nmin_power_limit_ratio = nan\n", None).is_err());
        assert!(parse(&p(), "expected_gpus = 100000\n", None).is_err());
    }

    #[test]
    fn dropin_overrides_single_keys() {
        let d = PathBuf::from("/etc/slurm/gpu-health.d/n1.toml");
        let c = parse(
            &p(),
            "state_dir = \"/a\"\n[thresholds]\nmax_temperature_c = 80\n",
            Some((
                &d,
                "state_dir = \"/b\"\n[thresholds]\nsbe_warn_per_hour = 1.0\n",
            )),
        )
        .unwrap();
        assert_eq!(c.state_dir, PathBuf::from("/b"));
        assert_eq!(c.thresholds.max_temperature_c, 80);
        assert_eq!(c.thresholds.sbe_warn_per_hour, 1.0);
    }

    #[test]
    fn dropin_path_refuses_odd_node_names() {
        assert!(node_dropin_path(&p(), "n1").is_some());
        assert!(node_dropin_path(&p(), "../x").is_none());
        assert!(node_dropin_path(&p(), "").is_none());
        assert!(node_dropin_path(&p(), "a/b").is_none());
    }
}
