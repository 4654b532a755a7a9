//! Deciding from the ledger and writing down what the action came to.
//! Pure: `run::act` does the talking to Slurm in between.

use crate::config::RecoveryConfig;
use crate::finding::{drain_reason_marked, Action};

use super::{capped, AutoReturn, Clock, DrainMark, FaultId, Handling, Held, Ledger, PendingCause};
use super::{MAX_RETURNS, MAX_WHY};

/// What a run must do about the open faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// No open fault: nothing to tell Slurm.
    Quiet,
    /// Open draining faults that this run may not drain (its
    /// configuration is broken): why.
    Hold { why: String },
    /// Drain the node with `reason`: its kind is the gravest open
    /// fault's.
    Drain {
        reason: String,
        /// gpu-health drained this node before (the ledger's mark):
        /// look at the node first, it may hold the reason already.
        ours_already: bool,
        /// An earlier run found the node drained by someone else, whose
        /// Comment a brake claim would replace: look before claiming.
        look_first: bool,
    },
}

/// What a run's action came to, for [`Ledger::record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Nothing was tried.
    Nothing,
    /// Slurm holds gpu-health's drain with this reason.
    Drained { reason: String },
    /// The drain was not made.
    NotActed { cause: PendingCause, why: String },
}

/// What the health check does about a node gpu-health drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReturnDecision {
    Return,
    /// Not yet: the text says what is missing.
    Wait(String),
    /// Everything else allows the return, but a proof is due: the
    /// acceptance tier runs first (`Ledger::tier_due`); the text says
    /// which boot it proves.
    ProveFirst(String),
    /// Not for the automatic return (a `drain` fault, no drain of ours,
    /// automatic return off): why.
    NotOurs(String),
}

impl Ledger {
    /// Pure: what to do about the open faults.
    pub fn plan(&self, config_ok: bool) -> Plan {
        self.plan_marked(config_ok, false)
    }

    /// [`Ledger::plan`]; `reboot`: the drain is to be followed by a
    /// reboot (`Ledger::reboot_wanted`), its reason says so.
    pub fn plan_marked(&self, config_ok: bool, reboot: bool) -> Plan {
        let reason = drain_reason_marked(&self.findings(), self.reason_mark(reboot))
            .or_else(|| self.boot_proof_drain().map(str::to_string));
        let Some(reason) = reason else {
            return Plan::Quiet;
        };
        if !config_ok {
            return Plan::Hold {
                why: format!("configuration error; would have drained: {reason}"),
            };
        }
        let look_first = self.faults.iter().any(|f| {
            matches!(
                f.handling,
                Handling::Pending {
                    cause: PendingCause::DrainedBySomeoneElse,
                    ..
                }
            )
        });
        Plan::Drain {
            reason,
            ours_already: self.drain.is_some(),
            look_first,
        }
    }

