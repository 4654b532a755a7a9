//! The line parser: one kernel-log line in, at most one NVIDIA record out.
//!
//! A line is first unwrapped (the format is recognised from the line
//! itself), which also decides whether the kernel wrote it; then the
//! message is matched against the NVIDIA driver's record shapes. The
//! function is pure and never panics on any bytes.

use super::stamp::{month_number, utc_to_unix, Stamp};
use crate::snapshot::normalize_pci;

/// One NVIDIA record of the kernel log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub stamp: Stamp,
    /// `/dev/kmsg` sequence number, when the line carries one.
    pub seq: Option<u64>,
    pub origin: Origin,
    pub payload: Payload,
}

/// Who could have written a line, as far as its format tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A format only the kernel's own log produces: a kmsg record of
    /// facility 0, `dmesg` output, `journalctl -k` output, the journal's
    /// kernel transport.
    Kernel,
    /// A syslog text line tagged `kernel:`: any user can write the same
    /// line with `logger -t kernel`, so the tag proves nothing.
    SyslogTag,
}

/// What an NVIDIA kernel line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., text`.
    Xid {
        code: u32,
        pci: Option<String>,
        pid: Option<u32>,
        process: Option<String>,
        message: String,
    },
    /// `nvidia-nvswitchN: SXid (PCI:0000:05:00.0): 12028, text`.
    Sxid {
        code: u32,
        pci: Option<String>,
        message: String,
    },
    /// `NVRM: The NVIDIA GPU 0000:b3:00.0`: first line of the multi-line
    /// lost-GPU message (and of other messages: alone it means nothing).
    GpuHeader { pci: String },
    /// A line saying a GPU has fallen off the bus, outside an Xid record;
    /// `pci` when the line names the GPU itself.
    FallenOff { pci: Option<String> },
}

/// Parse one line (without or with its trailing newline).
pub fn parse_line(line: &[u8]) -> Option<Record> {
    let (stamp, seq, body) = unwrap(trim_newline(line))?;
    let payload = parse_body(body)?;
    let origin = if is_syslog_line(line) {
        Origin::SyslogTag
    } else {
        Origin::Kernel
    };
    Some(Record {
        stamp,
        seq,
        origin,
        payload,
    })
}

/// Whether `unwrap` took the line as a syslog one (`<time> host kernel:`).
fn is_syslog_line(line: &[u8]) -> bool {
    match line.first() {
        Some(b'A'..=b'Z') => unwrap_syslog(line).is_some(),
        Some(b'0'..=b'9') => unwrap_kmsg(line).is_none() && unwrap_iso_syslog(line).is_some(),
        _ => false,
    }
}

fn trim_newline(mut line: &[u8]) -> &[u8] {
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
    kernel_tagged(stamp, &rest[sp + 1..])
}

