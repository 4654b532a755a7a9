//! The NVLinks seen active since this boot (`StateFile::NvlinkHistory`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The NVLinks seen active since this boot, per GPU (by UUID): a link
/// that was never active since boot is one the board does not use (some
/// SKUs expose links that are never trained), one that was and is down
/// now went down.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkHistory {
    /// The kernel's boot id the links were seen under; another boot starts
    /// over.
    pub boot_id: String,
    /// Bit n: link n was seen active.
    pub active: BTreeMap<String, u64>,
}

impl LinkHistory {
    /// The history that holds for `boot_id` (empty after a reboot).
    pub fn for_boot(self, boot_id: &str) -> LinkHistory {
        if self.boot_id == boot_id {
            self
        } else {
            LinkHistory {
                boot_id: boot_id.to_string(),
                active: BTreeMap::new(),
            }
        }
    }

    pub fn was_active(&self, uuid: &str, link: u32) -> bool {
        link < 64 && self.active.get(uuid).is_some_and(|m| m & (1 << link) != 0)
    }

    /// Add the links active now; whether anything changed.
    pub fn record<'a>(&mut self, active: impl IntoIterator<Item = (&'a str, u32)>) -> bool {
        let mut changed = false;
        for (uuid, link) in active.into_iter().filter(|(_, l)| *l < 64) {
            let bit = 1 << link;
            // A GPU already known costs no allocation (every healthy run
            // records all of a node's links).
            match self.active.get_mut(uuid) {
                Some(m) => {
                    changed |= *m & bit == 0;
                    *m |= bit;
                }
                None => {
                    self.active.insert(uuid.to_string(), bit);
                    changed = true;
                }
            }
        }
        changed
    }
}

impl crate::state::StateValue for LinkHistory {
    type Key = ();
    fn file((): ()) -> crate::state::StateFile {
        crate::state::StateFile::NvlinkHistory
    }
}
