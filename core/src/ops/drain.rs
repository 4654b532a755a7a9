//! Draining and resuming this node in Slurm, with the brake. Every drain
//! of gpu-health (prolog, health check, epilog) goes through a
//! [`Drainer`]; every resume through [`resume_own`]. What a drain is for
//! and what came of it is the fault ledger's (`ledger`, `run::act`):
//! this module only talks to Slurm.

use std::time::{Duration, Instant};

use crate::config::BrakeConfig;
use crate::finding::{is_own_reason, own_reason};
use crate::ids::NodeName;
use crate::slurm::{AfterReboot, NodeInfo, Scontrol, SlurmError};

use super::brake::{self, BrakeVerdict};

/// What became of a drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    Drained,
    /// The brake kept the node in service: the drain would pass the
    /// allowed count, or the claim protocol could not prove it would not
    /// (a claim that took too long or was overwritten).
    HeldBack(String),
    /// The node is already drained with someone else's reason: untouched.
    Foreign(String),
    /// scontrol failed or timed out (the claim, the look or the drain).
    Failed(String),
}

/// How the node stands in Slurm's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Drained with gpu-health's reason (the text as Slurm has it).
    Ours(String),
    /// Drained by someone else: never touched.
    Foreign(String),
    InService,
}

fn standing(nodes: &[NodeInfo], node: &NodeName) -> Standing {
    let me = nodes.iter().find(|n| n.name == node.as_str());
    // Rebooting or down with gpu-health's reason: the reboot it asked for.
    let out = me.filter(|n| n.is_drained() || n.held_by_us());
    match out.and_then(|n| n.reason.clone()) {
        Some(r) if is_own_reason(&r) => Standing::Ours(r),
        Some(r) => Standing::Foreign(r),
        None => Standing::InService,
    }
}

/// What a drain asks of Slurm. [`Scontrol`] runs the commands with the
/// run's time budget; the fault ledger's model test stands in a model of
/// slurmctld.
pub trait SlurmCalls {
    /// What is left of the run's time budget for Slurm.
    fn remaining(&self) -> Duration;
    /// Drain; with `stamp_ms` the brake's claim in the node's Comment
    /// becomes the drain's time stamp in the same update.
    fn drain(&self, node: &NodeName, reason: &str, stamp_ms: Option<u64>)
        -> Result<(), SlurmError>;
    /// Ask Slurm to reboot the node as soon as it is idle, and what to
    /// do with it after (`scontrol reboot ASAP [nextstate=RESUME]`).
    fn reboot(&self, node: &NodeName, reason: &str, after: AfterReboot) -> Result<(), SlurmError>;
    /// Withdraw the node's pending reboot (`scontrol cancel_reboot`).
    fn cancel_reboot(&self, node: &NodeName) -> Result<(), SlurmError>;
    /// Set the node's Comment (gpu-health's words only).
    fn set_comment(&self, node: &NodeName, comment: &str) -> Result<(), SlurmError>;
    /// The brake's claim; `kept`: the node's own drain stamp, which the
    /// claim's Comment keeps (`slurm::claim_comment`).
    fn claim(
        &self,
        node: &NodeName,
        stamp_ms: u64,
        kept: Option<u64>,
        reserve: Duration,
    ) -> Result<(), SlurmError>;
    /// Withdraw the claim, putting the node's own drain stamp `kept` back.
    fn release_claim(&self, node: &NodeName, kept: Option<u64>) -> Result<(), SlurmError>;
    fn resume(&self, node: &NodeName) -> Result<(), SlurmError>;
    /// The node table (one node's line with `Some`), leaving `reserve` of
    /// the budget.
    fn show_nodes_leaving(
        &self,
        node: Option<&NodeName>,
        reserve: Duration,
    ) -> Result<Vec<NodeInfo>, SlurmError>;
    /// The brake's wait between its claim and its look.
    fn pause(&self, wait: Duration) {
        std::thread::sleep(wait);
    }
    /// The clock the claim is stamped with.
    fn now_ms(&self) -> u64 {
        crate::time::unix_ms()
    }

