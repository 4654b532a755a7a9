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
//!    held the drain back, never because Slurm failed.
//!
//! `PROPTEST_CASES` sets the number of cases (default 48).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpu_health_core::ids::NodeName;
use gpu_health_core::ledger::Ledger;
use gpu_health_core::ops::drain::SlurmCalls;
use gpu_health_core::process::RunError;
use gpu_health_core::records::JobMeta;
use gpu_health_core::run::{
    self, epilog, health_check, prolog, resume, JobEnv, RunContext, StateAccess,
};
use gpu_health_core::slurm::{NodeInfo, SlurmError};
use gpu_health_core::state::StateDir;
use gpu_health_core::xid::{Cursor, XidState};
use proptest::prelude::*;

/// GPUs of the h100x8 scenarios, by NVML index.
const PCI: [&str; 8] = [
    "0000:18:00",
    "0000:2a:00",
    "0000:3a:00",
    "0000:5d:00",
    "0000:9a:00",
    "0000:ab:00",
    "0000:ba:00",
    "0000:db:00",
];
const NODES: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlurmMode {
    Works,
    Fails,
    Hangs,
    UpdatesFail,
}

/// A kill: the process dies at the `at`-th Slurm call of the next run,
/// before or after slurmctld applied it.
#[derive(Debug, Clone, Copy)]
struct Kill {
    at: usize,
    applied: bool,
}

/// The model slurmctld: one partition, `n1` is the node under test.
struct ModelSlurm {
    reasons: Mutex<Vec<Option<String>>>,
    comments: Mutex<Vec<Option<String>>>,
    mode: Mutex<SlurmMode>,
    kill: Mutex<Option<Kill>>,
    calls: AtomicUsize,
    clock_ms: AtomicU64,
    resumes: AtomicUsize,
    /// Two runs at once: the brake's pause takes real time, so that they
    /// interleave as two processes would.
    concurrent: AtomicBool,
}

struct Killed;

impl ModelSlurm {
    fn new(others_drained: usize) -> ModelSlurm {
        let reasons = (0..NODES)
            .map(|i| {
                (i >= 1 && i <= others_drained)
                    .then(|| format!("gpu-health: Xid 48 GPU0 (drain) of n{}", i + 1))
            })
            .collect();
        ModelSlurm {
            reasons: Mutex::new(reasons),
            comments: Mutex::new(vec![None; NODES]),
            mode: Mutex::new(SlurmMode::Works),
            kill: Mutex::new(None),
            calls: AtomicUsize::new(0),
            clock_ms: AtomicU64::new(0),
            resumes: AtomicUsize::new(0),
            concurrent: AtomicBool::new(false),
        }
    }

    fn index(node: &NodeName) -> Option<usize> {
        node.as_str()
            .strip_prefix('n')?
            .parse::<usize>()
            .ok()?
            .checked_sub(1)
    }

    /// A call that changes something: fails by mode, dies at a kill.
    fn update(&self, node: &NodeName, apply: impl FnOnce(usize)) -> Result<(), SlurmError> {
        self.enter(true)?;
        let i = Self::index(node).ok_or_else(|| failed("no such node"))?;
        let call = self.calls.load(SeqCst);
        let kill = *self.kill.lock().unwrap();
        match kill {
            Some(k) if k.at == call && !k.applied => std::panic::panic_any(Killed),
            Some(k) if k.at == call => {
                apply(i);
                std::panic::panic_any(Killed)
            }
            _ => {
                apply(i);
                Ok(())
            }
        }
    }

    fn enter(&self, updates: bool) -> Result<(), SlurmError> {
        self.calls.fetch_add(1, SeqCst);
        let mode = *self.mode.lock().unwrap();
        match mode {
            SlurmMode::Works => Ok(()),
            SlurmMode::UpdatesFail if !updates => Ok(()),
            SlurmMode::Fails | SlurmMode::UpdatesFail => {
                Err(failed("Unable to contact slurm controller"))
            }
            SlurmMode::Hangs => Err(SlurmError::Run(RunError::Timeout {
                program: "scontrol".into(),
                ms: 2500,
            })),
        }
    }

