//! A GPU NVML reports lost (fallen off the bus).

use super::label::{label, on_gpu};
use super::{Check, CheckInput};
use crate::finding::{Action, Finding, Remedy};
use crate::snapshot::GpuSnapshot;

pub struct GpuLost;

impl Check for GpuLost {
    fn name(&self) -> &'static str {
        "gpu-lost"
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in input.snapshot.gpus.iter() {
            lost(g, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `gpu-lost` | drain | NVML answers `GPU_IS_LOST` for the GPU: it fell off the bus; the node needs a reboot and a hardware check |"
    }
}

fn lost(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    if g.lost {
        let l = label(g);
        out.push(on_gpu(
            g,
            "gpu-lost",
            Action::Drain,
            format!("{l} lost (fallen off the bus)"),
            format!("{l} answers NVML_ERROR_GPU_IS_LOST: it fell off the bus; the node needs a reboot and a hardware check"),
        ).with_remedy(Remedy::Reboot));
    }
}

#[cfg(test)]
mod tests;
