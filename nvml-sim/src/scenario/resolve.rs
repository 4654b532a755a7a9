//! From scenario JSON to a [`Scenario`]: applies defaults, derives identities
//! and rejects anything inconsistent with a message naming the field.

use super::model::{Gpu, NvLinkTopology, PciAddress, Scenario, Topology, MAX_GPUS};
use super::spec::{GpuSpec, ReturnCodeSpec, ScenarioFile, TopologyFull, TopologySpec, BUILTIN_GPU};
use crate::abi::{NVML_NVLINK_MAX_LINKS, RETURN_CODE_NAMES, TOPOLOGY_LEVEL_NAMES};
use crate::exports::EXPORTED_FUNCTIONS;
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};

/// Bus numbers of the eight GPUs of an HGX H100 board.
const HGX_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

pub(super) fn resolve(text: &str) -> Result<Scenario, String> {
    let file: ScenarioFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let overrides = per_gpu_overrides(file.gpus.as_ref())?;
    let count = match file.count {
        Some(c) => c as usize,
        None => overrides.iter().map(|(pos, _)| pos + 1).max().unwrap_or(0),
    };
    if count > MAX_GPUS {
        return Err(format!("count {count} exceeds {MAX_GPUS}"));
    }
    if let Some((pos, _)) = overrides.iter().find(|(pos, _)| *pos >= count) {
        return Err(format!("gpus: entry for GPU {pos} but count is {count}"));
    }

    let base: Value = serde_json::from_str(BUILTIN_GPU).map_err(|e| e.to_string())?;
    let mut gpus = Vec::with_capacity(count);
    for position in 0..count {
        let mut merged = base.clone();
        if let Some(defaults) = &file.defaults {
            merge(&mut merged, defaults);
        }
        for (_, over) in overrides.iter().filter(|(p, _)| *p == position) {
            merge(&mut merged, over);
        }
        let spec: GpuSpec =
            serde_json::from_value(merged).map_err(|e| format!("GPU {position}: {e}"))?;
        gpus.push(build_gpu(position as u32, count as u32, spec)?);
    }
    check_unique(&gpus)?;

    let topology = topology(file.topology, count as u32)?;
    for hang in &file.hangs {
        check_call_name(&hang.call, "hangs")?;
    }
    let visible = gpus
        .iter()
        .filter(|g| g.lost_mode() != Some(super::LostMode::Absent))
        .map(|g| g.position as usize)
        .collect();
    Ok(Scenario {
        description: file.description,
        driver_version: file.driver_version,
        nvml_version: file.nvml_version,
        cuda_driver_version: file.cuda_driver_version,
        driver_loaded_unix_ms: file.driver_loaded_unix_ms.unwrap_or_else(boot_time_ms),
        init_error: file.init_error.map(return_code).transpose()?,
        gpus,
        topology,
        hangs: file.hangs,
        visible,
    })
}

/// `gpus` as (position, partial object) pairs, from an array or a map.
fn per_gpu_overrides(gpus: Option<&Value>) -> Result<Vec<(usize, Value)>, String> {
    match gpus {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.iter().cloned().enumerate().collect()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(key, v)| {
                key.parse::<usize>()
                    .map(|pos| (pos, v.clone()))
                    .map_err(|_| format!("gpus: key {key:?} is not a GPU position"))
            })
            .collect(),
        Some(_) => Err("gpus: expected an array or an object keyed by position".into()),
    }
}

/// Overlays `over` onto `base`: objects merge key by key, anything else
/// (numbers, arrays, null) replaces.
fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (key, value) in o {
                match b.get_mut(key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        b.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (slot, value) => *slot = value.clone(),
    }
}