    fn line(&self, i: usize) -> NodeInfo {
        let reason = self.reasons.lock().unwrap()[i].clone();
        let comment = self.comments.lock().unwrap()[i].clone();
        let mut l = format!(
            "NodeName=n{} Arch=x86_64 State={} Partitions=gpu",
            i + 1,
            if reason.is_some() {
                "IDLE+DRAIN"
            } else {
                "IDLE"
            }
        );
        if let Some(r) = reason {
            l.push_str(&format!(" Reason={r} [root@2026-12-01T00:00:00]"));
        }
        if let Some(c) = comment {
            l.push_str(&format!(" Comment={c}"));
        }
        NodeInfo::parse(&l).expect("a node line")
    }

    fn ours_drained(&self) -> usize {
        self.reasons
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.as_deref().is_some_and(|r| r.starts_with("gpu-health:")))
            .count()
    }

    fn reason(&self) -> Option<String> {
        self.reasons.lock().unwrap()[0].clone()
    }
}

fn failed(why: &str) -> SlurmError {
    SlurmError::Failed {
        program: "scontrol".into(),
        status: "exit status: 1".into(),
        stderr: why.into(),
    }
}

impl SlurmCalls for ModelSlurm {
    fn remaining(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn drain(&self, node: &NodeName, reason: &str, clear_claim: bool) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.reasons.lock().unwrap()[i] = Some(reason.to_string());
            if clear_claim {
                self.comments.lock().unwrap()[i] = None;
            }
        })
    }
    fn claim(&self, node: &NodeName, stamp_ms: u64, _: Duration) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.comments.lock().unwrap()[i] = Some(format!("gpu-health-claim:{stamp_ms}"));
        })
    }
    fn release_claim(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.update(node, |i| self.comments.lock().unwrap()[i] = None)
    }
    fn resume(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.reasons.lock().unwrap()[i] = None;
            self.resumes.fetch_add(1, SeqCst);
        })
    }
    fn show_nodes_leaving(
        &self,
        node: Option<&NodeName>,
        _: Duration,
    ) -> Result<Vec<NodeInfo>, SlurmError> {
        self.enter(false)?;
        Ok(match node {
            Some(n) => Self::index(n).map(|i| self.line(i)).into_iter().collect(),
            None => (0..NODES).map(|i| self.line(i)).collect(),
        })
    }
    fn pause(&self, wait: Duration) {
        if self.concurrent.load(SeqCst) {
            std::thread::sleep(wait);
        }
        self.clock_ms.fetch_add(wait.as_millis() as u64, SeqCst);
    }
    fn now_ms(&self) -> u64 {
        // Two runs at once stamp their claims apart, as two processes.
        self.clock_ms.fetch_add(1, SeqCst)
    }
}

#[derive(Debug, Clone)]
enum Step {
    Xid {
        code: u32,
        gpu: usize,
        pid: u32,
        name: u32,
    },
    Nvml(&'static str),
    Prolog {
        job: u32,
        gpus: Vec<u32>,
    },
    Epilog,
    HealthCheck,
    AdminResume {
        forget: bool,
    },
    AdminScontrolResume,
    Slurm(SlurmMode),
    ConfigTypo(bool),
    Clock(i64),
    Kill(Kill),
    TurnTaken,
    /// Two prologs of the node at once: the second starts while the
    /// first waits in the brake's pause.
    Concurrent,
}

fn step() -> impl Strategy<Value = Step> {
    let codes = vec![79u32, 48, 31, 31, 13];
    let modes = vec![
        SlurmMode::Works,
        SlurmMode::Works,
        SlurmMode::Fails,
        SlurmMode::Hangs,
        SlurmMode::UpdatesFail,
    ];
    let jumps = vec![
        60_000i64,
        700_000,
        700_000,
        3_600_000,
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
        3 => prop::sample::select(jumps).prop_map(Step::Clock),
        1 => (1..6usize, any::<bool>()).prop_map(|(at, applied)| Step::Kill(Kill { at, applied })),
        1 => Just(Step::TurnTaken),
        1 => Just(Step::Concurrent),
    ]
}

/// One injected kernel-log Xid and whether it is still owed.
struct Injected {
    code: u32,
    gpu: u32,
    end_offset: u64,
    owed: bool,
}

struct World {
    dir: tempfile::TempDir,
    slurm: Arc<ModelSlurm>,
    now_ms: u64,
    typo: bool,
    injected: Vec<Injected>,
    /// Texts only users chose (pids and process names).
    user_texts: Vec<String>,
    kill: Option<Kill>,
    job_running: Option<(u32, Vec<u32>)>,
    others_drained: usize,
}

impl World {
    fn new(others_drained: usize) -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::copy(
            gpu_health_testkit::sim_library(),
            dir.path().join("lib/libnvidia-ml.so.1"),
        )
        .unwrap();
        std::fs::write(dir.path().join("kernel.log"), "").unwrap();
        std::fs::create_dir(dir.path().join("sys")).unwrap();
        let w = World {
            dir,
            slurm: Arc::new(ModelSlurm::new(others_drained)),
            now_ms: 1_800_000_000_000,
            typo: false,
            injected: Vec::new(),
            user_texts: Vec::new(),
            kill: None,
            job_running: None,
            others_drained,
        };
        w.set_nvml("h100x8-healthy");
        w.write_config();
        w
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn set_nvml(&self, scenario: &str) {
        std::fs::copy(
            gpu_health_testkit::scenario(scenario),
            self.path("lib/scenario.json"),
        )
        .unwrap();
    }

