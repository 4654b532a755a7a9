//! Pure judging: a tool's run (its output, or why there is none) and the
//! thresholds in force to a verdict per gate, and the findings to act on.

use serde::Serialize;

use super::thresholds::{InForce, ALL_REDUCE_GPUS};
use super::{nccl, nvbandwidth, one_line, perftest, GateName};
use crate::checks::dcgm::DcgmOutcome;
use crate::finding::{Action, Finding};

/// How one tool run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolRun {
    /// It ended by itself; `code` `None` for a signal.
    Ended {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    },
    /// Killed at its time limit.
    TimedOut { ms: u64 },
    /// Not installed (not found on the search path).
    Missing { program: String },
    /// Could not be started.
    Failed { why: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Passed,
    Failed,
    NotJudged,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "FAILED",
            Verdict::NotJudged => "not judged",
        }
    }
}

/// One gate's verdict on the node, one GPU or one HCA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateResult {
    pub gate: GateName,
    /// `GPU3`, `mlx5_0`; `None` for the whole node.
    pub subject: Option<String>,
    #[serde(skip)]
    pub gpu: Option<u32>,
    pub verdict: Verdict,
    pub figure: Option<f64>,
    pub threshold: Option<f64>,
    /// `GB/s` or `Gb/s`; empty where there is no figure.
    pub unit: &'static str,
    /// Model label the threshold is for.
    pub model: String,
    /// One line: what was measured, or why it was not judged.
    pub detail: String,
    /// Not judged in a way that keeps the node drained (time-out, parse
    /// error, missing tool); "no threshold" does not.
    pub holds: bool,
}

impl GateResult {
    fn new(gate: GateName, model: &str) -> GateResult {
        GateResult {
            gate,
            subject: None,
            gpu: None,
            verdict: Verdict::NotJudged,
            figure: None,
            threshold: None,
            unit: "",
            model: model.to_string(),
            detail: String::new(),
            holds: true,
        }
    }

    fn not_judged(mut self, why: &str, holds: bool) -> GateResult {
        self.verdict = Verdict::NotJudged;
        self.detail = one_line(why);
        self.holds = holds;
        self
    }

    /// Compare `figure` with `threshold` (`None`: no threshold).
    fn measured(mut self, figure: f64, threshold: Option<f64>, unit: &'static str) -> GateResult {
        self.figure = Some(figure);
        self.unit = unit;
        self.threshold = threshold;
        match threshold {
            None => {
                self.detail = format!("{} {} (no threshold for {})", fmt(figure), unit, self.model);
                self.verdict = Verdict::NotJudged;
                self.holds = false;
            }
            Some(t) => {
                let passed = figure >= t;
                self.verdict = if passed {
                    Verdict::Passed
                } else {
                    Verdict::Failed
                };
                self.holds = false;
                self.detail = format!(
                    "{} {} {} {} {unit}",
                    fmt(figure),
                    unit,
                    if passed { ">=" } else { "<" },
                    fmt(t)
                );
            }
        }
        self
    }

    fn for_subject(mut self, subject: String, gpu: Option<u32>) -> GateResult {
        self.subject = Some(subject);
        self.gpu = gpu;
        self
    }

    /// What the gate names in a reason: `all-reduce`, `H2D GPU3`.
    fn what(&self) -> String {
        let name = match self.gate {
            GateName::Dcgm => "DCGM diag",
            GateName::AllReduce => "all-reduce",
            GateName::HostToDevice => "H2D",
            GateName::Rdma => "RDMA",
        };
        match &self.subject {
            Some(s) => format!("{name} {s}"),
            None => name.to_string(),
        }
    }

