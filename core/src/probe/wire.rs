//! The probe child's answer on its pipe: a [`NodeSnapshot`] in a compact
//! binary form instead of JSON.
//!
//! The child is a fork of the same program (no exec), so both ends always
//! agree on the layout: no versioning, no field names. JSON cost the child
//! ~0.26 M instructions to write and the parent ~0.43 M to read for 8
//! GPUs (mostly the 144 NVLink objects); this costs a few thousand.
//!
//! Layout: the magic `GHW1`, then every field in declaration order.
//! Integers are little-endian fixed width, `bool` one byte (0 or 1), a
//! string or list a `u32` count then its items, an `Option` one byte
//! (0 none, 1 some) then the value, an enum one tag byte then its fields.
//! The encoder destructures every struct without `..`, so a new field
//! fails to compile here until it is carried.
//!
//! The reader trusts nothing: a short, long or malformed message (a child
//! that died half-way, a library that wrote on the pipe) is an error, and
//! no count can make it allocate more than the message's own length.

use crate::snapshot::{
    AccountedProcess, EccCounts, FabricInfo, GpuLink, GpuSnapshot, NodeSnapshot, NvLinkState,
    NvmlFailure, PcieLink, RemappedRows, RunningProcess,
};

const MAGIC: &[u8; 4] = b"GHW1";

/// The snapshot as the child sends it.
pub fn encode(snap: &NodeSnapshot) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(4096));
    w.0.extend_from_slice(MAGIC);
    let NodeSnapshot {
        taken_at_ms,
        probe_us,
        nvml_error,
        driver_version,
        pci_gpus,
        gpus,
        topology,
    } = snap;
    w.u64(*taken_at_ms);
    w.u64(*probe_us);
    w.opt(nvml_error.as_ref(), Writer::failure);
    w.opt(driver_version.as_deref(), Writer::str);
    w.list(pci_gpus, |w, s| w.str(s));
    w.list(gpus, Writer::gpu);
    w.opt(topology.as_ref(), |w, rows| {
        w.list(rows, |w, row| w.list(row, |w, l| w.link(*l)))
    });
    w.0
}

