//! What the admin's plugstack.conf arguments set ([`PluginArgs`]), and
//! what each argument does with its value (the table in `options` names
//! these functions; [`super::parse`] reads the words).

use std::path::PathBuf;

use crate::fabric::nccl::NcclPolicy;
use crate::verdict::Mode;

#[derive(Debug, Clone, PartialEq)]
pub struct PluginArgs {
    /// Mode of jobs that do not give `--gpu-health`.
    pub default_mode: Mode,
    /// Whether users may choose `--gpu-health=off`.
    pub allow_off: bool,
    /// Root of sysfs for the fabric; `None` = the gpu-health config's.
    pub sysfs_root: Option<PathBuf>,
    /// gpu-health configuration file; `None` = the usual lookup.
    pub config: Option<PathBuf>,
    pub nccl: NcclPolicy,
    /// Variables set even when the user already set them.
    pub nccl_force: Vec<String>,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            default_mode: Mode::Warn,
            allow_off: true,
            sysfs_root: None,
            config: None,
            nccl: NcclPolicy::default(),
            nccl_force: Vec::new(),
        }
    }
}

// What each argument does with its value (the table in `options`
// names them): `Err` says why the value cannot be used.

pub(super) fn set_default_mode(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    args.default_mode = Mode::parse(value)
        .filter(|_| value == value.trim())
        .ok_or_else(|| format!("allowed values are {}", Mode::ALLOWED))?;
    Ok(())
}

pub(super) fn set_allow_off(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    args.allow_off = match value {
        "yes" => true,
        "no" => false,
        _ => return Err("allowed values are yes, no".into()),
    };
    Ok(())
}

pub(super) fn set_sysfs_root(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    args.sysfs_root = Some(absolute_path(value)?);
    Ok(())
}

pub(super) fn set_config(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    args.config = Some(absolute_path(value)?);
    Ok(())
}

pub(super) fn set_nccl_ib_timeout(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    args.nccl.ib_timeout = number(value, 1, 31)?;
    Ok(())
}

pub(super) fn set_nccl_ib_tc(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    args.nccl.ib_tc = Some(number(value, 0, 255)?);
    Ok(())
}

pub(super) fn set_nccl_ib_sl(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    args.nccl.ib_sl = Some(number(value, 0, 15)?);
    Ok(())
}

pub(super) fn add_nccl_set(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    let (name, val) = value
        .split_once('=')
        .ok_or_else(|| "expected nccl_set=NAME=VALUE".to_string())?;
    env_name(name)?;
    if val.is_empty() {
        return Err(format!("empty value for {name}"));
    }
    args.nccl.set.retain(|(n, _)| n != name);
    args.nccl.set.push((name.to_string(), val.to_string()));
    Ok(())
}

pub(super) fn add_nccl_force(args: &mut PluginArgs, value: &str) -> Result<(), String> {
    let names: Vec<&str> = value.split(',').collect();
    for name in &names {
        env_name(name)?;
    }
    for name in names {
        if !args.nccl_force.iter().any(|n| n == name) {
            args.nccl_force.push(name.to_string());
        }
    }
    Ok(())
}

fn absolute_path(value: &str) -> Result<PathBuf, String> {
    if value.starts_with('/') && !value.contains('\0') {
        Ok(PathBuf::from(value))
    } else {
        Err("expected an absolute path".into())
    }
}

fn number(value: &str, min: u32, max: u32) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (min..=max).contains(n) && !value.starts_with('+'))
        .ok_or_else(|| format!("expected a whole number in {min}..={max}"))
}

/// A name a shell could export: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?} is not a variable name"))
    }
}
