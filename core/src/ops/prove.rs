//! Whether the acceptance tier may run on this node now, from its line in
//! Slurm's table: the node must be idle, drained by gpu-health, and
//! registered after its reboot. Pure: the health check looks the line up
//! and runs the tier (`run::health_check`).
//!
//! Never while a job runs or ends on the node (the tier takes every GPU
//! and the HCAs), and never from slurmd's start-up run of the health
//! check: that run comes before slurmd registers, while slurmctld still
//! shows the reboot pending (`REBOOT_ISSUED`); the next interval's run
//! proves the node. After a boot gpu-health did not ask for (a crash,
//! `[acceptance] after_any_boot`) slurmctld shows the node `DOWN` (with
//! gpu-health's drain: `DOWN+DRAIN`) until slurmd registers: that waits
//! too.

use crate::slurm::NodeInfo;

/// What the health check does about a proof that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProveNow {
    /// Run the tier now.
    Run,
    /// Not now (a later run tries again): why.
    Wait(String),
    /// The node is not gpu-health's to prove any more (someone returned
    /// it, or drained it with a reason of their own): why.
    NotOurs(String),
}

/// Decide from the node's line (`None`: not in Slurm's table).
pub fn may_prove(me: Option<&NodeInfo>) -> ProveNow {
    let Some(me) = me else {
        return ProveNow::Wait("the node is not in Slurm's node table".into());
    };
    if me.reboot_pending() {
        return ProveNow::Wait(format!(
            "Slurm shows the reboot still pending ({}): slurmd has not registered the new boot yet",
            me.state
        ));
    }
    if me.has_jobs() {
        return ProveNow::Wait(format!("a job runs on the node ({})", me.state));
    }
    if me.is_down() {
        return ProveNow::Wait(format!("the node is down in Slurm ({})", me.state));
    }
    if me.drained_by_us() {
        return ProveNow::Run;
    }
    if me.is_drained() {
        return ProveNow::NotOurs(format!(
            "drained by someone else since the reboot ({:?})",
            crate::text::printable(me.reason.as_deref().unwrap_or(""))
        ));
    }
    ProveNow::NotOurs(format!(
        "in service ({}): someone returned it after the reboot",
        me.state
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(state: &str, reason: Option<&str>) -> NodeInfo {
        NodeInfo {
            name: "n3".into(),
            state: state.into(),
            reason: reason.map(str::to_string),
            reason_time: None,
            partitions: vec!["gpu".into()],
            claim_ms: None,
            drained_ms: None,
            comment: None,
            foreign_comment: false,
        }
    }

    const OURS: Option<&str> = Some("gpu-health: Xid 79 GPU3 (reboot) : reboot complete");

    #[test]
    fn runs_only_on_an_idle_node_gpu_health_drained_after_it_registered() {
        assert_eq!(may_prove(Some(&node("IDLE+DRAIN", OURS))), ProveNow::Run);
        assert_eq!(may_prove(Some(&node("DRAINED", OURS))), ProveNow::Run);
    }

    #[test]
    fn never_while_a_job_runs_or_ends() {
        for state in ["MIXED+DRAIN", "ALLOCATED+DRAIN", "IDLE+COMPLETING+DRAIN"] {
            assert!(
                matches!(may_prove(Some(&node(state, OURS))), ProveNow::Wait(_)),
                "{state}"
            );
        }
    }

    #[test]
    fn never_from_the_start_up_run_while_the_reboot_is_pending() {
        for state in [
            "DOWN+DRAIN+REBOOT_ISSUED",
            "IDLE+DRAIN+REBOOT_REQUESTED",
            "DOWN*+DRAIN",
        ] {
            assert!(
                matches!(may_prove(Some(&node(state, OURS))), ProveNow::Wait(_)),
                "{state}"
            );
        }
        assert!(matches!(may_prove(None), ProveNow::Wait(_)));
    }

    #[test]
    fn after_a_boot_not_asked_for_it_waits_until_slurmd_registered() {
        let due = Some(crate::ledger::BOOT_PROOF_REASON);
        for state in ["DOWN+DRAIN", "DOWN*+DRAIN", "DOWN+DRAIN+NOT_RESPONDING"] {
            assert!(
                matches!(may_prove(Some(&node(state, due))), ProveNow::Wait(_)),
                "{state}"
            );
        }
        assert_eq!(may_prove(Some(&node("IDLE+DRAIN", due))), ProveNow::Run);
    }

    #[test]
    fn someone_elses_node_is_not_proved() {
        assert!(matches!(
            may_prove(Some(&node("IDLE+DRAIN", Some("admin: swap PSU")))),
            ProveNow::NotOurs(_)
        ));
        assert!(matches!(
            may_prove(Some(&node("IDLE", None))),
            ProveNow::NotOurs(_)
        ));
    }
}
