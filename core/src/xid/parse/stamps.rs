//! Reading the time stamps that wrappers put before a kernel record.
//!
//! A stamp only dates a record; it never decides whether the record
//! counts. So every reader here is lenient: a stamp in a recognisable
//! place that cannot be read (a month name of a locale not known here, a
//! clock out of range, a format a newer `dmesg` invents) is
//! [`Stamp::None`], "time unknown", and the record is read all the same.

use super::super::stamp::{utc_to_unix, Stamp};
use super::bytes::{take_number, trim_spaces};

/// `%b` month names, lower case without a trailing `.`, as glibc writes
/// them in the locales most seen on cluster nodes: C/English, German,
/// French, Spanish, Italian, Portuguese, Dutch, Polish, Russian. No name
/// stands for two months. (`N月`/`N월` are read by their number.)
const MONTH_NAMES: [&[&str]; 12] = [
    &["jan", "janv", "ene", "gen", "sty", "янв"],
    &["feb", "févr", "fev", "lut", "фев"],
    &["mar", "mär", "mars", "mrt", "мар"],
    &["apr", "avr", "abr", "kwi", "апр"],
    &["may", "mai", "mag", "mei", "maj", "мая", "май"],
    &["jun", "juin", "giu", "cze", "июн"],
    &["jul", "juil", "lug", "lip", "июл"],
    &["aug", "août", "ago", "sie", "авг"],
    &["sep", "sept", "set", "wrz", "сен"],
    &["oct", "okt", "ott", "out", "paź", "окт"],
    &["nov", "lis", "ноя"],
    &["dec", "dez", "déc", "dic", "gru", "дек"],
];

/// English month abbreviations: a longer English name starting with one
/// (`June`, `Sept`) is read too.
const ENGLISH: [&[u8; 3]; 12] = [
    b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov", b"dec",
];

/// The month (1-12) a month name of `%b` stands for, when it is one
/// known here. ASCII letters are compared without case.
pub(crate) fn month_number(word: &[u8]) -> Option<u8> {
    let word = word.strip_suffix(b".").unwrap_or(word);
    if let Some(m) = numbered_month(word) {
        return Some(m);
    }
    for (i, names) in MONTH_NAMES.iter().enumerate() {
        if names
            .iter()
            .any(|n| n.as_bytes().eq_ignore_ascii_case(word))
        {
            return Some(i as u8 + 1);
        }
    }
    if word.len() > 3 && word.iter().all(u8::is_ascii_alphabetic) {
        let head = &word[..3];
        return ENGLISH
            .iter()
            .position(|m| m.eq_ignore_ascii_case(head))
            .map(|i| i as u8 + 1);
    }
    None
}

/// `11月` (Chinese, Japanese) or `11월` (Korean).
fn numbered_month(word: &[u8]) -> Option<u8> {
    let digits = word.iter().take_while(|b| b.is_ascii_digit()).count();
    let unit = &word[digits..];
    if digits == 0 || digits > 2 || !(unit == "月".as_bytes() || unit == "월".as_bytes()) {
        return None;
    }
    let m = std::str::from_utf8(&word[..digits]).ok()?.parse().ok()?;
    (1..=12).contains(&m).then_some(m)
}

/// `HH:MM:SS[.frac]` (the fraction read to milliseconds).
pub(crate) fn clock(s: &[u8]) -> Option<(u8, u8, u8, u16)> {
    if s.len() < 8 || s[2] != b':' || s[5] != b':' {
        return None;
    }
    let mut ms = 0u16;
    match s[8..].split_first() {
        None => {}
        Some((b'.' | b',', frac)) => {
            for i in 0..3 {
                let d = frac.get(i).copied().unwrap_or(b'0');
                if !d.is_ascii_digit() {
                    return None;
                }
                ms = ms * 10 + u16::from(d - b'0');
            }
            if !frac.iter().all(u8::is_ascii_digit) {
                return None;
            }
        }
        Some(_) => return None,
    }
    Some((two(s, 0)?, two(s, 3)?, two(s, 6)?, ms))
}

