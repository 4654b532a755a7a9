//! NCCL's "system configuration" variables derived from the fabric.
//!
//! | fabric | derived |
//! |---|---|
//! | InfiniBand (any ACTIVE IB port) | `NCCL_IB_HCA==dev:port,...` of the ACTIVE IB ports, `NCCL_IB_TIMEOUT` |
//! | RoCE (ACTIVE Ethernet ports with a RoCE v2 IPv4 GID) | the same plus `NCCL_IB_GID_INDEX` |
//! | EFA (`Unknown`), RoCE without a usable GID, no RDMA | nothing |
//!
//! `NCCL_IB_TC` / `NCCL_IB_SL` come from the admin's policy on IB and
//! RoCE; the admin's `set` list is applied on every fabric and wins over
//! a derived value of the same name.

use serde::{Deserialize, Serialize};

use super::{is_safe_name, quoted, Fabric, LinkLayer, RdmaPort, NAME_RULE};

/// Seed value for large fabrics (NCCL's default is 20 since 2.23).
pub const DEFAULT_IB_TIMEOUT: u32 = 22;

/// The admin's NCCL settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclPolicy {
    /// `NCCL_IB_TIMEOUT` on IB and RoCE.
    pub ib_timeout: u32,
    /// `NCCL_IB_TC` on IB and RoCE, when set.
    pub ib_tc: Option<u32>,
    /// `NCCL_IB_SL` on IB and RoCE, when set.
    pub ib_sl: Option<u32>,
    /// Variables set on every fabric (`nccl_set=NAME=VALUE`), in order.
    pub set: Vec<(String, String)>,
}

impl Default for NcclPolicy {
    fn default() -> Self {
        NcclPolicy {
            ib_timeout: DEFAULT_IB_TIMEOUT,
            ib_tc: None,
            ib_sl: None,
            set: Vec::new(),
        }
    }
}

/// Which kind of RDMA the derivation found usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FabricKind {
    InfiniBand,
    Roce,
    /// RDMA ports exist but NCCL_IB_* do not apply (EFA, RoCE without a
    /// routable GID, nothing ACTIVE).
    Unusable,
    None,
}

/// Where a variable's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Fabric,
    Admin,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclVar {
    pub name: String,
    pub value: String,
    pub source: Source,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclEnv {
    pub kind: FabricKind,
    pub vars: Vec<NcclVar>,
    /// Why something was left out (for the log).
    pub notes: Vec<String>,
}

impl NcclEnv {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    }
}

/// The NCCL variables for this fabric under this policy.
pub fn derive_nccl_env(fabric: &Fabric, policy: &NcclPolicy) -> NcclEnv {
    let mut notes = Vec::new();
    // read_fabric leaves such devices out already; a Fabric built or
    // deserialised elsewhere gets the same rule: a name with a comma, a
    // colon or a control character never reaches NCCL_IB_HCA.
    let active: Vec<&RdmaPort> = fabric
        .active_ports()
        .filter(|p| {
            let safe = is_safe_name(&p.device);
            if !safe {
                notes.push(format!(
                    "RDMA device {} left out: {NAME_RULE}",
                    quoted(&p.device)
                ));
            }
            safe
        })
        .collect();
    let ib: Vec<&RdmaPort> = active
        .iter()
        .copied()
        .filter(|p| p.link_layer == LinkLayer::InfiniBand)
        .collect();
    let roce: Vec<(&RdmaPort, u32)> = active
        .iter()
        .copied()
        .filter(|p| p.link_layer == LinkLayer::Ethernet)
        .filter_map(|p| match p.roce_v2_ipv4_gid_index() {
            Some(i) => Some((p, i)),
            None => {
                notes.push(format!(
                    "{}: RoCE port without a RoCE v2 IPv4 GID, left out",
                    p.hca_name()
                ));
                None
            }
        })
        .collect();
    let down = fabric.ports.iter().filter(|p| !p.is_active()).count();
    if down > 0 {
        notes.push(format!("{down} RDMA port(s) not ACTIVE, left out"));
    }

    let mut vars = Vec::new();
    let fabric_var = |name: &str, value: String| NcclVar {
        name: name.to_string(),
        value,
        source: Source::Fabric,
    };
    let kind = if !ib.is_empty() {
        // IB ports win over RoCE ones: an Ethernet RDMA port beside an IB
        // fabric is a storage or front-end NIC, not the compute rail.
        vars.push(fabric_var("NCCL_IB_HCA", hca_list(ib.iter().copied())));
        FabricKind::InfiniBand
    } else if !roce.is_empty() {
        vars.push(fabric_var(
            "NCCL_IB_HCA",
            hca_list(roce.iter().map(|(p, _)| *p)),
        ));
        let first = roce[0].1;
        if roce.iter().all(|(_, i)| *i == first) {
            vars.push(fabric_var("NCCL_IB_GID_INDEX", first.to_string()));
        } else {
            notes.push("RoCE ports disagree on the GID index; NCCL picks one per port".into());
        }
        FabricKind::Roce
    } else if fabric.ports.is_empty() {
        FabricKind::None
    } else {
        FabricKind::Unusable
    };
    if matches!(kind, FabricKind::InfiniBand | FabricKind::Roce) {
        vars.push(fabric_var("NCCL_IB_TIMEOUT", policy.ib_timeout.to_string()));
        if let Some(tc) = policy.ib_tc {
            vars.push(fabric_var("NCCL_IB_TC", tc.to_string()));
        }
        if let Some(sl) = policy.ib_sl {
            vars.push(fabric_var("NCCL_IB_SL", sl.to_string()));
        }
    }
    for (name, value) in &policy.set {
        vars.retain(|v| &v.name != name);
        vars.push(NcclVar {
            name: name.clone(),
            value: value.clone(),
            source: Source::Admin,
        });
    }
    NcclEnv { kind, vars, notes }
}

/// `=mlx5_0:1,mlx5_1:1`: the `=` makes NCCL match names exactly (a plain
/// `mlx5_1` would also select `mlx5_10`).
fn hca_list<'a>(ports: impl Iterator<Item = &'a RdmaPort>) -> String {
    let names: Vec<String> = ports.map(RdmaPort::hca_name).collect();
    format!("={}", names.join(","))
}
