//! One refresh of `gpu-health watch`, as a table, nvidia-smi's CSV or
//! JSON lines. Findings about the whole node are shown on a line of their
//! own; a GPU's row shows its own findings only (gpustat marks only the
//! GPU that is lost).

use std::time::Duration;

use gpu_health_core::finding::{Action, Finding};
use gpu_health_core::snapshot::GpuSnapshot;
use gpu_health_core::text::printable;
use serde_json::{json, Map, Value};

/// The header `nvidia-smi --query-gpu=timestamp,index,name,
/// utilization.gpu,memory.used,memory.total,power.draw,power.limit,
/// temperature.gpu,fan.speed --format=csv` prints, and ours.
pub const CSV_HEADER: &str = "timestamp, index, name, utilization.gpu [%], memory.used [MiB], \
     memory.total [MiB], power.draw [W], power.limit [W], temperature.gpu, fan.speed [%], health";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// What one refresh shows.
pub struct Refresh<'a> {
    pub node: &'a str,
    pub gpus: &'a [GpuSnapshot],
    pub findings: &'a [Finding],
    /// NVML's failure, as a sentence.
    pub nvml_error: Option<&'a str>,
    pub config_error: Option<&'a str>,
    pub format: Format,
    pub colour: bool,
    /// On a terminal: redraw in place (`Some(true)` for the first
    /// refresh, which clears the screen).
    pub redraw: Option<bool>,
    pub interval: Duration,
    pub now_ms: u64,
}

/// What comes once, before the first refresh: CSV's header, the
/// configuration error of the CSV and JSON formats (the table repeats it
/// in every refresh).
pub fn head(format: Format, config_error: Option<&str>) -> String {
    let mut s = String::new();
    match format {
        Format::Csv => {
            s.push_str(CSV_HEADER);
            s.push('\n');
            if let Some(e) = config_error {
                s.push_str(&format!("# configuration error: {}\n", printable(e)));
            }
        }
        Format::Json => {
            if let Some(e) = config_error {
                s.push_str(&format!("{}\n", json!({ "configuration_error": e })));
            }
        }
        Format::Table => {}
    }
    s
}

/// nvidia-smi's `timestamp`: local time, `2024/05/01 12:00:00.123`.
pub fn smi_timestamp(ms: u64) -> String {
    let secs = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r writes into the tm we own; a zeroed tm is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    let ok = !unsafe { libc::localtime_r(&secs, &mut tm) }.is_null();
    if !ok {
        return gpu_health_core::time::format_utc_ms(ms);
    }
    format!(
        "{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ms % 1000
    )
}

/// nvidia-smi writes `[N/A]` for what the board does not report.
fn na(v: Option<String>) -> String {
    v.unwrap_or_else(|| "[N/A]".into())
}

fn mib(bytes: Option<u64>) -> Option<u64> {
    bytes.map(|b| b / (1 << 20))
}

fn watts(mw: Option<u32>) -> Option<f64> {
    mw.map(|v| f64::from(v) / 1000.0)
}

/// A GPU's health: its own findings (above info), and `drain: gpu-lost`
/// for a GPU that fell off the bus.
struct Health {
    action: Option<Action>,
    checks: Vec<String>,
}

impl Health {
    fn of(g: &GpuSnapshot, findings: &[Finding]) -> Health {
        let mine: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.gpu == Some(g.index) && f.action > Action::Info)
            .collect();
        let mut action = mine.iter().map(|f| f.action).max();
        let mut checks: Vec<String> = Vec::new();
        for f in &mine {
            if !checks.contains(&f.check) {
                checks.push(f.check.clone());
            }
        }
        if g.lost {
            action = Some(Action::Drain);
            if !checks.iter().any(|c| c == "gpu-lost") {
                checks.insert(0, "gpu-lost".into());
            }
        }
        Health { action, checks }
    }

    fn word(&self) -> &'static str {
        self.action.map_or("ok", Action::as_str)
    }

    fn text(&self) -> String {
        if self.checks.is_empty() {
            self.word().to_string()
        } else {
            format!("{}: {}", self.word(), self.checks.join(" "))
        }
    }
}

fn colour_of(action: Option<Action>) -> &'static str {
    match action {
        None | Some(Action::Info) => "32",
        Some(Action::Warn) => "33",
        Some(_) => "31",
    }
}

/// The node's own findings (no GPU), above info.
fn node_findings(findings: &[Finding]) -> Vec<&Finding> {
    findings
        .iter()
        .filter(|f| f.gpu.is_none() && f.action > Action::Info)
        .collect()
}

/// One refresh in its format.
pub fn refresh(r: &Refresh<'_>) -> String {
    match r.format {
        Format::Table => table(r),
        Format::Csv => csv(r),
        Format::Json => json_lines(r),
    }
}

