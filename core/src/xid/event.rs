//! The Xid event and the state machine that assembles events from records.

use serde::{Deserialize, Serialize};

use super::log_read::LogRead;
use super::parse::{Origin, Payload, Record};
use super::policy::Policy;
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
    /// Read from a source users can write to (a syslog text file, a log
    /// file others may write): by default it cannot drain a node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forgeable: bool,
    /// How many events of the log this one stands for: more than 1 when
    /// a storm was folded (this is the latest of them).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u64,
}

fn one() -> u64 {
    1
}

fn is_one(n: &u64) -> bool {
    *n == 1
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
        let mut s = self.place();
        if !self.fallen_off_bus {
            if let Some(pid) = self.pid {
                s.push_str(&format!(" pid={pid}"));
            }
        }
        s
    }

    /// What and where, without the process: `Xid 79 GPU5 0000:c1:00.0`.
    pub fn place(&self) -> String {
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
    /// An event came after the header: rereading from the header would
    /// count that event twice.
    passed: bool,
}

/// Turns records into events; holds the one piece of cross-line state: a
/// `The NVIDIA GPU <bdf>` header waiting for its "fallen off the bus" line.
pub struct Assembler {
    pending: Option<PendingHeader>,
    /// How far (in the caller's position unit) the fallen-off line may
    /// follow its header.
    window: u64,
    ctx: TimeContext,
    /// Gives each event its action for the storm fold.
    policy: Policy,
}

impl Assembler {
    /// `window`: distance in the unit of the positions passed to
    /// [`Assembler::feed`] (bytes for files, records for /dev/kmsg).
    pub fn new(window: u64, ctx: TimeContext, policy: Policy) -> Self {
        Assembler {
            pending: None,
            window,
            ctx,
            policy,
        }
    }

    /// [`Assembler::feed`], the event (if any) added to `out`.
    pub(crate) fn feed_into(&mut self, record: Record, position: u64, out: &mut LogRead) {
        if let Some(ev) = self.feed(record, position) {
            let action = self.policy.decide(&ev).action;
            out.push(ev, action);
        }
    }

    /// Where a reader should go on from next time instead of `end`: at a
    /// lost-GPU header still waiting for its "fallen off" part (the rest
    /// of the message may not be written yet), unless an event followed it.
    pub fn holdback(&self, end: u64) -> Option<u64> {
        let h = self.pending.as_ref()?;
        (!h.passed && end.saturating_sub(h.position) <= self.window).then_some(h.position)
    }

    /// The event a record completes, if any. `position` must not decrease.
    pub fn feed(&mut self, record: Record, position: u64) -> Option<XidEvent> {
        let Record {
            stamp,
            seq,
            origin,
            payload,
        } = record;
        let mut ev = self.feed_payload(payload, stamp, seq, position)?;
        ev.forgeable = origin == Origin::SyslogTag;
        if let Some(h) = &mut self.pending {
            h.passed = true;
        }
        Some(ev)
    }

    fn feed_payload(
        &mut self,
        payload: Payload,
        stamp: Stamp,
        seq: Option<u64>,
        position: u64,
    ) -> Option<XidEvent> {
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
                self.pending = Some(PendingHeader {
                    pci,
                    position,
                    passed: false,
                });
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
            forgeable: false,
            count: 1,
        }
    }
}
