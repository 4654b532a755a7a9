//! The operations sections of gpu-health.toml: `[brake]`, `[recovery]`,
//! `[dcgm]`, `[rdma]` and `[step_end]`. Plain settings; what they do lives in `ops`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::keys::check;
use crate::finding::Action;

/// Which nodes a node's drain is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrakeScope {
    /// Nodes sharing a partition with the draining node (all the cluster
    /// when the node is in no partition).
    Partition,
    Cluster,
}

/// What a braked drain keeps of the Slurm budget (`scontrol_timeout_ms`)
/// after its wait (`claim_timeout_ms + settle_ms`), for the look at the
/// node table and the drain itself. The load refuses a budget without
/// room for all three (`Config` validation); `ops::drain` holds the
/// same reserve back.
pub const BRAKE_DECIDE_RESERVE_MS: u64 = 400;

/// `[brake]`: never drain more than a share of the nodes at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrakeConfig {
    /// Off: every draining finding drains (not recommended).
    pub enabled: bool,
    /// Largest share of the nodes in scope that gpu-health keeps drained.
    pub max_drained_fraction: f64,
    /// Nodes that may always be drained, however small the scope (so a
    /// 4-node partition can still lose its one broken node).
    pub min_drainable: u32,
    pub scope: BrakeScope,
    /// The look at the node table waits `claim_timeout_ms` plus this
    /// much after the node's claim: it covers clock skew between
    /// nodes (claims are stamped by each node's clock).
    pub settle_ms: u64,
    /// The brake's claim must reach slurmctld this soon, or the node gives
    /// up; the look waits this plus `settle_ms` after the claim.
    pub claim_timeout_ms: u64,
    /// At most this many gpu-health drains (reboots included) in scope at
    /// once, whatever the share allows (0: no cap).
    pub max_drained: u32,
    /// The brake in time: of the nodes in scope, at most
    /// `max_window_fraction` may have been drained (or rebooted) by
    /// gpu-health within the last `window_minutes`, returned or not
    /// (0: no window).
    pub window_minutes: u64,
    pub max_window_fraction: f64,
}

impl Default for BrakeConfig {
    fn default() -> Self {
        BrakeConfig {
            enabled: true,
            max_drained_fraction: 0.10,
            min_drainable: 1,
            scope: BrakeScope::Partition,
            settle_ms: 500,
            claim_timeout_ms: 1_000,
            max_drained: 0,
            window_minutes: 5,
            max_window_fraction: 0.5,
        }
    }
}

impl BrakeConfig {
    pub fn validate(&self) -> Result<(), String> {
        check("brake.max_drained_fraction", self.max_drained_fraction)?;
        check("brake.settle_ms", self.settle_ms as f64)?;
        check("brake.claim_timeout_ms", self.claim_timeout_ms as f64)?;
        check("brake.max_drained", f64::from(self.max_drained))?;
        check("brake.window_minutes", self.window_minutes as f64)?;
        check("brake.max_window_fraction", self.max_window_fraction)
    }

    pub fn window_ms(&self) -> u64 {
        self.window_minutes.saturating_mul(60_000)
    }
}

/// `[recovery]`: the automatic return of `drain-until-clean` drains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecoveryConfig {
    /// Return `drain-until-clean` drains by themselves (health check).
    pub auto_return: bool,
    /// Seconds without a draining fault before such a node returns.
    pub quiet_time_s: u64,
    /// After this many automatic returns for one kind of fault within
    /// the window, that fault drains as `drain` (0: never).
    pub escalate_after_returns: u32,
    pub escalate_window_hours: u64,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            auto_return: true,
            quiet_time_s: 600,
            escalate_after_returns: 3,
            escalate_window_hours: 168,
        }
    }
}

impl RecoveryConfig {
    pub fn validate(&self) -> Result<(), String> {
        check("recovery.quiet_time_s", self.quiet_time_s as f64)?;
        check(
            "recovery.escalate_after_returns",
            f64::from(self.escalate_after_returns),
        )?;
        check(
            "recovery.escalate_window_hours",
            self.escalate_window_hours as f64,
        )
    }

    pub fn quiet_ms(&self) -> u64 {
        self.quiet_time_s.saturating_mul(1000)
    }

