//! Timestamps of the kernel-log wrappers and their conversion to Unix time.
//!
//! The parser only recognises a stamp ([`Stamp`]); turning a local or
//! monotonic stamp into Unix time needs context (the boot time, the current
//! year, the local time zone) and happens in [`TimeContext::resolve`].

use serde::{Deserialize, Serialize};

/// The time a wrapper gave a record, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stamp {
    /// No time in the line.
    None,
    /// Microseconds since boot (`/dev/kmsg`, `dmesg`).
    Monotonic { us: u64 },
    /// Wall time with a known offset (ISO 8601 with zone).
    Unix { ms: i64 },
    /// Local wall time (`dmesg -T`, syslog); syslog omits the year.
    Local {
        year: Option<i32>,
        month: u8,
        day: u8,
        hour: u8,
        min: u8,
        sec: u8,
        ms: u16,
    },
}

/// What is known about the clock of the log being read.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeContext {
    /// Unix ms of the current boot, when the log is this boot's live ring.
    pub boot_ms: Option<i64>,
    /// Now, in Unix ms (infers the year syslog leaves out).
    pub now_ms: i64,
}

impl TimeContext {
    /// Unix ms of the stamp, when it can be known.
    pub fn resolve(&self, stamp: &Stamp) -> Option<i64> {
        match *stamp {
            Stamp::None => None,
            Stamp::Monotonic { us } => self
                .boot_ms
                .map(|b| b.saturating_add((us / 1000).min(i64::MAX as u64) as i64)),
            Stamp::Unix { ms } => Some(ms),
            Stamp::Local {
                year,
                month,
                day,
                hour,
                min,
                sec,
                ms,
            } => {
                let at = |y: i32| {
                    local_to_unix(y, month, day, hour, min, sec).map(|s| s * 1000 + i64::from(ms))
                };
                match year {
                    Some(y) => at(y),
                    None => {
                        // A syslog line is never from the future: a stamp
                        // more than a day ahead belongs to last year.
                        let this_year = year_of(self.now_ms)?;
                        let t = at(this_year)?;
                        if t > self.now_ms + 86_400_000 {
                            at(this_year - 1)
                        } else {
                            Some(t)
                        }
                    }
                }
            }
        }
    }
}

/// Whether a local civil time exists (mktime would move `Nov 31` to
/// `Dec 1`: a date that cannot be read is time unknown instead).
fn valid_civil(year: i32, month: u8, day: u8, hour: u8, min: u8, sec: u8) -> bool {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    (1..=12).contains(&month) && (1..=days).contains(&day) && hour < 24 && min < 60 && sec <= 60
}

/// Unix seconds of a UTC civil time (see [`crate::time::utc_to_unix`]).
pub(crate) fn utc_to_unix(y: i32, month: u8, day: u8, hour: u8, min: u8, sec: u8) -> Option<i64> {
    let (m, d) = (u32::from(month), u32::from(day));
    crate::time::utc_to_unix(i64::from(y), m, d, hour.into(), min.into(), sec.into())
}

/// Unix seconds of a local civil time, in the process's time zone.
fn local_to_unix(y: i32, month: u8, day: u8, hour: u8, min: u8, sec: u8) -> Option<i64> {
    if !valid_civil(y, month, day, hour, min, sec) || !(1900..=9999).contains(&y) {
        return None;
    }
    // SAFETY: `tm` is a plain C struct, zero is a valid value for all its
    // fields; mktime only reads and normalises it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = y - 1900;
    tm.tm_mon = i32::from(month) - 1;
    tm.tm_mday = i32::from(day);
    tm.tm_hour = i32::from(hour);
    tm.tm_min = i32::from(min);
    tm.tm_sec = i32::from(sec);
    tm.tm_isdst = -1;
    // SAFETY: `tm` is a valid, exclusively borrowed struct.
    let t = unsafe { libc::mktime(&mut tm) };
    if t == -1 {
        return None;
    }
    Some(t)
}

/// The (UTC) year of a Unix ms time.
fn year_of(unix_ms: i64) -> Option<i32> {
    let (year, _, _) = crate::time::civil_from_days(unix_ms.div_euclid(86_400_000));
    i32::try_from(year).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        assert_eq!(utc_to_unix(2026, 11, 29, 14, 0, 1), Some(1_795_960_801));
        assert_eq!(year_of(1_795_960_801_000), Some(2026));
        assert_eq!(year_of(0), Some(1970));
        assert_eq!(utc_to_unix(2026, 13, 1, 0, 0, 0), None);
    }

    #[test]
    fn syslog_year_is_inferred_backwards() {
        let now = utc_to_unix(2027, 1, 2, 0, 0, 0).unwrap() * 1000;
        let ctx = TimeContext {
            boot_ms: None,
            now_ms: now,
        };
        let dec = Stamp::Local {
            year: None,
            month: 12,
            day: 31,
            hour: 12,
            min: 0,
            sec: 0,
            ms: 0,
        };
        let t = ctx.resolve(&dec).unwrap();
        assert!(t < now && now - t < 3 * 86_400_000, "{t} vs {now}");
    }

    #[test]
    fn monotonic_needs_boot_time() {
        let s = Stamp::Monotonic { us: 5_000_000 };
        assert_eq!(TimeContext::default().resolve(&s), None);
        let ctx = TimeContext {
            boot_ms: Some(1000),
            now_ms: 0,
        };
        assert_eq!(ctx.resolve(&s), Some(6000));
    }
}
