//! What the job's environment says (Prolog/Epilog variables), checked.

use crate::ids::JobId;
use crate::text::printable;
use crate::verdict::{parse_gpu_list, Mode};

/// The variable that carries `--gpu-health` to Prolog/Epilog.
pub const MODE_ENV: &str = "SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health";

/// The job of a Prolog or Epilog run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    pub job_id: Option<JobId>,
    /// The job's GPUs on this node (NVML indices), at most [`crate::snapshot::MAX_GPUS`].
    pub job_gpus: Vec<u32>,
    pub mode: Mode,
    /// Problems with the environment itself (reported, never fatal).
    pub notes: Vec<String>,
}

impl JobEnv {
    /// Build from an environment lookup (`std::env::var` in production).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> JobEnv {
        let mut notes = Vec::new();
        let job_id = match get("SLURM_JOB_ID") {
            Some(id) => match JobId::parse(&id) {
                Ok(id) => Some(id),
                Err(e) => {
                    notes.push(format!("ignoring SLURM_JOB_ID: {e}"));
                    None
                }
            },
            None => None,
        };
        let gpus_var = get("SLURM_JOB_GPUS")
            .or_else(|| get("CUDA_VISIBLE_DEVICES"))
            .unwrap_or_default();
        let job_gpus = match parse_gpu_list(&gpus_var) {
            // At most MAX_GPUS, each below it: parse_gpu_list refuses the rest.
            Ok(g) => g,
            Err(e) => {
                notes.push(format!("ignoring SLURM_JOB_GPUS: {}", printable(&e)));
                Vec::new()
            }
        };
        let mode = match get(MODE_ENV) {
            None => Mode::default(),
            Some(v) => Mode::parse(&v).unwrap_or_else(|| {
                notes.push(format!(
                    "unknown --gpu-health mode {:?}, using warn",
                    printable(&v)
                ));
                Mode::default()
            }),
        };
        JobEnv {
            job_id,
            job_gpus,
            mode,
            notes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_env as env;

    #[test]
    fn from_prolog_env() {
        let c = JobEnv::from_env(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_GPUS", "0,1,6"),
            (MODE_ENV, "strict"),
        ]));
        assert_eq!(
            c,
            JobEnv {
                job_id: Some(JobId::from(42)),
                job_gpus: vec![0, 1, 6],
                mode: Mode::Strict,
                notes: vec![]
            }
        );
    }

    #[test]
    fn hostile_values_become_notes() {
        let c = JobEnv::from_env(env(&[
            ("SLURM_JOB_ID", "../../etc"),
            ("SLURM_JOB_GPUS", "x\x1b[2J"),
            (MODE_ENV, "yolo"),
        ]));
        assert_eq!(c.job_id, None);
        assert!(c.job_gpus.is_empty());
        assert_eq!(c.mode, Mode::Warn);
        assert_eq!(c.notes.len(), 3);
        assert!(c.notes.iter().all(|n| !n.contains('\x1b')), "{:?}", c.notes);
    }

    #[test]
    fn gpu_list_is_capped_at_what_a_node_holds() {
        let c = JobEnv::from_env(env(&[("SLURM_JOB_GPUS", "0-1000")]));
        assert!(c.job_gpus.is_empty());
        assert!(c.notes[0].contains("at most 64"), "{:?}", c.notes);
        let c = JobEnv::from_env(env(&[("SLURM_JOB_GPUS", "0-63")]));
        assert_eq!(c.job_gpus.len(), 64);
        let c = JobEnv::from_env(env(&[("SLURM_JOB_GPUS", "64")]));
        assert!(c.job_gpus.is_empty());
    }
}