    /// This node as Slurm sees it (`None`: Slurm does not know it).
    fn show_node(&self, node: &NodeName) -> Result<Option<NodeInfo>, SlurmError> {
        Ok(self
            .show_nodes_leaving(Some(node), Duration::ZERO)?
            .into_iter()
            .find(|n| n.name == node.as_str()))
    }
}

impl SlurmCalls for Scontrol<'_> {
    fn remaining(&self) -> Duration {
        Scontrol::remaining(self)
    }
    fn drain(
        &self,
        node: &NodeName,
        reason: &str,
        stamp_ms: Option<u64>,
    ) -> Result<(), SlurmError> {
        Scontrol::drain(self, node, reason, stamp_ms)
    }
    fn reboot(&self, node: &NodeName, reason: &str, after: AfterReboot) -> Result<(), SlurmError> {
        Scontrol::reboot(self, node, reason, after)
    }
    fn cancel_reboot(&self, node: &NodeName) -> Result<(), SlurmError> {
        Scontrol::cancel_reboot(self, node)
    }
    fn set_comment(&self, node: &NodeName, comment: &str) -> Result<(), SlurmError> {
        Scontrol::set_comment(self, node, comment)
    }
    fn claim(
        &self,
        node: &NodeName,
        stamp_ms: u64,
        kept: Option<u64>,
        reserve: Duration,
    ) -> Result<(), SlurmError> {
        Scontrol::claim(self, node, stamp_ms, kept, reserve)
    }
    fn release_claim(&self, node: &NodeName, kept: Option<u64>) -> Result<(), SlurmError> {
        Scontrol::release_claim(self, node, kept)
    }
    fn resume(&self, node: &NodeName) -> Result<(), SlurmError> {
        Scontrol::resume(self, node)
    }
    fn show_nodes_leaving(
        &self,
        node: Option<&NodeName>,
        reserve: Duration,
    ) -> Result<Vec<NodeInfo>, SlurmError> {
        Scontrol::show_nodes_leaving(self, node, reserve)
    }
}

/// What a drain needs: the brake's settings and the run's Slurm (with
/// its time budget).
pub struct Drainer<'a> {
    pub brake: &'a BrakeConfig,
    pub slurm: &'a dyn SlurmCalls,
    /// Called with the claim's stamp just before the claim is sent, so
    /// that the run's record knows of a claim a kill could leave behind;
    /// an error stops the claim (held back).
    pub before_claim: &'a dyn Fn(u64) -> Result<(), String>,
    /// The node's own drain stamp (`gpu-health-drained:<ms>` in its
    /// Comment) as the look before the claim found it: the claim keeps
    /// it and its withdrawal puts it back, so that the brake's time window
    /// never forgets that drain.
    pub kept: std::cell::Cell<Option<u64>>,
    /// The drain stamp this drainer wrote into the node's Comment, if it
    /// drained through the brake: the caller keeps it for the next claim.
    pub stamped: std::cell::Cell<Option<u64>>,
}

/// The stamp of gpu-health's latest drain of the node through the brake,
/// as written into its Comment (`StateFile::DrainStamp`): a healthy node
/// keeps no ledger, yet the claim of its next drain must keep this stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrainStamp {
    pub ms: u64,
}

impl crate::state::StateValue for DrainStamp {
    type Key = ();
    fn file((): ()) -> crate::state::StateFile {
        crate::state::StateFile::DrainStamp
    }
}

/// The node's own drain stamp in its Comment; one that is not a number
/// (read as `u64::MAX`) is no drain of ours.
pub fn own_stamp(n: &NodeInfo) -> Option<u64> {
    n.drained_ms.filter(|&ms| ms != u64::MAX)
}

