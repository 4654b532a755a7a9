//! Whether a gate's evidence covers the node: every GPU NVML lists and
//! every GPU the node had before its fault (`Inventory`), each with its
//! own figure. What is not covered becomes a holding not-judged result
//! (absence of evidence is never a pass): nvbandwidth printing `N/A` for
//! one GPU, a GPU gone from NVML since the fault, an HCA whose port was
//! active before the fault and is down now.

use super::judge::{self, GateResult};
use super::thresholds::InForce;
use super::GateName;
use crate::inventory::Inventory;
use crate::snapshot::NodeSnapshot;

/// The results `gate` lacks for the node: `results` are the step's own.
pub fn gaps(
    gate: GateName,
    results: &[GateResult],
    snapshot: &NodeSnapshot,
    had: &Inventory,
    th: &InForce,
) -> Vec<GateResult> {
    if gate == GateName::Rdma || snapshot.gpus.is_empty() {
        // The rdma gate's HCAs are steps of their own; a node without
        // GPUs in NVML is not judged by each gate already.
        return Vec::new();
    }
    let mut gaps: Vec<GateResult> = had
        .gpus_missing_from(snapshot)
        .into_iter()
        .map(|m| {
            let why = format!(
                "NVML does not list the GPU at {} that the node had before its fault",
                m.label()
            );
            judge::uncovered(gate, th, m.label().to_string(), None, &why)
        })
        .collect();
    // Only the host-to-device gate has one figure per GPU; its whole-node
    // failure (no table at all) is told already.
    let per_gpu = gate == GateName::HostToDevice && results.iter().any(|r| r.gpu.is_some());
    if per_gpu {
        for g in &snapshot.gpus {
            let figured = results
                .iter()
                .any(|r| r.gpu == Some(g.index) && r.figure.is_some());
            if !figured {
                let why = format!(
                    "no figure for GPU{} ({} of {} GPUs measured)",
                    g.index,
                    results.iter().filter(|r| r.figure.is_some()).count(),
                    snapshot.gpus.len()
                );
                gaps.push(judge::uncovered(
                    gate,
                    th,
                    format!("GPU{}", g.index),
                    Some(g.index),
                    &why,
                ));
            }
        }
    }
    gaps
}

/// Why the rdma gate cannot test `hca`, which had an active port before
/// the fault and has none now.
pub fn hca_down(hca: &str, th: &InForce) -> GateResult {
    judge::uncovered(
        GateName::Rdma,
        th,
        hca.to_string(),
        None,
        "no active port now; it had one before the fault",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acceptance::judge::{judge_h2d, ToolRun, Verdict};
    use crate::acceptance::thresholds::in_force;
    use crate::config::AcceptanceConfig;
    use crate::snapshot::{GpuSnapshot, NodeTopology};

    fn node(n: u32) -> NodeSnapshot {
        NodeSnapshot {
            gpus: (0..n)
                .map(|i| GpuSnapshot {
                    index: i,
                    uuid: Some(format!("GPU-{i}")),
                    pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x18 + i)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn h2d(text: &str) -> Vec<GateResult> {
        let th = in_force(&AcceptanceConfig::default(), "NVIDIA H100 80GB HBM3");
        judge_h2d(
            &ToolRun::Ended {
                code: Some(0),
                stdout: text.into(),
                stderr: String::new(),
            },
            &th,
        )
    }

    const FOUR: &str = "Running host_to_device_memcpy_ce.\n\
        memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n\
        \x20          0         1         2         3\n\
        \x200     55.20     55.10       N/A     55.30\n\nSUM host_to_device_memcpy_ce 165.60\n";

    #[test]
    fn a_gpu_without_a_figure_is_not_covered() {
        let th = in_force(&AcceptanceConfig::default(), "NVIDIA H100 80GB HBM3");
        let results = h2d(FOUR);
        assert_eq!(results.len(), 3, "{results:?}");
        let gaps = gaps(
            GateName::HostToDevice,
            &results,
            &node(4),
            &Inventory::default(),
            &th,
        );
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        assert_eq!(gaps[0].subject.as_deref(), Some("GPU2"));
        assert_eq!(gaps[0].verdict, Verdict::NotJudged);
        let f = gaps[0].finding().expect("a finding");
        assert!(f.action.drains(), "{f:?}");
        assert!(
            f.summary.starts_with("H2D GPU2 not judged"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn a_gpu_gone_since_the_fault_holds_every_gpu_gate() {
        let th = in_force(&AcceptanceConfig::default(), "NVIDIA H100 80GB HBM3");
        let had = Inventory::of(&node(8), Some(&NodeTopology::default()), &[]);
        for gate in [GateName::AllReduce, GateName::Dcgm, GateName::HostToDevice] {
            let gaps = gaps(gate, &[], &node(7), &had, &th);
            assert_eq!(gaps.len(), 1, "{gate:?}: {gaps:?}");
            assert!(gaps[0].holds);
            assert!(
                gaps[0].detail.contains("0000:1f:00.0"),
                "{}",
                gaps[0].detail
            );
        }
        assert!(gaps(GateName::AllReduce, &[], &node(8), &had, &th).is_empty());
    }
}