    fn write_config(&self) {
        let main = format!(
            "nvml_library = {:?}\nkernel_log = {:?}\nstate_dir = {:?}\nsysfs_root = {:?}\n\
             scontrol = \"/nonexistent/scontrol\"\nnvml_deadline_ms = 3000\nexpected_gpus = 8\n\
             scontrol_timeout_ms = 700\n[recovery]\nquiet_time_s = 600\n\
             [brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\n",
            self.path("lib/libnvidia-ml.so.1"),
            self.path("kernel.log"),
            self.path("state"),
            self.path("sys"),
        );
        std::fs::write(self.path("gpu-health.toml"), main).unwrap();
        std::fs::create_dir_all(self.path("gpu-health.d")).unwrap();
        let dropin = if self.typo {
            "nvml_deadine_ms = 5\n"
        } else {
            ""
        };
        std::fs::write(self.path("gpu-health.d/n1.toml"), dropin).unwrap();
    }

    fn ctx(&self) -> RunContext {
        self.slurm.clock_ms.store(self.now_ms, SeqCst);
        model_ctx(&self.path("gpu-health.toml"), &self.slurm, self.now_ms)
    }

    fn ledger(&self) -> Option<Ledger> {
        StateDir::open(&self.path("state"))
            .load::<Ledger>(())
            .ok()
            .flatten()
    }

    fn cursor_offset(&self) -> u64 {
        match StateDir::open(&self.path("state")).load::<XidState>(()) {
            Ok(Some(XidState {
                cursor: Some(Cursor::File { offset, .. }),
                ..
            })) => offset,
            _ => 0,
        }
    }

