//! The counts behind `gpu_health_xid_events_total`: every Xid and SXid
//! event of this boot counted once, by its identity in the kernel log.
//!
//! A run reads the log from the saved cursor to its end; the events of a
//! read are the records after where it started. Two runs that start
//! where the cursor stands read the same records first (the first run
//! did not move the cursor: it held back, or could not commit), so an
//! event is the `n`-th record of the read that started at a cursor: a
//! read from the same start counts only what lies past the records
//! counted before. A read from another cursor holds only records after
//! it, all new. A read from the look-back (the cursor lost) may hold
//! records counted before: those at or before the last position counted
//! are skipped, and at that position only as many as were counted there.
//!
//! Positions alone do not tell events apart: a syslog file stamps
//! records to the second, so two Xids of one second share one (counting
//! by position dropped the second, even one the node was drained for).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::xid::{EventKind, XidEvent};

/// Where in the kernel log an event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "by", content = "at")]
pub enum LogPosition {
    Sequence(u64),
    Monotonic(u64),
    Time(u64),
}

impl LogPosition {
    fn of(ev: &XidEvent) -> Option<LogPosition> {
        ev.seq
            .map(LogPosition::Sequence)
            .or(ev.monotonic_us.map(LogPosition::Monotonic))
            .or(ev.time_ms.map(LogPosition::Time))
    }

    fn same_kind(self, other: LogPosition) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }
}

/// Where a read started when it had no cursor (the look-back).
pub const FROM_LOOKBACK: u64 = 0;

/// Xid and SXid events of this boot, by kind and code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidCounts {
    pub boot_id: String,
    /// The latest position counted.
    pub counted_to: Option<LogPosition>,
    /// Events counted at exactly `counted_to`.
    #[serde(default)]
    pub at_last: u64,
    /// Where the latest read started (`Cursor::identity`, or
    /// [`FROM_LOOKBACK`]).
    #[serde(default)]
    pub read_from: Option<u64>,
    /// Events of the reads from `read_from` counted (the most any of them
    /// held: they all begin with the same records).
    #[serde(default)]
    pub read_total: u64,
    /// `xid-79`, `sxid-12028` -> events.
    pub by_code: BTreeMap<String, u64>,
}

/// Codes kept at most (one series each): a log full of made-up codes
/// must not grow the textfile without bound.
const MAX_CODES: usize = 256;

impl XidCounts {
    /// Add the events of a read that started at `from` (`boot_id`: this
    /// boot's; a new boot starts the counts over).
    pub fn add(&mut self, boot_id: &str, from: u64, events: &[XidEvent]) {
        if self.boot_id != boot_id {
            *self = XidCounts {
                boot_id: boot_id.to_string(),
                ..XidCounts::default()
            };
        }
        let same_start = self.read_from == Some(from);
        let mut skip = if same_start { self.read_total } else { 0 };
        // A look-back after reads from a cursor: what it holds up to the
        // last position counted was counted.
        let mut before = (from == FROM_LOOKBACK && !same_start)
            .then_some(self.counted_to)
            .flatten()
            .map(|last| Before {
                last,
                counted: self.at_last,
                seen: 0,
            });
        let mut total = 0u64;
        for ev in events {
            let n = ev.count.max(1);
            total += n;
            let new = n.saturating_sub(skip);
            skip = skip.saturating_sub(n);
            let at = LogPosition::of(ev);
            if new == 0 || before.as_mut().is_some_and(|b| b.counted_before(at)) {
                continue;
            }
            self.count(ev, new, at);
        }
        self.read_total = if same_start {
            self.read_total.max(total)
        } else {
            total
        };
        self.read_from = Some(from);
    }

    fn count(&mut self, ev: &XidEvent, n: u64, at: Option<LogPosition>) {
        let key = match ev.kind {
            EventKind::Xid => format!("xid-{}", ev.code),
            EventKind::Sxid => format!("sxid-{}", ev.code),
        };
        if self.by_code.len() < MAX_CODES || self.by_code.contains_key(&key) {
            *self.by_code.entry(key).or_insert(0) += n;
        }
        let Some(at) = at else { return };
        match self.counted_to {
            Some(last) if last.same_kind(at) && at == last => self.at_last += 1,
            Some(last) if last.same_kind(at) && at < last => {}
            _ => {
                self.counted_to = Some(at);
                self.at_last = 1;
            }
        }
    }
}

