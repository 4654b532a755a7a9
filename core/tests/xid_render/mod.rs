//! How each source writes kernel records, and reading them back through
//! the real readers: shared by the tests of text users can put into the
//! kernel log (`xid_forgery.rs`, `xid_props.rs`).

#![allow(dead_code)]

use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};
use gpu_health_core::xid::{
    parse_line, read_since, read_source, Assembler, EventKind, LogSource, MemoryRing, Policy,
    TimeContext, XidConfig, XidEvent,
};

/// 2026-11-29T14:30:00Z
pub const NOW_MS: u64 = 1_795_962_600_000;

/// The driver's version in the messages below.
const KERNEL_VERSION: &str = "575.51.02";

/// The API-mismatch message of drivers before 575: the client's version
/// string on its first line.
pub fn api_mismatch_old(version: &[u8]) -> Vec<u8> {
    let mut m = b"NVRM: API mismatch: the client has the version ".to_vec();
    m.extend_from_slice(version);
    m.extend_from_slice(
        b", but\nNVRM: this kernel module has the version 470.82.00.  Please\nNVRM: make sure that this kernel module and all NVIDIA driver\nNVRM: components have the same version.",
    );
    m
}

/// The API-mismatch message of drivers from 575: the client's process
/// name and pid, then its version string.
pub fn api_mismatch_new(comm: &[u8], version: &[u8]) -> Vec<u8> {
    let mut m = b"NVRM: API mismatch: the client '".to_vec();
    m.extend_from_slice(comm);
    m.extend_from_slice(b"' (pid 4242)\nNVRM: has the version ");
    m.extend_from_slice(version);
    m.extend_from_slice(
        format!(
            ", but this kernel module has\nNVRM: the version {KERNEL_VERSION}.  Please make sure that this\nNVRM: kernel module and all NVIDIA driver components\nNVRM: have the same version."
        )
        .as_bytes(),
    );
    m
}

/// An Xid record naming a process, as the driver prints it.
pub fn xid_with_name(code: u32, bus: &str, name: &[u8], message: &str) -> Vec<u8> {
    let mut m = format!("NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=2210, name=").into_bytes();
    m.extend_from_slice(name);
    m.extend_from_slice(b", ");
    m.extend_from_slice(message.as_bytes());
    m
}

/// A genuine record every test log ends with: it must still be read.
pub const GENUINE_DBE: &[u8] = b"NVRM: Xid (PCI:0000:c1:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.";

/// Where the log is read from, and how that source writes a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The live /dev/kmsg ring (the in-memory stand-in).
    KmsgRing,
    /// A saved `cat /dev/kmsg`.
    KmsgDump,
    /// `dmesg`: later lines indented.
    Dmesg,
    /// `dmesg -S` (Linux 5.10+): every line with the record's prefix.
    DmesgSamePrefix,
    /// `dmesg -T`, later lines indented.
    DmesgT,
    /// `dmesg -T -S`: every line with the record's (one-second) prefix.
    DmesgTSamePrefix,
    /// `dmesg -x -S`.
    DmesgX,
    /// `dmesg -r -S`.
    DmesgR,
    /// `dmesg --time-format iso`: later lines indented.
    DmesgIso,
    /// `dmesg --decode --time-format iso --force-prefix`: every line with
    /// the record's `kern  :err   : 2026-11-29T14:00:07,000000+00:00 `.
    DmesgDecodeIso,
    /// `dmesg --time-format reltime` (`-e`): `[Nov29 14:00] ` for the first
    /// record of a minute, `[  +0.000001] ` after it; later lines indented.
    DmesgReltime,
    /// `dmesg --time-format delta`: `[<    0.000001>] `, later lines indented.
    DmesgDelta,
    /// `dmesg --notime --decode`: `kern  :err   : `, later lines indented.
    DmesgDecodeNotime,
    /// `dmesg -S` on a kernel with CONFIG_PRINTK_CALLER: the caller id after
    /// the stamp, every line with the record's prefix.
    DmesgCaller,
    /// `dmesg -T -S` in a Polish locale: `[nie lis 29 14:00:07 2026] `.
    DmesgTLocalized,
    /// `journalctl -k` (short) in a Polish locale: `lis 29 14:00:07 gpu017
    /// kernel: `, later lines indented.
    JournalctlShortLocalized,
    /// rsyslog: `#012` for a newline, `#ooo` for other control bytes.
    Syslog,
    /// rsyslog with ISO time stamps.
    SyslogIso,
    /// rsyslog with its escapes off: real newlines, later lines bare.
    SyslogRaw,
    /// rsyslog's imklog reading /proc/kmsg: each line of a record a
    /// syslog line of its own, with the kernel's time stamp.
    SyslogPerLine,
    /// `journalctl -k` (short): later lines indented.
    JournalctlShort,
    /// `journalctl -k -o cat`: the messages alone, later lines bare.
    JournalctlCat,
    /// The journal's entries: one MESSAGE with the record's newlines
    /// (the journal reader parses it as a bare message is parsed).
    JournalEntry,
}

