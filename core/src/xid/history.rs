//! Recent events per (code, device), for repeat rules ("act after N events
//! within a window"). Persisted with the cursor, so counts span jobs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Nobody needs more than this many events to decide; it bounds the file.
const MAX_PER_KEY: usize = 1000;
/// Keys (code x device) kept at most.
const MAX_KEYS: usize = 512;

/// Event times (Unix ms) per key `xid-31@0000:18:00.0`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RepeatHistory(BTreeMap<String, Vec<u64>>);

impl RepeatHistory {
    /// Record an event at `at_ms` and return how many events of `key`
    /// fall within `window_ms` before it (itself included).
    pub fn record(&mut self, key: &str, at_ms: u64, window_ms: u64) -> usize {
        let times = self.0.entry(key.to_string()).or_default();
        times.push(at_ms);
        times.sort_unstable();
        if times.len() > MAX_PER_KEY {
            let excess = times.len() - MAX_PER_KEY;
            times.drain(..excess);
        }
        let from = at_ms.saturating_sub(window_ms);
        times.iter().filter(|&&t| t >= from && t <= at_ms).count()
    }

    /// Forget events older than `max_window_ms` before `now_ms`.
    pub fn prune(&mut self, now_ms: u64, max_window_ms: u64) {
        let from = now_ms.saturating_sub(max_window_ms);
        self.0.retain(|_, times| {
            times.retain(|&t| t >= from);
            !times.is_empty()
        });
        while self.0.len() > MAX_KEYS {
            // Drop the key whose newest event is oldest.
            let oldest = self
                .0
                .iter()
                .min_by_key(|(_, t)| t.last().copied().unwrap_or(0))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.0.remove(&k);
                }
                None => break,
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_within_window_only() {
        let mut h = RepeatHistory::default();
        let min = 60_000;
        assert_eq!(h.record("k", 0, 60 * min), 1);
        assert_eq!(h.record("k", 30 * min, 60 * min), 2);
        assert_eq!(h.record("k", 100 * min, 60 * min), 1);
        assert_eq!(h.record("other", 100 * min, 60 * min), 1);
        h.prune(100 * min, 60 * min);
        assert_eq!(h.record("k", 101 * min, 60 * min), 2);
    }
}
