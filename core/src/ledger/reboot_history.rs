//! The reboots of the ledger as the node's Comment in Slurm keeps them
//! (`slurm::reboots_word`), and read back by a run whose ledger knows
//! none: a state directory emptied at every boot must not reset the
//! count that sends a node to hardware inspection.

use super::{Ledger, RebootDone, MAX_REBOOTS};
use crate::config::RemediationConfig;
use crate::finding::{Finding, Remedy};

impl Ledger {
    /// The reboots to keep in Slurm: those done within the ledger's
    /// window and the one asked, as (unix s, kind).
    pub fn reboots_kept(&self) -> Vec<(u64, String)> {
        let asked = self.reboot_asked.as_ref().map(|a| (a.at_ms, &a.kinds));
        self.reboots
            .iter()
            .map(|r| (r.at_ms, &r.kinds))
            .chain(asked)
            .flat_map(|(at, kinds)| kinds.iter().map(move |k| (at / 1000, k.clone())))
            .collect()
    }

    /// Whether a run that found `findings` must read the node's reboots
    /// from Slurm before deciding: reboots are on, the ledger knows of
    /// none (none done, none asked: a new or emptied state directory),
    /// and a fault a reboot clears was found.
    pub fn reboot_history_unknown(&self, findings: &[Finding], cfg: &RemediationConfig) -> bool {
        cfg.reboot
            && self.reboots.is_empty()
            && self.reboot_asked.is_none()
            && findings
                .iter()
                .any(|f| f.action.drains() && f.remedy == Remedy::Reboot)
    }

    /// Add the reboots Slurm kept (`kept`: unix s, kind) that fall within
    /// `window_ms` and the ledger lacks; how many were added.
    pub fn recover_reboots(
        &mut self,
        kept: &[(u64, String)],
        now_ms: u64,
        window_ms: u64,
    ) -> usize {
        let from = now_ms.saturating_sub(window_ms);
        // What the ledger had, each (second, kind) once per reboot: two
        // reboots in one second are two (their stamps are seconds).
        let mut had: Vec<(u64, String)> = self.reboots_kept();
        let mut added = 0;
        for (s, kind) in kept {
            let at_ms = s.saturating_mul(1000);
            if at_ms < from || at_ms > now_ms {
                continue;
            }
            if let Some(i) = had.iter().position(|(hs, hk)| hs == s && hk == kind) {
                had.swap_remove(i);
                continue;
            }
            self.reboots.push(RebootDone {
                at_ms,
                kinds: vec![kind.clone()],
            });
            added += 1;
        }
        self.reboots.sort_by_key(|r| r.at_ms);
        if self.reboots.len() > MAX_REBOOTS {
            let excess = self.reboots.len() - MAX_REBOOTS;
            self.reboots.drain(..excess);
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;

    #[test]
    fn kept_and_recovered_within_the_window() {
        let mut l = Ledger::new("n1");
        l.reboots.push(RebootDone {
            at_ms: 10 * HOUR,
            kinds: vec!["Xid 79".into()],
        });
        l.reboot_requested(20 * HOUR, "b1", vec!["Xid 79".into()], false);
        let kept = l.reboots_kept();
        assert_eq!(
            kept,
            [
                (36_000, "Xid 79".to_string()),
                (72_000, "Xid 79".to_string())
            ]
        );
        // A new state directory after the boot.
        let mut fresh = Ledger::new("n1");
        assert_eq!(fresh.recover_reboots(&kept, 21 * HOUR, 168 * HOUR), 2);
        assert_eq!(fresh.reboots_for("Xid 79", 21 * HOUR, 168 * HOUR), 2);
        assert_eq!(
            fresh.recover_reboots(&kept, 21 * HOUR, 168 * HOUR),
            0,
            "once"
        );
        // Two reboots in one second are two.
        let twice = vec![(36_000, "Xid 79".to_string()); 2];
        let mut both = Ledger::new("n1");
        assert_eq!(both.recover_reboots(&twice, 21 * HOUR, 168 * HOUR), 2);
        // Out of the window, or from the future: not counted.
        let mut late = Ledger::new("n1");
        assert_eq!(late.recover_reboots(&kept, 200 * HOUR, 168 * HOUR), 0);
        assert_eq!(late.recover_reboots(&kept, 15 * HOUR, 168 * HOUR), 1);
    }
}
