//! The node scan of the prolog and health check: read from the node's
//! saved state, judge by the policy, hand back findings and the state to
//! save once the run has acted on them.

use std::collections::HashSet;
use std::path::Path;

use crate::config::{PolicyAction, XidConfig};

use super::catalog::{sxid_is_fatal, sxid_meaning, xid_meaning};
use super::cursor::{Cursor, XidState};
use super::event::{EventKind, XidEvent};
use super::history::RepeatHistory;
use super::policy::Policy;
use super::read::{read_source, LogSource};
use crate::finding::{Action, Finding};
use crate::snapshot::NodeSnapshot;

/// What a scan found. Nothing has been written: the caller saves `state`
/// only once the findings have been acted on (or kept as pending), so
/// that a run that could not act sees the same Xids again next time.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanOutcome {
    /// The events judged (after the first run's look-back), in log order.
    pub events: Vec<XidEvent>,
    /// One finding per (code, device), gravest action of its events.
    pub findings: Vec<Finding>,
    /// Cursor and repeat history to save after acting.
    pub state: XidState,
    /// For the log: wrapped ring, reboot, rotation, corrupt cursor...
    pub notes: Vec<String>,
    /// Events older than the look-back, not judged (first run only).
    pub skipped_old: usize,
    pub lost_records: u64,
}

impl ScanOutcome {
    pub fn cursor(&self) -> Option<&Cursor> {
        self.state.cursor.as_ref()
    }
}

/// Scan `kernel_log` from `state` (see [`XidState::checked`]). Never
/// fails: an unreadable log is a warning finding (`kernel log
/// unreadable`) and the state stays as it was.
pub fn scan(
    kernel_log: &Path,
    state: XidState,
    cfg: &XidConfig,
    snapshot: &NodeSnapshot,
    now_ms: u64,
) -> ScanOutcome {
    scan_source(LogSource::Path(kernel_log), state, cfg, snapshot, now_ms)
}

/// [`scan`] for any [`LogSource`].
pub fn scan_source(
    source: LogSource<'_>,
    mut state: XidState,
    cfg: &XidConfig,
    snapshot: &NodeSnapshot,
    now_ms: u64,
) -> ScanOutcome {
    let mut notes: Vec<String> = Vec::new();
    let read = match read_source(source, state.cursor.as_ref(), cfg, snapshot, now_ms) {
        Ok(r) => r,
        Err(e) => {
            let message =
                format!("kernel log unreadable: {e}; Xids are not being checked on this node");
            log::warn!("{message}");
            notes.push(message.clone());
            let finding =
                Finding::node("xid", Action::Warn, "kernel log unreadable".into(), message);
            return ScanOutcome {
                events: Vec::new(),
                findings: vec![finding],
                state,
                notes,
                skipped_old: 0,
                lost_records: 0,
            };
        }
    };
    notes.extend(read.notes);
    let mut events = read.events;
    let mut skipped_old = 0;
    if state.cursor.is_none() {
        let before = events.len();
        let lookback_ms = u64::from(cfg.lookback_hours) * 3_600_000;
        events.retain(|ev| within_lookback(ev, lookback_ms, now_ms, read.last_monotonic_us));
        skipped_old = before - events.len();
        if skipped_old > 0 {
            notes.push(format!(
                "first scan: {skipped_old} Xid events older than {} h not judged",
                cfg.lookback_hours
            ));
        }
    }
    let policy = Policy::from_config(cfg);
    let findings = judge(&events, &policy, &mut state.history, now_ms);
    let longest_window = cfg
        .rules
        .values()
        .map(|r| u64::from(r.window_minutes))
        .max()
        .unwrap_or(60)
        .max(60);
    state.history.prune(now_ms, longest_window * 60_000);
    if read.cursor.is_some() {
        state.cursor = read.cursor;
    }
    ScanOutcome {
        events,
        findings,
        state,
        notes,
        skipped_old,
        lost_records: read.lost_records,
    }
}

