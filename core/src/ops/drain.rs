//! Draining and resuming this node, with the brake and the drain record.
//! Every drain of gpu-health (prolog, health check, epilog) goes through
//! [`Drainer::drain_guarded`]; every resume through [`resume_own`].

use std::time::{Duration, Instant};

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
    /// Look at the node table before claiming: an earlier run found the
    /// node drained by someone else, whose Comment a claim would replace.
    pub look_first: bool,
}

/// Left of the budget after the wait, for the look at the node table and
/// the drain; a drain that could not be decided in time is not made.
const DECIDE_RESERVE: Duration = Duration::from_millis(400);

/// Kept from the claim and the look for the withdrawal or drain that
/// follows them, so that a slow call cannot leave a claim behind.
const AFTER_LOOK_RESERVE: Duration = Duration::from_millis(300);

/// How the node stood in Slurm's table.
enum Standing {
    /// Drained with gpu-health's reason (the text as Slurm has it).
    Ours(String),
    /// Drained by someone else: never touched.
    Foreign(String),
    InService,
}

fn standing(nodes: &[NodeInfo], node: &NodeName) -> Standing {
    let me = nodes.iter().find(|n| n.name == node.as_str());
    match me.filter(|n| n.is_drained()).and_then(|n| n.reason.clone()) {
        Some(r) if is_own_reason(&r) => Standing::Ours(r),
        Some(r) => Standing::Foreign(r),
        None => Standing::InService,
    }
}

