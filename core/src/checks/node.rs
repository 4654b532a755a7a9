//! Node-wide checks: can NVML be used at all, are all GPUs there.

use super::CheckInput;
use crate::finding::{Action, Finding};
use crate::snapshot::NvmlFailure;

pub(super) fn nvml_available(input: &CheckInput<'_>, out: &mut Vec<Finding>) {
    let Some(failure) = &input.snapshot.nvml_error else {
        return;
    };
    let gpus_expected =
        input.config.expected_gpus.unwrap_or(0) > 0 || !input.snapshot.pci_gpus.is_empty();
    let f = match failure {
        NvmlFailure::Timeout { deadline_ms } => Finding::node(
            "nvml",
            Action::Drain,
            format!("NVML did not answer in {deadline_ms} ms"),
            format!(
                "the NVML probe did not finish within {deadline_ms} ms and was abandoned; \
                 a GPU that fell off the bus or a stuck GSP does this (check the kernel log for Xid 79/119)"
            ),
        ),
        NvmlFailure::InitFailed { detail } if gpus_expected => Finding::node(
            "nvml",
            Action::Drain,
            "NVML init failed".into(),
            format!("NVML could not be initialised while GPUs are expected: {detail}"),
        ),
        NvmlFailure::LibraryMissing { detail } if gpus_expected => Finding::node(
            "nvml",
            Action::Drain,
            "NVML library missing".into(),
            format!("GPUs are on the PCI bus but the NVIDIA management library cannot be loaded: {detail}"),
        ),
        // Without evidence of GPUs, or when our own probe child failed, the
        // fault may be ours: tell, never drain.
        NvmlFailure::InitFailed { detail } | NvmlFailure::LibraryMissing { detail } => Finding::node(
            "nvml",
            Action::Warn,
            "NVML unavailable".into(),
            format!("NVML unavailable and no GPU expected by configuration or sysfs: {detail}"),
        ),
        NvmlFailure::ProbeCrashed { detail } => Finding::node(
            "nvml",
            Action::Warn,
            "NVML probe failed".into(),
            format!("the NVML probe process failed: {detail}"),
        ),
    };
    out.push(f);
}

pub(super) fn gpu_count(input: &CheckInput<'_>, out: &mut Vec<Finding>) {
    let snap = input.snapshot;
    if snap.nvml_error.is_some() {
        return;
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
            out.push(Finding::node(
                "gpu-count",
                Action::Info,
                format!("GPU count {answering} of {expected} seen from the job"),
                format!(
                    "the Prolog runs inside the job's cgroup (PrologFlags=RunInJob) and NVML \
                     sees only the job's {k} of the node's {expected} GPUs (ConstrainDevices); \
                     the others were not checked by this Prolog"
                ),
            ));
            return;
        }
    }
    if answering < expected {
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
        out.push(Finding::node(
            "gpu-count",
            Action::Drain,
            format!("GPU count {answering} of {expected}{which}"),
            format!("{answering} GPUs answer NVML, {expected} expected{which}"),
        ));
    }
}
