//! Judging events: one finding per kind of fault and device, by the
//! policy, with repeat rules counted in the saved history. Pure: nothing
//! is read or written here.

use std::collections::{BTreeSet, HashSet};

use super::catalog::{self, sxid_is_fatal, sxid_meaning, Resolution};
use super::event::{EventKind, XidEvent};
use super::history::{RepeatHistory, USER_PREFIX};
use super::policy::{remedy, Decision, Policy};
use crate::config::PolicyAction;
use crate::finding::{Action, Finding};

/// When the judged events were logged, for the wording of the findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Before the prolog or health check that reads them: an application
    /// fault among them came from an earlier job, not the coming one.
    BeforeThisRun,
    /// During the job whose epilog reads them.
    DuringJob,
}

/// Findings beyond this many are summarised in one (an Xid storm must
/// not become thousands of log lines and verdict entries).
pub const MAX_FINDINGS: usize = 32;

/// Findings for `events` by `policy`; repeat rules count in `history`.
pub fn judge(
    events: &[XidEvent],
    policy: &Policy,
    history: &mut RepeatHistory,
    now_ms: u64,
    seen: Seen,
) -> Vec<Finding> {
    // A lost GPU often logs both Xid 79 and the "fallen off" text: one
    // finding is enough.
    let xid79: HashSet<Option<&str>> = events
        .iter()
        .filter(|e| e.kind == EventKind::Xid && e.code == 79 && !e.fallen_off_bus)
        .map(|e| e.pci.as_deref())
        .collect();
    let mut groups: Vec<Group> = Vec::new();
    for ev in events {
        // An unaddressed "fallen off" line goes with any Xid 79 beside it.
        if ev.fallen_off_bus
            && (xid79.contains(&ev.pci.as_deref()) || (ev.pci.is_none() && !xid79.is_empty()))
        {
            continue;
        }
        let d = policy.decide(ev);
        if d.action == PolicyAction::Ignore {
            continue;
        }
        let (action, repeat) = apply_repeat_rule(ev, &d, history, now_ms);
        let Some(action) = action.finding_action() else {
            continue;
        };
        let same = |g: &Group| {
            g.latest.kind == ev.kind
                && g.latest.code == ev.code
                && g.latest.pci == ev.pci
                && g.latest.fallen_off_bus == ev.fallen_off_bus
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => {
                g.count += ev.count;
                g.latest = ev;
                g.action = g.action.max(action);
                g.repeat = repeat.or(g.repeat.take());
                g.forgeable_capped |= d.forgeable_capped;
            }
            None => groups.push(Group {
                latest: ev,
                count: ev.count,
                action,
                repeat,
                forgeable_capped: d.forgeable_capped,
            }),
        }
    }
    let findings = groups.into_iter().map(|g| g.finding(seen)).collect();
    summarise_storm(findings)
}

/// The action after the repeat rule, and the rule's count for the message.
fn apply_repeat_rule(
    ev: &XidEvent,
    d: &Decision,
    history: &mut RepeatHistory,
    now_ms: u64,
) -> (PolicyAction, Option<String>) {
    // Escalation counts on one GPU: an event without an address cannot
    // be tied to one.
    let escalate = d.escalate.filter(|_| ev.pci.is_some());
    if d.repeat <= 1 && escalate.is_none() {
        return (d.action, None);
    }
    let kind = match ev.kind {
        EventKind::Xid => "xid",
        EventKind::Sxid => "sxid",
    };
    // Lines users could have written count apart: they never add to the
    // driver's own repetitions.
    let origin = if d.forgeable_capped { USER_PREFIX } else { "" };
    let key = format!(
        "{origin}{kind}-{}@{}",
        ev.code,
        ev.pci.as_deref().unwrap_or("-")
    );
    let at = ev.time_ms.unwrap_or(now_ms);
    // A folded storm event stands for `count` events at its time; more
    // than the rules need cannot change the outcome.
    let mut notes = Vec::new();
    let mut action = d.action;
    if d.repeat > 1 {
        let n = usize::try_from(ev.count.min(u64::from(d.repeat))).unwrap_or(1);
        history.push(&key, at, n.max(1));
        let seen = history.count(&key, at, u64::from(d.window_minutes) * 60_000);
        notes.push(format!(
            "{seen} of {} within {} min",
            d.repeat, d.window_minutes
        ));
        if seen < d.repeat as usize {
            action = PolicyAction::Info;
        }
    }
    if let Some(e) = escalate {
        // Counted in bursts, apart from the repeat rule's events.
        let key = format!("{key}/bursts");
        let n = usize::try_from(ev.count.min(u64::from(e.after))).unwrap_or(1);
        history.push_bursts(&key, at, u64::from(e.burst_seconds) * 1000, n.max(1));
        let seen = history.count(&key, at, u64::from(e.window_minutes) * 60_000);
        if seen >= e.after as usize && e.to > action {
            action = e.to;
            let what = if e.burst_seconds > 0 { " bursts" } else { "" };
            notes.push(format!(
                "{seen}{what} on this GPU within {} h: escalated to {} (xid.rules.{}.escalate_after = {})",
                e.window_minutes / 60,
                e.to.as_str(),
                ev.code,
                e.after
            ));
        }
    }
    (action, (!notes.is_empty()).then(|| notes.join("; ")))
}

