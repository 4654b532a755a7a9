//! A node's lifecycle: the one state it is in, read from its ledger
//! alone ([`NodeState::of`]), and the one table of the moves between
//! states ([`TABLE`]): what moves the node and what gpu-health does on
//! the way. Every run that acts names the move it made
//! (`run::act` logs it); a move the table does not list is logged as an
//! error, and the model test (`core/tests/ledger_model.rs`) fails on it.
//! docs/operations.md shows the table as [`markdown`] writes it (a test
//! keeps the two equal).

use serde::Serialize;

use super::Ledger;
use crate::finding::{Action, Remedy};

/// Where a node is, as gpu-health sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeState {
    /// Nothing open, or only what does not drain.
    InService,
    /// A draining fault is open but not drained: the brake, a broken
    /// configuration, Slurm failing or someone else's drain held it.
    HeldBack,
    /// Drained by gpu-health for faults that return it once quiet.
    DrainedUntilClean,
    /// Drained by gpu-health for a fault a person must answer.
    DrainedForPerson,
    /// Drained by gpu-health, a reboot asked of Slurm and not seen yet.
    RebootAsked,
    /// Back from a boot, drained until the acceptance tier proves it.
    Proving,
    /// A fault came back after `max_reboots` reboots: drained for
    /// hardware inspection, no more reboots.
    Inspection,
}

impl NodeState {
    pub const ALL: [NodeState; 7] = [
        NodeState::InService,
        NodeState::HeldBack,
        NodeState::DrainedUntilClean,
        NodeState::DrainedForPerson,
        NodeState::RebootAsked,
        NodeState::Proving,
        NodeState::Inspection,
    ];

