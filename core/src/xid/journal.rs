//! Reader of the systemd journal's kernel records (`kernel_log =
//! "journal"`), through `journalctl`.
//!
//! Only `_TRANSPORT=kernel` entries are asked for: journald sets that
//! field itself for what it reads from /dev/kmsg, so no user can forge
//! one (unlike a syslog text line's `kernel:` tag). The cursor is the
//! journal's own: `--after-cursor` seeks to it through the journal's
//! index, so a scan costs the same however long the history is and never
//! rereads an old record.
//!
//! Bounded work per run, progress on any backlog: journalctl's output is
//! read line by line as it comes; once [`READ_BYTES`] are in, journalctl is
//! killed and the cursor is that of the last entry read (the rest is read
//! next time). A read cut short by `journal_timeout_ms` keeps what it read
//! the same way; only a read that got no entry at all fails. Where
//! journalctl cannot filter (`--grep` needs PCRE2), or its filter finds
//! nothing in time (a long backlog without NVIDIA records), the same run
//! reads without the filter and picks the NVIDIA records itself.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::assemble::Assembler;
use super::cursor::Cursor;
use super::log_read::LogRead;
use super::parse::{parse_body, Origin, Record};
use super::policy::Policy;
use super::stamp::{Stamp, TimeContext};
use crate::config::XidConfig;
use crate::process::{self, Ended, Flow, Line, RunError};

/// The spelling of `kernel_log` that selects this reader.
pub const JOURNAL: &str = "journal";

/// journalctl output one read takes at most (about 150,000 entries; some
/// 2 s of journalctl's time on a slow machine); a backlog beyond is read
/// by the next runs.
pub(crate) const READ_BYTES: usize = 64 << 20;
/// A kernel record's text is at most 8 KiB; anything longer is not one.
const MAX_MESSAGE: usize = 16 << 10;
/// The longest journalctl line read: an entry whose message is as long as
/// a kernel record may be, written as JSON numbers (up to four bytes a
/// byte), plus its other fields. A longer line is no kernel record and is
/// skipped.
const MAX_LINE: usize = 4 * MAX_MESSAGE + (4 << 10);
/// Entries between a lost-GPU header and its "fallen off" entry.
const FALLEN_OFF_WINDOW_ENTRIES: u64 = 4;
/// The share of `journal_timeout_ms` (in quarters) the filtered read may
/// take before the rest of the time goes to reading without the filter.
const GREP_SHARE_QUARTERS: u32 = 3;

/// Read the journal's kernel entries after `since`; without a cursor,
/// those of the last `lookback_ms`.
pub(crate) fn read_journal(
    cfg: &XidConfig,
    since: Option<&Cursor>,
    ctx: TimeContext,
    policy: &Policy,
) -> std::io::Result<LogRead> {
    read_journal_bounded(cfg, since, ctx, policy, READ_BYTES)
}