struct Group<'a> {
    latest: &'a XidEvent,
    count: u64,
    action: Action,
    repeat: Option<String>,
    forgeable_capped: bool,
}

impl Group<'_> {
    fn finding(self, seen: Seen) -> Finding {
        let ev = self.latest;
        let entry = catalog::entry(ev.code).filter(|_| ev.kind == EventKind::Xid);
        let meaning = match ev.kind {
            EventKind::Xid => entry.map_or("not in gpu-health's catalog", |e| e.meaning),
            EventKind::Sxid => sxid_meaning(sxid_is_fatal(&ev.message)),
        };
        // The user-facing text names the GPU but not the process: another
        // user's pid and program name go to the node's log only.
        let mut message = format!("{}: {} ({meaning})", ev.place(), ev.message);
        if entry.is_some_and(|e| e.resolution == Resolution::RestartApp) {
            message.push_str(match seen {
                Seen::BeforeThisRun => {
                    "; an application fault of an earlier job on this GPU, not of the coming one"
                }
                Seen::DuringJob => "; an application fault, most likely of this job's own code",
            });
        }
        if self.count > 1 {
            message.push_str(&format!("; {} events since the last check", self.count));
        }
        if let Some(r) = &self.repeat {
            message.push_str(&format!("; repeat rule: {r}"));
        }
        if self.forgeable_capped {
            message.push_str(
                "; read from a line users can write (a syslog `kernel:` tag or a log file others may write), so it warns instead of draining (xid.syslog_may_drain)",
            );
        }
        message.push_str(&format!("; action: {}", self.action.as_str()));
        let culprit = match (ev.pid, &ev.process) {
            (Some(pid), Some(p)) => Some(format!("pid {pid} ({p})")),
            (Some(pid), None) => Some(format!("pid {pid}")),
            (None, Some(p)) => Some(format!("process {p}")),
            (None, None) => None,
        };
        Finding {
            check: match ev.kind {
                EventKind::Xid => "xid",
                EventKind::Sxid => "sxid",
            }
            .to_string(),
            action: self.action,
            gpu: ev.gpu,
            pci: ev.pci.clone(),
            summary: ev.summary(),
            message,
            culprit,
            code: Some(ev.code),
            forgeable: self.forgeable_capped,
            remedy: remedy(ev),
        }
    }
}

/// At most [`MAX_FINDINGS`]: the gravest are kept as they are, the rest
/// become one finding with their gravest action, so a draining fault is
/// never summarised away into a milder one.
fn summarise_storm(mut findings: Vec<Finding>) -> Vec<Finding> {
    if findings.len() <= MAX_FINDINGS {
        return findings;
    }
    // Stable: among equals, log order stays.
    findings.sort_by_key(|f| std::cmp::Reverse(f.action));
    let rest = findings.split_off(MAX_FINDINGS - 1);
    let action = rest.iter().map(|f| f.action).max().unwrap_or(Action::Info);
    let mut labels: BTreeSet<String> = BTreeSet::new();
    let mut devices: BTreeSet<&str> = BTreeSet::new();
    for f in &rest {
        labels.insert(f.summary.split(' ').take(2).collect::<Vec<_>>().join(" "));
        if let Some(p) = f.pci.as_deref() {
            devices.insert(p);
        }
    }
    let shown: Vec<&str> = labels.iter().map(String::as_str).take(8).collect();
    let more = labels.len().saturating_sub(shown.len());
    let mut kinds = shown.join(", ");
    if more > 0 {
        kinds.push_str(&format!(" and {more} more codes"));
    }
    let summary = format!("Xid storm +{} more", rest.len());
    let message = format!(
        "{} more faults ({kinds}) on {} devices; the gravest calls for {}; `gpu-health xids` lists every event",
        rest.len(),
        devices.len(),
        action.as_str()
    );
    findings.push(Finding::node("xid", action, summary, message));
    findings
}
