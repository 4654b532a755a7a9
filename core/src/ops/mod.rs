//! Operations: what keeps gpu-health safe to run on a whole cluster.
//!
//! - [`brake`]: never drain more than a share of a partition at once;
//! - [`drain`] / [`drain_state`]: drains through the brake, remembered in
//!   the state directory; resumes only of gpu-health's own drains;
//! - [`recovery`]: when a `drain-until-clean` node may return;
//! - [`health`]: the HealthCheckProgram mode that does the returning;
//! - [`dcgm`]: the deeper `dcgmi diag` tier;
//! - [`rdma_ports`]: InfiniBand/RoCE ports the node must have up.
//!
//! Admin-facing description: docs/operations.md.

pub mod brake;
pub mod dcgm;
pub mod drain;
pub mod drain_state;
pub mod health;
pub mod rdma_ports;
pub mod recovery;

pub use brake::BrakeConfig;
pub use dcgm::DcgmConfig;
pub use rdma_ports::RdmaConfig;
pub use recovery::RecoveryConfig;
