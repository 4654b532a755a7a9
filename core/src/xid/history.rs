//! Recent events per (code, device), for repeat rules ("act after N events
//! within a window"). Persisted with the cursor, so counts span jobs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Nobody needs more than this many events to decide; it bounds the file.
pub const MAX_PER_KEY: usize = 1000;
/// Keys (code x device) kept at most.
const MAX_KEYS: usize = 512;
/// Keys of events from lines users could have written start with this.
pub const USER_PREFIX: &str = "user-";

/// Event times (Unix ms) per key `xid-31@0000:18:00.0`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RepeatHistory(BTreeMap<String, Vec<u64>>);

impl RepeatHistory {
    /// Record `n` events at `at_ms` (a folded storm event stands for many).
    pub fn push(&mut self, key: &str, at_ms: u64, n: usize) {
        let times = self.0.entry(key.to_string()).or_default();
        times.extend(std::iter::repeat_n(at_ms, n.min(MAX_PER_KEY)));
        times.sort_unstable();
        if times.len() > MAX_PER_KEY {
            let excess = times.len() - MAX_PER_KEY;
            times.drain(..excess);
        }
    }

    /// Record one event at `at_ms` unless one already counted lies within
    /// `burst_ms` of it (the same burst); `n` events when `burst_ms` is 0.
    pub fn push_bursts(&mut self, key: &str, at_ms: u64, burst_ms: u64, n: usize) {
        if burst_ms == 0 {
            return self.push(key, at_ms, n);
        }
        let counted = self
            .0
            .get(key)
            .is_some_and(|t| t.iter().any(|&t| t.abs_diff(at_ms) < burst_ms));
        if !counted {
            self.push(key, at_ms, 1);
        }
    }

    /// Events of `key` within `window_ms` up to `at_ms`.
    pub fn count(&self, key: &str, at_ms: u64, window_ms: u64) -> usize {
        let from = at_ms.saturating_sub(window_ms);
        self.0.get(key).map_or(0, |t| {
            t.iter().filter(|&&t| t >= from && t <= at_ms).count()
        })
    }

    /// Forget events older than `max_window_ms` before `now_ms`.
    pub fn prune(&mut self, now_ms: u64, max_window_ms: u64) {
        let from = now_ms.saturating_sub(max_window_ms);
        self.0.retain(|_, times| {
            times.retain(|&t| t >= from);
            !times.is_empty()
        });
        while self.0.len() > MAX_KEYS {
            // Drop what users could have written first, then the key
            // whose newest event is oldest: a flood of forged keys never
            // pushes out the driver's own counts.
            let oldest = self
                .0
                .iter()
                .min_by_key(|(k, t)| (!k.starts_with(USER_PREFIX), t.last().copied().unwrap_or(0)))
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
        h.push("k", 0, 1);
        assert_eq!(h.count("k", 0, 60 * min), 1);
        h.push("k", 30 * min, 1);
        assert_eq!(h.count("k", 30 * min, 60 * min), 2);
        h.push("k", 100 * min, 1);
        assert_eq!(h.count("k", 100 * min, 60 * min), 1);
        h.push("other", 100 * min, 1);
        assert_eq!(h.count("other", 100 * min, 60 * min), 1);
        h.prune(100 * min, 60 * min);
        h.push("k", 101 * min, 1);
        assert_eq!(h.count("k", 101 * min, 60 * min), 2);
    }

    #[test]
    fn many_at_once_are_capped() {
        let mut h = RepeatHistory::default();
        h.push("k", 5, 10 * MAX_PER_KEY);
        h.push("k", 6, 3);
        assert_eq!(h.count("k", 6, 10), MAX_PER_KEY);
        assert_eq!(h.count("k", 6, 0), 3, "the newest are kept");
    }

    #[test]
    fn forged_keys_go_first_when_there_are_too_many() {
        let mut h = RepeatHistory::default();
        h.push("xid-31@0000:18:00.0", 1, 1);
        for i in 0..2 * MAX_KEYS {
            h.push(&format!("{USER_PREFIX}xid-31@{i}"), 10 + i as u64, 1);
        }
        h.prune(100_000, 100_000);
        assert_eq!(h.count("xid-31@0000:18:00.0", 1, 0), 1);
        assert_eq!(h.0.len(), MAX_KEYS);
    }
}
