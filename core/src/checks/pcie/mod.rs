//! The PCIe link of each GPU.

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::finding::{Action, Finding};
use crate::snapshot::GpuSnapshot;

pub struct Pcie;

impl Check for Pcie {
    fn name(&self) -> &'static str {
        "pcie-link"
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            pcie_link(g, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `pcie-link` | warn | the PCIe link trained narrower than the board's width (seating, riser) |\n\
         | `pcie-link` | info | only the generation is lower (healthy boards drop it at idle) |"
    }
}

/// Link width is fixed at training; a narrower link is a seating or riser
/// fault. The generation drops at idle to save power on healthy boards, so
/// a lower generation alone is only information.
fn pcie_link(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(p) = g.pcie else { return };
    if p.current_width >= p.max_width && p.current_gen >= p.max_gen {
        return;
    }
    let l = label(g);
    let action = if p.current_width < p.max_width {
        Action::Warn
    } else {
        Action::Info
    };
    out.push(on_gpu(
        g,
        "pcie-link",
        action,
        format!("PCIe Gen{} x{} of Gen{} x{} {l}", p.current_gen, p.current_width, p.max_gen, p.max_width),
        format!(
            "{l} PCIe link runs at Gen{} x{} of Gen{} x{}: host-device transfers are slower (reseat or check the riser)",
            p.current_gen, p.current_width, p.max_gen, p.max_width
        ),
    ));
}

#[cfg(test)]
mod tests;
