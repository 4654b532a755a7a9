//! What a node had when a fault opened: its GPUs (as NVML listed them)
//! and its HCAs with an active port. The node's proof before it returns
//! (the acceptance tier after a reboot) must cover all of it: a GPU gone
//! from NVML, a GPU without a figure or an HCA whose port stayed down
//! holds the node, however well the rest measured.
//!
//! Kept in the fault ledger from the first run that found the fault on;
//! later runs add what they see (a GPU is never taken out of it, so a GPU
//! that fell off the bus before the run that found it is still counted
//! when an earlier run listed it: `NodeTopology`, saved by every run).

use serde::{Deserialize, Serialize};

use crate::snapshot::{normalize_pci, NodeSnapshot, NodeTopology, MAX_GPUS};

/// HCAs kept at most (today's nodes have 8 to 18).
pub const MAX_HCAS: usize = 64;
/// Bytes of one name kept (UUIDs are 40, bus ids 12, HCA names short).
const MAX_NAME: usize = 96;

/// One GPU the node had: its UUID and PCI bus id, either of which finds
/// it again after a reboot (indices may change, a UUID does not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuMark {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
}

impl GpuMark {
    fn new(uuid: Option<&str>, pci: Option<&str>) -> Option<GpuMark> {
        let uuid = uuid.map(|u| capped(u.trim())).filter(|u| !u.is_empty());
        let pci = pci.and_then(normalize_pci);
        (uuid.is_some() || pci.is_some()).then_some(GpuMark { uuid, pci })
    }

    /// Whether `other` is the same GPU: the same UUID, or (one of them
    /// without a UUID) the same bus id.
    fn same(&self, uuid: Option<&str>, pci: Option<&str>) -> bool {
        match (self.uuid.as_deref(), uuid) {
            (Some(a), Some(b)) => a == b,
            _ => self.pci.is_some() && self.pci.as_deref() == pci,
        }
    }

    /// How a reason names it: its bus id, else its UUID.
    pub fn label(&self) -> &str {
        self.pci
            .as_deref()
            .or(self.uuid.as_deref())
            .unwrap_or("a GPU")
    }
}

/// The GPUs and HCAs a node had.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuMark>,
    /// HCAs with an active InfiniBand or RoCE port, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hcas: Vec<String>,
}

impl Inventory {
    /// What `snapshot` lists, what an earlier run saved (`before`), and
    /// `active_hcas`.
    pub fn of(
        snapshot: &NodeSnapshot,
        before: Option<&NodeTopology>,
        active_hcas: &[String],
    ) -> Inventory {
        let mut inv = Inventory::default();
        for g in &snapshot.gpus {
            inv.add_gpu(g.uuid.as_deref(), g.pci_bus_id.as_deref());
        }
        for (_, uuid, pci) in before.map_or(&[][..], |t| &t.gpus[..]) {
            inv.add_gpu(uuid.as_deref(), pci.as_deref());
        }
        for h in active_hcas {
            inv.add_hca(h);
        }
        inv
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty() && self.hcas.is_empty()
    }

    /// Add what `other` has that this lacks; true when something was.
    pub fn merge(&mut self, other: &Inventory) -> bool {
        let before = (self.gpus.len(), self.hcas.len());
        for g in &other.gpus {
            self.add_gpu(g.uuid.as_deref(), g.pci.as_deref());
        }
        for h in &other.hcas {
            self.add_hca(h);
        }
        before != (self.gpus.len(), self.hcas.len())
    }

    fn add_gpu(&mut self, uuid: Option<&str>, pci: Option<&str>) {
        let pci = pci.and_then(normalize_pci);
        if let Some(known) = self.gpus.iter_mut().find(|g| g.same(uuid, pci.as_deref())) {
            // One run saw its UUID, another only its bus: keep both.
            if known.uuid.is_none() {
                known.uuid = uuid.map(capped);
            }
            if known.pci.is_none() {
                known.pci = pci;
            }
            return;
        }
        if self.gpus.len() < MAX_GPUS {
            self.gpus.extend(GpuMark::new(uuid, pci.as_deref()));
        }
    }

    fn add_hca(&mut self, name: &str) {
        let name = capped(name.trim());
        if name.is_empty() || self.hcas.contains(&name) || self.hcas.len() >= MAX_HCAS {
            return;
        }
        self.hcas.push(name);
        self.hcas.sort();
    }

