//! Probe the node and judge it: NVML (with its deadline), sysfs, the saved
//! ECC history, the kernel log from the node's cursor, the RDMA ports and,
//! for runs that may drain, the findings still pending from earlier runs.
//! Nothing here acts or marks anything as handled; [`commit`] does, after
//! the run has acted.

use std::time::Duration;

use crate::checks::{self, CheckInput, EccHistory, LinkHistory};
use crate::finding::{Action, Finding};
use crate::ops::escalation::{self, ReturnHistory};
use crate::ops::pending::{PendingDrain, RunView};
use crate::probe::{self, ProbeOptions};
use crate::snapshot::NodeSnapshot;
use crate::state::StateFile;
use crate::xid::{self, ScanOutcome, XidState};

use super::RunContext;

/// The kernel's id of this boot: the NVLink history holds for one boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Everything one check run learned.
pub struct NodeCheck {
    pub snapshot: NodeSnapshot,
    /// The run's own findings, then the pending ones it judges with them.
    pub findings: Vec<Finding>,
    /// The run itself found a draining fault (not only pending ones).
    pub fresh_fault: bool,
    pub history: EccHistory,
    /// The saved ECC history was missing or unusable: rewrite it.
    pub history_stale: bool,
    /// The NVLinks seen active since this boot, this run's included after
    /// [`commit`].
    pub links: LinkHistory,
    pub xid: ScanOutcome,
    /// What `StateFile::PendingDrain` held (for the run's update of it).
    pub pending: Option<PendingDrain>,
}

/// Probe the node and run every check. Never fails: problems become
/// findings or log lines.
pub fn check_node(ctx: &RunContext, opts: ProbeOptions) -> NodeCheck {
    check_node_seen(ctx, opts, None)
}

/// [`check_node`] for a run that may see the node through a job's cgroup
/// (see `CheckInput::job_view`).
pub fn check_node_seen(ctx: &RunContext, opts: ProbeOptions, job_view: Option<usize>) -> NodeCheck {
    let cfg = ctx.config();
    let deadline = Duration::from_millis(cfg.nvml_deadline_ms);
    let mut snapshot = probe::probe_with_deadline(cfg.nvml_library.as_deref(), opts, deadline);
    snapshot.pci_gpus = probe::sysfs::nvidia_gpus_on_pci(&cfg.sysfs_root);
    if job_view.is_some() {
        snapshot.number_as_on_node();
    }
    let (history, history_stale) = match ctx.state.load::<EccHistory>(StateFile::EccHistory) {
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
    let links = match ctx.state.load::<LinkHistory>(StateFile::NvlinkHistory) {
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
    let (xid_state, note) = match ctx.state.load::<XidState>(StateFile::KernelLogCursor) {
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
    let fresh_fault = findings.iter().any(|f| f.action.drains());
    NodeCheck {
        snapshot,
        findings,
        fresh_fault,
        history,
        history_stale,
        links,
        xid,
        pending: None,
    }
}

/// [`check_node_seen`] plus the draining findings earlier runs could not
/// act on: what the runs that may drain (prolog, health check) judge.
pub fn check_node_for_drain(
    ctx: &RunContext,
    opts: ProbeOptions,
    job_view: Option<usize>,
) -> NodeCheck {
    let mut check = check_node_seen(ctx, opts, job_view);
    check.pending = match ctx.state.load::<PendingDrain>(StateFile::PendingDrain) {
        Ok(p) => p,
        Err(e) => {
            log::error!("pending drain findings unreadable, ignoring them: {e}");
            None
        }
    };
    if let Some(p) = &check.pending {
        let merged = p.to_merge(&check.findings, &view(ctx, &check));
        for f in &merged {
            log::warn!("{}", f.log_line());
        }
        check.findings.extend(merged);
    }
    escalate(ctx, &mut check.findings);
    check
}

/// A fault the automatic return keeps bringing the node back for drains
/// for an admin (see `ops::escalation`). The history is read only when a
/// finding would drain until clean.
fn escalate(ctx: &RunContext, findings: &mut [Finding]) {
    if !findings.iter().any(|f| f.action == Action::DrainUntilClean) {
        return;
    }
    let history = match ctx.state.load::<ReturnHistory>(StateFile::ReturnHistory) {
        Ok(h) => h.unwrap_or_default(),
        Err(e) => {
            log::error!("the automatic-return history is unusable ({e}); not escalating");
            return;
        }
    };
    let cfg = &ctx.config().recovery;
    if escalation::escalate(findings, &history, cfg, ctx.now_ms) > 0 {
        log::error!(
            "{} returned by itself {} times or more within {} h for the same fault: draining it for an admin",
            ctx.node,
            cfg.escalate_after_returns,
            cfg.escalate_window_hours
        );
    }
}

/// What the pending rules need to know about this run.
pub fn view(ctx: &RunContext, check: &NodeCheck) -> RunView {
    RunView {
        now_ms: ctx.now_ms,
        quiet_ms: ctx.config().recovery.quiet_ms(),
        fresh_fault: check.fresh_fault,
        config_ok: ctx.config_ok(),
    }
}

/// After the run acted: save what later runs need. The ECC history and
/// the latest snapshot (the SPANK plugin reads its topology) are
/// measurements and always saved; the kernel-log cursor and repeat
/// history mark Xid records as handled, so they are saved only when
/// `handled` (the run's configuration was good and whatever it could not
/// act on is kept as pending). Failures are logged.
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
        if let Err(e) = ctx.state.save(StateFile::EccHistory, &check.history) {
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
        if let Err(e) = ctx.state.save(StateFile::NvlinkHistory, &check.links) {
            log::error!("cannot save the NVLink history: {e}");
        }
    }
    if let Err(e) = ctx.state.save(StateFile::NodeSnapshot, &check.snapshot) {
        log::error!("cannot save the node snapshot: {e}");
    }
    if !handled {
        if !check.xid.events.is_empty() {
            log::warn!(
                "kernel log: cursor not moved; the records this run could not act on are read again next time"
            );
        }
        return;
    }
    if let Err(e) = ctx.state.save(StateFile::KernelLogCursor, &check.xid.state) {
        log::error!("cannot save the kernel-log cursor: {e}");
    }
}