impl Source {
    pub const ALL: [Source; 23] = [
        Source::KmsgRing,
        Source::KmsgDump,
        Source::Dmesg,
        Source::DmesgSamePrefix,
        Source::DmesgT,
        Source::DmesgTSamePrefix,
        Source::DmesgX,
        Source::DmesgR,
        Source::DmesgIso,
        Source::DmesgDecodeIso,
        Source::DmesgReltime,
        Source::DmesgDelta,
        Source::DmesgDecodeNotime,
        Source::DmesgCaller,
        Source::DmesgTLocalized,
        Source::JournalctlShortLocalized,
        Source::Syslog,
        Source::SyslogIso,
        Source::SyslogRaw,
        Source::SyslogPerLine,
        Source::JournalctlShort,
        Source::JournalctlCat,
        Source::JournalEntry,
    ];

    /// The log text of `records`: (µs since boot, message); records of
    /// the same µs share their prefix, the worst case for a reader.
    pub fn render(self, records: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, (us, text)) in records.iter().enumerate() {
            let (secs, frac) = (us / 1_000_000, us % 1_000_000);
            let clock = format!("14:{:02}:{:02}", (secs / 60) % 60, secs % 60);
            let iso = format!("2026-11-29T{clock},{frac:06}+00:00");
            let delta = i
                .checked_sub(1)
                .map_or(0, |p| us.saturating_sub(records[p].0));
            let delta = format!("{}.{:06}", delta / 1_000_000, delta % 1_000_000);
            match self {
                Source::KmsgRing | Source::KmsgDump => {
                    out.extend_from_slice(format!("3,{},{us},-;", 1000 + i).as_bytes());
                    out.extend_from_slice(&escape(text, kmsg_escape));
                    out.extend_from_slice(b"\n SUBSYSTEM=pci\n DEVICE=+pci:0000:c1:00.0\n");
                }
                Source::Dmesg => indented(&mut out, &format!("[{secs:5}.{frac:06}] "), text),
                Source::DmesgSamePrefix => {
                    every_line(&mut out, &format!("[{secs:5}.{frac:06}] "), text)
                }
                Source::DmesgT => indented(&mut out, &format!("[Sun Nov 29 {clock} 2026] "), text),
                Source::DmesgTSamePrefix => {
                    every_line(&mut out, &format!("[Sun Nov 29 {clock} 2026] "), text)
                }
                Source::DmesgX => every_line(
                    &mut out,
                    &format!("kern  :err   : [{secs:5}.{frac:06}] "),
                    text,
                ),
                Source::DmesgR => every_line(&mut out, &format!("<3>[{secs:5}.{frac:06}] "), text),
                Source::DmesgIso => indented(&mut out, &format!("{iso} "), text),
                Source::DmesgDecodeIso => {
                    every_line(&mut out, &format!("kern  :err   : {iso} "), text)
                }
                Source::DmesgReltime => {
                    let prefix = if i == 0 {
                        format!("[Nov29 14:{:02}] ", (secs / 60) % 60)
                    } else {
                        format!("[  +{delta:>8}] ")
                    };
                    indented(&mut out, &prefix, text)
                }
                Source::DmesgDelta => indented(&mut out, &format!("[<{delta:>12}>] "), text),
                Source::DmesgDecodeNotime => indented(&mut out, "kern  :err   : ", text),
                Source::DmesgCaller => {
                    every_line(&mut out, &format!("[{secs:5}.{frac:06}] [  T4242] "), text)
                }
                Source::DmesgTLocalized => {
                    every_line(&mut out, &format!("[nie lis 29 {clock} 2026] "), text)
                }
                Source::JournalctlShortLocalized => {
                    let header = format!("lis 29 {clock} gpu017 kernel: ");
                    if printable(text) {
                        indented(&mut out, &header, text);
                    } else {
                        let blob = format!("{header}[{} blob data]\n", text.len());
                        out.extend_from_slice(blob.as_bytes());
                    }
                }
                Source::Syslog | Source::SyslogIso | Source::SyslogRaw => {
                    let header = if self == Source::SyslogIso {
                        format!("2026-11-29T{clock}.{frac:06}+00:00 gpu017 kernel: ")
                    } else {
                        format!("Nov 29 {clock} gpu017 kernel: ")
                    };
                    out.extend_from_slice(header.as_bytes());
                    let raw = self == Source::SyslogRaw;
                    out.extend_from_slice(&escape(text, |b| rsyslog_escape(b, raw)));
                    out.push(b'\n');
                }
                Source::SyslogPerLine => {
                    let header = format!("Nov 29 {clock} gpu017 kernel: [{secs:5}.{frac:06}] ");
                    let text = escape(text, |b| rsyslog_escape(b, true));
                    for line in text.split(|&b| b == b'\n') {
                        out.extend_from_slice(header.as_bytes());
                        out.extend_from_slice(line);
                        out.push(b'\n');
                    }
                }
                Source::JournalctlShort => {
                    let header = format!("Nov 29 {clock} gpu017 kernel: ");
                    if printable(text) {
                        indented(&mut out, &header, text);
                    } else {
                        let blob = format!("{header}[{} blob data]\n", text.len());
                        out.extend_from_slice(blob.as_bytes());
                    }
                }
                Source::JournalctlCat | Source::JournalEntry => {
                    out.extend_from_slice(text);
                    out.push(b'\n');
                }
            }
        }
        out
    }

    /// Read `records` as this source gives them, through the real reader.
    pub fn read(self, records: &[(u64, Vec<u8>)]) -> Vec<XidEvent> {
        let text = self.render(records);
        let cfg = XidConfig::default();
        if self == Source::JournalEntry {
            let policy = Policy::from_config(&cfg);
            let mut asm = Assembler::new(4, TimeContext::default(), &policy);
            return records
                .iter()
                .enumerate()
                .filter_map(|(i, (_, message))| asm.feed(parse_line(message)?, i as u64))
                .collect();
        }
        if self == Source::KmsgRing {
            let mut ring = MemoryRing::from_dump(&text);
            return read_source(LogSource::Kmsg(&mut ring), None, &cfg, &snapshot(), NOW_MS)
                .unwrap()
                .events;
        }
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, &text).unwrap();
        read_since(file.path(), None, &cfg, &snapshot(), NOW_MS)
            .unwrap()
            .events
    }
}

