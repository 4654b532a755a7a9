//! ECC: an uncorrectable (double-bit) error drains at once (results
//! computed on the GPU are corrupt); corrected (single-bit) errors are
//! tracked across runs (`ecc-history.json`) and their growth per hour
//! warns, then drains (`thresholds.sbe_warn_per_hour`,
//! `sbe_fatal_per_hour`).

mod history;

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput, Evidence, Io};
use crate::finding::{Action, Finding};
use crate::snapshot::GpuSnapshot;

pub use history::EccHistory;

pub struct Ecc;

/// The corrected-ECC samples of earlier runs; `stale`: the saved history
/// was missing or unusable (rewrite it).
pub struct Saved {
    pub history: EccHistory,
    pub stale: bool,
}

impl Check for Ecc {
    fn name(&self) -> &'static str {
        "ecc-uncorrected"
    }
    fn section(&self) -> Option<&'static str> {
        Some("thresholds")
    }
    fn gather(&self, io: &Io<'_>, evidence: &mut Evidence) {
        let (history, stale) = match io.state.load::<EccHistory>(()) {
            Ok(Some(h)) => (h, false),
            Ok(None) => (EccHistory::default(), true),
            Err(e) => {
                log::warn!("ECC history unusable, starting a new one: {e}");
                (EccHistory::default(), true)
            }
        };
        evidence.insert(Saved { history, stale });
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let empty = EccHistory::default();
        let history = input.evidence.get::<Saved>().map_or(&empty, |s| &s.history);
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            ecc_uncorrected(g, &mut out);
            ecc_corrected_rate(g, input, history, &mut out);
        }
        out
    }
    /// At most one sample a minute: most runs leave the history as it is,
    /// and then it is not rewritten.
    fn commit(&self, io: &Io<'_>, input: &CheckInput<'_>, _handled: bool) {
        let Some(saved) = input.evidence.get::<Saved>() else {
            return;
        };
        let samples = input
            .snapshot
            .gpus
            .iter()
            .filter_map(|g| Some((g.uuid.clone()?, g.ecc?.aggregate_corrected)));
        let mut history = saved.history.clone();
        if history.record(samples, io.now_ms) || saved.stale {
            if let Err(e) = io.state.save((), &history) {
                log::error!("cannot save the ECC history: {e}");
            }
        }
    }
    fn doc(&self) -> &'static str {
        "| `ecc-uncorrected` | drain | the GPU has uncorrectable (double-bit) ECC errors since the driver loaded |\n\
         | `ecc-corrected-rate` | warn, drain | corrected (single-bit) errors grow faster than `thresholds.sbe_warn_per_hour` (warn) or `sbe_fatal_per_hour` (drain), measured across runs |"
    }
}

fn ecc_uncorrected(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(ecc) = g.ecc else { return };
    if ecc.volatile_uncorrected > 0 {
        let l = label(g);
        out.push(on_gpu(
            g,
            "ecc-uncorrected",
            Action::Drain,
            format!("ECC DBE {l} volatile uncorrected={}", ecc.volatile_uncorrected),
            format!(
                "{l} has {} uncorrectable (double-bit) ECC errors since the driver loaded: results computed on it \
                 are corrupt; reset the GPU and check row remapping",
                ecc.volatile_uncorrected
            ),
        ));
    }
}

fn ecc_corrected_rate(
    g: &GpuSnapshot,
    input: &CheckInput<'_>,
    history: &EccHistory,
    out: &mut Vec<Finding>,
) {
    let (Some(ecc), Some(key)) = (g.ecc, g.uuid.as_deref()) else {
        return;
    };
    let Some(rate) = history.rate_per_hour(key, ecc.aggregate_corrected, input.now_ms) else {
        return;
    };
    let t = &input.config.thresholds;
    let action = if rate > t.sbe_fatal_per_hour {
        Action::Drain
    } else if rate > t.sbe_warn_per_hour {
        Action::Warn
    } else {
        return;
    };
    let l = label(g);
    let limit = if action == Action::Drain {
        t.sbe_fatal_per_hour
    } else {
        t.sbe_warn_per_hour
    };
    out.push(on_gpu(
        g,
        "ecc-corrected-rate",
        action,
        format!("ECC SBE rate {l} {rate:.0}/h"),
        format!("{l} corrected (single-bit) ECC errors grow at {rate:.1} per hour (limit {limit}); memory is degrading"),
    ));
}

#[cfg(test)]
mod tests;
