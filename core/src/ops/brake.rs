//! The drain brake: gpu-health never drains more than a configured share
//! of a partition (or the cluster) at once. A driver bug or a bad policy
//! line then costs a few nodes, not the cluster.
//!
//! Two checks, both on the failing path only:
//! 1. before draining, count the nodes already drained with a
//!    `gpu-health:` reason in scope ([`pre_check`]);
//! 2. after draining, wait until the next full second plus
//!    [`BrakeConfig::settle_ms`] and count again ([`post_check`]): nodes
//!    that fail together (a health check runs on every node at the same
//!    moment, a broken rule fails every prolog of a 64-node job) all passed
//!    step 1. The drains are ranked by the time slurmctld stamped on their
//!    reason (then by name); a node outside the first `allowed` undoes its
//!    own drain. Every drain stamped at or before ours has reached
//!    slurmctld once the second of our stamp is over, so every racing node
//!    computes the same ranking.

use serde::{Deserialize, Serialize};

use crate::finding::is_own_reason;
use crate::slurm::NodeInfo;

/// Which nodes a node's drain is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrakeScope {
    /// Nodes sharing a partition with the draining node (all the cluster
    /// when the node is in no partition).
    Partition,
    Cluster,
}

/// `[brake]` in gpu-health.toml.
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
    /// The confirming count waits for the end of the second in which the
    /// drain was made (Slurm stamps reasons to the second) plus this much,
    /// which covers clock skew between this node and slurmctld.
    pub settle_ms: u64,
}

impl Default for BrakeConfig {
    fn default() -> Self {
        BrakeConfig {
            enabled: true,
            max_drained_fraction: 0.10,
            min_drainable: 1,
            scope: BrakeScope::Partition,
            settle_ms: 500,
        }
    }
}

impl BrakeConfig {
    pub fn validate(&self) -> Result<(), String> {
        let f = self.max_drained_fraction;
        if !(f.is_finite() && (0.0..=1.0).contains(&f)) {
            return Err(format!("brake.max_drained_fraction = {f} is outside 0..=1"));
        }
        if !(100..=10_000).contains(&self.settle_ms) {
            return Err(format!(
                "brake.settle_ms = {} is outside 100..=10000",
                self.settle_ms
            ));
        }
        Ok(())
    }

    /// How many gpu-health drains `total` nodes in scope may hold.
    pub fn allowed(&self, total: usize) -> usize {
        // The epsilon keeps 0.25 * 4 at 1, not 0.999...
        let share = (self.max_drained_fraction * total as f64 + 1e-9).floor() as usize;
        share.max(self.min_drainable as usize).min(total.max(1))
    }
}

/// One node of `scontrol show node -o` with the time stamp of its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrakeNode {
    pub info: NodeInfo,
    /// `2026-11-29T14:00:01` from ` [root@2026-11-29T14:00:01]`; ISO
    /// stamps of one slurmctld sort as strings.
    pub reason_time: Option<String>,
}

impl BrakeNode {
    pub fn parse(line: &str) -> Option<BrakeNode> {
        let info = NodeInfo::parse(line)?;
        let reason_time = line.find(" Reason=").and_then(|i| {
            let r = line[i..].trim_end();
            let inner = r.strip_suffix(']')?;
            let open = inner.rfind(" [")?;
            let stamp = &inner[open + 2..];
            Some(stamp.rsplit_once('@').map_or(stamp, |(_, t)| t).to_string())
        });
        Some(BrakeNode { info, reason_time })
    }

    fn drained_by_us(&self) -> bool {
        self.info.is_drained() && self.info.reason.as_deref().is_some_and(is_own_reason)
    }
}

pub fn parse_nodes(output: &str) -> Vec<BrakeNode> {
    output.lines().filter_map(BrakeNode::parse).collect()
}

/// The nodes `node`'s drain is counted against (itself included).
fn in_scope<'a>(cfg: &BrakeConfig, nodes: &'a [BrakeNode], node: &str) -> Vec<&'a BrakeNode> {
    let mine: Vec<&String> = nodes
        .iter()
        .find(|n| n.info.name == node)
        .map(|n| n.info.partitions.iter().collect())
        .unwrap_or_default();
    if cfg.scope == BrakeScope::Cluster || mine.is_empty() {
        return nodes.iter().collect();
    }
    nodes
        .iter()
        .filter(|n| n.info.name == node || n.info.partitions.iter().any(|p| mine.contains(&p)))
        .collect()
}

