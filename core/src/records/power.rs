//! Power per node and per rack from the job records: each job's GPU
//! energy on a node, spread evenly over the job's time, summed per UTC
//! hour. Pure: the report command reads the records, this adds them up.
//!
//! What it can and cannot say: the records measure the GPUs' energy
//! counters exactly, but only their means over a job; an hour's figure is
//! therefore the mean power of that hour, not an instantaneous peak. The
//! rest of a node (CPUs, NICs, fans) is the rack's `node_overhead_w`.

use std::collections::BTreeMap;

use crate::config::RackConfig;

const HOUR_MS: u64 = 3_600_000;

/// One job's GPU energy on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnergy {
    pub job_id: String,
    pub node: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub energy_j: f64,
    /// The job's GPUs on the node together at the sample that drew most.
    pub peak_w: Option<f64>,
}

/// A node's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePower {
    pub node: String,
    pub jobs: usize,
    pub energy_kwh: f64,
    /// Energy over the time its jobs ran (overlapping jobs add up).
    pub mean_w: f64,
    /// The highest hourly mean, and the hour (Unix ms of its start).
    pub peak_hour_w: f64,
    pub peak_hour_ms: u64,
    /// The highest sampled peak of one of its jobs (the job's GPUs
    /// together; see `JobRecord::peak_power_w`).
    pub peak_job_w: Option<f64>,
}

/// A rack's figures, hour by hour.
#[derive(Debug, Clone, PartialEq)]
pub struct RackPower {
    pub name: String,
    pub nodes: usize,
    pub budget_w: f64,
    pub supply_w: f64,
    pub cooling_w: f64,
    /// (hour start, mean W: the nodes' GPUs plus their overhead), in order.
    pub hours: Vec<(u64, f64)>,
    /// The hours above the budget.
    pub over: Vec<(u64, f64)>,
}

