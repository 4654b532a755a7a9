//! Draining and resuming this node, with the brake and the drain record.
//! Every drain of gpu-health (prolog, health check, epilog) goes through
//! [`Drainer::drain_guarded`]; every resume through [`resume_own`].

use std::time::Duration;

use crate::config::BrakeConfig;
use crate::finding::{is_own_reason, own_reason};
use crate::ids::NodeName;
use crate::slurm::{NodeInfo, Scontrol, SlurmError};
use crate::state::StateDir;

use super::brake::{self, BrakeVerdict};
use super::drain_record;

/// What became of a drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    Drained,
    /// The brake (or a failed brake query) kept the node in service.
    HeldBack(String),
    /// The node is already drained with someone else's reason: untouched.
    Foreign(String),
    /// scontrol failed or timed out.
    Failed(String),
}

/// What a drain needs: the brake's settings, the run's scontrol (with its
/// time budget) and the state directory for the drain record.
pub struct Drainer<'a> {
    pub brake: &'a BrakeConfig,
    pub slurm: &'a Scontrol<'a>,
    pub state: &'a StateDir,
}

/// Left of the budget after the settle wait, for the confirming query and
/// a possible undo; a drain that could not be confirmed is not made.
const CONFIRM_RESERVE: Duration = Duration::from_millis(400);

impl Drainer<'_> {
    /// Drain `node` with `reason` (one of gpu-health's), unless the brake
    /// says no or the node is drained by someone else. On success the
    /// drain is recorded (`StateFile::DrainRecord`) with every finding's
    /// summary (`findings`: the reason may say `+N more`).
    pub fn drain_guarded(
        &self,
        node: &NodeName,
        reason: &str,
        findings: &[String],
        now_ms: u64,
    ) -> DrainOutcome {
        let nodes = match self.slurm.show_nodes(None) {
            Ok(n) => Some(n),
            Err(e) if self.brake.enabled => {
                return held(format!(
                    "drain brake: cannot count drained nodes ({e}); not draining (fail safe), would have drained: {reason}"
                ));
            }
            Err(e) => {
                log::warn!("cannot query Slurm before draining (brake off): {e}");
                None
            }
        };
        let current = nodes
            .as_deref()
            .and_then(|ns| ns.iter().find(|n| n.name == node.as_str()))
            .filter(|n| n.is_drained())
            .and_then(|n| n.reason.clone());
        if let Some(r) = &current {
            if !is_own_reason(r) {
                let why = format!(
                    "{node} is already drained by someone else ({:?}); not touching it, would have drained: {reason}",
                    crate::text::printable(r)
                );
                log::error!("{why}");
                return DrainOutcome::Foreign(why);
            }
        }
        let already_ours = current.is_some();
        let brake_applies = self.brake.enabled && !already_ours;
        if brake_applies {
            if let BrakeVerdict::Hold(why) =
                brake::pre_check(self.brake, nodes.as_deref().unwrap_or(&[]), node.as_str())
            {
                return held(format!("{why}; would have drained: {reason}"));
            }
            let needed =
                settle_wait(crate::time::unix_ms(), self.brake.settle_ms) + CONFIRM_RESERVE;
            let left = self.slurm.remaining();
            if left < needed {
                return held(format!(
                    "drain brake: {} ms of the Slurm time budget left, {} ms needed to confirm a drain \
                     (raise scontrol_timeout_ms on a slow controller); not draining, would have drained: {reason}",
                    left.as_millis(),
                    needed.as_millis()
                ));
            }
        }
        // Slurm may have appended its own text to ours: compare our part.
        let current_ours = current.as_deref().and_then(own_reason).map(|(r, _)| r);
        if current_ours != Some(reason) {
            if let Err(e) = self.slurm.drain(node, reason) {
                let why = format!("could not drain {node} ({reason}): {e}");
                log::error!("{why}");
                return DrainOutcome::Failed(why);
            }
            log::error!("drained {node}: {reason}");
        }
        if let Err(e) = drain_record::record_drain(self.state, node, reason, findings, now_ms) {
            log::error!(
                "cannot record the drain (the automatic return will start its quiet time later): {e}"
            );
        }
        if brake_applies {
            if let Some(why) = self.confirm(node) {
                return DrainOutcome::HeldBack(why);
            }
        }
        DrainOutcome::Drained
    }

    /// The brake's second look, once the second of our drain is over (plus
    /// `settle_ms`): undo our drain when nodes drained at the same moment
    /// came first.
    fn confirm(&self, node: &NodeName) -> Option<String> {
        let wait = settle_wait(crate::time::unix_ms(), self.brake.settle_ms)
            .min(self.slurm.remaining().saturating_sub(CONFIRM_RESERVE));
        std::thread::sleep(wait);
        let nodes: Vec<NodeInfo> = match self.slurm.show_nodes(None) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("drain brake: confirming query failed ({e}); keeping the drain");
                return None;
            }
        };
        let BrakeVerdict::Hold(why) = brake::post_check(self.brake, &nodes, node.as_str()) else {
            return None;
        };
        log::error!("{why}");
        match resume_own(self.slurm, self.state, node) {
            Ok(()) => Some(why),
            Err(e) => {
                log::error!("drain brake: could not undo the drain of {node}: {e}");
                None
            }
        }
    }
}

fn held(why: String) -> DrainOutcome {
    log::error!("{why}");
    DrainOutcome::HeldBack(why)
}

/// From `now_ms` to the next full second plus `settle_ms`.
fn settle_wait(now_ms: u64, settle_ms: u64) -> Duration {
    Duration::from_millis(1_000 - now_ms % 1_000 + settle_ms)
}

/// Resume `node` and forget its drain record. The caller has checked that
/// the node's reason is gpu-health's.
pub fn resume_own(
    slurm: &Scontrol<'_>,
    state: &StateDir,
    node: &NodeName,
) -> Result<(), SlurmError> {
    slurm.resume(node)?;
    drain_record::clear(state);
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
