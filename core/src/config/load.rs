//! Finding and reading the configuration: one function, [`load_for_node`],
//! for the Prolog, Epilog, health check, admin command and SPANK plugin.
//!
//! Where the file is: `$GPU_HEALTH_CONFIG`, else `gpu-health.toml` beside
//! slurm.conf (`$SLURM_CONF`, which slurmd passes to Prolog and Epilog)
//! when it exists there, else `/etc/slurm/gpu-health.toml`. A per-node
//! drop-in `gpu-health.d/<node>.toml` beside it overrides single keys for
//! one node (heterogeneous clusters; the test cluster gives each node its
//! own scenario that way). `%n` in per-node paths becomes the node name.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::place::place_of;
use super::{Config, ConfigError, PowerSection, DEFAULT_CONFIG_PATH};
use crate::ids::NodeName;

/// A configuration file is a few KiB; a larger one is a mistake (or not a
/// configuration file), refused rather than read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Who named the configuration file: a file someone named must exist; the
/// default places may be empty (a node without a file runs on defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedBy {
    /// `--config FILE` or the plugin's `config=` argument.
    Option,
    /// `$GPU_HEALTH_CONFIG`.
    Environment,
    /// `gpu-health.toml` beside `$SLURM_CONF` (found there).
    SlurmConf,
    /// [`DEFAULT_CONFIG_PATH`].
    Default,
}

impl NamedBy {
    /// Whether a missing file is an error: someone named it.
    pub fn must_exist(self) -> bool {
        matches!(self, NamedBy::Option | NamedBy::Environment)
    }

    /// Who named it, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            NamedBy::Option => "named by --config",
            NamedBy::Environment => "named by GPU_HEALTH_CONFIG",
            NamedBy::SlurmConf => "beside SLURM_CONF",
            NamedBy::Default => "the default place",
        }
    }
}

/// Where the configuration file is, from the environment `env` (the
/// binaries pass their process environment; nothing below them reads
/// `std::env`).
pub fn config_path(env: impl Fn(&str) -> Option<String>) -> (PathBuf, NamedBy) {
    if let Some(p) = env("GPU_HEALTH_CONFIG").filter(|p| !p.is_empty()) {
        return (PathBuf::from(p), NamedBy::Environment);
    }
    // Beside slurm.conf when it is there; in configless Slurm SLURM_CONF
    // points into slurmd's cache, which holds no gpu-health.toml.
    if let Some(conf) = env("SLURM_CONF").filter(|p| !p.is_empty()) {
        if let Some(p) = Path::new(&conf).parent().map(|d| d.join("gpu-health.toml")) {
            if p.exists() {
                return (p, NamedBy::SlurmConf);
            }
        }
    }
    (PathBuf::from(DEFAULT_CONFIG_PATH), NamedBy::Default)
}

/// The per-node drop-in beside `path`.
pub fn node_dropin_path(path: &Path, node: &NodeName) -> Option<PathBuf> {
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
    let (config, shown) = merge_files(path, text, dropin)?;
    config.validate(shown)?;
    Ok(config)
}

/// The files' keys merged into a `Config` (each file parsed alone first,
/// for errors with their place), not validated; and the file that had the
/// last word (named by validation errors).
pub(super) fn merge_files<'p>(
    path: &'p Path,
    text: &str,
    dropin: Option<(&'p Path, &str)>,
) -> Result<(Config, &'p Path), ConfigError> {
    let err = |p: &Path, text: &str| {
        let p = p.to_path_buf();
        let text = text.to_string();
        move |e: toml::de::Error| parse_error(&p, &text, &e)
    };
    // Each file alone first: toml then reports line, column and key.
    let main: Config = toml::from_str(text).map_err(err(path, text))?;
    // `[power]` stays unparsed (report-only); its errors name the file
    // that gave it.
    let (mut config, shown, power_source) = match dropin {
        // One file: what it parsed to is the configuration (a file with a
        // long rack list is parsed once).
        None => {
            let source = (main.power != PowerSection::default()).then(|| path.to_path_buf());
            (main, path, source)
        }
        Some((dpath, dtext)) => {
            toml::from_str::<Config>(dtext).map_err(err(dpath, dtext))?;
            let mut table = text.parse::<toml::Table>().map_err(err(path, text))?;
            let over = dtext.parse::<toml::Table>().map_err(err(dpath, dtext))?;
            let source = if over.contains_key("power") {
                Some(dpath.to_path_buf())
            } else {
                table.contains_key("power").then(|| path.to_path_buf())
            };
            merge(&mut table, over);
            let config = Config::deserialize(table).map_err(err(dpath, ""))?;
            (config, dpath, source)
        }
    };
    config.power.set_source(power_source);
    Ok((config, shown))
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

/// A toml error of the file `path` holding `text`, with its place (line,
/// column, table and the line's text) when toml gives one.
pub(super) fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let place = e
        .span()
        .filter(|_| !text.is_empty())
        .map(|span| place_of(text, span));
    ConfigError::Parse {
        path: path.to_path_buf(),
        message: one_line(e.message()),
        place,
    }
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A configuration file's text; `None` when it does not exist. A FIFO, a
/// device, a directory or an oversized file is an error, never a hang.
pub(super) fn read_text(path: &Path) -> Result<Option<String>, ConfigError> {
    let bytes =
        crate::state::read_regular_file(path, MAX_CONFIG_BYTES).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|_| ConfigError::Read {
                path: path.to_path_buf(),
                why: "not UTF-8 text".into(),
            })
        })
        .transpose()
}

