//! Step side (slurmstepd): the NCCL environment in init_post_opt, the
//! strict/warn and TP checks in task_init_privileged, the near-OOM notice
//! when the node's last task of the step has exited (task_exit: the one
//! exit-time callback whose messages reach the step's output, for srun
//! and batch steps alike; docs/spank.md).
//!
//! init_post_opt must always succeed (a failure there drains the node), so
//! it only sets variables and remembers what the task callbacks need: the
//! core's start of the step side (`run::step::StepStart`: node name,
//! configuration, the state directory opened for reading, never created);
//! the root-only state files are read in task_init_privileged, whose
//! failure fails the step without draining.
//!
//! This file owns the context's state: [`StepSetup`], set once per
//! slurmstepd, and the count of exited tasks.

use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use gpu_health_core::ids::JobId;
use gpu_health_core::run::step::StepStart;
use gpu_health_core::topology::check_node_groups;
use gpu_health_core::verdict::Mode;

use crate::env_marker::{should_write, SetByPlugin, MARKER};
use crate::nccl_setup::nccl_for_step;
use crate::options::{nccl_debug_file, read_lenient, JobOptions};
use crate::spank::{self, SetEnv, Spank};
use crate::step_checks::{
    health_report, job_gpus, long_enough_for_notice, read_topology, read_verdict, step_end_gpus,
    tp_report, MIN_STEP_MS_FOR_NOTICE,
};
use gpu_health_core::plugstack::PluginArgs;
use gpu_health_core::run::step_end::gpu_list;
use gpu_health_core::text::printable;

/// What init_post_opt learned, for the task callbacks: set once per
/// slurmstepd, inherited by the forked task processes.
static STEP: OnceLock<StepSetup> = OnceLock::new();

/// Tasks of this step on this node that have exited (task_exit runs in
/// slurmstepd itself, once per task).
static TASKS_EXITED: AtomicU32 = AtomicU32::new(0);

/// Step ids at or above this are Slurm's special steps (batch script,
/// extern, interactive): no srun task layout to check there.
const FIRST_SPECIAL_STEP_ID: u32 = 0xffff_fff0;

/// What init_post_opt learned for the task callbacks.
pub struct StepSetup {
    pub opts: JobOptions,
    /// Node, configuration (`%n` expanded as for the prolog), state
    /// directory and start time, from the core.
    pub start: StepStart,
    pub job_id: Option<JobId>,
    pub step_id: Option<u32>,
    /// plugstack.conf's `config=`, passed on to `gpu-health step-end`.
    pub config_arg: Option<PathBuf>,
}

/// init_post_opt in slurmstepd. Never fails (a failure there drains the
/// node). `process_env` is slurmstepd's own environment.
pub fn init_post_opt(
    spank: &Spank,
    args: &PluginArgs,
    process_env: impl Fn(&str) -> Option<String>,
) {
    let setup = setup_step(spank, args, process_env);
    if STEP.set(setup).is_err() {
        spank::verbose(
            "gpu-health: init_post_opt ran twice in one slurmstepd; the first setup stays",
        );
    }
}

/// task_init_privileged, in the task's forked process: see [`check_task`].
pub fn task_init_privileged(spank: &Spank) -> c_int {
    match STEP.get() {
        Some(setup) => check_task(spank, setup),
        None => 0,
    }
}

/// Once per task, in slurmstepd after the task has exited. The node's last
/// task ends the step here: its messages still reach the step's output.
pub fn task_exit(spank: &Spank) {
    let exited = TASKS_EXITED
        .fetch_add(1, Ordering::Relaxed)
        .saturating_add(1);
    if exited != spank.local_task_count().unwrap_or(1) {
        return;
    }
    if let Some(setup) = STEP.get() {
        end_step(spank, setup);
    }
}

fn setup_step(
    spank: &Spank,
    args: &PluginArgs,
    process_env: impl Fn(&str) -> Option<String>,
) -> StepSetup {
    let (opts, notes) = read_lenient(&super::option_values(), args);
    for n in notes {
        spank::error(&format!("gpu-health: {n}"));
    }
    let start = StepStart::start(process_env, |k| spank.getenv(k), args.config.as_deref());
    for line in &start.notes {
        spank::error(line);
    }
    let sysfs_root = args
        .sysfs_root
        .clone()
        .unwrap_or_else(|| start.config().sysfs_root.clone());
    let mut env = EnvWriter::new(spank, args);
    set_nccl_env(&mut env, &sysfs_root, args);
    if let Some(level) = &opts.nccl_debug {
        env.set("NCCL_DEBUG", level);
    }
    env.finish();
    StepSetup {
        opts,
        start,
        job_id: spank.job_id().map(JobId::from),
        step_id: spank.step_id(),
        config_arg: args.config.clone(),
    }
}

