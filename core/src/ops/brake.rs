//! The drain brake: gpu-health never drains more than a configured share
//! of a partition (or the cluster) at once. A driver bug or a bad policy
//! line then costs a few nodes, not the cluster.
//!
//! Claim, look, then drain (the run in `ops::drain`, the ranking here):
//! 1. the node writes a claim into its Slurm Comment,
//!    `gpu-health-claim:<unix ms>` (one update; state and reason
//!    untouched), and gives up if that update took longer than
//!    `claim_timeout_ms` (`[brake]`, default 1 s);
//! 2. it waits until `claim_timeout_ms` + `settle_ms` after its stamp
//!    and reads the node table once;
//! 3. [`rank`]: its place is the number of gpu-health drains in scope plus
//!    the live claims that came before its own (by stamp, then name). Below
//!    the allowed count it drains, replacing the claim by the drain's time
//!    stamp (`gpu-health-drained:<ms>`) in the same update;
//!    otherwise it withdraws the claim and stays in service.
//!
//! Why the bound holds by construction: every claim that ranks before
//! ours was stamped no later than ours and reached slurmctld within
//! `claim_timeout_ms` of its stamp, so it is in our table (as a claim,
//! or as a drain once its node converted it: one update does both). The
//! last node to drain therefore counted every other drain of the storm,
//! and gpu-health's drains in scope never exceed the allowed count, not
//! even for a moment. This rests on the nodes' clocks agreeing within
//! `settle_ms` (NTP keeps them within milliseconds).

use crate::config::{BrakeConfig, BrakeScope};
use crate::slurm::NodeInfo;

use super::brake_window::{self, InScope};

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

/// A claim older than this (against our own stamp) is void: its node
/// converted or withdrew it long ago, or died. A claiming node never
/// drains later than this minus `settle_ms` after its stamp. At least
/// 10 s, and four times the claim's wait.
pub fn claim_lifetime_ms(cfg: &BrakeConfig) -> u64 {
    (4 * (cfg.claim_timeout_ms + cfg.settle_ms)).max(10_000)
}

/// What the brake says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrakeVerdict {
    Drain,
    /// Do not drain; the text says why.
    Hold(String),
}

/// After claiming at `my_stamp_ms` and waiting: may `node` drain? Its
/// place is every gpu-health drain in scope plus every live claim that came
/// before its own (by stamp, then name). A claim on a node that is
/// drained does not count: a gpu-health drain counts as a drain already,
/// and a node drained by someone else withdraws its claim. A reboot
/// gpu-health asked for counts as its drain. Past the share, the cap and
/// the time window ([`brake_window`]) may hold it back too.
pub fn rank(cfg: &BrakeConfig, nodes: &[NodeInfo], node: &str, my_stamp_ms: u64) -> BrakeVerdict {
    let scope = in_scope(cfg, nodes, node);
    let total = scope.len().max(1);
    let allowed = allowed(cfg, total);
    let oldest = my_stamp_ms.saturating_sub(claim_lifetime_ms(cfg));
    let drains: Vec<&str> = scope
        .iter()
        .filter(|n| n.name != node && n.held_by_us())
        .map(|n| n.name.as_str())
        .collect();
    let claims: Vec<&str> = scope
        .iter()
        .filter(|n| n.name != node && !n.is_drained())
        .filter(|n| {
            n.claim_ms
                .is_some_and(|t| t >= oldest && (t, n.name.as_str()) < (my_stamp_ms, node))
        })
        .map(|n| n.name.as_str())
        .collect();
    if drains.len() + claims.len() < allowed {
        let counted = InScope {
            total,
            held: drains.len(),
            claims_before: claims.len(),
            // A node both drained in the window and claiming again is one
            // node of the window, counted with the claims.
            recent: brake_window::recent(cfg, &scope, node, my_stamp_ms, &claims),
        };
        return match brake_window::hold(cfg, &counted) {
            None => BrakeVerdict::Drain,
            Some(why) => BrakeVerdict::Hold(why),
        };
    }
    BrakeVerdict::Hold(format!(
        "drain brake: {} of {total} nodes in scope drained by gpu-health{} and {} claimed a drain \
         before this node{}; at most {allowed} allowed (max_drained_fraction {}, min_drainable {})",
        drains.len(),
        listed(&drains),
        claims.len(),
        listed(&claims),
        cfg.max_drained_fraction,
        cfg.min_drainable
    ))
}

