//! What one read of a kernel log found: the events, where it stopped,
//! and what the caller should hear about the log itself. Shared by the
//! file and /dev/kmsg readers.

use std::collections::HashSet;

use super::cursor::Cursor;
use super::event::XidEvent;

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogRead {
    /// In log order, GPU index and UUID filled from the snapshot.
    pub events: Vec<XidEvent>,
    /// Where the read stopped; `None` only when nothing could be read.
    pub cursor: Option<Cursor>,
    /// Things the caller should log (wrapped ring, rotation, reboot...).
    pub notes: Vec<String>,
    /// Records lost to the ring wrapping before they were read.
    pub lost_records: u64,
    /// The cursor could not be continued (reboot, rotation, truncation,
    /// cursor ahead of the ring): the read started from the beginning.
    pub restarted: bool,
    /// Monotonic stamp of the last line of a file, when it has one (dates
    /// monotonic-only records of a file relative to its end).
    pub last_monotonic_us: Option<u64>,
    /// Events dropped in an Xid storm: past [`MAX_EVENTS`], only the
    /// latest event of each (kind, code, device) is kept.
    pub folded_events: u64,
}

/// Bound on the events one read holds (an application can log thousands
/// of Xid 13 a second; the prolog must not run out of memory).
pub const MAX_EVENTS: usize = 50_000;

impl LogRead {
    pub(crate) fn empty() -> Self {
        LogRead::default()
    }

    pub(crate) fn push(&mut self, ev: XidEvent) {
        if self.events.len() >= MAX_EVENTS {
            let mut seen = HashSet::new();
            let before = self.events.len();
            let mut kept: Vec<XidEvent> = std::mem::take(&mut self.events)
                .into_iter()
                .rev()
                .filter(|e| seen.insert((e.kind, e.code, e.pci.clone(), e.fallen_off_bus)))
                .collect();
            kept.reverse();
            self.events = kept;
            if self.events.len() >= MAX_EVENTS {
                // Pathological variety: keep the newest half.
                self.events.drain(..MAX_EVENTS / 2);
            }
            self.folded_events += (before - self.events.len()) as u64;
        }
        self.events.push(ev);
    }

    pub(crate) fn restart(&mut self, note: String) {
        log::info!("{note}");
        self.restarted = true;
        self.notes.push(note);
    }
}