impl Drainer<'_> {
    /// Drain `node` with `reason` (one of gpu-health's), unless the brake
    /// says no or the node is drained by someone else. On success the
    /// drain is recorded (`StateFile::DrainRecord`) with every finding's
    /// summary (`findings`: the reason may say `+N more`).
    ///
    /// A node drained by gpu-health already (its drain record says so),
    /// or found drained by someone else by an earlier run, is looked up
    /// first: the first is not braked again, the second not touched. Any
    /// other goes through the brake's claim (`ops::brake`).
    pub fn drain_guarded(
        &self,
        node: &NodeName,
        reason: &str,
        findings: &[String],
        now_ms: u64,
    ) -> DrainOutcome {
        let recorded = drain_record::load(self.state, node).is_ok_and(|r| r.is_some());
        let outcome = if !self.brake.enabled || recorded || self.look_first {
            self.drain_direct(node, reason)
        } else {
            None
        };
        let outcome = match outcome {
            Some(o) => o,
            None => self.drain_claimed(node, reason),
        };
        if outcome == DrainOutcome::Drained {
            if let Err(e) = drain_record::record_drain(self.state, node, reason, findings, now_ms) {
                log::error!(
                    "cannot record the drain (the automatic return will start its quiet time later): {e}"
                );
            }
        }
        outcome
    }

    /// One look, then drain without the brake: the brake is off, or the
    /// node was drained by gpu-health already. `None`: the node is in
    /// service and the brake applies.
    fn drain_direct(&self, node: &NodeName, reason: &str) -> Option<DrainOutcome> {
        let current = match self.slurm.show_nodes(None) {
            Ok(nodes) => standing(&nodes, node),
            Err(e) if self.brake.enabled => {
                return Some(held(format!(
                    "drain brake: cannot look at the node table ({e}); not draining (fail safe), would have drained: {reason}"
                )));
            }
            Err(e) => {
                log::warn!("cannot query Slurm before draining (brake off): {e}");
                Standing::InService
            }
        };
        match current {
            Standing::Foreign(r) => Some(foreign(node, &r, reason)),
            Standing::Ours(r) => Some(self.redrain(node, &r, reason, false)),
            Standing::InService if self.brake.enabled => None,
            Standing::InService => Some(self.make_drain(node, reason, false)),
        }
    }

    /// Claim, wait, look, then drain or withdraw (see `ops::brake`).
    fn drain_claimed(&self, node: &NodeName, reason: &str) -> DrainOutcome {
        let wait = Duration::from_millis(self.brake.claim_timeout_ms + self.brake.settle_ms);
        let left = self.slurm.remaining();
        if left < wait + DECIDE_RESERVE {
            return held(format!(
                "drain brake: {} ms of the Slurm time budget left, {} ms needed to claim and decide \
                 (raise scontrol_timeout_ms on a slow controller); not draining, would have drained: {reason}",
                left.as_millis(),
                (wait + DECIDE_RESERVE).as_millis()
            ));
        }
        // Every way out but a drain (or someone else's drain) withdraws
        // the claim: here, once.
        match self.after_claim(node, reason, wait) {
            Ok(outcome) => outcome,
            Err(why) => {
                self.withdraw(node);
                held(format!("{why}, would have drained: {reason}"))
            }
        }
    }

    /// The claim and what follows it; `Err` says why the node holds back.
    fn after_claim(
        &self,
        node: &NodeName,
        reason: &str,
        wait: Duration,
    ) -> Result<DrainOutcome, String> {
        let limit = Duration::from_millis(self.brake.claim_timeout_ms);
        let stamp = crate::time::unix_ms();
        let started = Instant::now();
        self.slurm
            .claim(node, stamp, AFTER_LOOK_RESERVE)
            .map_err(|e| {
                format!("drain brake: cannot claim a drain ({e}); not draining (fail safe)")
            })?;
        let took = started.elapsed();
        if took > limit {
            return Err(format!(
                "drain brake: the claim took {} ms (more than {} ms: a node looking earlier may have missed it); \
                 not draining",
                took.as_millis(),
                limit.as_millis()
            ));
        }
        std::thread::sleep(wait.saturating_sub(started.elapsed()));
        let nodes = self
            .slurm
            .show_nodes_leaving(None, AFTER_LOOK_RESERVE)
            .map_err(|e| {
                format!(
                    "drain brake: cannot look at the node table ({e}); not draining (fail safe)"
                )
            })?;
        match standing(&nodes, node) {
            Standing::Foreign(r) => {
                self.withdraw(node);
                return Ok(foreign(node, &r, reason));
            }
            Standing::Ours(r) => return Ok(self.redrain(node, &r, reason, true)),
            Standing::InService => {}
        }
        let mine = nodes.iter().find(|n| n.name == node.as_str());
        if mine.and_then(|n| n.claim_ms) != Some(stamp) {
            return Err("drain brake: this node's claim is not in Slurm's table \
                        (its Comment was changed meanwhile); not draining"
                .to_string());
        }
        if let BrakeVerdict::Hold(why) = brake::rank(self.brake, &nodes, node.as_str(), stamp) {
            return Err(format!("{why}; not draining"));
        }
        let late = Duration::from_millis(
            brake::claim_lifetime_ms(self.brake).saturating_sub(self.brake.settle_ms),
        );
        if started.elapsed() > late {
            return Err(format!(
                "drain brake: decided {} ms after the claim, past its lifetime; not draining",
                started.elapsed().as_millis()
            ));
        }
        Ok(self.make_drain(node, reason, true))
    }

    /// Already drained by gpu-health: update the reason when it changed.
    fn redrain(
        &self,
        node: &NodeName,
        current: &str,
        reason: &str,
        clear_claim: bool,
    ) -> DrainOutcome {
        // Slurm may have appended its own text to ours: compare our part.
        if own_reason(current).map(|(r, _)| r) == Some(reason) {
            if clear_claim {
                self.withdraw(node);
            }
            return DrainOutcome::Drained;
        }
        self.make_drain(node, reason, clear_claim)
    }

    fn make_drain(&self, node: &NodeName, reason: &str, clear_claim: bool) -> DrainOutcome {
        match self.slurm.drain(node, reason, clear_claim) {
            Ok(()) => {
                log::error!("drained {node}: {reason}");
                DrainOutcome::Drained
            }
            Err(e) => {
                if clear_claim {
                    self.withdraw(node);
                }
                let why = format!("could not drain {node} ({reason}): {e}");
                log::error!("{why}");
                DrainOutcome::Failed(why)
            }
        }
    }

    /// Take this node's claim back (best effort: a claim left behind is
    /// void after `brake::CLAIM_LIFETIME_MS`).
    fn withdraw(&self, node: &NodeName) {
        if let Err(e) = self.slurm.release_claim(node) {
            log::warn!(
                "drain brake: cannot withdraw the claim of {node} (void in {} s): {e}",
                brake::claim_lifetime_ms(self.brake) / 1000
            );
        }
    }
}

fn foreign(node: &NodeName, current: &str, reason: &str) -> DrainOutcome {
    let why = format!(
        "{node} is already drained by someone else ({:?}); not touching it, would have drained: {reason}",
        crate::text::printable(current)
    );
    log::error!("{why}");
    DrainOutcome::Foreign(why)
}

fn held(why: String) -> DrainOutcome {
    log::error!("{why}");
    DrainOutcome::HeldBack(why)
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
