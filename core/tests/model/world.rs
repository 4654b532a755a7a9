//! The model node of the ledger's model test: its kernel log, NVML
//! scenario, configuration and clock, the steps that change them, and the
//! checks after every step.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

use gpu_health_core::finding::Remedy;
use gpu_health_core::ids::NodeName;
use gpu_health_core::ledger::Ledger;
use gpu_health_core::records::JobMeta;
use gpu_health_core::run::{
    self, epilog, health_check, prolog, resume, JobEnv, RunContext, StateAccess,
};
use gpu_health_core::state::StateDir;
use gpu_health_core::xid::{Cursor, XidState};
use proptest::prelude::*;

use super::slurm::{Kill, Killed, ModelSlurm, SlurmMode};
use super::PCI;

#[derive(Debug, Clone)]
pub enum Step {
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
    /// Time passes (the wall clock and the boot clock alike; negative,
    /// the wall clock alone is set back).
    Clock(i64),
    /// The wall clock is set (stepped back or forward); the boot clock
    /// goes on.
    ClockSet(i64),
    Kill(Kill),
    TurnTaken,
    /// Two prologs of the node at once: the second starts while the
    /// first waits in the brake's pause.
    Concurrent,
    /// Slurm carries out the reboot gpu-health asked for (if any): a new
    /// boot id, the node back in service (`nextstate=RESUME`).
    Reboot,
}

/// One injected kernel-log Xid and whether it is still owed.
pub struct Injected {
    pub code: u32,
    pub gpu: u32,
    pub end_offset: u64,
    pub owed: bool,
    /// A `drain-until-clean` Xid read by a run with a good configuration:
    /// the boot (count) and boot clock when it was read. Its fault stands
    /// for at least the quiet time after that, on the boot clock, unless
    /// a person resumed the node or it rebooted.
    pub read_at: Option<(u32, u64)>,
    /// A person answered it (or a broken configuration judged it): no
    /// longer tracked for its quiet time.
    pub waived: bool,
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub slurm: Arc<ModelSlurm>,
    pub now_ms: u64,
    /// `CLOCK_BOOTTIME` ms of the node (no one sets it; a boot restarts it).
    pub boot_ms: u64,
    pub typo: bool,
    pub injected: Vec<Injected>,
    /// Texts only users chose (pids and process names).
    pub user_texts: Vec<String>,
    pub kill: Option<Kill>,
    pub job_running: Option<(u32, Vec<u32>)>,
    pub others_drained: usize,
    /// Boots so far (the boot id is `boot-<n>`).
    pub boots: u32,
}

impl World {
    pub fn new(others_drained: usize) -> World {
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
            boot_ms: 300_000,
            typo: false,
            injected: Vec::new(),
            user_texts: Vec::new(),
            kill: None,
            job_running: None,
            others_drained,
            boots: 0,
        };
        std::fs::write(w.path("boot_id"), "boot-0\n").unwrap();
        w.set_nvml("h100x8-healthy");
        w.write_config();
        w
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn set_nvml(&self, scenario: &str) {
        std::fs::copy(
            gpu_health_testkit::scenario(scenario),
            self.path("lib/scenario.json"),
        )
        .unwrap();
    }

