//! Running the tier: each configured gate's tool, without a shell, with
//! its time limit (the whole tier bounded too), judged by `judge`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::coverage;
use super::judge::{self, GateResult, ToolRun, Verdict};
use super::thresholds::{self, InForce};
use super::{GateName, MAX_OUTPUT};
use crate::checks::dcgm::{self, DcgmOutcome};
use crate::config::{AcceptanceConfig, Config, DcgmConfig};
use crate::fabric::{Fabric, LinkLayer};
use crate::finding::Finding;
use crate::inventory::Inventory;
use crate::process::{self, RunError};
use crate::snapshot::NodeSnapshot;

/// Why the node booted, for [`wanted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boot {
    /// A reboot gpu-health asked Slurm for.
    RequestedReboot,
    /// Any other boot.
    Other,
}

/// Whether the tier is to run before the node returns after `boot`.
pub fn wanted(cfg: &AcceptanceConfig, boot: Boot) -> bool {
    cfg.enabled
        && match boot {
            Boot::RequestedReboot => cfg.after_reboot || cfg.after_any_boot,
            Boot::Other => cfg.after_any_boot,
        }
}

/// One HCA to test and its port's line rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hca {
    pub name: String,
    pub rate_gbps: Option<f64>,
}

/// The HCAs the rdma gate tests: those configured, else every HCA with
/// an active InfiniBand or RoCE port (not EFA's `Unknown`: perftest's
/// verbs loopback does not apply there); the rate is its fastest port's.
pub fn hcas_of(cfg: &AcceptanceConfig, fabric: &Fabric) -> Vec<Hca> {
    let rate = |name: &str| {
        fabric
            .ports
            .iter()
            .filter(|p| p.device == name)
            .filter_map(|p| p.rate_gbps)
            .max_by(f64::total_cmp)
    };
    let names: Vec<String> = if cfg.hcas.is_empty() {
        let mut n: Vec<String> = fabric
            .active_ports()
            .filter(|p| matches!(p.link_layer, LinkLayer::InfiniBand | LinkLayer::Ethernet))
            .map(|p| p.device.clone())
            .collect();
        n.sort();
        n.dedup();
        n
    } else {
        cfg.hcas.clone()
    };
    names
        .into_iter()
        .map(|name| Hca {
            rate_gbps: rate(&name),
            name,
        })
        .collect()
}

/// What the tier needs, all given by the caller.
pub struct TierInput<'a> {
    pub config: &'a Config,
    pub snapshot: &'a NodeSnapshot,
    pub hcas: &'a [Hca],
    /// The run's PATH, where bare tool names are looked for.
    pub search_path: &'a [PathBuf],
    /// `Some(why)` when a job runs on the node: nothing runs.
    pub job_running: Option<String>,
    /// What the node had before its fault: the evidence must cover it
    /// too (empty for a node without one: `gpu-health accept`).
    pub had: &'a Inventory,
}

/// A run of the tier in one health check after a boot: the steps that
/// passed in earlier health checks of the same proof are not run again,
/// and a step whose own limit does not fit in what is left of `budget`
/// waits for the next health check (the caller keeps every limit below
/// the budget: `AcceptanceConfig::fitted_to_a_health_check`).
#[derive(Debug, Clone, Copy)]
pub struct Within<'a> {
    /// Keys of the steps passed earlier ([`TierOutcome::steps_passed`]).
    pub done: &'a [String],
    /// What this run may spend.
    pub budget: Duration,
}

/// The tier's conclusion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierOutcome {
    /// Nothing ran: a job runs on the node.
    pub refused: Option<String>,
    /// The GPU model the thresholds are for (NVML's name).
    pub model: Option<String>,
    pub results: Vec<GateResult>,
    /// To act on: failed gates and holding not-judged gates drain.
    pub findings: Vec<Finding>,
    /// Keys of the steps (a gate; `rdma mlx5_0` for one HCA) this run
    /// ran and that hold nothing against the node.
    pub steps_passed: Vec<String>,
    /// Keys of the steps left for a later run ([`Within`]).
    pub deferred: Vec<String>,
}

impl TierOutcome {
    /// The node may return: it ran, every step is done, nothing failed
    /// and nothing holds it.
    pub fn may_return(&self) -> bool {
        self.refused.is_none()
            && self.deferred.is_empty()
            && !self.findings.iter().any(|f| f.action.drains())
    }

