//! Draining and resuming this node, with the brake and the drain record.
//! Every drain of gpu-health (prolog, health check, epilog) goes through
//! [`drain_guarded`]; every resume through [`resume_own`].

use std::path::Path;
use std::time::Duration;

use crate::config::Config;
use crate::finding::is_own_reason;
use crate::slurm::{run_with_timeout, Scontrol, SlurmError};

use super::brake::{self, BrakeNode, BrakeVerdict};
use super::drain_state::{self, reason_kind, DrainRecord};

/// What became of a drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    Drained,
    /// The brake (or a failed brake query) kept the node in service.
    HeldBack(String),
    /// The node is already drained with someone else's reason: untouched.
    Foreign(String),
    /// scontrol failed.
    Failed(String),
}

pub fn scontrol(cfg: &Config) -> Scontrol<'_> {
    Scontrol {
        program: Path::new(&cfg.scontrol),
        timeout: Duration::from_millis(cfg.scontrol_timeout_ms),
    }
}

/// `scontrol show node -o` for all nodes, with reason time stamps.
pub fn query_nodes(cfg: &Config) -> Result<Vec<BrakeNode>, SlurmError> {
    let out = run_with_timeout(
        Path::new(&cfg.scontrol),
        &["show", "node", "-o"],
        Duration::from_millis(cfg.scontrol_timeout_ms),
    )?;
    Ok(brake::parse_nodes(&out))
}

/// Drain `node` with `reason` (one of gpu-health's), unless the brake
/// says no or the node is drained by someone else. On success the drain
/// is recorded in `<state_dir>/drain.json`.
pub fn drain_guarded(cfg: &Config, node: &str, reason: &str, now_ms: u64) -> DrainOutcome {
    let nodes = match query_nodes(cfg) {
        Ok(n) => Some(n),
        Err(e) if cfg.brake.enabled => {
            let why = format!(
                "drain brake: cannot count drained nodes ({e}); not draining (fail safe), would have drained: {reason}"
            );
            log::error!("{why}");
            return DrainOutcome::HeldBack(why);
        }
        Err(e) => {
            log::warn!("cannot query Slurm before draining (brake off): {e}");
            None
        }
    };
    let me = nodes
        .as_deref()
        .and_then(|ns| ns.iter().find(|n| n.info.name == node));
    let current = me
        .filter(|n| n.info.is_drained())
        .and_then(|n| n.info.reason.clone());
    if let Some(r) = &current {
        if !is_own_reason(r) {
            let why = format!("{node} is already drained by someone else ({r:?}); not touching it, would have drained: {reason}");
            log::error!("{why}");
            return DrainOutcome::Foreign(why);
        }
    }
    let already_ours = current.is_some();
    if cfg.brake.enabled && !already_ours {
        if let BrakeVerdict::Hold(why) =
            brake::pre_check(&cfg.brake, nodes.as_deref().unwrap_or(&[]), node)
        {
            let why = format!("{why}; would have drained: {reason}");
            log::error!("{why}");
            return DrainOutcome::HeldBack(why);
        }
    }
    if current.as_deref() != Some(reason) {
        if let Err(e) = scontrol(cfg).drain(node, reason) {
            let why = format!("could not drain {node} ({reason}): {e}");
            log::error!("{why}");
            return DrainOutcome::Failed(why);
        }
        log::error!("drained {node}: {reason}");
    }
    record_drain(cfg, node, reason, now_ms);
    if cfg.brake.enabled && !already_ours {
        if let Some(why) = confirm(cfg, node) {
            return DrainOutcome::HeldBack(why);
        }
    }
    DrainOutcome::Drained
}

/// Save or refresh `drain.json`: a new drain starts a record, a repeated
/// one keeps the drain time and moves the last fault.
fn record_drain(cfg: &Config, node: &str, reason: &str, now_ms: u64) {
    let Some(kind) = reason_kind(reason) else {
        return;
    };
    let rec = match drain_state::load_drain_record(&cfg.state_dir) {
        Ok(Some(mut old)) if old.node == node => {
            old.reason = reason.to_string();
            old.kind = old.kind.max(kind);
            old.last_fault_ms = now_ms;
            old
        }
        _ => DrainRecord::new(node, reason, kind, now_ms),
    };
    if let Err(e) = drain_state::save_drain_record(&cfg.state_dir, &rec) {
        log::error!(
            "cannot record the drain (the automatic return will start its quiet time later): {e}"
        );
    }
}

/// The brake's second look, once the second of our drain is over (plus
/// `settle_ms`): undo our drain when nodes drained at the same moment came
/// first.
fn confirm(cfg: &Config, node: &str) -> Option<String> {
    std::thread::sleep(settle_wait(crate::time::unix_ms(), cfg.brake.settle_ms));
    let nodes = match query_nodes(cfg) {
        Ok(n) => n,
        Err(e) => {
            log::warn!("drain brake: confirming query failed ({e}); keeping the drain");
            return None;
        }
    };
    let BrakeVerdict::Hold(why) = brake::post_check(&cfg.brake, &nodes, node) else {
        return None;
    };
    log::error!("{why}");
    match resume_own(cfg, node) {
        Ok(()) => Some(why),
        Err(e) => {
            log::error!("drain brake: could not undo the drain of {node}: {e}");
            None
        }
    }
}

/// From `now_ms` to the next full second plus `settle_ms`.
fn settle_wait(now_ms: u64, settle_ms: u64) -> Duration {
    Duration::from_millis(1_000 - now_ms % 1_000 + settle_ms)
}

/// Resume `node` and forget its drain record. The caller has checked that
/// the node's reason is gpu-health's.
pub fn resume_own(cfg: &Config, node: &str) -> Result<(), SlurmError> {
    scontrol(cfg).resume(node)?;
    drain_state::clear_drain_record(&cfg.state_dir);
    log::warn!("resumed {node}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_ends_after_the_next_full_second() {
        assert_eq!(settle_wait(10_000, 500), Duration::from_millis(1_500));
        assert_eq!(settle_wait(10_999, 500), Duration::from_millis(501));
        assert_eq!(settle_wait(10_400, 300), Duration::from_millis(900));
    }
}
