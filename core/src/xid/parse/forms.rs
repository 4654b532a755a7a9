//! The NVIDIA driver's record forms. Only the driver decides: a record
//! counts when its message starts with the driver's fixed wording and
//! every variable part has the driver's own format (a PCI address, a
//! number). Text the driver copies from user space is data and never a
//! pattern: a process name (`name=`, up to 15 bytes of the process's
//! comm, any byte but NUL) never becomes part of an Xid's message, and a
//! record that quotes a client's version string (the API-mismatch
//! message) is never a fault record, whatever its lines say.

use std::sync::LazyLock;

use memchr::memmem;

use super::bytes::{trim_spaces, trim_spaces_start};
use super::Payload;
use crate::snapshot::normalize_pci;

/// The escapes sources write for a newline inside one record: real
/// newlines (the journal, a record joined from `dmesg`'s indented lines),
/// `\x0a` (/dev/kmsg escapes bytes below 0x20), `#012` (rsyslog).
const LINE_BREAKS: [&[u8]; 3] = [b"\n", b"\\x0a", b"#012"];

/// The longest process name the driver prints: Linux's comm holds 16
/// bytes with its NUL.
const MAX_PROCESS_NAME: usize = 15;

/// The start of the driver's API-mismatch message, old and new wording
/// (`NVRM: API mismatch: the client has the version <client string>,
/// but` / `NVRM: API mismatch: the client '<comm>' (pid N)` then `NVRM:
/// has the version <client string>, but ...`). The client string is up to
/// 63 bytes of the caller's choice, newlines included.
const USER_TEXT_RECORD: &[u8] = b"NVRM: API mismatch: the client ";

/// The last two lines of the API-mismatch message (old, new wording).
/// Each pair is longer than a client string, so a user cannot write it
/// to end the message early.
const USER_TEXT_ENDS: [(&[u8], &[u8]); 2] = [
    (
        b"NVRM: make sure that this kernel module and all NVIDIA driver",
        b"NVRM: components have the same version.",
    ),
    (
        b"NVRM: kernel module and all NVIDIA driver components",
        b"NVRM: have the same version.",
    ),
];

/// The fixed last words of the driver's lost-GPU message.
const FALLEN_OFF: &[u8] = b"fallen off the bus and is not responding to commands";

/// Match a kernel record's message (all its lines) against the driver's
/// forms. The message may hold several lines (one record whose text has
/// newlines, in any of [`LINE_BREAKS`]): an Xid's process name may run
/// over a line break, the lost-GPU message spans two or three lines.
pub(crate) fn parse_body(body: &[u8]) -> Option<Payload> {
    let (head, _) = first_line(body);
    if embeds_user_text(head) {
        return None;
    }
    if let Some(rest) = body.strip_prefix(b"NVRM: Xid ") {
        return parse_xid(rest);
    }
    if body.starts_with(b"NVRM: ") {
        return lost_gpu(body);
    }
    let rest = head.strip_prefix(b"nvidia-nvswitch")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = rest[digits..].strip_prefix(b": SXid ")?;
    let (pci, _, rest) = record_address(rest, false)?;
    let (code, rest) = record_code(rest)?;
    let text = trim_spaces(rest);
    let message = String::from_utf8_lossy(text).into_owned();
    let pci = Some(pci);
    if is_sxid_detail(text) {
        return Some(Payload::SxidDetail { code, pci, message });
    }
    Some(Payload::Sxid { code, pci, message })
}

/// The lines the NVSwitch driver prints after an SXid's own line, with
/// the same code: `Severity 1 Engine instance 30 Sub-engine instance 00`
/// and `Data {0x00000000, ...}` (one or two).
fn is_sxid_detail(text: &[u8]) -> bool {
    if text.starts_with(b"Data {") || text.starts_with(b"Data{") {
        return true;
    }
    let Some(rest) = text.strip_prefix(b"Severity ") else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && rest[digits..].starts_with(b" Engine instance ")
}