    /// The GPUs of this inventory that `snapshot` does not list.
    pub fn gpus_missing_from<'a>(&'a self, snapshot: &NodeSnapshot) -> Vec<&'a GpuMark> {
        self.gpus
            .iter()
            .filter(|m| {
                !snapshot.gpus.iter().any(|g| {
                    let pci = g.pci_bus_id.as_deref().and_then(normalize_pci);
                    m.same(g.uuid.as_deref(), pci.as_deref())
                })
            })
            .collect()
    }
}

fn capped(s: &str) -> String {
    let mut end = s.len().min(MAX_NAME);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::GpuSnapshot;

    fn gpu(index: u32, uuid: Option<&str>, pci: &str) -> GpuSnapshot {
        GpuSnapshot {
            index,
            uuid: uuid.map(str::to_string),
            pci_bus_id: Some(pci.to_string()),
            ..Default::default()
        }
    }

    fn node(gpus: Vec<GpuSnapshot>) -> NodeSnapshot {
        NodeSnapshot {
            gpus,
            ..Default::default()
        }
    }

    #[test]
    fn a_gpu_an_earlier_run_listed_is_kept_and_found_missing() {
        let earlier = node(vec![
            gpu(0, Some("GPU-a"), "00000000:18:00.0"),
            gpu(1, Some("GPU-b"), "00000000:2A:00.0"),
        ]);
        let now = node(vec![gpu(0, Some("GPU-a"), "0000:18:00.0")]);
        let inv = Inventory::of(&now, Some(&NodeTopology::of(&earlier)), &[]);
        assert_eq!(inv.gpus.len(), 2, "{inv:?}");
        let missing = inv.gpus_missing_from(&now);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].uuid.as_deref(), Some("GPU-b"));
        assert_eq!(missing[0].label(), "0000:2a:00.0");
        // After a reboot the indices changed: found by UUID.
        let rebooted = node(vec![
            gpu(0, Some("GPU-b"), "0000:2a:00.0"),
            gpu(1, Some("GPU-a"), "0000:18:00.0"),
        ]);
        assert!(inv.gpus_missing_from(&rebooted).is_empty());
        // Another GPU at the same bus id is not the same GPU.
        let swapped = node(vec![
            gpu(0, Some("GPU-a"), "0000:18:00.0"),
            gpu(1, Some("GPU-c"), "0000:2a:00.0"),
        ]);
        assert_eq!(inv.gpus_missing_from(&swapped).len(), 1);
    }

    #[test]
    fn merging_adds_and_never_removes() {
        let mut inv = Inventory::of(&node(vec![]), None, &["mlx5_1".into(), "mlx5_0".into()]);
        assert_eq!(inv.hcas, ["mlx5_0", "mlx5_1"]);
        let later = Inventory::of(
            &node(vec![gpu(0, None, "0000:18:00.0")]),
            None,
            &["mlx5_0".into()],
        );
        assert!(inv.merge(&later));
        assert!(!inv.merge(&later), "nothing new the second time");
        assert_eq!(inv.hcas, ["mlx5_0", "mlx5_1"]);
        // The UUID seen later completes the mark.
        inv.merge(&Inventory::of(
            &node(vec![gpu(0, Some("GPU-z"), "0000:18:00.0")]),
            None,
            &[],
        ));
        assert_eq!(inv.gpus.len(), 1);
        assert_eq!(inv.gpus[0].uuid.as_deref(), Some("GPU-z"));
    }

    #[test]
    fn bounded() {
        let many: Vec<String> = (0..200).map(|i| format!("hca{i}")).collect();
        let gpus = (0..200)
            .map(|i| {
                gpu(
                    i,
                    Some(&format!("GPU-{i}")),
                    &format!("0000:{:02x}:00.0", i),
                )
            })
            .collect();
        let inv = Inventory::of(&node(gpus), None, &many);
        assert_eq!(inv.gpus.len(), MAX_GPUS);
        assert_eq!(inv.hcas.len(), MAX_HCAS);
        let long = "x".repeat(1000);
        let inv = Inventory::of(&node(vec![]), None, &[long]);
        assert_eq!(inv.hcas[0].len(), MAX_NAME);
    }
}
