//! The one table of acceptance thresholds per GPU model, with the source
//! of every figure. A site overrides any of them per model in
//! `[acceptance.models."<NVML name>"]`; a model in neither gets "no
//! threshold" (its gates are not judged, which is not a failure).

use crate::config::{AcceptanceConfig, ModelThresholds};

/// One GPU model's minimums.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelRow {
    /// Short name, used in drain reasons (`H100 SXM`).
    pub label: &'static str,
    /// NVML names of the model (`nvmlDeviceGetName`), compared without
    /// case and without a leading `NVIDIA `.
    pub nvml_names: &'static [&'static str],
    /// Intra-node all-reduce bus bandwidth of 8 GPUs, GB/s.
    pub all_reduce_gbs: Option<f64>,
    /// Host-to-device copy bandwidth per GPU (nvbandwidth, CE), GB/s.
    pub h2d_gbs: Option<f64>,
    /// Where the figures come from.
    pub source: &'static str,
}

/// GPUs the table's all-reduce figure is for.
pub const ALL_REDUCE_GPUS: usize = 8;

/// Share of an HCA port's line rate one loopback `ib_write_bw` must reach
/// when neither the model nor the configuration says otherwise: Azure's
/// checks ask 380 Gb/s of NDR 400 (0.95) and 180 of HDR 200 (0.9).
pub const DEFAULT_RDMA_FRACTION: f64 = 0.9;

pub const TABLE: &[ModelRow] = &[
    ModelRow {
        label: "A100 SXM 80GB",
        nvml_names: &["A100-SXM4-80GB"],
        all_reduce_gbs: Some(228.0),
        h2d_gbs: Some(24.0),
        source: "Azure ND A100 v4 health checks (azurehpc-health-checks conf/nd96asr_v4.conf: \
                 check_nccl_allreduce 228.0, check_cuda_bw 24)",
    },
    ModelRow {
        label: "A100 SXM 40GB",
        nvml_names: &["A100-SXM4-40GB"],
        all_reduce_gbs: Some(228.0),
        h2d_gbs: Some(24.0),
        source: "as A100 SXM 80GB: same NVLink 3 (600 GB/s) and PCIe Gen4 x16",
    },
    ModelRow {
        label: "H100 SXM",
        nvml_names: &["H100 80GB HBM3"],
        all_reduce_gbs: Some(460.0),
        h2d_gbs: Some(52.0),
        source: "Azure ND H100 v5 health checks: NVLink all-reduce 460 GB/s, host-to-device \
                 52 GB/s",
    },
    ModelRow {
        label: "H100 PCIe",
        nvml_names: &["H100 PCIe", "H100 NVL"],
        all_reduce_gbs: None,
        h2d_gbs: Some(40.0),
        source: "no 8-GPU NVLink (NVL bridges join pairs): no all-reduce figure; H2D: derived, \
                 ~80% of what PCIe Gen5 x16 delivers (~52 GB/s, Azure's H100 figure)",
    },
    ModelRow {
        label: "H200",
        nvml_names: &["H200"],
        all_reduce_gbs: Some(431.0),
        h2d_gbs: Some(48.0),
        source: "Azure ND H200 v5 health checks (azurehpc-health-checks \
                 conf/nd96isr_h200_v5.conf: check_nccl_allreduce 431.0 at 16G, check_gpu_bw 48)",
    },
    ModelRow {
        label: "H200 NVL",
        nvml_names: &["H200 NVL"],
        all_reduce_gbs: None,
        h2d_gbs: Some(40.0),
        source: "as H100 PCIe: PCIe Gen5 x16, NVL bridges only",
    },
    ModelRow {
        label: "B200",
        nvml_names: &["B200"],
        all_reduce_gbs: None,
        h2d_gbs: Some(40.0),
        source: "no published all-reduce acceptance figure (set one per site); H2D: PCIe Gen5 \
                 x16 as H100",
    },
    ModelRow {
        label: "GB200",
        nvml_names: &["GB200"],
        all_reduce_gbs: None,
        h2d_gbs: None,
        source: "4 GPUs per tray (no 8-GPU node) and NVLink-C2C to the CPU: no published \
                 figure; set them per site",
    },
];

/// `NVIDIA H100 80GB HBM3` -> `h100 80gb hbm3`.
fn normalise(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let bare = lower.strip_prefix("nvidia ").unwrap_or(&lower);
    bare.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The table's row for an NVML name.
pub fn row_for(nvml_name: &str) -> Option<&'static ModelRow> {
    let n = normalise(nvml_name);
    TABLE
        .iter()
        .find(|r| r.nvml_names.iter().any(|m| normalise(m) == n))
}

/// The thresholds in force for one model: the table's, each replaced by
/// the configuration's where it sets one.
#[derive(Debug, Clone, PartialEq)]
pub struct InForce {
    /// The label for reasons: the table's, else the NVML name.
    pub label: String,
    pub all_reduce_gbs: Option<f64>,
    pub h2d_gbs: Option<f64>,
    /// An absolute per-HCA minimum, Gb/s (else the fraction of line rate).
    pub rdma_gbps: Option<f64>,
    pub rdma_fraction: f64,
    /// The all-reduce figure came from the configuration (it then holds
    /// for any GPU count, the table's for 8 GPUs only).
    pub all_reduce_from_config: bool,
}

/// The overrides the configuration gives for `nvml_name`: keyed by the
/// NVML name or the table's label, compared like the table's names.
fn configured<'a>(
    cfg: &'a AcceptanceConfig,
    nvml_name: &str,
    label: Option<&str>,
) -> Option<&'a ModelThresholds> {
    let n = normalise(nvml_name);
    let l = label.map(normalise);
    cfg.models
        .iter()
        .find(|(k, _)| {
            let k = normalise(k);
            k == n || Some(&k) == l.as_ref()
        })
        .map(|(_, v)| v)
}

/// The thresholds for a node whose GPUs NVML names `nvml_name`.
pub fn in_force(cfg: &AcceptanceConfig, nvml_name: &str) -> InForce {
    let row = row_for(nvml_name);
    let over = configured(cfg, nvml_name, row.map(|r| r.label));
    let pick = |table: Option<f64>, config: Option<f64>| config.or(table);
    InForce {
        label: row
            .map(|r| r.label.to_string())
            .unwrap_or_else(|| nvml_name.trim().to_string()),
        all_reduce_gbs: pick(
            row.and_then(|r| r.all_reduce_gbs),
            over.and_then(|o| o.all_reduce_gbs),
        ),
        h2d_gbs: pick(row.and_then(|r| r.h2d_gbs), over.and_then(|o| o.h2d_gbs)),
        rdma_gbps: over.and_then(|o| o.rdma_gbps),
        rdma_fraction: over
            .and_then(|o| o.rdma_fraction)
            .unwrap_or(cfg.rdma_min_fraction),
        all_reduce_from_config: over.and_then(|o| o.all_reduce_gbs).is_some(),
    }
}

/// The table as docs/acceptance.md shows it (tested against the file).
pub fn markdown_table() -> String {
    let fig = |v: Option<f64>| v.map_or_else(|| "none".to_string(), |v| format!("{v}"));
    let mut s = String::from(
        "| model | NVML names | all-reduce, 8 GPUs (GB/s) | host-to-device per GPU (GB/s) | source |\n\
         |---|---|---|---|---|\n",
    );
    for r in TABLE {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r.label,
            r.nvml_names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            fig(r.all_reduce_gbs),
            fig(r.h2d_gbs),
            r.source
        ));
    }
    s
}
