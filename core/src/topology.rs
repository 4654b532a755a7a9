//! Tensor-parallel placement checks.
//!
//! A tensor-parallel (TP) group of N ranks exchanges activations at every
//! layer: its ranks must share one node and their GPUs must talk over
//! NVLink, not only PCIe. Two checks:
//!
//! - [`check_step_layout`]: what srun knows before launch (task and node
//!   counts): catches layouts that certainly split a group.
//! - [`check_node_groups`]: the exact check on one node (its global ranks
//!   and the GPU links), assuming local rank i uses the i-th GPU of the
//!   job on that node (the usual `LOCAL_RANK` -> device binding).

use crate::snapshot::GpuLink;

/// Refuse layouts that certainly split a TP group of `tp` ranks.
///
/// `gpus_per_node` is given when srun knows it. When the tasks are not
/// spread evenly over the nodes only the total is checked here; the
/// exact per-node check runs on each node.
pub fn check_step_layout(
    total_tasks: u32,
    nnodes: u32,
    tp: u32,
    gpus_per_node: Option<u32>,
) -> Result<(), String> {
    if tp <= 1 {
        return Ok(());
    }
    if let Some(gpus) = gpus_per_node.filter(|&g| g > 0 && tp > g) {
        return Err(format!(
            "--tp-size={tp} is larger than the {gpus} GPUs of a node: a tensor-parallel group must fit on one node (use --tp-size<={gpus} and pipeline or data parallelism across nodes)"
        ));
    }
    if total_tasks % tp != 0 {
        return Err(format!(
            "{total_tasks} tasks do not form whole tensor-parallel groups of {tp}: use a task count that is a multiple of {tp}, e.g. --ntasks={}",
            total_tasks.div_ceil(tp) * tp
        ));
    }
    if nnodes > 0 && total_tasks % nnodes == 0 {
        let per_node = total_tasks / nnodes;
        if per_node % tp != 0 {
            let fix = if per_node < tp {
                format!(
                    "--ntasks-per-node={tp} with -N{}",
                    (total_tasks / tp).max(1)
                )
            } else {
                format!("--ntasks-per-node={}", per_node / tp * tp)
            };
            return Err(format!(
                "{per_node} tasks per node split tensor-parallel groups of {tp} across nodes: use a multiple of {tp} tasks per node, e.g. {fix}"
            ));
        }
    }
    Ok(())
}

/// One way a node's placement breaks its TP groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TpViolation {
    /// Group `group` (ranks group*tp ..) is only partly on this node.
    SplitGroup { group: u32, here: Vec<u32> },
    /// More ranks on this node than GPUs of the job here.
    NoGpuForRank { rank: u32, local: u32, gpus: usize },
    /// Two GPUs of one group reach each other only through PCIe (or the
    /// link is unknown).
    NotNvlink {
        group: u32,
        gpu_a: u32,
        gpu_b: u32,
        link: Option<GpuLink>,
    },
    /// The node's GPU topology is unknown (no snapshot).
    TopologyUnknown,
}

impl std::fmt::Display for TpViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TpViolation::SplitGroup { group, here } => write!(
                f,
                "tensor-parallel group {group} is split across nodes (ranks {here:?} here): use a multiple of --tp-size tasks per node (--ntasks-per-node)"
            ),
            TpViolation::NoGpuForRank { rank, local, gpus } => write!(
                f,
                "rank {rank} (local {local}) has no GPU of its own: {gpus} GPU(s) of the job on this node"
            ),
            TpViolation::NotNvlink {
                group,
                gpu_a,
                gpu_b,
                link,
            } => {
                let how = match link {
                    Some(GpuLink::Pcie) => "only through PCIe",
                    _ => "by no known link",
                };
                write!(
                    f,
                    "tensor-parallel group {group}: GPU{gpu_a} and GPU{gpu_b} are connected {how}, not NVLink"
                )
            }
            TpViolation::TopologyUnknown => {
                write!(f, "GPU topology of this node unknown: cannot confirm NVLink within tensor-parallel groups")
            }
        }
    }
}

/// The exact check on one node.
///
/// `global_ranks[i]` is the global rank of local task i; `job_gpus` are
/// the job's GPUs on this node (NVML indices, in order); `links` is the
/// node's matrix indexed by NVML index.
pub fn check_node_groups(
    global_ranks: &[u32],
    tp: u32,
    job_gpus: &[u32],
    links: Option<&[Vec<GpuLink>]>,
) -> Vec<TpViolation> {
    let mut out = Vec::new();
    if tp <= 1 {
        return out;
    }
    // group -> [(local id, global rank)]
    let mut groups: std::collections::BTreeMap<u32, Vec<(u32, u32)>> = Default::default();
    for (local, &rank) in global_ranks.iter().enumerate() {
        let local = u32::try_from(local).unwrap_or(u32::MAX);
        groups.entry(rank / tp).or_default().push((local, rank));
    }
    for (&group, members) in &groups {
        if members.len() != tp as usize {
            let mut here: Vec<u32> = members.iter().map(|m| m.1).collect();
            here.sort_unstable();
            out.push(TpViolation::SplitGroup { group, here });
            continue;
        }
        let mut gpus = Vec::new();
        for &(local, rank) in members {
            match job_gpus.get(local as usize) {
                Some(&g) => gpus.push(g),
                None => out.push(TpViolation::NoGpuForRank {
                    rank,
                    local,
                    gpus: job_gpus.len(),
                }),
            }
        }
        if gpus.len() < 2 {
            continue;
        }
        let Some(links) = links else {
            if !out.contains(&TpViolation::TopologyUnknown) {
                out.push(TpViolation::TopologyUnknown);
            }
            continue;
        };
        for (i, &a) in gpus.iter().enumerate() {
            for &b in &gpus[i + 1..] {
                let link = links
                    .get(a as usize)
                    .and_then(|row| row.get(b as usize))
                    .copied();
                if link != Some(GpuLink::Nvlink) {
                    out.push(TpViolation::NotNvlink {
                        group,
                        gpu_a: a,
                        gpu_b: b,
                        link,
                    });
                }
            }
        }
    }
    out
}
