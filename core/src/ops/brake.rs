//! The drain brake: gpu-health never drains more than a configured share
//! of a partition (or the cluster) at once. A driver bug or a bad policy
//! line then costs a few nodes, not the cluster.
//!
//! Two checks, both on the failing path only:
//! 1. before draining, count the nodes already drained with a
//!    `gpu-health:` reason in scope ([`pre_check`]);
//! 2. after draining, wait until the next full second plus
//!    `settle_ms` (`[brake]`) and count again ([`post_check`]): nodes
//!    that fail together (a health check runs on every node at the same
//!    moment, a broken rule fails every prolog of a 64-node job) all passed
//!    step 1. The drains are ranked by the time slurmctld stamped on their
//!    reason (then by name); a node outside the first `allowed` undoes its
//!    own drain. Every drain stamped at or before ours has reached
//!    slurmctld once the second of our stamp is over, so every racing node
//!    computes the same ranking.

use crate::config::{BrakeConfig, BrakeScope};
use crate::slurm::NodeInfo;

/// How many gpu-health drains `total` nodes in scope may hold.
pub fn allowed(cfg: &BrakeConfig, total: usize) -> usize {
    // The epsilon keeps 0.25 * 4 at 1, not 0.999...
    let share = (cfg.max_drained_fraction * total as f64 + 1e-9).floor() as usize;
    share.max(cfg.min_drainable as usize).min(total.max(1))
}

/// The nodes `node`'s drain is counted against (itself included).
fn in_scope<'a>(cfg: &BrakeConfig, nodes: &'a [NodeInfo], node: &str) -> Vec<&'a NodeInfo> {
    let mine: Vec<&String> = nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| n.partitions.iter().collect())
        .unwrap_or_default();
    if cfg.scope == BrakeScope::Cluster || mine.is_empty() {
        return nodes.iter().collect();
    }
    nodes
        .iter()
        .filter(|n| n.name == node || n.partitions.iter().any(|p| mine.contains(&p)))
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
pub fn pre_check(cfg: &BrakeConfig, nodes: &[NodeInfo], node: &str) -> BrakeVerdict {
    let scope = in_scope(cfg, nodes, node);
    let total = scope.len().max(1);
    let allowed = allowed(cfg, total);
    let others: Vec<&str> = scope
        .iter()
        .filter(|n| n.name != node && n.drained_by_us())
        .map(|n| n.name.as_str())
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
pub fn post_check(cfg: &BrakeConfig, nodes: &[NodeInfo], node: &str) -> BrakeVerdict {
    let scope = in_scope(cfg, nodes, node);
    let total = scope.len().max(1);
    let allowed = allowed(cfg, total);
    let mut ours: Vec<&NodeInfo> = scope.into_iter().filter(|n| n.drained_by_us()).collect();
    if !ours.iter().any(|n| n.name == node) {
        // Someone resumed us meanwhile, or the query raced: nothing to undo.
        return BrakeVerdict::Drain;
    }
    if ours.len() <= allowed {
        return BrakeVerdict::Drain;
    }
    // Unknown stamps sort last: such a drain cannot prove it came first.
    ours.sort_by(|a, b| {
        let key = |n: &NodeInfo| (n.reason_time.is_none(), n.reason_time.clone());
        key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
    });
    let rank = ours.iter().position(|n| n.name == node).unwrap_or(0);
    if rank < allowed {
        BrakeVerdict::Drain
    } else {
        let first: Vec<&str> = ours[..allowed].iter().map(|n| n.name.as_str()).collect();
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

    fn cluster(lines: &[String]) -> Vec<NodeInfo> {
        lines.iter().filter_map(|l| NodeInfo::parse(l)).collect()
    }

    fn cfg(fraction: f64) -> BrakeConfig {
        BrakeConfig {
            max_drained_fraction: fraction,
            ..BrakeConfig::default()
        }
    }

    #[test]
    fn allowed_share_and_floor() {
        assert_eq!(allowed(&cfg(0.25), 4), 1);
        assert_eq!(allowed(&cfg(0.10), 4), 1, "min_drainable keeps one");
        assert_eq!(allowed(&cfg(0.10), 100), 10);
        assert_eq!(allowed(&cfg(0.10), 109), 10);
        assert_eq!(allowed(&cfg(0.5), 4), 2);
        assert_eq!(allowed(&cfg(1.0), 3), 3);
        let none = BrakeConfig {
            max_drained_fraction: 0.0,
            min_drainable: 0,
            ..BrakeConfig::default()
        };
        assert_eq!(allowed(&none, 50), 0);
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
}
