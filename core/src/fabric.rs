//! The node's RDMA fabric as sysfs shows it, and the NCCL environment that
//! follows from it.
//!
//! Reading is pure given a sysfs root (fixture trees in tests): every port
//! of every device under `<root>/class/infiniband` with its link layer,
//! state, physical state, rate and GID table. The SPANK plugin derives
//! `NCCL_IB_*` from it ([`nccl`]); the node checks reuse the port list to
//! verify that the expected ports are ACTIVE / LinkUp at their rate.
//!
//! sysfs is read through [`crate::sysfs_read`] (regular files only, size
//! cap, never blocking, bounded listings): a FIFO or a huge file where an
//! attribute belongs leaves that port out with a note, never a hang of the
//! step launch. Device and interface names are used only when they pass
//! [`is_safe_name`]; every text read is kept printable.

pub mod explain;
pub mod nccl;
mod read;

use serde::{Deserialize, Serialize};

pub use read::read_fabric;

/// `ports/<p>/state` value of a usable port (`4: ACTIVE`).
pub const STATE_ACTIVE: u32 = 4;
/// `ports/<p>/phys_state` value of a port with link (`5: LinkUp`).
pub const PHYS_STATE_LINK_UP: u32 = 5;

/// Longest device name used (the kernel's IB_DEVICE_NAME_MAX is 64,
/// IFNAMSIZ 16).
pub const MAX_NAME_LEN: usize = 64;

/// What a device name may hold to be used, for the notes.
pub const NAME_RULE: &str = "a device name is used only when it is 1 to 64 of A-Z a-z 0-9 _ . -";

#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// `class/infiniband` exists but cannot be listed (not a directory,
    /// unreadable, absurdly large).
    #[error("cannot list the RDMA devices: {0}")]
    List(#[source] crate::sysfs_read::SysfsError),
}

/// Whether a device or network interface name from sysfs may become part
/// of a variable or a message: HCA names end up in `NCCL_IB_HCA`
/// (`=dev:port,dev:port`), where a comma, a colon, `^` or `=` would change
/// what NCCL selects, and a control character would reach a terminal.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A name from sysfs for a note: quoted, control characters escaped.
pub fn quoted(name: &str) -> String {
    crate::text::printable(&format!("{name:?}")).into_owned()
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
    /// Devices and ports left out while reading, and why (a FIFO or a
    /// huge file where an attribute belongs, a name that cannot be used);
    /// printable text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
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
    fn safe_names() {
        for ok in ["mlx5_0", "ib0", "ens1f0np0", "rdma.3-x", &"a".repeat(64)] {
            assert!(is_safe_name(ok), "{ok}");
        }
        for bad in [
            "",
            "mlx5_0,mlx5_1",
            "mlx5_0:1",
            "\x1b[2J",
            "mlx5\n0",
            "=mlx5",
            "^mlx5",
            "mlx 5",
            "mlx5_\u{e9}",
            &"a".repeat(65),
        ] {
            assert!(!is_safe_name(bad), "{bad:?}");
        }
        assert_eq!(quoted("a\x1b[2J,\n"), "\"a\\u{1b}[2J,\\n\"");
    }

    #[test]
    fn state_codes() {
        assert_eq!(leading_code("4: ACTIVE"), Some(4));
        assert_eq!(leading_code("1: DOWN"), Some(1));
        assert_eq!(leading_code("ACTIVE"), None);
    }
}
