//! DCGM as a check of the run: a strict job's prolog runs the diagnostic
//! on the job's GPUs (`[dcgm] strict_jobs`), before the node's turn (it
//! takes minutes).

use super::{run_diag, DcgmOutcome};
use crate::checks::{Check, CheckInput, Evidence, Io, Place};
use crate::finding::Finding;
use crate::verdict::Mode;

pub struct Dcgm;

/// What the diagnostic concluded in this run.
pub struct Diag(pub DcgmOutcome);

impl Check for Dcgm {
    fn name(&self) -> &'static str {
        "dcgm"
    }
    fn section(&self) -> Option<&'static str> {
        Some("dcgm")
    }
    fn place(&self) -> Place {
        Place::Diagnostic
    }
    fn probe(&self, io: &Io<'_>, evidence: &mut Evidence) {
        let Some(job) = io.job.filter(|j| j.mode == Mode::Strict) else {
            return;
        };
        if !io.config.dcgm.strict_jobs {
            return;
        }
        let outcome = run_diag(&io.config.dcgm, io.search_path, &job.gpus, &job.gpus);
        log::info!("strict job: {}", outcome.describe());
        evidence.insert(Diag(outcome));
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        input
            .evidence
            .get::<Diag>()
            .map(|d| d.0.findings())
            .unwrap_or_default()
    }
    fn doc(&self) -> &'static str {
        "| `dcgm` | drain | `dcgmi diag` fails a hardware test (memory, PCIe, row remap, inforom, stress) on a strict job's GPUs, or before a node returns |\n\
         | `dcgm` | warn | a deployment or software test fails, or the diagnostic times out |\n\
         | `dcgm` | info | DCGM busy, no host engine, an answer it cannot read |"
    }
}
