//! The line parser: one kernel-log line in, at most one NVIDIA record out.
//!
//! A line is first unwrapped (the format is recognised from the line
//! itself, [`wrapper`]), which also decides whether the kernel wrote it;
//! then the message is matched against the NVIDIA driver's fixed record
//! forms ([`forms`]): only the driver's own wording, anchored at the start
//! of the message, counts; text the driver copies from user space (a
//! client's version string, a process name) is data, never a pattern.
//! [`split`] keeps together the lines a text source printed for one
//! multi-line record. The functions are pure and never panic on any bytes.

mod bytes;
mod forms;
mod split;
mod stamps;
mod wrapper;

use std::iter::Peekable;
use std::sync::LazyLock;

use memchr::memmem::{FindIter, Finder};

use super::stamp::Stamp;

pub(crate) use forms::parse_body;
pub(crate) use split::{SplitRecord, SplitStep};
pub(crate) use wrapper::{unwrap, Wrapper};

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
        /// The MIG GPU instance the driver tied the Xid to
        /// (`(PCI:0000:01:00 GPU-I:05)`).
        gpu_instance: Option<u32>,
        pid: Option<u32>,
        /// The process name: the user's choice, shown, never matched.
        process: Option<String>,
        /// The driver's text after the code (and after pid and name).
        message: String,
    },
    /// `nvidia-nvswitchN: SXid (PCI:0000:05:00.0): 12028, text`.
    Sxid {
        code: u32,
        pci: Option<String>,
        message: String,
    },
    /// A later line of an SXid's report, the driver's `Severity N Engine
    /// instance ...` or `Data {...}` with the same code: part of the SXid
    /// before it, an SXid of its own when that header is not there.
    SxidDetail {
        code: u32,
        pci: Option<String>,
        message: String,
    },
    /// `NVRM: The NVIDIA GPU 0000:b3:00.0`: the first line of the driver's
    /// lost-GPU message, logged as a record of its own.
    GpuHeader { pci: String },
    /// The driver's lost-GPU message outside an Xid record; `pci` when
    /// the record names the GPU itself (a lone last line does not).
    FallenOff { pci: Option<String> },
}

/// Offsets of `NVRM` and `SXid` in `text`, in order: the only places a
/// record of the NVIDIA driver can start. A reader pays this for every
/// byte of the log: one SIMD pass for the two words' rare bytes `V` and
/// `X` (memchr2), each one found then checked in full, costs half of a
/// substring search for each word. In a text with more than one `V` or
/// `X` in 128 bytes that are not the words, it falls back to those two
/// searches ([`NvidiaWords::fell_back`]); `dense` starts with them.
pub(crate) fn nvidia_words(text: &[u8], dense: bool) -> NvidiaWords<'_> {
    let mut words = NvidiaWords {
        text,
        rare: memchr::memchr2_iter(b'V', b'X', text),
        misses_left: 64 + text.len() / 128,
        words: None,
    };
    if dense {
        words.fall_back(0);
    }
    words
}

static NVRM: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"NVRM"));
static SXID: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"SXid"));

/// See [`nvidia_words`].
pub(crate) struct NvidiaWords<'a> {
    text: &'a [u8],
    rare: memchr::Memchr2<'a>,
    /// Candidates that were not the words, left before falling back.
    misses_left: usize,
    /// The fallback: the two words' searches from an offset on.
    words: Option<(
        Peekable<FindIter<'a, 'static>>,
        Peekable<FindIter<'a, 'static>>,
        usize,
    )>,
}

impl Iterator for NvidiaWords<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        loop {
            if let Some((nvrm, sxid, from)) = &mut self.words {
                let hit = match (nvrm.peek(), sxid.peek()) {
                    (Some(a), Some(b)) if a <= b => nvrm.next(),
                    (_, Some(_)) => sxid.next(),
                    (Some(_), None) => nvrm.next(),
                    (None, None) => None,
                };
                return hit.map(|h| h + *from);
            }
            let i = self.rare.next()?;
            if let Some(start) = i.checked_sub(1) {
                let word = self.text.get(start..start + 4);
                if word == Some(b"NVRM") || word == Some(b"SXid") {
                    return Some(start);
                }
            }
            self.misses_left = self.misses_left.saturating_sub(1);
            if self.misses_left == 0 {
                // Every word starting before `i` has been seen (its `V`
                // or `X` came before `i`).
                self.fall_back(i);
            }
        }
    }
}

impl NvidiaWords<'_> {
    /// Whether the text was dense in `V`s and `X`s: the next text of the
    /// same log is searched the other way from its start.
    pub(crate) fn fell_back(&self) -> bool {
        self.words.is_some()
    }

    fn fall_back(&mut self, from: usize) {
        let rest = &self.text[from..];
        self.words = Some((
            NVRM.find_iter(rest).peekable(),
            SXID.find_iter(rest).peekable(),
            from,
        ));
    }
}

/// Parse one line (without or with its trailing newline).
pub fn parse_line(line: &[u8]) -> Option<Record> {
    let u = unwrap(wrapper::trim_newline(line))?;
    let payload = parse_body(u.body)?;
    let origin = match u.wrapper {
        Wrapper::Syslog => Origin::SyslogTag,
        Wrapper::Kmsg | Wrapper::Dmesg | Wrapper::Bare => Origin::Kernel,
    };
    Some(Record {
        stamp: u.stamp,
        seq: u.seq,
        origin,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words' offsets as two substring searches give them.
    fn searched(text: &[u8]) -> Vec<usize> {
        let mut all: Vec<usize> = NVRM.find_iter(text).chain(SXID.find_iter(text)).collect();
        all.sort_unstable();
        all
    }

    #[test]
    fn nvidia_words_are_those_two_searches_find() {
        let mut texts: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"NVRM".to_vec(),
            b"VNVRMSXidX NVRM: Xid SXid".to_vec(),
            b"[ 1.0] NVRM: Xid (PCI:0000:18:00): 79\n[ 2.0] nvidia-nvswitch0: SXid (PCI".to_vec(),
        ];
        // Full of `V`s and `X`s that are not the words: the fallback, with
        // words before, at and after where it starts.
        let mut dense = b"NVRM ".to_vec();
        for i in 0..5000 {
            dense.extend_from_slice(if i % 997 == 0 { b"SXidNVRM" } else { b"VXVX" });
        }
        dense.extend_from_slice(b"NVRMSXid");
        texts.push(dense);
        for text in &texts {
            for dense in [false, true] {
                assert_eq!(
                    nvidia_words(text, dense).collect::<Vec<_>>(),
                    searched(text),
                    "{}",
                    String::from_utf8_lossy(&text[..text.len().min(40)])
                );
            }
        }
        let dense = texts.last().unwrap();
        let mut words = nvidia_words(dense, false);
        words.by_ref().for_each(drop);
        assert!(words.fell_back());
    }
}
