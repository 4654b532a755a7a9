//! Incremental reader of a kernel log kept in a plain file.
//!
//! The cursor is the file's identity (device, inode), the byte offset of
//! the end of the last complete line read, and a hash of the bytes before
//! it. A scan seeks there and reads only what was appended, so its cost
//! does not depend on the size of the history. Only lines holding `NVRM`
//! or `SXid` (found in one SIMD pass over the raw bytes, 256 KiB read at a
//! time) are parsed, each with the lines that belong to its record:
//! indented ones, and those a source printed apart ([`SplitRecord`]).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use memchr::memmem::Finder;

use super::assemble::Assembler;
use super::cursor::{fnv1a, Cursor};
use super::log_read::LogRead;
use super::parse::{nvidia_words, parse_line, unwrap, NvidiaWords, SplitRecord, SplitStep};
use super::policy::Policy;
use super::stamp::{Stamp, TimeContext};

/// Bytes read at a time: small enough that the search over them runs in
/// the CPU's cache the read just filled.
const READ_CHUNK: usize = 256 << 10;
/// The longest line read: a longer one cannot be a kernel record (the
/// buffer grows to this size for a long line, then drops it).
const MAX_LINE: usize = 4 << 20;
const TAIL: u64 = 64;
/// A lost-GPU header and its "fallen off" line are three short lines
/// apart (kmsg dumps put dictionary lines between them), an SXid's
/// report three or four lines.
const FALLEN_OFF_WINDOW_BYTES: u64 = 2048;

/// Read `path` from where `since` stopped (from the start without one).
pub(crate) fn read_file(
    path: &Path,
    since: Option<&Cursor>,
    ctx: TimeContext,
    policy: &Policy,
) -> std::io::Result<LogRead> {
    let file = open(path)?;
    let meta = file.metadata()?;
    let (dev, ino, len) = (meta.dev(), meta.ino(), meta.len());
    let mut out = LogRead::empty();
    let mut asm = Assembler::new(FALLEN_OFF_WINDOW_BYTES, ctx, policy);
    let start = match since {
        None => first_scan_start(&file, path, len, &mut out)?,
        Some(c @ Cursor::File { dev: d, ino: i, .. }) if (*d, *i) == (dev, ino) => {
            resume_offset(&file, path, len, c, &mut out)?
        }
        Some(c @ Cursor::File { .. }) => {
            finish_rotated(path, c, &mut asm, &mut out)?;
            out.restart(format!(
                "{} was replaced (rotated) since the last scan; reading the new file from the start",
                path.display()
            ));
            0
        }
        Some(Cursor::Kmsg { .. } | Cursor::Journal { .. }) => {
            out.restart(format!(
                "the saved cursor is for another kind of kernel log, {} is a file; reading it from the start",
                path.display()
            ));
            0
        }
    };
    prime_before(&file, start, &mut asm)?;
    let end = read_range(&file, start, len, &mut asm, &mut out)?;
    if let Some(who) = others_may_write(&meta) {
        // Whatever format its lines have, anyone who can write the file
        // can write an Xid line.
        if !out.events.is_empty() {
            out.notes.push(format!(
                "{} can be written by {who}: its Xids count as forgeable (they warn, never drain, unless xid.syslog_may_drain = true)",
                path.display()
            ));
        }
        for ev in &mut out.events {
            ev.forgeable = true;
        }
    }
    out.last_monotonic_us = last_monotonic_us(&file, end)?;
    let tail_len = end.min(TAIL);
    let tail = read_exact_at(&file, end - tail_len, tail_len as usize)?;
    out.cursor = Some(Cursor::File {
        dev,
        ino,
        offset: end,
        tail_len: tail_len as u32,
        tail_hash: fnv1a(&tail),
    });
    Ok(out)
}

/// A first scan (no cursor) judges only the look-back; a log file of
/// years would still be read whole. It starts this far from the end (a
/// busy node writes far less in a day); with a cursor every byte after it
/// is read, however many.
const FIRST_SCAN_BYTES: u64 = 256 << 20;