fn build_gpu(position: u32, count: u32, spec: GpuSpec) -> Result<Gpu, String> {
    let ctx = |msg: String| format!("GPU {position}: {msg}");
    let pci = match &spec.pci_bus_id {
        Some(text) => PciAddress::parse(text)
            .ok_or_else(|| ctx(format!("pci_bus_id {text:?} is not a PCI address")))?,
        None => PciAddress {
            domain: position / 8,
            bus: HGX_BUSES[(position % 8) as usize],
            device: 0,
            function: 0,
        },
    };
    if spec.nvlink.count > NVML_NVLINK_MAX_LINKS {
        return Err(ctx(format!("nvlink.count exceeds {NVML_NVLINK_MAX_LINKS}")));
    }
    if let Some(link) = spec
        .nvlink
        .inactive
        .iter()
        .find(|&&l| l >= spec.nvlink.count)
    {
        return Err(ctx(format!("nvlink.inactive: link {link} >= count")));
    }
    for key in spec.nvlink.errors.keys() {
        match key.parse::<u32>() {
            Ok(link) if link < spec.nvlink.count => {}
            _ => {
                return Err(ctx(format!(
                    "nvlink.errors: {key:?} is not a link of this GPU"
                )))
            }
        }
    }
    for process in &spec.accounting.processes {
        if process.start_unix_ms.is_some() == process.started_ms_ago.is_some() {
            return Err(ctx(format!(
                "process {}: give exactly one of start_unix_ms and started_ms_ago",
                process.pid
            )));
        }
    }
    for call in &spec.not_supported {
        check_call_name(call, "not_supported").map_err(ctx)?;
    }
    let identity = format!("{}|{}|{position}", spec.name, pci.nvml_bus_id());
    let (hi, lo) = (fnv1a(&identity, 0x51), fnv1a(&identity, 0xa7));
    let uuid = spec.uuid.clone().unwrap_or_else(|| {
        format!(
            "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xffff,
            hi & 0xffff,
            lo >> 48,
            lo & 0xffff_ffff_ffff
        )
    });
    let serial = spec
        .serial
        .clone()
        .unwrap_or_else(|| format!("1654{:09}", lo % 1_000_000_000));
    let numa_node = spec
        .numa_node
        .unwrap_or(if count > 1 { position * 2 / count } else { 0 });
    Ok(Gpu {
        position,
        uuid,
        serial,
        pci,
        minor_number: spec.minor_number.unwrap_or(position),
        numa_node,
        spec,
    })
}

fn check_unique(gpus: &[Gpu]) -> Result<(), String> {
    let mut uuids = HashSet::new();
    let mut buses = HashSet::new();
    for gpu in gpus {
        if !uuids.insert(gpu.uuid.as_str()) {
            return Err(format!(
                "GPU {}: uuid {} used twice",
                gpu.position, gpu.uuid
            ));
        }
        if !buses.insert(gpu.pci) {
            return Err(format!(
                "GPU {}: PCI address {} used twice",
                gpu.position,
                gpu.pci.nvml_bus_id()
            ));
        }
    }
    Ok(())
}

fn topology(spec: TopologySpec, count: u32) -> Result<Topology, String> {
    let full = match spec {
        TopologySpec::Short(s) => {
            let nvlink = match s.as_str() {
                "auto" | "nvswitch" => "auto",
                "pcie" | "none" => "none",
                other => return Err(format!("topology: unknown form {other:?}")),
            };
            TopologyFull {
                nvlink: Value::String(nvlink.into()),
                same_numa: "NODE".into(),
                cross_numa: "SYSTEM".into(),
            }
        }
        TopologySpec::Full(full) => full,
    };
    let nvlink = match &full.nvlink {
        Value::String(s) if s == "auto" || s == "nvswitch" => NvLinkTopology::Auto,
        Value::String(s) if s == "none" => NvLinkTopology::None,
        other => {
            let pairs: Vec<(u32, u32)> = serde_json::from_value(other.clone())
                .map_err(|e| format!("topology.nvlink: {e}"))?;
            let mut set = BTreeSet::new();
            for (a, b) in pairs {
                if a >= count || b >= count || a == b {
                    return Err(format!("topology.nvlink: bad pair [{a}, {b}]"));
                }
                set.insert((a.min(b), a.max(b)));
            }
            NvLinkTopology::Pairs(set)
        }
    };
    Ok(Topology {
        nvlink,
        same_numa: level(&full.same_numa)?,
        cross_numa: level(&full.cross_numa)?,
    })
}

fn level(name: &str) -> Result<u32, String> {
    TOPOLOGY_LEVEL_NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
        .ok_or_else(|| format!("topology: unknown level {name:?}"))
}

fn return_code(spec: ReturnCodeSpec) -> Result<u32, String> {
    match spec {
        ReturnCodeSpec::Number(n) => Ok(n),
        ReturnCodeSpec::Name(name) => {
            let bare = name.trim_start_matches("NVML_ERROR_");
            RETURN_CODE_NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(bare))
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("init_error: unknown code {name:?}"))
        }
    }
}

fn check_call_name(call: &str, what: &str) -> Result<(), String> {
    if call == "any" || EXPORTED_FUNCTIONS.contains(&call) {
        Ok(())
    } else {
        Err(format!(
            "{what}: {call:?} is not a function nvml-sim exports"
        ))
    }
}

/// The machine's boot time, so that the energy counter starts "when the
/// driver was loaded" and agrees between processes.
fn boot_time_ms() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            stat.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .map(|s| s * 1000)
        .unwrap_or(1_700_000_000_000)
}

fn fnv1a(text: &str, seed: u8) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in std::iter::once(seed).chain(text.bytes()) {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}
