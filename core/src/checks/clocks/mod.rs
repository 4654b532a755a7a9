//! Clock events that hold a GPU's clocks down.

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::finding::{Action, Finding};
use crate::snapshot::{throttle, GpuSnapshot};

pub struct Clocks;

impl Check for Clocks {
    fn name(&self) -> &'static str {
        "clock-events"
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            clock_events(g, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `clock-events` | warn | clocks held down by hardware slowdown, thermal slowdown or the power brake |"
    }
}

fn clock_events(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(bits) = g.throttle_reasons else {
        return;
    };
    let names: Vec<&str> = [
        (throttle::HW_SLOWDOWN, "hardware slowdown"),
        (throttle::HW_THERMAL_SLOWDOWN, "hardware thermal slowdown"),
        (throttle::HW_POWER_BRAKE_SLOWDOWN, "power brake"),
        (throttle::SW_THERMAL_SLOWDOWN, "software thermal slowdown"),
    ]
    .iter()
    .filter(|(bit, _)| bits & bit != 0)
    .map(|(_, name)| *name)
    .collect();
    if names.is_empty() {
        return;
    }
    let l = label(g);
    out.push(on_gpu(
        g,
        "clock-events",
        Action::Warn,
        format!("throttled ({}) {l}", names.join(", ")),
        format!("{l} clocks are held down by {}", names.join(", ")),
    ));
}

#[cfg(test)]
mod tests;
