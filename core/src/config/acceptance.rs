//! `[acceptance]`: the tier that proves an idle node before it returns to
//! service (docs/acceptance.md). Off by default: a site turns it on.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::keys::check;

/// The most one gate (or one HCA's loopback) is given while the tier
/// runs after a boot: with the run's own work before and after the tier
/// it must fit in one health check (Slurm kills the HealthCheckProgram
/// after 60 s by default).
pub const GATE_AFTER_BOOT_MAX_S: u64 = 35;

/// One gate of the tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateName {
    /// `dcgmi diag -r <dcgm_level>` on every GPU.
    Dcgm,
    /// nccl-tests `all_reduce_perf` over the node's GPUs.
    AllReduce,
    /// `nvbandwidth -t host_to_device_memcpy_ce`.
    HostToDevice,
    /// perftest loopback per HCA (`ib_write_bw -d <hca>`).
    Rdma,
}

impl GateName {
    pub const ALL: [GateName; 4] = [
        GateName::Dcgm,
        GateName::AllReduce,
        GateName::HostToDevice,
        GateName::Rdma,
    ];

    /// As written in the configuration: `all-reduce`.
    pub fn as_str(self) -> &'static str {
        match self {
            GateName::Dcgm => "dcgm",
            GateName::AllReduce => "all-reduce",
            GateName::HostToDevice => "host-to-device",
            GateName::Rdma => "rdma",
        }
    }

    /// The check name of its findings: `gate-allreduce`.
    pub fn check_name(self) -> &'static str {
        match self {
            GateName::Dcgm => "gate-dcgm",
            GateName::AllReduce => "gate-allreduce",
            GateName::HostToDevice => "gate-h2d",
            GateName::Rdma => "gate-rdma",
        }
    }
}

/// A site's minimums for one GPU model (`[acceptance.models."<name>"]`):
/// each replaces the built-in table's figure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelThresholds {
    /// All-reduce bus bandwidth over the node's GPUs, GB/s.
    pub all_reduce_gbs: Option<f64>,
    /// Host-to-device bandwidth per GPU, GB/s.
    pub h2d_gbs: Option<f64>,
    /// Loopback bandwidth per HCA, Gb/s (instead of a share of line rate).
    pub rdma_gbps: Option<f64>,
    /// Share of each HCA's line rate.
    pub rdma_fraction: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AcceptanceConfig {
    pub enabled: bool,
    /// The gates to run, in this order.
    pub gates: Vec<GateName>,
    /// Run after a reboot gpu-health asked for.
    pub after_reboot: bool,
    /// Run after every boot.
    pub after_any_boot: bool,
    /// The whole tier's time limit; a gate gets what is left of it.
    pub timeout_s: u64,
    /// `dcgmi diag -r` level (`[dcgm] dcgmi` is the program).
    pub dcgm_level: u8,
    pub dcgm_timeout_s: u64,
    pub all_reduce_perf: PathBuf,
    /// `{gpus}` is replaced by the node's GPU count.
    pub all_reduce_args: Vec<String>,
    pub all_reduce_timeout_s: u64,
    pub nvbandwidth: PathBuf,
    pub nvbandwidth_args: Vec<String>,
    pub nvbandwidth_timeout_s: u64,
    /// `ib_write_bw` or `ib_send_bw`.
    pub ib_bw: PathBuf,
    /// `{hca}` is replaced by the HCA; the client adds `localhost`.
    pub ib_bw_args: Vec<String>,
    /// Per HCA (server and client together).
    pub ib_bw_timeout_s: u64,
    /// HCAs to test; empty: every HCA with an active port.
    pub hcas: Vec<String>,
    /// Share of an HCA's line rate its loopback must reach.
    pub rdma_min_fraction: f64,
    /// Per-model threshold overrides, keyed by NVML name or table label.
    pub models: BTreeMap<String, ModelThresholds>,
}

