//! Reading events from a kernel log between a cursor and now.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::cursor::Cursor;
use super::file::read_file;
use super::journal::{read_journal, JOURNAL};
use super::kmsg::{read_kmsg, KmsgDevice, KmsgSource};
use super::log_read::LogRead;
use super::policy::Policy;
use super::stamp::TimeContext;
use crate::config::XidConfig;
use crate::snapshot::NodeSnapshot;

/// Where to read from.
pub enum LogSource<'a> {
    /// `/dev/kmsg` (a character device: record-per-read mode), a file
    /// (byte-offset mode), told apart by the file type, or `journal`
    /// (the systemd journal's kernel entries).
    Path(&'a Path),
    /// A kmsg ring stand-in (tests, benchmarks).
    Kmsg(&'a mut dyn KmsgSource),
}

/// Events of `kernel_log` after `since` (all of them without a cursor),
/// and the cursor of the end. Does not write anything.
pub fn read_since(
    kernel_log: &Path,
    since: Option<&Cursor>,
    cfg: &XidConfig,
    snapshot: &NodeSnapshot,
    now_ms: u64,
) -> Result<LogRead, XidError> {
    read_source(LogSource::Path(kernel_log), since, cfg, snapshot, now_ms)
}

/// [`read_since`] for any [`LogSource`].
pub fn read_source(
    source: LogSource<'_>,
    since: Option<&Cursor>,
    cfg: &XidConfig,
    snapshot: &NodeSnapshot,
    now_ms: u64,
) -> Result<LogRead, XidError> {
    read_with_policy(
        source,
        since,
        cfg,
        &Policy::from_config(cfg),
        snapshot,
        now_ms,
    )
}

/// [`read_source`] with the policy the caller already built from `cfg`.
pub(crate) fn read_with_policy(
    source: LogSource<'_>,
    since: Option<&Cursor>,
    cfg: &XidConfig,
    policy: &Policy,
    snapshot: &NodeSnapshot,
    now_ms: u64,
) -> Result<LogRead, XidError> {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let mut out = match source {
        LogSource::Path(path) if path == Path::new(JOURNAL) => {
            let ctx = TimeContext {
                boot_ms: None,
                now_ms: now,
            };
            read_journal(cfg, since, ctx, policy).map_err(|source| XidError::Io {
                path: path.to_path_buf(),
                source,
            })?
        }
        LogSource::Path(path) => {
            let io = |source| XidError::Io {
                path: path.to_path_buf(),
                source,
            };
            let meta = std::fs::metadata(path).map_err(io)?;
            match source_kind(&meta) {
                Some(Kind::Kmsg) => {
                    let mut dev = KmsgDevice::open(path).map_err(io)?;
                    read_ring(&mut dev, since, cfg, policy, now).map_err(io)?
                }
                Some(Kind::File) => {
                    let ctx = TimeContext {
                        boot_ms: None,
                        now_ms: now,
                    };
                    read_file(path, since, ctx, policy).map_err(io)?
                }
                None => {
                    return Err(io(std::io::Error::other(
                        "neither /dev/kmsg nor a regular file (a FIFO, a directory or another device is not a kernel log)",
                    )))
                }
            }
        }
        LogSource::Kmsg(ring) => {
            read_ring(ring, since, cfg, policy, now).map_err(|source| XidError::Io {
                path: "<kmsg source>".into(),
                source,
            })?
        }
    };
    if out.folded_events > 0 {
        out.notes.push(format!(
            "Xid storm: {} events folded into {} (the latest of each code, device and action kept, with its count)",
            out.folded_events,
            out.events.len()
        ));
    }
    for ev in &mut out.events {
        ev.attach_gpu(snapshot);
    }
    Ok(out)
}

/// Longest boot id kept (the kernel's is a 36-character UUID).
const MAX_BOOT_ID_CHARS: usize = 64;

/// This boot's id (`boot_id_path`), trimmed; at most a page is read and
/// [`MAX_BOOT_ID_CHARS`] kept. The one reader of it: the kernel-log
/// cursor, the ledger's reboots and the metrics all take it from here.
/// A file users other than root may write is not read (an error): a
/// boot id decides reboots and proofs, which no user may fake.
pub fn read_boot_id(cfg: &XidConfig) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(&cfg.boot_id_path)?;
    if let Some(who) = boot_id_writers(&file.metadata()?) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("it can be written by {who}, so it is not trusted (not read)"),
        ));
    }
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text)?;
    Ok(text.trim().chars().take(MAX_BOOT_ID_CHARS).collect())
}

/// Who other than root may write a boot id file of `meta`, if anyone
/// (`gpu-health config check` says so too).
pub fn boot_id_writers(meta: &std::fs::Metadata) -> Option<String> {
    super::file::others_may_write(meta)
}

fn read_ring(
    source: &mut dyn KmsgSource,
    since: Option<&Cursor>,
    cfg: &XidConfig,
    policy: &Policy,
    now_ms: i64,
) -> std::io::Result<LogRead> {
    let mut notes = Vec::new();
    let boot_id = match read_boot_id(cfg) {
        Ok(s) => s,
        Err(e) => {
            notes.push(format!(
                "cannot read the boot id {}: {e}; reboots cannot be told apart",
                cfg.boot_id_path.display()
            ));
            String::new()
        }
    };
    let boot_ms = match read_uptime_ms(&cfg.uptime_path) {
        Ok(up) => Some(now_ms - up),
        Err(e) => {
            notes.push(format!(
                "cannot read the uptime {}: {e}; kernel log times stay relative to boot",
                cfg.uptime_path.display()
            ));
            None
        }
    };
    let ctx = TimeContext { boot_ms, now_ms };
    let mut out = read_kmsg(source, since, &boot_id, ctx, policy)?;
    notes.append(&mut out.notes);
    out.notes = notes;
    Ok(out)
}

enum Kind {
    Kmsg,
    File,
}

/// /dev/kmsg is character device 1:11; any other device could be read
/// for ever (/dev/zero) or be a disk, and a FIFO blocks.
const KMSG_RDEV: (u64, u64) = (1, 11);

fn source_kind(meta: &std::fs::Metadata) -> Option<Kind> {
    use std::os::unix::fs::MetadataExt;
    let ft = meta.file_type();
    if ft.is_file() {
        return Some(Kind::File);
    }
    let rdev = meta.rdev();
    // glibc's gnu_dev_major/minor encoding.
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (ft.is_char_device() && (major, minor) == KMSG_RDEV).then_some(Kind::Kmsg)
}

/// `/proc/uptime`: `12345.67 54321.00`.
fn read_uptime_ms(path: &Path) -> std::io::Result<i64> {
    let text = std::fs::read_to_string(path)?;
    let first = text.split_whitespace().next().unwrap_or("");
    let secs: f64 = first
        .parse()
        .map_err(|_| std::io::Error::other(format!("not an uptime: {first:?}")))?;
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(std::io::Error::other("negative uptime"));
    }
    Ok((secs * 1000.0) as i64)
}

/// Errors of reading a kernel log (the scan turns them into findings).
#[derive(Debug, thiserror::Error)]
pub enum XidError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}