/// What the brake says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrakeVerdict {
    Drain,
    /// Do not drain (before) or undo our drain (after); the text says why.
    Hold(String),
}

/// Before draining `node`: would one more gpu-health drain exceed the share?
pub fn pre_check(cfg: &BrakeConfig, nodes: &[BrakeNode], node: &str) -> BrakeVerdict {
    let scope = in_scope(cfg, nodes, node);
    let total = scope.len().max(1);
    let allowed = cfg.allowed(total);
    let others: Vec<&str> = scope
        .iter()
        .filter(|n| n.info.name != node && n.drained_by_us())
        .map(|n| n.info.name.as_str())
        .collect();
    if others.len() < allowed {
        BrakeVerdict::Drain
    } else {
        BrakeVerdict::Hold(format!(
            "drain brake: {} of {total} nodes in scope already drained by gpu-health ({}), \
             at most {allowed} allowed (max_drained_fraction {}, min_drainable {})",
            others.len(),
            others.join(","),
            cfg.max_drained_fraction,
            cfg.min_drainable
        ))
    }
}

/// After draining `node` and waiting `settle_ms`: is `node` among the
/// first `allowed` gpu-health drains in scope?
pub fn post_check(cfg: &BrakeConfig, nodes: &[BrakeNode], node: &str) -> BrakeVerdict {
    let scope = in_scope(cfg, nodes, node);
    let total = scope.len().max(1);
    let allowed = cfg.allowed(total);
    let mut ours: Vec<&BrakeNode> = scope.into_iter().filter(|n| n.drained_by_us()).collect();
    if !ours.iter().any(|n| n.info.name == node) {
        // Someone resumed us meanwhile, or the query raced: nothing to undo.
        return BrakeVerdict::Drain;
    }
    if ours.len() <= allowed {
        return BrakeVerdict::Drain;
    }
    // Unknown stamps sort last: such a drain cannot prove it came first.
    ours.sort_by(|a, b| {
        let key = |n: &BrakeNode| (n.reason_time.is_none(), n.reason_time.clone());
        key(a)
            .cmp(&key(b))
            .then_with(|| a.info.name.cmp(&b.info.name))
    });
    let rank = ours.iter().position(|n| n.info.name == node).unwrap_or(0);
    if rank < allowed {
        BrakeVerdict::Drain
    } else {
        let first: Vec<&str> = ours[..allowed]
            .iter()
            .map(|n| n.info.name.as_str())
            .collect();
        BrakeVerdict::Hold(format!(
            "drain brake: {} nodes drained by gpu-health at once in a scope of {total}, \
             at most {allowed} allowed; {} came first, undoing the drain of {node}",
            ours.len(),
            first.join(",")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str, state: &str, parts: &str, reason: Option<(&str, &str)>) -> String {
        let mut l = format!("NodeName={name} Arch=x86_64 State={state} Partitions={parts}");
        if let Some((r, t)) = reason {
            l.push_str(&format!(" Reason={r} [root@{t}]"));
        }
        l
    }

    fn cluster(lines: &[String]) -> Vec<BrakeNode> {
        parse_nodes(&lines.join("\n"))
    }

    fn cfg(fraction: f64) -> BrakeConfig {
        BrakeConfig {
            max_drained_fraction: fraction,
            ..BrakeConfig::default()
        }
    }

    #[test]
    fn allowed_share_and_floor() {
        assert_eq!(cfg(0.25).allowed(4), 1);
        assert_eq!(cfg(0.10).allowed(4), 1, "min_drainable keeps one");
        assert_eq!(cfg(0.10).allowed(100), 10);
        assert_eq!(cfg(0.10).allowed(109), 10);
        assert_eq!(cfg(0.5).allowed(4), 2);
        assert_eq!(cfg(1.0).allowed(3), 3);
        let none = BrakeConfig {
            max_drained_fraction: 0.0,
            min_drainable: 0,
            ..BrakeConfig::default()
        };
        assert_eq!(none.allowed(50), 0);
    }

    #[test]
    fn parses_reason_time() {
        let n = BrakeNode::parse(&line(
            "n1",
            "IDLE+DRAIN",
            "main",
            Some((
                "gpu-health: Xid 31 GPU0 (drain-until-clean)",
                "2026-11-29T14:00:01",
            )),
        ))
        .unwrap();
        assert_eq!(n.reason_time.as_deref(), Some("2026-11-29T14:00:01"));
        assert!(n.drained_by_us());
        let idle = BrakeNode::parse(&line("n2", "IDLE", "main", None)).unwrap();
        assert_eq!(idle.reason_time, None);
    }

    #[test]
    fn pre_check_counts_only_our_drains_in_scope() {
        let t = "2026-01-01T00:00:00";
        let nodes = cluster(&[
            line("n1", "IDLE", "main", None),
            line(
                "n2",
                "IDLE+DRAIN",
                "main",
                Some(("gpu-health: x (drain)", t)),
            ),
            line("n3", "IDLE+DRAIN", "main", Some(("admin maintenance", t))),
            line("n4", "IDLE", "main", None),
            line(
                "m1",
                "IDLE+DRAIN",
                "other",
                Some(("gpu-health: y (drain)", t)),
            ),
        ]);
        // Scope main: 4 nodes, 25% = 1, n2 already ours.
        assert!(matches!(
            pre_check(&cfg(0.25), &nodes, "n1"),
            BrakeVerdict::Hold(_)
        ));
        // 50% of 4 = 2: one more may go; the admin's n3 does not count.
        assert_eq!(pre_check(&cfg(0.5), &nodes, "n1"), BrakeVerdict::Drain);
        // Cluster scope: 5 nodes, 40% = 2, n2 and m1 ours -> hold.
        let c = BrakeConfig {
            scope: BrakeScope::Cluster,
            ..cfg(0.4)
        };
        assert!(matches!(pre_check(&c, &nodes, "n1"), BrakeVerdict::Hold(_)));
        // The draining node itself never counts against itself.
        assert_eq!(pre_check(&cfg(0.25), &nodes, "n2"), BrakeVerdict::Drain);
        if let BrakeVerdict::Hold(why) = pre_check(&cfg(0.25), &nodes, "n4") {
            assert!(why.contains("1 of 4") && why.contains("n2"), "{why}");
        }
    }

    #[test]
    fn post_check_keeps_the_first_by_time_then_name() {
        let own = |n: &str, t: &str| {
            line(
                n,
                "IDLE+DRAIN",
                "main",
                Some(("gpu-health: z (drain-until-clean)", t)),
            )
        };
        let nodes = cluster(&[
            own("n1", "2026-01-01T00:00:05"),
            own("n2", "2026-01-01T00:00:04"),
            own("n3", "2026-01-01T00:00:04"),
            own("n4", "2026-01-01T00:00:05"),
        ]);
        let c = cfg(0.25);
        assert_eq!(post_check(&c, &nodes, "n2"), BrakeVerdict::Drain);
        for n in ["n1", "n3", "n4"] {
            assert!(
                matches!(post_check(&c, &nodes, n), BrakeVerdict::Hold(_)),
                "{n}"
            );
        }
        // Every node computes the same survivors: exactly `allowed` stay.
        let c2 = cfg(0.5);
        let kept: Vec<&str> = ["n1", "n2", "n3", "n4"]
            .into_iter()
            .filter(|n| post_check(&c2, &nodes, n) == BrakeVerdict::Drain)
            .collect();
        assert_eq!(kept, vec!["n2", "n3"]);
    }

    #[test]
    fn post_check_within_share_keeps_all() {
        let nodes = cluster(&[
            line(
                "n1",
                "IDLE+DRAIN",
                "main",
                Some(("gpu-health: a (drain)", "2026-01-01T00:00:01")),
            ),
            line("n2", "IDLE", "main", None),
        ]);
        assert_eq!(post_check(&cfg(0.5), &nodes, "n1"), BrakeVerdict::Drain);
        // Not drained any more (someone resumed it): nothing to undo.
        assert_eq!(post_check(&cfg(0.0), &nodes, "n2"), BrakeVerdict::Drain);
    }

    #[test]
    fn validation() {
        assert!(BrakeConfig::default().validate().is_ok());
        assert!(cfg(1.5).validate().is_err());
        assert!(cfg(f64::NAN).validate().is_err());
        let fast = BrakeConfig {
            settle_ms: 50,
            ..BrakeConfig::default()
        };
        assert!(fast.validate().is_err());
    }
}
