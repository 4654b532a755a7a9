//! The node_exporter textfile, in Prometheus's text format: the node's
//! health (latest check, fault ledger, Xid events of this boot), the live
//! power, and the figures of the recent jobs. Names follow Prometheus's
//! conventions (base units, `_total` for counters, `_timestamp_seconds`
//! for times); GPUs are labelled `gpu`, `uuid` and `pci_bus_id`, jobs
//! `slurm_job_id` (Prometheus keeps `job` for its own target label);
//! values are rounded to what they mean. docs/prometheus.md lists them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::metrics_state::{GpuLabel, HealthMetrics};
use crate::finding::Action;
use crate::ledger::{Handling, Ledger, PendingCause};
use crate::records::record::{GpuRecord, JobRecord};

/// The words a verdict takes: no finding, or the gravest action.
pub const VERDICTS: [&str; 5] = ["ok", "info", "warn", "drain-until-clean", "drain"];

/// Every cause a pending fault can have, as the label says it.
pub const CAUSES: [(PendingCause, &str); 4] = [
    (PendingCause::ConfigError, "configuration-error"),
    (PendingCause::Brake, "brake"),
    (PendingCause::SlurmFailed, "slurm-failed"),
    (
        PendingCause::DrainedBySomeoneElse,
        "drained-by-someone-else",
    ),
];

/// Label values: backslash, quote and newline escaped.
pub(super) fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `v` with at most `places` decimals (`611.1`, `700`).
fn num(v: f64, places: i32) -> String {
    let scale = 10f64.powi(places);
    let r = (v * scale).round() / scale;
    let r = if r.is_finite() { r } else { v };
    // `-0` reads oddly.
    if r == 0.0 {
        "0".into()
    } else {
        r.to_string()
    }
}

/// Decimals: ms for times, mW for power draws, 0.1 W for means.
const TIME: i32 = 3;
const MILLI: i32 = 3;
const TENTH: i32 = 1;

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64, places: i32) {
        if !v.is_finite() {
            return;
        }
        let _ = write!(self.0, "{name}");
        if !labels.is_empty() {
            let shown: Vec<String> = labels
                .iter()
                .map(|(k, val)| format!("{k}=\"{}\"", esc(val)))
                .collect();
            let _ = write!(self.0, "{{{}}}", shown.join(","));
        }
        let _ = writeln!(self.0, " {}", num(v, places));
    }
}

