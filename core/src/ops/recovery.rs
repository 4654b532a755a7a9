//! When a node drained by gpu-health may return to service.
//!
//! Pure decisions over a check's results: the health check calls
//! [`auto_return`] for `drain-until-clean` drains, `gpu-health resume`
//! calls [`clean_now`] for any of gpu-health's own drains.

use crate::config::RecoveryConfig;
use crate::finding::{is_own_reason, reason_clears_itself, Finding};
use crate::snapshot::NodeSnapshot;

use super::drain_record::DrainRecord;

/// Whether the node is clean right now: every reason to refuse, or none.
///
/// Clean = the configuration could be used, NVML answered for every GPU,
/// the kernel log could be read, and no finding drains.
pub fn clean_now(findings: &[Finding], snapshot: &NodeSnapshot, config_ok: bool) -> Vec<String> {
    let mut why = Vec::new();
    if !config_ok {
        why.push("the configuration has an error (defaults in force)".to_string());
    }
    if let Some(e) = &snapshot.nvml_error {
        why.push(format!("NVML unusable: {e:?}"));
    }
    let lost: Vec<String> = snapshot
        .gpus
        .iter()
        .filter(|g| g.lost)
        .map(|g| format!("GPU{}", g.index))
        .collect();
    if !lost.is_empty() {
        why.push(format!("GPUs not answering: {}", lost.join(",")));
    }
    if findings
        .iter()
        .any(|f| f.check == "xid" && f.summary == "kernel log unreadable")
    {
        why.push("the kernel log is unreadable (new Xids cannot be ruled out)".to_string());
    }
    for f in findings.iter().filter(|f| f.action.drains()) {
        why.push(format!(
            "{} ({}): {}",
            f.summary,
            f.action.as_str(),
            f.message
        ));
    }
    why
}

/// What the health check does about a node drained with `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReturnDecision {
    Return,
    /// Not yet: the text says what is missing.
    Wait(String),
    /// Not this tool's to return (foreign reason, `drain` kind, disabled).
    NotOurs(String),
}

/// Pure: may a node drained with `reason` return now?
pub fn auto_return(
    cfg: &RecoveryConfig,
    reason: &str,
    record: Option<&DrainRecord>,
    problems: &[String],
    now_ms: u64,
) -> ReturnDecision {
    if !is_own_reason(reason) {
        return ReturnDecision::NotOurs(format!("drained by someone else: {reason:?}"));
    }
    if !reason_clears_itself(reason) {
        return ReturnDecision::NotOurs(
            "a (drain) reason stays until an admin runs 'gpu-health resume'".into(),
        );
    }
    if !cfg.auto_return {
        return ReturnDecision::NotOurs("recovery.auto_return is off".into());
    }
    if !problems.is_empty() {
        return ReturnDecision::Wait(format!("not clean: {}", problems.join("; ")));
    }
    let Some(rec) = record else {
        return ReturnDecision::Wait("no drain record; the quiet time starts now".into());
    };
    let quiet_for = now_ms.saturating_sub(rec.last_fault_ms.max(rec.at_ms));
    if quiet_for < cfg.quiet_ms() {
        return ReturnDecision::Wait(format!(
            "clean, quiet for {} s of the {} s required",
            quiet_for / 1000,
            cfg.quiet_time_s
        ));
    }
    ReturnDecision::Return
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Action;
    use crate::snapshot::{GpuSnapshot, NvmlFailure};

    const UNTIL: &str = "gpu-health: Xid 31 GPU1 0000:18:00.0 (drain-until-clean)";

    fn healthy() -> NodeSnapshot {
        NodeSnapshot {
            gpus: (0..2)
                .map(|i| GpuSnapshot {
                    index: i,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn rec(at: u64) -> DrainRecord {
        let n1 = crate::ids::NodeName::parse("n1").unwrap();
        DrainRecord::new(&n1, UNTIL, Action::DrainUntilClean, at)
    }

    #[test]
    fn returns_after_quiet_time_only() {
        let cfg = RecoveryConfig {
            quiet_time_s: 60,
            ..Default::default()
        };
        let p = clean_now(&[], &healthy(), true);
        assert!(p.is_empty());
        assert!(matches!(
            auto_return(&cfg, UNTIL, Some(&rec(1_000)), &p, 30_000),
            ReturnDecision::Wait(_)
        ));
        assert_eq!(
            auto_return(&cfg, UNTIL, Some(&rec(1_000)), &p, 61_000),
            ReturnDecision::Return
        );
        // The quiet time counts from the last fault, not the drain.
        let mut r = rec(1_000);
        r.last_fault_ms = 50_000;
        assert!(matches!(
            auto_return(&cfg, UNTIL, Some(&r), &p, 61_000),
            ReturnDecision::Wait(_)
        ));
        assert!(matches!(
            auto_return(&cfg, UNTIL, None, &p, 61_000),
            ReturnDecision::Wait(_)
        ));
    }

    #[test]
    fn never_returns_foreign_or_admin_drains() {
        let cfg = RecoveryConfig::default();
        for reason in [
            "admin: reseat GPU",
            "gpu-health: ECC DBE GPU3 (drain)",
            "Prolog error",
        ] {
            assert!(
                matches!(
                    auto_return(&cfg, reason, Some(&rec(0)), &[], u64::MAX),
                    ReturnDecision::NotOurs(_)
                ),
                "{reason}"
            );
        }
        let off = RecoveryConfig {
            auto_return: false,
            ..Default::default()
        };
        assert!(matches!(
            auto_return(&off, UNTIL, Some(&rec(0)), &[], u64::MAX),
            ReturnDecision::NotOurs(_)
        ));
    }

    #[test]
    fn not_clean_when_anything_is_wrong() {
        let drain = Finding::node(
            "xid",
            Action::DrainUntilClean,
            "Xid 43 GPU0".into(),
            "m".into(),
        );
        let warn = Finding::node("x", Action::Warn, "hot".into(), "m".into());
        let unreadable = Finding::node(
            "xid",
            Action::Warn,
            "kernel log unreadable".into(),
            "m".into(),
        );
        assert!(clean_now(std::slice::from_ref(&warn), &healthy(), true).is_empty());
        assert_eq!(clean_now(&[drain, warn], &healthy(), true).len(), 1);
        assert_eq!(clean_now(&[unreadable], &healthy(), true).len(), 1);
        assert_eq!(clean_now(&[], &healthy(), false).len(), 1);
        let mut lost = healthy();
        lost.gpus[1].lost = true;
        assert!(clean_now(&[], &lost, true)[0].contains("GPU1"));
        let hung = NodeSnapshot {
            nvml_error: Some(NvmlFailure::Timeout { deadline_ms: 10 }),
            ..Default::default()
        };
        assert_eq!(clean_now(&[], &hung, true).len(), 1);
        let p = clean_now(&[], &lost, true);
        assert!(matches!(
            auto_return(
                &RecoveryConfig::default(),
                UNTIL,
                Some(&rec(0)),
                &p,
                u64::MAX
            ),
            ReturnDecision::Wait(_)
        ));
    }
}