    /// 0 every gate passed, 1 a gate failed, 2 a gate not judged or the
    /// tier refused (`gpu-health accept`).
    pub fn exit_code(&self) -> i32 {
        if self.refused.is_some() {
            return 2;
        }
        if self.results.iter().any(|r| r.verdict == Verdict::Failed) {
            return 1;
        }
        if self.results.iter().any(|r| r.verdict == Verdict::NotJudged) {
            return 2;
        }
        0
    }
}

/// Time the loopback server gets to listen before its client connects.
const SERVER_START: Duration = Duration::from_millis(1000);

/// One step of the tier: a gate, or the rdma gate's loopback of one HCA.
struct Step<'a> {
    gate: GateName,
    hca: Option<StepHca<'a>>,
}

/// The HCA of an rdma step.
#[derive(Clone, Copy)]
enum StepHca<'a> {
    /// With an active port: its loopback runs.
    Active(&'a Hca),
    /// It had an active port before the fault and has none now.
    Down(&'a str),
}

impl Step<'_> {
    fn key(&self) -> String {
        match self.hca {
            Some(StepHca::Active(Hca { name, .. })) => format!("{} {name}", self.gate.as_str()),
            Some(StepHca::Down(name)) => format!("{} {name}", self.gate.as_str()),
            None => self.gate.as_str().to_string(),
        }
    }

    /// The step's own time limit (`[acceptance]`).
    fn limit(&self, cfg: &AcceptanceConfig) -> Duration {
        Duration::from_secs(match self.gate {
            GateName::Dcgm => cfg.dcgm_timeout_s,
            GateName::AllReduce => cfg.all_reduce_timeout_s,
            GateName::HostToDevice => cfg.nvbandwidth_timeout_s,
            GateName::Rdma => cfg.ib_bw_timeout_s,
        })
    }
}

/// Run every configured gate, in order, within `[acceptance] timeout_s`
/// (`gpu-health accept`).
pub fn run_tier(input: &TierInput<'_>) -> TierOutcome {
    tier(input, None)
}

/// Run the gates not passed yet, as many as fit in `within.budget`.
pub fn run_tier_within(input: &TierInput<'_>, within: &Within<'_>) -> TierOutcome {
    tier(input, Some(within))
}

