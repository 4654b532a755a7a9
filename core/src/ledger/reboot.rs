//! Reboots through Slurm (`[remediation]`): whether the node's faults
//! call for one, what its drain reason says, and what a new boot means
//! for the faults it was asked for. Pure: `run::act` talks to Slurm.

use crate::config::RemediationConfig;
use crate::finding::{Remedy, INSPECTION_MARK, REBOOT_MARK};

use super::{Handling, Ledger, ProofDue, RebootAsked, RebootDone, MAX_REBOOTS};

impl Ledger {
    /// The kinds of fault to ask Slurm a reboot for, when the policy
    /// allows one now: `[remediation] reboot` on, no reboot asked and not
    /// seen happen yet, every open fault cleared by a reboot, and each of
    /// their kinds rebooted fewer than `max_reboots` times within the
    /// window. Never for a fault that needs a person or an inspection.
    pub fn reboot_wanted(&self, cfg: &RemediationConfig, now_ms: u64) -> Option<Vec<String>> {
        if !cfg.reboot || self.reboot_asked.is_some() {
            return None;
        }
        let mut kinds = Vec::new();
        for f in self.open_faults() {
            if f.remedy != Remedy::Reboot {
                return None;
            }
            kinds.push(f.id.kind());
        }
        kinds.sort();
        kinds.dedup();
        let window = cfg.window_ms();
        let spent = |k: &String| self.reboots_for(k, now_ms, window) >= cfg.max_reboots as usize;
        if kinds.is_empty() || kinds.iter().any(spent) {
            return None;
        }
        Some(kinds)
    }

