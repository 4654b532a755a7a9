//! Operations: what keeps gpu-health safe to run on a whole cluster, and
//! the machinery of acting (the checks are in `checks`).
//!
//! - [`brake`]: never drain more than a share of a partition at once;
//!   [`brake_window`]: nor more than a cap, nor too many within minutes;
//! - [`drain`]: drains through the brake; resumes only of gpu-health's own
//!   drains (what they are for is the fault ledger's, `ledger`);
//! - [`recovery`]: whether the node is clean now (a drained node's return);
//! - [`prove`]: whether the acceptance tier may run on the node now (back
//!   from a reboot, idle, drained by gpu-health);
//!
//! Their settings are sections of the configuration (`config::BrakeConfig`
//! and the others); the runs that use them live in `run`. Admin-facing
//! description: docs/operations.md.

pub mod brake;
pub mod brake_window;
pub mod drain;
pub mod prove;
pub mod recovery;
