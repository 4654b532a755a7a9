//! Probe the node and judge it through the checks' registry
//! (`crate::checks`): NVML (with its deadline), sysfs and every check's
//! slow probe ([`probe`], before the run takes the node's turn), then
//! every check's saved state and own source, and their judges ([`judge`],
//! in the run's turn). Nothing here acts or marks anything as handled;
//! [`commit`] does, after the run has acted and saved the fault ledger.

use std::time::Duration;

use crate::checks::{self, xid::Scanned, CheckInput, Evidence, Io, JobContext};
use crate::finding::Finding;
use crate::probe::{self, ProbeOptions};
use crate::snapshot::NodeSnapshot;
use crate::xid::Cursor;

use super::{pci_bus, RunContext};

/// What the probes found before the run's turn.
pub struct Probed {
    pub snapshot: NodeSnapshot,
    pub evidence: Evidence,
}

/// Everything one check run learned.
pub struct NodeCheck {
    pub snapshot: NodeSnapshot,
    /// The run's own findings, in the checks' order.
    pub findings: Vec<Finding>,
    /// What the checks gathered (their histories, the kernel log's news).
    pub evidence: Evidence,
    job_view: Option<usize>,
}

/// NVML (abandoned at the deadline), the GPUs sysfs lists on the PCI bus,
/// and every check's slow probe. `job_view`: see `CheckInput::job_view`.
/// For the runs that act (they keep the PCI bus's answer, [`pci_bus`]).
pub fn probe(
    ctx: &RunContext,
    opts: ProbeOptions,
    job_view: Option<usize>,
    job: Option<&JobContext>,
) -> Probed {
    probe_keeping(ctx, opts, job_view, job, pci_bus::Keep::Save)
}

fn probe_keeping(
    ctx: &RunContext,
    opts: ProbeOptions,
    job_view: Option<usize>,
    job: Option<&JobContext>,
    keep: pci_bus::Keep,
) -> Probed {
    let cfg = ctx.config();
    let deadline = Duration::from_millis(cfg.nvml_deadline_ms);
    // The PCI bus is read while the child waits for NVML.
    let (mut snapshot, pci_gpus) =
        probe::probe_with_deadline_while(cfg.nvml_library.as_deref(), opts, deadline, || {
            pci_bus::nvidia_gpus(ctx, keep)
        });
    snapshot.pci_gpus = pci_gpus;
    if job_view.is_some() {
        snapshot.number_as_on_node();
    }
    let mut evidence = Evidence::default();
    checks::probe_all(&io(ctx, &snapshot, job, false), &mut evidence);
    Probed { snapshot, evidence }
}

/// Probe the node and run every check, for the runs that only read
/// (`gpu-health check`, `watch`, `resume`'s checks). Never fails.
pub fn check_node(ctx: &RunContext, opts: ProbeOptions) -> NodeCheck {
    check_node_for(ctx, opts, None)
}

/// [`check_node`] as a job starting now would be checked (its GPUs'
/// leftovers too), read only.
pub fn check_node_for(ctx: &RunContext, opts: ProbeOptions, job: Option<&JobContext>) -> NodeCheck {
    let probed = probe_keeping(ctx, opts, None, job, pci_bus::Keep::ReadOnly);
    judge(ctx, probed, None, job, false)
}

/// Gather every check's state and source, and judge. The kernel log is
/// read from the node's cursor, or from its look-back when `from_lookback`
/// (the fault ledger was lost: what the driver logged is read again).
/// Never fails: problems become findings or log lines.
pub fn judge(
    ctx: &RunContext,
    probed: Probed,
    job_view: Option<usize>,
    job: Option<&JobContext>,
    from_lookback: bool,
) -> NodeCheck {
    let Probed {
        snapshot,
        mut evidence,
    } = probed;
    checks::gather_all(&io(ctx, &snapshot, job, from_lookback), &mut evidence);
    let findings = checks::evaluate(&CheckInput {
        snapshot: &snapshot,
        config: ctx.config(),
        now_ms: ctx.now_ms,
        job_view,
        job,
        evidence: &evidence,
    });
    NodeCheck {
        snapshot,
        findings,
        evidence,
        job_view,
    }
}

impl NodeCheck {
    /// The kernel log's events this run read.
    pub fn xid_events(&self) -> &[crate::xid::XidEvent] {
        self.evidence
            .get::<Scanned>()
            .map_or(&[], |s| s.new.events.as_slice())
    }

    /// Where this run's read of the kernel log started: the saved
    /// cursor's [`Cursor::identity`], 0 for the look-back.
    pub fn xid_read_from(&self) -> u64 {
        self.evidence
            .get::<Scanned>()
            .and_then(|s| s.from.cursor.as_ref())
            .map_or(0, Cursor::identity)
    }

    /// Where the kernel log was read up to (the job's start keeps it).
    pub fn kernel_log_cursor(&self) -> Option<Cursor> {
        let scanned = self.evidence.get::<Scanned>()?;
        scanned
            .new
            .cursor
            .clone()
            .or_else(|| scanned.from.cursor.clone())
    }
}

fn io<'a>(
    ctx: &'a RunContext,
    snapshot: &'a NodeSnapshot,
    job: Option<&'a JobContext>,
    from_lookback: bool,
) -> Io<'a> {
    Io {
        config: ctx.config(),
        state: &ctx.state,
        now_ms: ctx.now_ms,
        job,
        from_lookback,
        snapshot,
        search_path: &ctx.search_path,
        boot_id: ctx.boot_id(),
    }
}

/// After the run acted: every check keeps what later runs need (its
/// history always; the kernel-log cursor only when `handled`: the run's
/// configuration was good and the fault ledger, which holds every
/// draining fault the run found, is saved), and the node snapshot is
/// saved for the SPANK plugin. Failures are logged.
pub fn commit(ctx: &RunContext, check: &NodeCheck, job: Option<&JobContext>, handled: bool) {
    super::snapshot_file::save_when_changed(ctx, &check.snapshot);
    let input = CheckInput {
        snapshot: &check.snapshot,
        config: ctx.config(),
        now_ms: ctx.now_ms,
        job_view: check.job_view,
        job,
        evidence: &check.evidence,
    };
    checks::commit_all(&io(ctx, &check.snapshot, job, false), &input, handled);
}

/// The run's check in the node's metrics (`records::metrics`).
pub fn count_in_metrics(
    ctx: &RunContext,
    check: &NodeCheck,
    run: crate::records::metrics::RunKind,
) {
    crate::records::metrics::after_check(
        &ctx.state,
        ctx.config(),
        &crate::records::metrics::CheckSeen {
            run,
            now_ms: ctx.now_ms,
            config_ok: ctx.config_ok(),
            snapshot: &check.snapshot,
            findings: &check.findings,
            xid_events: check.xid_events(),
            xid_read_from: check.xid_read_from(),
            boot_id: ctx.boot_id(),
        },
    );
}