    /// How the drain reason ends instead of its kind: hardware
    /// inspection when a fault came back after too many reboots; a
    /// reboot when one is to be asked (`reboot`) or was asked for every
    /// open fault.
    pub(super) fn reason_mark(&self, reboot: bool) -> Option<&'static str> {
        if self.open_faults().any(|f| f.remedy == Remedy::Inspection) {
            return Some(INSPECTION_MARK);
        }
        let asked_covers =
            self.reboot_asked.is_some() && self.open_faults().all(|f| f.remedy == Remedy::Reboot);
        (reboot || asked_covers).then_some(REBOOT_MARK)
    }

    /// Slurm took the reboot asked for `kinds` in the boot `boot_id`;
    /// `prove`: asked so that the node stays drained after it, for the
    /// acceptance tier.
    pub fn reboot_requested(&mut self, at_ms: u64, boot_id: &str, kinds: Vec<String>, prove: bool) {
        self.reboot_asked = Some(RebootAsked {
            at_ms,
            boot_id: boot_id.to_string(),
            kinds,
            prove,
        });
        self.proof = None;
    }

    /// The faults that must keep Slurm from returning the node after the
    /// reboot it has pending: gpu-health asked that reboot with
    /// `nextstate=RESUME` (not to be proven), and an open fault needs a
    /// person or an inspection, which a reboot does not clear. Their
    /// summaries; empty when the request may stand.
    pub fn reboot_to_withdraw(&self) -> Vec<&str> {
        match &self.reboot_asked {
            Some(asked) if !asked.prove => self
                .open_faults()
                .filter(|f| f.remedy != Remedy::Reboot)
                .map(|f| f.summary.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Slurm withdrew the reboot gpu-health asked for: no boot is awaited
    /// for it, and its faults stay open and drained for the person the
    /// node now waits for. Not a reboot done (none counts toward
    /// `max_reboots`).
    pub fn reboot_withdrawn(&mut self) {
        self.reboot_asked = None;
    }

    /// A run of boot `boot_id`: when it is another boot than the one a
    /// reboot was asked in, the reboot happened. Its faults are cleared
    /// by it (`Rebooted`; found again, they are new again and the reboot
    /// counts toward inspection); any other fault drained meanwhile is
    /// to be drained again (Slurm returned the node after the reboot, no
    /// person did). A reboot asked with `prove` left the node drained:
    /// gpu-health's drain stands and the tier is due ([`ProofDue`]).
    /// True when a reboot was seen.
    pub fn boot_seen(&mut self, boot_id: &str, now_ms: u64, window_ms: u64) -> bool {
        let happened = self
            .reboot_asked
            .as_ref()
            .is_some_and(|r| !boot_id.is_empty() && r.boot_id != boot_id);
        if !happened {
            return false;
        }
        let Some(asked) = self.reboot_asked.take() else {
            return false;
        };
        for f in &mut self.faults {
            if asked.kinds.contains(&f.id.kind()) {
                f.handling = Handling::Rebooted { at_ms: now_ms };
            } else if f.drained() && !asked.prove {
                f.handling = Handling::New;
            }
        }
        if asked.prove {
            self.proof = Some(ProofDue {
                since_ms: now_ms,
                boot_id: boot_id.to_string(),
                kinds: asked.kinds.clone(),
                passed_ms: None,
                last_try: None,
                after_boot: false,
                steps_passed: Vec::new(),
            });
        } else {
            self.drain = None;
        }
        self.held = None;
        self.reboots.push(RebootDone {
            at_ms: asked.at_ms,
            kinds: asked.kinds,
        });
        let from = now_ms.saturating_sub(window_ms);
        self.reboots.retain(|r| r.at_ms >= from);
        if self.reboots.len() > MAX_REBOOTS {
            let excess = self.reboots.len() - MAX_REBOOTS;
            self.reboots.drain(..excess);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RecoveryConfig;
    use crate::finding::{Action, Finding};
    use crate::ledger::tests::view;
    use crate::ledger::{Plan, Recorded};

    const HOUR: u64 = 3_600_000;

    fn xid(code: u32, remedy: Remedy) -> Finding {
        let mut f = Finding::gpu(
            "xid",
            Action::Drain,
            3,
            Some("0000:18:00.0"),
            format!("Xid {code} GPU3 0000:18:00.0"),
            format!("Xid {code} on GPU3"),
        )
        .with_remedy(remedy);
        f.code = Some(code);
        f
    }

    fn on() -> RemediationConfig {
        RemediationConfig {
            reboot: true,
            ..RemediationConfig::default()
        }
    }

    fn see(l: &mut Ledger, f: &[Finding], now: u64, cfg: &RemediationConfig) {
        l.observe(f, &view(now), &RecoveryConfig::default(), cfg);
    }

    fn reason(l: &Ledger, cfg: &RemediationConfig, now: u64) -> String {
        let reboot = l.reboot_wanted(cfg, now).is_some();
        match l.plan_marked(true, reboot) {
            Plan::Drain { reason, .. } => reason,
            p => panic!("{p:?}"),
        }
    }

    /// Drain, ask, reboot into boot `boot`.
    fn reboot_cycle(l: &mut Ledger, cfg: &RemediationConfig, now: u64, boot: &str) {
        let r = reason(l, cfg, now);
        assert!(r.ends_with(REBOOT_MARK), "{r}");
        l.record(&Recorded::Drained { reason: r }, true, now);
        let kinds = l.reboot_wanted(cfg, now).expect("a reboot");
        l.reboot_requested(now, &format!("before-{boot}"), kinds, false);
        assert!(l.reboot_wanted(cfg, now).is_none(), "one reboot at a time");
        assert!(!l.boot_seen(&format!("before-{boot}"), now + 1, cfg.window_ms()));
        assert!(l.boot_seen(boot, now + 2, cfg.window_ms()));
    }

    #[test]
    fn off_by_default_and_never_for_a_person() {
        let mut l = Ledger::new("n1");
        let off = RemediationConfig::default();
        see(&mut l, &[xid(79, Remedy::Reboot)], 0, &off);
        assert_eq!(l.reboot_wanted(&off, 0), None);
        assert!(reason(&l, &off, 0).ends_with(" (drain)"));
        let mut mixed = Ledger::new("n1");
        see(
            &mut mixed,
            &[xid(79, Remedy::Reboot), xid(48, Remedy::Person)],
            0,
            &on(),
        );
        assert_eq!(mixed.reboot_wanted(&on(), 0), None);
        assert!(reason(&mixed, &on(), 0).ends_with(" (drain)"));
    }

    #[test]
    fn a_reboot_clears_its_fault_and_the_third_time_is_inspection() {
        let cfg = on();
        let mut l = Ledger::new("n1");
        see(&mut l, &[xid(79, Remedy::Reboot)], 0, &cfg);
        reboot_cycle(&mut l, &cfg, 0, "b1");
        assert!(l.faults.iter().all(|f| f.rebooted()));
        assert_eq!(l.plan(true), Plan::Quiet, "cleared by the reboot");
        assert_eq!(l.reboots.len(), 1);
        // Back after the first reboot: one more is allowed.
        see(&mut l, &[xid(79, Remedy::Reboot)], HOUR, &cfg);
        assert!(!l.faults[0].rebooted());
        reboot_cycle(&mut l, &cfg, HOUR, "b2");
        // Back after the second: hardware inspection, no third reboot.
        see(&mut l, &[xid(79, Remedy::Reboot)], 2 * HOUR, &cfg);
        assert_eq!(l.faults[0].remedy, Remedy::Inspection);
        assert_eq!(l.reboot_wanted(&cfg, 2 * HOUR), None);
        let r = reason(&l, &cfg, 2 * HOUR);
        assert!(r.ends_with(INSPECTION_MARK), "{r}");
        assert!(r.contains("back after 2 reboots in 168 h"), "{r}");
        // Out of the window the count starts over.
        let mut late = Ledger::new("n1");
        late.reboots = l.reboots.clone();
        see(&mut late, &[xid(79, Remedy::Reboot)], 200 * HOUR, &cfg);
        assert!(late.reboot_wanted(&cfg, 200 * HOUR).is_some());
    }

    #[test]
    fn an_admins_resume_starts_the_reboot_count_over() {
        let cfg = on();
        let mut l = Ledger::new("n1");
        for round in 0..2 {
            see(&mut l, &[xid(79, Remedy::Reboot)], round * HOUR, &cfg);
            reboot_cycle(&mut l, &cfg, round * HOUR, &format!("b{round}"));
        }
        see(&mut l, &[xid(79, Remedy::Reboot)], 2 * HOUR, &cfg);
        assert_eq!(l.faults[0].remedy, Remedy::Inspection);
        l.returned(false, 3 * HOUR, HOUR);
        assert!(l.reboots.is_empty() && l.reboot_asked.is_none());
        see(&mut l, &[xid(79, Remedy::Reboot)], 4 * HOUR, &cfg);
        assert!(l.reboot_wanted(&cfg, 4 * HOUR).is_some());
        // Someone returned it with scontrol: no reboot of ours stands.
        l.reboot_requested(4 * HOUR, "b9", vec!["Xid 79".into()], false);
        l.returned_by_someone(&[]);
        assert!(l.reboot_asked.is_none());
    }

    #[test]
    fn a_new_boot_without_an_asked_reboot_changes_nothing() {
        let cfg = on();
        let mut l = Ledger::new("n1");
        see(&mut l, &[xid(79, Remedy::Reboot)], 0, &cfg);
        assert!(!l.boot_seen("other", 1, cfg.window_ms()));
        l.reboot_requested(0, "b0", vec!["xid:79".into()], false);
        assert!(
            !l.boot_seen("", 1, cfg.window_ms()),
            "an unreadable boot id"
        );
        assert!(l.reboot_asked.is_some());
    }

    #[test]
    fn a_fault_for_a_person_while_a_resume_reboot_waits_withdraws_it() {
        let cfg = on();
        let mut l = Ledger::new("n1");
        see(&mut l, &[xid(79, Remedy::Reboot)], 0, &cfg);
        let r = reason(&l, &cfg, 0);
        l.record(&Recorded::Drained { reason: r }, true, 0);
        let kinds = l.reboot_wanted(&cfg, 0).expect("a reboot");
        l.reboot_requested(0, "b0", kinds.clone(), false);
        assert!(l.reboot_to_withdraw().is_empty(), "the reboot's own fault");
        // An ECC DBE while the reboot waits: the request must go.
        see(&mut l, &[xid(48, Remedy::Person)], 1_000, &cfg);
        assert_eq!(l.reboot_to_withdraw(), vec!["Xid 48 GPU3 0000:18:00.0"]);
        let r = reason(&l, &cfg, 1_000);
        assert!(r.ends_with(" (drain)"), "{r}");
        l.record(&Recorded::Drained { reason: r }, true, 1_000);
        l.reboot_withdrawn();
        assert!(l.reboot_to_withdraw().is_empty());
        assert_eq!(l.reboot_wanted(&cfg, 2_000), None, "no new reboot asked");
        assert!(!l.boot_seen("b1", 3_000, cfg.window_ms()), "none awaited");
        assert!(l.reboots.is_empty(), "none counted");
        assert!(l.open_faults().count() == 2 && l.faults.iter().all(|f| f.drained()));
        // Asked to stay drained for the tier: Slurm does not return the
        // node by itself, the request may stand.
        let mut p = Ledger::new("n1");
        see(&mut p, &[xid(79, Remedy::Reboot)], 0, &cfg);
        p.reboot_requested(0, "b0", kinds, true);
        see(&mut p, &[xid(48, Remedy::Person)], 1_000, &cfg);
        assert!(p.reboot_to_withdraw().is_empty());
        // A fault back after too many reboots needs an inspection.
        let mut i = Ledger::new("n1");
        see(&mut i, &[xid(79, Remedy::Reboot)], 0, &cfg);
        i.reboot_requested(0, "b0", vec!["xid:79".into()], false);
        see(&mut i, &[xid(31, Remedy::Inspection)], 1_000, &cfg);
        assert_eq!(i.reboot_to_withdraw().len(), 1);
    }
}
