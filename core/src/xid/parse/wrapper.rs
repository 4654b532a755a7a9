//! The wrappers sources put around a kernel record (`/dev/kmsg`, `dmesg`
//! and its options, syslog, `journalctl`): each is recognised from the
//! line itself, which also tells whether the kernel wrote the line.

use super::super::stamp::{month_number, utc_to_unix, Stamp};

/// Whether `unwrap` took the line as a syslog one (`<time> host kernel:`).
pub(super) fn is_syslog_line(line: &[u8]) -> bool {
    match line.first() {
        Some(b'A'..=b'Z') => unwrap_syslog(line).is_some(),
        Some(b'0'..=b'9') => unwrap_kmsg(line).is_none() && unwrap_iso_syslog(line).is_some(),
        _ => false,
    }
}

pub(super) fn trim_newline(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r'] = line {
        line = rest;
    }
    line
}

/// A kernel line's stamp, kmsg sequence number and message; `None` when
/// the line is not the kernel's (or is a kmsg continuation line).
pub(crate) fn unwrap(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    match line.first()? {
        b'0'..=b'9' => unwrap_kmsg(line).or_else(|| unwrap_iso_syslog(line)),
        b'<' => {
            // `dmesg -r`: `<prio>[stamp] msg`.
            let (prio, rest) = take_number(&line[1..])?;
            let rest = rest.strip_prefix(b">")?;
            if prio >> 3 != 0 {
                return None;
            }
            unwrap_bracket(rest).or(Some((Stamp::None, None, rest)))
        }
        b'[' => unwrap_bracket(line),
        b'A'..=b'Z' => unwrap_syslog(line).or_else(|| bare(line)),
        b'a'..=b'z' => unwrap_dmesg_x(line).or_else(|| bare(line)),
        _ => None,
    }
}

/// How many bytes of a kernel line come before its message (0 for a
/// bare message); `None` when the line is not the kernel's. The lines a
/// text source prints for one multi-line record share this prefix.
pub(crate) fn wrapper_len(line: &[u8]) -> Option<usize> {
    let (_, _, body) = unwrap(line)?;
    // Every wrapper's message is a tail of the line.
    Some(line.len() - body.len())
}

/// Whether a line starts with a syslog time stamp, whatever its tag: a
/// syslog file's record of its own.
pub(crate) fn has_syslog_header(line: &[u8]) -> bool {
    syslog_stamp(line).is_some() || iso_syslog_stamp(line).is_some()
}

/// Whether a source that wraps a line this way wraps every line of a
/// record (`dmesg` and its options print each line of a multi-line
/// record with the record's prefix; a kmsg line is a whole record). A
/// syslog header or a bare message is written once, before lines that
/// may carry anything.
pub(crate) fn wraps_every_line(line: &[u8]) -> bool {
    match line.first() {
        Some(b'[' | b'<') => true,
        Some(b'0'..=b'9') => unwrap_kmsg(line).is_some(),
        Some(b'a'..=b'z') => unwrap_dmesg_x(line).is_some(),
        _ => false,
    }
}

/// A message without wrapper (`journalctl -k -o cat`).
fn bare(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    (line.starts_with(b"NVRM: ") || line.starts_with(b"nvidia-nvswitch")).then_some((
        Stamp::None,
        None,
        line,
    ))
}

/// `/dev/kmsg`: `prio,seq,usec,flags[,more];message`; the facility is in
/// prio and must be 0 (kernel): writes from user space carry facility 1.
fn unwrap_kmsg(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    let (prio, rest) = take_number(line)?;
    let (seq, rest) = take_number(rest.strip_prefix(b",")?)?;
    let (usec, rest) = take_number(rest.strip_prefix(b",")?)?;
    let rest = rest.strip_prefix(b",")?;
    let semi = memchr::memchr(b';', rest)?;
    if rest[..semi].contains(&b' ') || prio >> 3 != 0 {
        return None;
    }
    Some((Stamp::Monotonic { us: usec }, Some(seq), &rest[semi + 1..]))
}

/// `[  123.456789] msg` or `[Sun Nov 29 14:00:01 2026] msg`.
fn unwrap_bracket(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    let close = memchr::memchr(b']', line)?;
    if line.first() != Some(&b'[') {
        return None;
    }
    let inner = &line[1..close];
    let body = line[close + 1..]
        .strip_prefix(b" ")
        .unwrap_or(&line[close + 1..]);
    let stamp = monotonic_stamp(inner).or_else(|| ctime_stamp(inner))?;
    Some((stamp, None, body))
}

