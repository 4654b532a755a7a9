//! The node's reboots kept where Slurm keeps its Comment, so that a
//! state directory emptied at every boot (diskless nodes) does not reset
//! the count that sends a node to hardware inspection: written after
//! Slurm took a reboot, read back by a run whose ledger knows none when
//! it finds a fault a reboot clears (before it decides).

use crate::finding::Finding;
use crate::slurm::comment::{comment_with, reboots_in, reboots_word};

use super::act::Turn;

/// Before the ledger decides: learn the reboots the node's Comment keeps
/// when the ledger knows none and a fault a reboot clears was found.
pub(super) fn recover(turn: &mut Turn<'_>, findings: &[Finding], now_ms: u64) {
    let ctx = turn.ctx;
    let cfg = &ctx.config().remediation;
    if !ctx.config_ok() || !turn.ledger().reboot_history_unknown(findings, cfg) {
        return;
    }
    let kept = match turn.slurm().show_node(&ctx.node) {
        Ok(Some(me)) => me.comment.as_deref().map(reboots_in).unwrap_or_default(),
        Ok(None) => return,
        Err(e) => {
            log::warn!(
                "{}: cannot read the reboots Slurm keeps for it ({e}); counting those of its ledger only",
                ctx.node
            );
            return;
        }
    };
    let added = turn
        .loaded
        .ledger
        .recover_reboots(&kept, now_ms, cfg.window_ms());
    if added > 0 {
        log::warn!(
            "{}: its fault ledger knew no reboot; {added} reboot(s) within {} h read back from its Slurm Comment count toward max_reboots ({})",
            ctx.node,
            cfg.window_hours,
            cfg.max_reboots
        );
    }
}

/// After Slurm took a reboot: the node's reboots into its Comment, beside
/// the brake's words (never over an admin's note).
pub(super) fn keep(turn: &Turn<'_>) {
    let node = &turn.ctx.node;
    let word = reboots_word(&turn.ledger().reboots_kept());
    let me = match turn.slurm().show_node(node) {
        Ok(Some(me)) => me,
        Ok(None) => return,
        Err(e) => {
            log::warn!("{node}: the reboot is not kept in its Slurm Comment ({e}): a state directory emptied at the boot forgets it");
            return;
        }
    };
    if me.foreign_comment {
        log::warn!("{node}: its Comment is someone else's: the reboot is not kept there (a state directory emptied at the boot forgets it)");
        return;
    }
    let Some(comment) = comment_with(me.comment.as_deref(), word.as_deref()) else {
        return;
    };
    if me.comment.as_deref().unwrap_or_default() == comment {
        return;
    }
    match turn.slurm().set_comment(node, &comment) {
        Ok(()) => log::info!("{node}: reboots kept in its Slurm Comment: {comment}"),
        Err(e) => log::warn!("{node}: the reboot is not kept in its Slurm Comment ({e}): a state directory emptied at the boot forgets it"),
    }
}

/// An admin's resume starts the reboot count over: the reboots leave the
/// node's Comment too (`me`: its line as the resume read it).
pub(super) fn forget(turn: &Turn<'_>, me: &crate::slurm::NodeInfo) {
    let kept = me.comment.as_deref().map(reboots_in).unwrap_or_default();
    if kept.is_empty() {
        return;
    }
    let Some(comment) = comment_with(me.comment.as_deref(), None) else {
        return;
    };
    // The node as Slurm names it (`resume --force` may name it so).
    let Ok(node) = crate::ids::NodeName::parse(&me.name) else {
        return;
    };
    match turn.slurm().set_comment(&node, &comment) {
        Ok(()) => log::info!("{node}: the reboots kept in its Slurm Comment are forgotten with the resume"),
        Err(e) => log::warn!("{node}: the reboots kept in its Slurm Comment stay ({e}); they count toward max_reboots until their window ends"),
    }
}