/// Whether the first line of a message is the driver's API-mismatch
/// message, whose text a user wrote. Found anywhere in the line: the
/// driver prints it as a continuation (`KERN_CONT`), which the kernel may
/// append to an unfinished line before it.
pub(super) fn embeds_user_text(first_line: &[u8]) -> bool {
    static FINDER: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(USER_TEXT_RECORD));
    FINDER.find(first_line).is_some()
}

static NAME: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new("name="));

/// Whether a text may name a process (`name=`): a quick test before
/// parsing it.
pub(super) fn may_name_a_process(text: &[u8]) -> bool {
    NAME.find(text).is_some()
}

/// Whether `line`, after `prev`, ends the API-mismatch message.
pub(super) fn ends_user_text(prev: &[u8], line: &[u8]) -> bool {
    let (prev, line) = (trim_spaces(prev), trim_spaces(line));
    USER_TEXT_ENDS.iter().any(|(a, b)| prev == *a && line == *b)
}

/// Whether a message's own lines hold the end of the API-mismatch
/// message (a source that keeps a record's lines together).
pub(super) fn holds_user_text_end(body: &[u8]) -> bool {
    let mut prev: &[u8] = b"";
    for line in lines(body) {
        if ends_user_text(prev, line) {
            return true;
        }
        prev = line;
    }
    false
}

/// The first line of a message and the rest after the line break.
pub(super) fn first_line(body: &[u8]) -> (&[u8], &[u8]) {
    // One pass over the bytes that can start a line break.
    for i in memchr::memchr3_iter(b'\n', b'\\', b'#', body) {
        if let Some(sep) = LINE_BREAKS.iter().find(|sep| body[i..].starts_with(sep)) {
            return (&body[..i], &body[i + sep.len()..]);
        }
    }
    (body, &[])
}

/// The lines of a message.
pub(super) fn lines(mut body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let (line, rest) = first_line(body);
        done = rest.is_empty() && line.len() == body.len();
        body = rest;
        Some(line)
    })
}

/// What an Xid record's text says, up to where the process name starts.
struct XidHead<'a> {
    code: u32,
    pci: String,
    gpu_instance: Option<u32>,
    pid: Option<u32>,
    /// The text after `name=` (the name, the driver's separator `, `, the
    /// message), when the record names a process.
    named: Option<&'a [u8]>,
    /// The text after the code (and pid) when it does not.
    rest: &'a [u8],
}

/// `(PCI:0000:3b:00): 79, pid=..., name=...`, after `NVRM: Xid `.
fn xid_head(s: &[u8]) -> Option<XidHead<'_>> {
    let (pci, gpu_instance, rest) = record_address(s, true)?;
    let (code, rest) = record_code(rest)?;
    let mut rest = trim_spaces_start(rest);
    let mut pid = None;
    if let Some(value) = rest.strip_prefix(b"pid=") {
        // Digits or `'<unknown>'`: the kernel's, never a user's text.
        let (value, after) = match memchr::memchr(b',', first_line(value).0) {
            Some(i) => (&value[..i], &value[i + 1..]),
            None => (first_line(value).0, &b""[..]),
        };
        let value = trim_spaces(value);
        let value = value.strip_prefix(b"'").unwrap_or(value);
        let value = value.strip_suffix(b"'").unwrap_or(value);
        pid = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
        rest = trim_spaces_start(after);
    }
    Some(XidHead {
        code,
        pci,
        gpu_instance,
        pid,
        named: rest.strip_prefix(b"name="),
        rest,
    })
}

fn parse_xid(s: &[u8]) -> Option<Payload> {
    let head = xid_head(s)?;
    let (process, message) = match head.named {
        Some(named) => {
            let (name, message) = split_name(named);
            let name = printable(trim_spaces(name));
            let name = name.trim_matches('\'');
            let process = (!name.is_empty() && name != "<unknown>").then(|| name.to_string());
            (process, message)
        }
        None => (None, head.rest),
    };
    Some(Payload::Xid {
        code: head.code,
        pci: Some(head.pci),
        gpu_instance: head.gpu_instance,
        pid: head.pid,
        process,
        message: String::from_utf8_lossy(trim_spaces(first_line(message).0)).into_owned(),
    })
}

