//! Whether the node is clean right now: what stands against returning a
//! node gpu-health drained, by itself (the health check, with the fault
//! ledger's `Ledger::may_return`) or by an admin's `gpu-health resume`.
//! Pure, over a check's results.

use crate::finding::Finding;
use crate::snapshot::NodeSnapshot;

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
        why.push(format!("NVML unusable: {e}"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Action;
    use crate::snapshot::{GpuSnapshot, NvmlFailure};

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
    }
}
