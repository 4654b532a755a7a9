//! Incremental reader of a kernel log kept in a plain file.
//!
//! The cursor is the file's identity (device, inode), the byte offset of
//! the end of the last complete line read, and a hash of the bytes before
//! it. A scan seeks there and reads only what was appended, so its cost
//! does not depend on the size of the history. Only lines holding `NVRM`
//! or `SXid` (found with a SIMD substring search over raw bytes) are
//! parsed.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use memchr::memmem::Finder;

use super::cursor::{fnv1a, Cursor};
use super::event::Assembler;
use super::log_read::LogRead;
use super::parse::{parse_line, unwrap};
use super::stamp::{Stamp, TimeContext};

const CHUNK: usize = 4 << 20;
const TAIL: u64 = 64;
/// A lost-GPU header and its "fallen off" line are three short lines
/// apart; kmsg dumps put dictionary lines between them.
const FALLEN_OFF_WINDOW_BYTES: u64 = 2048;

/// Read `path` from where `since` stopped (from the start without one).
pub(crate) fn read_file(
    path: &Path,
    since: Option<&Cursor>,
    ctx: TimeContext,
) -> std::io::Result<LogRead> {
    let file = open(path)?;
    let meta = file.metadata()?;
    let (dev, ino, len) = (meta.dev(), meta.ino(), meta.len());
    let mut out = LogRead::empty();
    let mut asm = Assembler::new(FALLEN_OFF_WINDOW_BYTES, ctx);
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
        Some(Cursor::Kmsg { .. }) => {
            out.restart(format!(
                "the saved cursor is for /dev/kmsg, {} is a file; reading it from the start",
                path.display()
            ));
            0
        }
    };
    let end = read_range(&file, start, len, &mut asm, &mut out)?;
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
    out.notes.push(format!(
        "first scan of {} ({} MiB): only its last {} MiB are read",
        path.display(),
        len >> 20,
        FIRST_SCAN_BYTES >> 20
    ));
    Ok(start)
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
    asm: &mut Assembler,
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

/// Parse complete lines in `[start, end)`; returns the offset after the
/// last complete line (a line still being written is left for next time).
fn read_range(
    file: &File,
    start: u64,
    end: u64,
    asm: &mut Assembler,
    out: &mut LogRead,
) -> std::io::Result<u64> {
    let finders = (Finder::new(b"NVRM"), Finder::new(b"SXid"));
    let size = (end.saturating_sub(start)).min(CHUNK as u64) as usize;
    let mut buf = vec![0u8; size];
    let mut pos = start; // file offset of buf[0]
    let mut filled = 0usize;
    while pos + (filled as u64) < end && !buf.is_empty() {
        let want = (buf.len() - filled).min((end - pos - filled as u64) as usize);
        let n = file.read_at(&mut buf[filled..filled + want], pos + filled as u64)?;
        if n == 0 {
            break;
        }
        filled += n;
        match memchr::memrchr(b'\n', &buf[..filled]) {
            Some(last) => {
                scan_lines(&buf[..=last], pos, &finders, asm, out);
                buf.copy_within(last + 1..filled, 0);
                pos += last as u64 + 1;
                filled -= last + 1;
            }
            None if filled == buf.len() && pos + (filled as u64) < end => {
                // One line longer than the buffer: not a kernel record.
                pos += filled as u64;
                filled = 0;
            }
            None => {}
        }
    }
    Ok(pos)
}

/// Parse, in order, the lines of `chunk` that hold a candidate word.
fn scan_lines(
    chunk: &[u8],
    base: u64,
    finders: &(Finder, Finder),
    asm: &mut Assembler,
    out: &mut LogRead,
) {
    let mut nvrm = finders.0.find_iter(chunk).peekable();
    let mut sxid = finders.1.find_iter(chunk).peekable();
    let mut done_until = 0usize;
    loop {
        let hit = match (nvrm.peek(), sxid.peek()) {
            (Some(&a), Some(&b)) if a <= b => nvrm.next(),
            (Some(_), Some(_)) | (None, Some(_)) => sxid.next(),
            (Some(_), None) => nvrm.next(),
            (None, None) => break,
        };
        let Some(hit) = hit else { break };
        if hit < done_until {
            continue;
        }
        let start = memchr::memrchr(b'\n', &chunk[..hit]).map_or(0, |i| i + 1);
        let end = memchr::memchr(b'\n', &chunk[hit..]).map_or(chunk.len(), |i| hit + i);
        done_until = end + 1;
        if let Some(record) = parse_line(&chunk[start..end]) {
            if let Some(ev) = asm.feed(record, base + start as u64) {
                out.push(ev);
            }
        }
    }
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
    Ok(match last.and_then(unwrap) {
        Some((Stamp::Monotonic { us }, _, _)) => Some(us),
        _ => None,
    })
}
