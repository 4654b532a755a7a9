//! Bounded reads of sysfs attributes and directories.
//!
//! What the kernel shows under /sys is small: a text attribute is at most
//! one page, a directory a few hundred entries. A `sysfs_root` an admin
//! points elsewhere (a fixture, a copy from a sick node) or a file planted
//! there can hold anything: a FIFO whose open waits for a writer forever,
//! a 2 GB file, a directory of millions of entries, a device node. The
//! NCCL derivation runs inside slurmstepd at every step launch, so every
//! read of the fabric and PCI trees goes through here:
//!
//! - a file is refused unless it is a regular file: checked with `stat`
//!   before it is opened (a device is never opened) and again on the open
//!   descriptor (a swap in between is caught); it is opened with
//!   O_NONBLOCK (a FIFO's open returns at once), O_NOCTTY and O_CLOEXEC;
//! - at most [`MAX_ATTR_BYTES`] are read, more is an error;
//! - a listing stops after the given number of entries, more is an error.
//!
//! Symlinks are followed: sysfs is made of them
//! (`class/infiniband/mlx5_0 -> ../../devices/...`); the bound is on what
//! is read. Paths in the errors are shown escaped ([`crate::text::printable`]):
//! the names in them come from the directory listings.

use std::fs::{FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest attribute read: one page is 4 KiB on x86, up to 64 KiB on
/// other architectures.
pub const MAX_ATTR_BYTES: u64 = 64 * 1024;

/// Entries a listing of the fabric's directories may hold (devices of a
/// class, ports of a device, entries of a GID table: a few hundred at
/// most on real hardware).
pub const MAX_DIR_ENTRIES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("{}: {source}", shown(.path))]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {what}, not a regular file", shown(.path))]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{}: larger than {max} bytes", shown(.path))]
    TooLarge { path: PathBuf, max: u64 },
    #[error("{}: not text", shown(.path))]
    NotText { path: PathBuf },
    #[error("{}: more than {max} entries", shown(.path))]
    TooManyEntries { path: PathBuf, max: usize },
}

impl SysfsError {
    /// The file or directory does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, SysfsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Something the kernel never puts in sysfs (a FIFO, a huge file, a
    /// directory where an attribute belongs, binary data, a huge
    /// directory), as opposed to an attribute that is missing or that the
    /// kernel refuses to read (EINVAL for unused GID entries, EACCES).
    pub fn is_anomaly(&self) -> bool {
        !matches!(self, SysfsError::Io { .. })
    }

    fn io(path: &Path, source: std::io::Error) -> SysfsError {
        SysfsError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

fn shown(path: &Path) -> String {
    crate::text::printable(&path.display().to_string()).into_owned()
}

/// What a file that is not a regular file is, for the error.
fn file_kind(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

fn regular(path: &Path, t: FileType) -> Result<(), SysfsError> {
    if t.is_file() {
        Ok(())
    } else {
        Err(SysfsError::NotRegular {
            path: path.to_path_buf(),
            what: file_kind(t),
        })
    }
}

/// The text of the attribute at `path`, trimmed. Never blocks on what is
/// there (see the module documentation).
pub fn read_attr(path: &Path) -> Result<String, SysfsError> {
    let before = std::fs::metadata(path).map_err(|e| SysfsError::io(path, e))?;
    regular(path, before.file_type())?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| SysfsError::io(path, e))?;
    let opened = file.metadata().map_err(|e| SysfsError::io(path, e))?;
    regular(path, opened.file_type())?;
    // One page up front: a sysfs attribute then takes one read and the
    // read that finds its end.
    let mut buf = Vec::with_capacity(4096);
    file.take(MAX_ATTR_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| SysfsError::io(path, e))?;
    if buf.len() as u64 > MAX_ATTR_BYTES {
        return Err(SysfsError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_ATTR_BYTES,
        });
    }
    let text = String::from_utf8(buf).map_err(|_| SysfsError::NotText {
        path: path.to_path_buf(),
    })?;
    Ok(text.trim().to_string())
}

/// The names in directory `dir`, sorted; an error when it holds more than
/// `max` entries (only `max + 1` are read). Names that are not UTF-8 come
/// back with U+FFFD in place of the bad bytes (no caller accepts those).
pub fn list_dir(dir: &Path, max: usize) -> Result<Vec<String>, SysfsError> {
    let mut names: Vec<String> = list_dir_numbered(dir, max)?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.sort();
    Ok(names)
}

/// The entries of `dir` in the order the listing gives them (not sorted),
/// each with its inode number as the listing gives it (no `stat`). In
/// sysfs an entry's number is the kernel object's: a device removed and
/// added again comes back with another one. Bounded as [`list_dir`].
pub fn list_dir_numbered(dir: &Path, max: usize) -> Result<Vec<(String, u64)>, SysfsError> {
    use std::os::unix::fs::DirEntryExt;
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| SysfsError::io(dir, e))? {
        let entry = entry.map_err(|e| SysfsError::io(dir, e))?;
        if entries.len() == max {
            return Err(SysfsError::TooManyEntries {
                path: dir.to_path_buf(),
                max,
            });
        }
        entries.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.ino(),
        ));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_attributes_are_read_and_trimmed() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("state");
        std::fs::write(&p, "4: ACTIVE\n").unwrap();
        assert_eq!(read_attr(&p).unwrap(), "4: ACTIVE");
        let e = read_attr(&t.path().join("missing")).unwrap_err();
        assert!(e.is_not_found() && !e.is_anomaly(), "{e}");
    }

    #[test]
    fn fifo_directory_device_large_and_binary_files_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_attr(&fifo).unwrap_err();
        assert!(e.is_anomaly() && e.to_string().contains("a FIFO"), "{e}");
        let e = read_attr(t.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let e = read_attr(Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");

        let big = t.path().join("big");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_ATTR_BYTES + 1).unwrap();
        let e = read_attr(&big).unwrap_err();
        assert!(e.to_string().contains("larger than 65536 bytes"), "{e}");
        // Exactly the cap is still an attribute (64 KiB pages).
        f.set_len(MAX_ATTR_BYTES).unwrap();
        assert_eq!(read_attr(&big).unwrap().len() as u64, MAX_ATTR_BYTES);

        let bin = t.path().join("bin");
        std::fs::write(&bin, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(read_attr(&bin), Err(SysfsError::NotText { .. })));
    }

    #[test]
    fn listings_are_bounded_and_paths_escaped() {
        let t = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(t.path().join(format!("e{i}")), "").unwrap();
        }
        assert_eq!(list_dir(t.path(), 5).unwrap().len(), 5);
        let e = list_dir(t.path(), 4).unwrap_err();
        assert!(e.is_anomaly() && e.to_string().contains("more than 4 entries"));
        let odd = t.path().join("a\x1b[2Jb");
        std::fs::create_dir(&odd).unwrap();
        let e = read_attr(&odd).unwrap_err().to_string();
        assert!(
            e.contains("a?[2Jb: a directory") && !e.contains('\x1b'),
            "{e}"
        );
        assert!(list_dir(&t.path().join("e0"), 10).is_err());
    }
}
