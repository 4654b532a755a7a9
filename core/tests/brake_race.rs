//! The drain brake's claim protocol, raced: many nodes fail at once or
//! staggered, with skewed clocks and slow RPCs, against a model of
//! slurmctld that applies each update and answers each query at its own
//! moment. The ranking is the real `brake::rank`; the steps and waits are
//! those of `ops::drain` (claim, wait `claim_timeout_ms + settle_ms`
//! from the stamp, look, drain or withdraw).
//!
//! What must hold, by construction and not by luck of timing: gpu-health's
//! drains never exceed the allowed count at any moment, and when no claim
//! was given up the storm ends with exactly min(allowed, drains wanted).

use gpu_health_core::config::{BrakeConfig, BrakeScope};
use gpu_health_core::ops::brake::{self, claim_lifetime_ms, BrakeVerdict};
use gpu_health_core::ops::brake_window;
use gpu_health_core::slurm::NodeInfo;
use proptest::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Node {
    InService,
    /// Drained by gpu-health.
    Ours,
    /// Drained by an admin.
    Admin,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// The claim update reaches slurmctld.
    Claim {
        node: usize,
        stamp: u64,
    },
    /// The node's query is answered (slurmctld's table at this moment).
    Look {
        node: usize,
    },
    Drain {
        node: usize,
    },
    Withdraw {
        node: usize,
    },
}

/// One failing node's timing (real ms from the storm's start).
#[derive(Clone, Debug)]
struct Timing {
    start: u64,
    /// This node's clock minus the real time.
    skew: i64,
    claim_ms: u64,
    look_ms: u64,
    act_ms: u64,
}

struct Cluster {
    nodes: Vec<Node>,
    claims: Vec<Option<u64>>,
    /// The time stamp each drain of gpu-health leaves in the node's
    /// Comment (the time window counts by it).
    drained_at: Vec<Option<u64>>,
    cfg: BrakeConfig,
}

impl Cluster {
    fn table(&self) -> Vec<NodeInfo> {
        (0..self.nodes.len())
            .map(|i| {
                let (state, reason) = match self.nodes[i] {
                    Node::InService => ("IDLE", None),
                    Node::Ours => ("IDLE+DRAIN", Some("gpu-health: ECC DBE GPU3 (drain)")),
                    Node::Admin => ("IDLE+DRAIN", Some("admin: cables")),
                };
                NodeInfo {
                    name: name(i),
                    state: state.to_string(),
                    reason: reason.map(str::to_string),
                    reason_time: None,
                    partitions: vec!["main".to_string()],
                    claim_ms: self.claims[i],
                    drained_ms: self.drained_at[i],
                    comment: None,
                    foreign_comment: false,
                }
            })
            .collect()
    }

    fn ours(&self) -> usize {
        self.nodes.iter().filter(|n| **n == Node::Ours).count()
    }
}

fn name(i: usize) -> String {
    format!("n{i}")
}

/// Run one storm; returns (peak of our drains, final, claims given up).
fn storm(
    cfg: BrakeConfig,
    initial: Vec<Node>,
    failing: &[(usize, Timing)],
) -> (usize, usize, usize, Vec<String>) {
    let mut c = Cluster {
        claims: vec![None; initial.len()],
        drained_at: vec![None; initial.len()],
        nodes: initial,
        cfg,
    };
    let settle = c.cfg.settle_ms;
    let limit = c.cfg.claim_timeout_ms;
    let wait = limit + settle;
    let mut events: Vec<(u64, u8, Event)> = Vec::new();
    let mut stamps = vec![0u64; c.nodes.len()];
    let mut given_up = 0;
    let mut timing = vec![None; c.nodes.len()];
    // Clocks are offset by 100 s so that skews never go below zero.
    let clock = |t: u64, skew: i64| (100_000 + t as i64 + skew) as u64;
    for (i, t) in failing {
        let stamp = clock(t.start, t.skew);
        stamps[*i] = stamp;
        timing[*i] = Some(t.clone());
        // Updates sort before queries at the same millisecond.
        events.push((t.start + t.claim_ms, 0, Event::Claim { node: *i, stamp }));
        if t.claim_ms > limit {
            // Too slow: the node gives up and withdraws.
            given_up += 1;
            events.push((
                t.start + t.claim_ms + t.act_ms + 1,
                0,
                Event::Withdraw { node: *i },
            ));
        } else {
            let sent = t.start + wait.max(t.claim_ms);
            events.push((sent + t.look_ms, 1, Event::Look { node: *i }));
        }
    }
    let allowed = brake::allowed(&c.cfg, c.nodes.len());
    let before = c.ours();
    let mut peak = before;
    let mut log = Vec::new();
    while !events.is_empty() {
        let k = (0..events.len())
            .min_by_key(|&k| (events[k].0, events[k].1))
            .unwrap();
        let (at, _, ev) = events.swap_remove(k);
        match ev {
            Event::Claim { node, stamp } => c.claims[node] = Some(stamp),
            Event::Withdraw { node } => c.claims[node] = None,
            Event::Drain { node } => {
                c.nodes[node] = Node::Ours;
                c.claims[node] = None;
                c.drained_at[node] = Some(at);
            }
            Event::Look { node } => {
                let t = timing[node].clone().unwrap();
                let table = c.table();
                let me = &table[node];
                let verdict = if me.is_drained() {
                    BrakeVerdict::Hold("drained meanwhile".into())
                } else {
                    brake::rank(&c.cfg, &table, &me.name, stamps[node])
                };
                let decided = at - t.start;
                let late = decided > claim_lifetime_ms(&c.cfg) - settle;
                let next = match verdict {
                    BrakeVerdict::Drain if !late => Event::Drain { node },
                    _ => Event::Withdraw { node },
                };
                log.push(format!("{at} ms: n{node} {next:?}"));
                events.push((at + t.act_ms, 0, next));
            }
        }
        peak = peak.max(c.ours());
        assert!(
            c.ours() <= allowed.max(before),
            "{} drains at {at} ms, {allowed} allowed\n{}",
            c.ours(),
            log.join("\n")
        );
    }
    assert!(
        c.claims.iter().all(Option::is_none),
        "a claim was left behind"
    );
    (peak, c.ours(), given_up, log)
}

