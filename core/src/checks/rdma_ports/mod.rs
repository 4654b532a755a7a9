//! RDMA port check: every port the configuration expects is ACTIVE and
//! LinkUp at its expected rate. A multi-node job on a node with a dead
//! rail hangs in NCCL, so a port down or below rate is a finding.

use super::{Check, CheckInput, Evidence, Io, Place};
use crate::config::{parse_port_name, PortAction, RdmaConfig};
use crate::fabric::{Fabric, RdmaPort};
use crate::finding::{Action, Finding};

pub struct RdmaPorts;

/// The node's RDMA ports as sysfs shows them, or why they cannot be read.
pub struct Ports(pub Result<Fabric, String>);

impl Check for RdmaPorts {
    fn name(&self) -> &'static str {
        "rdma-ports"
    }
    fn section(&self) -> Option<&'static str> {
        Some("rdma")
    }
    fn place(&self) -> Place {
        Place::Ports
    }
    fn gather(&self, io: &Io<'_>, evidence: &mut Evidence) {
        if !io.config.rdma.is_active() {
            return;
        }
        let read = crate::fabric::read_fabric(&io.config.sysfs_root).map_err(|e| e.to_string());
        evidence.insert(Ports(read));
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        match input.evidence.get::<Ports>() {
            Some(Ports(Ok(fabric))) => check_ports(&input.config.rdma, fabric),
            Some(Ports(Err(e))) => vec![unreadable(e)],
            None => Vec::new(),
        }
    }
    fn doc(&self) -> &'static str {
        "| `rdma-ports` | per `[rdma] action` (warn by default) | a port the configuration expects is not ACTIVE/LinkUp, or below `expected_rate_gbps`, or missing |\n\
         | `rdma-ports` | warn | the RDMA ports cannot be read |"
    }
}

fn unreadable(e: &str) -> Finding {
    Finding::node(
        "rdma-ports",
        Action::Warn,
        "RDMA ports unreadable".into(),
        format!("cannot read the RDMA ports: {e}"),
    )
}

/// Why a port is not usable, or `None` when it is.
fn port_problem(p: &RdmaPort, min_rate: Option<f64>) -> Option<String> {
    if !p.is_active() {
        return Some(format!(
            "state {}",
            p.state.as_deref().unwrap_or("unreadable")
        ));
    }
    if !p.is_link_up() {
        return Some(format!(
            "phys_state {}",
            p.phys_state.as_deref().unwrap_or("unreadable")
        ));
    }
    if let Some(min) = min_rate {
        match p.rate_gbps {
            Some(r) if r + 1e-9 >= min => {}
            _ => {
                return Some(format!(
                    "rate {} below {min} Gb/s",
                    p.rate.as_deref().unwrap_or("unreadable")
                ))
            }
        }
    }
    None
}

/// Findings for `fabric` against `cfg` (none when nothing is expected).
pub fn check_ports(cfg: &RdmaConfig, fabric: &Fabric) -> Vec<Finding> {
    if !cfg.is_active() {
        return Vec::new();
    }
    let action = cfg.action.unwrap_or(PortAction::Warn).action();
    let mut bad: Vec<String> = Vec::new();
    // The summary says what is true of each port: down (present, not
    // usable) or missing (not there at all), and how many of the count
    // expected are not there.
    let mut down: Vec<String> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    let mut absent = 0usize;
    for name in &cfg.expected_ports {
        let Some((dev, port)) = parse_port_name(name) else {
            continue;
        };
        match fabric.port(dev, port) {
            None => {
                bad.push(format!("{name} missing"));
                missing.push(name.clone());
            }
            Some(p) => {
                if let Some(why) = port_problem(p, cfg.expected_rate_gbps) {
                    bad.push(format!("{name} {why}"));
                    down.push(name.clone());
                }
            }
        }
    }
    if let Some(want) = cfg.expected_count {
        let good = fabric
            .ports
            .iter()
            .filter(|p| port_problem(p, cfg.expected_rate_gbps).is_none())
            .count();
        if good < want as usize {
            bad.push(format!("{good} of {want} ports usable"));
            for p in &fabric.ports {
                if let Some(why) = port_problem(p, cfg.expected_rate_gbps) {
                    let name = p.hca_name();
                    if !down.contains(&name) {
                        bad.push(format!("{name} {why}"));
                        down.push(name);
                    }
                }
            }
            absent = (want as usize).saturating_sub(fabric.ports.len());
            if absent > 0 {
                bad.push(format!("{absent} of {want} expected ports not found"));
            }
        }
    }
    if bad.is_empty() {
        return Vec::new();
    }
    let mut what: Vec<String> = Vec::new();
    if !down.is_empty() {
        what.push(format!("{} down", down.join(",")));
    }
    if !missing.is_empty() {
        what.push(format!("{} missing", missing.join(",")));
    }
    if absent > 0 {
        let want = cfg.expected_count.unwrap_or_default();
        what.push(format!("{absent} of {want} expected ports missing"));
    }
    vec![Finding::node(
        "rdma-ports",
        action,
        format!("RDMA {}", what.join(", ")),
        format!(
            "RDMA ports not usable: {}; multi-node NCCL jobs on this node may hang or run slow",
            bad.join("; ")
        ),
    )]
}