impl RackPower {
    pub fn peak(&self) -> Option<(u64, f64)> {
        self.hours
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct PowerReport {
    pub nodes: Vec<NodePower>,
    pub racks: Vec<RackPower>,
}

/// Joules of `[start, end)` that fall into each hour.
fn spread(e: &JobEnergy, into: &mut BTreeMap<u64, f64>) {
    let (start, end) = (e.start_ms, e.end_ms.max(e.start_ms));
    if end == start {
        *into.entry(start / HOUR_MS * HOUR_MS).or_default() += e.energy_j;
        return;
    }
    let mut t = start;
    while t < end {
        let hour = t / HOUR_MS * HOUR_MS;
        let upto = (hour + HOUR_MS).min(end);
        *into.entry(hour).or_default() += e.energy_j * (upto - t) as f64 / (end - start) as f64;
        t = upto;
    }
}

/// One node's jobs added up.
#[derive(Default)]
struct NodeSum {
    jobs: usize,
    joules: f64,
    ran_ms: u64,
    peak_job_w: Option<f64>,
    /// Joules per hour start.
    hours: BTreeMap<u64, f64>,
}

/// The report over `jobs` for `racks`.
pub fn power_report(jobs: &[JobEnergy], racks: &[RackConfig]) -> PowerReport {
    let mut per_node: BTreeMap<&str, NodeSum> = BTreeMap::new();
    for e in jobs {
        let n = per_node.entry(&e.node).or_default();
        n.jobs += 1;
        n.joules += e.energy_j;
        n.ran_ms += e.end_ms.saturating_sub(e.start_ms);
        if let Some(w) = e.peak_w {
            n.peak_job_w = Some(n.peak_job_w.map_or(w, |m: f64| m.max(w)));
        }
        spread(e, &mut n.hours);
    }
    let nodes = per_node
        .iter()
        .map(|(node, sum)| {
            let (count, joules, ran_ms, hours) = (&sum.jobs, &sum.joules, &sum.ran_ms, &sum.hours);
            let (peak_hour_ms, peak_j) = hours
                .iter()
                .map(|(h, j)| (*h, *j))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((0, 0.0));
            NodePower {
                node: node.to_string(),
                jobs: *count,
                energy_kwh: joules / 3.6e6,
                mean_w: if *ran_ms > 0 {
                    joules / (*ran_ms as f64 / 1000.0)
                } else {
                    0.0
                },
                peak_hour_w: peak_j / 3600.0,
                peak_hour_ms,
                peak_job_w: sum.peak_job_w,
            }
        })
        .collect();
    let racks = racks
        .iter()
        .map(|rack| {
            let members = rack.node_names();
            let mut hours: BTreeMap<u64, f64> = BTreeMap::new();
            for m in &members {
                if let Some(sum) = per_node.get(m.as_str()) {
                    for (hour, j) in &sum.hours {
                        *hours.entry(*hour).or_default() += j / 3600.0;
                    }
                }
            }
            // Hours between the first and the last without a job still
            // draw the nodes' overhead (bounded: some years of hours).
            if let (Some(&first), Some(&last)) = (hours.keys().next(), hours.keys().next_back()) {
                if (last - first) / HOUR_MS < 100_000 {
                    let mut h = first;
                    while h < last {
                        hours.entry(h).or_default();
                        h += HOUR_MS;
                    }
                }
            }
            let overhead = rack.node_overhead_w * members.len() as f64;
            let hours: Vec<(u64, f64)> =
                hours.into_iter().map(|(h, w)| (h, w + overhead)).collect();
            let budget_w = rack.budget_w();
            RackPower {
                name: rack.name.clone(),
                nodes: members.len(),
                budget_w,
                supply_w: rack.supply_kw * 1000.0,
                cooling_w: rack.cooling_kw * 1000.0,
                over: hours
                    .iter()
                    .copied()
                    .filter(|(_, w)| *w > budget_w)
                    .collect(),
                hours,
            }
        })
        .collect();
    PowerReport { nodes, racks }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(node: &str, start_h: f64, hours: f64, watts: f64) -> JobEnergy {
        let start_ms = (start_h * HOUR_MS as f64) as u64;
        let end_ms = start_ms + (hours * HOUR_MS as f64) as u64;
        JobEnergy {
            job_id: "1".into(),
            node: node.into(),
            start_ms,
            end_ms,
            energy_j: watts * hours * 3600.0,
            peak_w: Some(watts * 1.25),
        }
    }

    fn rack(name: &str, nodes: &[&str], supply_kw: f64, overhead: f64) -> RackConfig {
        RackConfig {
            name: name.into(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            supply_kw,
            cooling_kw: 12.0,
            node_overhead_w: overhead,
        }
    }

    #[test]
    fn energy_spreads_over_hours_and_racks_pass_their_budget() {
        // n1: 5.6 kW of GPUs for 2 h from 10:30; n2: 2.8 kW for 1 h from 11:00.
        let jobs = [job("n1", 10.5, 2.0, 5600.0), job("n2", 11.0, 1.0, 2800.0)];
        let r = power_report(&jobs, &[rack("r1", &["n1", "n2"], 8.0, 500.0)]);
        let n1 = &r.nodes[0];
        assert_eq!((n1.node.as_str(), n1.jobs), ("n1", 1));
        assert!((n1.energy_kwh - 11.2).abs() < 1e-9);
        assert!((n1.mean_w - 5600.0).abs() < 1e-6);
        assert!(
            (n1.peak_hour_w - 5600.0).abs() < 1e-6,
            "a whole hour at 5.6 kW"
        );
        assert_eq!(n1.peak_job_w, Some(7000.0), "the job's sampled peak");
        let rk = &r.racks[0];
        let watts: Vec<f64> = rk.hours.iter().map(|(_, w)| w.round()).collect();
        // 10:00 half an hour of n1 (+1 kW overhead), 11:00 both, 12:00 half of n1.
        assert_eq!(
            watts,
            [2800.0 + 1000.0, 5600.0 + 2800.0 + 1000.0, 2800.0 + 1000.0]
        );
        assert_eq!(rk.over.len(), 1, "only 11:00 passes the 8 kW supply");
        assert_eq!(rk.over[0].0, 11 * HOUR_MS);
        assert_eq!(rk.peak().unwrap().0, 11 * HOUR_MS);
        // An hour without jobs between two with jobs: the overhead alone.
        let gap = power_report(
            &[job("n1", 1.0, 1.0, 100.0), job("n1", 3.0, 1.0, 100.0)],
            &[rack("r1", &["n1"], 8.0, 500.0)],
        );
        let w: Vec<f64> = gap.racks[0].hours.iter().map(|(_, w)| w.round()).collect();
        assert_eq!(w, [600.0, 500.0, 600.0]);
    }
}
