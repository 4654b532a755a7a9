//! The node's inventory in the ledger: noted by every run that acts
//! while a fault, a reboot or a proof is open, so that the proof covers
//! what the node had before its fault; dropped once nothing is open.

use super::Ledger;
use crate::inventory::Inventory;

impl Ledger {
    /// Whether anything is open that a later proof must cover the node
    /// for: a draining fault (handled or not), a reboot, a proof.
    pub fn wants_inventory(&self) -> bool {
        self.open_faults().any(|f| f.action.drains())
            || self.reboot_asked.is_some()
            || self.proof.is_some()
    }

    /// Add what the node has now (`seen`) to what it had; drop it all
    /// when nothing is open. True when the inventory changed.
    pub fn note_inventory(&mut self, seen: &Inventory) -> bool {
        if !self.wants_inventory() {
            return self.inventory.take().is_some();
        }
        match &mut self.inventory {
            Some(had) => had.merge(seen),
            None => {
                self.inventory = Some(seen.clone());
                true
            }
        }
    }

    /// What the proof must cover (empty when nothing was noted).
    pub fn had(&self) -> Inventory {
        self.inventory.clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RecoveryConfig, RemediationConfig};
    use crate::finding::{Action, Finding};
    use crate::ledger::tests::view;

    fn hcas(names: &[&str]) -> Inventory {
        Inventory {
            gpus: Vec::new(),
            hcas: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    #[test]
    fn noted_while_a_fault_is_open_and_dropped_after() {
        let mut l = Ledger::new("n1");
        assert!(!l.note_inventory(&hcas(&["mlx5_0"])), "nothing open");
        assert!(l.inventory.is_none());
        let dbe = Finding::gpu(
            "ecc",
            Action::Drain,
            1,
            None,
            "ECC DBE GPU1".into(),
            "x".into(),
        );
        l.observe(
            &[dbe],
            &view(0),
            &RecoveryConfig::default(),
            &RemediationConfig::default(),
        );
        assert!(l.note_inventory(&hcas(&["mlx5_0", "mlx5_1"])));
        // Later runs see less (the port went down): nothing is lost.
        assert!(!l.note_inventory(&hcas(&["mlx5_1"])));
        assert_eq!(l.had().hcas, ["mlx5_0", "mlx5_1"]);
        l.faults.clear();
        assert!(l.note_inventory(&hcas(&[])));
        assert!(l.inventory.is_none() && l.is_empty());
    }
}
