//! The proof after a reboot (`[acceptance] after_reboot`): a node back
//! from a reboot gpu-health asked for stays drained until the acceptance
//! tier passed on it; with `after_any_boot` a boot it did not ask for
//! too (`boot.rs`: the drain is then the proof's own, made by the first
//! run of the boot). What is due and what a tier run came to; pure:
//! `run::health_check` runs the tier and talks to Slurm.

use super::{capped, Ledger, MAX_WHY};

impl Ledger {
    /// The node waits for the tier: back from a reboot asked with
    /// `prove` or from a boot not asked for, gpu-health's drain stands
    /// (for a boot not asked for: once its drain was made), no fault open
    /// (a fault of the new boot drains it with its own reason instead and
    /// ends the proof), the tier has not passed yet.
    pub fn tier_due(&self) -> bool {
        self.proof_stands() && self.proof.as_ref().is_some_and(|p| p.passed_ms.is_none())
    }

    /// A proof is under way (due, or passed and the return left to do).
    pub fn proof_stands(&self) -> bool {
        self.proof.is_some() && self.drain.is_some() && self.open_faults().next().is_none()
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

    /// A tier run came to no verdict (a job came, nothing held the node
    /// and nothing passed): it stays due; `why` for `gpu-health status`.
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
            ReturnDecision::Wait(w) if w.contains("acceptance tier")
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