fn set_nccl_env(env: &mut EnvWriter, sysfs_root: &Path, args: &PluginArgs) {
    let step = nccl_for_step(sysfs_root, &args.nccl);
    if let Some(why) = &step.unreadable {
        spank::error(&format!("gpu-health: {why}"));
    }
    // Ports left out for what sysfs held: the admin's to fix, not the
    // job's, so slurmd's log only.
    for p in &step.problems {
        spank::info(&format!("gpu-health: {p}"));
    }
    for note in &step.notes {
        spank::verbose(&format!("gpu-health: {note}"));
    }
    for (name, value) in &step.vars {
        env.set(name, value);
    }
}

/// Writes the job's variables: never over the user's value (unless the
/// admin forces it), always over the plugin's own from an earlier step
/// (the batch step's values are the batch node's, not this node's).
struct EnvWriter<'a> {
    spank: &'a Spank,
    force: &'a [String],
    earlier: SetByPlugin,
    now: SetByPlugin,
}

impl<'a> EnvWriter<'a> {
    fn new(spank: &'a Spank, args: &'a PluginArgs) -> Self {
        EnvWriter {
            spank,
            force: &args.nccl_force,
            earlier: SetByPlugin::parse(spank.getenv(MARKER).as_deref()),
            now: SetByPlugin::default(),
        }
    }

    fn set(&mut self, name: &str, value: &str) {
        let current = self.spank.getenv(name);
        let forced = self.force.iter().any(|n| n == name);
        if !should_write(current.as_deref(), name, forced, &self.earlier) {
            spank::verbose(&format!("gpu-health: {name} kept as the user set it"));
            return;
        }
        // A value that cannot be read here (not UTF-8, or 1 MiB or more)
        // reads as unset: only overwrite what was read, so that Slurm's
        // "already set" keeps such a value as the user's.
        let overwrite = forced || current.is_some();
        match self.spank.setenv(name, value, overwrite) {
            SetEnv::Set => {
                spank::verbose(&format!("gpu-health: {name}={value}"));
                self.now.record(name, value);
            }
            SetEnv::KeptUsers => {
                spank::verbose(&format!("gpu-health: {name} kept as the user set it"));
            }
            SetEnv::Failed(code) => spank::error(&format!(
                "gpu-health: cannot set {name}: {}",
                spank::strerror(code)
            )),
        }
    }

    /// Drop the earlier step's variables this node does not derive, and
    /// record what this step set.
    fn finish(self) {
        for name in self.earlier.names() {
            if self.now.names().any(|n| n == name) {
                continue;
            }
            let ours = self
                .spank
                .getenv(name)
                .is_some_and(|cur| self.earlier.is_plugins(name, &cur));
            if ours {
                let _ = self.spank.unsetenv(name);
            }
        }
        let result = if self.now.is_empty() {
            self.spank.unsetenv(MARKER)
        } else if self.spank.setenv(MARKER, &self.now.render(), true) == SetEnv::Set {
            Ok(())
        } else {
            Err(0)
        };
        if result.is_err() {
            spank::verbose("gpu-health: cannot record the variables set");
        }
    }
}

/// task_init_privileged: per-task NCCL_DEBUG_FILE, then the verdict and TP
/// checks. Non-zero refuses the step (every task fails; task 0 explains).
fn check_task(spank: &Spank, setup: &StepSetup) -> c_int {
    if setup.opts.nccl_debug.is_some() {
        // Tasks are forked in the job's working directory.
        let cwd = std::env::current_dir().ok();
        let file = nccl_debug_file(cwd.as_deref());
        if let SetEnv::Failed(code) = spank.setenv("NCCL_DEBUG_FILE", &file, false) {
            spank::error(&format!(
                "gpu-health: cannot set NCCL_DEBUG_FILE: {}",
                spank::strerror(code)
            ));
        }
    }
    let mode = setup.opts.mode;
    let Some(job_id) = setup.job_id.filter(|_| mode != Mode::Off) else {
        return 0;
    };
    let first_task = spank.task_id() == Some(0);
    let state = &setup.start.state;
    let verdict = read_verdict(state, job_id);
    let node = setup.start.node.as_str();
    let mut report = health_report(mode, node, job_id, &verdict);

    let regular_step = setup.step_id.is_some_and(|s| s < FIRST_SPECIAL_STEP_ID);
    if let (Some(tp), true) = (setup.opts.tp_size, regular_step) {
        match global_ranks(spank) {
            Some(ranks) => {
                let gpus = job_gpus(&verdict, |k| spank.getenv(k));
                let links = read_topology(state);
                let violations = check_node_groups(&ranks, tp, &gpus, links.as_deref());
                report.merge(tp_report(mode, node, tp, &violations));
            }
            None => {
                spank::verbose("gpu-health: local-to-global rank map unavailable; TP check skipped")
            }
        }
    }
    if first_task {
        for line in report.lines() {
            spank::error(&line);
        }
    }
    if report.refusals.is_empty() {
        0
    } else {
        -1
    }
}