/// `2026-11-29T14:00:01[.frac][Z|+01:00|+0100] host kernel: msg`.
fn unwrap_iso_syslog(line: &[u8]) -> Option<(Stamp, Option<u64>, &[u8])> {
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
    kernel_tagged(stamp, &line[sp + 1..])
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

/// Match the message against the NVIDIA record shapes. The message may
/// hold several lines (one kernel record whose text has newlines): as
/// real newlines (the journal, a record joined from `dmesg`'s indented
/// continuation lines), as `\x0a` (/dev/kmsg escapes bytes below 0x20)
/// or as `#012` (rsyslog's escape). Only the first line is the record's
/// own text; the rest can only complete a lost-GPU message.
pub(crate) fn parse_body(body: &[u8]) -> Option<Payload> {
    let (head, more) = first_line(body);
    if let Some(rest) = head.strip_prefix(b"NVRM: ") {
        if let Some(xid) = rest.strip_prefix(b"Xid ") {
            return parse_xid(xid);
        }
        if let Some(gpu) = rest.strip_prefix(b"The NVIDIA GPU ") {
            let token = gpu.split(|&b| b == b' ').next()?;
            let pci = normalize_pci(std::str::from_utf8(token).ok()?)?;
            // `The NVIDIA GPU <bdf> (PCI ID: ...) installed in this system
            // has fallen off the bus ...`, in two or three lines (or one).
            return Some(if mentions_fallen_off(gpu) || mentions_fallen_off(more) {
                Payload::FallenOff { pci: Some(pci) }
            } else {
                Payload::GpuHeader { pci }
            });
        }
        if mentions_fallen_off(rest) {
            return Some(Payload::FallenOff {
                pci: pci_after_gpu_word(rest),
            });
        }
        return None;
    }
    let rest = head.strip_prefix(b"nvidia-nvswitch")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = rest[digits..].strip_prefix(b": SXid ")?;
    let (pci, code, message) = address_and_code(rest)?;
    if message.starts_with("Data {") || message.starts_with("Data{") {
        // Register dump following the SXid's own line: same error.
        return None;
    }
    Some(Payload::Sxid { code, pci, message })
}

/// The escapes sources write for a newline inside one record.
const LINE_BREAKS: [&[u8]; 3] = [b"\n", b"\\x0a", b"#012"];

/// The first line of a message and the rest after the line break.
fn first_line(body: &[u8]) -> (&[u8], &[u8]) {
    let cut = LINE_BREAKS
        .iter()
        .filter_map(|sep| memchr::memmem::find(body, sep).map(|i| (i, sep.len())))
        .min();
    match cut {
        Some((i, len)) => (&body[..i], &body[i + len..]),
        None => (body, &[]),
    }
}

fn mentions_fallen_off(text: &[u8]) -> bool {
    memchr::memmem::find(text, b"fallen off the bus").is_some()
}

/// `NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.`, or the older
/// drivers' `NVRM: GPU at 0000:01:00.0 has fallen off the bus.`
fn pci_after_gpu_word(rest: &[u8]) -> Option<String> {
    let rest = rest.strip_prefix(b"GPU ")?;
    let rest = rest.strip_prefix(b"at ").unwrap_or(rest);
    let rest = rest.strip_prefix(b"PCI:").unwrap_or(rest);
    let token = rest.split(|&b| b == b' ').next()?;
    let token = token.strip_suffix(b":").unwrap_or(token);
    normalize_pci(std::str::from_utf8(token).ok()?)
}

/// `(PCI:0000:3b:00): 79, rest` -> (pci, code, rest).
fn address_and_code(s: &[u8]) -> Option<(Option<String>, u32, String)> {
    let s = s.strip_prefix(b"(")?;
    let close = memchr::memchr(b')', s)?;
    let addr = &s[..close];
    let addr = addr.strip_prefix(b"PCI:").unwrap_or(addr);
    let pci = std::str::from_utf8(addr).ok().and_then(normalize_pci);
    let rest = s[close + 1..].strip_prefix(b":")?;
    let rest = trim_spaces_start(rest);
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 6 {
        return None;
    }
    let code = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let rest = &rest[digits..];
    let rest = match rest.strip_prefix(b",") {
        Some(r) => r,
        None if rest.is_empty() => rest,
        None => return None,
    };
    let message = String::from_utf8_lossy(trim_spaces(rest)).into_owned();
    Some((pci, code, message))
}

fn parse_xid(s: &[u8]) -> Option<Payload> {
    let (pci, code, mut message) = address_and_code(s)?;
    let mut pid = None;
    let mut process = None;
    if let Some(v) = message.strip_prefix("pid=") {
        let (value, rest) = v.split_once(',').unwrap_or((v, ""));
        pid = value.trim().trim_matches('\'').parse().ok();
        message = rest.trim_start().to_string();
    }
    if let Some(v) = message.strip_prefix("name=") {
        let (value, rest) = v.split_once(", ").unwrap_or((v.trim_end_matches(','), ""));
        let value = value.trim().trim_matches('\'');
        if !value.is_empty() && value != "<unknown>" {
            process = Some(value.to_string());
        }
        message = rest.trim_start().to_string();
    }
    Some(Payload::Xid {
        code,
        pci,
        pid,
        process,
        message,
    })
}

fn take_number(s: &[u8]) -> Option<(u64, &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 || n > 19 {
        return None;
    }
    let v = std::str::from_utf8(&s[..n]).ok()?.parse().ok()?;
    Some((v, &s[n..]))
}

fn trim_spaces_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

fn trim_spaces(s: &[u8]) -> &[u8] {
    let mut s = trim_spaces_start(s);
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