fn table(r: &Refresh<'_>) -> String {
    let mut lines: Vec<String> = Vec::new();
    lines.push(format!(
        "{}  {}  every {} s (Ctrl-C ends)",
        smi_timestamp(r.now_ms),
        printable(r.node),
        r.interval.as_secs_f64()
    ));
    if let Some(e) = r.config_error {
        lines.push(format!(
            "configuration error: {} (judged with a fallback; gpu-health config check)",
            printable(e)
        ));
    }
    if let Some(e) = r.nvml_error {
        lines.push(format!("NVML: {}", printable(e)));
    }
    lines.push(format!(
        "{:<4} {:<24} {:>5} {:>17} {:>8} {:>7} {:>5} {:>5}  HEALTH",
        "GPU", "NAME", "UTIL", "MEMORY", "POWER", "LIMIT", "TEMP", "FAN"
    ));
    for g in r.gpus {
        let h = Health::of(g, r.findings);
        let text = if r.colour {
            format!("\x1b[{}m{}\x1b[0m", colour_of(h.action), h.text())
        } else {
            h.text()
        };
        let memory = match (mib(g.memory_used_bytes), mib(g.memory_total_bytes)) {
            (Some(u), Some(t)) => format!("{u} / {t} MiB"),
            _ => "[N/A]".into(),
        };
        lines.push(format!(
            "{:<4} {:<24} {:>5} {:>17} {:>8} {:>7} {:>5} {:>5}  {text}",
            g.index,
            printable(g.name.as_deref().unwrap_or("-")),
            na(g.utilization_gpu_pct.map(|u| format!("{u} %"))),
            memory,
            na(watts(g.power_usage_mw).map(|w| format!("{w:.1} W"))),
            na(watts(g.power_limit_mw).map(|w| format!("{w:.0} W"))),
            na(g.temperature_c.map(|t| format!("{t} C"))),
            na(g.fan_speed_pct.map(|f| format!("{f} %"))),
        ));
    }
    for f in node_findings(r.findings) {
        let head = format!("node: {}: {}", f.action.as_str(), f.check);
        let head = if r.colour {
            format!("\x1b[{}m{head}\x1b[0m", colour_of(Some(f.action)))
        } else {
            head
        };
        lines.push(format!("{head}: {}", printable(&f.message)));
    }
    match r.redraw {
        // In place: home, each line cleared to its end, the rest of the
        // screen cleared (the first refresh clears it all).
        Some(first) => {
            let mut s = String::from(if first { "\x1b[2J\x1b[H" } else { "\x1b[H" });
            for l in lines {
                s.push_str(&l);
                s.push_str("\x1b[K\n");
            }
            s.push_str("\x1b[J");
            s
        }
        None => {
            let mut s = lines.join("\n");
            s.push_str("\n\n");
            s
        }
    }
}

fn csv(r: &Refresh<'_>) -> String {
    let time = smi_timestamp(r.now_ms);
    let mut s = String::new();
    if let Some(e) = r.nvml_error {
        s.push_str(&format!("# {time}: NVML: {}\n", printable(e)));
    }
    for g in r.gpus {
        let h = Health::of(g, r.findings);
        s.push_str(&format!(
            "{time}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}\n",
            g.index,
            printable(g.name.as_deref().unwrap_or("[N/A]")).replace(',', " "),
            na(g.utilization_gpu_pct.map(|u| format!("{u} %"))),
            na(mib(g.memory_used_bytes).map(|m| format!("{m} MiB"))),
            na(mib(g.memory_total_bytes).map(|m| format!("{m} MiB"))),
            na(watts(g.power_usage_mw).map(|w| format!("{w:.2} W"))),
            na(watts(g.power_limit_mw).map(|w| format!("{w:.2} W"))),
            na(g.temperature_c.map(|t| t.to_string())),
            na(g.fan_speed_pct.map(|f| format!("{f} %"))),
            h.text()
        ));
    }
    for f in node_findings(r.findings) {
        s.push_str(&format!(
            "# {time}: node: {}: {}: {}\n",
            f.action.as_str(),
            f.check,
            printable(&f.message)
        ));
    }
    s
}

