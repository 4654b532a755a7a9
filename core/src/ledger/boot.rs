//! The proof after any boot (`[acceptance] after_any_boot`): the ledger
//! remembers the boot it last saw; a boot gpu-health did not ask for (a
//! crash, an admin's reboot, maintenance) keeps the node off jobs until
//! the acceptance tier passed on it. Pure: `run::act` reads the boot id
//! and drains, `run::health_check` runs the tier.
//!
//! The drain for such a proof is not a fault: no fault is open, the
//! proof ([`ProofDue`] with `after_boot`) is what the drain stands for.
//! A real fault found in the same run (or later) has its own drain
//! reason and gravity and ends the proof, as after a requested reboot.

use super::{Ledger, ProofDue};

/// The drain reason of a node waiting for its tier after a boot.
pub const BOOT_PROOF_REASON: &str = "gpu-health: acceptance due after a boot (drain)";

impl Ledger {
    /// A run of boot `boot_id` (empty: unreadable). `prove`: the tier is
    /// wanted after any boot (`acceptance::wanted(.., Boot::Other)`, and
    /// the boot was not one gpu-health asked for). The first boot ever
    /// seen is only written down (installing gpu-health, or turning the
    /// key on, drains nothing); another boot with `prove` makes the
    /// proof due, with its drain still to make. Without the key the boot
    /// is forgotten (the ledger is then what it was before the key).
    /// True when a proof became due.
    pub fn boot_noted(&mut self, boot_id: &str, any_boot: bool, asked: bool, now_ms: u64) -> bool {
        if !any_boot {
            self.boot_id = None;
            return false;
        }
        if boot_id.is_empty() {
            return false;
        }
        let before = self.boot_id.replace(boot_id.to_string());
        let new_boot = before.is_some_and(|b| b != boot_id);
        if !new_boot || asked {
            return false;
        }
        self.proof = Some(ProofDue {
            since_ms: now_ms,
            boot_id: boot_id.to_string(),
            kinds: Vec::new(),
            passed_ms: None,
            last_try: None,
            after_boot: true,
            steps_passed: Vec::new(),
        });
        // What was held back before the boot is acted on again.
        self.held = None;
        true
    }