/// [`read_journal`], taking at most `max_bytes` of journalctl's output.
pub(crate) fn read_journal_bounded(
    cfg: &XidConfig,
    since: Option<&Cursor>,
    ctx: TimeContext,
    policy: &Policy,
    max_bytes: usize,
) -> std::io::Result<LogRead> {
    let lookback_ms = u64::from(cfg.lookback_hours) * 3_600_000;
    let since_ms = (ctx.now_ms.max(0) as u64).saturating_sub(lookback_ms);
    let mut reader = Reader {
        out: LogRead::empty(),
        asm: Assembler::new(FALLEN_OFF_WINDOW_ENTRIES, ctx, policy),
        after: None,
        end_cursor: None,
        position: 0,
        entries: 0,
        bytes: 0,
        max_bytes,
        long_lines: 0,
    };
    reader.after = match since {
        Some(Cursor::Journal { cursor }) => Some(cursor.clone()),
        Some(_) => {
            reader.out.restart(
                "the saved cursor is for another kind of kernel log; reading the journal's look-back"
                    .into(),
            );
            None
        }
        None => None,
    };
    let timeout = Duration::from_millis(cfg.journal_timeout_ms);
    let started = Instant::now();
    let deadline = started + timeout;
    let grep_deadline = started + timeout * GREP_SHARE_QUARTERS / 4;
    let mut filter = Filter::Grep;
    let mut restarted = false;
    loop {
        // The filtered read must show an entry within its share of the
        // time; once one has come, it may use all of it.
        let pass_deadline = if filter == Filter::Grep && reader.entries == 0 {
            grep_deadline
        } else {
            deadline
        };
        let end = journalctl(cfg, filter, since_ms, pass_deadline, &mut reader);
        let got = reader.entries;
        match end {
            PassEnd::Complete => break,
            PassEnd::Full => {
                reader.out.notes.push(format!(
                    "journal: read {:.1} MiB of kernel entries ({} entries), this run's share; \
                     the rest is read next time",
                    reader.bytes as f64 / f64::from(1 << 20),
                    got
                ));
                break;
            }
            PassEnd::TimedOut if got > 0 && Instant::now() < deadline => {
                // Cut at the filtered read's share: go on from the last
                // entry with the rest of the time.
            }
            PassEnd::TimedOut if got > 0 => {
                reader.out.notes.push(format!(
                    "journal: journalctl did not finish within {} ms (journal_timeout_ms); \
                     kept the {got} entries read, the rest is read next time",
                    cfg.journal_timeout_ms
                ));
                break;
            }
            PassEnd::TimedOut if filter == Filter::Grep => {
                reader.out.notes.push(format!(
                    "journal: journalctl --grep found nothing within {} ms (a long backlog \
                     without NVIDIA records); reading on without the filter so that the \
                     cursor moves",
                    (grep_deadline - started).as_millis()
                ));
                filter = Filter::Plain;
            }
            PassEnd::TimedOut => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} read no entry within {} ms (journal_timeout_ms)",
                        program(&cfg.journalctl),
                        cfg.journal_timeout_ms
                    ),
                ))
            }
            PassEnd::Failed(e)
                if got == 0
                    && !restarted
                    && reader.after.is_some()
                    && e.kind() == std::io::ErrorKind::InvalidInput =>
            {
                reader.out.restart(format!(
                    "the journal does not know the saved cursor ({e}); reading its look-back"
                ));
                reader.after = None;
                restarted = true;
            }
            PassEnd::Failed(e)
                if got == 0
                    && filter == Filter::Grep
                    && e.kind() == std::io::ErrorKind::Unsupported =>
            {
                reader.out.notes.push(format!(
                    "journal: journalctl cannot filter ({e}); reading every kernel entry and \
                     picking the NVRM/SXid records in gpu-health"
                ));
                filter = Filter::Plain;
            }
            PassEnd::Failed(e) if got > 0 => {
                reader.out.notes.push(format!(
                    "journal: {e} after {got} entries; kept them, the rest is read next time"
                ));
                break;
            }
            PassEnd::Failed(e) => return Err(e),
        }
    }
    if reader.long_lines > 0 {
        reader.out.notes.push(format!(
            "journal: skipped {} entries longer than {} KiB (no kernel record is that long)",
            reader.long_lines,
            MAX_LINE >> 10
        ));
    }
    let mut out = reader.out;
    out.cursor = reader.after.map(|cursor| Cursor::Journal { cursor });
    Ok(out)
}

/// Whether journalctl filters the entries (`--grep`) or gpu-health does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    Grep,
    Plain,
}

/// How one journalctl ended.
enum PassEnd {
    /// It ran to its end: everything after the cursor was seen.
    Complete,
    /// This run's share of output is in; journalctl was stopped.
    Full,
    /// Killed at the deadline.
    TimedOut,
    /// It failed. A cursor the journal refuses is `InvalidInput`; a
    /// journalctl that cannot `--grep` is `Unsupported`.
    Failed(std::io::Error),
}

