//! Kernel-log Xid engine: reader, parser, cursor and policy table.
//! (Filled in by the Xid issue; this is the configuration it exposes.)

use serde::{Deserialize, Serialize};

/// `[xid]` section of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct XidConfig {}

impl XidConfig {
    /// Refuse settings that cannot be meant.
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}