/// Where a first scan starts: the start of the first whole line of the
/// last [`FIRST_SCAN_BYTES`].
fn first_scan_start(file: &File, path: &Path, len: u64, out: &mut LogRead) -> std::io::Result<u64> {
    if len <= FIRST_SCAN_BYTES {
        return Ok(0);
    }
    let from = len - FIRST_SCAN_BYTES;
    let probe = read_exact_at(file, from, 64 << 10)?;
    let start = memchr::memchr(b'\n', &probe).map_or(from, |i| from + i as u64 + 1);
    let start = start_of_record_around(file, start)?;
    out.notes.push(format!(
        "first scan of {} ({} MiB): only its last {} MiB are read",
        path.display(),
        len >> 20,
        FIRST_SCAN_BYTES >> 20
    ));
    Ok(start)
}

/// Bytes before a first scan's start searched for a record it would
/// begin inside (an API-mismatch message of up to 83 lines).
const RECORD_LOOKBACK_BYTES: u64 = 16 << 10;

/// Where a scan starting at the line at `start` must begin so as not to
/// begin inside a record whose lines a source printed apart: that
/// record's first line, or `start`.
fn start_of_record_around(file: &File, start: u64) -> std::io::Result<u64> {
    let from = start.saturating_sub(RECORD_LOOKBACK_BYTES);
    let before = read_exact_at(file, from, (start - from) as usize)?;
    let mut at = if from == 0 {
        0
    } else {
        memchr::memchr(b'\n', &before).map_or(before.len(), |i| i + 1)
    };
    let mut open: Option<(usize, SplitRecord)> = None;
    while at < before.len() {
        let end = line_end(&before, at);
        let line = &before[at..end];
        if let Some((_, split)) = &mut open {
            match split.take(line) {
                SplitStep::Part => {
                    at = end + 1;
                    continue;
                }
                SplitStep::Last => {
                    open = None;
                    at = end + 1;
                    continue;
                }
                // Another record: it may open one in turn.
                SplitStep::Apart => {}
            }
        }
        open = SplitRecord::open(line).map(|split| (at, split));
        at = end + 1;
    }
    Ok(open.map_or(start, |(at, _)| from + at as u64))
}

/// Before reading from `start` (where the last scan stopped, or where a
/// first scan of a big file starts), show the assembler the SXid lines
/// just before it: the detail lines of their reports that follow
/// `start` are theirs, not SXids of their own.
fn prime_before(file: &File, start: u64, asm: &mut Assembler<'_>) -> std::io::Result<()> {
    let from = start.saturating_sub(FALLEN_OFF_WINDOW_BYTES);
    if from == start {
        return Ok(());
    }
    let before = read_exact_at(file, from, (start - from) as usize)?;
    let sxid = Finder::new(b"SXid");
    let mut at = if from == 0 {
        0
    } else {
        memchr::memchr(b'\n', &before).map_or(before.len(), |i| i + 1)
    };
    while at < before.len() {
        let end = line_end(&before, at);
        let line = &before[at..end];
        if sxid.find(line).is_some() {
            if let Some(record) = parse_line(line) {
                asm.prime(record, from + at as u64);
            }
        }
        at = end + 1;
    }
    Ok(())
}

/// Where to go on in the same file: the saved offset, unless the file
/// was truncated or rewritten before it (then from the start).
fn resume_offset(
    file: &File,
    path: &Path,
    len: u64,
    cursor: &Cursor,
    out: &mut LogRead,
) -> std::io::Result<u64> {
    let Cursor::File {
        offset,
        tail_len,
        tail_hash,
        ..
    } = *cursor
    else {
        return Ok(0);
    };
    if offset > len {
        out.restart(format!(
            "{} was truncated (cursor at byte {offset}, file has {len}); reading it from the start",
            path.display()
        ));
        Ok(0)
    } else if tail_matches(file, offset, tail_len, tail_hash)? {
        Ok(offset)
    } else {
        out.restart(format!(
            "{} was rewritten before byte {offset}; reading it from the start",
            path.display()
        ));
        Ok(0)
    }
}