/// A process name as shown: its control bytes (a newline, a terminal
/// escape) written as `\xHH`.
fn printable(name: &[u8]) -> String {
    String::from_utf8_lossy(name)
        .chars()
        .map(|c| match c {
            c if c.is_control() => format!("\\x{:02x}", u32::from(c)),
            c => c.to_string(),
        })
        .collect()
}

/// The process name after `name=`, and the driver's text after it. The
/// name is the user's, up to [`MAX_PROCESS_NAME`] bytes that may hold
/// `, ` themselves: the driver's separator is the last `, ` a name of
/// that length can reach. So no byte of a name is ever taken for the
/// driver's text (a message whose own first `, ` comes within the reach
/// of a very short name loses its start instead).
fn split_name(named: &[u8]) -> (&[u8], &[u8]) {
    match last_separator_in_reach(named) {
        Some(i) => (&named[..i], &named[i + 2..]),
        None => {
            let name = first_line(named).0;
            (trim_spaces(name).strip_suffix(b",").unwrap_or(name), &[])
        }
    }
}

/// Byte offset of the last `, ` that starts within the first
/// [`MAX_PROCESS_NAME`] bytes of the original text. A source's escape of
/// one byte counts as one (and a `, ` inside what looks like an escape
/// counts from the escape's start), so escapes and line breaks in a name
/// never push the driver's separator out of reach.
fn last_separator_in_reach(named: &[u8]) -> Option<usize> {
    let mut found = None;
    // Original bytes wholly before `at`, and where the one at `at` ends.
    let (mut original, mut unit_end) = (0, 0);
    for at in 0..named.len() {
        if at == unit_end {
            original += usize::from(at > 0);
            unit_end = at + escape_len(&named[at..]);
        }
        if original > MAX_PROCESS_NAME {
            break;
        }
        if named[at..].starts_with(b", ") {
            found = Some(at);
        }
    }
    found
}

/// How many original bytes `s` stands for at most.
fn original_len(s: &[u8]) -> usize {
    let (mut at, mut original) = (0, 0);
    while at < s.len() {
        at += escape_len(&s[at..]);
        original += 1;
    }
    original
}

/// How many bytes of `s` stand for its first original byte: `\xHH`
/// (kmsg, dmesg), `#ooo` (rsyslog), or the byte itself. A byte that only
/// looks like an escape's start counts alone: the count never exceeds
/// the original's.
fn escape_len(s: &[u8]) -> usize {
    match s {
        [b'\\', b'x', a, b, ..] if a.is_ascii_hexdigit() && b.is_ascii_hexdigit() => 4,
        [b'#', b'0'..=b'3', b'0'..=b'7', b'0'..=b'7', ..] => 4,
        _ => 1,
    }
}

/// Whether a message is an Xid record whose text may go on in the next
/// line: its process name may have held a newline. The driver's separator
/// after the name starts within [`MAX_PROCESS_NAME`] bytes, so it is there
/// once the text after `name=` is two bytes longer; until then it cannot
/// be told from a name's own `, `.
pub(super) fn xid_name_open(body: &[u8]) -> bool {
    let short = |named: &[u8]| original_len(named) <= MAX_PROCESS_NAME + 1;
    // Most records have none, or a message after it: no need to parse them.
    let Some(rest) = body.strip_prefix(b"NVRM: Xid ") else {
        return false;
    };
    if !NAME.find(rest).is_some_and(|i| short(&rest[i + 5..])) {
        return false;
    }
    xid_head(rest).and_then(|h| h.named).is_some_and(short)
}

