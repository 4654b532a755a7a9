//! Slurm actions: the only place that runs Slurm commands and reads their
//! output.
//!
//! Commands run through [`crate::process::run`] (no shell, stdin closed,
//! killed at the deadline); every value that reaches an argument is
//! checked first. One [`Scontrol`] serves one run and holds that run's
//! time budget: every call gets what is left of it, so a slow slurmctld
//! cannot hold a job start longer than `scontrol_timeout_ms` in all. Only
//! the failing path calls Slurm (Slurm's docs ask prologs not to on the
//! common path).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::finding::is_own_reason;
use crate::ids::NodeName;
use crate::process::{self, RunError};

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: String,
        stderr: String,
    },
    #[error("refusing unsafe {what}: {value:?}")]
    BadArgument { what: &'static str, value: String },
    #[error("the run's time for Slurm commands ({budget_ms} ms, scontrol_timeout_ms) is spent")]
    BudgetSpent { budget_ms: u64 },
}

/// What a brake claim's Comment starts with; the stamp (unix ms of the
/// claiming node's clock) follows.
pub const CLAIM_PREFIX: &str = "gpu-health-claim:";

/// Output kept from a command (bounded: a huge cluster listing is cut).
const MAX_OUTPUT: usize = 8 << 20;

/// scontrol for one run, with the run's time budget.
pub struct Scontrol<'a> {
    program: &'a Path,
    budget: Duration,
    deadline: Instant,
}

impl<'a> Scontrol<'a> {
    /// The budget starts now.
    pub fn new(program: &'a Path, budget: Duration) -> Scontrol<'a> {
        Scontrol {
            program,
            budget,
            deadline: Instant::now() + budget,
        }
    }

    /// What is left of the budget.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Drain `node` with `reason` (which must be one of ours). With
    /// `clear_claim` the same update clears the brake's claim (the node's
    /// Comment, see [`Scontrol::claim`]): claim and drain never coexist.
    pub fn drain(
        &self,
        node: &NodeName,
        reason: &str,
        clear_claim: bool,
    ) -> Result<(), SlurmError> {
        if !is_own_reason(reason) || reason.contains(['\n', '\r']) {
            return Err(SlurmError::BadArgument {
                what: "reason",
                value: reason.to_string(),
            });
        }
        let node_arg = format!("NodeName={node}");
        let reason_arg = format!("Reason={reason}");
        let mut args = vec!["update", &node_arg, "State=DRAIN", &reason_arg];
        if clear_claim {
            args.push("Comment=");
        }
        self.run(&args).map(drop)
    }

    /// The drain brake's claim: `Comment=gpu-health-claim:<stamp_ms>` on
    /// `node` (one update; the state and reason are untouched). Every
    /// node that drains through the brake claims first, so racing nodes
    /// see each other before any of them drains.
    /// `reserve` of the budget is left for the calls after it.
    pub fn claim(
        &self,
        node: &NodeName,
        stamp_ms: u64,
        reserve: Duration,
    ) -> Result<(), SlurmError> {
        let args = [
            "update",
            &format!("NodeName={node}"),
            &format!("Comment={CLAIM_PREFIX}{stamp_ms}"),
        ];
        self.run_leaving(&args, reserve).map(drop)
    }

    /// Withdraw this node's claim (an empty Comment).
    pub fn release_claim(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.run(&["update", &format!("NodeName={node}"), "Comment="])
            .map(drop)
    }

    /// Return `node` to service. Callers check ownership of the drain first.
    pub fn resume(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.run(&["update", &format!("NodeName={node}"), "State=RESUME"])
            .map(drop)
    }

    /// `scontrol show node -o` for one node or all (`None`).
    pub fn show_nodes(&self, node: Option<&NodeName>) -> Result<Vec<NodeInfo>, SlurmError> {
        self.show_nodes_leaving(node, Duration::ZERO)
    }

    /// [`Scontrol::show_nodes`], leaving `reserve` of the budget for the
    /// calls that must follow (the brake's drain or withdrawal).
    pub fn show_nodes_leaving(
        &self,
        node: Option<&NodeName>,
        reserve: Duration,
    ) -> Result<Vec<NodeInfo>, SlurmError> {
        let mut args = vec!["show", "node", "-o"];
        if let Some(n) = node {
            args.push(n.as_str());
        }
        let out = self.run_leaving(&args, reserve)?;
        Ok(out.lines().filter_map(NodeInfo::parse).collect())
    }

    /// This node as Slurm sees it (`None`: Slurm does not know it).
    pub fn show_node(&self, node: &NodeName) -> Result<Option<NodeInfo>, SlurmError> {
        Ok(self
            .show_nodes(Some(node))?
            .into_iter()
            .find(|n| n.name == node.as_str()))
    }

    fn run(&self, args: &[&str]) -> Result<String, SlurmError> {
        self.run_leaving(args, Duration::ZERO)
    }

    fn run_leaving(&self, args: &[&str], reserve: Duration) -> Result<String, SlurmError> {
        let left = self.remaining().saturating_sub(reserve);
        if left.is_zero() {
            return Err(SlurmError::BudgetSpent {
                budget_ms: self.budget.as_millis() as u64,
            });
        }
        let done = process::run(self.program, args, left, MAX_OUTPUT)?;
        if !done.status.success() {
            return Err(SlurmError::Failed {
                program: self.program.display().to_string(),
                status: done.status.to_string(),
                stderr: done.stderr.trim().chars().take(500).collect(),
            });
        }
        Ok(done.stdout)
    }
}

/// One line of `scontrol show node -o`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// e.g. `IDLE+DRAIN`, `MIXED`, `DOWN*+DRAIN`.
    pub state: String,
    pub reason: Option<String>,
    /// When slurmctld set the reason: `2026-11-29T14:00:01` from
    /// ` [root@2026-11-29T14:00:01]` (ISO stamps of one slurmctld sort as
    /// strings; the drain brake ranks drains by them).
    pub reason_time: Option<String>,
    pub partitions: Vec<String>,
    /// The drain brake's claim on this node (`Comment=gpu-health-claim:<ms>`):
    /// the claiming node's clock in unix ms.
    pub claim_ms: Option<u64>,
}