    /// The finding to act on, if any: a failed gate drains with its figure
    /// and threshold; a holding not-judged gate drains with its reason
    /// (not a hardware verdict: an admin decides); the rest are info.
    pub fn finding(&self) -> Option<Finding> {
        let (action, summary) = match (self.verdict, self.figure, self.threshold) {
            (Verdict::Passed, ..) => return None,
            (Verdict::Failed, Some(f), Some(t)) => (
                Action::Drain,
                format!(
                    "{} {} {} < {} {} ({})",
                    self.what(),
                    fmt(f),
                    self.unit,
                    fmt(t),
                    self.unit,
                    self.model
                ),
            ),
            (Verdict::Failed, ..) => (Action::Drain, format!("{} {}", self.what(), self.detail)),
            (Verdict::NotJudged, ..) if self.holds => (
                Action::Drain,
                format!("{} not judged: {}", self.what(), self.detail),
            ),
            (Verdict::NotJudged, ..) => (
                Action::Info,
                format!("{} not judged: {}", self.what(), self.detail),
            ),
        };
        let summary = short(&summary, 120);
        let message = format!(
            "acceptance gate {} {}: {}",
            self.gate.as_str(),
            self.verdict.as_str(),
            self.detail
        );
        Some(match self.gpu {
            Some(g) => Finding::gpu(self.gate.check_name(), action, g, None, summary, message),
            None => Finding::node(self.gate.check_name(), action, summary, message),
        })
    }
}

/// `312` or `31.25`: whole figures without decimals.
pub(crate) fn fmt(v: f64) -> String {
    if (v - v.round()).abs() < 0.005 {
        format!("{}", v.round())
    } else {
        format!("{v:.1}")
    }
}