/// `gpu`, `uuid`, `pci_bus_id` of GPU `index`.
fn gpu_labels(gpus: &[GpuLabel], index: u32) -> [(&'static str, String); 3] {
    let g = gpus.iter().find(|g| g.index == index);
    [
        ("gpu", index.to_string()),
        ("uuid", g.and_then(|g| g.uuid.clone()).unwrap_or_default()),
        (
            "pci_bus_id",
            g.and_then(|g| g.pci_bus_id.clone()).unwrap_or_default(),
        ),
    ]
}

fn refs<'a>(labels: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    labels.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn verdict(worst: Option<Action>) -> &'static str {
    worst.map_or("ok", Action::as_str)
}

fn stateset(out: &mut Out, name: &str, labels: &[(&'static str, String)], current: &str) {
    for v in VERDICTS {
        let mut l = refs(labels);
        l.push(("verdict", v));
        out.sample(name, &l, f64::from(u8::from(v == current)), 0);
    }
}

/// One series in every textfile, whichever run wrote it: alerts on a
/// series that is absent (no health check ever ran) compare against it.
fn render_build(out: &mut Out) {
    out.family(
        "gpu_health_build_info",
        "gauge",
        "1, labelled with the version of gpu-health that wrote this file",
    );
    out.sample(
        "gpu_health_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
        0,
    );
}

fn render_check(out: &mut Out, h: &HealthMetrics) {
    out.family(
        "gpu_health_last_prolog_timestamp_seconds",
        "gauge",
        "When the Prolog last checked this node (Unix time)",
    );
    if let Some(t) = h.last_prolog_ms {
        out.sample(
            "gpu_health_last_prolog_timestamp_seconds",
            &[],
            t as f64 / 1000.0,
            TIME,
        );
    }
    out.family(
        "gpu_health_last_health_check_timestamp_seconds",
        "gauge",
        "When the health check last checked this node (Unix time)",
    );
    if let Some(t) = h.last_health_check_ms {
        out.sample(
            "gpu_health_last_health_check_timestamp_seconds",
            &[],
            t as f64 / 1000.0,
            TIME,
        );
    }
    let Some(check) = &h.check else {
        return;
    };
    out.family(
        "gpu_health_configuration_error",
        "gauge",
        "1 when the latest check ran on a fallback configuration (it drained nothing)",
    );
    out.sample(
        "gpu_health_configuration_error",
        &[],
        f64::from(u8::from(check.config_error)),
        0,
    );
    let worst = check.findings.iter().map(|f| f.action).max();
    out.family(
        "gpu_health_node_verdict",
        "gauge",
        "The latest check's verdict on the node: 1 for its gravest action (ok without findings)",
    );
    stateset(out, "gpu_health_node_verdict", &[], verdict(worst));
    out.family(
        "gpu_health_node_findings",
        "gauge",
        "Findings about the whole node at the latest check, by check and action",
    );
    for f in check.findings.iter().filter(|f| f.gpu.is_none()) {
        out.sample(
            "gpu_health_node_findings",
            &[("check", &f.check), ("action", f.action.as_str())],
            f64::from(f.count),
            0,
        );
    }
    out.family(
        "gpu_health_gpu_info",
        "gauge",
        "The node's GPUs as the latest probe named them",
    );
    for g in &h.gpus {
        let mut l = gpu_labels(&h.gpus, g.index).to_vec();
        l.push(("name", g.name.clone().unwrap_or_default()));
        out.sample("gpu_health_gpu_info", &refs(&l), 1.0, 0);
    }
    out.family(
        "gpu_health_gpu_verdict",
        "gauge",
        "The latest check's verdict on each GPU: 1 for its gravest action (ok without findings)",
    );
    let mut indices: Vec<u32> = h.gpus.iter().map(|g| g.index).collect();
    indices.extend(check.findings.iter().filter_map(|f| f.gpu));
    indices.sort_unstable();
    indices.dedup();
    for &i in &indices {
        let worst = check
            .findings
            .iter()
            .filter(|f| f.gpu == Some(i))
            .map(|f| f.action)
            .max();
        stateset(
            out,
            "gpu_health_gpu_verdict",
            &gpu_labels(&h.gpus, i),
            verdict(worst),
        );
    }
    out.family(
        "gpu_health_gpu_findings",
        "gauge",
        "Findings about each GPU at the latest check, by check and action",
    );
    for f in &check.findings {
        let Some(i) = f.gpu else { continue };
        let mut l = gpu_labels(&h.gpus, i).to_vec();
        l.push(("check", f.check.clone()));
        l.push(("action", f.action.as_str().into()));
        out.sample("gpu_health_gpu_findings", &refs(&l), f64::from(f.count), 0);
    }
}

fn render_ledger(out: &mut Out, ledger: Option<&Ledger>) {
    let drain = ledger.and_then(|l| l.drain.as_ref());
    out.family(
        "gpu_health_node_drained",
        "gauge",
        "1 when gpu-health's drain of the node stands, for its kind (drain: until an admin resumes it; drain-until-clean: returns by itself)",
    );
    for kind in [Action::DrainUntilClean, Action::Drain] {
        let on = drain.is_some_and(|d| d.kind == kind);
        out.sample(
            "gpu_health_node_drained",
            &[("kind", kind.as_str())],
            f64::from(u8::from(on)),
            0,
        );
    }
    out.family(
        "gpu_health_node_drained_since_timestamp_seconds",
        "gauge",
        "When gpu-health drained the node (Unix time)",
    );
    if let Some(d) = drain {
        out.sample(
            "gpu_health_node_drained_since_timestamp_seconds",
            &[("kind", d.kind.as_str())],
            d.at_ms as f64 / 1000.0,
            TIME,
        );
    }
    let faults = ledger.map_or(&[][..], |l| &l.faults[..]);
    let mut open: BTreeMap<(String, Action, &str), u32> = BTreeMap::new();
    let mut pending: BTreeMap<&str, (u32, u64)> = BTreeMap::new();
    for f in faults {
        let handling = match f.handling {
            Handling::New => "new",
            Handling::Drained { .. } => "drained",
            Handling::Rebooted { .. } => "rebooted",
            Handling::Pending { cause, since_ms } => {
                let label = CAUSES
                    .iter()
                    .find(|c| c.0 == cause)
                    .map_or("unknown", |c| c.1);
                let e = pending.entry(label).or_insert((0, since_ms));
                e.0 += 1;
                e.1 = e.1.min(since_ms);
                "pending"
            }
        };
        *open
            .entry((f.id.check.clone(), f.action, handling))
            .or_insert(0) += 1;
    }
    out.family(
        "gpu_health_open_faults",
        "gauge",
        "Open faults in the node's fault ledger, by check, action and handling (drained, pending)",
    );
    for ((check, action, handling), n) in &open {
        out.sample(
            "gpu_health_open_faults",
            &[
                ("check", check),
                ("action", action.as_str()),
                ("handling", handling),
            ],
            f64::from(*n),
            0,
        );
    }
    out.family(
        "gpu_health_pending_faults",
        "gauge",
        "Faults that call for a drain not made yet, by why",
    );
    for (_, cause) in CAUSES {
        let n = pending.get(cause).map_or(0, |p| p.0);
        out.sample(
            "gpu_health_pending_faults",
            &[("cause", cause)],
            f64::from(n),
            0,
        );
    }
    out.family(
        "gpu_health_pending_since_timestamp_seconds",
        "gauge",
        "Since when the oldest fault of each cause has waited for its drain (Unix time)",
    );
    for (cause, (_, since)) in &pending {
        out.sample(
            "gpu_health_pending_since_timestamp_seconds",
            &[("cause", cause)],
            *since as f64 / 1000.0,
            TIME,
        );
    }
    out.family(
        "gpu_health_brake_holding",
        "gauge",
        "1 when the drain brake holds back a drain of this node",
    );
    let holding = pending.contains_key("brake");
    out.sample(
        "gpu_health_brake_holding",
        &[],
        f64::from(u8::from(holding)),
        0,
    );
}

fn render_xids(out: &mut Out, h: &HealthMetrics) {
    out.family(
        "gpu_health_xid_events_total",
        "counter",
        "NVIDIA Xid and NVSwitch SXid events of this boot, by kind and code, as the checks read them",
    );
    for (key, n) in &h.xids.by_code {
        let Some((kind, code)) = key.split_once('-') else {
            continue;
        };
        out.sample(
            "gpu_health_xid_events_total",
            &[("kind", kind), ("code", code)],
            *n as f64,
            0,
        );
    }
}

fn render_power(out: &mut Out, h: &HealthMetrics) {
    let gpus = h.power.as_ref().map_or(&[][..], |p| &p.gpus[..]);
    type Pick = fn(&super::metrics_state::GpuPower) -> Option<f64>;
    let families: [(&str, &str, Pick); 2] = [
        (
            "gpu_health_gpu_power_watts",
            "GPU power draw at the latest probe",
            |g| g.draw_w,
        ),
        (
            "gpu_health_gpu_power_limit_watts",
            "GPU enforced power limit",
            |g| g.limit_w,
        ),
    ];
    for (name, help, pick) in families {
        out.family(name, "gauge", help);
        for g in gpus {
            if let Some(v) = pick(g) {
                out.sample(name, &refs(&gpu_labels(&h.gpus, g.index)), v, MILLI);
            }
        }
    }
    out.family(
        "gpu_health_node_gpu_power_watts",
        "gauge",
        "Sum of the node's GPU power draw at the latest probe",
    );
    out.family(
        "gpu_health_power_probe_timestamp_seconds",
        "gauge",
        "When the live power was probed (Unix time)",
    );
    if let Some(p) = &h.power {
        let total: f64 = p.gpus.iter().filter_map(|g| g.draw_w).sum();
        out.sample("gpu_health_node_gpu_power_watts", &[], total, MILLI);
        out.sample(
            "gpu_health_power_probe_timestamp_seconds",
            &[],
            p.at_ms as f64 / 1000.0,
            TIME,
        );
    }
}

/// A per-GPU figure of a job: name, help, value, decimals.
type GpuFamily = (
    &'static str,
    &'static str,
    fn(&GpuRecord) -> Option<f64>,
    i32,
);

const GPU_FAMILIES: &[GpuFamily] = &[
    (
        "gpu_health_job_gpu_energy_joules",
        "GPU energy used by the job (energy counter difference)",
        |g| g.energy_j,
        MILLI,
    ),
    (
        "gpu_health_job_gpu_mean_power_watts",
        "Mean GPU power over the job",
        |g| g.mean_power_w,
        TENTH,
    ),
    (
        "gpu_health_job_gpu_peak_memory_bytes",
        "Largest GPU memory use of the job's processes",
        |g| g.peak_memory_bytes.map(|v| v as f64),
        0,
    ),
    (
        "gpu_health_job_gpu_memory_total_bytes",
        "GPU memory size",
        |g| g.memory_total_bytes.map(|v| v as f64),
        0,
    ),
    (
        "gpu_health_job_gpu_ecc_corrected_errors",
        "Corrected ECC errors during the job",
        |g| g.ecc_corrected_delta.map(|v| v as f64),
        0,
    ),
    (
        "gpu_health_job_gpu_ecc_uncorrected_errors",
        "Uncorrected ECC errors during the job",
        |g| g.ecc_uncorrected_delta.map(|v| v as f64),
        0,
    ),
    (
        "gpu_health_job_gpu_nvlink_errors",
        "NVLink errors during the job",
        |g| g.nvlink_errors_delta.map(|v| v as f64),
        0,
    ),
    (
        "gpu_health_job_gpu_pcie_replays",
        "PCIe replays during the job",
        |g| g.pcie_replay_delta.map(|v| v as f64),
        0,
    ),
];

/// A per-job figure: name, help, value, decimals.
type JobFamily = (
    &'static str,
    &'static str,
    fn(&JobRecord) -> Option<f64>,
    i32,
);

const JOB_FAMILIES: &[JobFamily] = &[
    (
        "gpu_health_job_duration_seconds",
        "Job duration on this node",
        |r| r.duration_s,
        TIME,
    ),
    (
        "gpu_health_job_end_timestamp_seconds",
        "When the job ended (Unix time)",
        |r| Some(r.end_ms as f64 / 1000.0),
        TIME,
    ),
    (
        "gpu_health_job_xid_events",
        "Xid events on the job's GPUs during the job",
        |r| {
            r.xids_absent_reason
                .is_none()
                .then_some(r.xids.len() as f64)
        },
        0,
    ),
];

/// The recent jobs' figures (absent figures have no sample).
pub fn render_jobs(records: &[JobRecord]) -> String {
    let mut out = Out(String::new());
    jobs(&mut out, records);
    out.0
}

fn jobs(out: &mut Out, records: &[JobRecord]) {
    let job = |r: &JobRecord| {
        vec![
            ("slurm_job_id", r.job_id.clone()),
            ("user", r.user.clone().unwrap_or_default()),
        ]
    };
    for (name, help, value, places) in GPU_FAMILIES {
        out.family(name, "gauge", help);
        for r in records {
            for g in &r.gpus {
                if let Some(v) = value(g) {
                    let mut l = job(r);
                    l.push(("gpu", g.index.to_string()));
                    l.push(("uuid", g.uuid.clone().unwrap_or_default()));
                    l.push(("pci_bus_id", g.pci.clone().unwrap_or_default()));
                    out.sample(name, &refs(&l), v, *places);
                }
            }
        }
    }
    for (name, help, value, places) in JOB_FAMILIES {
        out.family(name, "gauge", help);
        for r in records {
            if let Some(v) = value(r) {
                out.sample(name, &refs(&job(r)), v, *places);
            }
        }
    }
}

/// The whole textfile.
pub fn render(h: &HealthMetrics, ledger: Option<&Ledger>, recent: &[JobRecord]) -> String {
    let mut out = Out(String::with_capacity(16 * 1024));
    render_build(&mut out);
    render_check(&mut out, h);
    render_ledger(&mut out, ledger);
    render_xids(&mut out, h);
    render_power(&mut out, h);
    jobs(&mut out, recent);
    out.0
}