/// The two-digit number at `s[i..i + 2]`.
fn two(s: &[u8], i: usize) -> Option<u8> {
    match s.get(i..i + 2)? {
        [a, b] if a.is_ascii_digit() && b.is_ascii_digit() => Some((a - b'0') * 10 + (b - b'0')),
        _ => None,
    }
}

/// `123.456789`: seconds since boot (dmesg, syslog's copy of it).
pub(crate) fn monotonic(inner: &[u8]) -> Option<Stamp> {
    let inner = trim_spaces(inner);
    let (secs, rest) = take_number(inner)?;
    let frac = rest.strip_prefix(b".")?;
    if frac.is_empty() || frac.len() > 9 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut us = 0u64;
    for i in 0..6 {
        us = us * 10 + frac.get(i).map_or(0, |d| u64::from(d - b'0'));
    }
    Some(Stamp::Monotonic {
        us: secs.checked_mul(1_000_000)?.checked_add(us)?,
    })
}

/// A syslog date: month name, day, `HH:MM:SS[.frac]`, no year. What
/// cannot be read is time unknown.
pub(crate) fn syslog_date(month: &[u8], day: u64, time: &[u8]) -> Stamp {
    match (month_number(month), u8::try_from(day), clock(time)) {
        (Some(month), Ok(day), Some((hour, min, sec, ms))) => Stamp::Local {
            year: None,
            month,
            day,
            hour,
            min,
            sec,
            ms,
        },
        _ => Stamp::None,
    }
}

/// The inside of a `dmesg` bracket, `[...]`, as a stamp, in any of
/// util-linux's time formats: `raw` (`  123.456789`), `ctime`
/// (`Tue Jan 21 04:41:44 2025`, in the locale's words), `reltime`
/// (`Jan21 04:41`, then `  +0.000123`), `delta` (`<    0.000123>`, also
/// after a `raw` or `ctime` stamp). A relative time is time unknown, as
/// is any other bracket that holds a number (a format not known here);
/// `None` for a bracket that is no time stamp at all.
pub(crate) fn bracketed(inner: &[u8]) -> Option<Stamp> {
    let mut inner = trim_spaces(inner);
    // A delta, alone or after the stamp.
    if inner.ends_with(b">") {
        if let Some(open) = memchr::memrchr(b'<', inner) {
            inner = trim_spaces(&inner[..open]);
        }
    }
    if inner.is_empty() || inner.starts_with(b"+") {
        return Some(Stamp::None);
    }
    if let Some(stamp) = monotonic(inner)
        .or_else(|| ctime(inner))
        .or_else(|| short_ctime(inner))
    {
        return Some(stamp);
    }
    looks_like_time(inner).then_some(Stamp::None)
}

/// Text that may be a time stamp of a form not read here: short, with a
/// digit, made of what dates and times are written with (letters of any
/// script, digits, blanks, `:.,+-/`), unlike the tags kernel messages
/// start with (`[drm:intel_dp_detect]`).
fn looks_like_time(s: &[u8]) -> bool {
    s.len() <= 64
        && s.iter().any(u8::is_ascii_digit)
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b >= 0x80 || b" :.,+-/".contains(&b))
}

/// `dmesg`'s caller id, `[    T123]` or `[  C1]` (kernels with
/// CONFIG_PRINTK_CALLER): the thread or CPU that logged the record.
pub(crate) fn is_caller_id(inner: &[u8]) -> bool {
    match trim_spaces(inner) {
        [b'T' | b'C', digits @ ..] => {
            !digits.is_empty() && digits.len() <= 10 && digits.iter().all(u8::is_ascii_digit)
        }
        _ => false,
    }
}