/// Read the configuration from `path` and, for `node`, its drop-in.
///
/// A missing main file means defaults (a node without a file is valid);
/// an unreadable or invalid one is an error.
pub fn load(path: &Path, node: Option<&NodeName>) -> Result<Config, ConfigError> {
    let text = read_text(path)?.unwrap_or_default();
    let dropin_path = node.and_then(|n| node_dropin_path(path, n));
    let dropin_text = match &dropin_path {
        Some(p) => read_text(p)?,
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
    /// Who named `path`.
    pub named_by: NamedBy,
    /// Set when the file could not be used: a fallback is in force and
    /// nothing may drain a node in this run.
    pub error: Option<ConfigError>,
    /// What is in force instead when `error` is set.
    pub fallback: &'static str,
}

impl Loaded {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// The line to log when the file was bad.
    pub fn error_line(&self) -> Option<String> {
        self.error.as_ref().map(|e| {
            format!(
                "gpu-health: configuration error, using {} and never draining in this run: {e}",
                self.fallback
            )
        })
    }
}

/// The configuration for `node`: the file `explicit` names, else the one
/// the environment `env` points at ([`config_path`]), with the node's
/// drop-in and `%n` expanded. A file named by `explicit` or
/// `GPU_HEALTH_CONFIG` must exist. On error, the best configuration that
/// still parses (the main file without a broken drop-in, else the
/// defaults) plus the error; the caller logs [`Loaded::error_line`].
/// Never fails.
pub fn load_for_node(
    explicit: Option<&Path>,
    node: &NodeName,
    env: impl Fn(&str) -> Option<String>,
) -> Loaded {
    let (path, named_by) = match explicit {
        Some(p) => (p.to_path_buf(), NamedBy::Option),
        None => config_path(env),
    };
    let missing = named_by.must_exist()
        && matches!(
            std::fs::symlink_metadata(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound
        );
    let mut loaded = if missing {
        Loaded {
            config: Config::default(),
            error: Some(ConfigError::Read {
                path: path.clone(),
                why: format!("no such file ({})", named_by.describe()),
            }),
            path,
            named_by,
            fallback: "the built-in defaults",
        }
    } else {
        match load(&path, Some(node)) {
            Ok(config) => Loaded {
                config,
                path,
                named_by,
                error: None,
                fallback: "",
            },
            Err(e) => {
                let main_only = load(&path, None).ok();
                Loaded {
                    fallback: if main_only.is_some() {
                        "the main file without the node drop-in"
                    } else {
                        "the built-in defaults"
                    },
                    config: main_only.unwrap_or_default(),
                    path,
                    named_by,
                    error: Some(e),
                }
            }
        }
    };
    loaded.config.expand_node(node);
    loaded
}

impl Config {
    /// Replace `%n` by the node name in per-node paths, so that one file
    /// can serve nodes that share a file system.
    pub fn expand_node(&mut self, node: &NodeName) {
        let expand = |p: &mut PathBuf| {
            if p.to_string_lossy().contains("%n") {
                *p = PathBuf::from(p.to_string_lossy().replace("%n", node.as_str()));
            }
        };
        expand(&mut self.state_dir);
        expand(&mut self.run_lock_dir);
        expand(&mut self.kernel_log);
        for p in [
            &mut self.records_dir,
            &mut self.log_file,
            &mut self.prometheus_textfile,
            &mut self.xid.journal_path,
        ]
        .into_iter()
        .flatten()
        {
            expand(p);
        }
    }
}