fn json_lines(r: &Refresh<'_>) -> String {
    let time = gpu_health_core::time::format_utc_ms(r.now_ms);
    let mut s = String::new();
    if let Some(e) = r.nvml_error {
        s.push_str(&format!("{}\n", json!({ "time": time, "nvml_error": e })));
    }
    for g in r.gpus {
        let h = Health::of(g, r.findings);
        let mut m = Map::new();
        m.insert("time".into(), time.clone().into());
        m.insert("index".into(), g.index.into());
        m.insert("name".into(), g.name.clone().into());
        m.insert("uuid".into(), g.uuid.clone().into());
        m.insert("pci".into(), g.pci_bus_id.clone().into());
        m.insert("utilization_gpu_pct".into(), g.utilization_gpu_pct.into());
        m.insert("memory_used_mib".into(), mib(g.memory_used_bytes).into());
        m.insert("memory_total_mib".into(), mib(g.memory_total_bytes).into());
        m.insert("power_draw_w".into(), watts(g.power_usage_mw).into());
        m.insert("power_limit_w".into(), watts(g.power_limit_mw).into());
        m.insert("temperature_c".into(), g.temperature_c.into());
        m.insert("fan_speed_pct".into(), g.fan_speed_pct.into());
        m.insert("health".into(), h.word().into());
        m.insert("findings".into(), h.checks.clone().into());
        s.push_str(&format!("{}\n", Value::Object(m)));
    }
    let node = node_findings(r.findings);
    if !node.is_empty() {
        let worst = node
            .iter()
            .map(|f| f.action)
            .max()
            .map_or("ok", Action::as_str);
        let findings: Vec<Value> = node
            .iter()
            .map(|f| json!({ "check": f.check, "action": f.action.as_str(), "message": f.message }))
            .collect();
        s.push_str(&format!(
            "{}\n",
            json!({ "time": time, "node": r.node, "health": worst, "findings": findings })
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32) -> GpuSnapshot {
        GpuSnapshot {
            index,
            name: Some("NVIDIA H100 80GB HBM3".into()),
            ..GpuSnapshot::default()
        }
    }

    fn refresh_of<'a>(gpus: &'a [GpuSnapshot], findings: &'a [Finding], format: Format) -> String {
        refresh(&Refresh {
            node: "n1",
            gpus,
            findings,
            nvml_error: None,
            config_error: None,
            format,
            colour: false,
            redraw: None,
            interval: Duration::from_secs(5),
            now_ms: 0,
        })
    }

    #[test]
    fn health_names_the_gpus_own_checks() {
        let g = gpu(2);
        let pcie = Finding::gpu("pcie-link", Action::Warn, 2, None, "s".into(), "m".into());
        let other = Finding::gpu(
            "ecc-uncorrected",
            Action::Drain,
            3,
            None,
            "s".into(),
            "m".into(),
        );
        let h = Health::of(&g, &[pcie, other]);
        assert_eq!((h.word(), h.text().as_str()), ("warn", "warn: pcie-link"));
        assert_eq!(Health::of(&g, &[]).text(), "ok");
    }

    /// Issue 24: one node-level finding (a lost GPU, the GPU count)
    /// painted `fatal: gpu-count` on every row; it is a line of its own
    /// now, and only the lost GPU's row says so.
    #[test]
    fn node_findings_are_a_line_of_their_own() {
        let mut gpus: Vec<GpuSnapshot> = (0..8).map(gpu).collect();
        gpus[5].lost = true;
        let count = Finding::node(
            "gpu-count",
            Action::Drain,
            "GPU count 7 of 8".into(),
            "GPU count 7 of 8; GPU5 lost".into(),
        );
        let findings = [count];
        let table = refresh_of(&gpus, &findings, Format::Table);
        let rows: Vec<&str> = table.lines().filter(|l| l.contains("H100")).collect();
        assert_eq!(rows.len(), 8);
        assert_eq!(
            rows.iter().filter(|l| l.ends_with("  ok")).count(),
            7,
            "{table}"
        );
        assert!(rows[5].ends_with("drain: gpu-lost"), "{table}");
        assert!(!table.contains("fatal"));
        assert!(
            table.contains("node: drain: gpu-count: GPU count 7 of 8; GPU5 lost"),
            "{table}"
        );
        let csv = refresh_of(&gpus, &findings, Format::Csv);
        assert_eq!(
            csv.lines().filter(|l| l.ends_with(", ok")).count(),
            7,
            "{csv}"
        );
        assert!(csv.contains("node: drain: gpu-count: "), "{csv}");
        let json = refresh_of(&gpus, &findings, Format::Json);
        let rows: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 9);
        assert_eq!(rows[5]["health"], "drain");
        assert_eq!(rows[0]["health"], "ok");
        assert_eq!(rows[8]["findings"][0]["check"], "gpu-count");
    }

    #[test]
    fn redrawn_in_place_on_a_terminal() {
        let gpus = [gpu(0)];
        let mut r = Refresh {
            node: "n1",
            gpus: &gpus,
            findings: &[],
            nvml_error: Some("NVML did not answer within 1500 ms"),
            config_error: None,
            format: Format::Table,
            colour: false,
            redraw: Some(true),
            interval: Duration::from_secs(5),
            now_ms: 0,
        };
        assert!(refresh(&r).starts_with("\x1b[2J\x1b[H"));
        r.redraw = Some(false);
        let s = refresh(&r);
        assert!(s.starts_with("\x1b[H") && s.ends_with("\x1b[J"));
        assert!(s.contains("NVML: NVML did not answer within 1500 ms\x1b[K"));
    }

    #[test]
    fn nvidia_smis_timestamp() {
        let t = smi_timestamp(1_700_000_000_123);
        assert_eq!(t.len(), "2023/11/14 22:13:20.123".len(), "{t}");
        assert!(t.ends_with(".123") && t.as_bytes()[4] == b'/', "{t}");
    }
}
