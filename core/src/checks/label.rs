//! What the GPU checks share: how a GPU is named in a summary (`GPU<i>
//! <pci>`, so that a drain reason points at the board to pull) and which
//! GPUs answer NVML.

use crate::finding::{Action, Finding};
use crate::snapshot::{GpuSnapshot, NodeSnapshot};

pub(super) fn label(g: &GpuSnapshot) -> String {
    match &g.pci_bus_id {
        Some(p) => format!("GPU{} {p}", g.index),
        None => format!("GPU{}", g.index),
    }
}

/// A finding on `g`.
pub(super) fn on_gpu(
    g: &GpuSnapshot,
    check: &str,
    action: Action,
    summary: String,
    message: String,
) -> Finding {
    Finding::gpu(
        check,
        action,
        g.index,
        g.pci_bus_id.as_deref(),
        summary,
        message,
    )
}

/// The GPUs that answer NVML: only `gpu_lost` looks at the others.
pub(super) fn answering(s: &NodeSnapshot) -> impl Iterator<Item = &GpuSnapshot> {
    s.gpus.iter().filter(|g| !g.lost)
}
