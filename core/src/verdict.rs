//! A job's verdict: what the prolog found on the job's node, kept for the
//! SPANK plugin (strict mode) and the epilog.

use serde::{Deserialize, Serialize};

use crate::finding::Finding;
use crate::ids::JobId;

/// The job's `--gpu-health` mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Off,
    #[default]
    Warn,
    Strict,
}

impl Mode {
    pub const ALLOWED: &'static str = "off, warn, strict";

    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim() {
            "off" => Some(Mode::Off),
            "warn" => Some(Mode::Warn),
            "strict" => Some(Mode::Strict),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Warn => "warn",
            Mode::Strict => "strict",
        }
    }
}

/// Written by the prolog (`StateFile::JobVerdict`), read by the SPANK plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobVerdict {
    pub job_id: JobId,
    pub node: String,
    pub mode: Mode,
    /// Unix time in milliseconds.
    pub written_at_ms: u64,
    /// Global GPU indices of the job on this node (SLURM_JOB_GPUS).
    pub job_gpus: Vec<u32>,
    /// Node-wide findings and findings on the job's GPUs.
    pub findings: Vec<Finding>,
    /// The configuration could not be used (defaults were in force).
    pub config_error: Option<String>,
}

/// Parse SLURM_JOB_GPUS (`0,1,2` or ranges such as `0-3,6`).
pub fn parse_gpu_list(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let lo: u32 = lo
            .trim()
            .parse()
            .map_err(|_| format!("bad GPU index {part:?}"))?;
        let hi: u32 = hi
            .trim()
            .parse()
            .map_err(|_| format!("bad GPU index {part:?}"))?;
        if lo > hi || hi - lo > 1024 {
            return Err(format!("bad GPU range {part:?}"));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The findings a job on `job_gpus` should hear about: node-wide ones and
/// those on its own GPUs, without who caused them (another user's pid
/// and program stay in the node's log).
pub fn job_findings(findings: &[Finding], job_gpus: &[u32]) -> Vec<Finding> {
    findings
        .iter()
        .filter(|f| f.gpu.is_none_or(|g| job_gpus.contains(&g)))
        .map(|f| Finding {
            culprit: None,
            ..f.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lists() {
        assert_eq!(parse_gpu_list("0,1,2").unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_gpu_list("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_gpu_list("").unwrap(), Vec::<u32>::new());
        assert!(parse_gpu_list("a").is_err());
        assert!(parse_gpu_list("3-1").is_err());
        assert!(parse_gpu_list("0-4294967295").is_err());
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::parse("strict"), Some(Mode::Strict));
        assert_eq!(Mode::parse("Strict"), None);
        assert_eq!(Mode::default(), Mode::Warn);
    }
}