fn short(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Why a run has no output to judge, or its stdout; a non-zero exit
/// comes back as `Err` too unless `accept_failure_status` (the output
/// may still prove a wrong result).
fn output_of(run: &ToolRun) -> Result<(&str, Option<String>), String> {
    match run {
        ToolRun::Missing { program } => Err(format!("{program} not found")),
        ToolRun::Failed { why } => Err(why.clone()),
        ToolRun::TimedOut { ms } => Err(format!("no result within {} s (killed)", ms / 1000)),
        ToolRun::Ended {
            code,
            stdout,
            stderr,
        } => {
            let bad = match code {
                Some(0) => None,
                Some(c) => Some(format!("exited with status {c}: {}", tail(stderr, stdout))),
                None => Some(format!("killed by a signal: {}", tail(stderr, stdout))),
            };
            Ok((stdout.as_str(), bad))
        }
    }
}

/// The last non-empty line of stderr (else stdout): what a tool says
/// when it gives up.
fn tail(stderr: &str, stdout: &str) -> String {
    let last = |s: &str| s.lines().rev().find(|l| !l.trim().is_empty()).map(one_line);
    last(stderr)
        .or_else(|| last(stdout))
        .unwrap_or_else(|| "no output".into())
}

/// A part of the node (`subject`: `GPU2`, `mlx5_0`) the gate's evidence
/// does not cover: not judged, and that holds the node.
pub fn uncovered(
    gate: GateName,
    th: &InForce,
    subject: String,
    gpu: Option<u32>,
    why: &str,
) -> GateResult {
    GateResult::new(gate, &th.label)
        .for_subject(subject, gpu)
        .not_judged(why, true)
}

/// A gate that did not run: `holds` when that keeps the node drained.
pub fn not_run(gate: GateName, th: &InForce, why: &str, holds: bool) -> GateResult {
    GateResult::new(gate, &th.label).not_judged(why, holds)
}

/// `all_reduce_perf` over `gpus` GPUs.
pub fn judge_all_reduce(run: &ToolRun, th: &InForce, gpus: usize) -> GateResult {
    let r = GateResult::new(GateName::AllReduce, &th.label);
    let (stdout, bad_exit) = match output_of(run) {
        Ok(o) => o,
        Err(why) => return r.not_judged(&why, true),
    };
    let parsed = match nccl::parse(stdout) {
        Ok(p) => p,
        Err(e) => return r.not_judged(bad_exit.as_deref().unwrap_or(&e.to_string()), true),
    };
    let wrong = parsed.wrong();
    if wrong > 0 {
        let mut r = r;
        r.verdict = Verdict::Failed;
        r.holds = false;
        r.figure = parsed.peak_busbw();
        r.unit = "GB/s";
        r.detail = format!("wrong results: {wrong} elements (#wrong)");
        return r;
    }
    if let Some(why) = bad_exit {
        return r.not_judged(&why, true);
    }
    let Some(figure) = parsed.peak_busbw() else {
        return r.not_judged("no bus bandwidth", true);
    };
    let threshold = if gpus == ALL_REDUCE_GPUS || th.all_reduce_from_config {
        th.all_reduce_gbs
    } else {
        None
    };
    let mut r = r.measured(figure, threshold, "GB/s");
    if threshold.is_none() && th.all_reduce_gbs.is_some() {
        r.detail = format!(
            "{} GB/s (no threshold for {gpus} GPUs of {}: the table's is for {ALL_REDUCE_GPUS})",
            fmt(figure),
            th.label
        );
    }
    r
}

/// nvbandwidth host-to-device: one result per GPU.
pub fn judge_h2d(run: &ToolRun, th: &InForce) -> Vec<GateResult> {
    let r = GateResult::new(GateName::HostToDevice, &th.label);
    let (stdout, bad_exit) = match output_of(run) {
        Ok(o) => o,
        Err(why) => return vec![r.not_judged(&why, true)],
    };
    if let Some(why) = bad_exit {
        return vec![r.not_judged(&why, true)];
    }
    let m = match nvbandwidth::parse(stdout) {
        Ok(m) => m,
        Err(e) => return vec![r.not_judged(&e.to_string(), true)],
    };
    m.per_gpu
        .iter()
        .map(|(gpu, v)| {
            r.clone()
                .for_subject(format!("GPU{gpu}"), Some(*gpu))
                .measured(*v, th.h2d_gbs, "GB/s")
        })
        .collect()
}

/// One HCA's loopback, against `rate_gbps` (its port's line rate) times
/// the fraction in force, or the absolute figure in force.
pub fn judge_rdma(hca: &str, rate_gbps: Option<f64>, run: &ToolRun, th: &InForce) -> GateResult {
    let r = GateResult::new(GateName::Rdma, &th.label).for_subject(hca.to_string(), None);
    let (stdout, bad_exit) = match output_of(run) {
        Ok(o) => o,
        Err(why) => return r.not_judged(&why, true),
    };
    if let Some(why) = bad_exit {
        return r.not_judged(&why, true);
    }
    let parsed = match perftest::parse(stdout) {
        Ok(p) => p,
        Err(e) => return r.not_judged(&e.to_string(), true),
    };
    let Some(figure) = parsed.best_average_gbps() else {
        return r.not_judged("no bandwidth", true);
    };
    let threshold = th
        .rdma_gbps
        .or_else(|| rate_gbps.map(|rate| rate * th.rdma_fraction));
    let mut r = r.measured(figure, threshold, "Gb/s");
    if let (Some(rate), None) = (rate_gbps, th.rdma_gbps) {
        r.model = format!("{} Gb/s link", fmt(rate));
    } else if threshold.is_none() {
        r.detail = format!(
            "{} Gb/s (no threshold: the port's rate is unknown)",
            fmt(figure)
        );
    }
    r
}

/// The DCGM diag at `level`: a failed hardware test fails the gate (the
/// diag's own `dcgm` findings say which GPU and test); busy, no host
/// engine, a time-out or an unreadable answer are not judged.
pub fn judge_dcgm(outcome: &DcgmOutcome, th: &InForce, level: u8) -> GateResult {
    let mut r = GateResult::new(GateName::Dcgm, &th.label);
    match outcome {
        DcgmOutcome::NotInstalled => r.not_judged("dcgmi not found", true),
        DcgmOutcome::Unavailable { why, .. } => r.not_judged(why, true),
        DcgmOutcome::Passed { tests } => {
            r.verdict = Verdict::Passed;
            r.holds = false;
            r.detail = format!("level {level}: {tests} results, none failed");
            r
        }
        DcgmOutcome::Failed(found) => {
            let grave: Vec<&str> = found
                .iter()
                .filter(|f| f.action.drains())
                .map(|f| f.summary.as_str())
                .collect();
            r.holds = false;
            if grave.is_empty() {
                r.verdict = Verdict::Passed;
                r.detail = format!(
                    "level {level}: no hardware test failed (warnings: {})",
                    found
                        .iter()
                        .map(|f| f.summary.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            } else {
                r.verdict = Verdict::Failed;
                r.detail = format!("level {level}: {}", grave.join("; "));
            }
            r.detail = one_line(&r.detail);
            r
        }
    }
}