impl NodeInfo {
    /// Parse `NodeName=n1 Arch=... State=IDLE+DRAIN ... Reason=text [root@...]`.
    /// Reason is the last field and may contain spaces.
    pub fn parse(line: &str) -> Option<NodeInfo> {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|t| t.strip_prefix(key).map(str::to_string))
        };
        let name = field("NodeName=")?;
        let state = field("State=").unwrap_or_default();
        let partitions = field("Partitions=")
            .map(|p| {
                p.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let (reason, reason_time) = match line.find(" Reason=") {
            None => (None, None),
            Some(i) => split_reason(&line[i + " Reason=".len()..]),
        };
        let claim_ms = line
            .split_whitespace()
            .find_map(|t| t.strip_prefix("Comment=")?.strip_prefix(CLAIM_PREFIX))
            .and_then(|ms| ms.parse().ok());
        Some(NodeInfo {
            name,
            state,
            reason: reason.filter(|r| !r.is_empty() && r != "(null)"),
            reason_time,
            partitions,
            claim_ms,
        })
    }

    pub fn is_drained(&self) -> bool {
        self.state
            .split('+')
            .any(|s| s == "DRAIN" || s == "DRAINED" || s == "DRAINING")
    }

    /// Drained with a reason of gpu-health's.
    pub fn drained_by_us(&self) -> bool {
        self.is_drained() && self.reason.as_deref().is_some_and(is_own_reason)
    }
}

/// The fields `scontrol show node -o` may print after the reason.
const AFTER_REASON: [&str; 5] = [
    " Comment=",
    " Extra=",
    " InstanceId=",
    " InstanceType=",
    " ReservationName=",
];

