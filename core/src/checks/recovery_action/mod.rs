//! NVML's persistent recovery action (R550+ drivers).

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::finding::{Action, Finding, Remedy};
use crate::snapshot::GpuSnapshot;

pub struct RecoveryAction;

impl Check for RecoveryAction {
    fn name(&self) -> &'static str {
        "recovery-action"
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            recovery_action(g, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `recovery-action` | drain | NVML's persistent recovery action asks for a GPU reset, node reboot, P2P drain, ... (as an Xid 154 would) |"
    }
}

/// NVML's persistent recovery action: the same nvmlDeviceGpuRecoveryAction_t
/// an Xid 154 announces, read even when that record was missed. Every
/// action but none drains; the ones a reset or a reboot carries out (GPU
/// reset, node reboot, drain and reset, bus reset, system reboot) are
/// cleared by a reboot, the others (P2P drain, IMEX recovery, unknown)
/// need a person.
fn recovery_action(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(a) = g.recovery_action.filter(|a| *a != 0) else {
        return;
    };
    let what = match a {
        1 => "GPU reset",
        2 => "node reboot",
        3 => "drain P2P",
        4 => "drain P2P and reset",
        5 => "recover the IMEX domain",
        6 => "bus reset",
        7 => "system reboot",
        _ => "an unknown action",
    };
    let remedy = if matches!(a, 1 | 2 | 4 | 6 | 7) {
        Remedy::Reboot
    } else {
        Remedy::Person
    };
    let l = label(g);
    out.push(on_gpu(
        g,
        "recovery-action",
        Action::Drain,
        format!("recovery action {l}: {what}"),
        format!("{l}: the driver requires a recovery action ({a}: {what}) before the GPU can be trusted again"),
    ).with_remedy(remedy));
}

#[cfg(test)]
mod tests;
