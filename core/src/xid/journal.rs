//! Reader of the systemd journal's kernel records (`kernel_log =
//! "journal"`), through `journalctl`.
//!
//! Only `_TRANSPORT=kernel` entries are asked for: journald sets that
//! field itself for what it reads from /dev/kmsg, so no user can forge
//! one (unlike a syslog text line's `kernel:` tag). The cursor is the
//! journal's own: `--after-cursor` seeks to it through the journal's
//! index, so a scan costs the same however long the history is and never
//! rereads an old record. Output is read in pages of bounded size; a
//! page that was cut short is continued from its last whole entry.

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
use crate::process;

/// The spelling of `kernel_log` that selects this reader.
pub const JOURNAL: &str = "journal";

/// Bytes of journalctl output one page keeps.
const PAGE_BYTES: usize = 8 << 20;
/// Pages one read takes at most (a storm beyond is read next time).
const MAX_PAGES: usize = 16;
/// A kernel record's text is at most 8 KiB; anything longer is not one.
const MAX_MESSAGE: usize = 16 << 10;
/// Entries between a lost-GPU header and its "fallen off" entry.
const FALLEN_OFF_WINDOW_ENTRIES: u64 = 4;

/// Read the journal's kernel entries after `since`; without a cursor,
/// those of the last `lookback_ms`.
pub(crate) fn read_journal(
    cfg: &XidConfig,
    since: Option<&Cursor>,
    ctx: TimeContext,
    policy: &Policy,
) -> std::io::Result<LogRead> {
    let lookback_ms = u64::from(cfg.lookback_hours) * 3_600_000;
    let mut out = LogRead::empty();
    let mut after = match since {
        Some(Cursor::Journal { cursor }) => Some(cursor.clone()),
        Some(_) => {
            out.restart(
                "the saved cursor is for another kind of kernel log; reading the journal's look-back"
                    .into(),
            );
            None
        }
        None => None,
    };
    let deadline = Instant::now() + Duration::from_millis(cfg.journal_timeout_ms);
    let mut asm = Assembler::new(FALLEN_OFF_WINDOW_ENTRIES, ctx, policy);
    let mut position = 0u64;
    for page in 0..MAX_PAGES {
        let since_ms = (ctx.now_ms.max(0) as u64).saturating_sub(lookback_ms);
        let finished = match journalctl(cfg, after.as_deref(), since_ms, deadline) {
            Ok(f) => f,
            Err(e)
                if after.is_some() && page == 0 && e.kind() == std::io::ErrorKind::InvalidInput =>
            {
                out.restart(format!(
                    "the journal does not know the saved cursor ({e}); reading its look-back"
                ));
                after = None;
                journalctl(cfg, None, since_ms, deadline)?
            }
            Err(e) => return Err(e),
        };
        // (Lossy UTF-8 of a page cut inside a character can be a few bytes
        // shorter than the page.)
        let cut_short = finished.len() + 4 >= PAGE_BYTES;
        let text = match finished.rfind('\n') {
            Some(i) => &finished[..=i],
            None if cut_short => {
                return Err(std::io::Error::other(
                    "journalctl wrote one entry longer than a page",
                ))
            }
            None => "",
        };
        for line in text.lines() {
            // `--show-cursor`: where journalctl stopped, past entries the
            // pattern skipped.
            if let Some(c) = line.strip_prefix("-- cursor: ") {
                after = Some(c.trim().to_string());
                continue;
            }
            let Some(entry) = Entry::parse(line) else {
                continue;
            };
            after = Some(entry.cursor.clone());
            position += 1;
            if let Some(record) = entry.record() {
                out.add(&mut asm, record, position);
            }
        }
        if !cut_short {
            break;
        }
        if page + 1 == MAX_PAGES {
            out.notes.push(format!(
                "more kernel entries than {MAX_PAGES} pages of journalctl output; the rest is read next time"
            ));
        }
    }
    out.cursor = after.map(|cursor| Cursor::Journal { cursor });
    Ok(out)
}

/// One page of `journalctl -o json` output after `after` (or since
/// `since_ms`). A cursor the journal refuses is `InvalidInput`.
fn journalctl(
    cfg: &XidConfig,
    after: Option<&str>,
    since_ms: u64,
    deadline: Instant,
) -> std::io::Result<String> {
    let mut args: Vec<String> = vec![
        "--no-pager".into(),
        "--quiet".into(),
        "--output=json".into(),
        "--output-fields=MESSAGE,_TRANSPORT".into(),
        // Only entries that can hold an NVIDIA record are formatted (the
        // pattern is case-sensitive as it has capitals); --show-cursor
        // says where journalctl stopped, so that the entries it skipped
        // are not searched again.
        "--grep=NVRM|SXid".into(),
        "--show-cursor".into(),
    ];
    match &cfg.journal_path {
        Some(p) if p.is_dir() => args.push(format!("--directory={}", p.display())),
        Some(p) => args.push(format!("--file={}", p.display())),
        None => {}
    }
    match after {
        Some(c) => args.push(format!("--after-cursor={c}")),
        None => args.push(format!("--since=@{}", since_ms / 1000)),
    }
    args.push("_TRANSPORT=kernel".into());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no time left for journalctl",
        ));
    }
    let finished = process::run(&cfg.journalctl, &argv, left, PAGE_BYTES)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let why = finished
        .stderr
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    // journalctl exits 1 without a word when no entry matched.
    if !finished.status.success() && !why.is_empty() {
        let kind = if after.is_some() && why.contains("cursor") {
            std::io::ErrorKind::InvalidInput
        } else {
            std::io::ErrorKind::Other
        };
        return Err(std::io::Error::new(
            kind,
            format!(
                "{} failed ({}): {why}",
                program(&cfg.journalctl),
                finished.status
            ),
        ));
    }
    Ok(finished.stdout)
}

fn program(p: &Path) -> String {
    p.display().to_string()
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
        let v: Value = serde_json::from_str(line).ok()?;
        let text = |k: &str| v.get(k).and_then(Value::as_str);
        let number = |k: &str| text(k).and_then(|s| s.parse::<u64>().ok());
        Some(Entry {
            cursor: text("__CURSOR")?.to_string(),
            realtime_us: number("__REALTIME_TIMESTAMP"),
            monotonic_us: number("__MONOTONIC_TIMESTAMP"),
            kernel: text("_TRANSPORT") == Some("kernel"),
            message: v.get("MESSAGE").and_then(message_bytes),
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
}
