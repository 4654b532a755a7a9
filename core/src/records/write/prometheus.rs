//! node_exporter textfile: the node's health ([`super::metrics`]), its
//! live power and the figures of its most recent jobs. The list of recent
//! records is kept in the state directory (`StateFile::RecentJobs`); the
//! textfile is replaced by atomic rename, whichever run writes it.

use std::path::Path;

use super::metrics::{self, LivePower};
use crate::records::record::JobRecord;
use crate::state::{StateDir, StateError, StateFile};

/// How many jobs the textfile shows (one series per GPU each: 8-GPU jobs
/// give a few hundred series).
pub const RECENT_JOBS: usize = 16;

/// Rewrite the textfile with `live` (a probe's GPUs and power) folded
/// into the health metrics, and the recent jobs as they are.
pub fn refresh_live(state: &StateDir, textfile: &Path, live: &LivePower) -> Result<(), StateError> {
    let health = metrics::with_probe(state, Some(live))?;
    metrics::write_textfile(state, textfile, &health)
}

/// Add `record` to the recent list and rewrite the textfile (readable by
/// node_exporter, which does not run as root: mode 0644).
pub fn update(
    state: &StateDir,
    textfile: &Path,
    record: &JobRecord,
    live: Option<&LivePower>,
) -> Result<(), StateError> {
    // Locked: concurrent epilogs read, change and write the same list.
    state.update((), |r: Option<Vec<JobRecord>>| {
        let mut recent = r.unwrap_or_default();
        recent.retain(|r| r.job_id != record.job_id);
        recent.push(record.clone());
        if recent.len() > RECENT_JOBS {
            recent.drain(..recent.len() - RECENT_JOBS);
        }
        (Some(recent), ())
    })?;
    let health = metrics::with_probe(state, live).unwrap_or_else(|e| {
        log::warn!("the health metrics are unreadable: {e}");
        metrics::HealthMetrics::default()
    });
    metrics::write_textfile(state, textfile, &health)
}

/// The latest job records of the node, for the textfile.
impl crate::state::StateValue for Vec<JobRecord> {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::RecentJobs
    }
}

/// Pure: the recent jobs' part of the textfile (absent figures have no
/// sample).
pub fn render(records: &[JobRecord]) -> String {
    super::metrics_render::render_jobs(records)
}