/// What one read has taken in so far, over all its journalctl runs.
struct Reader<'a> {
    out: LogRead,
    asm: Assembler<'a>,
    /// The cursor of the last entry read (the saved one before any).
    after: Option<String>,
    /// `--show-cursor`'s line of the current journalctl: where it stopped,
    /// past the entries `--grep` skipped. Used only when it ran to its end.
    end_cursor: Option<String>,
    position: u64,
    entries: u64,
    bytes: usize,
    max_bytes: usize,
    long_lines: u64,
}

impl Reader<'_> {
    fn line(&mut self, line: Line<'_>) -> Flow {
        self.bytes += line.text.len() + 1;
        if line.cut {
            self.long_lines += 1;
        } else if let Ok(text) = std::str::from_utf8(line.text) {
            if let Some(c) = text.strip_prefix("-- cursor: ") {
                self.end_cursor = Some(c.trim().to_string());
            } else if let Some(entry) = Entry::parse(text) {
                self.position += 1;
                self.entries += 1;
                if let Some(record) = entry.record() {
                    self.out.add(&mut self.asm, record, self.position);
                }
                self.after = Some(entry.cursor);
            }
        }
        if self.bytes >= self.max_bytes {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

/// Run journalctl once from `reader.after` (or since `since_ms`), feeding
/// its entries to `reader` as they come, until it ends, the read's share
/// is in, or `deadline`.
fn journalctl(
    cfg: &XidConfig,
    filter: Filter,
    since_ms: u64,
    deadline: Instant,
    reader: &mut Reader<'_>,
) -> PassEnd {
    let mut args: Vec<String> = vec![
        "--no-pager".into(),
        "--quiet".into(),
        "--output=json".into(),
        "--output-fields=MESSAGE,_TRANSPORT".into(),
    ];
    if filter == Filter::Grep {
        // Only entries that can hold an NVIDIA record are formatted (the
        // pattern is case-sensitive as it has capitals).
        args.push("--grep=NVRM|SXid".into());
    }
    // Where journalctl stopped, past entries the pattern skipped.
    args.push("--show-cursor".into());
    match &cfg.journal_path {
        Some(p) if p.is_dir() => args.push(format!("--directory={}", p.display())),
        Some(p) => args.push(format!("--file={}", p.display())),
        None => {}
    }
    let after = reader.after.clone();
    match &after {
        Some(c) => args.push(format!("--after-cursor={c}")),
        None => args.push(format!("--since=@{}", since_ms / 1000)),
    }
    args.push("_TRANSPORT=kernel".into());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return PassEnd::TimedOut;
    }
    reader.end_cursor = None;
    let run = process::run_lines(&cfg.journalctl, &argv, left, MAX_LINE, |l| reader.line(l));
    let done = match run {
        Ok(done) => done,
        Err(RunError::Timeout { .. }) => return PassEnd::TimedOut,
        Err(e) => return PassEnd::Failed(std::io::Error::other(e.to_string())),
    };
    let status = match done.ended {
        Ended::Stopped => return PassEnd::Full,
        Ended::Exited(status) => status,
    };
    let why = done.stderr.lines().next().unwrap_or("").trim().to_string();
    // journalctl exits 1 without a word when no entry matched.
    if !status.success() && !why.is_empty() {
        let kind = if filter == Filter::Grep && cannot_grep(&done.stderr) {
            std::io::ErrorKind::Unsupported
        } else if after.is_some() && why.contains("cursor") {
            std::io::ErrorKind::InvalidInput
        } else {
            std::io::ErrorKind::Other
        };
        return PassEnd::Failed(std::io::Error::new(
            kind,
            format!("{} failed ({status}): {why}", program(&cfg.journalctl)),
        ));
    }
    if let Some(c) = reader.end_cursor.take() {
        reader.after = Some(c);
    }
    PassEnd::Complete
}

/// journalctl's words for "no --grep here": built without PCRE2 ("Compiled
/// without pattern matching support"), PCRE2 not installed (newer
/// journalctl loads it at run time), or too old to know the option.
fn cannot_grep(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    s.contains("pattern matching")
        || s.contains("pcre")
        || (s.contains("grep") && (s.contains("unrecognized") || s.contains("invalid option")))
}

fn program(p: &Path) -> String {
    p.display().to_string()
}

/// One line of `journalctl -o json` as it is parsed: the fields journald
/// sets itself (never escaped in JSON) borrowed from the line, the message
/// as whatever JSON it is (a string, or bytes as an array of numbers).
#[derive(serde::Deserialize)]
struct RawEntry<'a> {
    #[serde(rename = "__CURSOR")]
    cursor: Option<&'a str>,
    #[serde(rename = "__REALTIME_TIMESTAMP")]
    realtime: Option<&'a str>,
    #[serde(rename = "__MONOTONIC_TIMESTAMP")]
    monotonic: Option<&'a str>,
    #[serde(rename = "_TRANSPORT")]
    transport: Option<&'a str>,
    #[serde(rename = "MESSAGE")]
    message: Option<Value>,
}