/// Read the node's fabric under `sysfs_root` and check it.
pub fn check_node_ports(cfg: &RdmaConfig, sysfs_root: &std::path::Path) -> Vec<Finding> {
    if !cfg.is_active() {
        return Vec::new();
    }
    match crate::fabric::read_fabric(sysfs_root) {
        Ok(f) => check_ports(cfg, &f),
        Err(e) => vec![unreadable(&e.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(name)
    }

    fn all_eight() -> Vec<String> {
        (0..8).map(|i| format!("mlx5_{i}:1")).collect()
    }

    #[test]
    fn nothing_expected_nothing_checked() {
        let f = check_node_ports(&RdmaConfig::default(), &fixture("ib-ndr8-one-down"));
        assert!(f.is_empty());
    }

    #[test]
    fn one_port_down_by_name() {
        let cfg = RdmaConfig {
            expected_ports: all_eight(),
            expected_rate_gbps: Some(400.0),
            ..Default::default()
        };
        let f = check_node_ports(&cfg, &fixture("ib-ndr8-one-down"));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Warn);
        assert_eq!(f[0].summary, "RDMA mlx5_5:1 down");
        assert!(f[0].message.contains("1: DOWN"), "{}", f[0].message);
    }

    #[test]
    fn count_and_drain_action() {
        let cfg = RdmaConfig {
            expected_count: Some(8),
            action: Some(PortAction::Drain),
            ..Default::default()
        };
        let f = check_node_ports(&cfg, &fixture("ib-ndr8-one-down"));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Drain);
        assert!(f[0].message.contains("7 of 8"), "{}", f[0].message);
        assert!(f[0].message.contains("mlx5_5:1"), "{}", f[0].message);
        let seven = RdmaConfig {
            expected_count: Some(7),
            ..Default::default()
        };
        assert!(check_node_ports(&seven, &fixture("ib-ndr8-one-down")).is_empty());
    }

    #[test]
    fn missing_port_and_rate() {
        let cfg = RdmaConfig {
            expected_ports: vec!["mlx5_9:1".into(), "mlx5_0:1".into()],
            expected_rate_gbps: Some(800.0),
            ..Default::default()
        };
        let f = check_node_ports(&cfg, &fixture("ib-ndr8-one-down"));
        assert!(
            f[0].message.contains("mlx5_9:1 missing"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message
                .contains("mlx5_0:1 rate 400 Gb/sec (4X NDR) below 800"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].summary, "RDMA mlx5_0:1 down, mlx5_9:1 missing");
        // No RDMA hardware at all: every expected port is missing.
        let f = check_node_ports(&cfg, &fixture("none"));
        assert!(f[0].message.contains("mlx5_0:1 missing"));
        assert_eq!(f[0].summary, "RDMA mlx5_9:1,mlx5_0:1 missing");
    }

    #[test]
    fn a_count_of_ports_none_of_which_is_there_says_missing_not_down() {
        let cfg = RdmaConfig {
            expected_count: Some(8),
            action: Some(PortAction::Drain),
            ..Default::default()
        };
        let f = check_node_ports(&cfg, &fixture("none"));
        assert_eq!(f[0].summary, "RDMA 8 of 8 expected ports missing");
        assert!(
            f[0].message
                .contains("0 of 8 ports usable; 8 of 8 expected ports not found"),
            "{}",
            f[0].message
        );
        let reason = crate::finding::drain_reason(&f).unwrap();
        assert_eq!(
            reason,
            "gpu-health: RDMA 8 of 8 expected ports missing (drain)"
        );
        // One down among the eight: down, nothing missing.
        let f = check_node_ports(&cfg, &fixture("ib-ndr8-one-down"));
        assert_eq!(f[0].summary, "RDMA mlx5_5:1 down");
    }

    #[test]
    fn healthy_roce_passes() {
        let fabric = crate::fabric::read_fabric(&fixture("roce-v2")).unwrap();
        let names: Vec<String> = fabric.active_ports().map(|p| p.hca_name()).collect();
        assert!(!names.is_empty());
        let cfg = RdmaConfig {
            expected_ports: names,
            ..Default::default()
        };
        assert!(check_ports(&cfg, &fabric).is_empty());
    }

    #[test]
    fn validation() {
        let bad = RdmaConfig {
            expected_ports: vec!["mlx5_0".into()],
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let rate = RdmaConfig {
            expected_rate_gbps: Some(-1.0),
            ..Default::default()
        };
        assert!(rate.validate().is_err());
        assert!(RdmaConfig::default().validate().is_ok());
    }
}
