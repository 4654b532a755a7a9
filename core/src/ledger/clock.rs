//! The ledger's clock: how long ago a stamp was, on a clock no one sets.
//!
//! A stamp keeps the wall time (what people read, and all there is across
//! a boot) and, with it, where it was taken on `CLOCK_BOOTTIME` and in
//! which boot. Within one boot the time since a stamp is the boot clock's
//! difference: a wall clock stepped back or forward (chrony right after a
//! boot, an admin's `date -s`) neither ends a quiet time early nor starts
//! it over. Across boots only the wall clock is left, never counted
//! negative.

use serde::{Deserialize, Serialize};

/// Where a stamp was taken on `CLOCK_BOOTTIME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootStamp {
    /// The boot (`xid.boot_id_path`) the boot clock belongs to.
    pub boot_id: String,
    /// `CLOCK_BOOTTIME` in ms.
    pub ms: u64,
}

/// The run's clock, read once at its start; the ledger never reads one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock<'a> {
    /// Unix ms (the wall clock: anyone may set it).
    pub wall_ms: u64,
    /// `CLOCK_BOOTTIME` in ms, if it could be read.
    pub boot_ms: Option<u64>,
    /// This boot's id; empty if it could not be read (then the boot
    /// clock is not used: another boot's could not be told apart).
    pub boot_id: &'a str,
}

impl Clock<'static> {
    /// A clock with the wall time only (no boot clock known).
    pub fn wall(wall_ms: u64) -> Clock<'static> {
        Clock {
            wall_ms,
            boot_ms: None,
            boot_id: "",
        }
    }
}

/// Unix ms alone: a clock with no boot clock known (tests, and runs
/// that could not read the boot clock count on the wall clock).
impl From<u64> for Clock<'static> {
    fn from(wall_ms: u64) -> Clock<'static> {
        Clock::wall(wall_ms)
    }
}

impl Clock<'_> {
    /// Where now is on the boot clock, to keep beside a wall stamp.
    pub fn stamp(&self) -> Option<BootStamp> {
        let ms = self.boot_ms.filter(|_| !self.boot_id.is_empty())?;
        Some(BootStamp {
            boot_id: self.boot_id.to_string(),
            ms,
        })
    }

    /// Now on the boot clock, if `s` was taken in this boot.
    fn boot_now(&self, s: &BootStamp) -> Option<u64> {
        let same = !self.boot_id.is_empty() && s.boot_id == self.boot_id;
        self.boot_ms.filter(|_| same)
    }

    /// Ms since the stamp `wall_ms` (with `boot` where it was taken on
    /// the boot clock): the boot clock's difference within one boot, the
    /// wall clock's across boots; never negative.
    pub fn since(&self, wall_ms: u64, boot: Option<&BootStamp>) -> u64 {
        match boot.and_then(|s| Some((s, self.boot_now(s)?))) {
            Some((s, now)) => now.saturating_sub(s.ms),
            None => self.wall_ms.saturating_sub(wall_ms),
        }
    }

    /// A boot stamp of this boot ahead of the boot clock (only a damaged
    /// file has one) becomes now; the ms it was ahead.
    pub fn clamp(&self, boot: &mut Option<BootStamp>) -> u64 {
        let Some(s) = boot.as_mut() else { return 0 };
        let Some(now) = self.boot_now(s) else {
            return 0;
        };
        let ahead = s.ms.saturating_sub(now);
        s.ms = s.ms.min(now);
        ahead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(wall_ms: u64, boot_ms: u64, boot_id: &str) -> Clock<'_> {
        Clock {
            wall_ms,
            boot_ms: Some(boot_ms),
            boot_id,
        }
    }

    #[test]
    fn within_a_boot_the_boot_clock_counts() {
        let then = at(10_000_000, 1_000, "a");
        let s = then.stamp();
        // The wall clock went back 2 h; a minute passed.
        assert_eq!(
            at(2_800_000, 61_000, "a").since(10_000_000, s.as_ref()),
            60_000
        );
        // The wall clock went forward 2 h; a minute passed.
        assert_eq!(
            at(17_260_000, 61_000, "a").since(10_000_000, s.as_ref()),
            60_000
        );
    }

    #[test]
    fn across_boots_the_wall_clock_counts_never_negative() {
        let s = at(10_000_000, 1_000, "a").stamp();
        assert_eq!(at(10_060_000, 5, "b").since(10_000_000, s.as_ref()), 60_000);
        assert_eq!(at(9_000_000, 5, "b").since(10_000_000, s.as_ref()), 0);
        // No boot id, no boot clock: wall time.
        let blind = at(10_060_000, 61_000, "");
        assert_eq!(blind.stamp(), None);
        assert_eq!(blind.since(10_000_000, s.as_ref()), 60_000);
        assert_eq!(
            Clock::wall(10_060_000).since(10_000_000, s.as_ref()),
            60_000
        );
    }

    #[test]
    fn a_boot_stamp_ahead_of_its_boot_clock_becomes_now() {
        let mut s = at(0, 90_000, "a").stamp();
        assert_eq!(at(0, 60_000, "b").clamp(&mut s), 0);
        assert_eq!(at(0, 60_000, "a").clamp(&mut s), 30_000);
        assert_eq!(s.map(|s| s.ms), Some(60_000));
    }
}
