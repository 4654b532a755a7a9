//! The node's RDMA fabric as sysfs shows it, and the NCCL environment that
//! follows from it.
//!
//! Reading is pure given a sysfs root (fixture trees in tests): every port
//! of every device under `<root>/class/infiniband` with its link layer,
//! state, physical state, rate and GID table. The SPANK plugin derives
//! `NCCL_IB_*` from it ([`nccl`]); the node checks reuse the port list to
//! verify that the expected ports are ACTIVE / LinkUp at their rate.

pub mod explain;
pub mod nccl;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `ports/<p>/state` value of a usable port (`4: ACTIVE`).
pub const STATE_ACTIVE: u32 = 4;
/// `ports/<p>/phys_state` value of a port with link (`5: LinkUp`).
pub const PHYS_STATE_LINK_UP: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("cannot list {path}: {source}")]
    List {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What travels over a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkLayer {
    InfiniBand,
    /// RoCE.
    Ethernet,
    /// Anything else, e.g. `Unknown` on AWS EFA (NCCL_IB_* do not apply).
    Other(String),
}

impl LinkLayer {
    pub fn parse(s: &str) -> LinkLayer {
        match s.trim() {
            "InfiniBand" => LinkLayer::InfiniBand,
            "Ethernet" => LinkLayer::Ethernet,
            other => LinkLayer::Other(other.to_string()),
        }
    }
}

/// One entry of a port's GID table that holds an address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gid {
    pub index: u32,
    /// As sysfs writes it: eight groups of four hex digits.
    pub address: String,
    /// `RoCE v2` or `IB/RoCE v1`, when sysfs gives it.
    pub gid_type: Option<String>,
    /// The owning network device (RoCE), when sysfs gives it.
    pub netdev: Option<String>,
}

impl Gid {
    /// Link-local (`fe80::/64`) addresses only reach the local segment.
    pub fn is_link_local(&self) -> bool {
        parse_gid(&self.address).is_some_and(|b| b[0] == 0xfe && b[1] & 0xc0 == 0x80)
    }

    /// `::ffff:a.b.c.d`: the GID of an IPv4 address (routable RoCE v2).
    pub fn is_ipv4_mapped(&self) -> bool {
        parse_gid(&self.address)
            .is_some_and(|b| b[..10].iter().all(|&x| x == 0) && b[10] == 0xff && b[11] == 0xff)
    }

    pub fn is_roce_v2(&self) -> bool {
        self.gid_type
            .as_deref()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("RoCE v2"))
    }
}

/// One port of one RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RdmaPort {
    /// Device name, e.g. `mlx5_0`.
    pub device: String,
    pub port: u32,
    pub link_layer: LinkLayer,
    /// Raw `state`, e.g. `4: ACTIVE`; `None` when unreadable.
    pub state: Option<String>,
    /// Raw `phys_state`, e.g. `5: LinkUp`.
    pub phys_state: Option<String>,
    /// Raw `rate`, e.g. `400 Gb/sec (4X NDR)`.
    pub rate: Option<String>,
    /// The rate in Gb/s, parsed from `rate`.
    pub rate_gbps: Option<f64>,
    /// Non-empty GID entries, by index.
    pub gids: Vec<Gid>,
}

impl RdmaPort {
    pub fn state_code(&self) -> Option<u32> {
        self.state.as_deref().and_then(leading_code)
    }

    pub fn phys_state_code(&self) -> Option<u32> {
        self.phys_state.as_deref().and_then(leading_code)
    }

    pub fn is_active(&self) -> bool {
        self.state_code() == Some(STATE_ACTIVE)
    }

    pub fn is_link_up(&self) -> bool {
        self.phys_state_code() == Some(PHYS_STATE_LINK_UP)
    }

    /// `device:port`, the form NCCL_IB_HCA takes.
    pub fn hca_name(&self) -> String {
        format!("{}:{}", self.device, self.port)
    }

    /// The GID index NCCL should use on RoCE: the first RoCE v2 entry that
    /// holds an IPv4-mapped address (routable across subnets).
    pub fn roce_v2_ipv4_gid_index(&self) -> Option<u32> {
        self.gids
            .iter()
            .find(|g| g.is_roce_v2() && g.is_ipv4_mapped())
            .map(|g| g.index)
    }
}

/// All RDMA ports of a node, sorted by device then port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fabric {
    pub ports: Vec<RdmaPort>,
}

impl Fabric {
    pub fn active_ports(&self) -> impl Iterator<Item = &RdmaPort> {
        self.ports.iter().filter(|p| p.is_active())
    }

    pub fn port(&self, device: &str, port: u32) -> Option<&RdmaPort> {
        self.ports
            .iter()
            .find(|p| p.device == device && p.port == port)
    }
}

