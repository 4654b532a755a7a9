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

mod forms;
mod split;
mod stamps;
mod wrapper;

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
