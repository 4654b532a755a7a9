//! Operations: what keeps gpu-health safe to run on a whole cluster.
//!
//! - [`brake`]: never drain more than a share of a partition at once;
//! - [`drain`] / [`drain_record`]: drains through the brake, remembered in
//!   the state directory; resumes only of gpu-health's own drains;
//! - [`pending`]: draining findings no run could act on yet;
//! - [`recovery`]: when a `drain-until-clean` node may return;
//! - [`escalation`]: a node returned too often for one fault stays drained;
//! - [`dcgm`]: the deeper `dcgmi diag` tier;
//! - [`rdma_ports`]: InfiniBand/RoCE ports the node must have up.
//!
//! Their settings are sections of the configuration (`config::BrakeConfig`
//! and the others); the runs that use them live in `run`. Admin-facing
//! description: docs/operations.md.

pub mod brake;
pub mod dcgm;
pub mod drain;
pub mod drain_record;
pub mod escalation;
pub mod pending;
pub mod rdma_ports;
pub mod recovery;
