//! The enforced power limit against the board's default.

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::config::Thresholds;
use crate::finding::{Action, Finding};
use crate::snapshot::GpuSnapshot;

pub struct PowerLimit;

impl Check for PowerLimit {
    fn name(&self) -> &'static str {
        "power-limit"
    }
    fn section(&self) -> Option<&'static str> {
        Some("thresholds")
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            power_limit(g, &input.config.thresholds, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `power-limit` | warn | the enforced power limit is below `thresholds.min_power_limit_ratio` of the default |"
    }
}

fn power_limit(g: &GpuSnapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    let (Some(limit), Some(default)) = (g.power_limit_mw, g.default_power_limit_mw) else {
        return;
    };
    if default == 0 || (limit as f64) >= (default as f64) * t.min_power_limit_ratio {
        return;
    }
    let l = label(g);
    out.push(on_gpu(
        g,
        "power-limit",
        Action::Warn,
        format!("power limit {} W of {} W {l}", limit / 1000, default / 1000),
        format!(
            "{l} enforced power limit is {} W, below its default {} W: it will run slower",
            limit / 1000,
            default / 1000
        ),
    ));
}

#[cfg(test)]
mod tests;
