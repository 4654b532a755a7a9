//! The health gate shared by the prolog, the health check and the admin
//! command: probe the node, judge it, and (at the edge) act.
//!
//! [`check_node`] probes (NVML with a deadline, sysfs, saved history, the
//! kernel log); [`decide`] is pure; [`persist`] and [`drain`] act.

use std::time::Duration;

use crate::checks::{self, CheckInput, EccHistory};
use crate::config::Config;
use crate::finding::{drain_reason, Action, Finding};
use crate::ops;
pub use crate::ops::drain::DrainOutcome;
use crate::probe::{self, ProbeOptions};
use crate::snapshot::NodeSnapshot;
use crate::state::{self, StatePaths};
use crate::verdict::{parse_gpu_list, Mode};

/// What the job's environment says (Prolog/Epilog variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobContext {
    pub node: String,
    pub job_id: Option<String>,
    pub job_gpus: Vec<u32>,
    pub mode: Mode,
    /// Problems with the environment itself (reported, never fatal).
    pub notes: Vec<String>,
}

/// The environment variable that carries `--gpu-health` to Prolog/Epilog.
pub const MODE_ENV: &str = "SPANK__SLURM_SPANK_OPTION_gpu_health_gpu_health";

impl JobContext {
    /// Build from an environment lookup (`std::env::var` in production).
    pub fn from_env(
        get: impl Fn(&str) -> Option<String>,
        hostname: impl FnOnce() -> String,
    ) -> JobContext {
        let mut notes = Vec::new();
        let node = get("SLURMD_NODENAME")
            .filter(|n| !n.is_empty())
            .unwrap_or_else(hostname);
        let job_id = match get("SLURM_JOB_ID") {
            Some(id) if state::valid_job_id(&id) => Some(id),
            Some(id) => {
                notes.push(format!("ignoring malformed SLURM_JOB_ID {id:?}"));
                None
            }
            None => None,
        };
        let gpus_var = get("SLURM_JOB_GPUS")
            .or_else(|| get("CUDA_VISIBLE_DEVICES"))
            .unwrap_or_default();
        let job_gpus = parse_gpu_list(&gpus_var).unwrap_or_else(|e| {
            notes.push(format!("ignoring SLURM_JOB_GPUS: {e}"));
            Vec::new()
        });
        let mode = match get(MODE_ENV) {
            None => Mode::default(),
            Some(v) => Mode::parse(&v).unwrap_or_else(|| {
                notes.push(format!("unknown --gpu-health mode {v:?}, using warn"));
                Mode::default()
            }),
        };
        JobContext {
            node,
            job_id,
            job_gpus,
            mode,
            notes,
        }
    }
}

/// The host name, for runs outside Slurm.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; the last byte stays 0, so
    // the name is NUL-terminated even when it was cut.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let full = String::from_utf8_lossy(&buf[..end]).into_owned();
    full.split('.').next().unwrap_or("localhost").to_string()
}

/// Everything one check run learned.
pub struct NodeCheck {
    pub snapshot: NodeSnapshot,
    pub findings: Vec<Finding>,
    pub history: EccHistory,
    /// The saved ECC history was missing or unusable: rewrite it.
    pub history_stale: bool,
    pub xid: crate::xid::ScanOutcome,
}

/// Probe the node and run every check. Never fails: problems become
/// findings or log lines.
pub fn check_node(config: &Config, opts: ProbeOptions, now_ms: u64) -> NodeCheck {
    let deadline = Duration::from_millis(config.nvml_deadline_ms);
    let mut snapshot = probe::probe_with_deadline(config.nvml_library.as_deref(), opts, deadline);
    snapshot.pci_gpus = probe::sysfs::nvidia_gpus_on_pci(&config.sysfs_root);
    let paths = StatePaths::new(&config.state_dir);
    let (history, history_stale) = match state::load_json::<EccHistory>(&paths.ecc_history()) {
        Ok(Some(h)) => (h, false),
        Ok(None) => (EccHistory::default(), true),
        Err(e) => {
            log::warn!("ECC history unusable, starting a new one: {e}");
            (EccHistory::default(), true)
        }
    };
    let mut findings = checks::evaluate(&CheckInput {
        snapshot: &snapshot,
        config,
        history: &history,
        now_ms,
    });
    let xid = crate::xid::scan(
        &config.kernel_log,
        &paths.kernel_log_cursor(),
        &config.xid,
        &snapshot,
        now_ms,
    );
    for n in &xid.notes {
        log::warn!("kernel log: {n}");
    }
    findings.extend(xid.findings.iter().cloned());
    findings.extend(crate::ops::rdma_ports::check_node_ports(
        &config.rdma,
        &config.sysfs_root,
    ));
    NodeCheck {
        snapshot,
        findings,
        history,
        history_stale,
        xid,
    }
}

/// [`check_node`] plus the draining findings the brake held back in earlier
/// runs: what the runs that may drain (prolog, health check) judge.
pub fn check_node_for_drain(config: &Config, opts: ProbeOptions, now_ms: u64) -> NodeCheck {
    let mut check = check_node(config, opts, now_ms);
    crate::ops::drain_state::merge_held_back(
        &config.state_dir,
        &mut check.findings,
        config.recovery.quiet_ms(),
        now_ms,
    );
    check
}

