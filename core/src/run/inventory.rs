//! Noting what the node has in its ledger while a fault is open (the
//! ledger's `inventory`): its GPUs now and as the run before saved them
//! (`NodeTopology`, written after this run acted, so it is the node as
//! it was before), and its HCAs with an active InfiniBand or RoCE port.
//! Nothing is read on a node with nothing open.

use crate::checks::rdma_ports::Ports;
use crate::fabric::{Fabric, LinkLayer};
use crate::inventory::Inventory;
use crate::snapshot::NodeTopology;

use super::act::Turn;
use super::node_check::NodeCheck;

/// Note what the node has now in the ledger (saved with it).
pub(super) fn note(turn: &mut Turn<'_>, check: &NodeCheck) {
    let ctx = turn.ctx;
    if !turn.ledger().wants_inventory() {
        turn.loaded.ledger.note_inventory(&Inventory::default());
        return;
    }
    let before = ctx.state.load::<NodeTopology>(()).unwrap_or_else(|e| {
        log::warn!("cannot read the node topology an earlier run saved: {e}");
        None
    });
    let hcas = active_hcas(ctx, check);
    let seen = Inventory::of(&check.snapshot, before.as_ref(), &hcas);
    if turn.loaded.ledger.note_inventory(&seen) {
        let had = turn.ledger().had();
        log::info!(
            "{}: what the proof before a return must cover: {} GPU(s), HCAs with an active port: {}",
            ctx.node,
            had.gpus.len(),
            if had.hcas.is_empty() {
                "none".to_string()
            } else {
                had.hcas.join(", ")
            }
        );
    }
}

/// HCAs with an active InfiniBand or RoCE port (the rdma check's read
/// when it made one, else sysfs read now).
fn active_hcas(ctx: &super::RunContext, check: &NodeCheck) -> Vec<String> {
    let read;
    let fabric: &Fabric = match check.evidence.get::<Ports>() {
        Some(Ports(Ok(f))) => f,
        _ => match crate::fabric::read_fabric(&ctx.config().sysfs_root) {
            Ok(f) => {
                read = f;
                &read
            }
            Err(e) => {
                log::warn!("cannot list the node's HCAs for its proof: {e}");
                return Vec::new();
            }
        },
    };
    let mut names: Vec<String> = fabric
        .active_ports()
        .filter(|p| matches!(p.link_layer, LinkLayer::InfiniBand | LinkLayer::Ethernet))
        .map(|p| p.device.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}
