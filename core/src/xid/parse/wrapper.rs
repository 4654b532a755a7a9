//! The wrappers sources put around a kernel record (`/dev/kmsg`, `dmesg`
//! with any of its options, syslog, `journalctl`): each is recognised from
//! the line itself, which also tells whether the kernel wrote the line.
//! Time stamps are read leniently ([`super::stamps`]): one that cannot be
//! read makes the record's time unknown, never the record lost.

use super::super::stamp::Stamp;
use super::bytes::{take_number, trim_spaces, trim_spaces_start};
use super::stamps::{self, better, bracketed, is_caller_id, looks_iso, syslog_date};

/// Which kind of source wrote a line, as its wrapper tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrapper {
    /// A `/dev/kmsg` record of facility 0 (`prio,seq,usec,flags;`).
    Kmsg,
    /// `dmesg`, any options: `[stamp] `, `<prio>[stamp] `, `kern  :err   : `,
    /// an ISO stamp, several stamps, a caller id, or nothing but the
    /// decoded facility.
    Dmesg,
    /// A syslog header with the `kernel:` tag (any user can write one).
    Syslog,
    /// The message alone (`journalctl -o cat`, `dmesg -t`).
    Bare,
}

/// A kernel line taken apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unwrapped<'a> {
    pub stamp: Stamp,
    /// `/dev/kmsg` sequence number.
    pub seq: Option<u64>,
    /// The record's message: a tail of the line.
    pub body: &'a [u8],
    pub wrapper: Wrapper,
}

pub(super) fn trim_newline(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r'] = line {
        line = rest;
    }
    line
}

/// A kernel line's wrapper, stamp and message; `None` when the line is
/// not the kernel's (or is a continuation line).
pub(crate) fn unwrap(line: &[u8]) -> Option<Unwrapped<'_>> {
    match line.first()? {
        b'0'..=b'9' => {
            if let Some(kmsg) = kmsg_line(line) {
                return kmsg;
            }
            if looks_iso(line) {
                return iso_line(line);
            }
            if let Some(journal) = journal_line(line) {
                return journal;
            }
            unwrap_syslog(line)
        }
        b'<' => raw_line(line),
        b'[' => {
            let (stamp, body, parts) = dmesg_prefix(line);
            if parts == 0 {
                return None;
            }
            // `journalctl -o short-monotonic`: `[  813.444301] host kernel: `.
            if let Some(body) = kernel_tagged(body) {
                return Some(Unwrapped {
                    stamp,
                    seq: None,
                    body,
                    wrapper: Wrapper::Syslog,
                });
            }
            Some(Unwrapped {
                stamp,
                seq: None,
                body,
                wrapper: Wrapper::Dmesg,
            })
        }
        b' ' | b'\t' => None,
        _ => {
            if let Some(decoded) = decoded_line(line) {
                return decoded;
            }
            if let Some(journal) = journal_line(line) {
                return journal;
            }
            unwrap_syslog(line).or_else(|| bare(line))
        }
    }
}

/// How many bytes of a kernel line come before its message (0 for a
/// bare message); `None` when the line is not the kernel's. The lines a
/// text source prints for one multi-line record share this prefix.
pub(crate) fn wrapper_len(line: &[u8]) -> Option<usize> {
    let u = unwrap(line)?;
    // Every wrapper's message is a tail of the line.
    Some(line.len() - u.body.len())
}

/// Whether a line starts with a whole syslog header, whatever its tag
/// (`Nov 29 14:00:01 host tag: `, the month in any locale, or an ISO
/// stamp): a syslog file's record of its own. Whole: at least 17 bytes,
/// more than a process name's 14 after a newline, so that a name cannot
/// pass for the start of another record.
pub(crate) fn has_syslog_header(line: &[u8]) -> bool {
    let clock_shaped = |t: &[u8]| t.len() >= 8 && t[2] == b':' && t[5] == b':';
    let tagged = |rest: &[u8]| syslog_tagged(rest) || tag_first(rest);
    if let Some((_, rest)) = syslog_header(line) {
        let time = &line[..line.len() - rest.len() - 1];
        let time = &time[time.iter().rposition(|&b| b == b' ').map_or(0, |i| i + 1)..];
        return clock_shaped(time) && tagged(rest);
    }
    if let Some((_, rest)) = journal_stamp(line) {
        return tagged(rest);
    }
    if line.first() == Some(&b'[') {
        let (_, rest, parts) = dmesg_prefix(line);
        return parts > 0 && kernel_tagged(rest).is_some();
    }
    looks_iso(line) && memchr::memchr(b' ', line).is_some_and(|sp| tagged(&line[sp + 1..]))
}