/// Whether an event is younger than the look-back. Records without a wall
/// time are dated from the file's last monotonic stamp when there is one
/// (a lower bound of their age); otherwise they are judged.
fn within_lookback(
    ev: &XidEvent,
    lookback_ms: u64,
    now_ms: u64,
    last_mono_us: Option<u64>,
) -> bool {
    if let Some(t) = ev.time_ms {
        return t.saturating_add(lookback_ms) >= now_ms;
    }
    match (ev.monotonic_us, last_mono_us) {
        (Some(at), Some(last)) => last.saturating_sub(at) / 1000 <= lookback_ms,
        _ => true,
    }
}

/// Findings for `events` by `policy`; repeat rules count in `history`.
pub fn judge(
    events: &[XidEvent],
    policy: &Policy,
    history: &mut RepeatHistory,
    now_ms: u64,
) -> Vec<Finding> {
    // A lost GPU often logs both Xid 79 and the "fallen off" text: one
    // finding is enough.
    let xid79: HashSet<Option<&str>> = events
        .iter()
        .filter(|e| e.kind == EventKind::Xid && e.code == 79 && !e.fallen_off_bus)
        .map(|e| e.pci.as_deref())
        .collect();
    let mut groups: Vec<Group> = Vec::new();
    for ev in events {
        // An unaddressed "fallen off" line goes with any Xid 79 beside it.
        if ev.fallen_off_bus
            && (xid79.contains(&ev.pci.as_deref()) || (ev.pci.is_none() && !xid79.is_empty()))
        {
            continue;
        }
        let d = policy.decide(ev);
        if d.action == PolicyAction::Ignore {
            continue;
        }
        let mut repeat = None;
        let action = if d.repeat > 1 {
            let key = format!(
                "{}-{}@{}",
                if ev.kind == EventKind::Xid {
                    "xid"
                } else {
                    "sxid"
                },
                ev.code,
                ev.pci.as_deref().unwrap_or("-")
            );
            let window_ms = u64::from(d.window_minutes) * 60_000;
            let seen = history.record(&key, ev.time_ms.unwrap_or(now_ms), window_ms);
            repeat = Some(format!(
                "{seen} of {} within {} min",
                d.repeat, d.window_minutes
            ));
            if seen >= d.repeat as usize {
                d.action
            } else {
                PolicyAction::Info
            }
        } else {
            d.action
        };
        let Some(action) = action.finding_action() else {
            continue;
        };
        let same = |g: &Group| {
            g.latest.kind == ev.kind
                && g.latest.code == ev.code
                && g.latest.pci == ev.pci
                && g.latest.fallen_off_bus == ev.fallen_off_bus
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => {
                g.count += 1;
                g.latest = ev;
                g.action = g.action.max(action);
                g.repeat = repeat.or(g.repeat.take());
            }
            None => groups.push(Group {
                latest: ev,
                count: 1,
                action,
                repeat,
            }),
        }
    }
    groups.into_iter().map(Group::finding).collect()
}

struct Group<'a> {
    latest: &'a XidEvent,
    count: usize,
    action: Action,
    repeat: Option<String>,
}

impl Group<'_> {
    fn finding(self) -> Finding {
        let ev = self.latest;
        let meaning = match ev.kind {
            EventKind::Xid => xid_meaning(ev.code).unwrap_or("not in gpu-health's catalog"),
            EventKind::Sxid => sxid_meaning(sxid_is_fatal(&ev.message)),
        };
        let mut message = format!("{}: {} ({meaning})", ev.summary(), ev.message);
        if let Some(p) = &ev.process {
            message.push_str(&format!("; process {p}"));
        }
        if self.count > 1 {
            message.push_str(&format!("; {} events since the last check", self.count));
        }
        if let Some(r) = &self.repeat {
            message.push_str(&format!("; repeat rule: {r}"));
        }
        message.push_str(&format!("; action: {}", self.action.as_str()));
        Finding {
            check: match ev.kind {
                EventKind::Xid => "xid",
                EventKind::Sxid => "sxid",
            }
            .to_string(),
            action: self.action,
            gpu: ev.gpu,
            pci: ev.pci.clone(),
            summary: ev.summary(),
            message,
        }
    }
}
