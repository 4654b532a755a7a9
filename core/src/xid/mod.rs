//! Kernel-log Xid engine: parser, incremental reader with cursor, policy.
//!
//! # Using it
//!
//! Prolog / health check: the run loads the node's [`XidState`] from the
//! state directory, scans, acts on the findings, and only then saves
//! `outcome.state` (see `run::node_check`):
//!
//! ```no_run
//! # use gpu_health_core::{config::Config, snapshot::NodeSnapshot, xid};
//! # let cfg = Config::default(); let snapshot = NodeSnapshot::default(); let now_ms = 0;
//! let (state, note) = xid::XidState::checked(None); // what the state directory held
//! let outcome = xid::scan(&cfg.kernel_log, state, &cfg.xid, &snapshot, now_ms);
//! // ... act on outcome.findings (drain, verdict), log outcome.notes ...
//! // ... then save outcome.state in the state directory.
//! ```
//!
//! Epilog (events during a job, without touching the node cursor): keep
//! the prolog's `outcome.cursor()` (a serde [`Cursor`]) in the job's state
//! and call `read_since(&kernel_log, Some(&job_start_cursor), ...)`.
//!
//! Admin command: `read_since(path, None, ...)` reads a log from its start;
//! [`Policy::decide`] gives each event's action.
//!
//! # Pieces
//!
//! - [`parse_line`]: one line of any supported format to a [`Record`];
//!   formats are recognised line by line: `/dev/kmsg` records and dumps
//!   (`prio,seq,usec,flags;msg`, dictionary lines ignored), every form of
//!   util-linux's `dmesg` (each `--time-format`, `-x`, `-r`, the caller
//!   id), syslog and `journalctl -k` (classic and ISO time stamps, any
//!   locale's month names). A time stamp that cannot be read is time
//!   unknown, never a lost record. Only kernel records count: kmsg
//!   facility 0, `dmesg -x`'s `kern`, syslog tag `kernel:` (marked
//!   [`Origin::SyslogTag`]: forgeable), message starting with `NVRM: ` or
//!   `nvidia-nvswitchN: SXid`. A message may hold several lines (newlines,
//!   `\x0a`, `#012`).
//! - [`Assembler`]: records to [`XidEvent`]s, joining the lost-GPU message
//!   ("The NVIDIA GPU ... fallen off the bus", reported as Xid 79 with
//!   `fallen_off_bus`) when it comes as separate records, and an SXid's
//!   detail lines to it (alone, they are the SXid).
//! - Readers: a character device is read record by record as /dev/kmsg
//!   (cursor = boot id + next sequence number); `journal` through
//!   journalctl (the journal's cursor); anything else as a file (cursor =
//!   device, inode, byte offset, hash of the bytes before it; indented
//!   continuation lines joined to their record). [`LogRead`] bounds a
//!   storm by folding events per code, device and action.
//! - [`Policy`]: the one table ([`CATALOG`], shown in docs/xid-policy.md)
//!   plus `[xid]` overrides; [`judge`] makes findings, repeat rules count
//!   events in a history saved with the cursor.

mod assemble;
mod catalog;
mod cursor;
mod event;
mod file;
mod history;
mod journal;
mod judge;
mod kmsg;
mod log_read;
mod parse;
mod policy;
mod read;
mod rules;
mod scan;
mod stamp;

pub use crate::config::{CodeKey, PolicyAction, XidConfig, XidRule};
pub use assemble::Assembler;
pub use catalog::{
    entry, markdown_table, sxid_is_fatal, sxid_meaning, xid_meaning, DefaultAction, Resolution,
    Source, XidInfo, CATALOG, CATALOG_REFERENCE,
};
pub use cursor::{Cursor, XidState};
pub use event::{EventKind, XidEvent};
pub use history::RepeatHistory;
pub use journal::JOURNAL;
pub use judge::{judge, Seen, MAX_FINDINGS};
pub use kmsg::{KmsgDevice, KmsgRead, KmsgSource, MemoryRing};
pub use log_read::{LogRead, MAX_EVENTS};
pub use parse::{parse_line, Origin, Payload, Record};
pub use policy::{recovery_action, Decision, Escalate, Policy};
pub use read::{boot_id_writers, read_boot_id, read_since, read_source, LogSource, XidError};
pub use rules::{default_escalation, escalation_table, Escalation, ESCALATIONS};
pub use scan::{judge_new, read_new, scan, scan_source, NewRecords, ScanOutcome};
pub use stamp::{Stamp, TimeContext};