/// The snapshot the child sent, or why it cannot be read.
pub fn decode(bytes: &[u8]) -> Result<NodeSnapshot, String> {
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not a probe answer")?;
    let mut r = Reader(rest);
    let snap = NodeSnapshot {
        taken_at_ms: r.u64()?,
        probe_us: r.u64()?,
        nvml_error: r.opt(Reader::failure)?,
        driver_version: r.opt(Reader::string)?,
        pci_gpus: r.list(Reader::string)?,
        gpus: r.list(Reader::gpu)?,
        topology: r.opt(|r| r.list(|r| r.list(Reader::link)))?,
    };
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the snapshot", r.0.len()));
    }
    Ok(snap)
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn bool(&mut self, v: bool) {
        self.0.push(u8::from(v));
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn count(&mut self, n: usize) {
        // Nothing the probe builds comes near 4 G items or bytes.
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn str(&mut self, s: &str) {
        self.count(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn opt<T: ?Sized>(&mut self, v: Option<&T>, f: impl FnOnce(&mut Self, &T)) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                f(self, v);
            }
        }
    }
    fn opt_u32(&mut self, v: Option<u32>) {
        self.opt(v.as_ref(), |w, v| w.u32(*v));
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        self.opt(v.as_ref(), |w, v| w.u64(*v));
    }
    fn opt_bool(&mut self, v: Option<bool>) {
        self.opt(v.as_ref(), |w, v| w.bool(*v));
    }
    fn list<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Self, &T)) {
        self.count(items.len());
        for item in items {
            f(self, item);
        }
    }
    fn link(&mut self, l: GpuLink) {
        self.u8(match l {
            GpuLink::Itself => 0,
            GpuLink::Nvlink => 1,
            GpuLink::Pcie => 2,
        });
    }
    fn failure(&mut self, f: &NvmlFailure) {
        match f {
            NvmlFailure::LibraryMissing { detail } => {
                self.u8(0);
                self.str(detail);
            }
            NvmlFailure::InitFailed { detail } => {
                self.u8(1);
                self.str(detail);
            }
            NvmlFailure::Timeout { deadline_ms } => {
                self.u8(2);
                self.u64(*deadline_ms);
            }
            NvmlFailure::ProbeCrashed { detail } => {
                self.u8(3);
                self.str(detail);
            }
        }
    }
    fn gpu(&mut self, g: &GpuSnapshot) {
        let GpuSnapshot {
            index,
            uuid,
            name,
            pci_bus_id,
            lost,
            query_errors,
            memory_total_bytes,
            memory_used_bytes,
            utilization_gpu_pct,
            temperature_c,
            fan_speed_pct,
            power_usage_mw,
            power_limit_mw,
            default_power_limit_mw,
            energy_mj,
            ecc,
            remapped_rows,
            retired_pages_pending,
            pcie,
            nvlinks,
            throttle_reasons,
            power_violation_ns,
            thermal_violation_ns,
            persistence_mode,
            accounting_mode,
            accounted_processes,
            fabric,
            recovery_action,
            running_processes,
            mig_mode,
        } = g;
        self.u32(*index);
        self.opt(uuid.as_deref(), Writer::str);
        self.opt(name.as_deref(), Writer::str);
        self.opt(pci_bus_id.as_deref(), Writer::str);
        self.bool(*lost);
        self.list(query_errors, |w, s| w.str(s));
        self.opt_u64(*memory_total_bytes);
        self.opt_u64(*memory_used_bytes);
        self.opt_u32(*utilization_gpu_pct);
        self.opt_u32(*temperature_c);
        self.opt_u32(*fan_speed_pct);
        self.opt_u32(*power_usage_mw);
        self.opt_u32(*power_limit_mw);
        self.opt_u32(*default_power_limit_mw);
        self.opt_u64(*energy_mj);
        self.opt(ecc.as_ref(), |w, e| {
            let EccCounts {
                volatile_corrected,
                volatile_uncorrected,
                aggregate_corrected,
                aggregate_uncorrected,
            } = e;
            w.u64(*volatile_corrected);
            w.u64(*volatile_uncorrected);
            w.u64(*aggregate_corrected);
            w.u64(*aggregate_uncorrected);
        });
        self.opt(remapped_rows.as_ref(), |w, r| {
            let RemappedRows {
                correctable,
                uncorrectable,
                pending,
                failure,
            } = r;
            w.u32(*correctable);
            w.u32(*uncorrectable);
            w.bool(*pending);
            w.bool(*failure);
        });
        self.opt_bool(*retired_pages_pending);
        self.opt(pcie.as_ref(), |w, p| {
            let PcieLink {
                current_gen,
                max_gen,
                current_width,
                max_width,
                replay_counter,
            } = p;
            w.u32(*current_gen);
            w.u32(*max_gen);
            w.u32(*current_width);
            w.u32(*max_width);
            w.opt_u64(*replay_counter);
        });
        self.list(nvlinks, |w, l| {
            let NvLinkState {
                link,
                active,
                error_total,
            } = l;
            w.u32(*link);
            w.bool(*active);
            w.opt_u64(*error_total);
        });
        self.opt_u64(*throttle_reasons);
        self.opt_u64(*power_violation_ns);
        self.opt_u64(*thermal_violation_ns);
        self.opt_bool(*persistence_mode);
        self.opt_bool(*accounting_mode);
        self.list(accounted_processes, |w, p| {
            let AccountedProcess {
                pid,
                max_memory_bytes,
                start_time_us,
                time_ms,
                is_running,
                gpu_utilization,
                memory_utilization,
            } = p;
            w.u32(*pid);
            w.opt_u64(*max_memory_bytes);
            w.u64(*start_time_us);
            w.u64(*time_ms);
            w.bool(*is_running);
            w.opt_u32(*gpu_utilization);
            w.opt_u32(*memory_utilization);
        });
        self.opt(fabric.as_ref(), |w, f| {
            let FabricInfo { state, status } = f;
            w.u8(*state);
            w.u32(*status);
        });
        self.opt_u32(*recovery_action);
        self.list(running_processes, |w, p| {
            let RunningProcess {
                pid,
                used_memory_bytes,
            } = p;
            w.u32(*pid);
            w.opt_u64(*used_memory_bytes);
        });
        self.opt_bool(*mig_mode);
    }
}

struct Reader<'a>(&'a [u8]);

