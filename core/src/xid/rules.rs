//! Escalation by repetition: an Xid that keeps coming back on the same GPU
//! is graver than one event. The defaults, with where each comes from; a
//! site's `[xid.rules.<code>]` (`escalate_after`, `escalate_window_hours`,
//! `escalate_to`) overrides them, `escalate_after = 0` turns one off.
//!
//! Counted per code and device (the GPU's PCI address): the same code on
//! different GPUs is an application's fault moving with its jobs and does
//! not add up; on one GPU across jobs it points at the GPU.

use crate::config::PolicyAction;

/// One default escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escalation {
    pub code: u32,
    /// Events of the code on one GPU within the window that escalate.
    pub after: u32,
    pub window_hours: u32,
    /// Events closer than this to one already counted are the same burst
    /// (one crash logs a line per engine or SM) and count once.
    pub burst_seconds: u32,
    pub to: PolicyAction,
    /// Why this default, and where it comes from.
    pub reason: &'static str,
}

const fn esc(
    code: u32,
    (after, window_hours, burst_seconds): (u32, u32, u32),
    to: PolicyAction,
    reason: &'static str,
) -> Escalation {
    Escalation {
        code,
        after,
        window_hours,
        burst_seconds,
        to,
        reason,
    }
}

/// A burst of an application's crash: lines within 5 minutes are one.
pub const DEFAULT_BURST_SECONDS: u32 = 300;

/// The defaults (docs/xid-policy.md shows them).
pub const ESCALATIONS: &[Escalation] = &[
    esc(
        13,
        (3, 24, DEFAULT_BURST_SECONDS),
        PolicyAction::DrainUntilClean,
        "NVSentinel: Xid 13 repeated on the same GPU means run diagnostics (on different GPUs it \
         is an application fault); drained until a clean check",
    ),
    esc(
        31,
        (3, 24, DEFAULT_BURST_SECONDS),
        PolicyAction::Drain,
        "NVSentinel: Xid 31 repeated on the same GPU points at the GPU (on different GPUs it is \
         an application fault); kept for an admin",
    ),
    esc(
        43,
        (3, 24, DEFAULT_BURST_SECONDS),
        PolicyAction::Drain,
        "NVIDIA: Xid 43 repeated calls for support; on the same GPU across jobs it is no single \
         application's fault; kept for an admin",
    ),
    esc(
        94,
        // Each Xid 94 is one contained error: every line counts.
        (1000, 24, 0),
        PolicyAction::DrainUntilClean,
        "gpud: contained ECC errors by the thousand on one GPU (Xid 94 after 1000): the memory is \
         failing even though each error was contained",
    ),
];

/// The default escalation of an Xid code, if any.
pub fn default_escalation(code: u32) -> Option<&'static Escalation> {
    ESCALATIONS.iter().find(|e| e.code == code)
}

/// The defaults as a markdown table (docs/xid-policy.md embeds it).
pub fn escalation_table() -> String {
    let mut out = String::from(
        "| Xid | events on one GPU | within | one burst | becomes | why |\n\
         |---|---|---|---|---|---|\n",
    );
    for e in ESCALATIONS {
        out.push_str(&format!(
            "| {} | {} | {} h | {} s | {} | {} |\n",
            e.code,
            e.after,
            e.window_hours,
            e.burst_seconds,
            e.to.as_str(),
            e.reason
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_only_ever_make_an_action_graver() {
        for e in ESCALATIONS {
            let base = super::super::catalog::entry(e.code).map(|r| r.default);
            if let Some(super::super::catalog::DefaultAction::Fixed(a)) = base {
                assert!(
                    e.to > a,
                    "Xid {}: {:?} is not graver than {:?}",
                    e.code,
                    e.to,
                    a
                );
            }
            assert!(e.after > 1 && e.window_hours >= 1, "{e:?}");
        }
    }
}
