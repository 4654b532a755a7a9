//! The runs of gpu-health, each written once: the Prolog ([`prolog`]),
//! the health check ([`health_check`]), the Epilog ([`epilog`]), `gpu-health
//! resume` ([`resume`]), the SPANK plugin's step end ([`step_end`]) and the read-only `gpu-health check` (through
//! [`node_check`]). The binaries parse arguments and call these.
//!
//! Every run that may act goes the same way:
//! 1. start ([`RunContext::start`]): node name, configuration, log target,
//!    state directory, each checked once;
//! 2. probe and judge ([`node_check`]): a snapshot, pure checks, the
//!    kernel-log scan, the findings still pending from earlier runs;
//! 3. decide ([`act::decide`], pure), then act ([`act::act`]): drain
//!    through the brake, or keep what could not be acted on as pending;
//! 4. commit: only now is anything marked as handled (the kernel-log
//!    cursor and repeat history, [`node_check::commit`]).

pub mod act;
pub mod epilog;
pub mod health_check;
mod inventory;
pub mod job_env;
pub mod node_check;
pub mod pci_bus;
pub mod preview;
pub mod prolog;
mod reboot_history;
pub mod resume;
mod snapshot_file;
pub mod step;
pub mod step_end;
mod withdraw_reboot;

use std::path::Path;
use std::time::Duration;

use crate::config::{self, Config, Loaded};
use crate::ids::{self, NodeName};
use crate::slurm::Scontrol;
use crate::state::StateDir;

pub use job_env::{JobEnv, MODE_ENV};

/// Whether a run writes state or only reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateAccess {
    /// Create the state directory when missing (Prolog, Epilog, health
    /// check, resume).
    Write,
    /// Read what is there (`gpu-health check`, `xids`).
    Read,
}

/// What every run starts from.
pub struct RunContext {
    pub node: NodeName,
    pub loaded: Loaded,
    pub state: StateDir,
    /// Unix ms when the run started.
    pub now_ms: u64,
    /// `CLOCK_BOOTTIME` ms at the run's start, read with `now_ms`: the
    /// ledger's quiet times count on it within a boot (see
    /// [`RunContext::clock`]).
    pub boot_ms: Option<u64>,
    /// When the run started, on the monotonic clock: what a run has
    /// spent of its time limit (the wall clock may step, as chrony does
    /// right after a boot).
    pub started: std::time::Instant,
    /// Slurm as the run's acting steps reach it: `None` runs `scontrol`
    /// (the configured program, with the run's budget); the fault
    /// ledger's model test gives a model of slurmctld.
    pub slurm: Option<std::sync::Arc<dyn crate::ops::drain::SlurmCalls + Send + Sync>>,
    /// The directories of the run's `PATH` (programs named without one,
    /// such as `dcgmi`, are looked for there).
    pub search_path: Vec<std::path::PathBuf>,
    /// This boot's id, read once a run needs it (see [`RunContext::boot_id`]).
    boot_id: std::sync::OnceLock<String>,
}

impl RunContext {
    /// Find the node name (`SLURMD_NODENAME`, else the host name), load
    /// the configuration for it (`explicit`, else the environment's file;
    /// drop-in and `%n` applied), point the log at the configured file,
    /// open the state directory, and say loudly what is wrong with any of
    /// them. Never fails: a bad configuration means the fallback is in
    /// force and nothing drains; a bad state directory means empty state.
    pub fn start(
        env: impl Fn(&str) -> Option<String>,
        explicit: Option<&Path>,
        access: StateAccess,
    ) -> RunContext {
        let started = std::time::Instant::now();
        let now_ms = crate::time::unix_ms();
        let boot_ms = crate::time::boot_ms();
        let (node, node_note) = ids::this_node(&env);
        let loaded = config::load_for_node(explicit, &node, &env);
        crate::logging::set_target(&node, loaded.config.log_file.as_deref());
        if let Some(line) = loaded.error_line() {
            log::error!("{line}");
        }
        if let Some(n) = node_note {
            log::warn!("{n}");
        }
        let state = match access {
            StateAccess::Write => StateDir::open(&loaded.config.state_dir),
            StateAccess::Read => StateDir::open_existing(&loaded.config.state_dir),
        };
        match state.problem() {
            Some(why) if access == StateAccess::Write => log::error!(
                "gpu-health: state directory {} is unusable ({why}): running with empty state, \
                 nothing read or saved there, nothing it holds can drain this node",
                state.root().display()
            ),
            _ => {}
        }
        RunContext {
            node,
            loaded,
            state,
            now_ms,
            boot_ms,
            started,
            slurm: None,
            search_path: env("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default(),
            boot_id: std::sync::OnceLock::new(),
        }
    }

    /// This boot's id (`xid.boot_id_path`), read at most once a run so
    /// that the PCI bus answer, the NVLink history and the fault ledger's
    /// reboots hold the same one (the `/dev/kmsg` reader reads it for its
    /// cursor itself); empty, and logged, when it cannot be read or users
    /// other than root may write it.
    pub fn boot_id(&self) -> &str {
        self.boot_id
            .get_or_init(|| match crate::xid::read_boot_id(&self.config().xid) {
                Ok(id) => id,
                Err(e) => {
                    log::error!(
                        "cannot read the boot id {}: {e}; reboots cannot be told apart (nothing is drained for that)",
                        self.config().xid.boot_id_path.display()
                    );
                    String::new()
                }
            })
    }

    /// The run's clock for the ledger: the wall time and the boot clock
    /// at its start, and the boot they belong to.
    pub fn clock(&self) -> crate::ledger::Clock<'_> {
        crate::ledger::Clock {
            wall_ms: self.now_ms,
            boot_ms: self.boot_ms,
            boot_id: self.boot_id(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.loaded.config
    }

    pub fn config_ok(&self) -> bool {
        self.loaded.ok()
    }

    /// scontrol for this run; its time budget (`scontrol_timeout_ms`, for
    /// all Slurm commands of the run together) starts now.
    pub fn scontrol(&self) -> Scontrol<'_> {
        Scontrol::new(
            &self.config().scontrol,
            Duration::from_millis(self.config().scontrol_timeout_ms),
        )
    }
}

/// What `gpu-health-prolog` was started as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Prolog,
    HealthCheck,
    /// Started where it does not belong (as the Epilog, or by slurmctld):
    /// the text says so; the run does nothing and exits 0.
    Misplaced(String),
}

