//! Why the NCCL variables are what they are: the ports the derivation
//! looked at (up or down, GID index for RoCE) and a reason per variable.
//! Pure: from the same [`Fabric`] and [`NcclEnv`] the SPANK plugin uses.

use serde::Serialize;

use crate::text::printable;

use super::nccl::{FabricKind, NcclEnv, NcclPolicy, Source};
use super::{Fabric, LinkLayer, RdmaPort};

/// One RDMA port as the derivation saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortView {
    pub port: String,
    pub link_layer: String,
    pub state: String,
    pub phys_state: String,
    pub rate: Option<String>,
    /// Used for NCCL_IB_HCA.
    pub used: bool,
    /// Why (or why not).
    pub why: String,
}

/// One variable and why it has its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VarView {
    pub name: String,
    pub value: String,
    pub why: String,
}

/// The whole explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    pub fabric: FabricKind,
    pub ports: Vec<PortView>,
    pub vars: Vec<VarView>,
    pub notes: Vec<String>,
}

/// Explain `env`, derived from `fabric` under `policy`.
pub fn explain(fabric: &Fabric, policy: &NcclPolicy, env: &NcclEnv) -> Explanation {
    let hca = env.get("NCCL_IB_HCA").unwrap_or("");
    let listed = |p: &RdmaPort| {
        hca.trim_start_matches(['=', '^'])
            .split(',')
            .any(|h| h == p.hca_name())
    };
    let ports = fabric
        .ports
        .iter()
        .map(|p| {
            let used = listed(p);
            let why = port_why(p, used, env.kind);
            // Text from sysfs, kept printable whoever built the fabric.
            let shown = |s: &str| printable(s).into_owned();
            PortView {
                port: shown(&p.hca_name()),
                link_layer: match &p.link_layer {
                    LinkLayer::InfiniBand => "InfiniBand".into(),
                    LinkLayer::Ethernet => "Ethernet (RoCE)".into(),
                    LinkLayer::Other(o) => shown(o),
                },
                state: p.state.as_deref().map_or_else(|| "?".into(), shown),
                phys_state: p.phys_state.as_deref().map_or_else(|| "?".into(), shown),
                rate: p.rate.as_deref().map(shown),
                used,
                why,
            }
        })
        .collect();
    let vars = env
        .vars
        .iter()
        .map(|v| VarView {
            name: v.name.clone(),
            value: v.value.clone(),
            why: var_why(&v.name, v.source, env.kind, policy),
        })
        .collect();
    Explanation {
        fabric: env.kind,
        ports,
        vars,
        // What reading left out first (a FIFO or a huge file in sysfs, an
        // unusable name), then what the derivation left out.
        notes: fabric.notes.iter().chain(&env.notes).cloned().collect(),
    }
}

fn port_why(p: &RdmaPort, used: bool, kind: FabricKind) -> String {
    if !p.is_active() {
        return "not ACTIVE: left out".into();
    }
    match (&p.link_layer, used) {
        (LinkLayer::InfiniBand, true) => "ACTIVE InfiniBand port".into(),
        (LinkLayer::Ethernet, true) => match p.roce_v2_ipv4_gid_index() {
            Some(i) => format!("ACTIVE RoCE port, RoCE v2 IPv4 GID at index {i}"),
            None => "ACTIVE RoCE port".into(),
        },
        (LinkLayer::Ethernet, false) if kind == FabricKind::InfiniBand => {
            "Ethernet port beside an InfiniBand fabric (storage or front end): left out".into()
        }
        (LinkLayer::Ethernet, false) => {
            "no RoCE v2 IPv4 GID (NCCL could not route over it): left out".into()
        }
        (LinkLayer::InfiniBand, false) => "left out".into(),
        (LinkLayer::Other(_), _) => {
            "not InfiniBand or RoCE (EFA and others use their own NCCL plugin): left out".into()
        }
    }
}

fn var_why(name: &str, source: Source, kind: FabricKind, policy: &NcclPolicy) -> String {
    if source == Source::Admin {
        return "the admin's nccl_set in plugstack.conf".into();
    }
    let fabric = match kind {
        FabricKind::InfiniBand => "InfiniBand",
        _ => "RoCE",
    };
    match name {
        "NCCL_IB_HCA" => format!(
            "the ACTIVE {fabric} ports, exact names (the leading '=' keeps mlx5_1 from also matching mlx5_10)"
        ),
        "NCCL_IB_GID_INDEX" => "the RoCE v2 IPv4 GID index every RoCE port has".into(),
        "NCCL_IB_TIMEOUT" => format!(
            "nccl_ib_timeout in plugstack.conf, else 22 (longer than NCCL's own 20, for large fabrics); now {}",
            policy.ib_timeout
        ),
        "NCCL_IB_TC" => "nccl_ib_tc in plugstack.conf".into(),
        "NCCL_IB_SL" => "nccl_ib_sl in plugstack.conf".into(),
        _ => "derived from the fabric".into(),
    }
}