/// ` (a,b,c)`, or ` (a,b,c, +N more)` past ten names.
fn listed(names: &[&str]) -> String {
    match names.len() {
        0 => String::new(),
        n if n <= 10 => format!(" ({})", names.join(",")),
        n => format!(" ({}, +{} more)", names[..10].join(","), n - 10),
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

    /// The share alone (the window as wide as the partition).
    fn cfg(fraction: f64) -> BrakeConfig {
        BrakeConfig {
            max_drained_fraction: fraction,
            max_window_fraction: 1.0,
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

    fn claimed(name: &str, parts: &str, ms: u64) -> String {
        format!(
            "{} Comment=gpu-health-claim:{ms}",
            line(name, "IDLE", parts, None)
        )
    }

    #[test]
    fn rank_counts_our_drains_in_scope_only() {
        let t = "2026-01-01T00:00:00";
        let nodes = cluster(&[
            claimed("n1", "main", 1_000),
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
            rank(&cfg(0.25), &nodes, "n1", 1_000),
            BrakeVerdict::Hold(_)
        ));
        // 50% of 4 = 2: one more may go; the admin's n3 does not count.
        assert_eq!(rank(&cfg(0.5), &nodes, "n1", 1_000), BrakeVerdict::Drain);
        // Cluster scope: 5 nodes, 40% = 2, n2 and m1 ours -> hold.
        let c = BrakeConfig {
            scope: BrakeScope::Cluster,
            ..cfg(0.4)
        };
        assert!(matches!(
            rank(&c, &nodes, "n1", 1_000),
            BrakeVerdict::Hold(_)
        ));
        if let BrakeVerdict::Hold(why) = rank(&cfg(0.25), &nodes, "n4", 2_000) {
            assert!(why.contains("1 of 4") && why.contains("(n2)"), "{why}");
            assert!(
                why.contains("1 claimed a drain before this node (n1)"),
                "{why}"
            );
        }
    }

    #[test]
    fn racing_claims_keep_exactly_the_allowed_first() {
        // Stamps of the nodes' own clocks: n2 and n3 tie at 4_000.
        let nodes = cluster(&[
            claimed("n1", "main", 5_000),
            claimed("n2", "main", 4_000),
            claimed("n3", "main", 4_000),
            claimed("n4", "main", 5_000),
        ]);
        let verdicts = |c: &BrakeConfig| -> Vec<&str> {
            nodes
                .iter()
                .filter(|n| rank(c, &nodes, &n.name, n.claim_ms.unwrap()) == BrakeVerdict::Drain)
                .map(|n| n.name.as_str())
                .collect()
        };
        assert_eq!(verdicts(&cfg(0.25)), vec!["n2"]);
        assert_eq!(verdicts(&cfg(0.5)), vec!["n2", "n3"]);
        assert_eq!(verdicts(&cfg(1.0)).len(), 4);
    }

    #[test]
    fn a_converted_claim_still_counts_once() {
        // n2 came first and has drained (its claim gone with the drain);
        // n3 looks later: it counts n2 as a drain, not twice, not never.
        let t = "2026-01-01T00:00:04";
        let nodes = cluster(&[
            line("n1", "IDLE", "main", None),
            line(
                "n2",
                "IDLE+DRAIN",
                "main",
                Some(("gpu-health: z (drain)", t)),
            ),
            claimed("n3", "main", 4_000),
            line("n4", "IDLE", "main", None),
        ]);
        assert_eq!(rank(&cfg(0.5), &nodes, "n3", 4_000), BrakeVerdict::Drain);
        assert!(matches!(
            rank(&cfg(0.25), &nodes, "n3", 4_000),
            BrakeVerdict::Hold(_)
        ));
    }

    #[test]
    fn void_and_later_claims_do_not_count() {
        let t = "2026-01-01T00:00:04";
        let nodes = cluster(&[
            claimed("n1", "main", 100_000 - claim_lifetime_ms(&cfg(0.25)) - 1),
            claimed("n2", "main", 100_001),
            claimed("n3", "main", 100_000),
            // A node drained by an admin withdraws its claim: not counted.
            format!(
                "{} Comment=gpu-health-claim:99000",
                line("n4", "IDLE+DRAIN", "main", Some(("admin", t)))
            ),
        ]);
        assert_eq!(rank(&cfg(0.25), &nodes, "n3", 100_000), BrakeVerdict::Drain);
        assert!(matches!(
            rank(&cfg(0.25), &nodes, "n2", 100_001),
            BrakeVerdict::Hold(_)
        ));
    }

    #[test]
    fn the_window_and_the_cap_only_add_holds() {
        // Share 50% of 4 = 2; n1 drained (stamped) a minute ago and has
        // returned; n2 is rebooting for gpu-health.
        let now = 10 * 60_000;
        let nodes = cluster(&[
            format!(
                "{} Comment=gpu-health-drained:{}",
                line("n1", "IDLE", "main", None),
                now - 60_000
            ),
            line(
                "n2",
                "DOWN+REBOOT_ISSUED",
                "main",
                Some(("gpu-health: Xid 79 GPU3 (reboot)", "2026-01-01T00:00:00")),
            ),
            claimed("n3", "main", now),
            line("n4", "IDLE", "main", None),
        ]);
        let share = cfg(0.5);
        // n2's reboot counts as a drain: 1 of 2 taken, n3 may drain.
        assert_eq!(rank(&share, &nodes, "n3", now), BrakeVerdict::Drain);
        // The window: 25% of 4 = 1 drain in 5 min, n1's is recent.
        let window = BrakeConfig {
            max_window_fraction: 0.25,
            ..share.clone()
        };
        let BrakeVerdict::Hold(why) = rank(&window, &nodes, "n3", now) else {
            panic!("the window must hold");
        };
        assert!(why.contains("within the last 5 min"), "{why}");
        // Past the window n1's drain no longer counts.
        assert_eq!(
            rank(&window, &nodes, "n3", now + 5 * 60_000),
            BrakeVerdict::Drain
        );
        // The cap: one gpu-health drain at once.
        let cap = BrakeConfig {
            max_drained: 1,
            ..share.clone()
        };
        assert!(rank(&cap, &nodes, "n3", now) != BrakeVerdict::Drain);
        // What the share held back stays held back.
        assert!(matches!(
            rank(&cfg(0.25), &nodes, "n3", now),
            BrakeVerdict::Hold(_)
        ));
    }

    /// Issue 35, item 6: a node drained within the window that claims
    /// again keeps its stamp beside the claim; the window counts it once.
    #[test]
    fn a_node_drained_in_the_window_and_claiming_again_counts_once() {
        let now = 10 * 60_000;
        let nodes = cluster(&[
            format!(
                "{} Comment=gpu-health-claim:{},gpu-health-drained:{}",
                line("n1", "IDLE", "main", None),
                now - 1,
                now - 60_000
            ),
            line("n2", "IDLE", "main", None),
            claimed("n3", "main", now),
            line("n4", "IDLE", "main", None),
        ]);
        // 2 drains in the window of 4 nodes: n1 (once) and n3.
        let window = BrakeConfig {
            max_window_fraction: 0.5,
            ..cfg(1.0)
        };
        assert_eq!(rank(&window, &nodes, "n3", now), BrakeVerdict::Drain);
        // 1 in the window: n1's earlier drain holds n3 back.
        let one = BrakeConfig {
            max_window_fraction: 0.25,
            ..cfg(1.0)
        };
        let BrakeVerdict::Hold(why) = rank(&one, &nodes, "n3", now) else {
            panic!("the window must hold");
        };
        assert!(why.contains("0 of 4") && why.contains("1 claimed"), "{why}");
        // n2, looking before n1's claim is made: n1's stamp still counts.
        let BrakeVerdict::Hold(why) = rank(&one, &nodes, "n2", now - 2) else {
            panic!("the window must hold");
        };
        assert!(why.contains("1 of 4") && why.contains("0 claimed"), "{why}");
    }

    #[test]
    fn long_lists_are_cut() {
        let names: Vec<String> = (1..=12).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(listed(&refs[..2]), " (n1,n2)");
        assert!(listed(&refs).ends_with(", +2 more)"));
    }
}
