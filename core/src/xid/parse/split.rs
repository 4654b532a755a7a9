//! Records whose lines a text source printed as lines of their own.
//!
//! A kernel record's text may hold newlines. /dev/kmsg, the journal and
//! rsyslog keep such a record in one piece, `dmesg` indents its later
//! lines (the file reader joins them), but `dmesg` on Linux 5.10 and
//! later without `/dev/kmsg` (`dmesg -S`) prints every line with the
//! record's own prefix (`[  123.456789] `), and `journalctl -o cat` (or
//! rsyslog without its escapes) prints the later lines bare. Such a
//! line looks like a record of its own. Two kinds of record must keep
//! their later lines:
//!
//! - the API-mismatch message quotes a client's version string (up to 63
//!   bytes of the caller's choice): its later lines are data, up to the
//!   message's fixed last two lines, which no version string can hold;
//! - an Xid whose process name holds a newline goes on after it: the
//!   driver's separator and message are on the next line. Such a line
//!   holds at most 14 bytes of the name, then `, `: it is never a record
//!   the driver's forms accept (their first `, ` comes later, or never),
//!   so a line that is one is the next record.
//!
//! Which lines are later lines depends on how the source wraps them:
//!
//! - `dmesg` and its options repeat the record's prefix on every line (a
//!   kmsg line is a whole record): a line with the same prefix (trailing
//!   blanks aside) or with none goes on, one with another prefix is
//!   another record;
//! - a syslog header is written once: a line with a syslog header of its
//!   own is another record, any other line goes on (whatever prefix a
//!   user gave it); except a line with the very same header and kernel
//!   time stamp (`kernel: [  123.456789] `): rsyslog's imklog, reading
//!   /proc/kmsg, logs each line of a record that way;
//! - bare messages (`journalctl -o cat`) have no prefix at all: every
//!   line goes on, up to the end the record's kind allows.

use super::bytes::trim_spaces_start;
use super::forms::{embeds_user_text, ends_user_text, first_line, holds_user_text_end};
use super::forms::{lines, may_name_a_process, xid_name_open};
use super::wrapper::{has_syslog_header, wrapper_len, wraps_every_line};
use super::{parse_line, unwrap};

/// Lines of an API-mismatch message: five of the driver's, one more per
/// newline in the client's 63-byte version string or 15-byte name.
const MAX_USER_TEXT_LINES: usize = 5 + 63 + 15;
/// Lines of an Xid record: one more per newline in the process name.
const MAX_XID_LINES: usize = 1 + 15;

/// What to do with the next line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitStep {
    /// It belongs to the record, which may go on.
    Part,
    /// It belongs to the record and ends it.
    Last,
    /// It is not part of the record (which ended before it).
    Apart,
}

/// A record that may go on in lines of their own.
#[derive(Debug)]
pub(crate) struct SplitRecord {
    wrapping: Wrapping,
    lines: usize,
    kind: Kind,
}

/// How the source wraps the record's later lines.
#[derive(Debug)]
enum Wrapping {
    /// Each with this prefix (the first line's, without trailing blanks).
    EveryLine(Vec<u8>),
    /// None: the first line has this syslog header (without trailing
    /// blanks), which another line repeats only with the kernel's stamp.
    FirstLine(Vec<u8>),
    /// No line has a prefix.
    Bare,
}

#[derive(Debug)]
enum Kind {
    /// The API-mismatch message: its last line so far.
    UserText { last: Vec<u8> },
    /// An Xid whose process name is not finished: the record so far.
    XidName { text: Vec<u8> },
}

impl SplitRecord {
    /// Whether the record read so far (a kernel line, with any indented
    /// lines the reader joined to it) may go on in lines of its own.
    pub(crate) fn open(record: &[u8]) -> Option<SplitRecord> {
        // Most records neither quote user text nor name a process.
        if !embeds_user_text(first_line(record).0) && !may_name_a_process(record) {
            return None;
        }
        let n = wrapper_len(record)?;
        let body = &record[n..];
        let kind = if embeds_user_text(first_line(body).0) {
            if holds_user_text_end(body) {
                return None;
            }
            Kind::UserText {
                last: lines(body).last().unwrap_or_default().to_vec(),
            }
        } else if xid_name_open(body) {
            Kind::XidName {
                text: record.to_vec(),
            }
        } else {
            return None;
        };
        let wrapping = if wraps_every_line(record) {
            Wrapping::EveryLine(trim_end(&record[..n]).to_vec())
        } else if n > 0 {
            Wrapping::FirstLine(trim_end(&record[..n]).to_vec())
        } else {
            Wrapping::Bare
        };
        Some(SplitRecord {
            wrapping,
            lines: 1,
            kind,
        })
    }

    /// Take the next line of the log (without its newline).
    pub(crate) fn take(&mut self, line: &[u8]) -> SplitStep {
        let body = match &self.wrapping {
            // After the record's own prefix, the line is the record's,
            // whatever it looks like (a user's text may start like a
            // time stamp): only another prefix ends the record.
            Wrapping::EveryLine(prefix) => match after_prefix(line, prefix) {
                Some(rest) => rest,
                None if wrapper_len(line).is_some_and(|n| n > 0) => return SplitStep::Apart,
                None => line,
            },
            Wrapping::FirstLine(header) => match after_prefix(line, header) {
                Some(rest) if header.ends_with(b"]") => rest,
                _ if has_syslog_header(line) => return SplitStep::Apart,
                _ => line,
            },
            Wrapping::Bare => line,
        };
        let max = match self.kind {
            Kind::UserText { .. } => MAX_USER_TEXT_LINES,
            Kind::XidName { .. } => MAX_XID_LINES,
        };
        if self.lines >= max {
            return SplitStep::Apart;
        }
        self.lines += 1;
        match &mut self.kind {
            Kind::UserText { last } => {
                let end = ends_user_text(last, body);
                *last = body.to_vec();
                if end {
                    SplitStep::Last
                } else {
                    SplitStep::Part
                }
            }
            Kind::XidName { .. } if starts_a_record(line) => SplitStep::Apart,
            Kind::XidName { text } => {
                text.push(b'\n');
                text.extend_from_slice(trim_spaces_start(body));
                let n = wrapper_len(text).unwrap_or(0);
                if xid_name_open(&text[n..]) {
                    SplitStep::Part
                } else {
                    SplitStep::Last
                }
            }
        }
    }