/// Whether `rest` starts with a syslog tag and no host before it
/// (`journalctl --no-hostname`): `tag: ` or `tag[pid]: `.
fn tag_first(rest: &[u8]) -> bool {
    let word = &rest[..memchr::memchr(b' ', rest).unwrap_or(rest.len())];
    word.len() > 1 && word.ends_with(b":") && rest.len() > word.len() && rest[0] != b'['
}

/// Whether a source that wraps a line this way wraps every line of a
/// record (`dmesg` and its options print each line of a multi-line
/// record with the record's prefix when asked to; a kmsg line is a whole
/// record). A syslog header or a bare message is written once, before
/// lines that may carry anything.
pub(crate) fn wraps_every_line(line: &[u8]) -> bool {
    unwrap(line).is_some_and(|u| matches!(u.wrapper, Wrapper::Kmsg | Wrapper::Dmesg))
}

/// A message without wrapper (`journalctl -k -o cat`).
fn bare(line: &[u8]) -> Option<Unwrapped<'_>> {
    (line.starts_with(b"NVRM: ") || line.starts_with(b"nvidia-nvswitch")).then_some(Unwrapped {
        stamp: Stamp::None,
        seq: None,
        body: line,
        wrapper: Wrapper::Bare,
    })
}

/// `/dev/kmsg`: `prio,seq,usec,flags[,more];message`. `Some(None)`: a
/// kmsg line that is not the kernel's (the facility in `prio` is not 0:
/// user space writes with facility 1).
fn kmsg_line(line: &[u8]) -> Option<Option<Unwrapped<'_>>> {
    let (prio, rest) = take_number(line)?;
    let (seq, rest) = take_number(rest.strip_prefix(b",")?)?;
    let rest = rest.strip_prefix(b",")?;
    let comma = memchr::memchr(b',', rest)?;
    let (usec, rest) = (&rest[..comma], &rest[comma + 1..]);
    let semi = memchr::memchr(b';', rest)?;
    if rest[..semi].contains(&b' ') || usec.contains(&b' ') || usec.contains(&b';') {
        return None;
    }
    if prio >> 3 != 0 {
        return Some(None);
    }
    let stamp = match take_number(usec) {
        Some((us, b"")) => Stamp::Monotonic { us },
        _ => Stamp::None,
    };
    Some(Some(Unwrapped {
        stamp,
        seq: Some(seq),
        body: &rest[semi + 1..],
        wrapper: Wrapper::Kmsg,
    }))
}

/// `dmesg -r`: `<prio>[stamp] msg`; only facility 0 (kernel).
fn raw_line(line: &[u8]) -> Option<Unwrapped<'_>> {
    let (prio, rest) = take_number(&line[1..])?;
    let rest = rest.strip_prefix(b">")?;
    if prio >> 3 != 0 {
        return None;
    }
    let (stamp, body, _) = dmesg_prefix(rest);
    Some(Unwrapped {
        stamp,
        seq: None,
        body,
        wrapper: Wrapper::Dmesg,
    })
}

/// The facilities `dmesg --decode` prints (util-linux, `sys/syslog.h`).
const FACILITIES: [&[u8]; 24] = [
    b"kern",
    b"user",
    b"mail",
    b"daemon",
    b"auth",
    b"syslog",
    b"lpr",
    b"news",
    b"uucp",
    b"cron",
    b"authpriv",
    b"ftp",
    b"res0",
    b"res1",
    b"res2",
    b"res3",
    b"local0",
    b"local1",
    b"local2",
    b"local3",
    b"local4",
    b"local5",
    b"local6",
    b"local7",
];
/// The levels it prints.
const LEVELS: [&[u8]; 8] = [
    b"emerg", b"alert", b"crit", b"err", b"warn", b"notice", b"info", b"debug",
];

