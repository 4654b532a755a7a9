//! The drain brake's rules beyond the share of the partition: an
//! absolute cap on gpu-health's drains (`[brake] max_drained`) and a
//! sliding time window (at most `max_window_fraction` of the nodes in
//! scope drained or rebooted by gpu-health within `window_minutes`,
//! returned since or not; `window_minutes = 0`: no window). Pure:
//! `brake::rank` counts, this decides.
//!
//! When other nodes were drained is read from their Comment
//! (`gpu-health-drained:<ms>`, written by the drain that replaces the
//! brake's claim). A stamp that is garbage or from the future counts as
//! recent: a broken clock makes the brake stricter, never looser. Both
//! rules only add holds to the share's: no drain held back before is let
//! through by them.

use crate::config::BrakeConfig;
use crate::slurm::NodeInfo;

/// What the brake counted in the scope of one node's drain (the node
/// itself not included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InScope {
    /// Nodes in scope.
    pub total: usize,
    /// Nodes gpu-health holds out of service now (drained, rebooting).
    pub held: usize,
    /// Live claims that came before this node's.
    pub claims_before: usize,
    /// Nodes gpu-health drained within the window (by their stamps).
    pub recent: usize,
}

/// Whether a drain stamped `drained_ms` counts as within the window that
/// ends at `now_ms` (a stamp from the future counts).
pub fn is_recent(cfg: &BrakeConfig, drained_ms: u64, now_ms: u64) -> bool {
    drained_ms >= now_ms.saturating_sub(cfg.window_ms())
}

/// Nodes of `scope` other than `node` and those of `claimed` (counted
/// as claims) drained by gpu-health within the window before `now_ms`.
pub fn recent(
    cfg: &BrakeConfig,
    scope: &[&NodeInfo],
    node: &str,
    now_ms: u64,
    claimed: &[&str],
) -> usize {
    scope
        .iter()
        .filter(|n| n.name != node && !claimed.contains(&n.name.as_str()))
        .filter(|n| n.drained_ms.is_some_and(|t| is_recent(cfg, t, now_ms)))
        .count()
}

/// How many drains the window allows among `total` nodes (never below
/// `min_drainable`, as the share).
pub fn window_allowed(cfg: &BrakeConfig, total: usize) -> usize {
    let share = (cfg.max_window_fraction * total as f64 + 1e-9).floor() as usize;
    share.max(cfg.min_drainable as usize).min(total.max(1))
}

/// `Some(why)` when the cap or the window holds this drain back.
pub fn hold(cfg: &BrakeConfig, c: &InScope) -> Option<String> {
    let cap = cfg.max_drained as usize;
    if cap > 0 && c.held + c.claims_before >= cap {
        return Some(format!(
            "drain brake: {} nodes held by gpu-health and {} claimed a drain before this node; \
             at most {cap} at once (max_drained)",
            c.held, c.claims_before
        ));
    }
    let allowed = window_allowed(cfg, c.total);
    if cfg.window_minutes > 0 && c.recent + c.claims_before >= allowed {
        return Some(format!(
            "drain brake: {} of {} nodes in scope drained by gpu-health within the last {} min \
             and {} claimed a drain before this node; at most {allowed} in the window \
             (max_window_fraction {}, window_minutes {})",
            c.recent,
            c.total,
            cfg.window_minutes,
            c.claims_before,
            cfg.max_window_fraction,
            cfg.window_minutes
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(cap: u32, fraction: f64) -> BrakeConfig {
        BrakeConfig {
            max_drained: cap,
            max_window_fraction: fraction,
            window_minutes: 5,
            ..BrakeConfig::default()
        }
    }

    fn counts(total: usize, held: usize, claims_before: usize, recent: usize) -> InScope {
        InScope {
            total,
            held,
            claims_before,
            recent,
        }
    }

    #[test]
    fn the_cap_counts_drains_and_earlier_claims() {
        let c = cfg(3, 1.0);
        assert_eq!(hold(&c, &counts(100, 2, 0, 0)), None);
        let why = hold(&c, &counts(100, 2, 1, 0)).unwrap();
        assert!(why.contains("max_drained"), "{why}");
        assert!(hold(&c, &counts(100, 3, 0, 0)).is_some());
        // 0: no cap.
        assert_eq!(hold(&cfg(0, 1.0), &counts(100, 99, 0, 0)), None);
    }

    #[test]
    fn the_window_counts_recent_drains_returned_or_not() {
        let c = cfg(0, 0.5);
        // 10 nodes: 5 in the window.
        assert_eq!(hold(&c, &counts(10, 0, 0, 4)), None);
        let why = hold(&c, &counts(10, 0, 0, 5)).unwrap();
        assert!(why.contains("within the last 5 min"), "{why}");
        assert!(hold(&c, &counts(10, 0, 2, 3)).is_some());
        // min_drainable keeps one drain possible in a tiny partition.
        assert_eq!(window_allowed(&c, 1), 1);
        assert_eq!(hold(&c, &counts(1, 0, 0, 0)), None);
    }

    #[test]
    fn cap_and_window_together() {
        let c = cfg(2, 0.5);
        assert_eq!(hold(&c, &counts(10, 1, 0, 1)), None);
        assert!(hold(&c, &counts(10, 2, 0, 0))
            .unwrap()
            .contains("max_drained"));
        assert!(hold(&c, &counts(10, 0, 0, 5)).unwrap().contains("window"));
        // window_minutes = 0: no window, the cap still holds.
        let off = BrakeConfig {
            window_minutes: 0,
            ..c
        };
        assert_eq!(hold(&off, &counts(10, 1, 0, 9)), None);
        assert!(hold(&off, &counts(10, 2, 0, 9)).is_some());
    }

    #[test]
    fn stamps_from_the_future_or_garbage_count_as_recent() {
        let c = cfg(0, 0.5);
        let now = 10 * 60_000;
        assert!(is_recent(&c, now - 5 * 60_000, now));
        assert!(!is_recent(&c, now - 5 * 60_000 - 1, now));
        assert!(is_recent(&c, now + 3_600_000, now), "from the future");
        assert!(is_recent(&c, u64::MAX, now), "garbage reads as u64::MAX");
        assert!(is_recent(&c, 0, 1), "a clock near zero counts everything");
        let nodes: Vec<NodeInfo> = [
            "NodeName=a State=IDLE Comment=gpu-health-drained:599999",
            "NodeName=b State=IDLE Comment=gpu-health-drained:299999",
            "NodeName=c State=IDLE Comment=gpu-health-drained:junk",
            "NodeName=d State=IDLE Comment=gpu-health-claim:599999",
            "NodeName=me State=IDLE Comment=gpu-health-drained:599999",
            // Drained in the window, claiming again: its stamp stays.
            "NodeName=e State=IDLE Comment=gpu-health-claim:599000,gpu-health-drained:599999",
        ]
        .iter()
        .filter_map(|l| NodeInfo::parse(l))
        .collect();
        let scope: Vec<&NodeInfo> = nodes.iter().collect();
        assert_eq!(
            recent(&c, &scope, "me", now, &["d"]),
            3,
            "a, c and e, not b, d or me"
        );
        // e counted among the claims before this node: not twice.
        assert_eq!(recent(&c, &scope, "me", now, &["d", "e"]), 2);
    }
}
