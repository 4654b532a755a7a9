//! Findings: what a check concluded about one GPU or the whole node.

use serde::{Deserialize, Serialize};

/// What gpu-health does about a finding. Ordered from mildest to gravest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Recorded and shown; never refuses a job.
    Info,
    /// Job-level warning: the user is told, strict jobs are refused.
    Warn,
    /// Node drained; a later clean check may return it to service.
    DrainUntilClean,
    /// Node drained until an admin resumes it.
    Drain,
}

impl Action {
    pub fn drains(self) -> bool {
        matches!(self, Action::Drain | Action::DrainUntilClean)
    }

    /// The one word for the action, everywhere gpu-health shows it: the
    /// commands' tables and JSON, the logs, the drain reason and the
    /// metrics (`info`, `warn`, `drain-until-clean`, `drain`).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Info => "info",
            Action::Warn => "warn",
            Action::DrainUntilClean => "drain-until-clean",
            Action::Drain => "drain",
        }
    }

    /// Every action, mildest first.
    pub const ALL: [Action; 4] = [
        Action::Info,
        Action::Warn,
        Action::DrainUntilClean,
        Action::Drain,
    ];
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// What clears a fault, as NVIDIA's catalog and the driver say: a node
/// reboot (which resets every GPU), or a person. Only the remediation
/// policy (`[remediation]`) reads it; a fault no one marked needs a
/// person. Ordered by how much it asks of people: where two findings of
/// one fault disagree, the greater stands.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Remedy {
    /// A GPU reset or a node reboot clears it.
    Reboot,
    /// An admin has to look (replace, reseat, update, decide).
    #[default]
    Person,
    /// It came back after as many reboots as the policy allows: the
    /// hardware needs inspection (`[remediation] max_reboots`).
    Inspection,
}

impl Remedy {
    pub fn as_str(self) -> &'static str {
        match self {
            Remedy::Reboot => "reboot",
            Remedy::Person => "person",
            Remedy::Inspection => "hardware inspection",
        }
    }

    pub fn is_person(&self) -> bool {
        *self == Remedy::Person
    }
}

/// One conclusion of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable check name, e.g. `ecc-uncorrected`, `xid`, `gpu-count`.
    pub check: String,
    pub action: Action,
    /// NVML index of the GPU concerned; `None` for node-wide findings.
    pub gpu: Option<u32>,
    /// Normalised PCI address of the GPU concerned, when known.
    pub pci: Option<String>,
    /// Short text for the drain reason, e.g. `ECC DBE GPU3 0000:3b:00.0`.
    pub summary: String,
    /// Full explanation for logs, verdicts and the user's terminal.
    pub message: String,
    /// Who caused it, when another user's program did (an Xid's pid and
    /// process name): for the node's log only, never shown to a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub culprit: Option<String>,
    /// The code within the check, where a check has several (the Xid or
    /// SXid number): with `check` and `gpu` it names the fault in the
    /// node's ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u32>,
    /// Read from a source users can write to (a syslog text line, a log
    /// file others may write): its action was capped so that it never
    /// drains (`xid.syslog_may_drain`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forgeable: bool,
    /// What clears the fault.
    #[serde(default, skip_serializing_if = "Remedy::is_person")]
    pub remedy: Remedy,
}

impl Finding {
    /// The same finding, cleared by `remedy`.
    pub fn with_remedy(mut self, remedy: Remedy) -> Self {
        self.remedy = remedy;
        self
    }

    /// The node's log line: check, message and, there only, the culprit.
    pub fn log_line(&self) -> String {
        match &self.culprit {
            Some(c) => format!("{}: {} [{c}]", self.check, self.message),
            None => format!("{}: {}", self.check, self.message),
        }
    }

    pub fn node(check: &str, action: Action, summary: String, message: String) -> Self {
        Finding {
            check: check.to_string(),
            action,
            gpu: None,
            pci: None,
            summary,
            message,
            culprit: None,
            code: None,
            forgeable: false,
            remedy: Remedy::Person,
        }
    }

    pub fn gpu(
        check: &str,
        action: Action,
        gpu: u32,
        pci: Option<&str>,
        summary: String,
        message: String,
    ) -> Self {
        Finding {
            check: check.to_string(),
            action,
            gpu: Some(gpu),
            pci: pci.map(str::to_string),
            summary,
            message,
            culprit: None,
            code: None,
            forgeable: false,
            remedy: Remedy::Person,
        }
    }
}

