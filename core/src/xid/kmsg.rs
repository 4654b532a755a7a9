//! Reader of the live `/dev/kmsg` ring.
//!
//! Each read() returns one record; EAGAIN means the end; EPIPE means the
//! kernel overwrote records before we read them (the next read continues
//! with the oldest record still there). A new open starts at the oldest
//! record and there is no seek to a sequence number: records up to the
//! cursor are read and dropped after looking at their header only.
//! The ring is read through [`KmsgSource`], so tests and benchmarks can
//! use a [`MemoryRing`] instead of the host's device.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use memchr::memmem;

use super::assemble::Assembler;
use super::cursor::Cursor;
use super::log_read::LogRead;
use super::parse::{nvidia_words, parse_line};
use super::policy::Policy;
use super::stamp::TimeContext;

/// The kernel's own limit on one record's text plus its dictionary.
const RECORD_MAX: usize = 8192 + 512;
/// Sequence numbers between a lost-GPU header and its "fallen off"
/// record, or between the lines of an SXid's report.
const FALLEN_OFF_WINDOW_RECORDS: u64 = 4;
/// Stop after this many records even if the kernel keeps logging.
const MAX_RECORDS: u64 = 4_000_000;

/// What one read of the ring gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KmsgRead {
    /// One record of this many bytes is in the buffer.
    Record(usize),
    /// No more records now.
    End,
    /// Records were overwritten before they could be read (EPIPE).
    Overwritten,
}

/// A source of kmsg records: the device, or a stand-in.
pub trait KmsgSource {
    fn read_record(&mut self, buf: &mut [u8]) -> std::io::Result<KmsgRead>;
    /// Go back to the oldest record still in the ring.
    fn rewind(&mut self) -> std::io::Result<()>;
}

/// `/dev/kmsg` (or any character device with its semantics), read only.
pub struct KmsgDevice {
    file: File,
}

impl KmsgDevice {
    pub fn open(path: &Path) -> std::io::Result<KmsgDevice> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        Ok(KmsgDevice { file })
    }
}