/// Global rank of each local task of this node, by local id.
fn global_ranks(spank: &Spank) -> Option<Vec<u32>> {
    let count = spank.local_task_count()?;
    (0..count)
        .map(|local| spank.local_to_global(local))
        .collect()
}

/// The extern step (`--gres` cgroup holder) runs no user code.
const EXTERN_STEP_ID: u32 = 0xffff_fffc;
const BATCH_STEP_ID: u32 = 0xffff_fffb;
const INTERACTIVE_STEP_ID: u32 = 0xffff_fffa;
/// A notice longer than this is cut (it is one line).
const MAX_NOTICE_BYTES: usize = 2048;

/// The step as its user names it: `12.0`, `12.batch`.
fn step_name(job: JobId, step: u32) -> String {
    match step {
        BATCH_STEP_ID => format!("{job}.batch"),
        INTERACTIVE_STEP_ID => format!("{job}.interactive"),
        s => format!("{job}.{s}"),
    }
}

/// task_exit of the node's last task: run `gpu-health step-end` (no
/// shell, killed at `step_end.timeout_ms`) and pass its notice on to the
/// step's output. Never fails the step: a problem is logged for the admin.
fn end_step(spank: &Spank, setup: &StepSetup) {
    let (Some(job_id), Some(step)) = (setup.job_id, setup.step_id) else {
        return;
    };
    let step_end = &setup.start.config().step_end;
    if setup.opts.mode == Mode::Off || !step_end.near_oom_notice || step == EXTERN_STEP_ID {
        return;
    }
    let name = step_name(job_id, step);
    let started_ms = setup.start.started_ms;
    let ran_ms = gpu_health_core::time::unix_ms().saturating_sub(started_ms);
    if !long_enough_for_notice(ran_ms) {
        spank::verbose(&format!(
            "gpu-health: {name} ran {ran_ms} ms: no near-OOM probe for steps under {MIN_STEP_MS_FOR_NOTICE} ms"
        ));
        return;
    }
    let Some(gpus) = step_gpus(spank, setup, job_id, &name) else {
        return;
    };
    let (list, since, job) = (gpu_list(&gpus), started_ms.to_string(), job_id.to_string());
    let mut argv = vec![
        "step-end",
        "--gpus",
        &list,
        "--since-ms",
        &since,
        "--job",
        &job,
        "--step",
        &name,
    ]
    .into_iter()
    .map(str::to_string)
    .collect::<Vec<_>>();
    if let Some(c) = &setup.config_arg {
        argv.push("--config".into());
        argv.push(c.display().to_string());
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let timeout = std::time::Duration::from_millis(step_end.timeout_ms);
    match gpu_health_core::process::run(&step_end.program, &argv, timeout, MAX_NOTICE_BYTES) {
        Ok(done) if done.status.success() => {
            for line in done.stdout.lines().filter(|l| !l.trim().is_empty()).take(4) {
                spank::error(&gpu_health_core::text::printable(line));
            }
        }
        Ok(done) => spank::info(&format!(
            "gpu-health: step-end of {name} exited with {}: {}",
            done.status,
            gpu_health_core::text::printable(done.stderr.trim())
        )),
        Err(e) => spank::info(&format!("gpu-health: no near-OOM notice for {name}: {e}")),
    }
}

/// The step's GPUs on this node (node numbering) that the job owns:
/// `SLURM_STEP_GPUS` (the user's to change) narrowed to the Prolog's
/// record of the job's GPUs. `None`, logged, when there is nothing to
/// report.
fn step_gpus(spank: &Spank, setup: &StepSetup, job_id: JobId, name: &str) -> Option<Vec<u32>> {
    let verdict = read_verdict(&setup.start.state, job_id);
    let claimed = spank.getenv("SLURM_STEP_GPUS");
    match step_end_gpus(claimed.as_deref(), &verdict) {
        Ok(gpus) => {
            if !gpus.not_the_jobs.is_empty() {
                spank::info(&format!(
                    "gpu-health: {name}: SLURM_STEP_GPUS names GPU(s) {} the job does not own; left out",
                    gpu_list(&gpus.not_the_jobs)
                ));
            }
            Some(gpus.report).filter(|g| !g.is_empty())
        }
        Err(why) => {
            spank::info(&format!(
                "gpu-health: no near-OOM notice for {name}: {}",
                printable(&why)
            ));
            None
        }
    }
}
