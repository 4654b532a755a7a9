//! The Xid event: one Xid or SXid the kernel logged (the readers make
//! them with `assemble::Assembler`).

use serde::{Deserialize, Serialize};

use crate::snapshot::NodeSnapshot;

/// GPU Xid from the NVIDIA driver, or NVSwitch SXid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Xid,
    Sxid,
}

/// One Xid (or SXid) the kernel logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    pub kind: EventKind,
    pub code: u32,
    /// Reported by the driver's "fallen off the bus" message rather than
    /// an Xid record; `code` is then 79.
    #[serde(default)]
    pub fallen_off_bus: bool,
    /// Normalised `DDDD:BB:DD.F` (the GPU's, or the NVSwitch's for SXids).
    pub pci: Option<String>,
    /// NVML index, when the snapshot knows the address.
    pub gpu: Option<u32>,
    /// The MIG GPU instance the driver tied the Xid to (`GPU-I:05` in
    /// the record), on the GPU at `pci`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    pub uuid: Option<String>,
    pub pid: Option<u32>,
    /// Process name as the driver logged it.
    pub process: Option<String>,
    /// Driver text after the code (and after pid/name).
    pub message: String,
    /// Unix ms of the record, when the log's clock allows it.
    pub time_ms: Option<u64>,
    /// Microseconds since boot, when the record carries them.
    pub monotonic_us: Option<u64>,
    /// `/dev/kmsg` sequence number, when known.
    pub seq: Option<u64>,
    /// Read from a source users can write to (a syslog text file, a log
    /// file others may write): by default it cannot drain a node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forgeable: bool,
    /// How many events of the log this one stands for: more than 1 when
    /// a storm was folded (this is the latest of them).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u64,
}

fn one() -> u64 {
    1
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

impl XidEvent {
    /// An event with its kind, code and message and nothing else known
    /// yet (no address, GPU, process or time; seen once); the readers fill
    /// in what their line holds.
    pub fn new(kind: EventKind, code: u32, message: impl Into<String>) -> XidEvent {
        XidEvent {
            kind,
            code,
            fallen_off_bus: false,
            pci: None,
            gpu: None,
            gpu_instance: None,
            uuid: None,
            pid: None,
            process: None,
            message: message.into(),
            time_ms: None,
            monotonic_us: None,
            seq: None,
            forgeable: false,
            count: 1,
        }
    }

    /// `Xid 79` or `SXid 12028`.
    pub fn label(&self) -> String {
        match self.kind {
            EventKind::Xid => format!("Xid {}", self.code),
            EventKind::Sxid => format!("SXid {}", self.code),
        }
    }

    /// The finding summary (and drain reason part), e.g.
    /// `Xid 79 GPU5 0000:c1:00.0`: what and where. The pid and process
    /// name are a user's, not the driver's: they go to the node's log
    /// only (the finding's culprit), never into a reason that every user
    /// reads with `sinfo -R`.
    pub fn summary(&self) -> String {
        self.place()
    }

    /// What and where, without the process: `Xid 79 GPU5 0000:c1:00.0`,
    /// with the MIG GPU instance as the driver writes it when the Xid
    /// names one (`Xid 94 GPU5 0000:c1:00.0 GPU-I:05`).
    pub fn place(&self) -> String {
        let mut s = self.label();
        if let Some(gpu) = self.gpu {
            s.push_str(&format!(" GPU{gpu}"));
        }
        if let Some(pci) = &self.pci {
            s.push(' ');
            s.push_str(pci);
        }
        if let Some(instance) = self.gpu_instance {
            s.push_str(&format!(" GPU-I:{instance:02}"));
        }
        if self.fallen_off_bus {
            s.push_str(" fallen off the bus");
        }
        s
    }

    /// Fill GPU index and UUID from the snapshot.
    pub fn attach_gpu(&mut self, snapshot: &NodeSnapshot) {
        if self.kind != EventKind::Xid {
            return;
        }
        if let Some(gpu) = self.pci.as_deref().and_then(|p| snapshot.gpu_by_pci(p)) {
            self.gpu = Some(gpu.index);
            self.uuid = gpu.uuid.clone();
        }
    }
}