impl KmsgSource for KmsgDevice {
    fn read_record(&mut self, buf: &mut [u8]) -> std::io::Result<KmsgRead> {
        loop {
            match self.file.read(buf) {
                Ok(0) => return Ok(KmsgRead::End),
                Ok(n) => return Ok(KmsgRead::Record(n)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(KmsgRead::End),
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    return Ok(KmsgRead::Overwritten)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn rewind(&mut self) -> std::io::Result<()> {
        // SEEK_SET 0 on /dev/kmsg goes to the oldest record.
        self.file.seek(SeekFrom::Start(0)).map(|_| ())
    }
}

/// An in-memory ring of kmsg records, for tests and benchmarks.
#[derive(Debug, Clone, Default)]
pub struct MemoryRing {
    records: Vec<Vec<u8>>,
    next: usize,
    /// Report one EPIPE when reading reaches this record.
    overwritten_at: Option<usize>,
}

impl MemoryRing {
    /// Records from a kmsg dump: one per line; lines starting with a space
    /// (dictionary) belong to the record before them.
    pub fn from_dump(text: &[u8]) -> MemoryRing {
        let mut records: Vec<Vec<u8>> = Vec::new();
        for line in text.split_inclusive(|&b| b == b'\n') {
            match records.last_mut() {
                Some(last) if line.starts_with(b" ") => last.extend_from_slice(line),
                _ => records.push(line.to_vec()),
            }
        }
        MemoryRing {
            records,
            next: 0,
            overwritten_at: None,
        }
    }

    /// Make reading report one EPIPE before record `index`.
    pub fn overwrite_before(mut self, index: usize) -> MemoryRing {
        self.overwritten_at = Some(index);
        self
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

impl KmsgSource for MemoryRing {
    fn read_record(&mut self, buf: &mut [u8]) -> std::io::Result<KmsgRead> {
        if self.overwritten_at == Some(self.next) {
            self.overwritten_at = None;
            return Ok(KmsgRead::Overwritten);
        }
        let Some(rec) = self.records.get(self.next) else {
            return Ok(KmsgRead::End);
        };
        self.next += 1;
        if rec.len() > buf.len() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        buf[..rec.len()].copy_from_slice(rec);
        Ok(KmsgRead::Record(rec.len()))
    }

    fn rewind(&mut self) -> std::io::Result<()> {
        self.next = 0;
        Ok(())
    }
}

/// Sequence number from a record's `prio,seq,` header.
fn record_seq(rec: &[u8]) -> Option<u64> {
    let comma = memchr::memchr(b',', rec)?;
    let rest = &rec[comma + 1..];
    let end = memchr::memchr(b',', rest)?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// Read the ring from `since`. `boot_id` is the current boot's.
pub(crate) fn read_kmsg(
    source: &mut dyn KmsgSource,
    since: Option<&Cursor>,
    boot_id: &str,
    ctx: TimeContext,
    policy: &Policy,
) -> std::io::Result<LogRead> {
    let mut out = LogRead::empty();
    let mut skip_below = match since {
        None => 0,
        Some(Cursor::Kmsg {
            boot_id: b,
            next_seq,
        }) if b == boot_id => *next_seq,
        Some(Cursor::Kmsg { .. }) => {
            out.restart("the node rebooted since the last scan; reading the new boot's kernel log from its start".into());
            0
        }
        Some(Cursor::File { .. } | Cursor::Journal { .. }) => {
            out.restart("the saved cursor is for another kind of kernel log, this one is a kmsg device; reading it from the start".into());
            0
        }
    };
    let mut buf = vec![0u8; RECORD_MAX];
    loop {
        let pass = read_pass(source, &mut buf, skip_below, ctx, policy, &mut out)?;
        match pass {
            Some(next_seq) if skip_below > 0 && next_seq < skip_below => {
                // The ring ends before the cursor: it is not the ring the
                // cursor was taken on. Start over from what is there.
                out.restart(format!(
                    "kernel log cursor (seq {skip_below}) is ahead of the ring (ends at seq {next_seq}); reading the ring from its start"
                ));
                out.clear_events();
                out.lost_records = 0;
                skip_below = 0;
                source.rewind()?;
            }
            Some(next_seq) => {
                note_losses(&mut out);
                out.cursor = Some(Cursor::Kmsg {
                    boot_id: boot_id.to_string(),
                    next_seq: next_seq.max(skip_below),
                });
                return Ok(out);
            }
            None => {
                note_losses(&mut out);
                out.cursor = Some(Cursor::Kmsg {
                    boot_id: boot_id.to_string(),
                    next_seq: skip_below,
                });
                return Ok(out);
            }
        }
    }
}

fn note_losses(out: &mut LogRead) {
    if out.lost_records > 0 {
        out.notes.push(format!(
            "{} kernel log records were overwritten before they could be read (ring buffer wrapped)",
            out.lost_records
        ));
    }
}

/// One pass over the ring; returns the sequence number after the last
/// record seen (`None` for an empty ring).
fn read_pass(
    source: &mut dyn KmsgSource,
    buf: &mut [u8],
    skip_below: u64,
    ctx: TimeContext,
    policy: &Policy,
    out: &mut LogRead,
) -> std::io::Result<Option<u64>> {
    let sxid = memmem::Finder::new(b"SXid");
    let mut asm = Assembler::new(FALLEN_OFF_WINDOW_RECORDS, ctx, policy);
    let mut expected: Option<u64> = (skip_below > 0).then_some(skip_below);
    let mut last: Option<u64> = None;
    let mut overwritten = false;
    for _ in 0..MAX_RECORDS {
        let n = match source.read_record(buf)? {
            KmsgRead::Record(n) => n,
            KmsgRead::End => break,
            KmsgRead::Overwritten => {
                overwritten = true;
                continue;
            }
        };
        let rec = &buf[..n];
        let Some(seq) = record_seq(rec) else { continue };
        last = Some(seq);
        if seq < skip_below {
            // Read before: an SXid just before the cursor owns the detail
            // lines of its report after it.
            if seq + FALLEN_OFF_WINDOW_RECORDS >= skip_below {
                let line = &rec[..memchr::memchr(b'\n', rec).unwrap_or(rec.len())];
                if sxid.find(line).is_some() {
                    if let Some(record) = parse_line(line) {
                        asm.prime(record, seq);
                    }
                }
            }
            continue;
        }
        if let Some(want) = expected {
            if seq > want {
                out.lost_records += seq - want;
            }
        }
        expected = Some(seq + 1);
        // The message is the first line; dictionary lines follow.
        let line_end = memchr::memchr(b'\n', rec).unwrap_or(rec.len());
        let line = &rec[..line_end];
        if nvidia_words(line, false).next().is_none() {
            continue;
        }
        if let Some(record) = parse_line(line) {
            out.add(&mut asm, record, seq);
        }
    }
    if overwritten && out.lost_records == 0 {
        // EPIPE without a visible gap: at least one record was lost.
        out.lost_records = 1;
    }
    // A lost-GPU header logged as a record of its own, its "fallen off"
    // record not yet written: the next scan starts at the header.
    Ok(last.map(|s| asm.holdback(s + 1).unwrap_or(s + 1)))
}
