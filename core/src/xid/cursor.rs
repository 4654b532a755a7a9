//! Where a reader stopped ([`Cursor`]) and the node's Xid state between
//! scans (cursor plus repeat history). The state module keeps it on disk;
//! the run that scanned saves it only after acting on what it found.

use serde::{Deserialize, Serialize};

use super::history::RepeatHistory;

/// A position in a kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum Cursor {
    /// The live `/dev/kmsg` ring of one boot.
    Kmsg {
        /// `/proc/sys/kernel/random/boot_id` when the cursor was taken.
        boot_id: String,
        /// First sequence number not yet read.
        next_seq: u64,
    },
    /// A plain file read up to `offset` (always the end of a line).
    File {
        dev: u64,
        ino: u64,
        offset: u64,
        /// Length and FNV-1a hash of the bytes just before `offset`: if
        /// they changed, the file was truncated or rewritten in place.
        tail_len: u32,
        tail_hash: u64,
    },
    /// The systemd journal: its own cursor string (`s=...;i=...;...`).
    Journal { cursor: String },
}

/// Saved state of the node's Xid scan: what the last committed scan read,
/// and the recent events that repeat rules count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidState {
    pub version: u32,
    pub cursor: Option<Cursor>,
    #[serde(default)]
    pub history: RepeatHistory,
}

const STATE_VERSION: u32 = 1;

/// FNV-1a, 64 bit: enough to notice that bytes changed, no dependency.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Cursor {
    /// What tells this cursor from another (never 0, which stands for a
    /// read from the look-back): two reads that start at the same cursor
    /// read the same records first.
    pub fn identity(&self) -> u64 {
        fnv1a(&serde_json::to_vec(self).unwrap_or_default()).max(1)
    }
}

impl XidState {
    /// The state of a node that never scanned: no cursor, no history (the
    /// first scan judges only the look-back).
    pub fn fresh() -> XidState {
        XidState {
            version: STATE_VERSION,
            ..XidState::default()
        }
    }

    /// The state to scan from, given what was saved (`None`: nothing). A
    /// state of another version starts over; the note says so.
    pub fn checked(saved: Option<XidState>) -> (XidState, Option<String>) {
        match saved {
            None => (XidState::fresh(), None),
            Some(s) if s.version == STATE_VERSION => (s, None),
            Some(s) => (
                XidState::fresh(),
                Some(format!(
                    "saved Xid cursor has version {}, expected {STATE_VERSION}; starting over with the look-back",
                    s.version
                )),
            ),
        }
    }
}

impl crate::state::StateValue for XidState {
    type Key = ();
    fn file((): ()) -> crate::state::StateFile {
        crate::state::StateFile::KernelLogCursor
    }
}
