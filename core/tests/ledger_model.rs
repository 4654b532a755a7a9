//! A model test of the fault ledger: the real runs (prolog, epilog, health
//! check, `gpu-health resume`) with their real probe (the NVML stand-in),
//! kernel-log scan, state directory, run lock and ledger, against a model
//! of slurmctld (a 10-node partition) and of the node, driven by random
//! interleavings of faults, runs, Slurm failing or hanging, configuration
//! errors appearing and going, kills at any Slurm call, runs that find the
//! node's turn taken, and clock jumps. After every step it checks:
//!
//! 1. a draining kernel-log fault is never lost before it is acted on or
//!    an admin resumes: while it is owed, the cursor is before it or the
//!    ledger holds it;
//! 2. a node with an open `drain` fault never returns by itself;
//! 3. gpu-health's drains never exceed the brake's allowed count;
//! 4. every state file stays within its cap;
//! 5. no pid or process name reaches a reason, a verdict or the ledger,
//!    and none decides anything (one fault per GPU and code);
//! 6. a job starts beside an open draining fault only because the brake
//!    held the drain back, never because Slurm failed;
//! 7. with `[remediation] reboot = true`, a reboot (`Step::Reboot`: a new
//!    boot id, Slurm's `nextstate=RESUME`) is asked only while every open
//!    fault is one a reboot clears, and only of a node gpu-health drained;
//! 8. every lifecycle move a run makes is one the lifecycle table lists
//!    (`ledger::lifecycle::TABLE`);
//! 9. a `drain-until-clean` Xid read in this boot stays in the ledger for
//!    the quiet time after it on the boot clock, however the wall clock
//!    was set meanwhile (steps of 2 h and of a year, both ways).
//!
//! `PROPTEST_CASES` sets the number of cases (default 48).

mod model;

use gpu_health_core::ledger::lifecycle;
use model::slurm::{Kill, SlurmMode};
use model::world::{Step, World};
use proptest::prelude::*;