    /// The drain a proof after a boot still needs: no open fault (a
    /// fault's drain decides then) and no drain of gpu-health's yet.
    pub(super) fn boot_proof_drain(&self) -> Option<&'static str> {
        let due = self.proof.as_ref().is_some_and(|p| p.after_boot);
        (due && self.drain.is_none() && self.open_faults().next().is_none())
            .then_some(BOOT_PROOF_REASON)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RecoveryConfig, RemediationConfig};
    use crate::finding::{Action, Finding};
    use crate::ledger::tests::view;
    use crate::ledger::{Plan, Recorded, ReturnDecision};

    fn see(l: &mut Ledger, f: &[Finding], now: u64) {
        l.observe(
            f,
            &view(now),
            &RecoveryConfig::default(),
            &RemediationConfig::default(),
        );
    }

    fn ecc(action: Action) -> Finding {
        Finding::gpu(
            "ecc-uncorrected",
            action,
            2,
            Some("0000:2a:00.0"),
            "GPU2 uncorrected ECC".into(),
            "uncorrected ECC errors on GPU2".into(),
        )
    }

    /// Seen in boot a, then a run of boot b.
    fn booted(any_boot: bool) -> (Ledger, bool) {
        let mut l = Ledger::new("n1");
        assert!(!l.boot_noted("a", any_boot, false, 0));
        let due = l.boot_noted("b", any_boot, false, 1_000);
        (l, due)
    }

    #[test]
    fn the_first_boot_is_only_written_down() {
        let mut l = Ledger::new("n1");
        assert!(!l.boot_noted("a", true, false, 0));
        assert_eq!(l.boot_id.as_deref(), Some("a"));
        assert!(
            l.proof.is_none() && !l.is_empty(),
            "kept to tell the next boot"
        );
        assert_eq!(l.plan(true), Plan::Quiet);
        assert!(!l.boot_noted("a", true, false, 1));
        assert!(!l.boot_noted("", true, false, 2), "unreadable: nothing");
        assert_eq!(l.boot_id.as_deref(), Some("a"));
    }

    #[test]
    fn a_new_boot_not_asked_for_drains_and_makes_the_proof_due() {
        let (mut l, due) = booted(true);
        assert!(due);
        let reason = match l.plan(true) {
            Plan::Drain {
                reason,
                ours_already: false,
                ..
            } => reason,
            p => panic!("{p:?}"),
        };
        assert_eq!(reason, BOOT_PROOF_REASON);
        assert!(reason.len() <= 255 && reason.starts_with("gpu-health:"));
        // Held back by the brake: no drain yet, the next run tries again.
        l.record(
            &Recorded::NotActed {
                cause: crate::ledger::PendingCause::Brake,
                why: "brake".into(),
            },
            false,
            1_000,
        );
        assert!(l.drain.is_none() && l.proof.is_some());
        assert!(matches!(l.plan(true), Plan::Drain { .. }));
        l.record(&Recorded::Drained { reason }, false, 2_000);
        assert!(l.tier_due(), "{l:?}");
        assert_eq!(l.plan(true), Plan::Quiet, "drained once, not again");
        // Never returned before the tier passed, whatever the quiet time.
        let cfg = RecoveryConfig {
            auto_return: true,
            ..RecoveryConfig::default()
        };
        assert!(matches!(
            l.may_return(&cfg, &[], u64::MAX / 2),
            ReturnDecision::ProveFirst(w) if w.contains("acceptance tier")
        ));
        l.tier_passed(3_000);
        assert_eq!(l.may_return(&cfg, &[], 3_000), ReturnDecision::Return);
        l.returned(true, 3_000, cfg.escalate_window_ms());
        assert!(l.proof.is_none() && l.drain.is_none());
        assert_eq!(l.boot_id.as_deref(), Some("b"), "the boot stays known");
        assert!(!l.boot_noted("b", true, false, 4_000), "same boot: nothing");
    }

    #[test]
    fn without_the_key_nothing_happens_and_the_boot_is_forgotten() {
        let (l, due) = booted(false);
        assert!(!due && l.proof.is_none() && l.is_empty());
        let (mut l, _) = booted(true);
        l.proof = None;
        l.boot_noted("c", false, false, 2_000);
        assert!(l.is_empty(), "{l:?}");
    }

    #[test]
    fn a_boot_gpu_health_asked_for_takes_the_reboot_path_not_this_one() {
        let mut l = Ledger::new("n1");
        l.boot_noted("a", true, false, 0);
        assert!(!l.boot_noted("b", true, true, 1_000));
        assert!(l.proof.is_none(), "the reboot's own proof decides");
        assert_eq!(l.boot_id.as_deref(), Some("b"));
        assert_eq!(l.plan(true), Plan::Quiet, "not drained twice");
    }

    #[test]
    fn a_real_fault_in_the_same_run_keeps_its_gravity() {
        let (mut l, due) = booted(true);
        assert!(due);
        see(&mut l, &[ecc(Action::Drain)], 1_000);
        let reason = match l.plan(true) {
            Plan::Drain { reason, .. } => reason,
            p => panic!("{p:?}"),
        };
        assert!(reason.contains("uncorrected ECC") && reason.ends_with("(drain)"));
        assert!(!l.tier_due(), "the fault decides");
        l.record(&Recorded::Drained { reason }, true, 1_000);
        assert!(l.proof.is_none(), "the fault's drain replaces the proof");
        assert!(matches!(
            l.may_return(&RecoveryConfig::default(), &[], u64::MAX / 2),
            ReturnDecision::NotOurs(_)
        ));
    }

    #[test]
    fn an_older_ledger_without_a_boot_loads() {
        let l: Ledger = serde_json::from_str(r#"{"version":1,"node":"n1"}"#).unwrap();
        assert!(l.boot_id.is_none());
        let p: ProofDue =
            serde_json::from_str(r#"{"since_ms":1,"boot_id":"b","kinds":["Xid 79"]}"#).unwrap();
        assert!(!p.after_boot);
    }
}
