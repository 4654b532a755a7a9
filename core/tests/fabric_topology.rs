//! Tensor-parallel placement checks on an H100 NVSwitch node and an L40S
//! PCIe-only node.

use gpu_health_core::snapshot::GpuLink;
use gpu_health_core::topology::{check_node_groups, check_step_layout, TpViolation};

/// Every GPU reaches every other through NVSwitch.
fn h100x8_nvswitch() -> Vec<Vec<GpuLink>> {
    matrix(8, |_, _| GpuLink::Nvlink)
}

/// No NVLink at all.
fn l40sx4_pcie() -> Vec<Vec<GpuLink>> {
    matrix(4, |_, _| GpuLink::Pcie)
}

fn matrix(n: usize, link: impl Fn(usize, usize) -> GpuLink) -> Vec<Vec<GpuLink>> {
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| if i == j { GpuLink::Itself } else { link(i, j) })
                .collect()
        })
        .collect()
}

#[test]
fn layout_whole_groups_pass() {
    assert_eq!(check_step_layout(16, 2, 8, Some(8)), Ok(()));
    assert_eq!(check_step_layout(16, 2, 4, None), Ok(()));
    assert_eq!(check_step_layout(3, 3, 1, None), Ok(()));
}

#[test]
fn layout_tp_larger_than_node_is_refused_with_a_fix() {
    let e = check_step_layout(16, 2, 16, Some(8)).unwrap_err();
    assert!(e.contains("--tp-size<=8"), "{e}");
    // Without the GPU count the per-node split still shows it.
    let e = check_step_layout(16, 2, 16, None).unwrap_err();
    assert!(e.contains("--ntasks-per-node=16"), "{e}");
}

#[test]
fn layout_split_groups_are_refused() {
    let e = check_step_layout(12, 2, 4, None).unwrap_err();
    assert!(
        e.contains("6 tasks per node") && e.contains("--ntasks-per-node=4"),
        "{e}"
    );
    let e = check_step_layout(10, 1, 4, None).unwrap_err();
    assert!(e.contains("--ntasks=12"), "{e}");
}

#[test]
fn layout_uneven_spread_is_left_to_the_nodes() {
    // 24 tasks on 5 nodes: srun cannot tell the split; each node checks.
    assert_eq!(check_step_layout(24, 5, 8, None), Ok(()));
}

#[test]
fn h100_nvswitch_group_of_8_passes() {
    let ranks: Vec<u32> = (8..16).collect();
    let gpus: Vec<u32> = (0..8).collect();
    assert!(check_node_groups(&ranks, 8, &gpus, Some(&h100x8_nvswitch())).is_empty());
    // Two groups of 4 too.
    assert!(check_node_groups(&ranks, 4, &gpus, Some(&h100x8_nvswitch())).is_empty());
}

#[test]
fn l40s_pcie_group_is_not_nvlink() {
    let ranks: Vec<u32> = (0..4).collect();
    let gpus: Vec<u32> = (0..4).collect();
    let v = check_node_groups(&ranks, 2, &gpus, Some(&l40sx4_pcie()));
    assert_eq!(
        v,
        vec![
            TpViolation::NotNvlink {
                group: 0,
                gpu_a: 0,
                gpu_b: 1,
                link: Some(GpuLink::Pcie)
            },
            TpViolation::NotNvlink {
                group: 1,
                gpu_a: 2,
                gpu_b: 3,
                link: Some(GpuLink::Pcie)
            },
        ]
    );
    assert!(v[0].to_string().contains("only through PCIe"), "{}", v[0]);
    // tp=1 never needs NVLink.
    assert!(check_node_groups(&ranks, 1, &gpus, Some(&l40sx4_pcie())).is_empty());
}

#[test]
fn nvlink_pairs_only_within_each_half() {
    // Two NVLink islands 0-3 and 4-7 joined by PCIe (e.g. a degraded bridge).
    let m = matrix(8, |i, j| {
        if i / 4 == j / 4 {
            GpuLink::Nvlink
        } else {
            GpuLink::Pcie
        }
    });
    let ranks: Vec<u32> = (0..8).collect();
    let gpus: Vec<u32> = (0..8).collect();
    assert!(check_node_groups(&ranks, 4, &gpus, Some(&m)).is_empty());
    let v = check_node_groups(&ranks, 8, &gpus, Some(&m));
    assert_eq!(v.len(), 16, "{v:?}");
}

#[test]
fn the_jobs_gpus_are_the_ones_checked() {
    // Ranks use the job's GPUs 4 and 5, which are NVLink peers here.
    let m = matrix(8, |i, j| {
        if i / 4 == j / 4 {
            GpuLink::Nvlink
        } else {
            GpuLink::Pcie
        }
    });
    assert!(check_node_groups(&[0, 1], 2, &[4, 5], Some(&m)).is_empty());
    assert_eq!(check_node_groups(&[0, 1], 2, &[3, 4], Some(&m)).len(), 1);
}

#[test]
fn split_group_is_found_from_global_ranks() {
    // Ranks 6..10 on this node with tp=8: group 0 has 6,7 here, group 1 has 8,9.
    let gpus: Vec<u32> = (0..8).collect();
    let v = check_node_groups(&[6, 7, 8, 9], 8, &gpus, Some(&h100x8_nvswitch()));
    assert_eq!(
        v,
        vec![
            TpViolation::SplitGroup {
                group: 0,
                here: vec![6, 7]
            },
            TpViolation::SplitGroup {
                group: 1,
                here: vec![8, 9]
            },
        ]
    );
    assert!(v[0].to_string().contains("--ntasks-per-node"));
}

#[test]
fn more_ranks_than_gpus_and_unknown_topology() {
    let v = check_node_groups(&[0, 1, 2, 3], 4, &[0, 1], Some(&h100x8_nvswitch()));
    assert!(
        matches!(v[0], TpViolation::NoGpuForRank { rank: 2, .. }),
        "{v:?}"
    );
    let v = check_node_groups(&[0, 1], 2, &[0, 1], None);
    assert_eq!(v, vec![TpViolation::TopologyUnknown]);
}