fn cfg(fraction: f64, settle_ms: u64) -> BrakeConfig {
    BrakeConfig {
        max_drained_fraction: fraction,
        min_drainable: 1,
        scope: BrakeScope::Partition,
        settle_ms,
        ..BrakeConfig::default()
    }
}

fn timing(start: u64, skew: i64, claim_ms: u64, look_ms: u64, act_ms: u64) -> Timing {
    Timing {
        start,
        skew,
        claim_ms,
        look_ms,
        act_ms,
    }
}

#[test]
fn every_node_at_the_same_moment() {
    let n = 256;
    let failing: Vec<(usize, Timing)> = (0..n)
        .map(|i| (i, timing(0, 0, 50 + (i as u64 * 7) % 900, 1_300, 200)))
        .collect();
    let (peak, end, given_up, _) = storm(cfg(0.10, 500), vec![Node::InService; n], &failing);
    assert_eq!((peak, end, given_up), (25, 25, 0));
}

#[test]
fn admins_drains_are_not_counted_and_ours_are() {
    let n = 100;
    let mut initial = vec![Node::InService; n];
    for node in initial.iter_mut().take(10) {
        *node = Node::Admin;
    }
    for node in initial.iter_mut().skip(10).take(4) {
        *node = Node::Ours;
    }
    let failing: Vec<(usize, Timing)> = (14..n).map(|i| (i, timing(0, 0, 30, 500, 100))).collect();
    let (peak, end, _, _) = storm(cfg(0.10, 500), initial, &failing);
    assert_eq!((peak, end), (10, 10), "4 before, 6 more");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn never_more_than_allowed_and_exact_without_slow_claims(
        n in 4usize..80,
        fraction in 0.0f64..0.6,
        settle in 100u64..1_000,
        spread in prop_oneof![Just(0u64), 0u64..8_000],
        seeds in proptest::collection::vec((0u64..10_000, -1_000i64..1_000, 0u64..1_200, 0u64..3_000, 0u64..2_000), 80),
        failing_share in 0.05f64..1.0,
    ) {
        let c = cfg(fraction, settle);
        let failing: Vec<(usize, Timing)> = (0..n)
            .filter(|i| (*i as f64) < failing_share * n as f64)
            .map(|i| {
                let (start, skew, claim, look, act) = seeds[i];
                // Clocks agree within settle_ms (each within half of it).
                let skew = skew * settle as i64 / 2 / 1_000;
                (i, timing(if spread == 0 { 0 } else { start % spread }, skew, claim, look, act))
            })
            .collect();
        let wanted = failing.len();
        let (peak, end, given_up, log) = storm(c.clone(), vec![Node::InService; n], &failing);
        // The whole storm lies within the time window (minutes; the
        // storm lasts seconds): the window's share bounds it as well, by
        // the same claims.
        let allowed = brake::allowed(&c, n).min(brake_window::window_allowed(&c, n));
        prop_assert!(peak <= allowed, "peak {peak} > {allowed}\n{}", log.join("\n"));
        if given_up == 0 {
            prop_assert_eq!(end, allowed.min(wanted), "{}", log.join("\n"));
        }
    }
}
