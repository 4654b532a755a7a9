//! Probe the node and judge it: NVML (with its deadline) and sysfs
//! ([`probe`], before the run takes the node's turn: it is the slow
//! part), then the saved ECC and NVLink histories, the checks, the kernel
//! log from the node's cursor and the RDMA ports ([`judge`], in the
//! run's turn). Nothing here acts or marks anything as handled; [`commit`]
//! does, after the run has acted and saved the fault ledger.

use std::time::Duration;

use crate::checks::{self, CheckInput, EccHistory, LinkHistory};
use crate::finding::Finding;
use crate::probe::{self, ProbeOptions};
use crate::snapshot::NodeSnapshot;
use crate::xid::{self, ScanOutcome, XidState};

use super::RunContext;

/// The kernel's id of this boot: the NVLink history holds for one boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Everything one check run learned.
pub struct NodeCheck {
    pub snapshot: NodeSnapshot,
    /// The run's own findings.
    pub findings: Vec<Finding>,
    pub history: EccHistory,
    /// The saved ECC history was missing or unusable: rewrite it.
    pub history_stale: bool,
    /// The NVLinks seen active since this boot, this run's included after
    /// [`commit`].
    pub links: LinkHistory,
    pub xid: ScanOutcome,
    /// The Xid state as it was saved (to save only a changed one).
    pub xid_loaded: Option<XidState>,
}

/// NVML (abandoned at the deadline) and the GPUs sysfs lists on the PCI
/// bus. `job_view`: see `CheckInput::job_view`.
pub fn probe(ctx: &RunContext, opts: ProbeOptions, job_view: Option<usize>) -> NodeSnapshot {
    let cfg = ctx.config();
    let deadline = Duration::from_millis(cfg.nvml_deadline_ms);
    let mut snapshot = probe::probe_with_deadline(cfg.nvml_library.as_deref(), opts, deadline);
    snapshot.pci_gpus = probe::sysfs::nvidia_gpus_on_pci(&cfg.sysfs_root);
    if job_view.is_some() {
        snapshot.number_as_on_node();
    }
    snapshot
}

/// Probe the node and run every check, for the runs that only read
/// (`gpu-health check`, `watch`, `resume`'s checks). Never fails.
pub fn check_node(ctx: &RunContext, opts: ProbeOptions) -> NodeCheck {
    judge(ctx, probe(ctx, opts, None), None, false)
}

/// Run every check on `snapshot`, and scan the kernel log from the
/// node's cursor (from its look-back when `from_lookback`: the fault
/// ledger was lost, so what the driver logged is read again). Never
/// fails: problems become findings or log lines.
pub fn judge(
    ctx: &RunContext,
    snapshot: NodeSnapshot,
    job_view: Option<usize>,
    from_lookback: bool,
) -> NodeCheck {
    let cfg = ctx.config();
    let (history, history_stale) = match ctx.state.load::<EccHistory>(()) {
        Ok(Some(h)) => (h, false),
        Ok(None) => (EccHistory::default(), true),
        Err(e) => {
            log::warn!("ECC history unusable, starting a new one: {e}");
            (EccHistory::default(), true)
        }
    };
    let boot_id = std::fs::read_to_string(BOOT_ID)
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let links = match ctx.state.load::<LinkHistory>(()) {
        Ok(h) => h.unwrap_or_default(),
        Err(e) => {
            log::warn!("NVLink history unusable, starting a new one: {e}");
            LinkHistory::default()
        }
    }
    .for_boot(&boot_id);
    let mut findings = checks::evaluate(&CheckInput {
        snapshot: &snapshot,
        config: cfg,
        history: &history,
        links: &links,
        now_ms: ctx.now_ms,
        job_view,
    });
    let saved = if from_lookback {
        Ok(None)
    } else {
        ctx.state.load::<XidState>(())
    };
    let xid_loaded = saved.as_ref().ok().cloned().flatten();
    let (xid_state, note) = match saved {
        Ok(saved) => XidState::checked(saved),
        Err(e) => (
            XidState::fresh(),
            Some(format!(
                "Xid cursor unusable ({e}); starting over with the look-back"
            )),
        ),
    };
    if let Some(n) = note {
        log::warn!("kernel log: {n}");
    }
    let xid = xid::scan(&cfg.kernel_log, xid_state, &cfg.xid, &snapshot, ctx.now_ms);
    for n in &xid.notes {
        log::warn!("kernel log: {n}");
    }
    findings.extend(xid.findings.iter().cloned());
    findings.extend(crate::ops::rdma_ports::check_node_ports(
        &cfg.rdma,
        &cfg.sysfs_root,
    ));
    NodeCheck {
        snapshot,
        findings,
        history,
        history_stale,
        links,
        xid,
        xid_loaded,
    }
}

