//! Time without a date crate: Unix milliseconds, proleptic Gregorian
//! civil dates (UTC), the ISO stamps gpu-health prints and the dates
//! `gpu-health report --since` takes. The one place that does calendar
//! arithmetic.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Milliseconds on `CLOCK_BOOTTIME`: time since this boot, suspend
/// included, that no one can set (unlike the wall clock). `None` if the
/// kernel does not answer.
pub fn boot_ms() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    Some(secs.saturating_mul(1000).saturating_add(nanos / 1_000_000))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (any year).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Whether a civil date and time exist (leap second 60 allowed; the day
/// is checked against the month).
fn valid_civil(y: i64, m: u32, d: u32, hour: u32, min: u32, sec: u32) -> bool {
    (1..=12).contains(&m)
        && (1..=31).contains(&d)
        && hour < 24
        && min < 60
        && sec <= 60
        && civil_from_days(days_from_civil(y, m, d)) == (y, m, d)
}

/// Unix seconds of a UTC civil time; `None` for a date that does not
/// exist (2025-02-30, hour 24).
pub fn utc_to_unix(y: i64, m: u32, d: u32, hour: u32, min: u32, sec: u32) -> Option<i64> {
    if !valid_civil(y, m, d, hour, min, sec) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    Some(days * 86_400 + i64::from(hour) * 3600 + i64::from(min) * 60 + i64::from(sec))
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_utc_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Now, as [`format_utc_ms`] writes it.
pub fn utc_now() -> String {
    format_utc_ms(unix_ms())
}

/// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS]` (UTC, `T` or a space, an
/// optional trailing `Z`), or a time relative to now as sacct takes it
/// (`now`, `now-1days`, `now-2hours`, `now+30minutes`, `now-90`), to
/// Unix milliseconds.
pub fn parse_since(s: &str) -> Result<u64, String> {
    parse_since_at(s, unix_ms())
}

/// [`parse_since`] with `now_ms` for now.
pub fn parse_since_at(s: &str, now_ms: u64) -> Result<u64, String> {
    let t = s.trim();
    if t.get(..3).is_some_and(|w| w.eq_ignore_ascii_case("now")) {
        return relative(&t[3..], now_ms).ok_or_else(|| {
            format!("{s:?} is not now[+|-COUNT[seconds|minutes|hours|days|weeks]] (e.g. now-1days)")
        });
    }
    parse_date(s)
}

/// The rest of `now[{+|-}COUNT[UNIT]]` (sacct's form: the unit defaults
/// to seconds, singular or plural), applied to `now_ms`.
fn relative(rest: &str, now_ms: u64) -> Option<u64> {
    if rest.is_empty() {
        return Some(now_ms);
    }
    let (minus, rest) = match (rest.strip_prefix('-'), rest.strip_prefix('+')) {
        (Some(r), _) => (true, r),
        (None, Some(r)) => (false, r),
        (None, None) => return None,
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let count: u64 = rest[..digits].parse().ok()?;
    let unit_s: u64 = match rest[digits..].to_ascii_lowercase().as_str() {
        "" | "second" | "seconds" => 1,
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3600,
        "day" | "days" => 86_400,
        "week" | "weeks" => 604_800,
        _ => return None,
    };
    let delta = count.checked_mul(unit_s)?.checked_mul(1000)?;
    if minus {
        Some(now_ms.saturating_sub(delta))
    } else {
        now_ms.checked_add(delta)
    }
}

fn parse_date(s: &str) -> Result<u64, String> {
    let bad = || {
        format!("{s:?} is not YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (UTC) or now-COUNTUNIT (now-1days)")
    };
    let t = s.trim().trim_end_matches('Z');
    let (date, time) = match t.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (t, None),
    };
    let num = |p: &str, digits: std::ops::RangeInclusive<usize>| -> Result<u32, String> {
        if !digits.contains(&p.len()) || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse().map_err(|_| bad())
    };
    let dp: Vec<&str> = date.split('-').collect();
    let [y, m, d] = dp[..] else { return Err(bad()) };
    let (y, m, d) = (num(y, 4..=4)?, num(m, 1..=2)?, num(d, 1..=2)?);
    if y < 1970 {
        return Err(bad());
    }
    let (h, mi, se) = match time {
        None => (0, 0, 0),
        Some(time) => {
            let tp: Vec<&str> = time.split(':').collect();
            match tp[..] {
                [h, mi] => (num(h, 1..=2)?, num(mi, 1..=2)?, 0),
                [h, mi, se] => (num(h, 1..=2)?, num(mi, 1..=2)?, num(se, 1..=2)?),
                _ => return Err(bad()),
            }
        }
    };
    let secs = utc_to_unix(i64::from(y), m, d, h, mi, se).ok_or_else(bad)?;
    u64::try_from(secs * 1000).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_as_sacct_takes_them() {
        let now = 1_795_910_400_000;
        let at = |s: &str| parse_since_at(s, now);
        assert_eq!(at("now"), Ok(now));
        assert_eq!(at("now-1days"), Ok(now - 86_400_000));
        assert_eq!(at("NOW-2hours"), Ok(now - 7_200_000));
        assert_eq!(at("now-30minutes"), Ok(now - 1_800_000));
        assert_eq!(at("now-90"), Ok(now - 90_000));
        assert_eq!(at("now-1week"), Ok(now - 604_800_000));
        assert_eq!(at("now+1hour"), Ok(now + 3_600_000));
        for bad in [
            "now-",
            "now-days",
            "now-1fortnights",
            "now*2",
            "now-1 days",
            "nowhere",
            "noé",
            "nowé",
            "now-1é",
        ] {
            let e = at(bad).unwrap_err();
            assert!(e.contains("now-1days"), "{bad}: {e}");
        }
        assert_eq!(at("2026-11-29"), Ok(now));
    }

    #[test]
    fn civil_round_trip_across_eras() {
        for days in [-800_000, -719_469, -1, 0, 1, 11_016, 20_513, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(-1, 12, 31), -719_529);
    }

    #[test]
    fn formats_utc() {
        assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc_ms(1_795_962_001_123), "2026-11-29T14:20:01.123Z");
        assert_eq!(format_utc_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn since_dates() {
        assert_eq!(parse_since("2025-01-02").unwrap(), 1_735_776_000_000);
        assert_eq!(
            parse_since("2025-01-02T03:04:05Z").unwrap(),
            1_735_776_000_000 + 11_045_000
        );
        assert_eq!(parse_since("1970-01-01"), Ok(0));
        assert_eq!(
            parse_since("2000-02-29 01:02:03Z"),
            Ok(951_782_400_000 + 3_723_000)
        );
        assert_eq!(
            parse_since("2025-01-02 03:04").unwrap(),
            1_735_776_000_000 + 11_040_000
        );
        for bad in [
            "tomorrow",
            "2025-02-30",
            "2025-13-01",
            "1969-12-31",
            "25-01-01",
            "2025-01-01T24:00",
            "2025-01-01T1:2:3:4",
            "2025-01-01T+1:00",
            "2025-01-01T1",
            "",
        ] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc_to_unix(2026, 11, 29, 14, 20, 1), Some(1_795_962_001));
        assert_eq!(utc_to_unix(2026, 2, 29, 0, 0, 0), None);
        assert_eq!(utc_to_unix(2024, 2, 29, 0, 0, 0), Some(1_709_164_800));
    }
}