/// What gpu-health reads of one journal entry.
struct Entry {
    cursor: String,
    realtime_us: Option<u64>,
    monotonic_us: Option<u64>,
    kernel: bool,
    message: Option<Vec<u8>>,
}

impl Entry {
    fn parse(line: &str) -> Option<Entry> {
        let raw: RawEntry = serde_json::from_str(line).ok()?;
        let number = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok());
        Some(Entry {
            cursor: raw.cursor?.to_string(),
            realtime_us: number(raw.realtime),
            monotonic_us: number(raw.monotonic),
            kernel: raw.transport == Some("kernel"),
            message: raw.message.as_ref().and_then(message_bytes),
        })
    }

    /// The NVIDIA record this entry holds, if any.
    fn record(&self) -> Option<Record> {
        if !self.kernel {
            return None;
        }
        let message = self.message.as_deref()?;
        if memchr::memmem::find(message, b"NVRM").is_none()
            && memchr::memmem::find(message, b"SXid").is_none()
        {
            return None;
        }
        let stamp = match (self.realtime_us, self.monotonic_us) {
            (Some(us), _) => Stamp::Unix {
                ms: i64::try_from(us / 1000).ok()?,
            },
            (None, Some(us)) => Stamp::Monotonic { us },
            (None, None) => Stamp::None,
        };
        Some(Record {
            stamp,
            seq: None,
            origin: Origin::Kernel,
            payload: parse_body(message)?,
        })
    }
}

