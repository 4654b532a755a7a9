//! Where records go: `<records_dir>/jobs.jsonl`, appended under an flock,
//! and the spool `<state_dir>/pending/` for records that could not be
//! appended (records directory unwritable, disk full).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::state::{self, StateError};

/// The records file inside the records directory.
pub const JOBS_FILE: &str = "jobs.jsonl";

/// A record line is a few KiB; a spooled file far larger is not ours.
const MAX_PENDING_BYTES: u64 = 1 << 20;

/// How long an epilog waits for another one holding the lock.
const LOCK_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{path}: lock not obtained within {waited_ms} ms")]
    LockTimeout { path: PathBuf, waited_ms: u64 },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub fn jobs_file(records_dir: &Path) -> PathBuf {
    records_dir.join(JOBS_FILE)
}

pub fn pending_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("pending")
}

/// Take an exclusive flock on `file`, polling until `wait` has passed (a
/// blocking flock could hang the epilog on a stuck network file system).
pub fn lock_exclusive(file: &File, path: &Path, wait: Duration) -> Result<(), StoreError> {
    let start = Instant::now();
    loop {
        // SAFETY: the fd is open for the lifetime of `file`.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
            _ => return Err(io(path)(e)),
        }
        if start.elapsed() >= wait {
            return Err(StoreError::LockTimeout {
                path: path.to_path_buf(),
                waited_ms: start.elapsed().as_millis() as u64,
            });
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Append lines to `<records_dir>/jobs.jsonl` under its lock, all or
/// nothing: a failed write is cut back off, so that the file only ever
/// holds whole lines.
pub fn append_lines(records_dir: &Path, lines: &[String]) -> Result<(), StoreError> {
    state::ensure_private_dir(records_dir)?;
    let path = jobs_file(records_dir);
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(io(&path))?;
    if !file.metadata().map_err(io(&path))?.file_type().is_file() {
        return Err(StoreError::State(StateError::Unsafe {
            path,
            why: "not a regular file".into(),
        }));
    }
    lock_exclusive(&file, &path, LOCK_WAIT)?;
    let len = file.metadata().map_err(io(&path))?.len();
    let mut buf = String::new();
    // A writer that died mid-line (power loss) left a partial line: end
    // it so that ours starts on its own line.
    if len > 0 && !ends_with_newline(&path, len)? {
        buf.push('\n');
    }
    for l in lines {
        buf.push_str(l);
        buf.push('\n');
    }
    let written = file.write_all(buf.as_bytes()).and_then(|()| file.flush());
    if let Err(e) = written {
        let _ = file.set_len(len);
        return Err(io(&path)(e));
    }
    Ok(())
    // The lock goes with the file descriptor.
}

fn ends_with_newline(path: &Path, len: u64) -> Result<bool, StoreError> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io(path))?;
    f.seek(SeekFrom::Start(len - 1)).map_err(io(path))?;
    let mut last = [0u8; 1];
    f.read_exact(&mut last).map_err(io(path))?;
    Ok(last[0] == b'\n')
}

/// Keep a record line in the spool: `<state_dir>/pending/<end ms>-<job>.json`.
pub fn spool(
    state_dir: &Path,
    end_ms: u64,
    job_id: &str,
    line: &str,
) -> Result<PathBuf, StoreError> {
    let dir = pending_dir(state_dir);
    state::ensure_private_dir(&dir)?;
    let path = dir.join(format!("{end_ms:013}-{job_id}.json"));
    state::write_atomic(&path, line.as_bytes(), true)?;
    Ok(path)
}

/// Spooled files, oldest first.
fn pending_files(state_dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(pending_dir(state_dir)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

/// Move spooled records into the records file. Returns how many were
/// written; a failure leaves them spooled for the next run.
pub fn flush_pending(state_dir: &Path, records_dir: &Path) -> Result<usize, StoreError> {
    let files = pending_files(state_dir);
    if files.is_empty() {
        return Ok(0);
    }
    // One flusher at a time (concurrent epilogs would write the same
    // spooled records twice); whoever holds the lock writes them all.
    let dir = pending_dir(state_dir);
    let Ok(dir_handle) = File::open(&dir) else {
        return Ok(0);
    };
    // SAFETY: the fd is open for the lifetime of `dir_handle`.
    if unsafe { libc::flock(dir_handle.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(0);
    }
    let files = pending_files(state_dir);
    let mut lines = Vec::new();
    let mut taken = Vec::new();
    for p in files {
        match state::read_nofollow(&p, MAX_PENDING_BYTES) {
            Ok(Some(b)) => {
                let text = String::from_utf8_lossy(&b).trim().to_string();
                if serde_json::from_str::<serde_json::Value>(&text).is_ok() && !text.contains('\n')
                {
                    lines.push(text);
                    taken.push(p);
                } else {
                    log::error!("{}: not a record line, left in place", p.display());
                }
            }
            Ok(None) => {}
            Err(e) => log::error!("spooled record unreadable, left in place: {e}"),
        }
    }
    if lines.is_empty() {
        return Ok(0);
    }
    append_lines(records_dir, &lines)?;
    // A crash between the append and these removals writes the records
    // twice; the report counts a (job, node, end) once.
    for p in &taken {
        if let Err(e) = std::fs::remove_file(p) {
            log::error!("{}: written but not removed: {e}", p.display());
        }
    }
    Ok(lines.len())
}

/// Where a record ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Appended,
    Spooled {
        path: PathBuf,
        why: String,
    },
    /// Neither worked: the record went to the log only.
    Lost {
        why: String,
    },
}

/// Append one record line, else spool it, else log it in full.
pub fn store_line(
    state_dir: &Path,
    records_dir: &Path,
    end_ms: u64,
    job_id: &str,
    line: &str,
) -> Stored {
    let appended = append_lines(records_dir, &[line.to_string()]);
    let why = match appended {
        Ok(()) => return Stored::Appended,
        Err(e) => e.to_string(),
    };
    log::error!("cannot append the record of job {job_id}, spooling it: {why}");
    match spool(state_dir, end_ms, job_id, line) {
        Ok(path) => Stored::Spooled { path, why },
        Err(e) => {
            log::error!("cannot spool the record of job {job_id} either ({e}); record: {line}");
            Stored::Lost {
                why: format!("{why}; spool: {e}"),
            }
        }
    }
}
