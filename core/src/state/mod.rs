//! The state contract: every file gpu-health keeps between runs lives
//! under `state_dir`, is named in [`StateFile`] and is opened, checked and
//! written here, for the prolog, the epilog, the admin command and the
//! SPANK plugin alike.
//!
//! - `state_dir` and its subdirectories are opened once per use without
//!   following a symlink, and must be owned by root (or the user running
//!   the admin command) and writable by nobody else;
//! - files are opened relative to their directory's descriptor with
//!   O_NOFOLLOW|O_NONBLOCK, must be regular files of a trusted owner, and
//!   are read up to a cap;
//! - writes are atomic (a temporary file renamed over the old one);
//! - a directory that fails its check is neither read nor written: the
//!   run sees empty state, every write fails with why, and nothing found
//!   there can drain a node or be deleted through it.
//!
//! Files outside `state_dir` that gpu-health reads (configuration) or
//! writes (the Prometheus textfile, the records file) go through the same
//! checks: [`read_regular_file`], [`write_file_atomic`], [`RecordsDir`].

mod dir;
mod files;
mod records;
mod user_file;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub use dir::{DirLock, PrivateDir};
pub use files::StateValue;
pub use files::{StateFile, RECORDS_DIR, RECORDS_FILE};
pub use records::RecordsDir;
pub use user_file::write_user_file;

use crate::ids::JobId;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Unsafe { path: PathBuf, why: String },
    #[error("{path}: corrupt: {why}")]
    Corrupt { path: PathBuf, why: String },
    #[error("state directory {path} is unusable ({why}): nothing is read or written there")]
    Unusable { path: PathBuf, why: String },
    #[error("{path}: lock not obtained within {waited_ms} ms")]
    Busy { path: PathBuf, waited_ms: u64 },
}