type Res<T> = Result<T, String>;

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Res<[u8; N]> {
        let Some((head, rest)) = self.0.split_first_chunk::<N>() else {
            return Err("probe answer cut short".into());
        };
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Res<u8> {
        Ok(self.take::<1>()?[0])
    }
    fn bool(&mut self) -> Res<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bad boolean {b} in probe answer")),
        }
    }
    fn u32(&mut self) -> Res<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Res<u64> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    /// A count of items of at least one byte each: never more than what
    /// is left, so a bad count cannot make a large allocation.
    fn count(&mut self) -> Res<usize> {
        let n = self.u32()? as usize;
        if n > self.0.len() {
            return Err("probe answer cut short".into());
        }
        Ok(n)
    }
    fn string(&mut self) -> Res<String> {
        let n = self.count()?;
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        String::from_utf8(s.to_vec()).map_err(|_| "text in probe answer is not UTF-8".into())
    }
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Res<T>) -> Res<Option<T>> {
        match self.u8()? {
            0 => Ok(None),
            1 => f(self).map(Some),
            b => Err(format!("bad option tag {b} in probe answer")),
        }
    }
    fn opt_u32(&mut self) -> Res<Option<u32>> {
        self.opt(Reader::u32)
    }
    fn opt_u64(&mut self) -> Res<Option<u64>> {
        self.opt(Reader::u64)
    }
    fn opt_bool(&mut self) -> Res<Option<bool>> {
        self.opt(Reader::bool)
    }
    fn list<T>(&mut self, mut f: impl FnMut(&mut Self) -> Res<T>) -> Res<Vec<T>> {
        let n = self.count()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(f(self)?);
        }
        Ok(out)
    }
    fn link(&mut self) -> Res<GpuLink> {
        match self.u8()? {
            0 => Ok(GpuLink::Itself),
            1 => Ok(GpuLink::Nvlink),
            2 => Ok(GpuLink::Pcie),
            b => Err(format!("bad link {b} in probe answer")),
        }
    }
    fn failure(&mut self) -> Res<NvmlFailure> {
        Ok(match self.u8()? {
            0 => NvmlFailure::LibraryMissing {
                detail: self.string()?,
            },
            1 => NvmlFailure::InitFailed {
                detail: self.string()?,
            },
            2 => NvmlFailure::Timeout {
                deadline_ms: self.u64()?,
            },
            3 => NvmlFailure::ProbeCrashed {
                detail: self.string()?,
            },
            b => return Err(format!("bad NVML failure {b} in probe answer")),
        })
    }
    fn gpu(&mut self) -> Res<GpuSnapshot> {
        Ok(GpuSnapshot {
            index: self.u32()?,
            uuid: self.opt(Reader::string)?,
            name: self.opt(Reader::string)?,
            pci_bus_id: self.opt(Reader::string)?,
            lost: self.bool()?,
            query_errors: self.list(Reader::string)?,
            memory_total_bytes: self.opt_u64()?,
            memory_used_bytes: self.opt_u64()?,
            utilization_gpu_pct: self.opt_u32()?,
            temperature_c: self.opt_u32()?,
            fan_speed_pct: self.opt_u32()?,
            power_usage_mw: self.opt_u32()?,
            power_limit_mw: self.opt_u32()?,
            default_power_limit_mw: self.opt_u32()?,
            energy_mj: self.opt_u64()?,
            ecc: self.opt(|r| {
                Ok(EccCounts {
                    volatile_corrected: r.u64()?,
                    volatile_uncorrected: r.u64()?,
                    aggregate_corrected: r.u64()?,
                    aggregate_uncorrected: r.u64()?,
                })
            })?,
            remapped_rows: self.opt(|r| {
                Ok(RemappedRows {
                    correctable: r.u32()?,
                    uncorrectable: r.u32()?,
                    pending: r.bool()?,
                    failure: r.bool()?,
                })
            })?,
            retired_pages_pending: self.opt_bool()?,
            pcie: self.opt(|r| {
                Ok(PcieLink {
                    current_gen: r.u32()?,
                    max_gen: r.u32()?,
                    current_width: r.u32()?,
                    max_width: r.u32()?,
                    replay_counter: r.opt_u64()?,
                })
            })?,
            nvlinks: self.list(|r| {
                Ok(NvLinkState {
                    link: r.u32()?,
                    active: r.bool()?,
                    error_total: r.opt_u64()?,
                })
            })?,
            throttle_reasons: self.opt_u64()?,
            power_violation_ns: self.opt_u64()?,
            thermal_violation_ns: self.opt_u64()?,
            persistence_mode: self.opt_bool()?,
            accounting_mode: self.opt_bool()?,
            accounted_processes: self.list(|r| {
                Ok(AccountedProcess {
                    pid: r.u32()?,
                    max_memory_bytes: r.opt_u64()?,
                    start_time_us: r.u64()?,
                    time_ms: r.u64()?,
                    is_running: r.bool()?,
                    gpu_utilization: r.opt_u32()?,
                    memory_utilization: r.opt_u32()?,
                })
            })?,
            fabric: self.opt(|r| {
                Ok(FabricInfo {
                    state: r.u8()?,
                    status: r.u32()?,
                })
            })?,
            recovery_action: self.opt_u32()?,
            running_processes: self.list(|r| {
                Ok(RunningProcess {
                    pid: r.u32()?,
                    used_memory_bytes: r.opt_u64()?,
                })
            })?,
            mig_mode: self.opt_bool()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field set (and every option some), so a field the encoder
    /// or decoder mixed up shows.
    fn full() -> NodeSnapshot {
        let gpu = |index: u32| GpuSnapshot {
            index,
            uuid: Some(format!("GPU-{index}")),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            pci_bus_id: Some(format!("0000:{index:02x}:00.0")),
            lost: index == 1,
            query_errors: vec!["fan speed: ünknown".into(), String::new()],
            memory_total_bytes: Some(80 << 30),
            memory_used_bytes: Some(1 << 20),
            utilization_gpu_pct: Some(7),
            temperature_c: Some(41),
            fan_speed_pct: Some(30),
            power_usage_mw: Some(70_000),
            power_limit_mw: Some(700_000),
            default_power_limit_mw: Some(700_001),
            energy_mj: Some(u64::MAX),
            ecc: Some(EccCounts {
                volatile_corrected: 1,
                volatile_uncorrected: 2,
                aggregate_corrected: 3,
                aggregate_uncorrected: 4,
            }),
            remapped_rows: Some(RemappedRows {
                correctable: 5,
                uncorrectable: 6,
                pending: true,
                failure: false,
            }),
            retired_pages_pending: Some(false),
            pcie: Some(PcieLink {
                current_gen: 5,
                max_gen: 5,
                current_width: 16,
                max_width: 16,
                replay_counter: Some(9),
            }),
            nvlinks: vec![
                NvLinkState {
                    link: 0,
                    active: true,
                    error_total: Some(0),
                },
                NvLinkState {
                    link: 17,
                    active: false,
                    error_total: None,
                },
            ],
            throttle_reasons: Some(0x28),
            power_violation_ns: Some(10),
            thermal_violation_ns: Some(11),
            persistence_mode: Some(true),
            accounting_mode: Some(true),
            accounted_processes: vec![AccountedProcess {
                pid: 4242,
                max_memory_bytes: Some(1 << 30),
                start_time_us: 12,
                time_ms: 13,
                is_running: true,
                gpu_utilization: Some(99),
                memory_utilization: None,
            }],
            fabric: Some(FabricInfo {
                state: 3,
                status: 0,
            }),
            recovery_action: Some(2),
            running_processes: vec![RunningProcess {
                pid: 77,
                used_memory_bytes: None,
            }],
            mig_mode: Some(false),
        };
        NodeSnapshot {
            taken_at_ms: 1_700_000_000_000,
            probe_us: 1234,
            nvml_error: Some(NvmlFailure::Timeout { deadline_ms: 9999 }),
            driver_version: Some("550.90.07".into()),
            pci_gpus: vec!["0000:00:00.0".into(), "0000:01:00.0".into()],
            gpus: vec![gpu(0), gpu(1)],
            topology: Some(vec![
                vec![GpuLink::Itself, GpuLink::Nvlink],
                vec![GpuLink::Pcie, GpuLink::Itself],
            ]),
        }
    }

    #[test]
    fn snapshots_come_back_as_sent() {
        let s = full();
        assert_eq!(decode(&encode(&s)).unwrap(), s);
        let empty = NodeSnapshot::default();
        assert_eq!(decode(&encode(&empty)).unwrap(), empty);
        for f in [
            NvmlFailure::LibraryMissing { detail: "a".into() },
            NvmlFailure::InitFailed { detail: "b".into() },
            NvmlFailure::ProbeCrashed { detail: "c".into() },
        ] {
            let s = NodeSnapshot {
                nvml_error: Some(f),
                ..NodeSnapshot::default()
            };
            assert_eq!(decode(&encode(&s)).unwrap(), s);
        }
    }

    #[test]
    fn cut_or_padded_answers_are_refused() {
        let bytes = encode(&full());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        assert!(decode(b"{\"taken_at_ms\":0}").is_err());
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[0; 16]); // times
        bytes.extend_from_slice(&[0, 0]); // no error, no driver
        bytes.extend_from_slice(&u32::MAX.to_le_bytes()); // pci_gpus
        assert!(decode(&bytes).is_err());
    }
}
