//! Corrected-ECC history across runs, for the growth-rate check
//! (`StateFile::EccHistory`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Samples older than this are dropped.
const WINDOW_MS: u64 = 24 * 3600 * 1000;
/// A rate over less time than this is noise.
const MIN_SPAN_MS: u64 = 60 * 1000;
/// Samples kept per GPU.
const MAX_SAMPLES: usize = 48;

/// Per GPU (keyed by UUID, which survives renumbering): (unix ms, aggregate
/// corrected count) samples, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EccHistory {
    pub gpus: BTreeMap<String, Vec<(u64, u64)>>,
}

impl EccHistory {
    /// Corrected errors per hour between the oldest usable sample and now.
    pub fn rate_per_hour(&self, uuid: &str, count_now: u64, now_ms: u64) -> Option<f64> {
        let samples = self.gpus.get(uuid)?;
        let &(t0, c0) = samples
            .iter()
            .find(|(t, _)| now_ms.saturating_sub(*t) <= WINDOW_MS)?;
        let span = now_ms.checked_sub(t0)?;
        if span < MIN_SPAN_MS || count_now < c0 {
            return None;
        }
        Some((count_now - c0) as f64 * 3_600_000.0 / span as f64)
    }

    /// Add this run's samples; forget old ones and counters that went back
    /// (board swapped or counters cleared). Returns whether anything
    /// changed (the caller saves the history only then).
    pub fn record(
        &mut self,
        samples: impl IntoIterator<Item = (String, u64)>,
        now_ms: u64,
    ) -> bool {
        let mut changed = false;
        for (uuid, count) in samples {
            let v = self.gpus.entry(uuid).or_default();
            let before = v.len();
            if v.last().is_some_and(|&(_, c)| count < c) {
                v.clear();
            }
            v.retain(|(t, _)| now_ms.saturating_sub(*t) <= WINDOW_MS && *t <= now_ms);
            changed |= v.len() != before;
            // Keep at most one sample per minute so frequent jobs don't
            // push the useful old samples out.
            if v.last()
                .is_none_or(|&(t, _)| now_ms.saturating_sub(t) >= MIN_SPAN_MS)
            {
                v.push((now_ms, count));
                changed = true;
            }
            if v.len() > MAX_SAMPLES {
                let extra = v.len() - MAX_SAMPLES;
                v.drain(..extra);
            }
        }
        changed
    }
}

impl crate::state::StateValue for EccHistory {
    type Key = ();
    fn file((): ()) -> crate::state::StateFile {
        crate::state::StateFile::EccHistory
    }
}