/// What to do about a run's findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Drain the node with this reason.
    pub drain_reason: Option<String>,
    /// Why a draining finding did not drain.
    pub held_back: Option<String>,
}

/// Pure: drain when a finding asks for it and the configuration could be
/// trusted (a configuration mistake must never drain a node).
pub fn decide(findings: &[Finding], config_ok: bool) -> Decision {
    let reason = drain_reason(findings);
    match reason {
        Some(r) if !config_ok => Decision {
            drain_reason: None,
            held_back: Some(format!("configuration error; would have drained: {r}")),
        },
        r => Decision {
            drain_reason: r,
            held_back: None,
        },
    }
}

/// Save what later runs need: ECC history, the latest snapshot (the SPANK
/// plugin reads its topology), the kernel-log cursor. Failures are logged.
pub fn persist(config: &Config, check: &mut NodeCheck, now_ms: u64) {
    let paths = StatePaths::new(&config.state_dir);
    if let Err(e) = state::ensure_private_dir(&paths.root) {
        log::error!("state directory unusable, nothing saved: {e}");
        return;
    }
    let samples = check
        .snapshot
        .gpus
        .iter()
        .filter_map(|g| Some((g.uuid.clone()?, g.ecc?.aggregate_corrected)))
        .collect::<Vec<_>>();
    // The history takes at most one sample a minute: most runs leave it
    // as it is, and then it is not rewritten.
    if check.history.record(samples, now_ms) || check.history_stale {
        if let Err(e) = state::save_json(&paths.ecc_history(), &check.history, false) {
            log::error!("cannot save the ECC history: {e}");
        }
    }
    if let Err(e) = state::save_json(&paths.node_snapshot(), &check.snapshot, false) {
        log::error!("cannot save the node snapshot: {e}");
    }
    if let Err(e) = crate::xid::commit(&paths.kernel_log_cursor(), &check.xid.state) {
        log::error!("cannot save kernel-log cursor: {e}");
    }
}

/// Drain for `findings` with `reason`, through the brake. Draining
/// findings the brake holds back are kept in the state directory, so that
/// later runs drain as soon as the brake allows and keep warning jobs.
pub fn drain_findings(
    config: &Config,
    node: &str,
    findings: &[Finding],
    reason: &str,
    now_ms: u64,
) -> DrainOutcome {
    let outcome = ops::drain::drain_guarded(config, node, reason, now_ms);
    match &outcome {
        DrainOutcome::Drained => ops::drain_state::clear_held_back(&config.state_dir),
        DrainOutcome::HeldBack(why) => {
            ops::drain_state::save_held_back(&config.state_dir, why, findings, now_ms)
        }
        DrainOutcome::Foreign(_) | DrainOutcome::Failed(_) => {}
    }
    outcome
}

/// A finding that tells a job why its node was not drained although a
/// check asked for it (strict jobs are refused on it).
pub fn not_drained_note(outcome: &DrainOutcome) -> Option<Finding> {
    let (summary, why) = match outcome {
        DrainOutcome::Drained => return None,
        DrainOutcome::HeldBack(w) => ("drain held back by the brake", w),
        DrainOutcome::Foreign(w) => ("node drained by someone else", w),
        DrainOutcome::Failed(w) => ("drain failed", w),
    };
    Some(Finding::node(
        "brake",
        Action::Warn,
        summary.to_string(),
        format!("this node has a fault that should have drained it, but it was not drained: {why}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn job_context_from_prolog_env() {
        let c = JobContext::from_env(
            env(&[
                ("SLURMD_NODENAME", "n2"),
                ("SLURM_JOB_ID", "42"),
                ("SLURM_JOB_GPUS", "0,1,6"),
                (MODE_ENV, "strict"),
            ]),
            || "host".into(),
        );
        assert_eq!(
            c,
            JobContext {
                node: "n2".into(),
                job_id: Some("42".into()),
                job_gpus: vec![0, 1, 6],
                mode: Mode::Strict,
                notes: vec![]
            }
        );
    }

    #[test]
    fn hostile_env_values_become_notes() {
        let c = JobContext::from_env(
            env(&[
                ("SLURM_JOB_ID", "../../etc"),
                ("SLURM_JOB_GPUS", "x"),
                (MODE_ENV, "yolo"),
            ]),
            || "host".into(),
        );
        assert_eq!(c.node, "host");
        assert_eq!(c.job_id, None);
        assert!(c.job_gpus.is_empty());
        assert_eq!(c.mode, Mode::Warn);
        assert_eq!(c.notes.len(), 3);
    }

    #[test]
    fn config_error_never_drains() {
        let f = vec![Finding::node(
            "nvml",
            Action::Drain,
            "NVML init failed".into(),
            "m".into(),
        )];
        let d = decide(&f, true);
        assert_eq!(
            d.drain_reason.as_deref(),
            Some("gpu-health: NVML init failed (drain)")
        );
        let d = decide(&f, false);
        assert_eq!(d.drain_reason, None);
        assert!(d.held_back.unwrap().contains("NVML init failed"));
        let w = vec![Finding::node("x", Action::Warn, "w".into(), "m".into())];
        assert_eq!(
            decide(&w, true),
            Decision {
                drain_reason: None,
                held_back: None
            }
        );
    }
}