/// `Tue Jan 21 04:41:44 2025` (`%a %b %e %H:%M:%S %Y`); the locale may
/// put the day before the month (`Di 21. Jan 04:41:44 2025`).
fn ctime(inner: &[u8]) -> Option<Stamp> {
    let mut words = inner.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let _weekday = words.next()?;
    let (a, b) = (words.next()?, words.next()?);
    let day_of = |w: &[u8]| -> Option<u8> {
        let (d, rest) = take_number(w)?;
        (rest.is_empty() || rest == b".")
            .then_some(())
            .and(u8::try_from(d).ok())
    };
    let (month, day) = match (month_number(a), day_of(b)) {
        (Some(m), Some(d)) => (m, d),
        _ => (month_number(b)?, day_of(a)?),
    };
    let (hour, min, sec, ms) = clock(words.next()?)?;
    let (year, rest) = take_number(words.next()?)?;
    if !rest.is_empty() || words.next().is_some() {
        return None;
    }
    Some(Stamp::Local {
        year: Some(i32::try_from(year).ok()?),
        month,
        day,
        hour,
        min,
        sec,
        ms,
    })
}

/// `reltime`'s first stamp of a minute, `Jan21 04:41` or `Jan 1 04:41`
/// (`%b%e %H:%M`): read to the minute, the year left to the reader.
fn short_ctime(inner: &[u8]) -> Option<Stamp> {
    let space = memchr::memrchr(b' ', inner)?;
    let (date, time) = (trim_spaces(&inner[..space]), &inner[space + 1..]);
    let digits = date.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let (month, day) = date.split_at(date.len() - digits);
    let (day, _) = take_number(day)?;
    if time.len() != 5 || time[2] != b':' {
        return None;
    }
    Some(Stamp::Local {
        year: None,
        month: month_number(trim_spaces(month))?,
        day: u8::try_from(day).ok()?,
        hour: two(time, 0)?,
        min: two(time, 3)?,
        sec: 0,
        ms: 0,
    })
}

/// Whether a word starts like an ISO 8601 date, `2025-01-21`.
pub(crate) fn looks_iso(word: &[u8]) -> bool {
    word.len() >= 10
        && word[..4].iter().all(u8::is_ascii_digit)
        && word[4] == b'-'
        && word[5..7].iter().all(u8::is_ascii_digit)
        && word[7] == b'-'
        && word[8..10].iter().all(u8::is_ascii_digit)
}

/// An ISO 8601 stamp (a word [`looks_iso`] accepts):
/// `2025-01-21T04:41:44[.,frac][Z|+00:00|+0000|+00]`, the fraction
/// after `.` (syslog, journalctl) or `,` (`dmesg --time-format iso`).
/// Without a zone it is local time; what cannot be read is time unknown.
pub(crate) fn iso(word: &[u8]) -> Stamp {
    iso_parts(word).unwrap_or(Stamp::None)
}

