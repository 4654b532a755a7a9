//! The start of the SPANK plugin's step side (slurmstepd, remote
//! init_post_opt): node name, configuration and state directory, by the
//! same rules as [`RunContext::start`](super::RunContext::start), so that
//! the plugin finds the directory the Prolog wrote.
//!
//! Not `RunContext::start` itself, because slurmstepd is not a run of
//! ours:
//! - two environments meet there: slurmstepd's own (root's, inherited
//!   from slurmd) and the job's (its user's). The node name may come from
//!   either (slurmd's first); the configuration only from slurmstepd's,
//!   since it names the state directory whose verdict strict mode trusts
//!   and the program run as root at step end;
//! - nothing is created (no state directory, no log file in a process the
//!   job shares), and the log facade has no logger there: what must be
//!   said comes back as [`StepStart::notes`], for Slurm's log.

use std::path::Path;

use crate::config::{self, Config, Loaded};
use crate::ids::{self, NodeName};
use crate::state::StateDir;

/// What the step side starts from.
pub struct StepStart {
    pub node: NodeName,
    pub loaded: Loaded,
    /// Opened once, for reading only; a missing or unsafe directory is
    /// empty state, and says why in every read.
    pub state: StateDir,
    /// Unix ms of the start: the step's processes start after it.
    pub started_ms: u64,
    /// Lines to log once, in order, each starting `gpu-health:` (the
    /// node name's problem, the configuration's error).
    pub notes: Vec<String>,
}

impl StepStart {
    /// `slurmstepd_env` is slurmstepd's process environment, `job_env`
    /// the job's (`spank_getenv`); `explicit` is plugstack.conf's
    /// `config=`. Never fails.
    pub fn start(
        slurmstepd_env: impl Fn(&str) -> Option<String>,
        job_env: impl Fn(&str) -> Option<String>,
        explicit: Option<&Path>,
    ) -> StepStart {
        let started_ms = crate::time::unix_ms();
        // slurmd sets SLURMD_NODENAME in its own environment (several
        // slurmd may share a host); the job's comes second: in a batch
        // job it is the batch node's, exported to every step.
        let (node, node_note) = ids::this_node(|k| {
            slurmstepd_env(k)
                .filter(|v| !v.is_empty())
                .or_else(|| job_env(k))
        });
        let loaded = config::load_for_node(explicit, &node, &slurmstepd_env);
        let mut notes: Vec<String> = node_note
            .map(|n| format!("gpu-health: {n}"))
            .into_iter()
            .collect();
        notes.extend(loaded.error_line());
        let state = StateDir::open_existing(&loaded.config.state_dir);
        StepStart {
            node,
            loaded,
            state,
            started_ms,
            notes,
        }
    }

    pub fn config(&self) -> &Config {
        &self.loaded.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_env as env;

    fn config_file(dir: &Path) -> String {
        let path = dir.join("gpu-health.toml");
        let state = dir.join("state-%n");
        std::fs::write(
            &path,
            format!("state_dir = {:?}\n", state.display().to_string()),
        )
        .unwrap();
        path.display().to_string()
    }

    #[test]
    fn node_from_slurmstepd_first_then_the_jobs() {
        let t = tempfile::tempdir().unwrap();
        let conf = config_file(t.path());
        let own = [
            ("SLURMD_NODENAME", "n1"),
            ("GPU_HEALTH_CONFIG", conf.as_str()),
        ];
        let job = [("SLURMD_NODENAME", "n7")];
        let s = StepStart::start(env(&own), env(&job), None);
        assert_eq!(s.node.as_str(), "n1");
        assert!(s.notes.is_empty(), "{:?}", s.notes);
        assert_eq!(s.config().state_dir, t.path().join("state-n1"));
        // An empty value of slurmstepd's counts as none.
        let own = [
            ("SLURMD_NODENAME", ""),
            ("GPU_HEALTH_CONFIG", conf.as_str()),
        ];
        let s = StepStart::start(env(&own), env(&job), None);
        assert_eq!(s.node.as_str(), "n7");
        assert_eq!(s.config().state_dir, t.path().join("state-n7"));
    }

    /// The job's user cannot name the configuration (and with it the
    /// state directory strict mode trusts, and the step-end program).
    #[test]
    fn the_jobs_environment_never_names_the_configuration() {
        let t = tempfile::tempdir().unwrap();
        let conf = config_file(t.path());
        let job = [
            ("SLURMD_NODENAME", "n1"),
            ("GPU_HEALTH_CONFIG", conf.as_str()),
        ];
        let missing = t.path().join("missing.toml");
        let s = StepStart::start(env(&[]), env(&job), Some(&missing));
        assert_ne!(s.loaded.path.display().to_string(), conf);
        assert_eq!(s.loaded.path, missing);
        // The explicit file is missing: one line says so, and the
        // defaults are in force.
        assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
        assert!(
            s.notes[0].starts_with("gpu-health: configuration error"),
            "{:?}",
            s.notes
        );
        assert_eq!(s.config().state_dir, Config::default().state_dir);
    }

    #[test]
    fn the_state_directory_is_never_created() {
        let t = tempfile::tempdir().unwrap();
        let conf = config_file(t.path());
        let own = [("SLURMD_NODENAME", "n1")];
        let s = StepStart::start(env(&own), env(&[]), Some(Path::new(&conf)));
        assert!(!t.path().join("state-n1").exists());
        assert_eq!(s.state.problem(), Some("does not exist"));
        assert!(s.notes.is_empty(), "{:?}", s.notes);
    }
}