/// After the run acted: save what later runs need. The ECC history and
/// the latest snapshot (the SPANK plugin reads its topology) are
/// measurements and always saved; the kernel-log cursor and repeat
/// history mark Xid records as handled, so they are saved only when
/// `handled` (the run's configuration was good and the fault ledger,
/// which holds every draining fault the run found, is saved). Failures
/// are logged.
pub fn commit(ctx: &RunContext, check: &mut NodeCheck, handled: bool) {
    let samples = check
        .snapshot
        .gpus
        .iter()
        .filter_map(|g| Some((g.uuid.clone()?, g.ecc?.aggregate_corrected)))
        .collect::<Vec<_>>();
    // At most one sample a minute: most runs leave the history as it is,
    // and then it is not rewritten.
    if check.history.record(samples, ctx.now_ms) || check.history_stale {
        if let Err(e) = ctx.state.save((), &check.history) {
            log::error!("cannot save the ECC history: {e}");
        }
    }
    let active = check.snapshot.gpus.iter().flat_map(|g| {
        let uuid = g.uuid.as_deref();
        g.nvlinks
            .iter()
            .filter(|l| l.active)
            .filter_map(move |l| Some((uuid?, l.link)))
    });
    if check.links.record(active) {
        if let Err(e) = ctx.state.save((), &check.links) {
            log::error!("cannot save the NVLink history: {e}");
        }
    }
    save_snapshot_when_it_changed(ctx, &check.snapshot);
    if !handled {
        if !check.xid.events.is_empty() {
            log::warn!(
                "kernel log: cursor not moved; the records this run could not act on are read again next time"
            );
        }
        return;
    }
    if check.xid_loaded.as_ref() == Some(&check.xid.state) {
        return; // nothing new read: the saved cursor stands
    }
    if let Err(e) = ctx.state.save((), &check.xid.state) {
        log::error!("cannot save the kernel-log cursor: {e}");
    }
}

/// The snapshot's readers (the SPANK plugin) need its GPUs and their
/// topology: the file is rewritten when those changed (or it is missing or
/// unreadable), not on every run.
fn save_snapshot_when_it_changed(ctx: &RunContext, snapshot: &NodeSnapshot) {
    let same = |old: &NodeSnapshot| {
        old.topology == snapshot.topology
            && old.driver_version == snapshot.driver_version
            && old.nvml_error == snapshot.nvml_error
            && old.gpus.len() == snapshot.gpus.len()
            && old.gpus.iter().zip(&snapshot.gpus).all(|(a, b)| {
                (a.index, &a.uuid, &a.pci_bus_id, a.lost)
                    == (b.index, &b.uuid, &b.pci_bus_id, b.lost)
            })
    };
    if ctx
        .state
        .load::<NodeSnapshot>(())
        .ok()
        .flatten()
        .is_some_and(|old| same(&old))
    {
        return;
    }
    if let Err(e) = ctx.state.save((), snapshot) {
        log::error!("cannot save the node snapshot: {e}");
    }
}
