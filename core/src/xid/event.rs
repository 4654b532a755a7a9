//! The Xid event and the state machine that assembles events from records.

use serde::{Deserialize, Serialize};

use super::parse::{Payload, Record};
use super::stamp::{Stamp, TimeContext};
use crate::snapshot::NodeSnapshot;

/// GPU Xid from the NVIDIA driver, or NVSwitch SXid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Xid,
    Sxid,
}

/// One Xid (or SXid) the kernel logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    pub kind: EventKind,
    pub code: u32,
    /// Reported by the driver's "fallen off the bus" message rather than
    /// an Xid record; `code` is then 79.
    #[serde(default)]
    pub fallen_off_bus: bool,
    /// Normalised `DDDD:BB:DD.F` (the GPU's, or the NVSwitch's for SXids).
    pub pci: Option<String>,
    /// NVML index, when the snapshot knows the address.
    pub gpu: Option<u32>,
    pub uuid: Option<String>,
    pub pid: Option<u32>,
    /// Process name as the driver logged it.
    pub process: Option<String>,
    /// Driver text after the code (and after pid/name).
    pub message: String,
    /// Unix ms of the record, when the log's clock allows it.
    pub time_ms: Option<u64>,
    /// Microseconds since boot, when the record carries them.
    pub monotonic_us: Option<u64>,
    /// `/dev/kmsg` sequence number, when known.
    pub seq: Option<u64>,
}

impl XidEvent {
    /// `Xid 79` or `SXid 12028`.
    pub fn label(&self) -> String {
        match self.kind {
            EventKind::Xid => format!("Xid {}", self.code),
            EventKind::Sxid => format!("SXid {}", self.code),
        }
    }

    /// The finding summary (and drain reason part), e.g.
    /// `Xid 79 GPU5 0000:c1:00.0 pid=2210`.
    pub fn summary(&self) -> String {
        let mut s = self.label();
        if let Some(gpu) = self.gpu {
            s.push_str(&format!(" GPU{gpu}"));
        }
        if let Some(pci) = &self.pci {
            s.push(' ');
            s.push_str(pci);
        }
        if self.fallen_off_bus {
            s.push_str(" fallen off the bus");
        } else if let Some(pid) = self.pid {
            s.push_str(&format!(" pid={pid}"));
        }
        s
    }

    /// Fill GPU index and UUID from the snapshot.
    pub fn attach_gpu(&mut self, snapshot: &NodeSnapshot) {
        if self.kind != EventKind::Xid {
            return;
        }
        if let Some(gpu) = self.pci.as_deref().and_then(|p| snapshot.gpu_by_pci(p)) {
            self.gpu = Some(gpu.index);
            self.uuid = gpu.uuid.clone();
        }
    }
}

struct PendingHeader {
    pci: String,
    position: u64,
}

/// Turns records into events; holds the one piece of cross-line state: a
/// `The NVIDIA GPU <bdf>` header waiting for its "fallen off the bus" line.
pub struct Assembler {
    pending: Option<PendingHeader>,
    /// How far (in the caller's position unit) the fallen-off line may
    /// follow its header.
    window: u64,
    ctx: TimeContext,
}

impl Assembler {
    /// `window`: distance in the unit of the positions passed to
    /// [`Assembler::feed`] (bytes for files, records for /dev/kmsg).
    pub fn new(window: u64, ctx: TimeContext) -> Self {
        Assembler {
            pending: None,
            window,
            ctx,
        }
    }

    /// The event a record completes, if any. `position` must not decrease.
    pub fn feed(&mut self, record: Record, position: u64) -> Option<XidEvent> {
        let Record {
            stamp,
            seq,
            payload,
        } = record;
        match payload {
            Payload::Xid {
                code,
                pci,
                pid,
                process,
                message,
            } => Some(self.event(EventKind::Xid, code, pci, stamp, seq, message, pid, process)),
            Payload::Sxid { code, pci, message } => {
                Some(self.event(EventKind::Sxid, code, pci, stamp, seq, message, None, None))
            }
            Payload::GpuHeader { pci } => {
                self.pending = Some(PendingHeader { pci, position });
                None
            }
            Payload::FallenOff { pci } => {
                let header = self.pending.take().filter(|h| {
                    position.saturating_sub(h.position) <= self.window
                        && !matches!(&pci, Some(p) if *p != h.pci)
                });
                // Without its header (split by a scan boundary, or a
                // driver's own wording) a lost GPU is still a lost GPU.
                let pci = pci.or(header.map(|h| h.pci));
                let mut ev = self.event(
                    EventKind::Xid,
                    79,
                    pci,
                    stamp,
                    seq,
                    "GPU has fallen off the bus and is not responding to commands".into(),
                    None,
                    None,
                );
                ev.fallen_off_bus = true;
                Some(ev)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &self,
        kind: EventKind,
        code: u32,
        pci: Option<String>,
        stamp: Stamp,
        seq: Option<u64>,
        message: String,
        pid: Option<u32>,
        process: Option<String>,
    ) -> XidEvent {
        XidEvent {
            kind,
            code,
            fallen_off_bus: false,
            pci,
            gpu: None,
            uuid: None,
            pid,
            process,
            message,
            time_ms: self.ctx.resolve(&stamp).and_then(|t| u64::try_from(t).ok()),
            monotonic_us: match stamp {
                Stamp::Monotonic { us } => Some(us),
                _ => None,
            },
            seq,
        }
    }
}