fn iso_parts(word: &[u8]) -> Option<Stamp> {
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let s = word.get(r)?;
        s.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if word.get(10) != Some(&b'T') {
        return None;
    }
    let time = word.get(11..)?;
    let zone_at = time
        .iter()
        .position(|&b| matches!(b, b'Z' | b'+' | b'-'))
        .unwrap_or(time.len());
    let (hour, min, sec, ms) = clock(&time[..zone_at])?;
    let (year, month, day) = (year as i32, month as u8, day as u8);
    let ms = i64::from(ms);
    let offset_min = match &time[zone_at..] {
        b"" => {
            return Some(Stamp::Local {
                year: Some(year),
                month,
                day,
                hour,
                min,
                sec,
                ms: ms as u16,
            })
        }
        b"Z" => 0,
        [sign @ (b'+' | b'-'), tz @ ..] => {
            let digits: Vec<u8> = tz.iter().copied().filter(|&b| b != b':').collect();
            if !matches!(digits.len(), 2 | 4) || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let d = |i: usize| i64::from(digits.get(i).map_or(0, |d| d - b'0'));
            let off = (d(0) * 10 + d(1)) * 60 + d(2) * 10 + d(3);
            if *sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    let utc = utc_to_unix(year, month, day, hour, min, sec)?;
    Some(Stamp::Unix {
        ms: (utc - offset_min * 60) * 1000 + ms,
    })
}

/// Of two stamps of one record (`dmesg` prints several when asked for
/// several time formats), the one that says most: a wall time with its
/// zone, then one with its year, then the time since boot, then a wall
/// time without year.
pub(crate) fn better(a: Stamp, b: Stamp) -> Stamp {
    let rank = |s: &Stamp| match s {
        Stamp::Unix { .. } => 4,
        Stamp::Local { year: Some(_), .. } => 3,
        Stamp::Monotonic { .. } => 2,
        Stamp::Local { year: None, .. } => 1,
        Stamp::None => 0,
    };
    if rank(&b) > rank(&a) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn month_names_of_several_locales() {
        for (word, month) in [
            ("Nov", 11),
            ("nov", 11),
            ("November", 11),
            ("Sept", 9),
            ("kwi", 4),
            ("Mär", 3),
            ("févr.", 2),
            ("déc.", 12),
            ("paź", 10),
            ("апр", 4),
            ("мая", 5),
            ("11月", 11),
            ("4월", 4),
            ("Okt", 10),
        ] {
            assert_eq!(month_number(word.as_bytes()), Some(month), "{word}");
        }
        for word in ["xyz", "Απρ", "13月", "", "no", "Ja"] {
            assert_eq!(month_number(word.as_bytes()), None, "{word}");
        }
    }

    #[test]
    fn every_dmesg_bracket_form() {
        let local = |year, month, day, hour, min, sec| Stamp::Local {
            year,
            month,
            day,
            hour,
            min,
            sec,
            ms: 0,
        };
        for (inner, want) in [
            ("  123.456789", Some(Stamp::Monotonic { us: 123_456_789 })),
            (
                "  123.456789 <    0.000123>",
                Some(Stamp::Monotonic { us: 123_456_789 }),
            ),
            ("<    0.000123>", Some(Stamp::None)),
            (
                "Tue Jan 21 04:41:44 2025",
                Some(local(Some(2025), 1, 21, 4, 41, 44)),
            ),
            (
                "Tue Jan  1 04:41:44 2025 <    2.000000>",
                Some(local(Some(2025), 1, 1, 4, 41, 44)),
            ),
            (
                "wto sty 21 04:41:44 2025",
                Some(local(Some(2025), 1, 21, 4, 41, 44)),
            ),
            (
                "Di 21. Jan 04:41:44 2025",
                Some(local(Some(2025), 1, 21, 4, 41, 44)),
            ),
            ("Jan21 04:41", Some(local(None, 1, 21, 4, 41, 0))),
            ("Jan 1 04:41", Some(local(None, 1, 1, 4, 41, 0))),
            ("  +0.000123", Some(Stamp::None)),
            (" +12.000123", Some(Stamp::None)),
            ("Τρι Ιαν 21 04:41:44 2025", Some(Stamp::None)),
            ("99999999999999999999.5", Some(Stamp::None)),
            ("drm", None),
            ("drm:intel_dp_detect 1", None),
            ("", Some(Stamp::None)),
        ] {
            assert_eq!(bracketed(inner.as_bytes()), want, "{inner:?}");
        }
        assert!(is_caller_id(b"    T1234"));
        assert!(is_caller_id(b"C3"));
        assert!(!is_caller_id(b"  123.4"));
    }

    #[test]
    fn iso_stamps_of_syslog_journalctl_and_dmesg() {
        let t = utc_to_unix(2025, 1, 21, 4, 41, 44).unwrap() * 1000;
        assert_eq!(
            iso(b"2025-01-21T04:41:44,283302+00:00"),
            Stamp::Unix { ms: t + 283 }
        );
        assert_eq!(
            iso(b"2025-01-21T05:41:44.5+0100"),
            Stamp::Unix { ms: t + 500 }
        );
        assert_eq!(iso(b"2025-01-21T04:41:44Z"), Stamp::Unix { ms: t });
        assert_eq!(iso(b"2025-01-21T06:41:44+02"), Stamp::Unix { ms: t });
        assert!(matches!(
            iso(b"2025-01-21T04:41:44"),
            Stamp::Local {
                year: Some(2025),
                ..
            }
        ));
        for odd in [
            "2025-13-45T04:41:44+00:00",
            "2025-01-21T4:41:44+00:00",
            "2025-01-21 04:41:44",
            "2025-01-21T04:41:44+1",
            "2025-01-21T04:41:44.x+00:00",
        ] {
            assert_eq!(iso(odd.as_bytes()), Stamp::None, "{odd}");
        }
    }
}
