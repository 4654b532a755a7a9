//! The NVSwitch fabric registration of each GPU.

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::finding::{Action, Finding};
use crate::snapshot::GpuSnapshot;

pub struct NvswitchFabric;

impl Check for NvswitchFabric {
    fn name(&self) -> &'static str {
        "fabric"
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            fabric(g, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `fabric` | drain-until-clean | the GPU's NVSwitch fabric registration has not completed, or failed (nvidia-fabricmanager): every CUDA job fails on it |"
    }
}

/// An NVSwitch GPU whose fabric registration has not completed (fabric
/// manager not running, or it failed): every CUDA job fails ("system not
/// yet initialized") while all counters look healthy. It clears when the
/// fabric manager registers the GPU: drain-until-clean. A GPU without a
/// fabric (`None`) is not checked.
fn fabric(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    use crate::snapshot::fabric_state::{COMPLETED, IN_PROGRESS, NOT_STARTED};
    let Some(f) = g.fabric else { return };
    let l = label(g);
    let (summary, message) = match (f.state, f.status) {
        (COMPLETED, 0) => return,
        (COMPLETED, status) => (
            format!("fabric registration failed {l} (status {status})"),
            format!("{l}: NVSwitch fabric registration ended with NVML error {status}; CUDA jobs fail on it until nvidia-fabricmanager registers it"),
        ),
        (state, _) => {
            let what = match state {
                NOT_STARTED => "not started",
                IN_PROGRESS => "in progress",
                _ => "in an unknown state",
            };
            (
                format!("fabric not ready {l} ({what})"),
                format!("{l}: NVSwitch fabric registration {what}: CUDA jobs fail on it; is nvidia-fabricmanager running?"),
            )
        }
    };
    out.push(on_gpu(
        g,
        "fabric",
        Action::DrainUntilClean,
        summary,
        message,
    ));
}

#[cfg(test)]
mod tests;
