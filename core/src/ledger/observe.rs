//! Folding a run's findings into the ledger: the clock kept honest, the
//! faults that stand no more let go, each draining finding merged into
//! its fault (gravest action sticks), escalation, and the bound.

use crate::config::{RecoveryConfig, RemediationConfig};
use crate::finding::{Action, Finding, Remedy};

use super::{capped, Clock, Fault, FaultId, Handling, Ledger, Source, MAX_FAULTS, MAX_MESSAGE};
use super::{MAX_RETURNS, MAX_SUMMARY, MAX_WHY};

/// What the ledger needs to know about the run that folds its findings in.
#[derive(Debug, Clone, Copy)]
pub struct RunView<'a> {
    /// The run's clock (read at its start).
    pub clock: Clock<'a>,
    /// The run's configuration could be used.
    pub config_ok: bool,
    /// The run read the node's kernel log from its cursor (prolog,
    /// health check): it judges again what a broken configuration judged.
    pub scans_kernel_log: bool,
    /// The run is a job's epilog (its findings are the job's).
    pub at_job_end: bool,
}

/// What folding a run's findings in came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The run found a draining fault itself.
    pub fresh: bool,
    /// Kinds of fault the return history escalated to `drain`.
    pub escalated: Vec<String>,
    /// Kinds of fault back after `[remediation] max_reboots` reboots:
    /// drained for hardware inspection.
    pub inspected: Vec<String>,
}

/// How far a fault is from being done with: not acted on yet (new or
/// pending), then covered by gpu-health's drain (it keeps the node out),
/// then cleared by a reboot (it only waits for the node's proof).
fn open_rank(h: Handling) -> u8 {
    match h {
        Handling::New => 3,
        Handling::Pending { .. } => 2,
        Handling::Drained { .. } => 1,
        Handling::Rebooted { .. } => 0,
    }
}

/// The identity under which the mildest faults beyond [`MAX_FAULTS`] are
/// kept together.
fn overflow_id() -> FaultId {
    FaultId {
        check: "ledger".into(),
        gpu: None,
        code: None,
    }
}

impl Ledger {
    /// Fold the run's findings in (the draining ones: the ledger holds
    /// what a run must act on).
    pub fn observe(
        &mut self,
        findings: &[Finding],
        view: &RunView,
        cfg: &RecoveryConfig,
        remediation: &RemediationConfig,
    ) -> Observed {
        self.keep_clock_honest(&view.clock);
        if view.config_ok && view.scans_kernel_log {
            // Read again by this run, judged by the policy the admin meant.
            self.faults
                .retain(|f| !(f.provisional && f.source == Source::KernelLog && !f.drained()));
        }
        let draining: Vec<Finding> = findings
            .iter()
            .filter(|f| f.action.drains())
            .map(|f| self.escalated(f, cfg, view.clock.wall_ms))
            .map(|f| self.inspected(f, remediation, view.clock.wall_ms))
            .collect();
        let fresh = !draining.is_empty();
        if !fresh {
            self.let_quiet_faults_go(&view.clock, cfg.quiet_ms());
        }
        let changed = |graver: fn(&Finding, &Finding) -> bool| -> Vec<String> {
            draining
                .iter()
                .zip(findings.iter().filter(|f| f.action.drains()))
                .filter(|(now, was)| graver(now, was))
                .map(|(now, _)| FaultId::of(now).kind())
                .collect()
        };
        let escalated = changed(|now, was| now.action > was.action);
        let inspected = changed(|now, was| now.remedy > was.remedy);
        for f in &draining {
            self.merge(f, view);
        }
        self.bound();
        Observed {
            fresh,
            escalated,
            inspected,
        }
    }