fn tier(input: &TierInput<'_>, within: Option<&Within<'_>>) -> TierOutcome {
    let cfg = &input.config.acceptance;
    let model = input.snapshot.gpus.iter().find_map(|g| g.name.clone());
    let mut outcome = TierOutcome {
        refused: None,
        model,
        results: Vec::new(),
        findings: Vec::new(),
        steps_passed: Vec::new(),
        deferred: Vec::new(),
    };
    if let Some(why) = &input.job_running {
        outcome.refused = Some(format!("a job runs on this node ({why}): no gate ran"));
        return outcome;
    }
    let th = thresholds::in_force(cfg, outcome.model.as_deref().unwrap_or("unknown GPU"));
    let total = Duration::from_secs(cfg.timeout_s);
    let deadline = Instant::now() + within.map_or(total, |w| w.budget.min(total));
    let mut dcgm_findings = Vec::new();
    for step in steps(cfg, input) {
        let key = step.key();
        if within.is_some_and(|w| w.done.contains(&key)) {
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // In a health check a step is never cut short (a time-out would
        // hold the node for a person): it waits for one with time for it.
        if within.is_some() && left < step.limit(cfg) {
            outcome.deferred.push(key);
            continue;
        }
        if left.is_zero() {
            outcome.results.push(spent(step.gate, &th, cfg.timeout_s));
            continue;
        }
        let before = outcome.results.len();
        let mut failed_diag = false;
        match (step.gate, step.hca) {
            (GateName::Dcgm, _) => {
                let (r, f) = dcgm_gate(input, &th, left);
                outcome.results.push(r);
                failed_diag = !f.is_empty();
                dcgm_findings.extend(f);
            }
            (GateName::AllReduce, _) => outcome.results.push(all_reduce_gate(input, &th, left)),
            (GateName::HostToDevice, _) => outcome.results.extend(h2d_gate(input, &th, left)),
            (GateName::Rdma, Some(StepHca::Down(name))) => {
                outcome.results.push(coverage::hca_down(name, &th))
            }
            (GateName::Rdma, Some(StepHca::Active(hca))) => {
                outcome.results.push(rdma_step(input, &th, Some(hca), left))
            }
            (GateName::Rdma, None) => outcome.results.push(rdma_step(input, &th, None, left)),
        }
        let gaps = coverage::gaps(
            step.gate,
            &outcome.results[before..],
            input.snapshot,
            input.had,
            &th,
        );
        outcome.results.extend(gaps);
        let holds = outcome.results[before..]
            .iter()
            .filter_map(GateResult::finding)
            .any(|f| f.action.drains());
        if !holds && !failed_diag {
            outcome.steps_passed.push(key);
        }
    }
    // A failed diag is told by its own findings (test and GPU).
    outcome.findings = outcome
        .results
        .iter()
        .filter(|r| !(r.gate == GateName::Dcgm && r.verdict == Verdict::Failed))
        .filter_map(GateResult::finding)
        .collect();
    outcome.findings.extend(dcgm_findings);
    outcome
}

/// The configured gates as steps: the rdma gate one per HCA, those with
/// an active port and those that had one before the fault (a single step
/// when there is no HCA to test, which says so).
fn steps<'a>(cfg: &AcceptanceConfig, input: &'a TierInput<'a>) -> Vec<Step<'a>> {
    let mut steps = Vec::new();
    for &gate in &cfg.gates {
        let mut hcas: Vec<StepHca<'a>> = input.hcas.iter().map(StepHca::Active).collect();
        if gate == GateName::Rdma && cfg.hcas.is_empty() {
            hcas.extend(
                input
                    .had
                    .hcas
                    .iter()
                    .filter(|h| !input.hcas.iter().any(|a| &a.name == *h))
                    .map(|h| StepHca::Down(h)),
            );
        }
        if gate == GateName::Rdma && !hcas.is_empty() {
            steps.extend(hcas.into_iter().map(|h| Step { gate, hca: Some(h) }));
        } else {
            steps.push(Step { gate, hca: None });
        }
    }
    steps
}

fn spent(gate: GateName, th: &InForce, total_s: u64) -> GateResult {
    let why = format!("the tier's {total_s} s were spent before it");
    judge::not_run(gate, th, &why, true)
}

fn limit(gate_s: u64, left: Duration) -> Duration {
    Duration::from_secs(gate_s).min(left)
}

fn no_gpus(input: &TierInput<'_>) -> Option<String> {
    if !input.snapshot.gpus.is_empty() {
        return None;
    }
    Some(match &input.snapshot.nvml_error {
        Some(e) => format!("NVML gave no GPUs: {e:?}"),
        None => "NVML gave no GPUs".into(),
    })
}

fn dcgm_gate(input: &TierInput<'_>, th: &InForce, left: Duration) -> (GateResult, Vec<Finding>) {
    let cfg = &input.config.acceptance;
    let dc = DcgmConfig {
        enabled: true,
        level: cfg.dcgm_level,
        timeout_ms: limit(cfg.dcgm_timeout_s, left).as_millis() as u64,
        ..input.config.dcgm.clone()
    };
    let all: Vec<u32> = input.snapshot.gpus.iter().map(|g| g.index).collect();
    let outcome = dcgm::run_diag(&dc, input.search_path, &[], &all);
    let mut r = judge::judge_dcgm(&outcome, th, dc.level);
    if let DcgmOutcome::NotInstalled = outcome {
        r.detail = format!("{} not found", dc.dcgmi.display());
    }
    let drains: Vec<Finding> = match &outcome {
        DcgmOutcome::Failed(f) => f.iter().filter(|f| f.action.drains()).cloned().collect(),
        _ => Vec::new(),
    };
    (r, drains)
}

fn all_reduce_gate(input: &TierInput<'_>, th: &InForce, left: Duration) -> GateResult {
    let cfg = &input.config.acceptance;
    let gpus = input.snapshot.gpus.len();
    if let Some(why) = no_gpus(input) {
        return judge::judge_all_reduce(&ToolRun::Failed { why }, th, gpus);
    }
    let args = substitute(&cfg.all_reduce_args, "{gpus}", &gpus.to_string());
    let run = run_tool(
        &cfg.all_reduce_perf,
        &args,
        input.search_path,
        limit(cfg.all_reduce_timeout_s, left),
    );
    judge::judge_all_reduce(&run, th, gpus)
}

fn h2d_gate(input: &TierInput<'_>, th: &InForce, left: Duration) -> Vec<GateResult> {
    let cfg = &input.config.acceptance;
    if let Some(why) = no_gpus(input) {
        return judge::judge_h2d(&ToolRun::Failed { why }, th);
    }
    let run = run_tool(
        &cfg.nvbandwidth,
        &cfg.nvbandwidth_args,
        input.search_path,
        limit(cfg.nvbandwidth_timeout_s, left),
    );
    judge::judge_h2d(&run, th)
}

/// The loopback of one HCA (`None`: there is none to test).
fn rdma_step(input: &TierInput<'_>, th: &InForce, hca: Option<&Hca>, left: Duration) -> GateResult {
    let cfg = &input.config.acceptance;
    let Some(hca) = hca else {
        return judge::not_run(GateName::Rdma, th, "no HCA with an active port", false);
    };
    let Some(program) = find_program(&cfg.ib_bw, input.search_path) else {
        let why = format!("{} not found", cfg.ib_bw.display());
        return judge::not_run(GateName::Rdma, th, &why, true);
    };
    let run = loopback(&program, cfg, &hca.name, limit(cfg.ib_bw_timeout_s, left));
    judge::judge_rdma(&hca.name, hca.rate_gbps, &run, th)
}

/// `ib_write_bw ARGS` as the server, then `ib_write_bw ARGS localhost` as
/// the client, both within `limit`; the server is killed (with its
/// process group) whatever happens.
fn loopback(program: &Path, cfg: &AcceptanceConfig, hca: &str, limit: Duration) -> ToolRun {
    let args = substitute(&cfg.ib_bw_args, "{hca}", hca);
    let server = match Server::start(program, &args) {
        Ok(s) => s,
        Err(e) => {
            return ToolRun::Failed {
                why: format!("cannot start the {} server: {e}", program.display()),
            }
        }
    };
    let wait = SERVER_START.min(limit / 2);
    std::thread::sleep(wait);
    let mut client_args = args;
    client_args.push("localhost".into());
    let run = run_found(program, &client_args, limit.saturating_sub(wait));
    drop(server);
    run
}

/// A background program killed with its process group when dropped.
struct Server(Child);

impl Server {
    fn start(program: &Path, args: &[String]) -> std::io::Result<Server> {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        process::die_with_parent(&mut command);
        command.spawn().map(Server)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            if let Ok(pid) = i32::try_from(self.0.id()) {
                // SAFETY: signalling the process group this child leads.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
            }
        }
        let _ = self.0.wait();
    }
}

