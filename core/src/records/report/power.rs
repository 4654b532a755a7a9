//! Power per node and per rack from the job records: each job's GPU
//! energy on a node, spread evenly over the job's time, summed per UTC
//! hour. Pure: the report command reads the records, this adds them up.
//!
//! What it can and cannot say: the records measure the GPUs' energy
//! counters exactly, but only their means over a job; an hour's figure is
//! therefore the mean power of that hour, not an instantaneous peak. The
//! rest of a node (CPUs, NICs, fans) is the rack's `node_overhead_w`.
//!
//! The records are root's, but a clock gone wrong or a hand-edited line
//! must not hang the report: a record whose times or energy cannot be a
//! measurement is left out and counted ([`Skipped`]), every time
//! computation is bounded, and adding a record costs the same however
//! long it ran; the hourly series hold at most the report's window
//! ([`MAX_REPORT_HOURS`]).

use std::collections::BTreeMap;

use crate::config::Rack;

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

/// The last millisecond of the year 9999: no clock reading is later, and
/// the hour arithmetic on anything up to it cannot overflow.
pub const MAX_RECORD_TIME_MS: u64 = 253_402_300_799_999;

/// A record may end this far after the report's own clock (clocks of
/// nodes and of the admin's machine differ a little; a later stamp is no
/// clock reading).
pub const MAX_AHEAD_MS: u64 = DAY_MS;

/// The report covers the records that started in the last ten years
/// (366-day years): its hourly series hold at most this many hours plus
/// [`MAX_AHEAD_MS`] worth.
pub const MAX_REPORT_HOURS: u64 = 10 * 366 * 24;

/// A node's GPUs drawing more than this, as a mean over a record's time
/// (at least a second) or at a sample, is no measurement (a counter that
/// jumped, a record written by hand): 100 kW, several times the largest
/// GPU node.
pub const MAX_NODE_W: f64 = 100_000.0;

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

/// Records the report left out, by why, and figures it ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// An end before the start, or a time more than [`MAX_AHEAD_MS`]
    /// after the report's clock (or past the year 9999).
    pub bad_time: usize,
    /// Started more than [`MAX_REPORT_HOURS`] before the report's clock.
    pub too_old: usize,
    /// Energy not finite, negative, or more than [`MAX_NODE_W`] over the
    /// record's time.
    pub bad_energy: usize,
    /// Sampled peaks not finite, negative or above [`MAX_NODE_W`]:
    /// ignored, the record's energy still counts.
    pub bad_peak: usize,
}