    /// A clock that jumped back must not leave anything stamped in the
    /// future: a window, or a quiet time measured across a boot, would
    /// not pass until the clock caught up. Future stamps become now, and
    /// the log says so. Quiet times within a boot count on the boot
    /// clock (its stamps stay as they were), so that the wall clock set
    /// right again later ends none early.
    fn keep_clock_honest(&mut self, now: &Clock) {
        let now_ms = now.wall_ms;
        let mut ahead = 0u64;
        let mut clamp = |t: &mut u64| {
            ahead = ahead.max(t.saturating_sub(now_ms));
            *t = (*t).min(now_ms);
        };
        for f in &mut self.faults {
            clamp(&mut f.first_ms);
            clamp(&mut f.last_ms);
            match &mut f.handling {
                Handling::Drained { at_ms } => clamp(at_ms),
                Handling::Pending { since_ms, .. } => clamp(since_ms),
                Handling::Rebooted { at_ms } => clamp(at_ms),
                Handling::New => {}
            }
        }
        if let Some(d) = &mut self.drain {
            clamp(&mut d.at_ms);
            clamp(&mut d.last_fault_ms);
        }
        if let Some(h) = &mut self.held {
            clamp(&mut h.at_ms);
        }
        if let Some(c) = &mut self.claim_ms {
            clamp(c);
        }
        for r in &mut self.returns {
            clamp(&mut r.at_ms);
        }
        for r in &mut self.reboots {
            clamp(&mut r.at_ms);
        }
        if let Some(r) = &mut self.reboot_asked {
            clamp(&mut r.at_ms);
        }
        let boot_ahead = self
            .faults
            .iter_mut()
            .map(|f| &mut f.last_boot)
            .chain(self.drain.as_mut().map(|d| &mut d.last_boot))
            .map(|b| now.clamp(b))
            .max()
            .unwrap_or(0);
        if ahead > 0 || boot_ahead > 0 {
            log::warn!(
                "ledger {}: stamps up to {} s ahead of the wall clock and {} s ahead of the boot clock \
                 were set to now (the clock was stepped back)",
                self.node,
                ahead / 1000,
                boot_ahead / 1000
            );
        }
    }

    /// Pending `drain-until-clean` faults stand until the node was quiet
    /// for `quiet_ms` after they were last found, as such a drain would;
    /// `drain` faults and drained faults stay (the automatic return and
    /// `gpu-health resume` end those). A fault a reboot cleared goes
    /// once quiet as long (its reboots stay counted in `reboots`).
    fn let_quiet_faults_go(&mut self, now: &Clock, quiet_ms: u64) {
        self.faults.retain(|f| {
            let quiet = now.since(f.last_ms, f.last_boot.as_ref()) >= quiet_ms;
            let goes = f.rebooted() || (f.action == Action::DrainUntilClean && !f.drained());
            !(quiet && goes)
        });
    }

    /// A `drain-until-clean` finding of a kind the automatic return
    /// brought the node back for too often drains for an admin.
    fn escalated(&self, f: &Finding, cfg: &RecoveryConfig, now_ms: u64) -> Finding {
        let mut f = f.clone();
        if f.action != Action::DrainUntilClean || cfg.escalate_after_returns == 0 {
            return f;
        }
        let kind = FaultId::of(&f).kind();
        let returns = self.returns_for(&kind, now_ms, cfg.escalate_window_ms());
        if returns < cfg.escalate_after_returns as usize {
            return f;
        }
        let h = cfg.escalate_window_hours;
        f.action = Action::Drain;
        f.summary = format!("{}, back {returns}x in {h} h", f.summary);
        f.message.push_str(&format!(
            "; the automatic return brought this node back {returns} times within {h} h for {kind}: \
             it stays drained until an admin runs 'gpu-health resume' (recovery.escalate_after_returns = {})",
            cfg.escalate_after_returns
        ));
        f
    }

    /// A fault a reboot clears that came back after `max_reboots` reboots
    /// for its kind within the window goes to hardware inspection:
    /// `drain`, no more reboots.
    fn inspected(&self, mut f: Finding, cfg: &RemediationConfig, now_ms: u64) -> Finding {
        if !cfg.reboot || f.remedy != Remedy::Reboot {
            return f;
        }
        let kind = FaultId::of(&f).kind();
        let reboots = self.reboots_for(&kind, now_ms, cfg.window_ms());
        if reboots < cfg.max_reboots as usize {
            return f;
        }
        let h = cfg.window_hours;
        f.action = Action::Drain;
        f.remedy = Remedy::Inspection;
        f.summary = format!("{}, back after {reboots} reboots in {h} h", f.summary);
        f.message.push_str(&format!(
            "; it came back after {reboots} reboots within {h} h: the hardware needs inspection, \
             no more reboots (remediation.max_reboots = {})",
            cfg.max_reboots
        ));
        f
    }