fn substitute(args: &[String], key: &str, value: &str) -> Vec<String> {
    args.iter().map(|a| a.replace(key, value)).collect()
}

/// Where bare tool names are looked for besides the run's PATH.
const SYSTEM_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/bin",
    "/sbin",
    "/usr/local/cuda/bin",
];

/// A path with a directory is taken as it is; a bare name is searched
/// like dcgmi's (`checks::dcgm::resolve`).
fn find_program(program: &Path, search_path: &[PathBuf]) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return is_executable(program).then(|| program.to_path_buf());
    }
    search_path
        .iter()
        .cloned()
        .chain(SYSTEM_DIRS.iter().map(PathBuf::from))
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn run_tool(program: &Path, args: &[String], search_path: &[PathBuf], limit: Duration) -> ToolRun {
    match find_program(program, search_path) {
        None => ToolRun::Missing {
            program: program.display().to_string(),
        },
        Some(p) => run_found(&p, args, limit),
    }
}

fn run_found(program: &Path, args: &[String], limit: Duration) -> ToolRun {
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let out = process::run_tied(program, &argv, limit, MAX_OUTPUT);
    log::info!(
        "acceptance: {} {} finished in {} ms",
        program.display(),
        args.join(" "),
        t0.elapsed().as_millis()
    );
    match out {
        Ok(done) => ToolRun::Ended {
            code: done.status.code(),
            stdout: done.stdout,
            stderr: done.stderr,
        },
        Err(RunError::Timeout { .. }) => ToolRun::TimedOut {
            ms: limit.as_millis() as u64,
        },
        Err(e @ RunError::Spawn { .. }) => ToolRun::Failed { why: e.to_string() },
    }
}
