//! What one read of a kernel log found: the events, where it stopped,
//! and what the caller should hear about the log itself. Shared by the
//! file and /dev/kmsg readers.
//!
//! Memory is bounded in a storm without losing what matters: past
//! [`MAX_EVENTS`] the events are folded into one event per kind of fault
//! (the latest, with the count), first per (code, device, action), then,
//! if a storm names more devices than that leaves room for, per (code,
//! action), then per action. The policy's action is part of every key,
//! so a draining event is never folded away into a milder one.

use std::collections::HashMap;

use super::assemble::Assembler;
use super::cursor::Cursor;
use super::event::{EventKind, XidEvent};
use super::parse::Record;
use crate::config::PolicyAction;

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogRead {
    /// In log order, GPU index and UUID filled from the snapshot.
    pub events: Vec<XidEvent>,
    /// The policy's action for each event (same order), before repeat
    /// rules: what the fold keeps apart.
    actions: Vec<PolicyAction>,
    /// Where the read stopped; `None` only when nothing could be read.
    pub cursor: Option<Cursor>,
    /// Things the caller should log (wrapped ring, rotation, reboot...).
    pub notes: Vec<String>,
    /// Records lost to the ring wrapping before they were read.
    pub lost_records: u64,
    /// The cursor could not be continued (reboot, rotation, truncation,
    /// cursor ahead of the ring): the read started from the beginning.
    pub restarted: bool,
    /// Monotonic stamp of the last line of a file, when it has one (dates
    /// monotonic-only records of a file relative to its end).
    pub last_monotonic_us: Option<u64>,
    /// Events folded into others in a storm (their `count`s say where).
    pub folded_events: u64,
}

/// Bound on the events one read holds (an application can log thousands
/// of Xid 13 a second; the prolog must not run out of memory).
pub const MAX_EVENTS: usize = 20_000;

/// How coarse a fold is.
#[derive(Clone, Copy)]
enum Grain {
    Device,
    Code,
    Action,
}

#[derive(PartialEq, Eq, Hash)]
struct FoldKey {
    action: PolicyAction,
    kind: Option<EventKind>,
    code: Option<u32>,
    pci: Option<String>,
    fallen_off_bus: bool,
    forgeable: bool,
}

impl FoldKey {
    fn of(ev: &XidEvent, action: PolicyAction, grain: Grain) -> FoldKey {
        let device = matches!(grain, Grain::Device);
        let code = !matches!(grain, Grain::Action);
        FoldKey {
            action,
            kind: code.then_some(ev.kind),
            code: code.then_some(ev.code),
            pci: if device { ev.pci.clone() } else { None },
            fallen_off_bus: code && ev.fallen_off_bus,
            forgeable: ev.forgeable,
        }
    }
}

impl LogRead {
    pub(crate) fn empty() -> Self {
        LogRead::default()
    }

    /// Feed a record to `asm`; the event it completes, if any, is added.
    pub(crate) fn add(&mut self, asm: &mut Assembler<'_>, record: Record, position: u64) {
        if let Some(ev) = asm.feed(record, position) {
            let action = asm.action(&ev);
            self.push(ev, action);
        }
    }

    /// Add an event the policy gives `action` (before repeat rules).
    fn push(&mut self, ev: XidEvent, action: PolicyAction) {
        if self.events.len() >= MAX_EVENTS {
            for grain in [Grain::Device, Grain::Code, Grain::Action] {
                self.fold(grain);
                if self.events.len() <= MAX_EVENTS / 2 {
                    break;
                }
            }
        }
        self.events.push(ev);
        self.actions.push(action);
    }

    /// Fold the events into one per key of `grain`: the latest event with
    /// the sum of the counts, where the first of them stood. One folded
    /// across devices keeps no device.
    fn fold(&mut self, grain: Grain) {
        let mut slot: HashMap<FoldKey, usize> = HashMap::new();
        let mut kept: Vec<(XidEvent, PolicyAction)> = Vec::new();
        let events = std::mem::take(&mut self.events);
        let actions = std::mem::take(&mut self.actions);
        for (ev, action) in events.into_iter().zip(actions) {
            let key = FoldKey::of(&ev, action, grain);
            match slot.get(&key) {
                Some(&i) => {
                    let (old, _) = &mut kept[i];
                    let count = old.count + ev.count;
                    let same_device = old.pci == ev.pci;
                    *old = ev;
                    old.count = count;
                    if !same_device {
                        old.pci = None;
                        old.gpu = None;
                        old.uuid = None;
                    }
                }
                None => {
                    slot.insert(key, kept.len());
                    kept.push((ev, action));
                }
            }
        }
        let (events, actions): (Vec<_>, Vec<_>) = kept.into_iter().unzip();
        self.events = events;
        self.actions = actions;
        // The counts add up to every event pushed, folded or not.
        let total: u64 = self.events.iter().map(|e| e.count).sum();
        self.folded_events = total - self.events.len() as u64;
    }

    pub(crate) fn restart(&mut self, note: String) {
        log::info!("{note}");
        self.restarted = true;
        self.notes.push(note);
    }

    /// Forget what was read (the read starts over).
    pub(crate) fn clear_events(&mut self) {
        self.events.clear();
        self.actions.clear();
        self.folded_events = 0;
    }
}