    pub fn write_config(&self) {
        let main = format!(
            "nvml_library = {:?}\nkernel_log = {:?}\nstate_dir = {:?}\nsysfs_root = {:?}\n\
             scontrol = \"/nonexistent/scontrol\"\nnvml_deadline_ms = 3000\nexpected_gpus = 8\n\
             scontrol_timeout_ms = 700\n[recovery]\nquiet_time_s = 600\n\
             [brake]\nclaim_timeout_ms = 200\nsettle_ms = 100\n\
             [remediation]\nreboot = true\n[xid]\nboot_id_path = {:?}\n",
            self.path("lib/libnvidia-ml.so.1"),
            self.path("kernel.log"),
            self.path("state"),
            self.path("sys"),
            self.path("boot_id"),
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

    pub fn ctx(&self) -> RunContext {
        self.slurm.clock_ms.store(self.now_ms, SeqCst);
        let ctx = model_ctx(&self.path("gpu-health.toml"), &self.slurm, self.now_ms);
        with_boot_clock(ctx, self.boot_ms)
    }

    pub fn ledger(&self) -> Option<Ledger> {
        StateDir::open(&self.path("state"))
            .load::<Ledger>(())
            .ok()
            .flatten()
    }

    pub fn cursor_offset(&self) -> u64 {
        match StateDir::open(&self.path("state")).load::<XidState>(()) {
            Ok(Some(XidState {
                cursor: Some(Cursor::File { offset, .. }),
                ..
            })) => offset,
            _ => 0,
        }
    }

    /// Run `f` as a process of its own would: a kill ends it where it is.
    pub fn run<T>(&mut self, f: impl FnOnce(&RunContext) -> T) -> Option<T> {
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

    pub fn apply(&mut self, s: &Step) -> Result<(), TestCaseError> {
        let reboots_before = self.slurm.reboots.lock().unwrap().len();
        self.apply_step(s)?;
        // 7. A reboot is asked only for faults a reboot clears.
        let asked = self.slurm.reboots.lock().unwrap().len() > reboots_before;
        if let (true, Some(l)) = (asked && !matches!(s, Step::Concurrent), self.ledger()) {
            if l.reboot_asked.is_some() {
                prop_assert!(
                    l.open_faults().all(|f| f.remedy == Remedy::Reboot),
                    "a reboot asked beside a fault that needs a person: {l:?}"
                );
            }
        }
        Ok(())
    }

    fn apply_step(&mut self, s: &Step) -> Result<(), TestCaseError> {
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
                    read_at: None,
                    waived: false,
                });
            }
            Step::Nvml(s) => self.set_nvml(s),
            Step::Prolog { job, gpus } => self.prolog(*job, gpus, false)?,
            Step::TurnTaken => {
                // Another run of the node holds its turn the whole time.
                // Not without waiting: a process the other test of this
                // binary forks shares the lock's open file until it
                // execs, so the lock can be busy for a moment after the
                // last run let it go.
                let ctx = self.ctx();
                let held = ctx
                    .state
                    .lock_run(Duration::from_secs(2), &ctx.config().run_lock_dir)
                    .unwrap();
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
                // (An admin cancels a pending reboot to resume now.)
                self.slurm.rebooting.lock().unwrap()[0] = false;
            }
            Step::Slurm(m) => *self.slurm.mode.lock().unwrap() = *m,
            Step::ConfigTypo(t) => {
                self.typo = *t;
                self.write_config();
            }
            Step::Clock(d) => {
                self.now_ms = self.now_ms.saturating_add_signed(*d);
                // (Time does not run back: a negative one is a step.)
                self.boot_ms = self.boot_ms.saturating_add((*d).max(0) as u64);
            }
            Step::ClockSet(d) => {
                self.now_ms = self.now_ms.saturating_add_signed(*d);
            }
            Step::Kill(k) => self.kill = Some(*k),
            Step::Reboot => self.reboot(),
        }
        self.note_quiet_faults(s);
        self.check()
    }

    pub fn prolog(
        &mut self,
        job: u32,
        gpus: &[u32],
        turn_taken: bool,
    ) -> Result<(), TestCaseError> {
        let env = job_env(job, gpus);
        let mode = *self.slurm.mode.lock().unwrap();
        let code =
            self.run(|ctx| run::guarded("prolog", 0, || prolog::run(ctx, &JobEnv::from_env(&env))));
        let verdict = std::fs::read_to_string(self.path(&format!("state/jobs/{job}.json")))
            .unwrap_or_default();
        for t in &self.user_texts {
            prop_assert!(
                !holds_text(&verdict, t),
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

    pub fn concurrent(&mut self) -> Result<(), TestCaseError> {
        let config = self.path("gpu-health.toml");
        let (slurm, now, boot_ms) = (self.slurm.clone(), self.now_ms, self.boot_ms);
        self.slurm.clock_ms.store(now, SeqCst);
        self.slurm.concurrent.store(true, SeqCst);
        let prolog_of = move |job: u32, gpu: u32| {
            let (config, slurm) = (config.clone(), slurm.clone());
            std::thread::spawn(move || {
                let env = job_env(job, &[gpu]);
                let ctx = with_boot_clock(model_ctx(&config, &slurm, now), boot_ms);
                run::guarded("prolog", 0, || prolog::run(&ctx, &JobEnv::from_env(&env)))
            })
        };
        let (a, b) = (prolog_of(7000, 0), prolog_of(7001, 1));
        let codes = (a.join().unwrap_or(-1), b.join().unwrap_or(-1));
        self.slurm.concurrent.store(false, SeqCst);
        // A drain the brake allows, with Slurm and the configuration fine,
        // and a fault the ledger or the log holds: the node ends drained
        // and neither job starts.
        // A fault a reboot cleared stays written down for its quiet time
        // (its reboots counted) but no longer stands against the node.
        let faulty = self
            .ledger()
            .is_some_and(|l| l.open_faults().next().is_some());
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

    /// Slurm reboots n1 when a reboot is pending: the faults the ledger
    /// holds as drained are answered by the reboot (found again, they
    /// count again).
    fn reboot(&mut self) {
        if !std::mem::take(&mut self.slurm.rebooting.lock().unwrap()[0]) {
            return;
        }
        self.boots += 1;
        self.boot_ms = 30_000;
        std::fs::write(self.path("boot_id"), format!("boot-{}\n", self.boots)).unwrap();
        // (A fault that needs a person, found after the reboot was asked,
        // gives the reason its kind; the ledger drains it again after.)
        let reason = self.slurm.reasons.lock().unwrap()[0].take();
        assert!(
            reason
                .as_deref()
                .is_some_and(|r| r.starts_with("gpu-health: ")),
            "a reboot of a node gpu-health did not drain: {reason:?}"
        );
        let Some(ledger) = self.ledger() else { return };
        let cursor = self.cursor_offset();
        for e in &mut self.injected {
            let kind = format!("Xid {}", e.code);
            let answered = match &ledger.reboot_asked {
                // The kinds it was asked for; the ledger drains the
                // others again after the reboot.
                Some(r) => r.kinds.contains(&kind),
                // A run killed between the ask and its commit: the node
                // comes back in service as after an admin's resume.
                None => ledger
                    .faults
                    .iter()
                    .any(|f| f.id.kind() == kind && f.drained()),
            };
            if e.end_offset <= cursor && answered {
                e.owed = false;
            }
        }
    }

    /// Which Xid 31s a run has read now (the quiet time of each starts
    /// on the boot clock), and which a person answered.
    fn note_quiet_faults(&mut self, s: &Step) {
        let answered = matches!(
            s,
            Step::AdminResume { .. } | Step::AdminScontrolResume | Step::ConfigTypo(true)
        );
        let cursor = self.cursor_offset();
        let now = (self.boots, self.boot_ms);
        for e in self.injected.iter_mut().filter(|e| e.code == 31) {
            if answered || (self.typo && e.read_at.is_none()) {
                e.waived = true;
            }
            if !e.waived && e.read_at.is_none() && e.end_offset <= cursor {
                e.read_at = Some(now);
            }
        }
    }

    pub fn check(&self) -> Result<(), TestCaseError> {
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
        // 8. A `drain-until-clean` fault read in this boot stands for the
        //    quiet time after it on the boot clock, whatever the wall
        //    clock did (600 s in this configuration).
        for e in self.injected.iter().filter(|e| !e.waived) {
            let Some((boot, at)) = e.read_at else {
                continue;
            };
            if boot != self.boots || self.boot_ms.saturating_sub(at) >= 600_000 {
                continue;
            }
            let held = ledger.as_ref().is_some_and(|l| {
                l.faults.iter().any(|f| {
                    f.id.check == "xid"
                        && f.id.code == Some(e.code)
                        && f.id.gpu.is_none_or(|g| g == e.gpu)
                })
            });
            prop_assert!(
                held,
                "Xid {} on GPU{} read {} s ago on the boot clock is gone from the ledger: {ledger:?}",
                e.code,
                e.gpu,
                (self.boot_ms - at) / 1000
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
            prop_assert!(!holds_text(&text, t), "the ledger holds {t:?}: {text}");
            prop_assert!(
                reasons.iter().all(|r| !holds_text(r, t)),
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

pub fn model_ctx(config: &Path, slurm: &Arc<ModelSlurm>, now_ms: u64) -> RunContext {
    let env = |k: &str| (k == "SLURMD_NODENAME").then(|| "n1".to_string());
    let mut ctx = RunContext::start(env, Some(config), StateAccess::Write);
    ctx.now_ms = now_ms;
    ctx.slurm = Some(slurm.clone());
    ctx
}

/// The run's boot clock, as the node's kernel would give it.
pub fn with_boot_clock(mut ctx: RunContext, boot_ms: u64) -> RunContext {
    ctx.boot_ms = Some(boot_ms);
    ctx
}

pub fn job_env(job: u32, gpus: &[u32]) -> impl Fn(&str) -> Option<String> {
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

pub fn walk(dir: &Path) -> Vec<PathBuf> {
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

/// Whether `hay` holds the user's text `t`; a number only as a whole
/// number (a pid of 684676 is not in the timestamp 1768467600000).
fn holds_text(hay: &str, t: &str) -> bool {
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return hay.contains(t);
    }
    hay.match_indices(t).any(|(i, _)| {
        let before = hay[..i].bytes().next_back();
        let after = hay[i + t.len()..].bytes().next();
        !before.is_some_and(|b| b.is_ascii_digit()) && !after.is_some_and(|b| b.is_ascii_digit())
    })
}

#[test]
fn a_pid_is_found_as_a_whole_number_only() {
    assert!(!holds_text(r#"{"last_ms":1768467600000}"#, "684676"));
    assert!(holds_text("pid 684676 (python3)", "684676"));
    assert!(holds_text("684676", "684676"));
    assert!(holds_text("name=usr001x", "usr001x"));
}
