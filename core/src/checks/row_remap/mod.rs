//! Memory rows and pages the GPU takes out of service: a remap that failed drains, one waiting for a reset warns.

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput};
use crate::finding::{Action, Finding};
use crate::snapshot::GpuSnapshot;

pub struct RowRemap;

impl Check for RowRemap {
    fn name(&self) -> &'static str {
        "row-remap"
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            remapped_rows(g, &mut out);
            retired_pages(g, &mut out);
        }
        out
    }
    fn doc(&self) -> &'static str {
        "| `row-remap-failure` | drain | the GPU could not remap a failing memory row: the board needs RMA |\n\
         | `row-remap-pending` | warn | a row remap waits for a GPU reset |\n\
         | `retired-pages-pending` | warn | pages wait to be retired at the next GPU reset |"
    }
}

fn remapped_rows(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(r) = g.remapped_rows else { return };
    let l = label(g);
    if r.failure {
        out.push(on_gpu(
            g,
            "row-remap-failure",
            Action::Drain,
            format!("row remap failure {l}"),
            format!("{l} could not remap a failing memory row (uncorrectable rows {}): the board needs RMA", r.uncorrectable),
        ));
    } else if r.pending {
        out.push(on_gpu(
            g,
            "row-remap-pending",
            Action::Warn,
            format!("row remap pending {l}"),
            format!("{l} has a row remap pending: reset the GPU when idle to apply it"),
        ));
    }
}

fn retired_pages(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    if g.retired_pages_pending == Some(true) {
        let l = label(g);
        out.push(on_gpu(
            g,
            "retired-pages-pending",
            Action::Warn,
            format!("page retirement pending {l}"),
            format!("{l} has pages waiting to be retired: reset the GPU when idle"),
        ));
    }
}

#[cfg(test)]
mod tests;