/// `(PCI:0000:3b:00): ` up to the `:`: the driver's `%04x:%02x:%02x`
/// (with a function number, or without the `PCI:` tag, in other
/// versions), for Xids optionally followed by the MIG instance
/// (` GPU-I:05`, ` GPU-I:05 GPU-CI:01`): the address, the GPU instance,
/// the rest. Anything else is not a record.
fn record_address(s: &[u8], mig: bool) -> Option<(String, Option<u32>, &[u8])> {
    let s = s.strip_prefix(b"(")?;
    let close = memchr::memchr(b')', s)?;
    let attr = &s[..close];
    let attr = attr.strip_prefix(b"PCI:").unwrap_or(attr);
    let (addr, gpu_instance) = match memchr::memchr(b' ', attr) {
        Some(i) if mig => (&attr[..i], Some(mig_instance(&attr[i..])?)),
        Some(_) => return None,
        None => (attr, None),
    };
    let pci = bus_address(addr)?;
    Some((pci, gpu_instance, s[close + 1..].strip_prefix(b":")?))
}

/// ` GPU-I:05` or ` GPU-I:05 GPU-CI:01` (the driver's `%02u`): the GPU
/// instance.
fn mig_instance(s: &[u8]) -> Option<u32> {
    let number = |s: &[u8]| -> Option<u32> {
        if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    let rest = s.strip_prefix(b" GPU-I:")?;
    match memchr::memchr(b' ', rest) {
        Some(i) => {
            number(rest[i..].strip_prefix(b" GPU-CI:")?)?;
            number(&rest[..i])
        }
        None => number(rest),
    }
}

/// `0000:3b:00` or `0000:3b:00.0` (hex), normalised as
/// [`normalize_pci`] does it (`0000:3b:00.0`, lower case; device at most
/// 0x1f, function at most 7), without its allocations: this runs for
/// every record.
fn bus_address(addr: &[u8]) -> Option<String> {
    let hex = |s: &[u8], n: usize| s.len() == n && s.iter().all(u8::is_ascii_hexdigit);
    let (bdf, function) = match addr {
        [bdf @ .., b'.', f] => (bdf, *f),
        _ => (addr, b'0'),
    };
    let well_formed = bdf.len() == 10
        && hex(&bdf[0..4], 4)
        && bdf[4] == b':'
        && hex(&bdf[5..7], 2)
        && bdf[7] == b':'
        && hex(&bdf[8..10], 2)
        && (b'0'..=b'7').contains(&function)
        && matches!(bdf[8], b'0' | b'1');
    if !well_formed {
        return None;
    }
    let mut pci = String::with_capacity(12);
    pci.extend(bdf.iter().map(|&b| char::from(b.to_ascii_lowercase())));
    pci.push('.');
    pci.push(char::from(function));
    debug_assert_eq!(normalize_pci(&pci).as_deref(), Some(pci.as_str()), "{pci}");
    Some(pci)
}

/// ` 79, rest` -> (79, rest): up to six digits, then `,` or the end of
/// the line.
fn record_code(s: &[u8]) -> Option<(u32, &[u8])> {
    let s = trim_spaces_start(s);
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 6 {
        return None;
    }
    let code = std::str::from_utf8(&s[..digits]).ok()?.parse().ok()?;
    let rest = &s[digits..];
    match rest.strip_prefix(b",") {
        Some(rest) => Some((code, rest)),
        None if trim_spaces(first_line(rest).0).is_empty() => Some((code, &[])),
        None => None,
    }
}

/// The driver's lost-GPU messages outside an Xid record, with their
/// `NVRM: ` on every line: `The NVIDIA GPU <bdf>` / `(PCI ID: <id>)
/// installed in this system has` / `fallen off the bus and is not
/// responding to commands.` (older drivers: `The NVIDIA GPU <bdf> (PCI
/// ID: <id>) installed in this` / `system has fallen off ...`), each line
/// possibly a record of its own; `GPU <bdf>: GPU has fallen off the
/// bus.`; older drivers' `GPU at <bdf> has fallen off the bus.`
fn lost_gpu(body: &[u8]) -> Option<Payload> {
    // The record's lines without their `NVRM: `, as one sentence.
    let mut sentence = Vec::with_capacity(body.len());
    for line in lines(body) {
        let line = trim_spaces(line);
        if line.is_empty() {
            continue;
        }
        let words = trim_spaces(line.strip_prefix(b"NVRM: ")?);
        if !sentence.is_empty() {
            sentence.push(b' ');
        }
        sentence.extend_from_slice(words);
    }
    let s = sentence.as_slice();
    if let Some(rest) = s.strip_prefix(b"The NVIDIA GPU ") {
        let (addr, rest) = word(rest);
        let pci = bus_address(addr)?;
        let rest = rest.strip_prefix(b" ").unwrap_or(rest);
        if rest.is_empty() {
            return Some(Payload::GpuHeader { pci });
        }
        return match device_id(rest) {
            b"installed in this" | b"installed in this system has" => {
                Some(Payload::GpuHeader { pci })
            }
            rest if rest
                .strip_prefix(b"installed in this system has ")
                .is_some_and(is_fallen_off) =>
            {
                Some(Payload::FallenOff { pci: Some(pci) })
            }
            _ => None,
        };
    }
    if is_lone_end(s) {
        return Some(Payload::FallenOff { pci: None });
    }
    gpu_has_fallen_off(s).map(|pci| Payload::FallenOff { pci: Some(pci) })
}

/// The lost-GPU message's last lines logged as records of their own:
/// `fallen off ...`, `system has fallen off ...`, `[(PCI ID: <id>)]
/// installed in this system has fallen off ...`.
fn is_lone_end(s: &[u8]) -> bool {
    let installed = device_id(s);
    let end = if let Some(end) = installed.strip_prefix(b"installed in this system has ") {
        end
    } else if installed.len() != s.len() {
        return false;
    } else {
        s.strip_prefix(b"system has ").unwrap_or(s)
    };
    is_fallen_off(end)
}

/// `fallen off the bus and is not responding to commands[.]`
fn is_fallen_off(s: &[u8]) -> bool {
    s.strip_suffix(b".").unwrap_or(s) == FALLEN_OFF
}

/// `s` after a leading `(PCI ID: 10de:26b5) ` (`s` itself without one).
fn device_id(s: &[u8]) -> &[u8] {
    let hex4 = |s: &[u8]| s.len() == 4 && s.iter().all(u8::is_ascii_hexdigit);
    match s.strip_prefix(b"(PCI ID: ") {
        Some(id)
            if id.len() > 11
                && hex4(&id[..4])
                && id[4] == b':'
                && hex4(&id[5..9])
                && id[9..].starts_with(b") ") =>
        {
            &id[11..]
        }
        _ => s,
    }
}

/// `GPU <bdf>: GPU has fallen off the bus.` or `GPU at <bdf> has fallen
/// off the bus.` (`PCI:` before the address accepted): the GPU's address.
fn gpu_has_fallen_off(s: &[u8]) -> Option<String> {
    let rest = s.strip_prefix(b"GPU ")?;
    let rest = rest.strip_prefix(b"at ").unwrap_or(rest);
    let rest = rest.strip_prefix(b"PCI:").unwrap_or(rest);
    let (addr, rest) = word(rest);
    let (addr, said) = match addr.strip_suffix(b":") {
        Some(addr) => (addr, &b" GPU has fallen off the bus"[..]),
        None => (addr, &b" has fallen off the bus"[..]),
    };
    (rest.strip_suffix(b".").unwrap_or(rest) == said).then_some(())?;
    bus_address(addr)
}

/// The first word of `s` and the rest from the space after it.
fn word(s: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b' ', s) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, &[]),
    }
}

#[cfg(test)]
mod tests;
