//! Reading the RDMA ports under `<sysfs_root>/class/infiniband`, through
//! the bounded reader.
//!
//! What happens to what sysfs never holds:
//! - a device whose name fails [`is_safe_name`]: left out, noted;
//! - a device whose `ports` cannot be listed (a file, a huge directory):
//!   left out, noted;
//! - a port with a FIFO, a directory, a huge or binary file where an
//!   attribute belongs, or a huge GID table: left out, noted;
//! - a GID entry's network device with an unusable name: dropped, noted.
//!
//! Attributes that are missing, or that the kernel refuses to read (EINVAL
//! for unused GID entries), are `None` as before: that is how sysfs looks.

use std::path::Path;

use crate::sysfs_read::{self, SysfsError, MAX_DIR_ENTRIES};
use crate::text::printable;

use super::{
    is_safe_name, parse_gid, parse_rate_gbps, quoted, Fabric, FabricError, Gid, LinkLayer,
    RdmaPort, NAME_RULE,
};

/// Read every RDMA port under `<sysfs_root>/class/infiniband`.
///
/// No such directory means no RDMA hardware (an empty fabric). Single
/// unreadable attributes become `None`; devices and ports with what sysfs
/// never holds are left out with a note in [`Fabric::notes`]; only an
/// unlistable `class/infiniband` is an error.
pub fn read_fabric(sysfs_root: &Path) -> Result<Fabric, FabricError> {
    let class = sysfs_root.join("class/infiniband");
    let devices = match sysfs_read::list_dir(&class, MAX_DIR_ENTRIES) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(Fabric::default()),
        Err(e) => return Err(FabricError::List(e)),
    };
    let mut fabric = Fabric::default();
    for device in devices {
        if !is_safe_name(&device) {
            fabric.notes.push(format!(
                "RDMA device {} left out: {NAME_RULE}",
                quoted(&device)
            ));
            continue;
        }
        let ports_dir = class.join(&device).join("ports");
        let names = match sysfs_read::list_dir(&ports_dir, MAX_DIR_ENTRIES) {
            Ok(n) => n,
            // A device without ports (being removed) has nothing to use.
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                fabric
                    .notes
                    .push(format!("RDMA device {device} left out: {e}"));
                continue;
            }
        };
        let mut numbers = Vec::new();
        for name in names {
            match name.parse::<u32>() {
                Ok(n) if n.to_string() == name => numbers.push(n),
                _ => fabric.notes.push(format!(
                    "{device}: port entry {} left out: not a port number",
                    quoted(&name)
                )),
            }
        }
        numbers.sort_unstable();
        for port in numbers {
            let dir = ports_dir.join(port.to_string());
            match read_port(&device, port, &dir, &mut fabric.notes) {
                Ok(p) => fabric.ports.push(p),
                Err(e) => fabric
                    .notes
                    .push(format!("RDMA port {device}:{port} left out: {e}")),
            }
        }
    }
    Ok(fabric)
}

/// An attribute's text, control characters made visible; `None` when it is
/// missing or unreadable; an error for what sysfs never holds.
fn attr(path: &Path) -> Result<Option<String>, SysfsError> {
    match sysfs_read::read_attr(path) {
        Ok(s) => Ok(Some(printable(&s).into_owned())),
        Err(e) if e.is_anomaly() => Err(e),
        Err(_) => Ok(None),
    }
}

fn read_port(
    device: &str,
    port: u32,
    dir: &Path,
    notes: &mut Vec<String>,
) -> Result<RdmaPort, SysfsError> {
    let link_layer = attr(&dir.join("link_layer"))?;
    let state = attr(&dir.join("state"))?;
    let phys_state = attr(&dir.join("phys_state"))?;
    let rate = attr(&dir.join("rate"))?;
    let gids = read_gids(&format!("{device}:{port}"), dir, notes)?;
    Ok(RdmaPort {
        device: device.to_string(),
        port,
        link_layer: LinkLayer::parse(link_layer.as_deref().unwrap_or("")),
        state,
        phys_state,
        rate_gbps: rate.as_deref().and_then(parse_rate_gbps),
        rate,
        gids,
    })
}

fn read_gids(hca: &str, port_dir: &Path, notes: &mut Vec<String>) -> Result<Vec<Gid>, SysfsError> {
    let gids_dir = port_dir.join("gids");
    let names = match sysfs_read::list_dir(&gids_dir, MAX_DIR_ENTRIES) {
        Ok(n) => n,
        Err(e) if e.is_anomaly() => return Err(e),
        Err(_) => Vec::new(),
    };
    let mut indices: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
    indices.sort_unstable();
    indices.dedup();
    let mut gids = Vec::new();
    for index in indices {
        let Some(address) = attr(&gids_dir.join(index.to_string()))? else {
            continue;
        };
        match parse_gid(&address) {
            Some(bytes) if bytes.iter().any(|&b| b != 0) => {}
            _ => continue,
        }
        // The kernel answers EINVAL for attributes of unused entries.
        let kind = |kind: &str| -> Result<Option<String>, SysfsError> {
            let path = port_dir
                .join("gid_attrs")
                .join(kind)
                .join(index.to_string());
            Ok(attr(&path)?.filter(|s| !s.is_empty()))
        };
        let gid_type = kind("types")?;
        let netdev = match kind("ndevs")? {
            Some(n) if !is_safe_name(&n) => {
                notes.push(format!(
                    "{hca} GID {index}: network device {} ignored: {NAME_RULE}",
                    quoted(&n)
                ));
                None
            }
            n => n,
        };
        gids.push(Gid {
            index,
            address,
            gid_type,
            netdev,
        });
    }
    Ok(gids)
}
