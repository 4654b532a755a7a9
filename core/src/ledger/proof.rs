//! The proof after a reboot (`[acceptance] after_reboot`): a node back
//! from a reboot gpu-health asked for stays drained until the acceptance
//! tier passed on it; with `after_any_boot` a boot it did not ask for
//! too (`boot.rs`: the drain is then the proof's own, made by the first
//! run of the boot). What is due and what a tier run came to; pure:
//! `run::health_check` runs the tier and talks to Slurm.

use crate::finding::Action;

use super::{capped, Ledger, ProofDue, MAX_WHY};

/// Steps of the tier kept as passed at most (gates and HCAs).
const MAX_STEPS: usize = 64;

impl ProofDue {
    /// The boot it proves, in words for reasons and logs.
    pub fn boot_words(&self) -> &'static str {
        if self.after_boot {
            "a boot gpu-health did not ask for"
        } else {
            "the reboot gpu-health asked for"
        }
    }
}

impl Ledger {
    /// The node waits for the tier: back from a reboot asked with
    /// `prove` or from a boot not asked for, gpu-health's drain stands
    /// (for a boot not asked for: once its drain was made), the tier has
    /// not passed yet, and no open fault asks for a person (such a
    /// fault's drain ends the proof). A `drain-until-clean` fault of the
    /// new boot does not end it: the tier runs once that fault is clean
    /// and quiet (`Ledger::may_return` says when).
    pub fn tier_due(&self) -> bool {
        self.proof_pending() && self.open_faults().all(|f| f.action < Action::Drain)
    }

    /// A proof is under way (due, or passed and the return left to do)
    /// and no fault is open.
    pub fn proof_stands(&self) -> bool {
        self.proof.is_some() && self.drain.is_some() && self.open_faults().next().is_none()
    }

    /// gpu-health's drain stands for a proof whose tier has not passed:
    /// no automatic return before it did.
    pub fn proof_pending(&self) -> bool {
        self.drain.is_some() && self.proof.as_ref().is_some_and(|p| p.passed_ms.is_none())
    }

    /// The tier passed: the node may return (`Ledger::may_return`); the
    /// return itself is written down by `Ledger::returned` once Slurm
    /// took it.
    pub fn tier_passed(&mut self, now_ms: u64) {
        if let Some(p) = &mut self.proof {
            p.passed_ms = Some(now_ms);
            p.last_try = None;
        }
    }

    /// A tier run in a health check passed `steps` and left others for
    /// the next one: they are not run again in this boot.
    pub fn tier_progress(&mut self, steps: &[String]) {
        if let Some(p) = &mut self.proof {
            for s in steps {
                if p.steps_passed.len() < MAX_STEPS && !p.steps_passed.contains(s) {
                    p.steps_passed.push(capped(s, MAX_WHY));
                }
            }
            p.last_try = None;
        }
    }

    /// The proof holds for the boot it was made in: a run of another
    /// boot (the node crashed or was rebooted while it waited) starts
    /// the tier over, a pass included. `boot_id` empty: unreadable,
    /// nothing changes.
    pub fn proof_in_boot(&mut self, boot_id: &str) {
        if let Some(p) = &mut self.proof {
            if !boot_id.is_empty() && p.boot_id != boot_id {
                p.boot_id = boot_id.to_string();
                p.steps_passed.clear();
                p.passed_ms = None;
                p.last_try = None;
            }
        }
    }

    /// One line on the proof for `gpu-health check`: what it is after,
    /// since when (UTC), the steps passed, the last try; `None` without
    /// a proof.
    pub fn proof_summary(&self) -> Option<String> {
        let p = self.proof.as_ref()?;
        let after = if p.after_boot {
            p.boot_words().to_string()
        } else {
            format!("{} ({})", p.boot_words(), p.kinds.join(", "))
        };
        let since = crate::time::format_utc_ms(p.since_ms);
        let state = match p.passed_ms {
            Some(ms) => format!(
                "passed {}, the return is left to do",
                crate::time::format_utc_ms(ms)
            ),
            None if p.steps_passed.is_empty() => "no step passed yet".to_string(),
            None => format!("passed so far: {}", p.steps_passed.join(", ")),
        };
        let last = p
            .last_try
            .as_ref()
            .map(|w| format!("; last try: {w}"))
            .unwrap_or_default();
        Some(format!(
            "acceptance tier due after {after} since {since}: {state}{last}"
        ))
    }