/// What events say, for comparing.
pub fn said(events: &[XidEvent]) -> Vec<(EventKind, u32, Option<&str>)> {
    events
        .iter()
        .map(|e| (e.kind, e.code, e.pci.as_deref()))
        .collect()
}

/// The node: GPU 1 is the one users try to drain, GPU 5 has the DBE.
pub fn snapshot() -> NodeSnapshot {
    let gpu = |index: u32, pci: &str| GpuSnapshot {
        index,
        pci_bus_id: Some(pci.to_string()),
        ..GpuSnapshot::default()
    };
    NodeSnapshot {
        gpus: vec![
            gpu(1, "0000:18:00.0"),
            gpu(2, "0000:3b:00.0"),
            gpu(5, "0000:c1:00.0"),
        ],
        ..NodeSnapshot::default()
    }
}

fn escape(text: &[u8], one: impl Fn(u8) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for &b in text {
        match one(b) {
            Some(e) => out.extend_from_slice(e.as_bytes()),
            None => out.push(b),
        }
    }
    out
}

/// The kernel's escape of /dev/kmsg text.
fn kmsg_escape(b: u8) -> Option<String> {
    (!(b' '..127).contains(&b) || b == b'\\').then(|| format!("\\x{b:02x}"))
}

/// `dmesg`'s escape of a record's text (newlines start a line).
fn dmesg_escape(b: u8) -> Option<String> {
    (b != b'\n' && !(b' '..127).contains(&b)).then(|| format!("\\x{b:02x}"))
}

/// rsyslog's escape of control bytes (`raw`: newlines kept).
fn rsyslog_escape(b: u8, raw: bool) -> Option<String> {
    (b < b' ' && !(raw && b == b'\n')).then(|| format!("#{b:03o}"))
}

fn printable(text: &[u8]) -> bool {
    std::str::from_utf8(text).is_ok_and(|s| s.chars().all(|c| c == '\n' || !c.is_control()))
}

/// The first line after `prefix`, later lines indented by its width.
fn indented(out: &mut Vec<u8>, prefix: &str, text: &[u8]) {
    out.extend_from_slice(prefix.as_bytes());
    let text = escape(text, dmesg_escape);
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            out.extend(std::iter::repeat_n(b' ', prefix.len()));
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
}

/// Every line after `prefix`.
fn every_line(out: &mut Vec<u8>, prefix: &str, text: &[u8]) {
    let text = escape(text, dmesg_escape);
    for line in text.split(|&b| b == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
        out.push(b'\n');
    }
}