    /// Write down what the run's action came to. `fresh`: the run found
    /// a draining fault itself (the automatic return's quiet time starts
    /// over). `now`: the run's [`Clock`] (bare Unix ms: no boot clock).
    pub fn record<'a>(&mut self, outcome: &Recorded, fresh: bool, now: impl Into<Clock<'a>>) {
        let now = now.into();
        let now_ms = now.wall_ms;
        match outcome {
            Recorded::Nothing => {}
            Recorded::Drained { reason } => {
                for f in &mut self.faults {
                    if !f.drained() && !f.rebooted() {
                        f.handling = Handling::Drained { at_ms: now_ms };
                    }
                }
                let kind = self.gravest().unwrap_or(Action::Drain);
                let mark = self.drain.get_or_insert(DrainMark {
                    reason: String::new(),
                    kind,
                    at_ms: now_ms,
                    last_fault_ms: now_ms,
                    last_boot: now.stamp(),
                });
                mark.reason = reason.clone();
                mark.kind = kind;
                if fresh {
                    mark.last_fault_ms = now_ms;
                    mark.last_boot = now.stamp();
                }
                self.held = None;
            }
            Recorded::NotActed { cause, why } => {
                // Someone else's drain replaced ours: ours covers nothing.
                let ours_gone = *cause == PendingCause::DrainedBySomeoneElse;
                if ours_gone {
                    self.drain = None;
                }
                for f in &mut self.faults {
                    f.handling = match f.handling {
                        Handling::Drained { .. } if !ours_gone => continue,
                        Handling::Rebooted { .. } => continue,
                        Handling::Pending { since_ms, .. } => Handling::Pending {
                            cause: *cause,
                            since_ms,
                        },
                        _ => Handling::Pending {
                            cause: *cause,
                            since_ms: now_ms,
                        },
                    };
                }
                self.held = Some(Held {
                    cause: *cause,
                    why: capped(why, MAX_WHY),
                    at_ms: now_ms,
                });
            }
        }
        if !self.open_faults().any(|f| !f.drained()) {
            self.held = None;
        }
        if self.open_faults().next().is_none() {
            // Back from a reboot and waiting for the tier: the drain
            // stands in Slurm until the tier passed.
            if self.proof.is_none() {
                self.drain = None;
            }
        } else if matches!(outcome, Recorded::Drained { .. }) {
            if self.gravest() >= Some(Action::Drain) {
                // Drained again for a fault of the new boot that asks
                // for a person (a failed gate, a fault back): that drain
                // decides now, not the proof.
                self.proof = None;
            } else if fresh {
                // A drain-until-clean fault keeps the proof: the node
                // returns through the tier once that fault is clean,
                // never by its quiet time alone; and what the tier
                // showed before the fault no longer stands.
                if let Some(p) = &mut self.proof {
                    p.passed_ms = None;
                    p.steps_passed.clear();
                }
            }
        }
    }

    /// The node was found in service although the ledger says gpu-health
    /// drained it: someone returned it (`scontrol update State=RESUME`).
    /// The faults this run did not find again (past events: a kernel-log
    /// record, a job's counters) are answered by that; the ones it found
    /// again stand and are drained again.
    pub fn returned_by_someone(&mut self, found_again: &[FaultId]) -> usize {
        let before = self.faults.len();
        self.faults
            .retain(|f| !f.drained() || found_again.contains(&f.id));
        for f in &mut self.faults {
            if f.drained() {
                f.handling = Handling::New;
            }
        }
        self.drain = None;
        // In service: no reboot of ours stands, nothing is left to prove.
        self.reboot_asked = None;
        self.proof = None;
        before - self.faults.len()
    }

    /// Whether the node may return by itself now: gpu-health drained it,
    /// every open fault is `drain-until-clean`, nothing stands against
    /// the node now (`problems`, from `ops::recovery::clean_now`), and
    /// it was quiet for `recovery.quiet_time_s` (on the boot clock within
    /// a boot, see [`Clock::since`]). Reads the ledger, never the reason's
    /// text.
    pub fn may_return<'a>(
        &self,
        cfg: &RecoveryConfig,
        problems: &[String],
        now: impl Into<Clock<'a>>,
    ) -> ReturnDecision {
        let now = now.into();
        let Some(mark) = &self.drain else {
            return ReturnDecision::NotOurs(
                "gpu-health has no drain of this node on record".into(),
            );
        };
        if let Some(f) = self.open_faults().find(|f| f.action == Action::Drain) {
            return ReturnDecision::NotOurs(format!(
                "{} calls for (drain): it stays until an admin runs 'gpu-health resume'",
                f.summary
            ));
        }
        // Back from a boot with nothing open: the tier's pass is the
        // proof (no quiet time: the reboot cleared the faults, the tier
        // shows the node works), whatever `auto_return` says.
        let proving = self.proof_stands();
        if !proving && !cfg.auto_return {
            return ReturnDecision::NotOurs("recovery.auto_return is off".into());
        }
        if !problems.is_empty() {
            return ReturnDecision::Wait(format!("not clean: {}", problems.join("; ")));
        }
        if !proving {
            // Since the last fault or drain: on the boot clock within a
            // boot, so that a wall clock stepped either way ends no quiet
            // time early and starts none over.
            let mark_last = mark.at_ms.max(mark.last_fault_ms);
            let quiet_for = self
                .faults
                .iter()
                .map(|f| now.since(f.last_ms, f.last_boot.as_ref()))
                .chain([now.since(mark_last, mark.last_boot.as_ref())])
                .min()
                .unwrap_or(0);
            if quiet_for < cfg.quiet_ms() {
                return ReturnDecision::Wait(format!(
                    "clean, quiet for {} s of the {} s required",
                    quiet_for / 1000,
                    cfg.quiet_time_s
                ));
            }
        }
        if let Some(p) = self.proof.as_ref().filter(|_| self.proof_pending()) {
            return ReturnDecision::ProveFirst(format!(
                "clean; back from {}, the acceptance tier has not passed yet",
                p.boot_words()
            ));
        }
        ReturnDecision::Return
    }

    /// The node went back to service. An automatic return is remembered
    /// with the kinds of fault it ended (escalation counts them within
    /// `window_ms`); an admin's resume starts the counts of returns and
    /// of reboots over (someone looked at the node).
    pub fn returned(&mut self, automatic: bool, now_ms: u64, window_ms: u64) {
        if automatic {
            let mut kinds: Vec<String> = self.faults.iter().map(|f| f.id.kind()).collect();
            kinds.sort();
            kinds.dedup();
            self.returns.push(AutoReturn {
                at_ms: now_ms,
                kinds,
            });
            let from = now_ms.saturating_sub(window_ms);
            self.returns.retain(|r| r.at_ms >= from);
            if self.returns.len() > MAX_RETURNS {
                let excess = self.returns.len() - MAX_RETURNS;
                self.returns.drain(..excess);
            }
        } else {
            // Someone looked at the node: the counts start over.
            self.returns.clear();
            self.reboots.clear();
            self.reboot_asked = None;
        }
        self.faults.clear();
        self.drain = None;
        self.held = None;
        self.proof = None;
        self.inventory = None;
    }

    /// The open faults not acted on, for a run that could not act (the
    /// line a job's warning carries).
    pub fn pending_count(&self) -> usize {
        self.open_faults().filter(|f| !f.drained()).count()
    }
}
