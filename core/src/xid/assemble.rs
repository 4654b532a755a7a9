//! The state machine that turns parsed records into events. Its
//! cross-line state: a lost-GPU header waiting for its "fallen off the
//! bus" part, and the last SXid, whose detail lines (`Severity ...`,
//! `Data {...}`) are part of it. It also gives each event its policy
//! action for the storm fold.

use super::event::{EventKind, XidEvent};
use super::parse::{Origin, Payload, Record};
use super::policy::Policy;
use super::stamp::{Stamp, TimeContext};
use crate::config::PolicyAction;

struct PendingHeader {
    pci: String,
    position: u64,
    /// An event came after the header: rereading from the header would
    /// count that event twice.
    passed: bool,
}

/// The last SXid seen: its detail lines follow it.
struct LastSxid {
    pci: Option<String>,
    code: u32,
    position: u64,
}

/// Turns records into events; holds the cross-line state: a `The NVIDIA
/// GPU <bdf>` header waiting for its "fallen off the bus" line, and the
/// last SXid.
pub struct Assembler<'a> {
    pending: Option<PendingHeader>,
    last_sxid: Option<LastSxid>,
    /// How far (in the caller's position unit) the later part of a
    /// message may follow its first (a fallen-off line its header, an
    /// SXid's detail line the line before it).
    window: u64,
    ctx: TimeContext,
    /// Gives each event its action for the storm fold.
    policy: &'a Policy,
}

impl<'a> Assembler<'a> {
    /// `window`: distance in the unit of the positions passed to
    /// [`Assembler::feed`] (bytes for files, records for /dev/kmsg).
    pub fn new(window: u64, ctx: TimeContext, policy: &'a Policy) -> Self {
        Assembler {
            pending: None,
            last_sxid: None,
            window,
            ctx,
            policy,
        }
    }

    /// The policy's action for an event this assembler made (before
    /// repeat rules): what a storm fold keeps apart.
    pub(crate) fn action(&self, ev: &XidEvent) -> PolicyAction {
        self.policy.decide(ev).action
    }

    /// Where a reader should go on from next time instead of `end`: at a
    /// lost-GPU header still waiting for its "fallen off" part (the rest
    /// of the message may not be written yet), unless an event followed it.
    pub fn holdback(&self, end: u64) -> Option<u64> {
        let h = self.pending.as_ref()?;
        (!h.passed && end.saturating_sub(h.position) <= self.window).then_some(h.position)
    }

    /// Show the assembler a record logged before what is read (the end
    /// of the last scan): it makes no event, but the SXid it may be tells
    /// that detail lines after it are its own, not SXids of their own.
    pub(crate) fn prime(&mut self, record: Record, position: u64) {
        if let Payload::Sxid { code, pci, .. } | Payload::SxidDetail { code, pci, .. } =
            record.payload
        {
            self.last_sxid = Some(LastSxid {
                pci,
                code,
                position,
            });
        }
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
                gpu_instance,
                pid,
                process,
                message,
            } => {
                let mut ev =
                    self.event(EventKind::Xid, code, pci, stamp, seq, message, pid, process);
                ev.gpu_instance = gpu_instance;
                Some(ev)
            }
            Payload::Sxid { code, pci, message } => {
                self.last_sxid = Some(LastSxid {
                    pci: pci.clone(),
                    code,
                    position,
                });
                Some(self.event(EventKind::Sxid, code, pci, stamp, seq, message, None, None))
            }
            Payload::SxidDetail { code, pci, message } => {
                // Part of the SXid just before it (or of an earlier detail
                // line of it); alone (its first line was not read: cut off
                // by a scan, overwritten, rate-limited) it is the SXid.
                let continues = self.last_sxid.as_ref().is_some_and(|s| {
                    s.code == code
                        && s.pci == pci
                        && position.saturating_sub(s.position) <= self.window
                });
                let last = LastSxid {
                    pci: pci.clone(),
                    code,
                    position,
                };
                self.last_sxid = Some(last);
                if continues {
                    return None;
                }
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
            pci,
            pid,
            process,
            time_ms: self.ctx.resolve(&stamp).and_then(|t| u64::try_from(t).ok()),
            monotonic_us: match stamp {
                Stamp::Monotonic { us } => Some(us),
                _ => None,
            },
            seq,
            ..XidEvent::new(kind, code, message)
        }
    }
}