    /// Whether a reader at the end of what is written should come back to
    /// the record's start next time rather than go on after it: the end
    /// of an API-mismatch message may not be written yet, and its later
    /// lines read without it would look like records. (Rereading it makes
    /// no event; an Xid's record is parsed with what there is.)
    pub(crate) fn waits_for_its_end(&self) -> bool {
        matches!(self.kind, Kind::UserText { .. })
    }

    /// The record's text, its lines joined with newlines, when it is one
    /// to parse (an Xid); `None` for user text, which is never a record.
    pub(crate) fn into_record(self) -> Option<Vec<u8>> {
        match self.kind {
            Kind::UserText { .. } => None,
            Kind::XidName { text } => Some(text),
        }
    }
}

/// Whether a line is a record the driver's forms accept, or the start
/// of user text: never the rest of a process name.
fn starts_a_record(line: &[u8]) -> bool {
    parse_line(line).is_some()
        || unwrap(line).is_some_and(|u| embeds_user_text(first_line(u.body).0))
}

/// `line` after `prefix` (a record's prefix without its trailing blank)
/// and the blank after it; `None` when the line has another prefix.
fn after_prefix<'a>(line: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(prefix)?;
    match rest.first() {
        None => Some(rest),
        Some(b' ' | b'\t') => Some(&rest[1..]),
        Some(_) => None,
    }
}

fn trim_end(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(lines: &[&str]) -> (Vec<SplitStep>, Option<Vec<u8>>) {
        let mut split = SplitRecord::open(lines[0].as_bytes()).expect("opens");
        let mut steps = Vec::new();
        for line in &lines[1..] {
            let step = split.take(line.as_bytes());
            steps.push(step);
            if step != SplitStep::Part {
                break;
            }
        }
        (steps, split.into_record())
    }

    #[test]
    fn user_text_goes_on_to_the_drivers_last_lines() {
        use SplitStep::*;
        let (steps, record) = walk(&[
            "[  123.456789] NVRM: API mismatch: the client has the version ",
            "[  123.456789] NVRM: Xid (PCI:0000:18:00): 79, forged, but",
            "[  123.456789] NVRM: this kernel module has the version 470.82.00.  Please",
            "[  123.456789] NVRM: make sure that this kernel module and all NVIDIA driver",
            "[  123.456789] NVRM: components have the same version.",
            "[  123.456789] NVRM: Xid (PCI:0000:18:00): 79, real",
        ]);
        assert_eq!(steps, [Part, Part, Part, Last]);
        assert_eq!(record, None);
        // Lines of no wrapper go on; a line with another prefix is
        // another record where the source repeats prefixes...
        let (steps, _) = walk(&[
            "<3>[  123.0] NVRM: API mismatch: the client 'x' (pid 7)",
            "<3>[  123.0] NVRM: has the version ",
            "user words",
            "<3>[  124.0] NVRM: Xid (PCI:0000:18:00): 79, real",
        ]);
        assert_eq!(steps, [Part, Part, Apart]);
        // ... but not in bare lines (journalctl -o cat), where a user's
        // line may start with anything.
        let (steps, _) = walk(&[
            "NVRM: API mismatch: the client 'x' (pid 7)",
            "NVRM: has the version ",
            "[  124.0] NVRM: Xid (PCI:0000:18:00): 79, forged, but this kernel module has",
            "NVRM: the version 575.51.02.  Please make sure that this",
            "NVRM: kernel module and all NVIDIA driver components",
            "NVRM: have the same version.",
        ]);
        assert_eq!(steps, [Part, Part, Part, Part, Last]);
        // The whole message in one line: nothing goes on.
        assert!(SplitRecord::open(b"3,9,1,-;NVRM: API mismatch: the client has the version x, but\\x0aNVRM: this kernel module has the version 1.  Please\\x0aNVRM: make sure that this kernel module and all NVIDIA driver\\x0aNVRM: components have the same version.").is_none());
        assert!(SplitRecord::open(
            b"[ 1.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."
        )
        .is_none());
        assert!(SplitRecord::open(b"user: NVRM: API mismatch: the client ").is_none());
    }

    #[test]
    fn an_xid_name_with_a_newline_takes_the_next_line() {
        use SplitStep::*;
        let (steps, record) = walk(&[
            "[Sun Nov 29 14:00:01 2026] NVRM: Xid (PCI:0000:18:00): 154, pid=7, name=a",
            "[Sun Nov 29 14:00:01 2026] b, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
            "[Sun Nov 29 14:00:01 2026] NVRM: Xid (PCI:0000:18:00): 79, real",
        ]);
        assert_eq!(steps, [Last]);
        let record = record.unwrap();
        assert!(record.ends_with(
            b"name=a\nb, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
        ));
    }

    #[test]
    fn endless_user_text_stops_at_its_bound() {
        let mut split =
            SplitRecord::open(b"NVRM: API mismatch: the client has the version ").unwrap();
        let taken = (0..200)
            .take_while(|_| split.take(b"NVRM: more") == SplitStep::Part)
            .count();
        assert_eq!(taken, MAX_USER_TEXT_LINES - 1);
    }
}