/// journalctl writes a field as a string, or as an array of byte values
/// when it is not printable UTF-8.
fn message_bytes(v: &Value) -> Option<Vec<u8>> {
    let bytes = match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Array(items) => items
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect::<Option<Vec<u8>>>()?,
        _ => return None,
    };
    (bytes.len() <= MAX_MESSAGE).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_forged_ones() {
        let kernel = r#"{"__CURSOR":"s=a;i=4","__REALTIME_TIMESTAMP":"1795960805000000","__MONOTONIC_TIMESTAMP":"5000000","_TRANSPORT":"kernel","MESSAGE":"NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands."}"#;
        let e = Entry::parse(kernel).unwrap();
        let r = e.record().unwrap();
        assert_eq!(
            r.stamp,
            Stamp::Unix {
                ms: 1_795_960_805_000
            }
        );
        assert_eq!(
            r.payload,
            super::super::parse::Payload::FallenOff {
                pci: Some("0000:b3:00.0".into())
            }
        );
        let forged = r#"{"__CURSOR":"s=a;i=5","_TRANSPORT":"syslog","MESSAGE":"NVRM: Xid (PCI:0000:18:00): 79, x"}"#;
        assert!(Entry::parse(forged).unwrap().record().is_none());
        let bytes = r#"{"__CURSOR":"c","_TRANSPORT":"kernel","MESSAGE":[78,86,82,77,58,32,88,105,100,32,40,80,67,73,58,48,48,48,48,58,49,56,58,48,48,41,58,32,52,56,44,32,255]}"#;
        assert!(Entry::parse(bytes).unwrap().record().is_some());
        assert!(Entry::parse("not json").is_none());
        assert!(Entry::parse(r#"{"MESSAGE":"no cursor"}"#).is_none());
    }
    /// A journal file of `n` kernel entries (systemd-journal-remote, as in
    /// tests/xid_journal.rs): one Xid 79 at entry 5, an Xid 31 with pid
    /// `i` at every entry `i` = 50 mod 100, other NVRM lines at every
    /// other entry, and non-NVIDIA lines between.
    fn backlog(dir: &Path, n: u64, now_ms: u64) -> std::path::PathBuf {
        let mut export = String::new();
        for i in 0..n {
            let us = (now_ms - 3_600_000 + i * 100) * 1000;
            let message = match i {
                5 => "NVRM: Xid (PCI:0000:b3:00): 79, pid=1, name=python3, GPU has fallen off the bus.".to_string(),
                i if i % 100 == 50 => format!("NVRM: Xid (PCI:0000:18:00): 31, pid={i}, name=python3, MMU Fault"),
                i if i % 3 != 0 => format!("NVRM: GPU at PCI:0000:18:00: GPU-4f1b2c3d {i}"),
                i => format!("mlx5_core 0000:c1:00.0: port {i} link up"),
            };
            export.push_str(&format!(
                "__REALTIME_TIMESTAMP={us}\n__MONOTONIC_TIMESTAMP={}\n_BOOT_ID=0123456789abcdef0123456789abcdef\n_TRANSPORT=kernel\nMESSAGE={message}\n\n",
                1_000_000 + i * 100_000
            ));
        }
        let src = dir.join("backlog.export");
        std::fs::write(&src, export).unwrap();
        let remote = [
            "/lib/systemd/systemd-journal-remote",
            "/usr/lib/systemd/systemd-journal-remote",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("systemd-journal-remote is needed (apt-get install systemd-journal-remote)");
        let file = dir.join("node.journal");
        let out = std::process::Command::new(remote)
            .arg(format!("--output={}", file.display()))
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        file
    }

    #[test]
    fn a_backlog_is_caught_up_a_share_per_run_without_loss() {
        let now_ms: u64 = 1_795_962_600_000;
        let dir = tempfile::tempdir().unwrap();
        let cfg = XidConfig {
            journal_path: Some(backlog(dir.path(), 3_000, now_ms)),
            ..XidConfig::default()
        };
        let policy = Policy::from_config(&cfg);
        let ctx = TimeContext {
            boot_ms: None,
            now_ms: now_ms as i64,
        };
        // 2,000 matching entries of about 400 bytes: some 12 runs of 64 KiB.
        let share = 64 << 10;
        let mut cursor: Option<Cursor> = None;
        let mut pids = Vec::new();
        let mut runs = 0;
        loop {
            runs += 1;
            assert!(runs <= 20, "not caught up after 20 runs");
            let r = read_journal_bounded(&cfg, cursor.as_ref(), ctx, &policy, share).unwrap();
            if runs == 1 {
                assert!(
                    r.events.iter().any(|e| e.code == 79),
                    "the early Xid 79 in the first run"
                );
            }
            pids.extend(
                r.events
                    .iter()
                    .filter(|e| e.code == 31)
                    .filter_map(|e| e.pid),
            );
            assert!(r.cursor.is_some());
            let more = r
                .notes
                .iter()
                .any(|n| n.contains("the rest is read next time"));
            if !more {
                // Caught up: the next run reads nothing and keeps the cursor.
                let again =
                    read_journal_bounded(&cfg, r.cursor.as_ref(), ctx, &policy, share).unwrap();
                assert!(again.events.is_empty());
                assert_eq!(again.cursor, r.cursor);
                break;
            }
            assert_ne!(r.cursor, cursor, "every run moves the cursor");
            cursor = r.cursor;
        }
        assert!((10..=16).contains(&runs), "{runs} runs");
        let want: Vec<u32> = (0..3_000).filter(|i| i % 100 == 50).collect();
        assert_eq!(pids, want, "every Xid once, in order, across the runs");
    }
}