/// The file was replaced: finish the old one first when it sits at
/// `<path>.1` (logrotate's usual name) and still is the cursor's file.
fn finish_rotated(
    path: &Path,
    cursor: &Cursor,
    asm: &mut Assembler<'_>,
    out: &mut LogRead,
) -> std::io::Result<()> {
    let Cursor::File {
        dev,
        ino,
        offset,
        tail_len,
        tail_hash,
    } = *cursor
    else {
        return Ok(());
    };
    let rotated = path.with_file_name(format!(
        "{}.1",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    if let Ok(old) = open(&rotated) {
        let m = old.metadata()?;
        if m.dev() == dev && m.ino() == ino && tail_matches(&old, offset, tail_len, tail_hash)? {
            read_range(&old, offset, m.len(), asm, out)?;
        }
    }
    Ok(())
}

/// Who other than root (and this process's own user) may write the log
/// file, if anyone.
/// Who other than root (and the user running gpu-health) may write the
/// file of `meta`, if anyone: what such a file says, any user can say.
pub(crate) fn others_may_write(meta: &std::fs::Metadata) -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != euid {
        Some(format!("its owner, uid {}", meta.uid()))
    } else if meta.mode() & 0o002 != 0 {
        Some("every user (mode o+w)".to_string())
    } else if meta.mode() & 0o020 != 0 {
        Some(format!("group {} (mode g+w)", meta.gid()))
    } else {
        None
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    // Non-blocking: a FIFO named by mistake must not hang a prolog.
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

fn read_exact_at(file: &File, at: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], at + got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    Ok(buf)
}

fn tail_matches(file: &File, offset: u64, tail_len: u32, hash: u64) -> std::io::Result<bool> {
    let tail_len = u64::from(tail_len);
    if tail_len > offset {
        return Ok(false);
    }
    let tail = read_exact_at(file, offset - tail_len, tail_len as usize)?;
    Ok(tail.len() as u64 == tail_len && fnv1a(&tail) == hash)
}

/// Parse complete lines in `[start, end)`; returns the offset to go on
/// from next time: after the last complete line (a line still being
/// written is left for next time), or at a lost-GPU header whose
/// continuation may still be coming (so a message cut by the end of a
/// scan is read whole by the next one). A line longer than
/// [`MAX_LINE`] cannot be a kernel record and is dropped whole, so that
/// its tail is never read as a line of its own.
fn read_range(
    file: &File,
    start: u64,
    end: u64,
    asm: &mut Assembler<'_>,
    out: &mut LogRead,
) -> std::io::Result<u64> {
    let size = (end.saturating_sub(start)).min(READ_CHUNK as u64) as usize;
    let mut buf = vec![0u8; size];
    let mut pos = start; // file offset of buf[0]
    let mut filled = 0usize;
    // Start of an over-long line being dropped.
    let mut dropping: Option<u64> = None;
    // The log is dense in the bytes the search looks for first.
    let mut dense = false;
    while pos + (filled as u64) < end && !buf.is_empty() {
        let want = (buf.len() - filled).min((end - pos - filled as u64) as usize);
        let n = file.read_at(&mut buf[filled..filled + want], pos + filled as u64)?;
        if n == 0 {
            break;
        }
        filled += n;
        let at_end = pos + filled as u64 == end;
        if dropping.is_some() {
            match memchr::memchr(b'\n', &buf[..filled]) {
                Some(i) => {
                    buf.copy_within(i + 1..filled, 0);
                    pos += i as u64 + 1;
                    filled -= i + 1;
                    dropping = None;
                }
                None => {
                    pos += filled as u64;
                    filled = 0;
                    continue;
                }
            }
        }
        if let Some(last) = memchr::memrchr(b'\n', &buf[..filled]) {
            // The last whole line ends its record unless an indented
            // continuation line follows or may still follow it.
            let last_line_done = match buf.get(last + 1..filled) {
                Some([next, ..]) => !matches!(next, b' ' | b'\t'),
                _ => at_end,
            };
            let lines = &buf[..=last];
            let ends = Ends {
                done: last_line_done,
                written: at_end,
            };
            let consumed = scan_lines(lines, pos, ends, &mut dense, asm, out);
            buf.copy_within(consumed..filled, 0);
            pos += consumed as u64;
            filled -= consumed;
        }
        if filled == buf.len() && !at_end && buf.len() < MAX_LINE {
            // One line (or record) longer than the buffer: a bigger one.
            let left = end - pos;
            let size = (buf.len() * 2).min(MAX_LINE) as u64;
            buf.resize(size.min(left) as usize, 0);
        } else if filled == buf.len() && !at_end {
            // One line (or record) longer than the longest there is.
            match memchr::memrchr(b'\n', &buf[..filled]) {
                // Whole lines held back as one record (an indented line
                // may follow the last): that record is dropped, and the
                // next line is read as it is. Looking for the end of a
                // line here would swallow the next line, and a fault in
                // it, behind a user's line of exactly the buffer's size.
                Some(last) => {
                    log::warn!(
                        "kernel log: a record of {} MiB or more at byte {pos} was dropped unread",
                        MAX_LINE >> 20
                    );
                    buf.copy_within(last + 1..filled, 0);
                    pos += last as u64 + 1;
                    filled -= last + 1;
                }
                None => {
                    log::warn!(
                        "kernel log: a line of more than {} MiB at byte {pos} was dropped unread",
                        MAX_LINE >> 20
                    );
                    dropping = Some(pos);
                    pos += filled as u64;
                    filled = 0;
                }
            }
        }
    }
    if let Some(from) = dropping {
        // Still inside the over-long line: go on from its start next time.
        return Ok(from);
    }
    Ok(asm.holdback(pos).unwrap_or(pos))
}

/// What follows a chunk of whole lines.
#[derive(Clone, Copy)]
struct Ends {
    /// No indented line follows its last line, nor can one.
    done: bool,
    /// It ends what is written of the range.
    written: bool,
}

/// Parse, in order, the records of `chunk` (whole lines) that hold a
/// candidate word; a record is its line plus the indented continuation
/// lines under it (`dmesg` and `journalctl` print a multi-line kernel
/// record that way), plus the lines a source printed apart that belong
/// to it ([`SplitRecord`]: they are never read as records of their own).
/// Returns how many bytes were dealt with: a record that ends the chunk
/// is left for the next chunk unless `ends` says it cannot go on.
fn scan_lines(
    chunk: &[u8],
    base: u64,
    ends: Ends,
    dense: &mut bool,
    asm: &mut Assembler<'_>,
    out: &mut LogRead,
) -> usize {
    let mut hits = nvidia_words(chunk, *dense);
    let consumed = scan_hits(chunk, base, ends, &mut hits, asm, out);
    *dense |= hits.fell_back();
    consumed
}

/// [`scan_lines`] with the words found.
fn scan_hits(
    chunk: &[u8],
    base: u64,
    ends: Ends,
    hits: &mut NvidiaWords<'_>,
    asm: &mut Assembler<'_>,
    out: &mut LogRead,
) -> usize {
    let mut done_until = 0usize;
    for hit in hits {
        if hit < done_until {
            continue;
        }
        let start = memchr::memrchr(b'\n', &chunk[..hit]).map_or(0, |i| i + 1);
        let end = line_end(chunk, hit);
        let mut record_end = end;
        while record_end + 1 < chunk.len() && matches!(chunk[record_end + 1], b' ' | b'\t') {
            record_end = line_end(chunk, record_end + 1);
        }
        if !ends.done && record_end + 1 >= chunk.len() {
            return start;
        }
        let line = &chunk[start..end];
        let joined;
        let record: &[u8] = if record_end > end && unwrap(line).is_some_and(|u| u.seq.is_none()) {
            joined = join_continuations(&chunk[start..record_end]);
            &joined
        } else {
            // A kmsg record's own continuation lines are its dictionary.
            line
        };
        let whole;
        let record = match SplitRecord::open(record) {
            None => record,
            Some(split) => match take_split(split, chunk, record_end + 1, ends.written) {
                Taken::Record(text, after) => {
                    record_end = after - 1;
                    whole = text;
                    &whole
                }
                Taken::UserText(after) => {
                    done_until = after;
                    continue;
                }
                Taken::Unfinished => return start,
            },
        };
        done_until = record_end + 1;
        if let Some(record) = parse_line(record) {
            out.add(asm, record, base + start as u64);
        }
    }
    chunk.len()
}

/// What a record's lines apart came to.
enum Taken {
    /// An Xid record's whole text, and the offset after its last line.
    Record(Vec<u8>, usize),
    /// User text up to this offset: no record.
    UserText(usize),
    /// Its end is not in the chunk: read it with more lines.
    Unfinished,
}

/// Take the lines from `at` that belong to `split`'s record.
fn take_split(mut split: SplitRecord, chunk: &[u8], mut at: usize, written: bool) -> Taken {
    loop {
        if at >= chunk.len() {
            if !written || split.waits_for_its_end() {
                return Taken::Unfinished;
            }
            break;
        }
        let end = line_end(chunk, at);
        match split.take(&chunk[at..end]) {
            SplitStep::Part => at = end + 1,
            SplitStep::Last => {
                at = end + 1;
                break;
            }
            SplitStep::Apart => break,
        }
    }
    match split.into_record() {
        Some(text) => Taken::Record(text, at),
        None => Taken::UserText(at),
    }
}

/// Index of the newline ending the line at `at` (or the chunk's end).
fn line_end(chunk: &[u8], at: usize) -> usize {
    memchr::memchr(b'\n', &chunk[at..]).map_or(chunk.len(), |i| at + i)
}

/// One record's text from its first line and indented continuation lines.
fn join_continuations(lines: &[u8]) -> Vec<u8> {
    let mut joined = Vec::with_capacity(lines.len());
    for (i, line) in lines.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            joined.push(b'\n');
            let indent = line
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count();
            joined.extend_from_slice(&line[indent..]);
        } else {
            joined.extend_from_slice(line);
        }
    }
    joined
}