/// Left of the budget after the wait, for the look at the node table and
/// the drain; a drain that could not be decided in time is not made. The
/// configuration refuses a brake whose wait leaves less than this of the
/// Slurm budget.
pub const DECIDE_RESERVE: Duration = Duration::from_millis(crate::config::BRAKE_DECIDE_RESERVE_MS);

/// Kept from the claim and the look for the withdrawal or drain that
/// follows them, so that a slow call cannot leave a claim behind.
const AFTER_LOOK_RESERVE: Duration = Duration::from_millis(300);

impl Drainer<'_> {
    /// How `node` stands in Slurm (one look at its line).
    pub fn look(&self, node: &NodeName) -> Result<Standing, SlurmError> {
        self.slurm
            .show_nodes_leaving(Some(node), Duration::ZERO)
            .map(|n| standing(&n, node))
    }

    /// Drain `node`, which gpu-health has not drained (or found back in
    /// service), with `reason`: through the brake's claim, or with one
    /// look and a drain when the brake is off. `look_first`: the run does
    /// not know the node's Comment (an earlier run found it drained by
    /// someone else, whose Comment a claim would replace, or the state
    /// directory cannot keep the node's own drain stamp): look before
    /// claiming, and keep the drain stamp the look finds.
    pub fn drain_new(&self, node: &NodeName, reason: &str, look_first: bool) -> DrainOutcome {
        if !self.brake.enabled || look_first {
            let looked = self.slurm.show_nodes_leaving(Some(node), Duration::ZERO);
            if let Ok(nodes) = &looked {
                let mine = nodes.iter().find(|n| n.name == node.as_str());
                self.kept.set(mine.and_then(own_stamp));
            }
            let current = match looked.map(|n| standing(&n, node)) {
                Ok(s) => s,
                Err(e) if self.brake.enabled => {
                    return failed(format!(
                        "cannot look at {node} in Slurm ({e}); not draining (fail safe), would have drained: {reason}"
                    ))
                }
                Err(e) => {
                    log::warn!("cannot query Slurm before draining (brake off): {e}");
                    Standing::InService
                }
            };
            match current {
                Standing::Foreign(r) => return foreign(node, &r, reason),
                Standing::Ours(r) => return self.redrain(node, &r, reason),
                Standing::InService if self.brake.enabled => {}
                Standing::InService => return self.make_drain(node, reason, false),
            }
        }
        self.drain_claimed(node, reason)
    }

    /// Claim, wait, look, then drain or withdraw (see `ops::brake`).
    fn drain_claimed(&self, node: &NodeName, reason: &str) -> DrainOutcome {
        let wait = Duration::from_millis(self.brake.claim_timeout_ms + self.brake.settle_ms);
        let left = self.slurm.remaining();
        if left < wait + DECIDE_RESERVE {
            return failed(format!(
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
            Err(Hold::Brake(why)) => {
                self.withdraw(node);
                held(format!("{why}, would have drained: {reason}"))
            }
            Err(Hold::Slurm(why)) => {
                self.withdraw(node);
                failed(format!("{why}, would have drained: {reason}"))
            }
        }
    }

    /// The claim and what follows it; `Err` says why the node holds back.
    fn after_claim(
        &self,
        node: &NodeName,
        reason: &str,
        wait: Duration,
    ) -> Result<DrainOutcome, Hold> {
        let limit = Duration::from_millis(self.brake.claim_timeout_ms);
        let stamp = self.slurm.now_ms();
        (self.before_claim)(stamp).map_err(|e| {
            Hold::Brake(format!(
                "drain brake: cannot record the claim ({e}); not draining"
            ))
        })?;
        let started = Instant::now();
        self.slurm
            .claim(node, stamp, self.kept.get(), AFTER_LOOK_RESERVE)
            .map_err(|e| {
                Hold::Slurm(format!(
                    "drain brake: cannot claim a drain ({e}); not draining (fail safe)"
                ))
            })?;
        let took = started.elapsed();
        if took > limit {
            return Err(Hold::Brake(format!(
                "drain brake: the claim took {} ms (more than {} ms: a node looking earlier may have missed it); \
                 not draining",
                took.as_millis(),
                limit.as_millis()
            )));
        }
        self.slurm.pause(wait.saturating_sub(started.elapsed()));
        let nodes = self
            .slurm
            .show_nodes_leaving(None, AFTER_LOOK_RESERVE)
            .map_err(|e| {
                Hold::Slurm(format!(
                    "drain brake: cannot look at the node table ({e}); not draining (fail safe)"
                ))
            })?;
        match standing(&nodes, node) {
            Standing::Foreign(r) => {
                self.withdraw(node);
                return Ok(foreign(node, &r, reason));
            }
            Standing::Ours(r) => return Ok(self.redrain_clearing(node, &r, reason, true)),
            Standing::InService => {}
        }
        let mine = nodes.iter().find(|n| n.name == node.as_str());
        if mine.and_then(|n| n.claim_ms) != Some(stamp) {
            return Err(Hold::Brake(
                "drain brake: this node's claim is not in Slurm's table \
                 (its Comment was changed meanwhile); not draining"
                    .to_string(),
            ));
        }
        if let BrakeVerdict::Hold(why) = brake::rank(self.brake, &nodes, node.as_str(), stamp) {
            return Err(Hold::Brake(format!("{why}; not draining")));
        }
        let late = Duration::from_millis(
            brake::claim_lifetime_ms(self.brake).saturating_sub(self.brake.settle_ms),
        );
        if started.elapsed() > late {
            return Err(Hold::Brake(format!(
                "drain brake: decided {} ms after the claim, past its lifetime; not draining",
                started.elapsed().as_millis()
            )));
        }
        Ok(self.make_drain(node, reason, true))
    }

    /// Already drained by gpu-health with `current` (as Slurm shows it):
    /// update the reason when it changed. No brake: the node is drained
    /// already.
    pub fn redrain(&self, node: &NodeName, current: &str, reason: &str) -> DrainOutcome {
        self.redrain_clearing(node, current, reason, false)
    }

    fn redrain_clearing(
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
        let stamp = clear_claim.then(|| self.slurm.now_ms());
        match self.slurm.drain(node, reason, stamp) {
            Ok(()) => {
                if stamp.is_some() {
                    self.stamped.set(stamp);
                }
                log::error!("drained {node}: {reason}");
                DrainOutcome::Drained
            }
            Err(e) => {
                if clear_claim {
                    self.withdraw(node);
                }
                failed(format!("could not drain {node} ({reason}): {e}"))
            }
        }
    }

    /// Take this node's claim back (best effort: a claim left behind is
    /// void after `brake::claim_lifetime_ms`).
    pub fn withdraw(&self, node: &NodeName) {
        if let Err(e) = self.slurm.release_claim(node, self.kept.get()) {
            log::warn!(
                "drain brake: cannot withdraw the claim of {node} (void in {} s): {e}",
                brake::claim_lifetime_ms(self.brake) / 1000
            );
        }
    }
}

/// Why a claimed drain was not made.
enum Hold {
    /// The brake's rules.
    Brake(String),
    /// A Slurm command failed.
    Slurm(String),
}

fn foreign(node: &NodeName, current: &str, reason: &str) -> DrainOutcome {
    let why = format!(
        "{node} is already drained by someone else (reason {:?}); not touching it, would have drained: {reason}",
        crate::text::printable(current)
    );
    log::error!("{why}");
    DrainOutcome::Foreign(why)
}

fn held(why: String) -> DrainOutcome {
    log::error!("{why}");
    DrainOutcome::HeldBack(why)
}

fn failed(why: String) -> DrainOutcome {
    log::error!("{why}");
    DrainOutcome::Failed(why)
}

/// Return `node` to service. The caller has checked that the node's
/// drain is gpu-health's.
pub fn resume_own(slurm: &dyn SlurmCalls, node: &NodeName) -> Result<(), SlurmError> {
    slurm.resume(node)?;
    log::warn!("resumed {node}");
    Ok(())
}
