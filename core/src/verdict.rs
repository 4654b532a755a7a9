//! A job's verdict: what the prolog found on the job's node, kept for the
//! SPANK plugin (strict mode) and the epilog.

use serde::{Deserialize, Serialize};

use crate::finding::Finding;
use crate::ids::JobId;
use crate::snapshot::MAX_GPUS;
use crate::text::printable;

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

/// Parse SLURM_JOB_GPUS (`0,1,2` or ranges such as `0-3,6`): node-local
/// indices, each below [`MAX_GPUS`]. The step's list is the user's to set
/// (`--export`), and it is read in root's slurmstepd: the answer is kept
/// in a bit set, so no list of any length or number of ranges expands to
/// more than [`MAX_GPUS`] entries, and an error quotes at most a few
/// characters of it.
pub fn parse_gpu_list(s: &str) -> Result<Vec<u32>, String> {
    const _: () = assert!(MAX_GPUS <= 64, "the set below is one u64");
    let mut set: u64 = 0;
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let shown = || printable(&part.chars().take(24).collect::<String>()).into_owned();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let index = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("bad GPU index {:?}", shown()))
        };
        let (lo, hi) = (index(lo)?, index(hi)?);
        if lo > hi {
            return Err(format!("bad GPU range {:?}", shown()));
        }
        if hi as usize >= MAX_GPUS {
            return Err(format!(
                "GPU index {hi} in {:?}: a node has at most {MAX_GPUS} GPUs",
                shown()
            ));
        }
        for i in lo..=hi {
            set |= 1 << i;
        }
    }
    Ok((0..MAX_GPUS as u32)
        .filter(|i| set & (1 << i) != 0)
        .collect())
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
        assert_eq!(parse_gpu_list(" 7, 0-1 ,1,7").unwrap(), vec![0, 1, 7]);
        assert_eq!(parse_gpu_list("63").unwrap(), vec![63]);
        assert!(parse_gpu_list("64")
            .unwrap_err()
            .contains("at most 64 GPUs"));
    }

    /// A user's SLURM_STEP_GPUS of 127 KiB of ranges (found by a review:
    /// it expanded to 8.5 million indices in slurmstepd) is refused, and
    /// one of every index many times over is still one entry each.
    #[test]
    fn a_list_of_any_size_stays_within_a_node() {
        let ranges: Vec<String> = (0..12_000u32)
            .map(|i| format!("{}-{}", i * 1025, i * 1025 + 1024))
            .collect();
        let huge = ranges.join(",");
        assert!(huge.len() > 127 << 10);
        let e = parse_gpu_list(&huge).unwrap_err();
        assert!(e.len() < 120, "{e}");
        let repeated = vec!["0-63"; 30_000].join(",");
        assert_eq!(
            parse_gpu_list(&repeated).unwrap(),
            (0..64).collect::<Vec<u32>>()
        );
        let one_long_part = "7".repeat(200_000);
        assert!(parse_gpu_list(&one_long_part).unwrap_err().len() < 120);
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::parse("strict"), Some(Mode::Strict));
        assert_eq!(Mode::parse("Strict"), None);
        assert_eq!(Mode::default(), Mode::Warn);
    }
}