    /// One finding into its fault: the gravest action (and remedy) sticks with its
    /// text (the first finding's, among equals: the one that says where
    /// the fault was first seen, e.g. during which job); a milder one
    /// only says the fault was seen again.
    fn merge(&mut self, f: &Finding, view: &RunView) {
        let id = FaultId::of(f);
        let now = view.clock.wall_ms;
        match self.faults.iter_mut().find(|e| e.id == id) {
            Some(e) => {
                // A graver action, or a graver remedy (hardware
                // inspection after reboots), brings its text.
                if f.action > e.action || f.remedy > e.remedy {
                    e.action = e.action.max(f.action);
                    e.summary = capped(&f.summary, MAX_SUMMARY);
                    e.message = capped(&f.message, MAX_MESSAGE);
                }
                if e.pci.is_none() {
                    e.pci = f.pci.clone();
                }
                e.remedy = e.remedy.max(f.remedy);
                // Back after the reboot that was to clear it.
                if e.rebooted() {
                    e.handling = Handling::New;
                }
                e.last_ms = now;
                e.last_boot = view.clock.stamp();
                // Found again by a run that could judge it.
                if view.config_ok {
                    e.provisional = false;
                }
            }
            None => self.faults.push(Fault {
                source: Source::of(&id.check, view.at_job_end),
                id,
                action: f.action,
                pci: f.pci.clone(),
                summary: capped(&f.summary, MAX_SUMMARY),
                message: capped(&f.message, MAX_MESSAGE),
                first_ms: now,
                last_ms: now,
                last_boot: view.clock.stamp(),
                handling: Handling::New,
                provisional: !view.config_ok,
                remedy: f.remedy,
            }),
        }
    }

    /// At most [`MAX_FAULTS`]: the mildest and oldest beyond fold into
    /// one entry that keeps their gravest action, so that no bound ever
    /// drops a graver fault than it keeps.
    fn bound(&mut self) {
        if let Some(h) = &mut self.held {
            h.why = capped(&h.why, MAX_WHY);
        }
        if self.returns.len() > MAX_RETURNS {
            let excess = self.returns.len() - MAX_RETURNS;
            self.returns.drain(..excess);
        }
        // Faults a reboot cleared make room first: they only wait for the
        // node's proof, and the reboots that cleared them are counted.
        let mut excess = self.faults.len().saturating_sub(MAX_FAULTS);
        self.faults.retain(|f| {
            let goes = excess > 0 && matches!(f.handling, Handling::Rebooted { .. });
            excess -= usize::from(goes);
            !goes
        });
        if self.faults.len() <= MAX_FAULTS {
            return;
        }
        let overflow = overflow_id();
        let mut folded: Vec<Fault> = Vec::new();
        if let Some(i) = self.faults.iter().position(|f| f.id == overflow) {
            folded.push(self.faults.remove(i));
        }
        // Faults not acted on yet first (one folded away could no longer
        // be drained by its own name), then gravest, then newest; the tail
        // folds.
        self.faults.sort_by_key(|f| {
            (
                std::cmp::Reverse(open_rank(f.handling)),
                std::cmp::Reverse(f.action),
                std::cmp::Reverse(f.last_ms),
            )
        });
        folded.extend(self.faults.split_off(MAX_FAULTS - 1));
        let action = folded
            .iter()
            .map(|f| f.action)
            .max()
            .unwrap_or(Action::Drain);
        let source = folded
            .iter()
            .max_by_key(|f| f.action)
            .map_or(Source::Imported, |f| f.source);
        let first_ms = folded.iter().map(|f| f.first_ms).min().unwrap_or(0);
        let last = folded.iter().max_by_key(|f| f.last_ms);
        let last_ms = last.map_or(0, |f| f.last_ms);
        let last_boot = last.and_then(|f| f.last_boot.clone());
        let remedy = folded.iter().map(|f| f.remedy).max().unwrap_or_default();
        // The least handled of them: never drained or cleared while one
        // waits for its action, never cleared while a drained one stands.
        let handling = folded
            .iter()
            .map(|f| f.handling)
            .max_by_key(|h| open_rank(*h))
            .unwrap_or(Handling::Drained { at_ms: last_ms });
        self.faults.push(Fault {
            id: overflow,
            action,
            pci: None,
            summary: "more faults".into(),
            message: format!(
                "more faults than the ledger keeps one by one ({MAX_FAULTS}); the gravest of them calls for {}",
                action.as_str()
            ),
            source,
            first_ms,
            last_ms,
            last_boot,
            handling,
            provisional: false,
            remedy,
        });
    }
}
