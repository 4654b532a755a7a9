//! The node's health for Prometheus, kept in one small state file
//! (`StateFile::HealthMetrics`, its data in [`super::metrics_state`]) that
//! every run which writes the node_exporter textfile updates, so that each
//! of them can write the whole file: the health (with the fault ledger's
//! drain, pending faults and brake), the live power and the recent jobs
//! ([`super::metrics_render`]).

use std::path::Path;

use super::metrics_render;
pub use super::metrics_state::{
    CheckSeen, CheckView, FindingCount, GpuLabel, GpuPower, HealthMetrics, LivePower, LogPosition,
    PowerView, RunKind, XidCounts, HEALTH_METRICS_VERSION,
};
use crate::config::Config;
use crate::ledger::Ledger;
use crate::records::record::JobRecord;
use crate::state::{self, StateDir, StateError, StateFile};

/// After a check: fold what it saw into the node's health metrics and
/// rewrite the textfile, when one is configured (nothing is kept
/// otherwise). Failures are logged, never fatal.
pub fn after_check(state: &StateDir, config: &Config, seen: &CheckSeen<'_>) {
    let Some(textfile) = &config.prometheus_textfile else {
        return;
    };
    let health = match state.update((), |h: Option<HealthMetrics>| {
        let mut h = h
            .filter(|h| h.version == HEALTH_METRICS_VERSION)
            .unwrap_or_default();
        h.see_check(seen);
        (Some(h.clone()), h)
    }) {
        Ok(h) => h,
        Err(e) => {
            log::warn!("the health metrics were not saved: {e}");
            let mut h = HealthMetrics::default();
            h.see_check(seen);
            h
        }
    };
    if let Err(e) = write_textfile(state, textfile, &health) {
        log::warn!("the Prometheus textfile was not written: {e}");
    }
}

/// The health metrics with `live` folded in and saved (the epilog's
/// probe), or as saved when there is none.
pub(super) fn with_probe(
    state: &StateDir,
    live: Option<&LivePower>,
) -> Result<HealthMetrics, StateError> {
    match live {
        Some(s) => state.update((), |h: Option<HealthMetrics>| {
            let mut h = h
                .filter(|h| h.version == HEALTH_METRICS_VERSION)
                .unwrap_or_default();
            h.see_probe(s);
            (Some(h.clone()), h)
        }),
        None => Ok(state
            .load::<HealthMetrics>(())?
            .filter(|h| h.version == HEALTH_METRICS_VERSION)
            .unwrap_or_default()),
    }
}

/// How long a writer of the textfile waits for another one.
const TEXTFILE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Write the whole textfile: the health (as saved, else `health`), this
/// node's fault ledger, the live power and the recent jobs, all read under
/// the textfile's own lock, so that of runs writing at once (eight
/// epilogs, a health check) the last one writes the latest of everything.
/// Readable by node_exporter (0644).
pub(super) fn write_textfile(
    state: &StateDir,
    textfile: &Path,
    health: &HealthMetrics,
) -> Result<(), StateError> {
    let _turn = state.lock_file(StateFile::TextfileLock, TEXTFILE_WAIT)?;
    let saved = state
        .load::<HealthMetrics>(())
        .ok()
        .flatten()
        .filter(|h| h.version == HEALTH_METRICS_VERSION);
    let health = saved.as_ref().unwrap_or(health);
    let ledger: Option<Ledger> = state.load(()).unwrap_or_else(|e| {
        log::warn!("the fault ledger is unreadable for the metrics: {e}");
        None
    });
    let recent = state.load::<Vec<JobRecord>>(())?.unwrap_or_default();
    let text = metrics_render::render(health, ledger.as_ref(), &recent);
    state::write_file_atomic(textfile, text.as_bytes(), 0o644)
}
