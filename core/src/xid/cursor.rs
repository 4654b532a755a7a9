//! Where a reader stopped ([`Cursor`]) and the node's saved Xid state
//! (cursor plus repeat history), written atomically.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::history::RepeatHistory;
use super::XidError;

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
/// A state file is a few KiB; anything far larger is not ours.
const MAX_STATE_BYTES: u64 = 4 << 20;

/// FNV-1a, 64 bit: enough to notice that bytes changed, no dependency.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Read the state file. Missing = fresh state; unreadable or corrupt =
/// fresh state plus a note (logged as a warning); never an error.
pub fn load_state(path: &Path) -> (XidState, Option<String>) {
    let fresh = XidState {
        version: STATE_VERSION,
        ..XidState::default()
    };
    let text = match crate::state::read_nofollow(path, MAX_STATE_BYTES) {
        Ok(Some(t)) => t,
        Ok(None) => return (fresh, None),
        Err(e) => {
            let note = format!("Xid cursor unreadable ({e}); starting over with the look-back");
            log::warn!("{note}");
            return (fresh, Some(note));
        }
    };
    match serde_json::from_slice::<XidState>(&text) {
        Ok(state) if state.version == STATE_VERSION => (state, None),
        Ok(state) => {
            let note = format!(
                "Xid cursor {} has version {}, expected {STATE_VERSION}; replaced",
                path.display(),
                state.version
            );
            log::warn!("{note}");
            (fresh, Some(note))
        }
        Err(e) => {
            let note = format!(
                "Xid cursor {} is corrupt ({e}); replaced, starting over with the look-back",
                path.display()
            );
            log::warn!("{note}");
            (fresh, Some(note))
        }
    }
}

/// Write the state file atomically (see [`crate::state::write_atomic`]).
///
/// Not fsynced: the prolog runs before every job and a sync costs
/// milliseconds. After a power loss the worst case is an older cursor, so
/// a few records are read again (the safe direction), and a reboot starts
/// a new kmsg buffer anyway.
pub fn save_state(path: &Path, state: &XidState) -> Result<(), XidError> {
    let mut state = state.clone();
    state.version = STATE_VERSION;
    crate::state::save_json(path, &state, false).map_err(|e| XidError::State {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}