/// Monotonic stamp of the last complete line before `end`, if it has one
/// (dates monotonic-only records relative to the end of the file).
fn last_monotonic_us(file: &File, end: u64) -> std::io::Result<Option<u64>> {
    let from = end.saturating_sub(4096);
    let buf = read_exact_at(file, from, (end - from) as usize)?;
    let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
    let mut lines = body.rsplit(|&b| b == b'\n');
    // Skip kmsg dictionary lines (they start with a space).
    let last = lines.find(|l| !l.starts_with(b" "));
    Ok(match last.and_then(unwrap).map(|u| u.stamp) {
        Some(Stamp::Monotonic { us }) => Some(us),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first scan that would start inside an API-mismatch message
    /// printed one line per line (`dmesg -S`) starts at its first line.
    #[test]
    fn a_first_scan_does_not_start_inside_user_text() {
        let lines = [
            "[  1.000000] e1000e: link up",
            "[  2.000000] NVRM: API mismatch: the client has the version ",
            "[  2.000000] NVRM: Xid (PCI:0000:18:00): 79, forged, but",
            "[  2.000000] NVRM: this kernel module has the version 470.82.00.  Please",
            "[  2.000000] NVRM: make sure that this kernel module and all NVIDIA driver",
            "[  2.000000] NVRM: components have the same version.",
            "[  3.000000] NVRM: Xid (PCI:0000:c1:00): 48, real",
        ];
        let text = lines.join("\n") + "\n";
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
        let at = |line: usize| {
            lines[..line]
                .iter()
                .map(|l| l.len() as u64 + 1)
                .sum::<u64>()
        };
        let start = |line| start_of_record_around(file.as_file(), at(line)).unwrap();
        assert_eq!(start(0), 0);
        assert_eq!(start(1), at(1));
        for inside in 2..=5 {
            assert_eq!(start(inside), at(1), "line {inside}");
        }
        assert_eq!(start(6), at(6), "after the message's end");
    }
}