    /// Run `f` as a process of its own would: a kill ends it where it is.
    fn run<T>(&mut self, f: impl FnOnce(&RunContext) -> T) -> Option<T> {
        let ctx = self.ctx();
        self.slurm.calls.store(0, SeqCst);
        *self.slurm.kill.lock().unwrap() = self.kill.take();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ctx)));
        *self.slurm.kill.lock().unwrap() = None;
        match out {
            Ok(v) => Some(v),
            Err(p) if p.is::<Killed>() => None,
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    fn apply(&mut self, s: &Step) -> Result<(), TestCaseError> {
        match s {
            Step::Xid {
                code,
                gpu,
                pid,
                name,
            } => {
                let proc_name = format!("usr{name:03}x");
                let line = format!(
                    "[ {}.000000] NVRM: Xid (PCI:{}): {code}, pid={pid}, name={proc_name}, injected\n",
                    1000 + self.injected.len(),
                    PCI[*gpu]
                );
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(self.path("kernel.log"))
                    .unwrap();
                f.write_all(line.as_bytes()).unwrap();
                let end = std::fs::metadata(self.path("kernel.log")).unwrap().len();
                self.user_texts.push(format!("pid={pid}"));
                self.user_texts.push(format!("{pid}"));
                self.user_texts.push(proc_name);
                self.injected.push(Injected {
                    code: *code,
                    gpu: *gpu as u32,
                    end_offset: end,
                    owed: matches!(code, 79 | 48),
                });
            }
            Step::Nvml(s) => self.set_nvml(s),
            Step::Prolog { job, gpus } => self.prolog(*job, gpus, false)?,
            Step::TurnTaken => {
                // Another run of the node holds its turn the whole time.
                let ctx = self.ctx();
                let held = ctx.state.lock_run(Duration::ZERO).unwrap();
                let job = 5000 + self.injected.len() as u32;
                let r = self.prolog(job, &[0], true);
                drop(held);
                r?;
            }
            Step::Concurrent => self.concurrent()?,
            Step::Epilog => {
                if let Some((job, gpus)) = self.job_running.take() {
                    let env = job_env(job, &gpus);
                    self.run(|ctx| {
                        let j = JobEnv::from_env(&env);
                        epilog::run(ctx, &j, &JobMeta::from_env(&env))
                    });
                }
            }
            Step::HealthCheck => {
                let before = self.slurm.resumes.load(SeqCst);
                let owed_drain = self.injected.iter().any(|e| e.owed);
                self.run(|ctx| run::guarded("hc", (), || drop(health_check::run(ctx))));
                if self.slurm.resumes.load(SeqCst) > before {
                    prop_assert!(
                        !owed_drain,
                        "returned by itself with an open drain fault: {:?}",
                        self.ledger()
                    );
                }
            }
            Step::AdminResume { forget } => {
                let drained = self.slurm.reason().is_some();
                let out = self.run(|ctx| {
                    let me = NodeName::parse("n1").unwrap();
                    resume::run(ctx, &me, false, *forget)
                });
                if let Some(out) = out {
                    let done = matches!(out, resume::ResumeOutcome::Resumed(_))
                        || matches!(
                            out,
                            resume::ResumeOutcome::NotDrained {
                                forgotten: true,
                                ..
                            }
                        );
                    if done || (drained && self.slurm.reason().is_none()) {
                        // The admin answered everything read so far.
                        let cursor = self.cursor_offset();
                        for e in &mut self.injected {
                            if e.end_offset <= cursor {
                                e.owed = false;
                            }
                        }
                    }
                }
            }
            Step::AdminScontrolResume => {
                // The faults gpu-health drained for are answered by it.
                if self
                    .slurm
                    .reason()
                    .is_some_and(|r| r.starts_with("gpu-health:"))
                {
                    let ledger = self.ledger();
                    for e in &mut self.injected {
                        let drained = ledger.as_ref().is_some_and(|l| {
                            l.faults.iter().any(|f| {
                                f.id.check == "xid"
                                    && f.id.code == Some(e.code)
                                    && f.id.gpu.is_none_or(|g| g == e.gpu)
                                    && f.drained()
                            })
                        });
                        if drained {
                            e.owed = false;
                        }
                    }
                }
                self.slurm.reasons.lock().unwrap()[0] = None;
            }
            Step::Slurm(m) => *self.slurm.mode.lock().unwrap() = *m,
            Step::ConfigTypo(t) => {
                self.typo = *t;
                self.write_config();
            }
            Step::Clock(d) => {
                self.now_ms = self.now_ms.saturating_add_signed(*d);
            }
            Step::Kill(k) => self.kill = Some(*k),
        }
        self.check()
    }

    fn prolog(&mut self, job: u32, gpus: &[u32], turn_taken: bool) -> Result<(), TestCaseError> {
        let env = job_env(job, gpus);
        let mode = *self.slurm.mode.lock().unwrap();
        let code =
            self.run(|ctx| run::guarded("prolog", 0, || prolog::run(ctx, &JobEnv::from_env(&env))));
        let verdict = std::fs::read_to_string(self.path(&format!("state/jobs/{job}.json")))
            .unwrap_or_default();
        for t in &self.user_texts {
            prop_assert!(
                !verdict.contains(t.as_str()),
                "verdict of job {job} holds {t:?}: {verdict}"
            );
        }
        if code == Some(0) {
            self.job_running = Some((job, gpus.to_vec()));
            let ledger = self.ledger();
            let open_drain = ledger
                .as_ref()
                .is_some_and(|l| l.faults.iter().any(|f| !f.drained()));
            if open_drain && !self.typo && !turn_taken {
                let cause = ledger.and_then(|l| l.held).map(|h| h.cause);
                prop_assert!(
                    mode == SlurmMode::Works
                        || !matches!(
                            cause,
                            Some(gpu_health_core::ledger::PendingCause::SlurmFailed)
                        ),
                    "job {job} started beside a fault because Slurm failed ({mode:?}, {cause:?})"
                );
            }
        }
        Ok(())
    }

    fn concurrent(&mut self) -> Result<(), TestCaseError> {
        let config = self.path("gpu-health.toml");
        let (slurm, now) = (self.slurm.clone(), self.now_ms);
        self.slurm.clock_ms.store(now, SeqCst);
        self.slurm.concurrent.store(true, SeqCst);
        let prolog_of = move |job: u32, gpu: u32| {
            let (config, slurm) = (config.clone(), slurm.clone());
            std::thread::spawn(move || {
                let env = job_env(job, &[gpu]);
                let ctx = model_ctx(&config, &slurm, now);
                run::guarded("prolog", 0, || prolog::run(&ctx, &JobEnv::from_env(&env)))
            })
        };
        let (a, b) = (prolog_of(7000, 0), prolog_of(7001, 1));
        let codes = (a.join().unwrap_or(-1), b.join().unwrap_or(-1));
        self.slurm.concurrent.store(false, SeqCst);
        // A drain the brake allows, with Slurm and the configuration fine,
        // and a fault the ledger or the log holds: the node ends drained
        // and neither job starts.
        let faulty = self.ledger().is_some_and(|l| !l.faults.is_empty());
        let mode = *self.slurm.mode.lock().unwrap();
        if faulty && self.others_drained == 0 && mode == SlurmMode::Works && !self.typo {
            prop_assert!(
                self.slurm.reason().is_some(),
                "two prologs at once left a faulty node in service: {:?}",
                self.ledger()
            );
            prop_assert_eq!(codes, (1, 1), "a job started on the faulty node");
        }
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let ledger = self.ledger();
        // 1. Never lost.
        let cursor = self.cursor_offset();
        for e in self
            .injected
            .iter()
            .filter(|e| e.owed && e.end_offset <= cursor)
        {
            let held = ledger.as_ref().is_some_and(|l| {
                l.faults.iter().any(|f| {
                    f.id.check == "xid"
                        && f.id.code == Some(e.code)
                        && f.id.gpu.is_none_or(|g| g == e.gpu)
                })
            });
            prop_assert!(
                held,
                "Xid {} on GPU{} was read (cursor {cursor} >= {}) but the ledger does not hold it: {ledger:?}",
                e.code,
                e.gpu,
                e.end_offset
            );
        }
        // 3. The brake's bound (10 nodes, 10%: one).
        prop_assert!(self.slurm.ours_drained() <= 1.max(self.others_drained));
        if self.others_drained >= 1 {
            let ours = self
                .slurm
                .reason()
                .is_some_and(|r| r.starts_with("gpu-health: ") && !r.contains("of n"));
            prop_assert!(!ours, "drained past the brake: {:?}", self.slurm.reason());
        }
        // 4. Caps.
        for entry in walk(&self.path("state")) {
            let len = std::fs::metadata(&entry).map(|m| m.len()).unwrap_or(0);
            let cap = if entry.ends_with("ledger.json") {
                1 << 20
            } else {
                4 << 20
            };
            prop_assert!(len <= cap, "{} has {len} bytes", entry.display());
        }
        // 5. User text: nowhere in the ledger or a reason; one fault per
        //    GPU and code.
        let text = std::fs::read_to_string(self.path("state/ledger.json")).unwrap_or_default();
        let reasons: Vec<String> = self
            .slurm
            .reasons
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .cloned()
            .collect();
        for t in &self.user_texts {
            prop_assert!(!text.contains(t.as_str()), "the ledger holds {t:?}: {text}");
            prop_assert!(
                reasons.iter().all(|r| !r.contains(t.as_str())),
                "a reason holds {t:?}: {reasons:?}"
            );
        }
        if let Some(l) = &ledger {
            let mut ids: Vec<_> = l.faults.iter().map(|f| f.id.clone()).collect();
            ids.sort();
            let n = ids.len();
            ids.dedup();
            prop_assert_eq!(ids.len(), n, "two entries for one fault");
        }
        Ok(())
    }
}

fn model_ctx(config: &Path, slurm: &Arc<ModelSlurm>, now_ms: u64) -> RunContext {
    let env = |k: &str| (k == "SLURMD_NODENAME").then(|| "n1".to_string());
    let mut ctx = RunContext::start(env, Some(config), StateAccess::Write);
    ctx.now_ms = now_ms;
    ctx.slurm = Some(slurm.clone());
    ctx
}

fn job_env(job: u32, gpus: &[u32]) -> impl Fn(&str) -> Option<String> {
    let gpus = gpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    move |k: &str| match k {
        "SLURM_JOB_ID" => Some(job.to_string()),
        "SLURM_JOB_GPUS" => Some(gpus.clone()),
        "SLURMD_NODENAME" => Some("n1".into()),
        _ => None,
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
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
        for s in &steps {
            w.apply(s)?;
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