fn monotonic_stamp(inner: &[u8]) -> Option<Stamp> {
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

/// `Sun Nov 29 14:00:01 2026` (`dmesg -T`, local time).
fn ctime_stamp(inner: &[u8]) -> Option<Stamp> {
    let mut words = inner.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let _weekday = words.next()?;
    let month = month_number(words.next()?)?;
    let (day, _) = take_number(words.next()?)?;
    let (hour, min, sec, ms) = clock(words.next()?)?;
    let (year, _) = take_number(words.next()?)?;
    Some(Stamp::Local {
        year: Some(i32::try_from(year).ok()?),
        month,
        day: u8::try_from(day).ok()?,
        hour,
        min,
        sec,
        ms,
    })
}

/// `HH:MM:SS[.frac]`.
fn clock(s: &[u8]) -> Option<(u8, u8, u8, u16)> {
    if s.len() < 8 || s[2] != b':' || s[5] != b':' {
        return None;
    }
    let two = |i: usize| -> Option<u8> {
        let (a, b) = (s[i], s[i + 1]);
        (a.is_ascii_digit() && b.is_ascii_digit()).then(|| (a - b'0') * 10 + (b - b'0'))
    };
    let mut ms = 0u16;
    if let Some(frac) = s[8..].strip_prefix(b".") {
        for i in 0..3 {
            let d = frac.get(i).copied().unwrap_or(b'0');
            if !d.is_ascii_digit() {
                return None;
            }
            ms = ms * 10 + u16::from(d - b'0');
        }
    } else if s.len() != 8 {
        return None;
    }
    Some((two(0)?, two(3)?, two(6)?, ms))
}

/// `Nov 29 14:00:01[.frac] host tag: msg`: only `kernel:` lines count.
fn unwrap_syslog(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    let (stamp, rest) = syslog_stamp(line)?;
    kernel_tagged(stamp, rest)
}

/// `Nov 29 14:00:01[.frac] ` -> the stamp and what follows it.
fn syslog_stamp(line: &[u8]) -> Option<(Stamp, &[u8])> {
    let month = month_number(line)?;
    let rest = trim_spaces_start(line.get(3..)?);
    let (day, rest) = take_number(rest)?;
    let rest = rest.strip_prefix(b" ")?;
    let sp = memchr::memchr(b' ', rest)?;
    let (hour, min, sec, ms) = clock(&rest[..sp])?;
    let stamp = Stamp::Local {
        year: None,
        month,
        day: u8::try_from(day).ok()?,
        hour,
        min,
        sec,
        ms,
    };
    Some((stamp, &rest[sp + 1..]))
}

/// `2026-11-29T14:00:01[.frac][Z|+01:00|+0100] host kernel: msg`.
fn unwrap_iso_syslog(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    let (stamp, rest) = iso_syslog_stamp(line)?;
    kernel_tagged(stamp, rest)
}

/// `2026-11-29T14:00:01[.frac][zone] ` -> the stamp and what follows it.
fn iso_syslog_stamp(line: &[u8]) -> Option<(Stamp, &[u8])> {
    let sp = memchr::memchr(b' ', line)?;
    let iso = &line[..sp];
    if iso.len() < 19 || iso[4] != b'-' || iso[7] != b'-' || iso[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let s = &iso[r];
        s.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec, _) = clock(&iso[11..19])?;
    let mut rest = &iso[19..];
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|b| b.is_ascii_digit()).count();
        for i in 0..3 {
            ms = ms * 10
                + frac
                    .get(i)
                    .filter(|_| i < n)
                    .map_or(0, |d| i64::from(d - b'0'));
        }
        rest = &frac[n..];
    }
    let local = |ms: i64| Stamp::Local {
        year: i32::try_from(year).ok(),
        month: month as u8,
        day: day as u8,
        hour,
        min,
        sec,
        ms: ms as u16,
    };
    let stamp = match rest {
        b"" => local(ms),
        b"Z" => Stamp::Unix {
            ms: utc_to_unix(year as i32, month as u8, day as u8, hour, min, sec)? * 1000 + ms,
        },
        [sign @ (b'+' | b'-'), tz @ ..] => {
            let tz: Vec<u8> = tz.iter().copied().filter(|&b| b != b':').collect();
            if tz.len() != 4 || !tz.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let off = i64::from(tz[0] - b'0') * 600
                + i64::from(tz[1] - b'0') * 60
                + i64::from(tz[2] - b'0') * 10
                + i64::from(tz[3] - b'0');
            let off = if *sign == b'-' { -off } else { off };
            let utc = utc_to_unix(year as i32, month as u8, day as u8, hour, min, sec)?;
            Stamp::Unix {
                ms: (utc - off * 60) * 1000 + ms,
            }
        }
        _ => return None,
    };
    Some((stamp, &line[sp + 1..]))
}

/// `host kernel: [  123.456] msg` after a syslog time stamp.
fn kernel_tagged(stamp: Stamp, rest: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    let sp = memchr::memchr(b' ', rest)?;
    let body = rest[sp + 1..].strip_prefix(b"kernel: ")?;
    // rsyslog may keep the kernel's own monotonic stamp; drop it.
    if body.first() == Some(&b'[') {
        if let Some(close) = memchr::memchr(b']', body) {
            if monotonic_stamp(&body[1..close]).is_some() {
                let b = &body[close + 1..];
                return Some((stamp, None, b.strip_prefix(b" ").unwrap_or(b)));
            }
        }
    }
    Some((stamp, None, body))
}

/// `dmesg -x`: `kern  :err   : [  123.456] msg`; only facility `kern`.
fn unwrap_dmesg_x(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
    let colon = memchr::memchr(b':', line)?;
    if trim_spaces(&line[..colon]) != b"kern" {
        return None;
    }
    let rest = &line[colon + 1..];
    let colon = memchr::memchr(b':', rest)?;
    let rest = trim_spaces_start(&rest[colon + 1..]);
    if rest.first() == Some(&b'[') {
        unwrap_bracket(rest)
    } else {
        Some((Stamp::None, None, rest))
    }
}

pub(super) fn take_number(s: &[u8]) -> Option<(u64, &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 || n > 19 {
        return None;
    }
    let v = std::str::from_utf8(&s[..n]).ok()?.parse().ok()?;
    Some((v, &s[n..]))
}

pub(super) fn trim_spaces_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

pub(super) fn trim_spaces(s: &[u8]) -> &[u8] {
    let mut s = trim_spaces_start(s);
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