fn step() -> impl Strategy<Value = Step> {
    let codes = vec![79u32, 48, 31, 31, 13];
    let modes = vec![
        SlurmMode::Works,
        SlurmMode::Works,
        SlurmMode::Fails,
        SlurmMode::Hangs,
        SlurmMode::UpdatesFail,
    ];
    let jumps = vec![60_000i64, 700_000, 700_000, 3_600_000];
    let sets = vec![
        -2 * 3_600_000i64,
        2 * 3_600_000,
        -365 * 86_400_000,
        365 * 86_400_000,
    ];
    let scenarios = vec!["h100x8-healthy", "h100x8-dbe", "h100x8-fallen-off"];
    prop_oneof![
        5 => (prop::sample::select(codes), 0..8usize, 1000..999_999u32, 0..1000u32)
            .prop_map(|(code, gpu, pid, name)| Step::Xid { code, gpu, pid, name }),
        1 => prop::sample::select(scenarios).prop_map(Step::Nvml),
        3 => (1..1000u32, prop::collection::vec(0..8u32, 1..4))
            .prop_map(|(job, gpus)| Step::Prolog { job, gpus }),
        1 => Just(Step::Epilog),
        5 => Just(Step::HealthCheck),
        1 => any::<bool>().prop_map(|forget| Step::AdminResume { forget }),
        1 => Just(Step::AdminScontrolResume),
        2 => prop::sample::select(modes).prop_map(Step::Slurm),
        2 => any::<bool>().prop_map(Step::ConfigTypo),
        2 => prop::sample::select(jumps).prop_map(Step::Clock),
        2 => prop::sample::select(sets).prop_map(Step::ClockSet),
        1 => (1..6usize, any::<bool>()).prop_map(|(at, applied)| Step::Kill(Kill { at, applied })),
        1 => Just(Step::TurnTaken),
        1 => Just(Step::Concurrent),
        2 => Just(Step::Reboot),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_ledger_keeps_its_promises(others_drained in 0..2usize, steps in prop::collection::vec(step(), 1..28)) {
        let mut w = World::new(others_drained);
        lifecycle::take_unlisted();
        for s in &steps {
            w.apply(s)?;
            let unlisted = lifecycle::take_unlisted();
            prop_assert!(unlisted.is_empty(), "moves not in the lifecycle table: {unlisted:?}");
        }
    }
}

/// The cases as fixed interleavings, beside the random ones.
#[test]
fn the_cases_that_broke_the_files_before_the_ledger() {
    let xid = |code, gpu, pid| Step::Xid {
        code,
        gpu,
        pid,
        name: pid % 1000,
    };
    let cases: Vec<(&str, usize, Vec<Step>)> = vec![
        (
            "1: a fault held back survives a configuration error",
            0,
            vec![
                xid(79, 3, 2210),
                Step::Slurm(SlurmMode::Fails),
                Step::HealthCheck,
                Step::ConfigTypo(true),
                Step::HealthCheck,
                Step::ConfigTypo(false),
                Step::Slurm(SlurmMode::Works),
                Step::HealthCheck,
                Step::HealthCheck,
            ],
        ),
        (
            "2: a milder fault never softens a drain",
            0,
            vec![
                xid(48, 0, 2210),
                Step::HealthCheck,
                Step::Clock(60_000),
                xid(31, 1, 2211),
                Step::HealthCheck,
                Step::Clock(700_000),
                Step::HealthCheck,
                Step::Clock(700_000),
                Step::HealthCheck,
            ],
        ),
        (
            "4: jobs with new pids add nothing while the brake holds",
            1,
            (0..6)
                .flat_map(|i| {
                    [
                        xid(31, 1, 3000 + i),
                        Step::Prolog {
                            job: 10 + i,
                            gpus: vec![1],
                        },
                    ]
                })
                .chain([xid(79, 3, 2210), Step::HealthCheck])
                .collect(),
        ),
        (
            "issue 35/7: an Xid 31 held back by the brake, clock 2 h behind, then right",
            1,
            vec![
                Step::ClockSet(-2 * 3_600_000),
                xid(31, 1, 2212),
                Step::HealthCheck,
                Step::ClockSet(2 * 3_600_000),
                Step::Clock(60_000),
                Step::HealthCheck,
                Step::ClockSet(2 * 3_600_000),
                Step::Clock(60_000),
                Step::HealthCheck,
            ],
        ),
        (
            "8: two prologs at once on a faulty node",
            0,
            vec![xid(79, 3, 2210), Step::Concurrent],
        ),
    ];
    let mut failed = Vec::new();
    for (name, others_drained, steps) in cases {
        let mut w = World::new(others_drained);
        if let Err(e) = steps.iter().try_for_each(|s| w.apply(s)) {
            failed.push(format!("case {name}: {e}"));
            continue;
        }
        let faults = w.ledger().map_or(0, |l| l.faults.len());
        if name.starts_with('4') && faults != 2 {
            failed.push(format!("case {name}: {faults} ledger entries for 2 faults"));
        }
        if name.starts_with('8') && w.slurm.reason().is_none() {
            failed.push(format!("case {name}: not drained"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Issue 26 through the model: an Xid 79 drains and asks a reboot; the
/// reboot (a new boot id) clears it; back after two reboots it stays
/// drained for hardware inspection, no third reboot; a fault that needs
/// a person beside it gets no reboot.
#[test]
fn a_reboot_fault_is_rebooted_twice_then_inspected() {
    let xid = |code, gpu, pid| Step::Xid {
        code,
        gpu,
        pid,
        name: pid % 1000,
    };
    let mut w = World::new(0);
    for round in 1..=2usize {
        w.apply(&xid(79, 3, 2210)).unwrap();
        w.apply(&Step::HealthCheck).unwrap();
        let reason = w.slurm.reason().unwrap_or_default();
        assert!(reason.ends_with(" (reboot)"), "round {round}: {reason}");
        assert_eq!(w.slurm.reboots.lock().unwrap().len(), round);
        // A second look before the reboot asks nothing more.
        w.apply(&Step::HealthCheck).unwrap();
        assert_eq!(w.slurm.reboots.lock().unwrap().len(), round);
        w.apply(&Step::Reboot).unwrap();
        w.apply(&Step::HealthCheck).unwrap();
        assert_eq!(
            w.slurm.reason(),
            None,
            "round {round}: cleared by the reboot"
        );
        let l = w.ledger().unwrap();
        assert!(l.faults.iter().all(|f| f.rebooted()), "{l:?}");
        assert_eq!(l.reboots.len(), round);
    }
    w.apply(&xid(79, 3, 2211)).unwrap();
    w.apply(&Step::HealthCheck).unwrap();
    let reason = w.slurm.reason().unwrap_or_default();
    assert!(reason.ends_with(" (hardware inspection)"), "{reason}");
    assert_eq!(w.slurm.reboots.lock().unwrap().len(), 2);
    // A person's fault beside a reboot fault: drained, no reboot.
    let mut p = World::new(0);
    p.apply(&xid(48, 0, 2212)).unwrap();
    p.apply(&xid(79, 3, 2213)).unwrap();
    p.apply(&Step::HealthCheck).unwrap();
    let reason = p.slurm.reason().unwrap_or_default();
    assert!(reason.ends_with(" (drain)"), "{reason}");
    assert!(p.slurm.reboots.lock().unwrap().is_empty());
}