/// `dmesg -x` (`--decode`): `kern  :err   : ` then any of the time
/// formats (or none). `Some(None)`: a record of another facility than
/// `kern`, which user space wrote (`logger --kmsg`, `echo >/dev/kmsg`,
/// systemd): never the driver's, whatever it says.
fn decoded_line(line: &[u8]) -> Option<Option<Unwrapped<'_>>> {
    let colon = memchr::memchr(b':', line)?;
    let facility = trim_spaces(&line[..colon]);
    if !FACILITIES.contains(&facility) {
        return None;
    }
    let rest = &line[colon + 1..];
    let colon = memchr::memchr(b':', rest)?;
    if !LEVELS.contains(&trim_spaces(&rest[..colon])) {
        return None;
    }
    if facility != b"kern" {
        return Some(None);
    }
    let (stamp, body, _) = dmesg_prefix(trim_spaces_start(&rest[colon + 1..]));
    Some(Some(Unwrapped {
        stamp,
        seq: None,
        body,
        wrapper: Wrapper::Dmesg,
    }))
}

/// What `dmesg` prints before a message: any number of time stamps (one
/// per `--time-format`: brackets, or an ISO word), then maybe the caller
/// id. The best stamp, the message, and how many parts (stamps and
/// caller id) there were.
fn dmesg_prefix(mut rest: &[u8]) -> (Stamp, &[u8], usize) {
    let mut stamp = Stamp::None;
    let mut parts = 0;
    loop {
        if rest.first() == Some(&b'[') {
            let Some(close) = memchr::memchr(b']', rest) else {
                break;
            };
            let inner = &rest[1..close];
            let after = &rest[close + 1..];
            let after = after.strip_prefix(b" ").unwrap_or(after);
            if is_caller_id(inner) {
                rest = after;
                parts += 1;
                break;
            }
            let Some(s) = bracketed(inner) else { break };
            stamp = better(stamp, s);
            parts += 1;
            rest = after;
        } else if looks_iso(rest) {
            let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
            stamp = better(stamp, stamps::iso(&rest[..end]));
            parts += 1;
            rest = rest.get(end + 1..).unwrap_or_default();
        } else {
            break;
        }
    }
    (stamp, rest, parts)
}

/// journalctl's own stamps, which neither syslog nor `dmesg` print:
/// `-o short-unix` (`1795959001.200300 `) and `-o short-full`
/// (`Sun 2026-11-29 13:30:01 UTC `, the day in the locale's words): the
/// stamp and what follows it.
fn journal_stamp(line: &[u8]) -> Option<(Stamp, &[u8])> {
    let sp = memchr::memchr(b' ', line)?;
    let (word, rest) = (&line[..sp], &line[sp + 1..]);
    if let Some(stamp) = unix_seconds(word) {
        return Some((stamp, rest));
    }
    if word.is_empty()
        || word.len() > 16
        || word[0].is_ascii_digit()
        || word.iter().any(|&b| b < b' ' || b == b':' || b == b'[')
        || !looks_iso(rest)
    {
        return None;
    }
    let mut parts = rest.splitn(4, |&b| b == b' ');
    let (date, time, zone, after) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if date.len() != 10 || !time.first().is_some_and(u8::is_ascii_digit) || zone.is_empty() {
        return None;
    }
    let mut iso = [date, b"T", time].concat();
    if zone == b"UTC" || zone == b"GMT" {
        iso.push(b'Z');
    }
    Some((stamps::iso(&iso), after))
}

/// `-o short-unix`'s `seconds.micros`.
fn unix_seconds(word: &[u8]) -> Option<Stamp> {
    let dot = memchr::memchr(b'.', word)?;
    let (secs, frac) = (&word[..dot], &word[dot + 1..]);
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if secs.len() > 12 || frac.len() != 6 || !digits(secs) || !digits(frac) {
        return None;
    }
    let secs: i64 = std::str::from_utf8(secs).ok()?.parse().ok()?;
    let micros: i64 = std::str::from_utf8(frac).ok()?.parse().ok()?;
    Some(Stamp::Unix {
        ms: secs * 1000 + micros / 1000,
    })
}

