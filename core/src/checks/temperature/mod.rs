//! GPU temperature against `thresholds.max_temperature_c`.

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::config::Thresholds;
use crate::finding::{Action, Finding};
use crate::snapshot::GpuSnapshot;

pub struct Temperature;

impl Check for Temperature {
    fn name(&self) -> &'static str {
        "temperature"
    }
    fn section(&self) -> Option<&'static str> {
        Some("thresholds")
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            temperature(g, &input.config.thresholds, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `temperature` | warn | above `thresholds.max_temperature_c` |"
    }
}

fn temperature(g: &GpuSnapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    let Some(c) = g.temperature_c else { return };
    if c > t.max_temperature_c {
        let l = label(g);
        out.push(on_gpu(
            g,
            "temperature",
            Action::Warn,
            format!("temperature {c}C {l}"),
            format!(
                "{l} is at {c} C (limit {} C): check cooling",
                t.max_temperature_c
            ),
        ));
    }
}

#[cfg(test)]
mod tests;
