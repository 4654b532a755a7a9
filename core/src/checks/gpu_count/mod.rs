//! Are all GPUs there: fewer GPUs answering NVML than expected
//! (`expected_gpus`, else the NVIDIA GPUs sysfs lists on the PCI bus)
//! drains, naming the missing bus ids.

use super::{Check, CheckInput, Place};
use crate::finding::{Action, Finding, Remedy};

pub struct GpuCount;

impl Check for GpuCount {
    fn name(&self) -> &'static str {
        "gpu-count"
    }
    fn place(&self) -> Place {
        Place::Node
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        judge(input).into_iter().collect()
    }
    fn doc(&self) -> &'static str {
        "| `gpu-count` | drain | fewer GPUs answer NVML than expected (`expected_gpus`, else the NVIDIA GPUs on the PCI bus); the reason names the missing bus ids |\n\
         | `gpu-count` | info | a Prolog inside the job's cgroup (`PrologFlags=RunInJob`) sees only the job's GPUs |"
    }
}

fn judge(input: &CheckInput<'_>) -> Option<Finding> {
    let snap = input.snapshot;
    if snap.nvml_error.is_some() {
        return None;
    }
    let expected = match input.config.expected_gpus {
        Some(n) => n as usize,
        None if !snap.pci_gpus.is_empty() => snap.pci_gpus.len(),
        None => snap.gpus.len(),
    };
    let answering = snap.gpus.iter().filter(|g| !g.lost).count();
    if let Some(k) = input.job_view {
        if answering < expected && answering == k && snap.gpus.len() == k {
            // The job's cgroup hides the other GPUs (ConstrainDevices):
            // what NVML cannot see is not missing. The health check, which
            // runs outside any job, counts them.
            return Some(Finding::node(
                "gpu-count",
                Action::Info,
                format!("GPU count {answering} of {expected} seen from the job"),
                format!(
                    "the Prolog runs inside the job's cgroup (PrologFlags=RunInJob) and NVML \
                     sees only the job's {k} of the node's {expected} GPUs (ConstrainDevices); \
                     the others were not checked by this Prolog"
                ),
            ));
        }
    }
    if answering >= expected {
        return None;
    }
    let missing: Vec<&str> = snap
        .pci_gpus
        .iter()
        .filter(|bdf| snap.gpu_by_pci(bdf).is_none_or(|g| g.lost))
        .map(String::as_str)
        .collect();
    let which = if missing.is_empty() {
        String::new()
    } else {
        format!(" missing {}", missing.join(","))
    };
    Some(
        Finding::node(
            "gpu-count",
            Action::Drain,
            format!("GPU count {answering} of {expected}{which}"),
            format!("{answering} GPUs answer NVML, {expected} expected{which}"),
        )
        // A GPU that fell off the bus comes back with the node's reboot (the
        // lost-GPU rule says when a reboot does not help: it comes back).
        .with_remedy(Remedy::Reboot),
    )
}

#[cfg(test)]
mod tests;
