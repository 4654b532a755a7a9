//! Files gpu-health keeps as root: written atomically, never through a
//! symlink, only in directories that root owns and nobody else can write.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

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
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Largest state file we read back (verdicts and snapshots are a few KiB).
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// Create `dir` (mode 0700) if needed and make sure it is a real directory
/// owned by us and not writable by anyone else, so that nobody can plant a
/// file or symlink where we write.
pub fn ensure_private_dir(dir: &Path) -> Result<(), StateError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
        }
        Err(e) => return Err(io(dir)(e)),
        Ok(_) => {}
    }
    let md = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    let unsafe_dir = |why: String| {
        Err(StateError::Unsafe {
            path: dir.to_path_buf(),
            why,
        })
    };
    if !md.file_type().is_dir() {
        return unsafe_dir("not a directory (symlinks are refused)".into());
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if md.uid() != euid {
        return unsafe_dir(format!("owned by uid {}, not {euid}", md.uid()));
    }
    if md.permissions().mode() & 0o022 != 0 {
        return unsafe_dir(format!(
            "group/world writable (mode {:o})",
            md.permissions().mode() & 0o7777
        ));
    }
    Ok(())
}

/// Replace `path` with `bytes` atomically: a fresh temporary file in the
/// same directory (O_EXCL|O_NOFOLLOW, 0600), optionally fsynced, renamed
/// over the target (rename replaces a symlink, never follows it).
pub fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> Result<(), StateError> {
    write_atomic_mode(path, bytes, durable, 0o600)
}

/// [`write_atomic`] with another file mode (e.g. 0644 for a file that an
/// unprivileged reader such as node_exporter must see). The temporary name
/// starts with a dot and ends in `.tmp`, so globs like `*.prom` skip it.
pub fn write_atomic_mode(
    path: &Path,
    bytes: &[u8],
    durable: bool,
    mode: u32,
) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let open = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
    };
    let mut f = match open() {
        Ok(f) => f,
        // Left behind by a run of ours that died with the same pid.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&tmp).map_err(io(&tmp))?;
            open().map_err(io(&tmp))?
        }
        Err(e) => return Err(io(&tmp)(e)),
    };
    let written = f
        .write_all(bytes)
        .and_then(|_| if durable { f.sync_all() } else { Ok(()) });
    drop(f);
    if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    Ok(())
}

/// Read a regular file without following a symlink, at most `max` bytes.
/// `Ok(None)` when it does not exist.
pub fn read_nofollow(path: &Path, max: u64) -> Result<Option<Vec<u8>>, StateError> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    let f: File = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(StateError::Unsafe {
                path: path.to_path_buf(),
                why: "is a symlink".into(),
            })
        }
        Err(e) => return Err(io(path)(e)),
    };
    let md = f.metadata().map_err(io(path))?;
    if !md.file_type().is_file() {
        return Err(StateError::Unsafe {
            path: path.to_path_buf(),
            why: "not a regular file".into(),
        });
    }
    let mut buf = Vec::with_capacity(md.len().min(max) as usize);
    f.take(max + 1).read_to_end(&mut buf).map_err(io(path))?;
    if buf.len() as u64 > max {
        return Err(StateError::Corrupt {
            path: path.to_path_buf(),
            why: format!("larger than {max} bytes"),
        });
    }
    Ok(Some(buf))
}

pub fn save_json<T: Serialize>(path: &Path, value: &T, durable: bool) -> Result<(), StateError> {
    let bytes = serde_json::to_vec(value).map_err(|e| StateError::Corrupt {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    write_atomic(path, &bytes, durable)
}

pub fn load_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateError> {
    match read_nofollow(path, MAX_STATE_BYTES)? {
        None => Ok(None),
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| StateError::Corrupt {
                path: path.to_path_buf(),
                why: e.to_string(),
            }),
    }
}

/// A Slurm job id usable as a file name: digits, optionally `_` and digits
/// (array tasks), nothing that can leave the directory.
pub fn valid_job_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_digit() || b == b'_')
}

/// Where the state files live inside `state_dir`.
pub struct StatePaths {
    pub root: PathBuf,
}

impl StatePaths {
    pub fn new(state_dir: &Path) -> Self {
        StatePaths {
            root: state_dir.to_path_buf(),
        }
    }
    pub fn jobs_dir(&self) -> PathBuf {
        self.root.join("jobs")
    }
    /// The prolog's verdict for a job (read by the SPANK plugin).
    pub fn verdict(&self, job_id: &str) -> PathBuf {
        self.jobs_dir().join(format!("{job_id}.json"))
    }
    /// The most recent node snapshot (topology for the SPANK plugin).
    pub fn node_snapshot(&self) -> PathBuf {
        self.root.join("node-snapshot.json")
    }
    pub fn ecc_history(&self) -> PathBuf {
        self.root.join("ecc-history.json")
    }
    pub fn kernel_log_cursor(&self) -> PathBuf {
        self.root.join("kernel-log-cursor.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        save_json(&p, &vec![1, 2, 3], true).unwrap();
        save_json(&p, &vec![4], false).unwrap();
        assert_eq!(load_json::<Vec<i32>>(&p).unwrap(), Some(vec![4]));
        assert_eq!(load_json::<Vec<i32>>(&d.path().join("none")).unwrap(), None);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary files left: {names:?}");
    }

    #[test]
    fn stale_temporary_file_and_modes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.prom");
        let stale = d.path().join(format!(".a.prom.{}.tmp", std::process::id()));
        std::fs::write(&stale, "left by a dead run").unwrap();
        write_atomic_mode(&p, b"x 1\n", false, 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "x 1\n");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert!(!stale.exists());
        write_atomic(&p, b"y", false).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn planted_symlink_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let p = d.path().join("state.json");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        assert!(matches!(
            read_nofollow(&p, 100),
            Err(StateError::Unsafe { .. })
        ));
        save_json(&p, &1, false).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(&p)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn corrupt_and_oversized_files_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.json");
        std::fs::write(&p, "{\"trunc").unwrap();
        assert!(matches!(
            load_json::<serde_json::Value>(&p),
            Err(StateError::Corrupt { .. })
        ));
        std::fs::write(&p, vec![b' '; 200]).unwrap();
        assert!(matches!(
            read_nofollow(&p, 100),
            Err(StateError::Corrupt { .. })
        ));
    }

    #[test]
    fn private_dir_checks() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("state/sub");
        ensure_private_dir(&s).unwrap();
        assert_eq!(
            std::fs::metadata(&s).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            ensure_private_dir(&s),
            Err(StateError::Unsafe { .. })
        ));
        let link = d.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        assert!(matches!(
            ensure_private_dir(&link),
            Err(StateError::Unsafe { .. })
        ));
    }

    #[test]
    fn job_ids() {
        assert!(valid_job_id("12345"));
        assert!(valid_job_id("12_3"));
        assert!(!valid_job_id("../x"));
        assert!(!valid_job_id(""));
        assert!(!valid_job_id("1 2"));
    }
}