    /// A tier run came to no verdict (a job came, nothing held the node
    /// and nothing passed): it stays due; `why` for `gpu-health check`.
    pub fn tier_inconclusive(&mut self, why: &str) {
        if let Some(p) = &mut self.proof {
            p.last_try = Some(capped(why, MAX_WHY));
        }
    }

    /// The node is no longer gpu-health's to prove: someone returned it
    /// or drained it with their own reason. The faults the reboot
    /// cleared go with it; the reboots stay counted.
    pub fn proof_dropped(&mut self) {
        if self.proof.take().is_some() && self.open_faults().next().is_none() {
            self.drain = None;
            self.faults.retain(|f| !f.rebooted());
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{RecoveryConfig, RemediationConfig};
    use crate::finding::{Action, Finding, Remedy, REBOOT_MARK};
    use crate::ledger::tests::view;
    use crate::ledger::{Ledger, Plan, Recorded, ReturnDecision};

    const HOUR: u64 = 3_600_000;

    fn xid79() -> Finding {
        let mut f = Finding::gpu(
            "xid",
            Action::Drain,
            3,
            Some("0000:5d:00.0"),
            "Xid 79 GPU3 0000:5d:00.0".into(),
            "Xid 79 on GPU3".into(),
        )
        .with_remedy(Remedy::Reboot);
        f.code = Some(79);
        f
    }

    fn gate_failed() -> Finding {
        Finding::node(
            "gate-allreduce",
            Action::Drain,
            "acceptance failed: all-reduce 312.4 GB/s < 460 GB/s (H100 SXM)".into(),
            "acceptance gate all-reduce FAILED".into(),
        )
    }

    fn on() -> RemediationConfig {
        RemediationConfig {
            reboot: true,
            ..RemediationConfig::default()
        }
    }

    /// Xid 79 drained and a reboot asked (`prove` as given), then the
    /// first run of the new boot.
    fn rebooted(prove: bool) -> Ledger {
        let cfg = on();
        let mut l = Ledger::new("n3");
        l.observe(&[xid79()], &view(0), &RecoveryConfig::default(), &cfg);
        let reason = match l.plan_marked(true, true) {
            Plan::Drain { reason, .. } => reason,
            p => panic!("{p:?}"),
        };
        assert!(reason.ends_with(REBOOT_MARK), "{reason}");
        l.record(&Recorded::Drained { reason }, true, 0);
        let kinds = l.reboot_wanted(&cfg, 0).expect("a reboot");
        l.reboot_requested(0, "boot-a", kinds, prove);
        assert!(l.boot_seen("boot-b", 60_000, cfg.window_ms()));
        l.observe(&[], &view(60_000), &RecoveryConfig::default(), &cfg);
        l
    }

    #[test]
    fn without_the_tier_the_drain_goes_with_the_reboot_as_before() {
        let l = rebooted(false);
        assert!(l.proof.is_none() && l.drain.is_none());
        assert!(!l.tier_due());
    }

    #[test]
    fn back_from_a_reboot_to_prove_the_drain_stands_and_the_tier_is_due() {
        let mut l = rebooted(true);
        assert!(l.tier_due(), "{l:?}");
        assert_eq!(l.plan(true), Plan::Quiet, "nothing to drain anew");
        l.record(&Recorded::Nothing, false, 61_000);
        assert!(l.drain.is_some(), "the drain stands until the tier passed");
        assert_eq!(l.reboots.len(), 1, "the reboot counts toward inspection");
        // Not before the tier passed, whatever the quiet time.
        let cfg = RecoveryConfig::default();
        assert!(matches!(
            l.may_return(&cfg, &[], 100 * HOUR),
            ReturnDecision::ProveFirst(w) if w.contains("acceptance tier")
        ));
        // A tier that came to nothing: still due.
        l.tier_inconclusive("a job runs on this node");
        assert!(l.tier_due());
    }

    #[test]
    fn a_passed_tier_returns_the_node_at_once_and_keeps_the_reboot_count() {
        let mut l = rebooted(true);
        l.tier_passed(61_000);
        assert!(!l.tier_due() && l.proof_stands());
        let cfg = RecoveryConfig {
            auto_return: true,
            ..RecoveryConfig::default()
        };
        assert_eq!(l.may_return(&cfg, &[], 61_000), ReturnDecision::Return);
        assert!(matches!(
            l.may_return(&cfg, &["GPU3 missing".into()], 61_000),
            ReturnDecision::Wait(_)
        ));
        // Written down only once Slurm took the return.
        l.returned(true, 62_000, cfg.escalate_window_ms());
        assert!(l.proof.is_none() && l.drain.is_none() && l.faults.is_empty());
        assert_eq!(l.reboots.len(), 1, "a fault back later still counts it");
    }

    #[test]
    fn a_failed_gate_drains_for_a_person_and_ends_the_proof() {
        let cfg = on();
        let mut l = rebooted(true);
        l.observe(
            &[gate_failed()],
            &view(61_000),
            &RecoveryConfig::default(),
            &cfg,
        );
        assert!(!l.tier_due(), "an open fault: the drain decides");
        assert_eq!(l.reboot_wanted(&cfg, 61_000), None, "no reboot for a gate");
        let reason = match l.plan_marked(true, false) {
            Plan::Drain {
                reason,
                ours_already,
                ..
            } => {
                assert!(ours_already, "the drain of the reboot stands");
                reason
            }
            p => panic!("{p:?}"),
        };
        assert_eq!(
            reason,
            "gpu-health: acceptance failed: all-reduce 312.4 GB/s < 460 GB/s (H100 SXM) (drain)"
        );
        l.record(&Recorded::Drained { reason }, true, 61_000);
        assert!(l.proof.is_none());
        assert!(matches!(
            l.may_return(&RecoveryConfig::default(), &[], 100 * HOUR),
            ReturnDecision::NotOurs(_)
        ));
    }

    #[test]
    fn a_fault_back_in_the_new_boot_drains_again_and_asks_the_next_reboot() {
        let cfg = on();
        let mut l = rebooted(true);
        l.observe(&[xid79()], &view(61_000), &RecoveryConfig::default(), &cfg);
        assert!(!l.tier_due());
        let kinds = l.reboot_wanted(&cfg, 61_000).expect("a second reboot");
        let reason = match l.plan_marked(true, true) {
            Plan::Drain { reason, .. } => reason,
            p => panic!("{p:?}"),
        };
        l.record(&Recorded::Drained { reason }, true, 61_000);
        l.reboot_requested(61_000, "boot-b", kinds, true);
        assert!(l.proof.is_none() && l.reboot_asked.is_some());
    }

    fn link_degraded() -> Finding {
        Finding::gpu(
            "pcie-link",
            Action::DrainUntilClean,
            1,
            Some("0000:1b:00.0"),
            "GPU1 PCIe link x8 of x16".into(),
            "PCIe link of GPU1 degraded".into(),
        )
    }

    fn auto() -> RecoveryConfig {
        RecoveryConfig {
            auto_return: true,
            ..RecoveryConfig::default()
        }
    }

    #[test]
    fn a_drain_until_clean_fault_of_the_new_boot_keeps_the_proof() {
        let cfg = auto();
        let mut l = rebooted(true);
        l.observe(&[link_degraded()], &view(61_000), &cfg, &on());
        let reason = match l.plan(true) {
            Plan::Drain { reason, .. } => reason,
            p => panic!("{p:?}"),
        };
        assert!(reason.ends_with("(drain-until-clean)"), "{reason}");
        l.record(&Recorded::Drained { reason }, true, 61_000);
        assert!(l.proof.is_some() && l.tier_due(), "{l:?}");
        // The fault's own quiet time first, then the tier, never the
        // quiet time alone.
        assert!(matches!(
            l.may_return(&cfg, &[], 62_000),
            ReturnDecision::Wait(w) if w.contains("quiet")
        ));
        let later = 61_000 + cfg.quiet_ms();
        assert!(matches!(
            l.may_return(&cfg, &[], later),
            ReturnDecision::ProveFirst(w) if w.contains("acceptance tier")
        ));
        l.tier_passed(later);
        assert_eq!(l.may_return(&cfg, &[], later), ReturnDecision::Return);
    }

    #[test]
    fn a_drain_until_clean_fault_after_a_pass_or_steps_starts_the_tier_over() {
        let cfg = auto();
        for passed in [false, true] {
            let mut l = rebooted(true);
            l.tier_progress(&["all-reduce".into()]);
            if passed {
                // Passed, but the return did not go through.
                l.tier_passed(61_000);
            }
            l.observe(&[link_degraded()], &view(62_000), &cfg, &on());
            let reason = match l.plan(true) {
                Plan::Drain { reason, .. } => reason,
                p => panic!("{p:?}"),
            };
            l.record(&Recorded::Drained { reason }, true, 62_000);
            let p = l.proof.as_ref().expect("kept");
            assert!(p.passed_ms.is_none() && p.steps_passed.is_empty(), "{p:?}");
            let later = 62_000 + cfg.quiet_ms();
            assert!(matches!(
                l.may_return(&cfg, &[], later),
                ReturnDecision::ProveFirst(_)
            ));
            // The fault stays open in later runs that do not find it again
            // (not fresh): what passes then is kept.
            l.tier_progress(&["dcgm".into()]);
            l.record(&Recorded::Nothing, false, later);
            assert_eq!(l.proof.as_ref().unwrap().steps_passed, ["dcgm"]);
        }
    }

    #[test]
    fn a_drain_until_clean_fault_from_before_the_reboot_waits_for_the_tier() {
        // Xid 79 drained, the reboot asked; the jobs still run (ASAP)
        // when a drain-until-clean fault comes, and the boot does not
        // clear it (it was not among the reboot's kinds).
        let cfg = on();
        let mut l = Ledger::new("n3");
        l.observe(&[xid79()], &view(0), &auto(), &cfg);
        let reason = match l.plan_marked(true, true) {
            Plan::Drain { reason, .. } => reason,
            p => panic!("{p:?}"),
        };
        l.record(&Recorded::Drained { reason }, true, 0);
        let kinds = l.reboot_wanted(&cfg, 0).expect("a reboot");
        l.reboot_requested(0, "boot-a", kinds, true);
        l.observe(&[link_degraded()], &view(1_000), &auto(), &cfg);
        let reason = match l.plan(true) {
            Plan::Drain { reason, .. } => reason,
            p => panic!("{p:?}"),
        };
        l.record(&Recorded::Drained { reason }, true, 1_000);
        assert!(l.boot_seen("boot-b", 60_000, cfg.window_ms()));
        l.observe(&[], &view(60_000), &auto(), &cfg);
        assert!(l.proof.is_some() && l.tier_due(), "{l:?}");
        assert!(matches!(
            l.may_return(&auto(), &[], 100 * HOUR),
            ReturnDecision::ProveFirst(_)
        ));
    }

    #[test]
    fn the_steps_passed_hold_for_their_boot_only() {
        let mut l = rebooted(true);
        l.tier_progress(&["all-reduce".into(), "rdma mlx5_0".into()]);
        l.tier_progress(&["all-reduce".into()]);
        let line = l.proof_summary().unwrap();
        assert!(
            line.starts_with(
                "acceptance tier due after the reboot gpu-health asked for (Xid 79) since "
            ) && line.ends_with(": passed so far: all-reduce, rdma mlx5_0"),
            "{line}"
        );
        let steps = |l: &Ledger| l.proof.as_ref().unwrap().steps_passed.clone();
        assert_eq!(steps(&l), ["all-reduce", "rdma mlx5_0"]);
        assert!(l.tier_due());
        l.proof_in_boot("boot-b");
        l.proof_in_boot("");
        assert_eq!(steps(&l).len(), 2, "same boot, or unreadable: kept");
        l.tier_passed(70_000);
        // A crash before the return: the tier starts over in the new boot.
        l.proof_in_boot("boot-c");
        assert!(steps(&l).is_empty() && l.tier_due(), "{l:?}");
    }

    #[test]
    fn someone_who_takes_the_node_ends_the_proof() {
        let mut l = rebooted(true);
        l.proof_dropped();
        assert!(l.proof.is_none() && l.drain.is_none() && l.faults.is_empty());
        assert_eq!(l.reboots.len(), 1);
        let mut l = rebooted(true);
        l.returned_by_someone(&[]);
        assert!(l.proof.is_none());
    }
}
