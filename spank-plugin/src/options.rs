//! The user's options: `--gpu-health`, `--tp-size`, `--nccl-debug`.
//!
//! Submission (sbatch/salloc/srun) validates strictly and refuses with a
//! message; the remote side, which must never fail its early callbacks,
//! reads the same values leniently.

use std::path::Path;

use gpu_health_core::verdict::Mode;

use gpu_health_core::plugstack::options::user_options;
use gpu_health_core::plugstack::PluginArgs;

/// NCCL_DEBUG levels NCCL knows.
pub const NCCL_DEBUG_LEVELS: [&str; 5] = ["VERSION", "WARN", "INFO", "ABORT", "TRACE"];
pub const NCCL_DEBUG_DEFAULT: &str = "INFO";
/// Largest TP group accepted (no node holds more GPUs).
pub const MAX_TP_SIZE: u32 = 64;

/// The option values Slurm handed to the plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptionValues {
    pub gpu_health: Option<String>,
    pub tp_size: Option<String>,
    /// `Some(None)`: `--nccl-debug` without a level.
    pub nccl_debug: Option<Option<String>>,
}

impl OptionValues {
    /// Take the value Slurm gave the user option `name` (as the table in
    /// `gpu_health_core::plugstack::options` names it); `false` for a
    /// name this plugin does not handle.
    pub fn set(&mut self, name: &str, value: Option<String>) -> bool {
        match name {
            "gpu-health" => self.gpu_health = value,
            "tp-size" => self.tp_size = value,
            // Given without a level, the option reaches a nested srun or
            // sbatch through the job's environment as Slurm's "(null)",
            // and the batch step as "": both mean no level (INFO).
            "nccl-debug" => {
                self.nccl_debug = Some(value.filter(|v| !v.is_empty() && v != "(null)"))
            }
            _ => return false,
        }
        true
    }
}

/// The user option Slurm's callback means by `val`: the option's place
/// among the table's user options, from 1 (as the plugin registers them).
pub fn user_option_name(val: i32) -> Option<&'static str> {
    let place = usize::try_from(val).ok()?.checked_sub(1)?;
    user_options().nth(place).map(|o| o.name)
}

/// The options once validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOptions {
    pub mode: Mode,
    pub tp_size: Option<u32>,
    /// NCCL_DEBUG level when `--nccl-debug` was given.
    pub nccl_debug: Option<String>,
}

/// Strict validation at submission: every bad value is an error message.
pub fn validate(values: &OptionValues, args: &PluginArgs) -> Result<JobOptions, String> {
    let mode = match values.gpu_health.as_deref() {
        None => args.default_mode,
        Some(v) => match Mode::parse(v).filter(|_| v == v.trim()) {
            None => {
                return Err(format!(
                    "--gpu-health={v}: not a mode; allowed values are {}",
                    Mode::ALLOWED
                ))
            }
            Some(Mode::Off) if !args.allow_off => {
                return Err(
                    "--gpu-health=off is not allowed on this cluster (allow_off=no); allowed values are warn, strict"
                        .into(),
                )
            }
            Some(m) => m,
        },
    };
    let tp_size = values.tp_size.as_deref().map(parse_tp_size).transpose()?;
    let nccl_debug = values
        .nccl_debug
        .as_ref()
        .map(|level| parse_nccl_debug(level.as_deref()))
        .transpose()?;
    Ok(JobOptions {
        mode,
        tp_size,
        nccl_debug,
    })
}

/// Lenient reading for the remote side: a bad value (only possible when
/// submission did not load the plugin) falls back to the default and is
/// reported in the returned notes.
pub fn read_lenient(values: &OptionValues, args: &PluginArgs) -> (JobOptions, Vec<String>) {
    let mut notes = Vec::new();
    let mode = match values.gpu_health.as_deref() {
        None => args.default_mode,
        Some(v) => match Mode::parse(v) {
            Some(Mode::Off) if !args.allow_off => {
                notes.push(
                    "--gpu-health=off is not allowed (allow_off=no); using the default".into(),
                );
                args.default_mode
            }
            Some(m) => m,
            None => {
                notes.push(format!(
                    "--gpu-health={v:?} is not a mode; using the default"
                ));
                args.default_mode
            }
        },
    };
    let tp_size = match values.tp_size.as_deref().map(parse_tp_size) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(e)) => {
            notes.push(format!("{e}; ignored"));
            None
        }
    };
    let nccl_debug = values.nccl_debug.as_ref().map(|level| {
        parse_nccl_debug(level.as_deref()).unwrap_or_else(|e| {
            notes.push(format!("{e}; using {NCCL_DEBUG_DEFAULT}"));
            NCCL_DEBUG_DEFAULT.to_string()
        })
    });
    (
        JobOptions {
            mode,
            tp_size,
            nccl_debug,
        },
        notes,
    )
}

pub fn parse_tp_size(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_TP_SIZE).contains(n) && !v.starts_with('+'))
        .ok_or_else(|| format!("--tp-size={v}: expected a whole number in 1..={MAX_TP_SIZE}"))
}

/// `None` (flag without a level) means INFO; levels are case-insensitive.
pub fn parse_nccl_debug(level: Option<&str>) -> Result<String, String> {
    let Some(level) = level else {
        return Ok(NCCL_DEBUG_DEFAULT.to_string());
    };
    let upper = level.to_ascii_uppercase();
    if NCCL_DEBUG_LEVELS.contains(&upper.as_str()) {
        Ok(upper)
    } else {
        Err(format!(
            "--nccl-debug={level}: allowed levels are {}",
            NCCL_DEBUG_LEVELS.join(", ")
        ))
    }
}

/// Per-rank NCCL debug file in the job's working directory; NCCL itself
/// expands `%h` (host) and `%p` (pid).
pub fn nccl_debug_file(cwd: Option<&Path>) -> String {
    match cwd.filter(|c| c.is_absolute()) {
        Some(c) => c.join("nccl-debug.%h.%p").to_string_lossy().into_owned(),
        None => "nccl-debug.%h.%p".to_string(),
    }
}

/// GPUs per node as srun's environment shows them, when it does.
pub fn gpus_per_node(env: impl Fn(&str) -> Option<String>) -> Option<u32> {
    if let Some(n) = env("SLURM_GPUS_ON_NODE").and_then(|v| v.trim().parse::<u32>().ok()) {
        return Some(n).filter(|&n| n > 0);
    }
    let list = env("SLURM_JOB_GPUS")?;
    let gpus = gpu_health_core::verdict::parse_gpu_list(&list).ok()?;
    u32::try_from(gpus.len()).ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests;
