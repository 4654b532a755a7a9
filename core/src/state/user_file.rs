//! A file at a path the admin chose (`gpu-health report --svg FILE`),
//! written as root. Unlike gpu-health's own files its directory may be
//! anyone's (`/tmp` is a fine place for a chart), so the directory is not
//! checked; instead nothing at FILE is ever opened: the bytes go to a
//! fresh temporary file beside it, created with O_EXCL|O_NOFOLLOW, which
//! is then renamed over FILE. A rename replaces a symlink planted at FILE
//! and never follows it, and a reader sees the old file or the new one,
//! never half of one.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::StateError;

/// Names tried for the temporary file before giving up (another user can
/// take a name in a shared directory; each try is a new name).
const TEMP_TRIES: u32 = 64;

/// Replace the file at `path` with `bytes`, created with `mode` (less the
/// umask). The directory is opened once; the temporary file and the
/// rename are relative to it.
pub fn write_user_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    let unsafe_path = |why: &str| StateError::Unsafe {
        path: path.to_path_buf(),
        why: why.into(),
    };
    let name = path
        .file_name()
        .ok_or_else(|| unsafe_path("not a file path"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir_flags = OFlags::RDONLY
        .union(OFlags::DIRECTORY)
        .union(OFlags::CLOEXEC);
    let dir = rustix::fs::openat(rustix::fs::CWD, parent, dir_flags, Mode::empty())
        .map_err(|e| StateError::io(parent, e.into()))?;
    let flags = OFlags::WRONLY
        .union(OFlags::CREATE)
        .union(OFlags::EXCL)
        .union(OFlags::NOFOLLOW)
        .union(OFlags::CLOEXEC);
    let (tmp, fd) = (0..TEMP_TRIES)
        .find_map(|try_no| {
            // A dot first and `.tmp` last, as the state files' temporaries;
            // not derived from FILE's name, which may be near NAME_MAX.
            let tmp = format!(
                ".gpu-health.{}.{}.{try_no}.tmp",
                std::process::id(),
                nanos()
            );
            match rustix::fs::openat(&dir, tmp.as_str(), flags, Mode::from_raw_mode(mode)) {
                // Someone else's name: try another, never touch theirs.
                Err(e) if e == rustix::io::Errno::EXIST => None,
                other => Some(other.map(|fd| (tmp, fd))),
            }
        })
        .unwrap_or_else(|| Err(rustix::io::Errno::EXIST))
        .map_err(|e| StateError::io(path, e.into()))?;
    let mut file = File::from(fd);
    let written = file.write_all(bytes);
    drop(file);
    let renamed = written
        .and_then(|()| rustix::fs::renameat(&dir, tmp.as_str(), &dir, name).map_err(Into::into));
    if let Err(e) = renamed {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        return Err(StateError::io(path, e));
    }
    Ok(())
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    #[test]
    fn a_symlink_at_the_path_is_replaced_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("passwd");
        std::fs::write(&victim, "root:x:0:0\n").unwrap();
        let chart = d.path().join("chart.svg");
        symlink(&victim, &chart).unwrap();
        write_user_file(&chart, b"<svg/>\n", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0\n");
        let md = std::fs::symlink_metadata(&chart).unwrap();
        assert!(md.file_type().is_file());
        assert_eq!(std::fs::read_to_string(&chart).unwrap(), "<svg/>\n");
        // A dangling symlink likewise; no temporary file is left.
        let dangling = d.path().join("new.svg");
        symlink(d.path().join("nowhere"), &dangling).unwrap();
        write_user_file(&dangling, b"x", 0o600).unwrap();
        assert!(!d.path().join("nowhere").exists());
        assert_eq!(std::fs::metadata(&dangling).unwrap().mode() & 0o777, 0o600);
        let names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn a_world_writable_directory_is_fine_and_errors_say_where() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let shared = d.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let out = shared.join("chart.svg");
        write_user_file(&out, b"one", 0o644).unwrap();
        write_user_file(&out, b"two", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "two");
        // A directory at the path: an error, the directory untouched.
        let dir = shared.join("sub");
        std::fs::create_dir(&dir).unwrap();
        let e = write_user_file(&dir, b"x", 0o644).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: ", dir.display())), "{e}");
        assert!(dir.is_dir());
        let e = write_user_file(&d.path().join("missing/x.svg"), b"x", 0o644)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
        assert!(write_user_file(Path::new("/"), b"x", 0o644).is_err());
    }
}