/// Pure: which run `gpu-health-prolog` does. `--health-check` says it;
/// else slurmd's `SLURM_SCRIPT_CONTEXT` (`prolog_slurmd` for the Prolog,
/// unset for HealthCheckProgram); without it (older Slurm) the Prolog has
/// a `SLURM_JOB_ID` and HealthCheckProgram none.
pub fn invocation(env: impl Fn(&str) -> Option<String>, health_flag: bool) -> Invocation {
    if health_flag {
        return Invocation::HealthCheck;
    }
    match env("SLURM_SCRIPT_CONTEXT").as_deref() {
        Some("prolog_slurmd") => Invocation::Prolog,
        Some(other) => Invocation::Misplaced(format!(
            "gpu-health-prolog started with SLURM_SCRIPT_CONTEXT={:?}: it is the Prolog \
             (Prolog=) and HealthCheckProgram; the Epilog is gpu-health-epilog \
             (docs/install.md). Nothing checked.",
            crate::text::printable(other)
        )),
        None if env("SLURM_JOB_ID").is_some() => Invocation::Prolog,
        None => Invocation::HealthCheck,
    }
}

/// A run's outcome must never be a panic crossing into Slurm: a Prolog or
/// Epilog that dies is a node drained with a vague reason. Runs `body`
/// and turns a panic into `on_panic`, logged as gpu-health's own fault.
pub fn guarded<T>(what: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|_| {
        log::error!("internal error in {what}; no action taken for it");
        on_panic
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state file of a typed value is bound to exactly one type
    /// (`StateValue`), and no two types share a file. The legacy files of
    /// the ledger's import are bound inside `ledger::store`.
    #[test]
    fn every_state_file_has_one_type() {
        use crate::ids::JobId;
        use crate::state::{StateFile, StateValue};
        let job = JobId::from(1);
        let bound: Vec<(StateFile, &str)> = vec![
            (crate::xid::XidState::file(()), "XidState"),
            (crate::checks::EccHistory::file(()), "EccHistory"),
            (crate::checks::LinkHistory::file(()), "LinkHistory"),
            (crate::snapshot::NodeSnapshot::file(()), "NodeSnapshot"),
            (crate::snapshot::NodeTopology::file(()), "NodeTopology"),
            (pci_bus::PciBusSeen::file(()), "PciBusSeen"),
            (crate::ledger::Ledger::file(()), "Ledger"),
            (<Vec<crate::records::JobRecord>>::file(()), "recent jobs"),
            (crate::verdict::JobVerdict::file(job), "JobVerdict"),
            (crate::records::JobStart::file(job), "JobStart"),
            (crate::records::PowerPeaks::file(job), "PowerPeaks"),
            (
                crate::records::metrics::HealthMetrics::file(()),
                "HealthMetrics",
            ),
        ];
        for (i, (a, ta)) in bound.iter().enumerate() {
            for (b, tb) in &bound[i + 1..] {
                assert_ne!(a, b, "{ta} and {tb} share a file");
            }
        }
        // The files without a type: bytes (a spooled record line, an
        // unreadable ledger set aside) or no content (the lock).
        let untyped = [
            StateFile::SpooledRecord { end_ms: 1, job },
            StateFile::LedgerUnreadable,
            StateFile::RunLock,
            StateFile::TextfileLock,
            StateFile::TierLock,
        ];
        for u in untyped {
            assert!(bound.iter().all(|(f, _)| *f != u));
        }
    }

    use crate::test_env as env;

    #[test]
    fn which_run_the_prolog_binary_does() {
        let context = |c| [("SLURM_SCRIPT_CONTEXT", c), ("SLURM_JOB_ID", "7")];
        assert_eq!(
            invocation(env(&context("prolog_slurmd")), false),
            Invocation::Prolog
        );
        assert_eq!(
            invocation(env(&context("prolog_slurmd")), true),
            Invocation::HealthCheck
        );
        assert!(matches!(
            invocation(env(&context("epilog_slurmd")), false),
            Invocation::Misplaced(m) if m.contains("gpu-health-epilog")
        ));
        // Without SLURM_SCRIPT_CONTEXT: the job id tells them apart.
        assert_eq!(
            invocation(env(&[("SLURM_JOB_ID", "7")]), false),
            Invocation::Prolog
        );
        assert_eq!(invocation(env(&[]), false), Invocation::HealthCheck);
        // A Prolog with context but no job id is still the Prolog.
        assert_eq!(
            invocation(env(&[("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")]), false),
            Invocation::Prolog
        );
    }
}