impl Default for AcceptanceConfig {
    fn default() -> Self {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect();
        AcceptanceConfig {
            enabled: false,
            gates: GateName::ALL.to_vec(),
            after_reboot: true,
            after_any_boot: false,
            timeout_s: 1800,
            dcgm_level: 1,
            dcgm_timeout_s: 30,
            all_reduce_perf: PathBuf::from("all_reduce_perf"),
            all_reduce_args: words(&["-b", "1G", "-e", "8G", "-f", "2", "-g", "{gpus}"]),
            all_reduce_timeout_s: 30,
            nvbandwidth: PathBuf::from("nvbandwidth"),
            nvbandwidth_args: words(&["-t", "host_to_device_memcpy_ce"]),
            nvbandwidth_timeout_s: 20,
            ib_bw: PathBuf::from("ib_write_bw"),
            ib_bw_args: words(&["-d", "{hca}", "-F", "--report_gbits", "-D", "3"]),
            ib_bw_timeout_s: 10,
            hcas: Vec::new(),
            rdma_min_fraction: 0.9,
            models: BTreeMap::new(),
        }
    }
}

impl AcceptanceConfig {
    pub fn validate(&self) -> Result<(), String> {
        check("acceptance.timeout_s", self.timeout_s as f64)?;
        check("acceptance.dcgm_level", f64::from(self.dcgm_level))?;
        check("acceptance.dcgm_timeout_s", self.dcgm_timeout_s as f64)?;
        check(
            "acceptance.all_reduce_timeout_s",
            self.all_reduce_timeout_s as f64,
        )?;
        check(
            "acceptance.nvbandwidth_timeout_s",
            self.nvbandwidth_timeout_s as f64,
        )?;
        check("acceptance.ib_bw_timeout_s", self.ib_bw_timeout_s as f64)?;
        check("acceptance.rdma_min_fraction", self.rdma_min_fraction)?;
        let mut seen = Vec::new();
        for g in &self.gates {
            if seen.contains(g) {
                return Err(format!("acceptance.gates lists {:?} twice", g.as_str()));
            }
            seen.push(*g);
        }
        for (name, m) in &self.models {
            for (key, v) in [
                ("all_reduce_gbs", m.all_reduce_gbs),
                ("h2d_gbs", m.h2d_gbs),
                ("rdma_gbps", m.rdma_gbps),
                ("rdma_fraction", m.rdma_fraction),
            ] {
                if let Some(v) = v {
                    check(&format!("acceptance.models.{key}"), v)
                        .map_err(|e| format!("{e} (in [acceptance.models.{name:?}])"))?;
                }
            }
        }
        Ok(())
    }
}

impl AcceptanceConfig {
    /// The tier as a health check runs it after a boot: every gate's
    /// limit cut to [`GATE_AFTER_BOOT_MAX_S`] and DCGM at level 1 (levels
    /// 2 and above take minutes: `gpu-health accept` runs them as
    /// configured, in a maintenance window). A limit above that could
    /// never be judged in a health check and would hold every rebooted
    /// node for a person; refusing the configuration instead would stop
    /// every drain on a site that upgraded with the old limits. Returns
    /// the copy and a note per change, to be logged loudly.
    pub fn fitted_to_a_health_check(&self) -> (AcceptanceConfig, Vec<String>) {
        let mut fitted = self.clone();
        let mut notes = Vec::new();
        let max = GATE_AFTER_BOOT_MAX_S;
        for (gate, key, limit) in [
            (GateName::Dcgm, "dcgm_timeout_s", &mut fitted.dcgm_timeout_s),
            (
                GateName::AllReduce,
                "all_reduce_timeout_s",
                &mut fitted.all_reduce_timeout_s,
            ),
            (
                GateName::HostToDevice,
                "nvbandwidth_timeout_s",
                &mut fitted.nvbandwidth_timeout_s,
            ),
            (
                GateName::Rdma,
                "ib_bw_timeout_s",
                &mut fitted.ib_bw_timeout_s,
            ),
        ] {
            if self.gates.contains(&gate) && *limit > max {
                notes.push(format!(
                    "acceptance.{key} = {limit} is cut to {max} s after a boot: the tier runs in \
                     health checks, which Slurm kills after 60 s"
                ));
                *limit = max;
            }
        }
        if self.gates.contains(&GateName::Dcgm) && self.dcgm_level > 1 {
            notes.push(format!(
                "acceptance.dcgm_level = {} runs as level 1 after a boot: levels 2 and above \
                 take minutes, more than a health check has; run them with 'gpu-health accept'",
                self.dcgm_level
            ));
            fitted.dcgm_level = 1;
        }
        (fitted, notes)
    }
}