impl Skipped {
    /// Records left out altogether.
    pub fn records(&self) -> usize {
        self.bad_time + self.too_old + self.bad_energy
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct PowerReport {
    pub nodes: Vec<NodePower>,
    pub racks: Vec<RackPower>,
    pub skipped: Skipped,
}

/// Why a record cannot be placed in the report, if it cannot.
enum Unplaceable {
    Time,
    Old,
    Energy,
}

/// The records a report made at `now_ms` places: times within
/// [`MAX_REPORT_HOURS`] before it and [`MAX_AHEAD_MS`] after, and an
/// energy a node's GPUs can draw in the record's time.
fn unplaceable(e: &JobEnergy, now_ms: u64) -> Option<Unplaceable> {
    let latest = now_ms.saturating_add(MAX_AHEAD_MS).min(MAX_RECORD_TIME_MS);
    if e.end_ms < e.start_ms || e.end_ms > latest {
        return Some(Unplaceable::Time);
    }
    let earliest = now_ms.saturating_sub(MAX_REPORT_HOURS * HOUR_MS);
    if e.start_ms < earliest {
        return Some(Unplaceable::Old);
    }
    let span_s = (e.end_ms - e.start_ms).max(1000) as f64 / 1000.0;
    let energy_ok =
        e.energy_j.is_finite() && e.energy_j >= 0.0 && e.energy_j <= MAX_NODE_W * span_s;
    (!energy_ok).then_some(Unplaceable::Energy)
}

/// One node's jobs added up. A job's energy is spread evenly over its
/// time: its first and last hour get their share directly, the whole
/// hours between are kept as where they begin and end, so that adding a
/// job costs the same however long it ran.
#[derive(Default)]
struct NodeSum {
    jobs: usize,
    joules: f64,
    ran_ms: u64,
    peak_job_w: Option<f64>,
    /// Joules per hour index (Unix ms / hour) of the hours jobs cover in
    /// part.
    part_hours: BTreeMap<u64, f64>,
    /// Per hour index: the change of joules per whole hour, and of the
    /// jobs whose whole hours run, from that hour on.
    whole_hours: BTreeMap<u64, (f64, i64)>,
}

impl NodeSum {
    /// Adds a placeable job (end at or after its start, times bounded).
    fn add(&mut self, e: &JobEnergy) {
        self.jobs += 1;
        self.joules += e.energy_j;
        self.ran_ms = self.ran_ms.saturating_add(e.end_ms - e.start_ms);
        let (start, end) = (e.start_ms, e.end_ms);
        let (first, last) = (start / HOUR_MS, end.saturating_sub(1).max(start) / HOUR_MS);
        if first == last {
            *self.part_hours.entry(first).or_default() += e.energy_j;
            return;
        }
        // Joules per ms; `end > start` here.
        let rate = e.energy_j / (end - start) as f64;
        *self.part_hours.entry(first).or_default() += rate * ((first + 1) * HOUR_MS - start) as f64;
        *self.part_hours.entry(last).or_default() += rate * (end - last * HOUR_MS) as f64;
        if last > first + 1 {
            let per_hour = rate * HOUR_MS as f64;
            let from = self.whole_hours.entry(first + 1).or_default();
            (from.0, from.1) = (from.0 + per_hour, from.1 + 1);
            let to = self.whole_hours.entry(last).or_default();
            (to.0, to.1) = (to.0 - per_hour, to.1 - 1);
        }
    }

    /// Joules per hour index, for each hour a job ran in.
    fn hours(&self) -> BTreeMap<u64, f64> {
        let mut out = self.part_hours.clone();
        let (mut per_hour, mut running, mut from) = (0.0, 0i64, 0u64);
        for (&hour, &(change, jobs)) in &self.whole_hours {
            if running > 0 {
                for h in from..hour {
                    *out.entry(h).or_default() += per_hour;
                }
            }
            per_hour += change;
            running += jobs;
            if running == 0 {
                // No rounding left over between jobs.
                per_hour = 0.0;
            }
            from = hour;
        }
        out
    }
}

/// The report over `jobs` for `racks`, made at `now_ms` (Unix ms): the
/// records it cannot place are counted in [`PowerReport::skipped`].
pub fn power_report(jobs: &[JobEnergy], racks: &[Rack], now_ms: u64) -> PowerReport {
    let mut skipped = Skipped::default();
    let mut per_node: BTreeMap<&str, NodeSum> = BTreeMap::new();
    for e in jobs {
        match unplaceable(e, now_ms) {
            Some(Unplaceable::Time) => skipped.bad_time += 1,
            Some(Unplaceable::Old) => skipped.too_old += 1,
            Some(Unplaceable::Energy) => skipped.bad_energy += 1,
            None => {
                let n = per_node.entry(&e.node).or_default();
                n.add(e);
                match e.peak_w {
                    Some(w) if w.is_finite() && (0.0..=MAX_NODE_W).contains(&w) => {
                        n.peak_job_w = Some(n.peak_job_w.map_or(w, |m: f64| m.max(w)));
                    }
                    Some(_) => skipped.bad_peak += 1,
                    None => {}
                }
            }
        }
    }
    // Joules per hour index of each node.
    let node_hours: BTreeMap<&str, BTreeMap<u64, f64>> =
        per_node.iter().map(|(n, sum)| (*n, sum.hours())).collect();
    let nodes = per_node
        .iter()
        .map(|(node, sum)| {
            let (peak_hour, peak_j) = node_hours[node]
                .iter()
                .map(|(h, j)| (*h, *j))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((0, 0.0));
            NodePower {
                node: node.to_string(),
                jobs: sum.jobs,
                energy_kwh: sum.joules / 3.6e6,
                mean_w: if sum.ran_ms > 0 {
                    sum.joules / (sum.ran_ms as f64 / 1000.0)
                } else {
                    0.0
                },
                peak_hour_w: peak_j / 3600.0,
                peak_hour_ms: peak_hour * HOUR_MS,
                peak_job_w: sum.peak_job_w,
            }
        })
        .collect();
    let racks = racks
        .iter()
        .map(|rack| rack_power(rack, &node_hours))
        .collect();
    PowerReport {
        nodes,
        racks,
        skipped,
    }
}

/// A rack's hours: its nodes' joules per hour as W, plus their overhead.
fn rack_power(rack: &Rack, node_hours: &BTreeMap<&str, BTreeMap<u64, f64>>) -> RackPower {
    let mut hours: BTreeMap<u64, f64> = BTreeMap::new();
    for m in &rack.nodes {
        if let Some(joules) = node_hours.get(m.as_str()) {
            for (hour, j) in joules {
                *hours.entry(*hour).or_default() += j / 3600.0;
            }
        }
    }
    // Hours between the first and the last without a job still draw the
    // nodes' overhead (the placed records span at most the report's
    // window, so this is bounded).
    if let (Some(&first), Some(&last)) = (hours.keys().next(), hours.keys().next_back()) {
        for h in first..last {
            hours.entry(h).or_default();
        }
    }
    let overhead = rack.node_overhead_w * rack.nodes.len() as f64;
    let hours: Vec<(u64, f64)> = hours
        .into_iter()
        .map(|(h, w)| (h * HOUR_MS, w + overhead))
        .collect();
    let budget_w = rack.budget_w();
    RackPower {
        name: rack.name.clone(),
        nodes: rack.nodes.len(),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reports' clock: 100 hours after the epoch (the jobs below run
    /// in the first day).
    const NOW: u64 = 100 * HOUR_MS;

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

    fn rack(name: &str, nodes: &[&str], supply_kw: f64, overhead: f64) -> Rack {
        Rack {
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
        let r = power_report(&jobs, &[rack("r1", &["n1", "n2"], 8.0, 500.0)], NOW);
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
            NOW,
        );
        let w: Vec<f64> = gap.racks[0].hours.iter().map(|(_, w)| w.round()).collect();
        assert_eq!(w, [600.0, 500.0, 600.0]);
    }

    /// The hours of `jobs` on one node, one hour step at a time (the
    /// plain way the report did it before).
    fn hour_by_hour(jobs: &[JobEnergy]) -> BTreeMap<u64, f64> {
        let mut out = BTreeMap::new();
        for e in jobs {
            let (start, end) = (e.start_ms, e.end_ms);
            if end == start {
                *out.entry(start / HOUR_MS).or_default() += e.energy_j;
                continue;
            }
            let mut t = start;
            while t < end {
                let hour = t / HOUR_MS;
                let upto = ((hour + 1) * HOUR_MS).min(end);
                *out.entry(hour).or_default() +=
                    e.energy_j * (upto - t) as f64 / (end - start) as f64;
                t = upto;
            }
        }
        out
    }

    #[test]
    fn whole_hours_add_up_as_hour_by_hour() {
        // Overlapping, nested, back-to-back, within one hour, zero-length.
        let jobs = [
            job("n", 0.25, 30.0, 700.0),
            job("n", 3.0, 4.0, 300.0),
            job("n", 5.5, 0.25, 900.0),
            job("n", 7.0, 2.0, 100.0),
            job("n", 9.0, 3.5, 200.0),
            job("n", 12.5, 0.0, 0.0),
            job("n", 40.75, 2.5, 50.0),
        ];
        let mut sum = NodeSum::default();
        jobs.iter().for_each(|e| sum.add(e));
        let (fast, plain) = (sum.hours(), hour_by_hour(&jobs));
        assert_eq!(
            fast.keys().collect::<Vec<_>>(),
            plain.keys().collect::<Vec<_>>()
        );
        for (h, j) in &plain {
            assert!(
                (fast[h] - j).abs() < 1e-6 * j.max(1.0),
                "hour {h}: {} {j}",
                fast[h]
            );
        }
        // Between jobs nothing is left over from rounding: hours 31..=39 have no job.
        assert!((31..40).all(|h| !fast.contains_key(&h)));
    }

    #[test]
    fn records_the_report_cannot_place_are_counted_never_looped_on() {
        let now = 1_795_910_400_000; // 2026-11-29
        let at = |start_ms: u64, end_ms: u64, energy_j: f64| JobEnergy {
            job_id: "9".into(),
            node: "n1".into(),
            start_ms,
            end_ms,
            energy_j,
            peak_w: None,
        };
        let good = at(now - 2 * HOUR_MS, now - HOUR_MS, 3.6e6);
        let jobs = [
            good.clone(),
            // Times near 2^64 (the hour arithmetic wrapped here).
            at(u64::MAX - 1000, u64::MAX, 1.0),
            at(now, u64::MAX, 1.0),
            // Reversed.
            at(now, now - HOUR_MS, 1.0),
            // 0..1e15 ms: from 1970 to the year 33658.
            at(0, 1_000_000_000_000_000, 1.0),
            // Eleven years long, ending now: started too long ago.
            at(now - 11 * 366 * 24 * HOUR_MS, now, 1.0),
            // A week ahead of the report's clock.
            at(now, now + 7 * 24 * HOUR_MS, 1.0),
            // Energies no node draws.
            at(now - HOUR_MS, now, 1e308),
            at(now - HOUR_MS, now, -1.0),
            at(now - HOUR_MS, now, f64::INFINITY),
            at(now - HOUR_MS, now, f64::NAN),
            at(now - 1, now, 1e9),
            // Peaks that are no measurement: the energy still counts.
            JobEnergy {
                peak_w: Some(f64::INFINITY),
                ..good.clone()
            },
            JobEnergy {
                peak_w: Some(1e12),
                ..good.clone()
            },
        ];
        let r = power_report(&jobs, &[rack("r1", &["n1"], 8.0, 0.0)], now);
        assert_eq!(
            r.skipped,
            Skipped {
                bad_time: 5,
                too_old: 1,
                bad_energy: 5,
                bad_peak: 2,
            }
        );
        assert_eq!(r.skipped.records(), 11);
        assert_eq!(r.nodes.len(), 1);
        assert_eq!((r.nodes[0].jobs, r.nodes[0].peak_job_w), (3, None));
        assert!((r.nodes[0].peak_hour_w - 3000.0).abs() < 1e-9);
        let hours = &r.racks[0].hours;
        assert_eq!(hours, &[(now - 2 * HOUR_MS, 3000.0)]);
        assert!(hours.iter().all(|(_, w)| w.is_finite()));
    }

    #[test]
    fn a_long_job_is_cheap_and_the_series_is_bounded() {
        // Nine years at 1 kW: its whole hours are made once, in the
        // output, however many such jobs there are.
        let now = 1_795_910_400_000;
        let years9 = 9 * 365 * 24 * HOUR_MS;
        let jobs: Vec<JobEnergy> = (0..50)
            .map(|i| JobEnergy {
                job_id: i.to_string(),
                node: "n1".into(),
                start_ms: now - years9,
                end_ms: now,
                energy_j: 1000.0 * (years9 / 1000) as f64,
                peak_w: None,
            })
            .collect();
        let r = power_report(&jobs, &[rack("r1", &["n1"], 100.0, 0.0)], now);
        assert_eq!(r.skipped, Skipped::default());
        let hours = &r.racks[0].hours;
        assert_eq!(hours.len() as u64, years9 / HOUR_MS);
        assert!(hours.len() as u64 <= MAX_REPORT_HOURS + MAX_AHEAD_MS / HOUR_MS + 1);
        assert!(hours.iter().all(|(_, w)| (w - 50_000.0).abs() < 1e-3));
    }
}
