//! Where records go: the records file (`state::RecordsDir`), else the
//! spool in the state directory (`StateFile::SpooledRecord`) for records
//! that could not be appended (records directory unwritable, disk full),
//! moved to the records file by a later prolog or epilog.

use std::path::Path;

use crate::ids::JobId;
use crate::state::{RecordsDir, StateDir, StateError, StateFile};

/// Where a record ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Appended,
    Spooled {
        why: String,
    },
    /// Neither worked: the record went to the log only.
    Lost {
        why: String,
    },
}

impl std::fmt::Display for Stored {
    /// `appended`, `spooled (why)`, `lost (why)`: for the log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stored::Appended => write!(f, "appended"),
            Stored::Spooled { why } => write!(f, "spooled ({why})"),
            Stored::Lost { why } => write!(f, "lost ({why})"),
        }
    }
}

fn append(records_dir: &Path, lines: &[String]) -> Result<(), StateError> {
    RecordsDir::open(records_dir)?.append(lines)
}

/// Append one record line, else spool it, else log it in full.
pub fn store_line(
    state: &StateDir,
    records_dir: &Path,
    end_ms: u64,
    job: JobId,
    line: &str,
) -> Stored {
    let why = match append(records_dir, &[line.to_string()]) {
        Ok(()) => return Stored::Appended,
        Err(e) => e.to_string(),
    };
    log::error!("cannot append the record of job {job}, spooling it: {why}");
    match state.save_bytes(StateFile::SpooledRecord { end_ms, job }, line.as_bytes()) {
        Ok(()) => Stored::Spooled { why },
        Err(e) => {
            log::error!("cannot spool the record of job {job} either ({e}); record: {line}");
            Stored::Lost {
                why: format!("{why}; spool: {e}"),
            }
        }
    }
}

/// Move spooled records into the records file. Returns how many were
/// written; a failure leaves them spooled for the next run.
pub fn flush_pending(state: &StateDir, records_dir: &Path) -> Result<usize, StateError> {
    let files = state.spooled()?;
    if files.is_empty() {
        return Ok(0);
    }
    // One flusher at a time (concurrent epilogs would write the same
    // spooled records twice); whoever holds the lock writes them all.
    let Some(_spool_lock) = state.try_lock_spool()? else {
        return Ok(0);
    };
    let mut lines = Vec::new();
    let mut taken = Vec::new();
    for f in state.spooled()? {
        match state.load_bytes(f) {
            Ok(Some(b)) => {
                let text = String::from_utf8_lossy(&b).trim().to_string();
                if serde_json::from_str::<serde_json::Value>(&text).is_ok() && !text.contains('\n')
                {
                    lines.push(text);
                    taken.push(f);
                } else {
                    log::error!(
                        "{}: not a record line, left in place",
                        state.path_of(f).display()
                    );
                }
            }
            Ok(None) => {}
            Err(e) => log::error!("spooled record unreadable, left in place: {e}"),
        }
    }
    if lines.is_empty() {
        return Ok(0);
    }
    append(records_dir, &lines)?;
    // A crash between the append and these removals writes the records
    // twice; the report counts a (job, node, end) once.
    for f in taken {
        if let Err(e) = state.remove(f) {
            log::error!("written but not removed: {e}");
        }
    }
    Ok(lines.len())
}
