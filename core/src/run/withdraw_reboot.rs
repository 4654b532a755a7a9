//! A fault that needs a person stops Slurm's return: gpu-health asked
//! Slurm to reboot the node with `nextstate=RESUME`, and before the
//! reboot a fault a reboot does not clear (an ECC DBE, one back after
//! too many reboots) is found. The drain's reason already says `(drain)`,
//! but Slurm keeps the request and would return the node after the boot.
//! The request is withdrawn (`scontrol cancel_reboot`): a second
//! `scontrol reboot` with another `nextstate` is ignored while one is
//! pending (docs/operations.md, "A reboot request withdrawn"). The node
//! stays drained by gpu-health's own drain, which is put back directly
//! (never through the brake: the node is out of service already) should
//! Slurm have lifted it with the request.

use crate::ids::NodeName;

use super::act::Turn;

/// After the run's drain held: withdraw a pending `nextstate=RESUME`
/// reboot that an open fault for a person forbids. `reason`: the drain
/// Slurm holds now. The ledger forgets the request only once Slurm took
/// the withdrawal and the node is seen drained (or drained again); a
/// failure leaves it for the next run.
pub(super) fn withdraw_reboot(turn: &mut Turn<'_>, reason: &str) {
    let why = turn.ledger().reboot_to_withdraw().join("; ");
    if why.is_empty() {
        return;
    }
    let node = &turn.ctx.node;
    if let Err(e) = turn.slurm().cancel_reboot(node) {
        // Slurm refuses to cancel a reboot it has not pending ("Invalid
        // node state transition"): someone withdrew it already.
        if !gone(turn.slurm(), node) {
            log::error!(
                "cannot withdraw the reboot of {node} (nextstate=RESUME) that a fault for a person forbids ({e}); \
                 Slurm would return the node after it: the next run tries again. faults: {why}"
            );
            return;
        }
        log::warn!("{node}: Slurm has no reboot of it pending any more ({e})");
    }
    if let Err(e) = keep_drained(turn.slurm(), node, reason) {
        log::error!(
            "withdrew the reboot of {node}, but cannot make sure it is still drained ({e}); \
             the next run looks again. faults: {why}"
        );
        return;
    }
    log::warn!(
        "withdrew the reboot of {node}: Slurm would have returned it after the boot (nextstate=RESUME), \
         but it has a fault a reboot does not clear; it stays drained for a person. faults: {why}"
    );
    turn.loaded.ledger.reboot_withdrawn();
}

/// The node is drained after the withdrawal: looked at, drained again
/// with `reason` (no brake, no stamp) when Slurm shows it otherwise or
/// cannot be read.
fn keep_drained(
    slurm: &dyn crate::ops::drain::SlurmCalls,
    node: &NodeName,
    reason: &str,
) -> Result<(), crate::slurm::SlurmError> {
    match slurm.show_node(node) {
        Ok(Some(me)) if me.is_drained() => return Ok(()),
        Ok(_) => {
            log::warn!("{node} is not drained after its reboot was withdrawn: draining it again")
        }
        Err(e) => log::warn!(
            "cannot look at {node} after withdrawing its reboot ({e}): draining it again"
        ),
    }
    slurm.drain(node, reason, None)
}

/// Slurm shows `node` without a reboot pending (and the look worked).
fn gone(slurm: &dyn crate::ops::drain::SlurmCalls, node: &NodeName) -> bool {
    matches!(slurm.show_node(node), Ok(Some(me)) if !me.reboot_pending())
}