/// A line with one of journalctl's own stamps; `Some(None)` when it is
/// not the kernel's.
fn journal_line(line: &[u8]) -> Option<Option<Unwrapped<'_>>> {
    let (stamp, rest) = journal_stamp(line)?;
    Some(kernel_tagged(rest).map(|body| Unwrapped {
        stamp,
        seq: None,
        body,
        wrapper: Wrapper::Syslog,
    }))
}

/// A line that starts with an ISO stamp: syslog's (`<stamp> host tag:
/// msg`, only the tag `kernel:` counts) or `dmesg --time-format iso`'s
/// (`<stamp> msg`).
fn iso_line(line: &[u8]) -> Option<Unwrapped<'_>> {
    let end = memchr::memchr(b' ', line)?;
    let rest = &line[end + 1..];
    if syslog_tagged(rest) || rest.starts_with(b"kernel: ") {
        return Some(Unwrapped {
            stamp: stamps::iso(&line[..end]),
            seq: None,
            body: kernel_tagged(rest)?,
            wrapper: Wrapper::Syslog,
        });
    }
    let (stamp, body, _) = dmesg_prefix(line);
    Some(Unwrapped {
        stamp,
        seq: None,
        body,
        wrapper: Wrapper::Dmesg,
    })
}

/// `Nov 29 14:00:01[.frac] host kernel: msg`, the month in the locale's
/// words: only `kernel:` lines count.
fn unwrap_syslog(line: &[u8]) -> Option<Unwrapped<'_>> {
    let (stamp, rest) = syslog_header(line)?;
    Some(Unwrapped {
        stamp,
        seq: None,
        body: kernel_tagged(rest)?,
        wrapper: Wrapper::Syslog,
    })
}

/// `<month> <day> <time> ` (syslog, `journalctl -o short`): the stamp
/// and what follows it. The month is a word of the locale (`Nov`, `kwi`,
/// `11月`), the day one or two digits, the time starts with a digit;
/// what of it cannot be read is time unknown.
fn syslog_header(line: &[u8]) -> Option<(Stamp, &[u8])> {
    let sp = memchr::memchr(b' ', line)?;
    let month = &line[..sp];
    if month.is_empty()
        || month.len() > 16
        || month.iter().any(|&b| b < b' ' || b == b':' || b == b'[')
    {
        return None;
    }
    let rest = trim_spaces_start(&line[sp + 1..]);
    let (day, rest) = take_number(rest)?;
    if day > 99 {
        return None;
    }
    let rest = rest.strip_prefix(b" ")?;
    if !rest.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let sp = memchr::memchr(b' ', rest)?;
    Some((syslog_date(month, day, &rest[..sp]), &rest[sp + 1..]))
}

/// Whether `rest` starts as a syslog line does after its time stamp,
/// `host tag: ` (the tag may hold `[pid]`). No NVIDIA record starts
/// that way (its second word never ends with `:`), nor more of `dmesg`'s
/// stamps (the host is no bracket and no ISO stamp).
fn syslog_tagged(rest: &[u8]) -> bool {
    let Some(sp) = memchr::memchr(b' ', rest) else {
        return false;
    };
    if rest.first() == Some(&b'[') || looks_iso(rest) {
        return false;
    }
    let after = &rest[sp + 1..];
    match memchr::memchr(b' ', after) {
        Some(end) => end > 1 && after[end - 1] == b':',
        None => false,
    }
}

/// `host kernel: [  123.456] msg` after a syslog time stamp (or
/// `kernel: msg`, `journalctl --no-hostname`): the message.
fn kernel_tagged(rest: &[u8]) -> Option<&[u8]> {
    let body = match rest.strip_prefix(b"kernel: ") {
        Some(body) => body,
        None => {
            let sp = memchr::memchr(b' ', rest)?;
            // A host name never ends with `:`, a tag does: `prog[1]:
            // kernel: ...` is what a program wrote.
            if rest[..sp].ends_with(b":") {
                return None;
            }
            rest[sp + 1..].strip_prefix(b"kernel: ")?
        }
    };
    // rsyslog may keep the kernel's own monotonic stamp; drop it.
    if body.first() == Some(&b'[') {
        if let Some(close) = memchr::memchr(b']', body) {
            if stamps::monotonic(&body[1..close]).is_some() {
                let b = &body[close + 1..];
                return Some(b.strip_prefix(b" ").unwrap_or(b));
            }
        }
    }
    Some(body)
}