    /// The state `ledger` says the node is in.
    pub fn of(ledger: &Ledger) -> NodeState {
        let drained = ledger.drain.is_some();
        let gravest = ledger.gravest();
        let inspection = ledger
            .open_faults()
            .any(|f| f.remedy == Remedy::Inspection && f.action.drains());
        if !drained {
            return match gravest {
                Some(a) if a.drains() => NodeState::HeldBack,
                _ if ledger.reboot_asked.is_some() => NodeState::RebootAsked,
                _ => NodeState::InService,
            };
        }
        if inspection {
            NodeState::Inspection
        } else if gravest == Some(Action::Drain)
            && ledger.open_faults().any(|f| f.remedy != Remedy::Reboot)
        {
            NodeState::DrainedForPerson
        } else if ledger.reboot_asked.is_some() {
            NodeState::RebootAsked
        } else if ledger.proof.is_some() {
            NodeState::Proving
        } else if gravest == Some(Action::Drain) {
            NodeState::DrainedForPerson
        } else {
            NodeState::DrainedUntilClean
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::InService => "in service",
            NodeState::HeldBack => "fault held back",
            NodeState::DrainedUntilClean => "drained until clean",
            NodeState::DrainedForPerson => "drained for a person",
            NodeState::RebootAsked => "reboot asked",
            NodeState::Proving => "proving",
            NodeState::Inspection => "hardware inspection",
        }
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One move of the lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub from: NodeState,
    pub to: NodeState,
    /// What moves the node.
    pub on: &'static str,
    /// What gpu-health does on the way.
    pub does: &'static str,
}

use NodeState::*;

const fn mv(from: NodeState, to: NodeState, on: &'static str, does: &'static str) -> Move {
    Move { from, to, on, does }
}

const BRAKE: &str = "drain through the brake";
const REDRAIN: &str = "new reason, no brake (the node is out already)";
const ADMIN: &str = "an admin resumed it";
const ANSWERED: &str = "its faults are taken as answered";
const AGAIN: &str = "someone resumed it outside gpu-health (its faults answered), then a new fault";

/// Every move a node makes, and nothing else.
pub const TABLE: &[Move] = &[
    mv(InService, HeldBack, "a draining fault the brake, a broken configuration, Slurm or someone else's drain holds back", "fault kept pending with why; jobs warned, strict jobs refused"),
    mv(InService, DrainedUntilClean, "a drain-until-clean fault", BRAKE),
    mv(InService, DrainedForPerson, "a fault a person must answer", BRAKE),
    mv(InService, RebootAsked, "faults a reboot clears, `[remediation] reboot` on", "drain through the brake, then `scontrol reboot`"),
    mv(InService, Proving, "a boot gpu-health did not ask for, `after_any_boot`", BRAKE),
    mv(InService, Inspection, "a fault back after `max_reboots` reboots", BRAKE),
    mv(HeldBack, InService, "the pending faults closed (quiet, or an admin's resume)", "nothing"),
    mv(HeldBack, DrainedUntilClean, "a later run may drain", BRAKE),
    mv(HeldBack, DrainedForPerson, "a later run may drain", BRAKE),
    mv(HeldBack, RebootAsked, "a later run may drain", "drain through the brake, then `scontrol reboot`"),
    mv(HeldBack, Proving, "a later run may drain", BRAKE),
    mv(HeldBack, Inspection, "a later run may drain", BRAKE),
    mv(DrainedUntilClean, InService, "quiet for the quiet time (DCGM first with `before_return`), or an admin's resume", "resume; the return counts toward escalation"),
    mv(DrainedUntilClean, DrainedForPerson, "a graver fault, or too many returns (escalation)", REDRAIN),
    mv(DrainedUntilClean, RebootAsked, "faults a reboot clears, `[remediation] reboot` on", "new reason, then `scontrol reboot`"),
    mv(DrainedUntilClean, Inspection, "a fault back after `max_reboots` reboots", REDRAIN),
    mv(DrainedUntilClean, HeldBack, "someone else drained or resumed it meanwhile", "fault kept pending"),
    mv(DrainedForPerson, InService, ADMIN, ANSWERED),
    mv(DrainedForPerson, Inspection, "a fault back after `max_reboots` reboots", REDRAIN),
    mv(DrainedForPerson, DrainedUntilClean, AGAIN, BRAKE),
    mv(DrainedForPerson, RebootAsked, AGAIN, "drain through the brake, then `scontrol reboot`"),
    mv(DrainedForPerson, HeldBack, "someone else drained or resumed it meanwhile", "fault kept pending"),
    mv(RebootAsked, InService, "back from the reboot without a tier (Slurm's `nextstate=RESUME`), or an admin's resume", "the reboot is counted; its faults are cleared unless found again"),
    mv(RebootAsked, Proving, "back from the reboot, the tier on (`after_reboot`)", "the tier runs on the first idle health check"),
    mv(RebootAsked, DrainedForPerson, "a fault a person must answer before the reboot", "new reason, no brake; the reboot request changed so Slurm keeps the node out"),
    mv(RebootAsked, DrainedUntilClean, "back from the reboot, a drain-until-clean fault found again", REDRAIN),
    mv(RebootAsked, Inspection, "back from the reboot, the fault found again after `max_reboots`", REDRAIN),
    mv(RebootAsked, HeldBack, "back from the reboot, a fault found again and held back", "fault kept pending"),
    mv(Proving, InService, "every gate passed, covering every GPU and HCA the node had, nothing new found during the tier; or an admin's resume", "resume"),
    mv(Proving, DrainedForPerson, "a gate failed or was not judged, or a fault during the tier", REDRAIN),
    mv(Proving, DrainedUntilClean, "a drain-until-clean fault found while proving", REDRAIN),
    mv(Proving, RebootAsked, "a fault a reboot clears found again, within `max_reboots`", "new reason, then `scontrol reboot`"),
    mv(Proving, Inspection, "a fault back after `max_reboots` reboots", REDRAIN),
    mv(Proving, HeldBack, "someone else drained or resumed it meanwhile", "fault kept pending"),
    mv(Inspection, InService, ADMIN, "its faults are answered; the reboot count starts over"),
    mv(Inspection, DrainedUntilClean, AGAIN, BRAKE),
    mv(Inspection, DrainedForPerson, AGAIN, BRAKE),
    mv(Inspection, RebootAsked, AGAIN, "drain through the brake, then `scontrol reboot`"),
    mv(Inspection, HeldBack, "someone else drained or resumed it meanwhile", "fault kept pending"),
];

/// The table's move from `from` to `to` (`None`: the table has none).
pub fn find(from: NodeState, to: NodeState) -> Option<&'static Move> {
    TABLE.iter().find(|m| m.from == from && m.to == to)
}