    pub fn escalate_window_ms(&self) -> u64 {
        self.escalate_window_hours.saturating_mul(3_600_000)
    }
}

/// `[dcgm]`: the `dcgmi diag` tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DcgmConfig {
    pub enabled: bool,
    /// `dcgmi`, searched on PATH (and the usual system directories:
    /// HealthCheckProgram runs without PATH), or an absolute path.
    pub dcgmi: PathBuf,
    /// `dcgmi diag -r` level (1 takes seconds; 2 about two minutes).
    pub level: u8,
    /// The diag is killed after this long.
    pub timeout_ms: u64,
    /// Run in the prolog of `--gpu-health=strict` jobs.
    pub strict_jobs: bool,
    /// Run before a node returns to service (automatic or `resume`).
    pub before_return: bool,
}

impl Default for DcgmConfig {
    fn default() -> Self {
        DcgmConfig {
            enabled: true,
            dcgmi: PathBuf::from("dcgmi"),
            level: 1,
            timeout_ms: 30_000,
            strict_jobs: true,
            before_return: true,
        }
    }
}

impl DcgmConfig {
    pub fn validate(&self) -> Result<(), String> {
        check("dcgm.level", f64::from(self.level))?;
        check("dcgm.timeout_ms", self.timeout_ms as f64)
    }
}

/// What a bad RDMA port does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PortAction {
    Warn,
    Drain,
    DrainUntilClean,
}

impl PortAction {
    pub fn action(self) -> Action {
        match self {
            PortAction::Warn => Action::Warn,
            PortAction::Drain => Action::Drain,
            PortAction::DrainUntilClean => Action::DrainUntilClean,
        }
    }
}

/// `[rdma]`: ports the node must have up. Nothing expected (the default)
/// means no check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RdmaConfig {
    /// Ports by name, `device:port` (e.g. `mlx5_0:1`).
    pub expected_ports: Vec<String>,
    /// Or: this many ports must be ACTIVE/LinkUp (any names).
    pub expected_count: Option<u32>,
    /// Slowest acceptable rate of an expected port, in Gb/s.
    pub expected_rate_gbps: Option<f64>,
    /// `warn` (default), `drain` or `drain-until-clean`.
    pub action: Option<PortAction>,
}

impl RdmaConfig {
    pub fn is_active(&self) -> bool {
        !self.expected_ports.is_empty() || self.expected_count.is_some_and(|n| n > 0)
    }

    pub fn validate(&self) -> Result<(), String> {
        for p in &self.expected_ports {
            if parse_port_name(p).is_none() {
                return Err(format!(
                    "rdma.expected_ports: {p:?} is not device:port (e.g. mlx5_0:1)"
                ));
            }
        }
        if let Some(n) = self.expected_count {
            check("rdma.expected_count", f64::from(n))?;
        }
        if let Some(r) = self.expected_rate_gbps {
            check("rdma.expected_rate_gbps", r)?;
        }
        Ok(())
    }
}

/// `mlx5_0:1` to (`mlx5_0`, 1).
pub fn parse_port_name(s: &str) -> Option<(&str, u32)> {
    let (dev, port) = s.rsplit_once(':')?;
    let ok = !dev.is_empty()
        && dev
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    Some((dev, port.parse().ok()?)).filter(|_| ok)
}

/// `[step_end]`: what the SPANK plugin does when a step's tasks on a node
/// have ended (in warn and strict mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StepEndConfig {
    /// Tell the job's user which GPUs came near out of memory during the
    /// step (`thresholds.near_oom_share`), in the step's own output.
    pub near_oom_notice: bool,
    /// The admin command the plugin runs for it (`gpu-health step-end`).
    pub program: PathBuf,
    /// It is killed after this long; the step's end waits at most this.
    pub timeout_ms: u64,
}

impl Default for StepEndConfig {
    fn default() -> Self {
        StepEndConfig {
            near_oom_notice: true,
            program: PathBuf::from("/usr/sbin/gpu-health"),
            timeout_ms: 5_000,
        }
    }
}

impl StepEndConfig {
    pub fn validate(&self) -> Result<(), String> {
        check("step_end.timeout_ms", self.timeout_ms as f64)
    }
}
