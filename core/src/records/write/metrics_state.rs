//! The node's health as kept for Prometheus (`StateFile::HealthMetrics`):
//! the latest check's verdict and findings, the GPUs it saw and their live
//! power, when each run last ran, the Xid events of this boot by code.
//! Plain data and how a run folds into it; [`super::metrics`] reads and
//! writes it, [`super::metrics_render`] turns it into the textfile.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::finding::{Action, Finding};
use crate::snapshot::NodeSnapshot;
use crate::state::{StateFile, StateValue};
use crate::xid::XidEvent;

/// Version of the state file's layout.
pub const HEALTH_METRICS_VERSION: u32 = 1;

/// Which run looked at the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    Prolog,
    HealthCheck,
}

/// A GPU's identity, for the metrics' labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLabel {
    pub index: u32,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub name: Option<String>,
}

/// How many findings of one check, action and GPU the latest check had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingCount {
    pub check: String,
    pub action: Action,
    pub gpu: Option<u32>,
    pub count: u32,
}

/// The latest check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckView {
    pub at_ms: u64,
    pub run: RunKind,
    /// The run's configuration could not be used (its verdict is the
    /// fallback's).
    pub config_error: bool,
    pub findings: Vec<FindingCount>,
}

/// One GPU's power at the latest probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPower {
    pub index: u32,
    pub draw_w: Option<f64>,
    pub limit_w: Option<f64>,
}

/// The live power of the latest probe (any run's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerView {
    pub at_ms: u64,
    pub gpus: Vec<GpuPower>,
}

pub use super::metrics_xids::{LogPosition, XidCounts};

/// What the textfile's health part is made of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthMetrics {
    pub version: u32,
    pub last_prolog_ms: Option<u64>,
    pub last_health_check_ms: Option<u64>,
    pub check: Option<CheckView>,
    /// The GPUs of the latest probe that named them.
    pub gpus: Vec<GpuLabel>,
    pub power: Option<PowerView>,
    pub xids: XidCounts,
}

impl Default for HealthMetrics {
    fn default() -> Self {
        HealthMetrics {
            version: HEALTH_METRICS_VERSION,
            last_prolog_ms: None,
            last_health_check_ms: None,
            check: None,
            gpus: Vec::new(),
            power: None,
            xids: XidCounts::default(),
        }
    }
}

impl StateValue for HealthMetrics {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::HealthMetrics
    }
}

/// What a check (Prolog or health check) saw.
pub struct CheckSeen<'a> {
    pub run: RunKind,
    pub now_ms: u64,
    pub config_ok: bool,
    pub snapshot: &'a NodeSnapshot,
    pub findings: &'a [Finding],
    /// The kernel-log events the run read.
    pub xid_events: &'a [XidEvent],
    /// Where that read started ([`crate::xid::Cursor::identity`] of the
    /// saved cursor; 0 for the look-back).
    pub xid_read_from: u64,
    /// The boot they belong to (the run's `RunContext::boot_id`).
    pub boot_id: &'a str,
}

fn count_findings(findings: &[Finding]) -> Vec<FindingCount> {
    let mut counts: BTreeMap<(String, Action, Option<u32>), u32> = BTreeMap::new();
    for f in findings {
        *counts
            .entry((f.check.clone(), f.action, f.gpu))
            .or_insert(0) += 1;
    }
    counts
        .into_iter()
        .map(|((check, action, gpu), count)| FindingCount {
            check,
            action,
            gpu,
            count,
        })
        .collect()
}

/// The node's GPUs and their power as one probe saw them (the epilog's
/// at job end, the health check's, the Prolog's).
#[derive(Debug, Clone, PartialEq)]
pub struct LivePower {
    /// `None` when NVML answered nothing.
    pub power: Option<PowerView>,
    pub gpus: Vec<GpuLabel>,
}

impl LivePower {
    pub fn of(snapshot: &NodeSnapshot) -> LivePower {
        if snapshot.nvml_error.is_some() || snapshot.gpus.is_empty() {
            return LivePower {
                power: None,
                gpus: Vec::new(),
            };
        }
        let w = |mw: Option<u32>| mw.map(|v| f64::from(v) / 1000.0);
        LivePower {
            power: Some(PowerView {
                at_ms: snapshot.taken_at_ms,
                gpus: snapshot
                    .gpus
                    .iter()
                    .map(|g| GpuPower {
                        index: g.index,
                        draw_w: w(g.power_usage_mw),
                        limit_w: w(g.power_limit_mw),
                    })
                    .collect(),
            }),
            gpus: snapshot
                .gpus
                .iter()
                .map(|g| GpuLabel {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    pci_bus_id: g.pci_bus_id.clone(),
                    name: g.name.clone(),
                })
                .collect(),
        }
    }
}

impl HealthMetrics {
    pub(super) fn see_probe(&mut self, live: &LivePower) {
        let Some(power) = &live.power else {
            return;
        };
        self.power = Some(power.clone());
        // A lost GPU answers nothing: keep what an earlier probe knew of
        // it.
        let known = std::mem::take(&mut self.gpus);
        self.gpus = live
            .gpus
            .iter()
            .map(|g| {
                let before = known.iter().find(|k| k.index == g.index);
                let or_before = |v: &Option<String>, f: fn(&GpuLabel) -> &Option<String>| {
                    v.clone().or_else(|| before.and_then(|b| f(b).clone()))
                };
                GpuLabel {
                    index: g.index,
                    uuid: or_before(&g.uuid, |b| &b.uuid),
                    pci_bus_id: or_before(&g.pci_bus_id, |b| &b.pci_bus_id),
                    name: or_before(&g.name, |b| &b.name),
                }
            })
            .collect();
    }

    pub(super) fn see_check(&mut self, seen: &CheckSeen<'_>) {
        match seen.run {
            RunKind::Prolog => self.last_prolog_ms = Some(seen.now_ms),
            RunKind::HealthCheck => self.last_health_check_ms = Some(seen.now_ms),
        }
        self.check = Some(CheckView {
            at_ms: seen.now_ms,
            run: seen.run,
            config_error: !seen.config_ok,
            findings: count_findings(seen.findings),
        });
        self.see_probe(&LivePower::of(seen.snapshot));
        self.xids
            .add(seen.boot_id, seen.xid_read_from, seen.xid_events);
    }
}