/// Read every RDMA port under `<sysfs_root>/class/infiniband`.
///
/// No such directory means no RDMA hardware (an empty fabric). Single
/// unreadable attributes become `None`; only an unlistable device
/// directory is an error.
pub fn read_fabric(sysfs_root: &Path) -> Result<Fabric, FabricError> {
    let class = sysfs_root.join("class/infiniband");
    let mut devices = match list_dir(&class) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Fabric::default()),
        Err(source) => {
            return Err(FabricError::List {
                path: class,
                source,
            })
        }
    };
    devices.sort();
    let mut ports = Vec::new();
    for device in devices {
        let ports_dir = class.join(&device).join("ports");
        let names = match list_dir(&ports_dir) {
            Ok(n) => n,
            // A device without ports (being removed) has nothing to use.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(FabricError::List {
                    path: ports_dir,
                    source,
                })
            }
        };
        let mut numbers: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
        numbers.sort_unstable();
        for port in numbers {
            ports.push(read_port(&device, port, &ports_dir.join(port.to_string())));
        }
    }
    Ok(Fabric { ports })
}

fn read_port(device: &str, port: u32, dir: &Path) -> RdmaPort {
    let rate = read_attr(&dir.join("rate"));
    RdmaPort {
        device: device.to_string(),
        port,
        link_layer: LinkLayer::parse(read_attr(&dir.join("link_layer")).as_deref().unwrap_or("")),
        state: read_attr(&dir.join("state")),
        phys_state: read_attr(&dir.join("phys_state")),
        rate_gbps: rate.as_deref().and_then(parse_rate_gbps),
        rate,
        gids: read_gids(dir),
    }
}

fn read_gids(port_dir: &Path) -> Vec<Gid> {
    let mut indices: Vec<u32> = list_dir(&port_dir.join("gids"))
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    indices.sort_unstable();
    indices
        .into_iter()
        .filter_map(|index| {
            let address = read_attr(&port_dir.join("gids").join(index.to_string()))?;
            let bytes = parse_gid(&address)?;
            if bytes.iter().all(|&b| b == 0) {
                return None;
            }
            // The kernel answers EINVAL for attributes of unused entries.
            let attr = |kind: &str| {
                read_attr(
                    &port_dir
                        .join("gid_attrs")
                        .join(kind)
                        .join(index.to_string()),
                )
                .filter(|s| !s.is_empty())
            };
            Some(Gid {
                index,
                address,
                gid_type: attr("types"),
                netdev: attr("ndevs"),
            })
        })
        .collect()
}

fn list_dir(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(name) = entry.file_name().to_str() {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

fn read_attr(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// `4: ACTIVE` -> 4.
fn leading_code(s: &str) -> Option<u32> {
    s.split(':').next()?.trim().parse().ok()
}

/// `400 Gb/sec (4X NDR)` -> 400.0, `2.5 Gb/sec (1X SDR)` -> 2.5.
pub fn parse_rate_gbps(s: &str) -> Option<f64> {
    let mut words = s.split_whitespace();
    let value: f64 = words.next()?.parse().ok()?;
    let unit = words.next()?;
    (value.is_finite() && value >= 0.0 && unit.eq_ignore_ascii_case("Gb/sec")).then_some(value)
}

/// `fe80:0000:...:1234` (eight groups) -> 16 bytes.
fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        if g.is_empty() || g.len() > 4 {
            return None;
        }
        let v = u16::from_str_radix(g, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate_gbps("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(parse_rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(parse_rate_gbps("fast"), None);
        assert_eq!(parse_rate_gbps("100"), None);
    }

    #[test]
    fn gid_kinds() {
        let gid = |a: &str| Gid {
            index: 0,
            address: a.into(),
            gid_type: Some("RoCE v2".into()),
            netdev: None,
        };
        assert!(gid("fe80:0000:0000:0000:0a42:a1ff:fe5b:1234").is_link_local());
        assert!(!gid("fe80:0000:0000:0000:0a42:a1ff:fe5b:1234").is_ipv4_mapped());
        assert!(gid("0000:0000:0000:0000:0000:ffff:0a00:0001").is_ipv4_mapped());
        assert!(!gid("0000:0000:0000:0000:0000:ffff:0a00").is_ipv4_mapped());
        assert!(!gid("0000:0000:0000:0000:0000:0000:0a00:0001").is_ipv4_mapped());
    }

    #[test]
    fn state_codes() {
        assert_eq!(leading_code("4: ACTIVE"), Some(4));
        assert_eq!(leading_code("1: DOWN"), Some(1));
        assert_eq!(leading_code("ACTIVE"), None);
    }
}
