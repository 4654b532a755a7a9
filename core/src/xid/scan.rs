//! The node scan of the prolog and health check: read from the node's
//! saved state, judge by the policy, hand back findings and the state to
//! save once the run has acted on them.

use std::path::Path;

use crate::config::XidConfig;

use super::cursor::{Cursor, XidState};
use super::event::XidEvent;
use super::judge::{judge, Seen};
use super::policy::Policy;
use super::read::{read_with_policy, LogSource};
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

/// [`scan`] for any [`LogSource`]: [`read_new`], then [`judge_new`].
pub fn scan_source(
    source: LogSource<'_>,
    state: XidState,
    cfg: &XidConfig,
    snapshot: &NodeSnapshot,
    now_ms: u64,
) -> ScanOutcome {
    let new = read_new(source, &state, cfg, snapshot, now_ms);
    judge_new(&new, state, cfg, now_ms)
}

/// What a scan read: the events after the cursor (after the first run's
/// look-back), and where the read ended. The I/O half of a scan.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecords {
    pub events: Vec<XidEvent>,
    /// Where the read ended (`None`: where it began).
    pub cursor: Option<Cursor>,
    /// Why the log could not be read, when it could not.
    pub unreadable: Option<String>,
    pub notes: Vec<String>,
    pub skipped_old: usize,
    pub lost_records: u64,
}

/// Read what is new in `source` since `state`'s cursor. Never fails.
pub fn read_new(
    source: LogSource<'_>,
    state: &XidState,
    cfg: &XidConfig,
    snapshot: &NodeSnapshot,
    now_ms: u64,
) -> NewRecords {
    // One policy for the read's storm fold and for the judging.
    let policy = Policy::from_config(cfg);
    let read = match read_with_policy(
        source,
        state.cursor.as_ref(),
        cfg,
        &policy,
        snapshot,
        now_ms,
    ) {
        Ok(r) => r,
        Err(e) => {
            let message =
                format!("kernel log unreadable: {e}; Xids are not being checked on this node");
            log::warn!("{message}");
            return NewRecords {
                events: Vec::new(),
                cursor: None,
                unreadable: Some(message.clone()),
                notes: vec![message],
                skipped_old: 0,
                lost_records: 0,
            };
        }
    };
    let mut notes = read.notes;
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
    NewRecords {
        events,
        cursor: read.cursor,
        unreadable: None,
        notes,
        skipped_old,
        lost_records: read.lost_records,
    }
}

/// Pure: the findings of what was read, by the policy, with the repeat
/// rules counted in `state`'s history; and the state to save once the
/// run has acted on them.
pub fn judge_new(
    new: &NewRecords,
    mut state: XidState,
    cfg: &XidConfig,
    now_ms: u64,
) -> ScanOutcome {
    if let Some(message) = &new.unreadable {
        let finding = Finding::node(
            "xid",
            Action::Warn,
            "kernel log unreadable".into(),
            message.clone(),
        );
        return ScanOutcome {
            events: Vec::new(),
            findings: vec![finding],
            state,
            notes: new.notes.clone(),
            skipped_old: 0,
            lost_records: 0,
        };
    }
    if new.events.is_empty() && state.history.is_empty() {
        // Nothing to judge and no repeat history to prune: the healthy
        // path, which then never builds the policy table.
        if new.cursor.is_some() {
            state.cursor = new.cursor.clone();
        }
        return ScanOutcome {
            events: Vec::new(),
            findings: Vec::new(),
            state,
            notes: new.notes.clone(),
            skipped_old: new.skipped_old,
            lost_records: new.lost_records,
        };
    }
    let policy = Policy::from_config(cfg);
    let findings = judge(
        &new.events,
        &policy,
        &mut state.history,
        now_ms,
        Seen::BeforeThisRun,
    );
    let longest_window = u64::from(policy.longest_window_minutes());
    state.history.prune(now_ms, longest_window * 60_000);
    if new.cursor.is_some() {
        state.cursor = new.cursor.clone();
    }
    ScanOutcome {
        events: new.events.clone(),
        findings,
        state,
        notes: new.notes.clone(),
        skipped_old: new.skipped_old,
        lost_records: new.lost_records,
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