/// Every node state change gpu-health makes carries this prefix, so that
/// tools and people can tell its drains from everyone else's.
pub const REASON_PREFIX: &str = "gpu-health:";

/// slurmctld stores reasons of any length, but slurmdbd keeps node events
/// in a 255-byte column, `sinfo` and humans read less: a reason stays
/// within this many bytes, several findings summarised as `+N more` (the
/// full list goes to the node's log and the drain record). The kind of
/// drain ends the reason, so `sinfo -R -o "%120E %N"` (docs/operations.md,
/// [`SINFO_REASON_WIDTH`]) always shows whether to wait or act.
pub const MAX_REASON_LEN: usize = 120;

/// The reason width the docs recommend for `sinfo -R -o "%<width>E %N"`:
/// every gpu-health reason, its kind included, fits in it.
pub const SINFO_REASON_WIDTH: usize = 120;
const _: () = assert!(MAX_REASON_LEN <= SINFO_REASON_WIDTH);

/// The drain reason for a set of findings, or `None` when none drains.
///
/// Shape: `gpu-health: <summary>[; <summary>...][; +N more] (drain|drain-until-clean)`.
/// The kind is the gravest among the draining findings, so an admin sees
/// whether to wait for an automatic return or to act.
pub fn drain_reason(findings: &[Finding]) -> Option<String> {
    drain_reason_marked(findings, None)
}

/// [`drain_reason`] ending in `mark` ([`REBOOT_MARK`], [`INSPECTION_MARK`])
/// instead of the kind, when given.
pub fn drain_reason_marked(findings: &[Finding], mark: Option<&str>) -> Option<String> {
    let draining: Vec<&Finding> = findings.iter().filter(|f| f.action.drains()).collect();
    let kind = draining.iter().map(|f| f.action).max()?;
    let suffix = match mark {
        Some(m) => m.to_string(),
        None => format!(" ({})", kind.as_str()),
    };
    // Room for the summaries, keeping space for "; +NN more".
    let room = MAX_REASON_LEN - REASON_PREFIX.len() - 1 - suffix.len();
    let more_room = room - "; +99 more".len();
    let mut body = String::new();
    let mut shown = 0;
    for f in &draining {
        let s = sanitize_reason(&f.summary);
        let sep = if body.is_empty() { "" } else { "; " };
        let last = shown + 1 == draining.len();
        let limit = if last { room } else { more_room };
        if body.len() + sep.len() + s.len() <= limit {
            body.push_str(sep);
            body.push_str(&s);
            shown += 1;
        } else if body.is_empty() {
            // One summary longer than the room: cut it.
            let mut cut = limit.saturating_sub(3);
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            body.push_str(&s[..cut]);
            body.push_str("...");
            shown += 1;
        } else {
            break;
        }
    }
    if shown < draining.len() {
        body.push_str(&format!("; +{} more", draining.len() - shown));
    }
    Some(format!("{REASON_PREFIX} {body}{suffix}"))
}

