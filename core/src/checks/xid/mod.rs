//! Xids and SXids of the kernel log (the engine is `crate::xid`: readers,
//! parser, catalog, policy). Gathered in the run's turn: what is new since
//! the node's cursor (`kernel-log-cursor.json`, with the repeat rules'
//! history), from the look-back when the node's fault ledger was lost.
//! Judged by the policy (`[xid]`). The cursor moves in the commit, and
//! only when the run's findings are acted on or kept in the ledger.

use super::{Check, CheckInput, Evidence, Io, Place};
use crate::finding::Finding;
use crate::xid::{self, LogSource, NewRecords, ScanOutcome, XidState};

pub struct Xid;

/// What the run read of the kernel log, and the state it read from.
pub struct Scanned {
    pub new: NewRecords,
    /// The state the read started from (the saved one, checked).
    pub from: XidState,
    /// The state as it was saved (to save only a changed one).
    pub saved: Option<XidState>,
}

impl Scanned {
    /// The judged scan: findings and the state to save.
    pub fn outcome(&self, input: &CheckInput<'_>) -> ScanOutcome {
        xid::judge_new(
            &self.new,
            self.from.clone(),
            &input.config.xid,
            input.now_ms,
        )
    }
}

impl Check for Xid {
    fn name(&self) -> &'static str {
        "xid"
    }
    fn section(&self) -> Option<&'static str> {
        Some("xid")
    }
    fn place(&self) -> Place {
        Place::KernelLog
    }
    fn gather(&self, io: &Io<'_>, evidence: &mut Evidence) {
        let saved = if io.from_lookback {
            Ok(None)
        } else {
            io.state.load::<XidState>(())
        };
        let (from, note) = match &saved {
            Ok(s) => XidState::checked(s.clone()),
            Err(e) => (
                XidState::fresh(),
                Some(format!(
                    "Xid cursor unusable ({e}); starting over with the look-back"
                )),
            ),
        };
        if let Some(n) = note {
            log::warn!("kernel log: {n}");
        }
        let cfg = io.config;
        let source = LogSource::Path(&cfg.kernel_log);
        let new = xid::read_new(source, &from, &cfg.xid, io.snapshot, io.now_ms);
        for n in &new.notes {
            log::warn!("kernel log: {n}");
        }
        evidence.insert(Scanned {
            new,
            from,
            saved: saved.ok().flatten(),
        });
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        input
            .evidence
            .get::<Scanned>()
            .map(|s| s.outcome(input).findings)
            .unwrap_or_default()
    }
    fn commit(&self, io: &Io<'_>, input: &CheckInput<'_>, handled: bool) {
        let Some(scanned) = input.evidence.get::<Scanned>() else {
            return;
        };
        if !handled {
            if !scanned.new.events.is_empty() {
                log::warn!(
                    "kernel log: cursor not moved; the records this run could not act on are read again next time"
                );
            }
            return;
        }
        let state = scanned.outcome(input).state;
        if scanned.saved.as_ref() == Some(&state) {
            return; // nothing new read: the saved cursor stands
        }
        if let Err(e) = io.state.save((), &state) {
            log::error!("cannot save the kernel-log cursor: {e}");
        }
    }
    fn doc(&self) -> &'static str {
        "| `xid`, `sxid` | per [xid-policy.md](xid-policy.md) | a kernel-log Xid or SXid record since the last run (the driver's own records only); an unreadable kernel log warns |"
    }
}