impl StateError {
    fn io(path: &Path, source: std::io::Error) -> StateError {
        StateError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// This node's turn (see [`StateDir::lock_run`]); the lock goes with the
/// file descriptor.
#[derive(Debug)]
pub struct RunLock {
    _held: std::fs::File,
}

/// Files gpu-health writes are root's alone.
const FILE_MODE: u32 = 0o600;

/// The node's state directory, opened and checked.
#[derive(Debug)]
pub struct StateDir {
    root: PathBuf,
    dir: Result<PrivateDir, String>,
}

impl StateDir {
    /// Open `root` for a run that writes state (created, mode 0700, when
    /// missing).
    pub fn open(root: &Path) -> StateDir {
        Self::with(root, PrivateDir::open(root, true))
    }

    /// Open `root` for reading only (the SPANK plugin, `gpu-health check`):
    /// a missing directory is empty state, not created.
    pub fn open_existing(root: &Path) -> StateDir {
        Self::with(root, PrivateDir::open(root, false))
    }

    fn with(root: &Path, dir: Result<PrivateDir, StateError>) -> StateDir {
        StateDir {
            root: root.to_path_buf(),
            dir: dir.map_err(|e| match e {
                StateError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    "does not exist".to_string()
                }
                StateError::Io { source, .. } => source.to_string(),
                StateError::Unsafe { why, .. } => why,
                other => other.to_string(),
            }),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Why the directory is not used, when it is not.
    pub fn problem(&self) -> Option<&str> {
        self.dir.as_ref().err().map(String::as_str)
    }

    fn usable(&self) -> Result<&PrivateDir, StateError> {
        self.dir.as_ref().map_err(|why| StateError::Unusable {
            path: self.root.clone(),
            why: why.clone(),
        })
    }

    /// The directory `file` lives in (created when `create`).
    fn dir_of(&self, file: StateFile, create: bool) -> Result<Holder<'_>, StateError> {
        let root = self.usable()?;
        Ok(match file.subdir() {
            None => Holder::Root(root),
            Some(sub) => Holder::Sub(root.subdir(sub, create)?),
        })
    }

    /// The file's bytes; `Ok(None)` when it is missing or the directory is
    /// unusable (a run then sees empty state). Typed files are read with
    /// [`StateDir::load`]; bytes are for what has no type (a spooled record
    /// line, a ledger that could not be read).
    pub(crate) fn load_bytes(&self, file: StateFile) -> Result<Option<Vec<u8>>, StateError> {
        if self.dir.is_err() {
            return Ok(None);
        }
        let dir = match self.dir_of(file, false) {
            Ok(d) => d,
            Err(StateError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        dir.get().read(&file.name(), file.max_bytes())
    }

    /// The value of type `T` kept under `key`, parsed; see
    /// [`StateDir::load_bytes`] for what a missing file or directory gives.
    pub fn load<T: StateValue>(&self, key: T::Key) -> Result<Option<T>, StateError> {
        let file = T::file(key);
        let Some(bytes) = self.load_bytes(file)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Corrupt {
                path: self.path_of(file),
                why: e.to_string(),
            })
    }

    pub(crate) fn save_bytes(&self, file: StateFile, bytes: &[u8]) -> Result<(), StateError> {
        if bytes.len() as u64 > file.max_bytes() {
            return Err(StateError::Corrupt {
                path: self.path_of(file),
                why: format!(
                    "{} bytes to write, more than its cap of {}",
                    bytes.len(),
                    file.max_bytes()
                ),
            });
        }
        let dir = self.dir_of(file, true)?;
        dir.get()
            .write_atomic(&file.name(), bytes, FILE_MODE, file.durable())
    }

    /// Replace the value of type `T` kept under `key` (atomically).
    pub fn save<T: StateValue>(&self, key: T::Key, value: &T) -> Result<(), StateError> {
        let file = T::file(key);
        let bytes = serde_json::to_vec(value).map_err(|e| StateError::Corrupt {
            path: self.path_of(file),
            why: e.to_string(),
        })?;
        self.save_bytes(file, &bytes)
    }

    /// Remove the file; `Ok(false)` when it was not there.
    pub fn remove(&self, file: StateFile) -> Result<bool, StateError> {
        match self.dir_of(file, false) {
            Ok(dir) => dir.get().remove(&file.name()),
            Err(StateError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Rename `from` to `to` (both in `state_dir` itself), replacing `to`;
    /// a symlink is renamed, never followed.
    pub fn rename(&self, from: StateFile, to: StateFile) -> Result<(), StateError> {
        if from.subdir().is_some() || to.subdir().is_some() {
            return Err(StateError::Unsafe {
                path: self.path_of(from),
                why: "only files of the state directory itself are renamed".into(),
            });
        }
        self.usable()?.rename(&from.name(), &to.name())
    }

    /// Read, change and write the value of type `T` under `key` with the
    /// directory's lock held, for files that several runs of a node write
    /// outside their turn (the recent job records). `change` gets the
    /// current value (or `None`, also for an unreadable file, whose error
    /// is logged) and returns the new one (`None` removes the file) and a
    /// result.
    pub fn update<T, R>(
        &self,
        key: T::Key,
        change: impl FnOnce(Option<T>) -> (Option<T>, R),
    ) -> Result<R, StateError>
    where
        T: StateValue,
    {
        let root = self.usable()?;
        let _lock = root.lock()?;
        let current = self.load::<T>(key).unwrap_or_else(|e| {
            log::warn!("{e}; replacing it");
            None
        });
        let (next, result) = change(current);
        match next {
            Some(v) => self.save(key, &v)?,
            None => {
                self.remove(T::file(key))?;
            }
        }
        Ok(result)
    }

    /// Take this node's turn: the lock that makes the runs of one node
    /// (prolog, epilog, health check, resume) decide, act and commit one
    /// after the other. Waits at most `wait`; held until the returned
    /// guard is dropped. When the directory is unusable the lock is
    /// `run.lock` in `fallback` (`run_lock_dir`, created 0700 and checked
    /// as the state directory): such runs keep no state, but each still
    /// claims and drains in Slurm, and runs at once would race there.
    /// `Ok(None)` only when neither can be used (logged: the run goes on
    /// without its turn rather than hold a job start).
    pub fn lock_run(&self, wait: Duration, fallback: &Path) -> Result<Option<RunLock>, StateError> {
        if self.dir.is_ok() {
            match self.lock_file(StateFile::RunLock, wait) {
                // Read-only, full: the lock file cannot be made there.
                Err(StateError::Io { path, source }) => log::warn!(
                    "cannot open the run lock {}: {source}; taking the one in {}",
                    path.display(),
                    fallback.display()
                ),
                other => return other,
            }
        }
        let dir = match PrivateDir::open(fallback, true) {
            Ok(d) => d,
            Err(e) => {
                log::error!(
                    "no run lock: the state directory {} is unusable and so is run_lock_dir ({e}); \
                     runs of this node do not take turns",
                    self.root.display()
                );
                return Ok(None);
            }
        };
        dir.lock_file(&StateFile::RunLock.name(), FILE_MODE, wait)
            .map(|f| Some(RunLock { _held: f }))
    }

    /// Take the lock `file` (a lock file of the state directory), waiting
    /// at most `wait`; `Ok(None)` when the directory is unusable.
    pub fn lock_file(
        &self,
        file: StateFile,
        wait: Duration,
    ) -> Result<Option<RunLock>, StateError> {
        let Ok(root) = self.usable() else {
            return Ok(None);
        };
        root.lock_file(&file.name(), FILE_MODE, wait)
            .map(|f| Some(RunLock { _held: f }))
    }

    /// Spooled job records, oldest first.
    pub fn spooled(&self) -> Result<Vec<StateFile>, StateError> {
        let Ok(root) = self.usable() else {
            return Ok(Vec::new());
        };
        let spool = match root.subdir(files::SPOOL_DIR, false) {
            Ok(d) => d,
            Err(StateError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(e),
        };
        let mut found: Vec<StateFile> = spool
            .list()?
            .into_iter()
            .filter_map(|(name, _)| StateFile::parse_spooled(&name))
            .collect();
        found.sort_by_key(|f| match f {
            StateFile::SpooledRecord { end_ms, job } => (*end_ms, *job),
            _ => (0, JobId::from(0)),
        });
        Ok(found)
    }

    /// The spool's lock: one run at a time moves spooled records (two
    /// would write them twice). `Ok(None)` when another run holds it.
    pub fn try_lock_spool(&self) -> Result<Option<PrivateDir>, StateError> {
        let spool = self.usable()?.subdir(files::SPOOL_DIR, false)?;
        Ok(spool.try_lock_held()?.then_some(spool))
    }

    /// Jobs whose start snapshot is older than `max_age` (their epilog
    /// never ran: node crash, Epilog not configured).
    pub fn stale_job_starts(&self, max_age: Duration) -> Vec<JobId> {
        self.job_files(StateFile::parse_job_start, Some(max_age))
    }

    /// Jobs with a start snapshot: the jobs running on this node (and
    /// any whose epilog never ran).
    pub fn job_starts(&self) -> Vec<JobId> {
        self.job_files(StateFile::parse_job_start, None)
    }

    /// Jobs with power peaks.
    pub fn job_power_peaks(&self) -> Vec<JobId> {
        self.job_files(StateFile::parse_job_power, None)
    }

    /// The jobs of the per-job files that `parse` names, older than
    /// `max_age` when given.
    fn job_files(&self, parse: fn(&str) -> Option<JobId>, max_age: Option<Duration>) -> Vec<JobId> {
        let Ok(Holder::Sub(jobs)) = self.dir_of(StateFile::JobStart(JobId::from(0)), false) else {
            return Vec::new();
        };
        let now = SystemTime::now();
        jobs.list()
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, mtime)| {
                max_age.is_none_or(|max| now.duration_since(*mtime).is_ok_and(|age| age > max))
            })
            .filter_map(|(name, _)| parse(&name))
            .collect()
    }

    /// Where `file` is, for messages.
    pub fn path_of(&self, file: StateFile) -> PathBuf {
        let mut p = self.root.clone();
        if let Some(sub) = file.subdir() {
            p.push(sub);
        }
        p.push(file.name());
        p
    }

    /// The records directory when the configuration names none.
    pub fn default_records_dir(state_dir: &Path) -> PathBuf {
        state_dir.join(RECORDS_DIR)
    }
}

enum Holder<'a> {
    Root(&'a PrivateDir),
    Sub(PrivateDir),
}

impl Holder<'_> {
    fn get(&self) -> &PrivateDir {
        match self {
            Holder::Root(d) => d,
            Holder::Sub(d) => d,
        }
    }
}

/// Read a regular file an admin gave gpu-health (its configuration):
/// symlinks are followed (configuration management links files), but
/// the file itself must be a regular file of at most `max` bytes, opened
/// without blocking (a FIFO is an error, never a hang). `Ok(None)` when
/// it does not exist.
pub fn read_regular_file(path: &Path, max: u64) -> Result<Option<Vec<u8>>, StateError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    match file {
        Ok(f) => dir::read_checked(f, path, max, false).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StateError::io(path, e)),
    }
}

/// Replace a file outside `state_dir` atomically, e.g. the Prometheus
/// textfile (`mode` 0644 so node_exporter, not root, can read it). Its
/// directory must exist and pass the same checks as `state_dir`.
pub fn write_file_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(StateError::Unsafe {
            path: path.to_path_buf(),
            why: "not a file path".into(),
        });
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    PrivateDir::open(parent, false)?.write_atomic(name, bytes, mode, false)
}

#[cfg(test)]
mod tests;
