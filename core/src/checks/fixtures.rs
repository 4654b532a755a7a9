//! What the checks' tests share: a healthy 8-GPU node and a run of every
//! check on a snapshot.

use super::ecc::{EccHistory, Saved};
use super::nvlink::{LinkHistory, Seen};
use super::{evaluate, CheckInput, Evidence};
use crate::config::Config;
use crate::finding::Finding;
use crate::snapshot::*;

pub const NOW: u64 = 1_800_000_000_000;

pub fn healthy_gpu(i: u32) -> GpuSnapshot {
    GpuSnapshot {
        index: i,
        uuid: Some(format!("GPU-{i:08}")),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + i)),
        temperature_c: Some(45),
        power_usage_mw: Some(300_000),
        power_limit_mw: Some(700_000),
        default_power_limit_mw: Some(700_000),
        ecc: Some(EccCounts::default()),
        remapped_rows: Some(RemappedRows::default()),
        retired_pages_pending: Some(false),
        pcie: Some(PcieLink {
            current_gen: 5,
            max_gen: 5,
            current_width: 16,
            max_width: 16,
            replay_counter: Some(0),
        }),
        nvlinks: (0..18)
            .map(|l| NvLinkState {
                link: l,
                active: true,
                error_total: Some(0),
            })
            .collect(),
        throttle_reasons: Some(0),
        persistence_mode: Some(true),
        accounting_mode: Some(true),
        ..GpuSnapshot::default()
    }
}

pub fn healthy() -> NodeSnapshot {
    NodeSnapshot {
        gpus: (0..8).map(healthy_gpu).collect(),
        ..NodeSnapshot::default()
    }
}

pub fn run(snap: &NodeSnapshot) -> Vec<Finding> {
    run_with(snap, &Config::default(), &EccHistory::default())
}

/// Every link of the healthy node seen active earlier in this boot.
pub fn links_seen() -> LinkHistory {
    let mut h = LinkHistory::default();
    let healthy = healthy();
    h.record(healthy.gpus.iter().flat_map(|g| {
        let uuid = g.uuid.as_deref().unwrap_or("");
        g.nvlinks.iter().map(move |l| (uuid, l.link))
    }));
    h
}

pub fn run_with(snap: &NodeSnapshot, config: &Config, history: &EccHistory) -> Vec<Finding> {
    run_seen(snap, config, history, &links_seen())
}

pub fn run_seen(
    snap: &NodeSnapshot,
    config: &Config,
    history: &EccHistory,
    links: &LinkHistory,
) -> Vec<Finding> {
    run_seen_as(snap, config, history, links, None)
}

/// Every check's judge, as a run that saw `history` and `links` would,
/// from inside a job's cgroup when `job_view`.
pub fn run_seen_as(
    snap: &NodeSnapshot,
    config: &Config,
    history: &EccHistory,
    links: &LinkHistory,
    job_view: Option<usize>,
) -> Vec<Finding> {
    let mut evidence = Evidence::default();
    evidence.insert(Saved {
        history: history.clone(),
        stale: false,
    });
    evidence.insert(Seen(links.clone()));
    evaluate(&CheckInput {
        snapshot: snap,
        config,
        now_ms: NOW,
        job_view,
        job: None,
        evidence: &evidence,
    })
}

pub fn only(findings: &[Finding]) -> &Finding {
    assert_eq!(findings.len(), 1, "{findings:#?}");
    &findings[0]
}