/// Moves made in this process that the table does not list (at most
/// [`MAX_UNLISTED`] kept until taken): the model test fails on any.
static UNLISTED: std::sync::Mutex<Vec<(NodeState, NodeState)>> = std::sync::Mutex::new(Vec::new());
const MAX_UNLISTED: usize = 64;

/// The move from `from` to `to` a run made, checked against the table:
/// `Err` (and kept for [`take_unlisted`]) when the table has none.
pub fn moved(from: NodeState, to: NodeState) -> Result<&'static Move, String> {
    find(from, to).ok_or_else(|| {
        if let Ok(mut u) = UNLISTED.lock() {
            if u.len() < MAX_UNLISTED {
                u.push((from, to));
            }
        }
        format!("moved from {from} to {to}, a move the lifecycle table does not list")
    })
}

/// The unlisted moves made since the last call, in this process.
pub fn take_unlisted() -> Vec<(NodeState, NodeState)> {
    UNLISTED
        .lock()
        .map(|mut u| std::mem::take(&mut *u))
        .unwrap_or_default()
}

/// The table as docs/operations.md shows it.
pub fn markdown() -> String {
    let mut out = String::from("| from | to | on | gpu-health does |\n|---|---|---|---|\n");
    for m in TABLE {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            m.from, m.to, m.on, m.does
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_move_per_pair_and_every_state_left_and_reached() {
        for (i, a) in TABLE.iter().enumerate() {
            assert_ne!(a.from, a.to, "{a:?}");
            for b in &TABLE[i + 1..] {
                assert!(!(a.from == b.from && a.to == b.to), "twice: {a:?}");
            }
        }
        for s in NodeState::ALL {
            assert!(TABLE.iter().any(|m| m.from == s), "{s} is never left");
            assert!(TABLE.iter().any(|m| m.to == s), "{s} is never reached");
        }
    }

    #[test]
    fn a_new_ledger_is_in_service() {
        assert_eq!(NodeState::of(&Ledger::new("n1")), NodeState::InService);
    }

    fn xid(code: u32, action: Action, remedy: Remedy) -> crate::finding::Finding {
        let mut f = crate::finding::Finding::gpu(
            "xid",
            action,
            3,
            None,
            format!("Xid {code} GPU3"),
            "x".into(),
        )
        .with_remedy(remedy);
        f.code = Some(code);
        f
    }

    #[test]
    fn the_state_follows_the_ledger() {
        use crate::config::{RecoveryConfig, RemediationConfig};
        use crate::ledger::tests::view;
        use crate::ledger::Recorded;
        let see = |l: &mut Ledger, f| {
            l.observe(
                &[f],
                &view(0),
                &RecoveryConfig::default(),
                &RemediationConfig::default(),
            )
        };
        let drained = |l: &mut Ledger| {
            l.record(
                &Recorded::Drained {
                    reason: "gpu-health: x (drain)".into(),
                },
                true,
                0,
            )
        };
        let mut l = Ledger::new("n1");
        see(&mut l, xid(31, Action::DrainUntilClean, Remedy::Person));
        assert_eq!(
            NodeState::of(&l),
            NodeState::HeldBack,
            "found, not drained yet"
        );
        drained(&mut l);
        assert_eq!(NodeState::of(&l), NodeState::DrainedUntilClean);
        see(&mut l, xid(48, Action::Drain, Remedy::Person));
        drained(&mut l);
        assert_eq!(NodeState::of(&l), NodeState::DrainedForPerson);
        let mut r = Ledger::new("n1");
        see(&mut r, xid(79, Action::Drain, Remedy::Reboot));
        drained(&mut r);
        r.reboot_requested(0, "b0", vec!["Xid 79".into()], false);
        assert_eq!(NodeState::of(&r), NodeState::RebootAsked);
        r.faults[0].remedy = Remedy::Inspection;
        assert_eq!(NodeState::of(&r), NodeState::Inspection);
    }
}
