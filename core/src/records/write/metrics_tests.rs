//! The health part of the textfile from a ledger and a check, checked by
//! promtool: names, types, labels, the drain's kind, pending causes.

use super::metrics::{CheckView, FindingCount, GpuLabel, HealthMetrics, RunKind};
use super::metrics_render::render;
use crate::finding::{Action, Finding};
use crate::ledger::{Fault, FaultId, Handling, Ledger, PendingCause, Source};

fn fault(check: &str, gpu: u32, action: Action, handling: Handling) -> Fault {
    let f = Finding::gpu(check, action, gpu, None, "s".into(), "m".into());
    Fault {
        id: FaultId::of(&f),
        action,
        pci: None,
        summary: "s".into(),
        message: "m".into(),
        source: Source::Probe,
        first_ms: 1_000,
        last_ms: 2_000,
        last_boot: None,
        handling,
        provisional: false,
        remedy: Default::default(),
    }
}

fn health() -> HealthMetrics {
    HealthMetrics {
        last_prolog_ms: Some(1_700_000_000_123),
        check: Some(CheckView {
            at_ms: 1_700_000_000_123,
            run: RunKind::Prolog,
            config_error: false,
            findings: vec![
                FindingCount {
                    check: "xid".into(),
                    action: Action::DrainUntilClean,
                    gpu: Some(1),
                    count: 1,
                },
                FindingCount {
                    check: "gpu-count".into(),
                    action: Action::Warn,
                    gpu: None,
                    count: 1,
                },
            ],
        }),
        gpus: vec![GpuLabel {
            index: 1,
            uuid: Some("GPU-1".into()),
            pci_bus_id: Some("0000:2a:00.0".into()),
            name: Some("NVIDIA \"H100\"".into()),
        }],
        ..HealthMetrics::default()
    }
}

#[test]
fn the_health_of_a_node_drained_until_clean_with_a_fault_pending() {
    let mut ledger = Ledger::new("n1");
    ledger.faults = vec![
        fault(
            "xid",
            1,
            Action::DrainUntilClean,
            Handling::Drained { at_ms: 3_000 },
        ),
        fault(
            "ecc-uncorrected",
            2,
            Action::Drain,
            Handling::Pending {
                cause: PendingCause::SlurmFailed,
                since_ms: 4_500,
            },
        ),
    ];
    ledger.drain = Some(crate::ledger::DrainMark {
        reason: "gpu-health: s (drain-until-clean)".into(),
        kind: Action::DrainUntilClean,
        at_ms: 3_000,
        last_fault_ms: 3_000,
        last_boot: None,
    });
    let text = render(&health(), Some(&ledger), &[]);
    gpu_health_testkit::promtool_check_metrics(&text);
    for line in [
        "gpu_health_last_prolog_timestamp_seconds 1700000000.123",
        "gpu_health_node_verdict{verdict=\"drain-until-clean\"} 1",
        "gpu_health_node_findings{check=\"gpu-count\",action=\"warn\"} 1",
        "gpu_health_gpu_verdict{gpu=\"1\",uuid=\"GPU-1\",pci_bus_id=\"0000:2a:00.0\",verdict=\"drain-until-clean\"} 1",
        "gpu_health_gpu_info{gpu=\"1\",uuid=\"GPU-1\",pci_bus_id=\"0000:2a:00.0\",name=\"NVIDIA \\\"H100\\\"\"} 1",
        "gpu_health_node_drained{kind=\"drain-until-clean\"} 1",
        "gpu_health_node_drained{kind=\"drain\"} 0",
        "gpu_health_node_drained_since_timestamp_seconds{kind=\"drain-until-clean\"} 3",
        "gpu_health_open_faults{check=\"xid\",action=\"drain-until-clean\",handling=\"drained\"} 1",
        "gpu_health_open_faults{check=\"ecc-uncorrected\",action=\"drain\",handling=\"pending\"} 1",
        "gpu_health_pending_faults{cause=\"slurm-failed\"} 1",
        "gpu_health_pending_faults{cause=\"brake\"} 0",
        "gpu_health_pending_since_timestamp_seconds{cause=\"slurm-failed\"} 4.5",
        "gpu_health_brake_holding 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
}

#[test]
fn a_node_never_checked_has_the_families_and_no_samples_it_cannot_know() {
    let text = render(&HealthMetrics::default(), None, &[]);
    gpu_health_testkit::promtool_check_metrics(&text);
    assert!(text.contains("gpu_health_node_drained{kind=\"drain\"} 0"));
    assert!(!text.contains("gpu_health_node_verdict{"), "{text}");
    assert!(!text.contains("\ngpu_health_last_prolog_timestamp_seconds "));
}
