//! `[remediation]`: what gpu-health may do beyond draining, once a fault
//! that a reboot clears is found.

use serde::{Deserialize, Serialize};

use super::keys::check;

/// `[remediation]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemediationConfig {
    /// Ask Slurm to reboot the node (`scontrol reboot ASAP`) for faults a
    /// GPU reset or a reboot clears; off: such faults drain as any other.
    pub reboot: bool,
    /// Reboots for one kind of fault within the window after which the
    /// node stays drained for hardware inspection instead.
    pub max_reboots: u32,
    pub window_hours: u64,
}

impl Default for RemediationConfig {
    fn default() -> Self {
        RemediationConfig {
            reboot: false,
            max_reboots: 2,
            window_hours: 168,
        }
    }
}

impl RemediationConfig {
    pub fn validate(&self) -> Result<(), String> {
        check("remediation.max_reboots", f64::from(self.max_reboots))?;
        check("remediation.window_hours", self.window_hours as f64)
    }

    pub fn window_ms(&self) -> u64 {
        self.window_hours.saturating_mul(3_600_000)
    }
}