/// Reasons travel through scontrol's argument parser: keep them to
/// printable characters without quotes, so that no value can change the
/// meaning of the command line.
fn sanitize_reason(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || c == '"' || c == '\'' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Whether a Slurm node reason was set by gpu-health: by its prefix, the
/// only part Slurm leaves alone (since 23.02 it appends its own reasons,
/// `<ours> : Not responding`).
pub fn is_own_reason(reason: &str) -> bool {
    reason.trim_start().starts_with(REASON_PREFIX)
}

/// The kind marks a gpu-health reason ends with: the action, or for a
/// `drain` what follows it (a reboot asked of Slurm, hardware
/// inspection).
const KIND_MARKS: [(&str, Action); 4] = [
    (" (drain-until-clean)", Action::DrainUntilClean),
    (" (drain)", Action::Drain),
    (REBOOT_MARK, Action::Drain),
    (INSPECTION_MARK, Action::Drain),
];

/// The end of the reason of a drain that asked Slurm to reboot the node.
pub const REBOOT_MARK: &str = " (reboot)";
/// The end of the reason of a drain for hardware inspection.
pub const INSPECTION_MARK: &str = " (hardware inspection)";

/// gpu-health's part of a node reason (what it wrote, without what Slurm
/// appended after it) and the kind of drain it names; `None` for a reason
/// of someone else's. The kind is the last kind mark in the reason:
/// Slurm's own texts carry none.
pub fn own_reason(reason: &str) -> Option<(&str, Action)> {
    let r = reason.trim_start();
    if !r.starts_with(REASON_PREFIX) {
        return None;
    }
    KIND_MARKS
        .iter()
        .filter_map(|(mark, kind)| r.rfind(mark).map(|i| (i + mark.len(), *kind)))
        .max_by_key(|(end, _)| *end)
        .map(|(end, kind)| (&r[..end], kind))
}

/// Whether a gpu-health reason may be cleared by a clean check.
pub fn reason_clears_itself(reason: &str) -> bool {
    own_reason(reason).is_some_and(|(_, kind)| kind == Action::DrainUntilClean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(action: Action, summary: &str) -> Finding {
        Finding::node("t", action, summary.into(), summary.into())
    }

    #[test]
    fn no_reason_without_draining_findings() {
        assert_eq!(drain_reason(&[f(Action::Warn, "pcie")]), None);
        assert_eq!(drain_reason(&[]), None);
    }

    #[test]
    fn reason_names_all_and_gravest_kind() {
        let r = drain_reason(&[
            f(Action::DrainUntilClean, "Xid 31 GPU1 0000:18:00.0"),
            f(Action::Warn, "pcie"),
            f(Action::Drain, "ECC DBE GPU3 0000:3b:00.0"),
        ])
        .unwrap();
        assert_eq!(
            r,
            "gpu-health: Xid 31 GPU1 0000:18:00.0; ECC DBE GPU3 0000:3b:00.0 (drain)"
        );
        assert!(is_own_reason(&r));
        assert!(!reason_clears_itself(&r));
    }

    #[test]
    fn many_findings_are_summarised_within_the_limit() {
        let many: Vec<Finding> = (0..40)
            .map(|i| {
                f(
                    Action::Drain,
                    &format!("Xid 79 GPU{i} 0000:{i:02x}:00.0 pid=2210"),
                )
            })
            .collect();
        let r = drain_reason(&many).unwrap();
        assert!(r.len() <= MAX_REASON_LEN, "{} bytes: {r}", r.len());
        assert!(
            r.starts_with("gpu-health: Xid 79 GPU0 0000:00:00.0 pid=2210; Xid 79 GPU1"),
            "{r}"
        );
        let shown = r.matches("Xid 79").count();
        assert!(
            r.ends_with(&format!("; +{} more (drain)", 40 - shown)),
            "{r}"
        );
        // Exactly fitting findings are all shown.
        let two = [f(Action::Drain, "a"), f(Action::DrainUntilClean, "b")];
        assert_eq!(drain_reason(&two).unwrap(), "gpu-health: a; b (drain)");
    }

    #[test]
    fn reason_is_bounded_and_quote_free() {
        let long = "x\"'\n".repeat(200);
        let r = drain_reason(&[f(Action::DrainUntilClean, &long)]).unwrap();
        assert!(r.len() <= MAX_REASON_LEN);
        assert!(!r.contains('"') && !r.contains('\'') && !r.contains('\n'));
        assert!(reason_clears_itself(&r));
    }

    #[test]
    fn slurms_appended_reasons_do_not_hide_ours() {
        let ours = "gpu-health: Xid 31 GPU1 0000:18:00.0 (drain-until-clean)";
        for appended in [
            "",
            " : Not responding",
            " : Not responding : Kill task failed",
        ] {
            let r = format!("{ours}{appended}");
            assert_eq!(own_reason(&r), Some((ours, Action::DrainUntilClean)), "{r}");
            assert!(reason_clears_itself(&r), "{r}");
        }
        let lost = "gpu-health: GPU5 lost (fallen off the bus) (drain) : Not responding";
        assert_eq!(
            own_reason(lost),
            Some((
                "gpu-health: GPU5 lost (fallen off the bus) (drain)",
                Action::Drain
            ))
        );
        assert!(!reason_clears_itself(lost));
        assert_eq!(own_reason("gpu-health: no kind"), None);
        assert_eq!(own_reason("admin (drain)"), None);
    }

    #[test]
    fn foreign_reasons_are_not_ours() {
        assert!(!is_own_reason("NHC: check_hw_eth"));
        assert!(!is_own_reason("Prolog error"));
        assert!(!reason_clears_itself(
            "admin: gpu-health: (drain-until-clean)"
        ));
    }
}