/// `text [user@time] Comment=...` -> the reason and its time. Slurm puts
/// the reason's stamp right after it, and the optional Comment, Extra,
/// ... fields after that; without a stamp the reason ends at the first of
/// those fields.
fn split_reason(rest: &str) -> (Option<String>, Option<String>) {
    let mut from = 0;
    while let Some(j) = rest[from..].find(" [").map(|j| j + from) {
        let inner_end = rest[j + 2..].find(']').map(|k| k + j + 2);
        if let Some(end) = inner_end {
            let stamp = &rest[j + 2..end];
            let after = &rest[end + 1..];
            let ends_here =
                after.trim_end().is_empty() || AFTER_REASON.iter().any(|k| after.starts_with(k));
            if ends_here && !stamp.contains(char::is_whitespace) {
                let time = stamp.rsplit_once('@').map_or(stamp, |(_, t)| t);
                return (Some(rest[..j].to_string()), Some(time.to_string()));
            }
        }
        from = j + 2;
    }
    let end = AFTER_REASON
        .iter()
        .filter_map(|k| rest.find(k))
        .min()
        .unwrap_or(rest.len());
    (Some(rest[..end].trim_end().to_string()), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_node_lines() {
        let l = "NodeName=n2 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 \
                 Partitions=gpu,debug Reason=gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain) [root@2026-11-29T14:00:01]";
        let n = NodeInfo::parse(l).unwrap();
        assert_eq!(n.name, "n2");
        assert!(n.is_drained() && n.drained_by_us());
        assert_eq!(n.partitions, vec!["gpu", "debug"]);
        assert_eq!(
            n.reason.as_deref(),
            Some("gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)")
        );
        assert_eq!(n.reason_time.as_deref(), Some("2026-11-29T14:00:01"));
        let idle = NodeInfo::parse("NodeName=n1 State=IDLE Partitions=gpu").unwrap();
        assert!(!idle.is_drained());
        assert_eq!((idle.reason, idle.reason_time), (None, None));
        let plain = NodeInfo::parse("NodeName=n3 State=DRAIN Reason=admin").unwrap();
        assert_eq!(plain.reason.as_deref(), Some("admin"));
        assert!(!plain.drained_by_us());
        assert!(NodeInfo::parse("garbage").is_none());
    }

    #[test]
    fn reason_ends_before_comment_and_extra() {
        // As 22.05 and 24.11 print them: the reason's stamp, then the
        // optional Comment and Extra.
        let l = "NodeName=n4 State=IDLE+DRAIN Partitions=gpu \
                 Reason=gpu-health: Xid 79 GPU3 (drain) [root@2026-11-29T14:00:01] \
                 Comment=RMA ticket [ops@x] 42 Extra=rack=7";
        let n = NodeInfo::parse(l).unwrap();
        assert_eq!(n.reason.as_deref(), Some("gpu-health: Xid 79 GPU3 (drain)"));
        assert_eq!(n.reason_time.as_deref(), Some("2026-11-29T14:00:01"));
        assert_eq!(n.claim_ms, None, "an admin's comment is no claim");
        let claimed = NodeInfo::parse(
            "NodeName=n5 State=MIXED Partitions=gpu Comment=gpu-health-claim:1764590000123",
        )
        .unwrap();
        assert_eq!(claimed.claim_ms, Some(1_764_590_000_123));
        assert_eq!(claimed.reason, None);
        let both = NodeInfo::parse(
            "NodeName=n6 State=IDLE Reason=admin: cables [root@2026-11-29T14:00:01] \
             Comment=gpu-health-claim:17",
        )
        .unwrap();
        assert_eq!(both.reason.as_deref(), Some("admin: cables"));
        assert_eq!(both.claim_ms, Some(17));
        // No stamp: the reason still ends at the next field.
        let bare = NodeInfo::parse("NodeName=n7 State=DOWN Reason=broken Extra=x").unwrap();
        assert_eq!(
            (bare.reason.as_deref(), bare.reason_time),
            (Some("broken"), None)
        );
        let garbled =
            NodeInfo::parse("NodeName=n8 State=IDLE Comment=gpu-health-claim:12x").unwrap();
        assert_eq!(garbled.claim_ms, None);
    }

    fn node(n: &str) -> NodeName {
        NodeName::parse(n).unwrap()
    }

    #[test]
    fn refuses_foreign_reasons() {
        let s = Scontrol::new(Path::new("/bin/true"), Duration::from_secs(2));
        assert!(matches!(
            s.drain(&node("n1"), "admin: x", false),
            Err(SlurmError::BadArgument { .. })
        ));
        assert!(matches!(
            s.drain(&node("n1"), "gpu-health: x\nNodeName=n2", true),
            Err(SlurmError::BadArgument { .. })
        ));
        assert!(s.drain(&node("n1"), "gpu-health: x (drain)", true).is_ok());
    }

    #[test]
    fn one_budget_for_every_call_of_a_run() {
        let t0 = Instant::now();
        // `sleep update NodeName=...` fails at once; a slow scontrol is
        // stood in for by `sleep` reading its first word as seconds.
        let slow = Scontrol::new(Path::new("/bin/sleep"), Duration::from_millis(300));
        assert!(matches!(
            slow.run(&["5"]),
            Err(SlurmError::Run(RunError::Timeout { .. }))
        ));
        assert!(matches!(
            slow.run(&["5"]),
            Err(SlurmError::BudgetSpent { .. })
        ));
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let s = Scontrol::new(Path::new("/bin/sleep"), Duration::from_secs(2));
        assert!(matches!(s.run(&["x"]), Err(SlurmError::Failed { .. })));
    }
}
