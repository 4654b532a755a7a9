//! Persistence mode (without it every job start pays the driver's initialisation).

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::config::Thresholds;
use crate::finding::{Action, Finding};
use crate::snapshot::GpuSnapshot;

pub struct Persistence;

impl Check for Persistence {
    fn name(&self) -> &'static str {
        "persistence-mode"
    }
    fn section(&self) -> Option<&'static str> {
        Some("thresholds")
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            persistence(g, &input.config.thresholds, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `persistence-mode` | info | persistence mode is off (`thresholds.require_persistence_mode`) |"
    }
}

fn persistence(g: &GpuSnapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    if t.require_persistence_mode && g.persistence_mode == Some(false) {
        let l = label(g);
        out.push(on_gpu(
            g,
            "persistence-mode",
            Action::Info,
            format!("persistence mode off {l}"),
            format!("{l} persistence mode is off: every job start pays the driver initialisation (run nvidia-persistenced)"),
        ));
    }
}

#[cfg(test)]
mod tests;
