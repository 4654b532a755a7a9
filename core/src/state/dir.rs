//! A directory gpu-health writes as root, held open by its descriptor:
//! every file in it is opened relative to that descriptor (`openat`) with
//! O_NOFOLLOW, so neither the directory nor a file in it can be swapped
//! for a symlink between the check and the use.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

use super::StateError;

/// Regular files only, opened without following a symlink and without
/// blocking (a FIFO planted under a known name must not hang a run).
const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How long a writer waits for another run holding the directory lock.
const LOCK_WAIT: Duration = Duration::from_secs(2);

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whom gpu-health trusts to own its files: root, or the user running it
/// (the admin command run by hand, the tests).
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == euid()
}

/// A checked, open directory.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    dir: File,
}

impl PrivateDir {
    /// Open `path`, creating it (mode 0700, parents too) when `create` and
    /// it is missing, and check it: a real directory (not a symlink),
    /// owned by root or us, writable by nobody else.
    pub fn open(path: &Path, create: bool) -> Result<PrivateDir, StateError> {
        let opened = rustix::fs::openat(rustix::fs::CWD, path, DIR_FLAGS, Mode::empty());
        let fd = match opened {
            Err(e) if e == rustix::io::Errno::NOENT && create => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(path)
                    .map_err(|e| StateError::io(path, e))?;
                rustix::fs::openat(rustix::fs::CWD, path, DIR_FLAGS, Mode::empty())
            }
            other => other,
        }
        .map_err(|e| open_error(path, e, "directory"))?;
        let dir = PrivateDir {
            path: path.to_path_buf(),
            dir: File::from(fd),
        };
        dir.check()?;
        Ok(dir)
    }

    fn check(&self) -> Result<(), StateError> {
        let md = self
            .dir
            .metadata()
            .map_err(|e| StateError::io(&self.path, e))?;
        if !trusted_owner(md.uid()) {
            return Err(self.unsafe_dir(format!("owned by uid {}, not root", md.uid())));
        }
        if md.mode() & 0o022 != 0 {
            return Err(self.unsafe_dir(format!(
                "group/world writable (mode {:o})",
                md.mode() & 0o7777
            )));
        }
        Ok(())
    }

    fn unsafe_dir(&self, why: String) -> StateError {
        StateError::Unsafe {
            path: self.path.clone(),
            why,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn child(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The subdirectory `name`, created (0700) when `create` and missing,
    /// checked like this one; never through a symlink.
    pub fn subdir(&self, name: &str, create: bool) -> Result<PrivateDir, StateError> {
        let path = self.child(name);
        let opened = rustix::fs::openat(&self.dir, name, DIR_FLAGS, Mode::empty());
        let fd = match opened {
            Err(e) if e == rustix::io::Errno::NOENT && create => {
                match rustix::fs::mkdirat(&self.dir, name, Mode::from_raw_mode(0o700)) {
                    Ok(()) => {}
                    // Made by a concurrent run: fine, it is checked below.
                    Err(e) if e == rustix::io::Errno::EXIST => {}
                    Err(e) => return Err(StateError::io(&path, e.into())),
                }
                rustix::fs::openat(&self.dir, name, DIR_FLAGS, Mode::empty())
            }
            other => other,
        }
        .map_err(|e| open_error(&path, e, "directory"))?;
        let dir = PrivateDir {
            path,
            dir: File::from(fd),
        };
        dir.check()?;
        Ok(dir)
    }

    /// Read the regular file `name`, at most `max` bytes; `Ok(None)` when
    /// it does not exist.
    pub fn read(&self, name: &str, max: u64) -> Result<Option<Vec<u8>>, StateError> {
        let path = self.child(name);
        let file = match rustix::fs::openat(&self.dir, name, READ_FLAGS, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(e) if e == rustix::io::Errno::NOENT => return Ok(None),
            Err(e) => return Err(open_error(&path, e, "file")),
        };
        read_checked(file, &path, max, true).map(Some)
    }

    /// Replace `name` with `bytes` atomically: a fresh temporary file
    /// (O_EXCL|O_NOFOLLOW, `mode`), written, fsynced when `durable`, and
    /// renamed over `name` (a rename replaces a symlink, never follows it).
    pub fn write_atomic(
        &self,
        name: &str,
        bytes: &[u8],
        mode: u32,
        durable: bool,
    ) -> Result<(), StateError> {
        let path = self.child(name);
        // A dot first and `.tmp` last: globs such as `*.prom` skip it.
        let tmp = format!(".{name}.{}.tmp", std::process::id());
        let flags = OFlags::WRONLY
            .union(OFlags::CREATE)
            .union(OFlags::EXCL)
            .union(OFlags::NOFOLLOW)
            .union(OFlags::CLOEXEC);
        let create =
            || rustix::fs::openat(&self.dir, tmp.as_str(), flags, Mode::from_raw_mode(mode));
        let fd = match create() {
            Ok(fd) => fd,
            // Left behind by a run of ours that died with the same pid.
            Err(e) if e == rustix::io::Errno::EXIST => {
                let _ = rustix::fs::unlinkat(&self.dir, tmp.as_str(), AtFlags::empty());
                create().map_err(|e| StateError::io(&path, e.into()))?
            }
            Err(e) => return Err(StateError::io(&path, e.into())),
        };
        // The umask must not narrow a file meant for other readers.
        let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode));
        let mut file = File::from(fd);
        let written =
            file.write_all(bytes)
                .and_then(|()| if durable { file.sync_all() } else { Ok(()) });
        drop(file);
        let renamed = written.and_then(|()| {
            rustix::fs::renameat(&self.dir, tmp.as_str(), &self.dir, name).map_err(Into::into)
        });
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_str(), AtFlags::empty());
            return Err(StateError::io(&path, e));
        }
        if durable {
            // The rename itself reaches the disk with the directory.
            let _ = rustix::fs::fsync(&self.dir);
        }
        Ok(())
    }

    /// Open `name` for appending (created with `mode`), a regular file of a
    /// trusted owner, never through a symlink.
    pub fn open_append(&self, name: &str, mode: u32) -> Result<File, StateError> {
        let path = self.child(name);
        let flags = OFlags::WRONLY
            .union(OFlags::APPEND)
            .union(OFlags::CREATE)
            .union(OFlags::NOFOLLOW)
            .union(OFlags::NONBLOCK)
            .union(OFlags::CLOEXEC);
        let fd = rustix::fs::openat(&self.dir, name, flags, Mode::from_raw_mode(mode))
            .map_err(|e| open_error(&path, e, "file"))?;
        let file = File::from(fd);
        check_regular(&file, &path)?;
        Ok(file)
    }

    /// Open `name` for reading (a regular file of a trusted owner).
    pub fn open_read(&self, name: &str) -> Result<Option<File>, StateError> {
        let path = self.child(name);
        match rustix::fs::openat(&self.dir, name, READ_FLAGS, Mode::empty()) {
            Ok(fd) => {
                let file = File::from(fd);
                check_regular(&file, &path)?;
                Ok(Some(file))
            }
            Err(e) if e == rustix::io::Errno::NOENT => Ok(None),
            Err(e) => Err(open_error(&path, e, "file")),
        }
    }

    /// Remove `name`; `Ok(false)` when it was not there. Never descends
    /// anywhere: the name is resolved in this directory only.
    pub fn remove(&self, name: &str) -> Result<bool, StateError> {
        match rustix::fs::unlinkat(&self.dir, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(e) if e == rustix::io::Errno::NOENT => Ok(false),
            Err(e) => Err(StateError::io(&self.child(name), e.into())),
        }
    }

    /// Rename `from` to `to` in this directory (a symlink is renamed, not
    /// followed).
    pub fn rename(&self, from: &str, to: &str) -> Result<(), StateError> {
        rustix::fs::renameat(&self.dir, from, &self.dir, to)
            .map_err(|e| StateError::io(&self.child(from), e.into()))
    }

    /// Names of the regular files here (not hidden ones: temporaries),
    /// with their modification time.
    pub fn list(&self) -> Result<Vec<(String, std::time::SystemTime)>, StateError> {
        let mut dir = rustix::fs::Dir::read_from(&self.dir)
            .map_err(|e| StateError::io(&self.path, e.into()))?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| StateError::io(&self.path, e.into()))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let stat = rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW);
            let Ok(stat) = stat else { continue };
            if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                != rustix::fs::FileType::RegularFile
            {
                continue;
            }
            let mtime = std::time::UNIX_EPOCH
                + Duration::from_secs(u64::try_from(stat.st_mtime).unwrap_or(0));
            out.push((name.to_string(), mtime));
        }
        Ok(out)
    }

    /// Take the directory's exclusive lock (flock on its descriptor), for
    /// read-change-write updates that concurrent runs must not interleave.
    pub fn lock(&self) -> Result<DirLock<'_>, StateError> {
        let start = Instant::now();
        loop {
            match rustix::fs::flock(&self.dir, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(DirLock { dir: &self.dir }),
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(StateError::io(&self.path, e.into())),
            }
            if start.elapsed() >= LOCK_WAIT {
                return Err(StateError::Busy {
                    path: self.path.clone(),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Open (create, `mode`) the regular file `name` and take its exclusive
    /// lock, waiting at most `wait`; the lock goes with the returned file.
    /// A lock file of its own, not the directory's: a run holding it may
    /// still take the directory's lock for a single update.
    pub fn lock_file(&self, name: &str, mode: u32, wait: Duration) -> Result<File, StateError> {
        let path = self.child(name);
        let flags = OFlags::RDWR
            .union(OFlags::CREATE)
            .union(OFlags::NOFOLLOW)
            .union(OFlags::NONBLOCK)
            .union(OFlags::CLOEXEC);
        let fd = rustix::fs::openat(&self.dir, name, flags, Mode::from_raw_mode(mode))
            .map_err(|e| open_error(&path, e, "file"))?;
        let file = File::from(fd);
        check_regular(&file, &path)?;
        let start = Instant::now();
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(file),
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(StateError::io(&path, e.into())),
            }
            if start.elapsed() >= wait {
                return Err(StateError::Busy {
                    path,
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One try for the lock, without waiting; held until this directory
    /// handle is dropped.
    pub fn try_lock_held(&self) -> Result<bool, StateError> {
        match rustix::fs::flock(&self.dir, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(true),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(false),
            Err(e) => Err(StateError::io(&self.path, e.into())),
        }
    }
}

/// Held while a run updates files of the directory.
pub struct DirLock<'a> {
    dir: &'a File,
}

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.dir, FlockOperation::Unlock);
    }
}

fn open_error(path: &Path, e: rustix::io::Errno, what: &str) -> StateError {
    // O_NOFOLLOW|O_DIRECTORY on a symlink fails with ENOTDIR, on a file
    // symlink with ELOOP: say which it was.
    let symlink = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if e == rustix::io::Errno::LOOP || (e == rustix::io::Errno::NOTDIR && symlink) {
        StateError::Unsafe {
            path: path.to_path_buf(),
            why: "is a symlink (refused)".into(),
        }
    } else if e == rustix::io::Errno::NOTDIR {
        StateError::Unsafe {
            path: path.to_path_buf(),
            why: format!("not a {what}"),
        }
    } else {
        StateError::io(path, e.into())
    }
}

/// A regular file owned by root or us and writable by nobody else.
fn check_regular(file: &File, path: &Path) -> Result<std::fs::Metadata, StateError> {
    let md = file.metadata().map_err(|e| StateError::io(path, e))?;
    let why = if !md.file_type().is_file() {
        Some("not a regular file".to_string())
    } else if !trusted_owner(md.uid()) {
        Some(format!("owned by uid {}, not root", md.uid()))
    } else if md.mode() & 0o022 != 0 {
        Some(format!(
            "group/world writable (mode {:o})",
            md.mode() & 0o7777
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(StateError::Unsafe {
            path: path.to_path_buf(),
            why,
        }),
        None => Ok(md),
    }
}

/// Read an opened file after checking it: a regular file (and, when
/// `owned`, one of a trusted owner, writable by nobody else) of at most
/// `max` bytes.
pub(crate) fn read_checked(
    file: File,
    path: &Path,
    max: u64,
    owned: bool,
) -> Result<Vec<u8>, StateError> {
    let md = if owned {
        check_regular(&file, path)?
    } else {
        let md = file.metadata().map_err(|e| StateError::io(path, e))?;
        if !md.file_type().is_file() {
            return Err(StateError::Unsafe {
                path: path.to_path_buf(),
                why: "not a regular file".into(),
            });
        }
        md
    };
    if md.len() > max {
        return Err(too_large(path, max));
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| StateError::io(path, e))?;
    if buf.len() as u64 > max {
        return Err(too_large(path, max));
    }
    Ok(buf)
}

fn too_large(path: &Path, max: u64) -> StateError {
    StateError::Corrupt {
        path: path.to_path_buf(),
        why: format!("larger than {max} bytes"),
    }
}