/// The last position counted before a look-back read, and how many of
/// the events there the read has passed.
struct Before {
    last: LogPosition,
    counted: u64,
    seen: u64,
}

impl Before {
    fn counted_before(&mut self, at: Option<LogPosition>) -> bool {
        let Some(at) = at.filter(|a| a.same_kind(self.last)) else {
            return false;
        };
        if at == self.last {
            self.seen += 1;
            return self.seen <= self.counted;
        }
        at < self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(code: u32, seq: u64) -> XidEvent {
        XidEvent {
            seq: Some(seq),
            ..XidEvent::new(EventKind::Xid, code, "")
        }
    }

    /// A syslog file's event: stamped to the second.
    fn at_second(code: u32, s: u64) -> XidEvent {
        XidEvent {
            time_ms: Some(s * 1000),
            ..XidEvent::new(EventKind::Xid, code, "")
        }
    }

    #[test]
    fn xids_count_once_per_boot() {
        let mut c = XidCounts::default();
        c.add("b1", 7, &[ev(79, 10), ev(48, 11)]);
        // Read again from the same cursor (it did not move): not counted
        // twice.
        c.add("b1", 7, &[ev(79, 10), ev(48, 11), ev(48, 12)]);
        assert_eq!(c.by_code["xid-79"], 1);
        assert_eq!(c.by_code["xid-48"], 2);
        // A storm folded into one event counts as many.
        let mut storm = ev(13, 20);
        storm.count = 5;
        c.add("b1", 8, &[storm]);
        assert_eq!(c.by_code["xid-13"], 5);
        // A new boot starts over.
        c.add("b2", 9, &[ev(31, 1)]);
        assert_eq!(c.by_code.len(), 1);
        assert_eq!((c.boot_id.as_str(), c.by_code["xid-31"]), ("b2", 1));
    }

    /// Issue 35, item 8: two Xids in one second of a syslog file, in one
    /// read or in two; the second was dropped, the node drained for it.
    #[test]
    fn events_of_one_second_each_count() {
        let mut c = XidCounts::default();
        c.add(
            "b1",
            FROM_LOOKBACK,
            &[at_second(13, 100), at_second(79, 100)],
        );
        assert_eq!(c.by_code.get("xid-79"), Some(&1), "{c:?}");
        c.add("b1", 5, &[at_second(79, 100)]);
        assert_eq!(c.by_code["xid-79"], 2, "{c:?}");
        assert_eq!(c.by_code["xid-13"], 1);
        // Read again from that cursor with one more: only that one.
        c.add("b1", 5, &[at_second(79, 100), at_second(79, 100)]);
        assert_eq!(c.by_code["xid-79"], 3, "{c:?}");
        // A shorter read from there (a run that started earlier) adds
        // nothing and forgets nothing.
        c.add("b1", 5, &[at_second(79, 100)]);
        c.add("b1", 5, &[at_second(79, 100), at_second(79, 100)]);
        assert_eq!(c.by_code["xid-79"], 3, "{c:?}");
    }

    /// The cursor lost: the look-back read again holds what was counted;
    /// only what lies past it counts.
    #[test]
    fn a_lookback_read_again_counts_only_what_is_new() {
        let mut c = XidCounts::default();
        c.add("b1", FROM_LOOKBACK, &[at_second(13, 100)]);
        c.add("b1", 5, &[at_second(79, 100)]);
        c.add(
            "b1",
            FROM_LOOKBACK,
            &[
                at_second(13, 100),
                at_second(79, 100),
                at_second(79, 100),
                at_second(48, 101),
            ],
        );
        assert_eq!(c.by_code["xid-13"], 1, "{c:?}");
        assert_eq!(c.by_code["xid-79"], 2, "{c:?}");
        assert_eq!(c.by_code["xid-48"], 1, "{c:?}");
        // kmsg sequence numbers, as the ring gives them.
        let mut k = XidCounts::default();
        k.add("b1", 3, &[ev(79, 10), ev(79, 11)]);
        k.add("b1", FROM_LOOKBACK, &[ev(79, 10), ev(79, 11), ev(79, 12)]);
        assert_eq!(k.by_code["xid-79"], 3, "{k:?}");
    }
}
