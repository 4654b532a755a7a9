//! Can NVML be used at all: a probe that timed out, a library that cannot
//! be loaded or an init that fails while GPUs are expected drain the node
//! (it cannot run GPU jobs); without evidence of GPUs, or when gpu-health's
//! own probe child failed, the fault may be ours: warn, never drain.

use super::{Check, CheckInput, Place};
use crate::finding::{Action, Finding};
use crate::snapshot::NvmlFailure;

pub struct Nvml;

impl Check for Nvml {
    fn name(&self) -> &'static str {
        "nvml"
    }
    fn place(&self) -> Place {
        Place::Node
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        judge(input)
    }
    fn doc(&self) -> &'static str {
        "| `nvml` | drain | NVML did not answer within `nvml_deadline_ms`, or cannot be loaded or initialised while GPUs are expected (`expected_gpus`, or NVIDIA GPUs on the PCI bus) |\n\
         | `nvml` | warn | NVML unavailable with no GPU expected, or gpu-health's probe child failed |"
    }
}

fn judge(input: &CheckInput<'_>) -> Vec<Finding> {
    let Some(failure) = &input.snapshot.nvml_error else {
        return Vec::new();
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
    vec![f]
}

#[cfg(test)]
mod tests;
