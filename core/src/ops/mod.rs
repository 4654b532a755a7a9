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

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    #[test]
    fn sections_parse_and_validate() {
        let p = Path::new("/etc/slurm/gpu-health.toml");
        let c = parse(
            p,
            "[brake]\nmax_drained_fraction = 0.25\nscope = \"cluster\"\n\
             [recovery]\nquiet_time_s = 30\n\
             [dcgm]\ndcgmi = \"/usr/bin/dcgmi\"\ntimeout_ms = 20000\n\
             [rdma]\nexpected_ports = [\"mlx5_0:1\"]\nexpected_rate_gbps = 400\naction = \"drain\"\n",
            None,
        )
        .unwrap();
        assert_eq!(c.brake.max_drained_fraction, 0.25);
        assert_eq!(c.brake.scope, super::brake::BrakeScope::Cluster);
        assert_eq!(c.recovery.quiet_ms(), 30_000);
        assert_eq!(c.dcgm.timeout_ms, 20_000);
        assert_eq!(c.rdma.action, Some(super::rdma_ports::PortAction::Drain));
        for bad in [
            "[brake]\nmax_drained_fraction = 2.0\n",
            "[brake]\nsettle_ms = 10\n",
            "[recovery]\nquiet_time_s = 99999999\n",
            "[dcgm]\nlevel = 0\n",
            "[rdma]\nexpected_ports = [\"mlx5_0\"]\n",
            "[rdma]\naction = \"explode\"\n",
            "[brake]\nmax_drained = 0.1\n",
        ] {
            assert!(parse(p, bad, None).is_err(), "{bad}");
        }
    }
}
