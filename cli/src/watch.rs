//! `gpu-health watch [-l N] [--count K] [--csv | --json]`: the columns
//! admins read with `nvidia-smi --query-gpu=index,name,power.draw,
//! power.limit,temperature.gpu,fan.speed --format=csv -l 5`, plus the
//! health of each GPU as gpu-health judges it, every N seconds, through
//! the prolog's own probe, deadline and checks (read only: nothing is
//! drained, no cursor moves). Ctrl-C ends it after the current refresh.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpu_health_core::finding::{Action, Finding};
use gpu_health_core::probe::ProbeOptions;
use gpu_health_core::run::{node_check, RunContext};
use gpu_health_core::snapshot::GpuSnapshot;
use gpu_health_core::text::printable;
use serde_json::{Map, Value};

const USAGE: &str = "usage: gpu-health watch [-l SECONDS] [--count N] [--csv | --json]";
/// The header `nvidia-smi --format=csv` prints for these columns, and ours.
pub const CSV_HEADER: &str =
    "index, name, power.draw [W], power.limit [W], temperature.gpu, fan.speed [%], health";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Table,
    Csv,
    Json,
}

struct Options {
    interval: Duration,
    count: Option<u64>,
    format: Format,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Exit 0 after the last refresh (or Ctrl-C), 2 on a usage error.
pub fn run(args: &[String], start: impl FnOnce() -> RunContext) -> i32 {
    let opts = match parse_args(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!(
                "{USAGE}\n\nThe GPUs' power, temperature and fan, and their health as gpu-health judges it,\n\
                 every SECONDS (default 5) until Ctrl-C or N refreshes, through the prolog's probe.\n  \
                 --csv   nvidia-smi's CSV columns (with its header) plus health\n  --json  one JSON object per GPU and refresh"
            );
            return 0;
        }
        Err(e) => return crate::usage_error("watch", e, USAGE),
    };
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let ctx = start();
    let colour = opts.format == Format::Table
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none();
    let mut out = std::io::stdout().lock();
    let mut done = 0u64;
    if opts.format == Format::Csv && writeln!(out, "{CSV_HEADER}").is_err() {
        return 0;
    }
    while !STOP.load(Ordering::SeqCst) {
        let began = Instant::now();
        let check = node_check::check_node(&ctx, ProbeOptions::default());
        let text = refresh(
            &check.snapshot.gpus,
            &check.findings,
            check.snapshot.nvml_error.as_ref().map(|e| format!("{e:?}")),
            opts.format,
            colour,
        );
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
        done += 1;
        if opts.count.is_some_and(|n| done >= n) {
            break;
        }
        // Sleep in short steps so that Ctrl-C is answered at once.
        let next = began + opts.interval;
        while !STOP.load(Ordering::SeqCst) && Instant::now() < next {
            std::thread::sleep(
                next.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100)),
            );
        }
    }
    0
}

/// One refresh in `format`.
fn refresh(
    gpus: &[GpuSnapshot],
    findings: &[Finding],
    nvml_error: Option<String>,
    format: Format,
    colour: bool,
) -> String {
    let time = gpu_health_core::time::format_utc_ms(gpu_health_core::time::unix_ms());
    let mut s = String::new();
    if format == Format::Table {
        s.push_str(&format!(
            "{time}\n{:<5} {:<26} {:>10} {:>10} {:>6} {:>5}  HEALTH\n",
            "GPU", "NAME", "POWER", "LIMIT", "TEMP", "FAN"
        ));
    }
    if let Some(e) = &nvml_error {
        match format {
            Format::Json => {
                let mut m = Map::new();
                m.insert("time".into(), time.clone().into());
                m.insert("nvml_error".into(), e.clone().into());
                s.push_str(&format!("{}\n", Value::Object(m)));
            }
            _ => s.push_str(&format!("# NVML did not answer: {}\n", printable(e))),
        }
    }
    for g in gpus {
        let health = health(g, findings);
        let watts = |mw: Option<u32>| mw.map(|v| f64::from(v) / 1000.0);
        let name = printable(g.name.as_deref().unwrap_or("-")).into_owned();
        match format {
            Format::Csv => s.push_str(&format!(
                "{}, {name}, {}, {}, {}, {}, {}\n",
                g.index,
                na(watts(g.power_usage_mw).map(|w| format!("{w:.2} W"))),
                na(watts(g.power_limit_mw).map(|w| format!("{w:.2} W"))),
                na(g.temperature_c.map(|t| t.to_string())),
                na(g.fan_speed_pct.map(|f| format!("{f} %"))),
                health.text
            )),
            Format::Json => {
                let mut m = Map::new();
                m.insert("time".into(), time.clone().into());
                m.insert("index".into(), g.index.into());
                m.insert("name".into(), g.name.clone().into());
                m.insert("pci".into(), g.pci_bus_id.clone().into());
                m.insert("power_draw_w".into(), watts(g.power_usage_mw).into());
                m.insert("power_limit_w".into(), watts(g.power_limit_mw).into());
                m.insert("temperature_c".into(), g.temperature_c.into());
                m.insert("fan_speed_pct".into(), g.fan_speed_pct.into());
                m.insert("health".into(), health.level.into());
                m.insert("findings".into(), health.checks.clone().into());
                s.push_str(&format!("{}\n", Value::Object(m)));
            }
            Format::Table => {
                let text = if colour {
                    let code = match health.level {
                        "ok" => "32",
                        "warn" => "33",
                        _ => "31",
                    };
                    format!("\x1b[{code}m{}\x1b[0m", health.text)
                } else {
                    health.text.clone()
                };
                s.push_str(&format!(
                    "{:<5} {:<26} {:>10} {:>10} {:>6} {:>5}  {text}\n",
                    g.index,
                    name,
                    na(watts(g.power_usage_mw).map(|w| format!("{w:.1} W"))),
                    na(watts(g.power_limit_mw).map(|w| format!("{w:.0} W"))),
                    na(g.temperature_c.map(|t| format!("{t} C"))),
                    na(g.fan_speed_pct.map(|f| format!("{f}%"))),
                ));
            }
        }
    }
    s
}

/// nvidia-smi writes `[N/A]` for what the board does not report.
fn na(v: Option<String>) -> String {
    v.unwrap_or_else(|| "[N/A]".into())
}

struct Health {
    level: &'static str,
    text: String,
    checks: Vec<String>,
}

/// The GPU's worst finding (node-wide ones count for every GPU).
fn health(g: &GpuSnapshot, findings: &[Finding]) -> Health {
    let mine: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.gpu.is_none_or(|i| i == g.index) && f.action > Action::Info)
        .collect();
    let worst = mine.iter().map(|f| f.action).max();
    let level = if g.lost {
        "fatal"
    } else {
        worst.map_or("ok", Action::severity)
    };
    let mut checks: Vec<String> = mine.iter().map(|f| f.check.clone()).collect();
    checks.dedup();
    if g.lost && !checks.iter().any(|c| c == "gpu-lost") {
        checks.insert(0, "gpu-lost".into());
    }
    let text = if checks.is_empty() {
        level.to_string()
    } else {
        format!("{level}: {}", checks.join(" "))
    };
    Health {
        level,
        text,
        checks,
    }
}

fn parse_args(args: &[String]) -> Result<Option<Options>, lexopt::Error> {
    use lexopt::prelude::*;
    let mut opts = Options {
        interval: Duration::from_secs(5),
        count: None,
        format: Format::Table,
    };
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next()? {
        match arg {
            Short('l') | Long("loop") => {
                let secs: f64 = parser.value()?.parse()?;
                if !(0.1..=86_400.0).contains(&secs) {
                    return Err("-l wants seconds in 0.1..=86400".into());
                }
                opts.interval = Duration::from_secs_f64(secs);
            }
            Long("count") => {
                let n: u64 = parser.value()?.parse()?;
                if n == 0 {
                    return Err("--count wants at least 1".into());
                }
                opts.count = Some(n);
            }
            Long("csv") => opts.format = Format::Csv,
            Long("json") => opts.format = Format::Json,
            Long("help") | Short('h') => return Ok(None),
            other => return Err(other.unexpected()),
        }
    }
    Ok(Some(opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let o = parse_args(&a(&["-l", "2", "--count", "3", "--csv"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (o.interval, o.count, o.format),
            (Duration::from_secs(2), Some(3), Format::Csv)
        );
        assert!(parse_args(&a(&["-l", "0"])).is_err());
        assert!(parse_args(&a(&["--count", "0"])).is_err());
        assert!(parse_args(&a(&["--bogus"])).is_err());
    }

    #[test]
    fn health_names_the_worst_check() {
        let g = GpuSnapshot {
            index: 2,
            ..GpuSnapshot::default()
        };
        let pcie = Finding::gpu("pcie-link", Action::Warn, 2, None, "s".into(), "m".into());
        let other = Finding::gpu(
            "ecc-uncorrected",
            Action::Drain,
            3,
            None,
            "s".into(),
            "m".into(),
        );
        let h = health(&g, &[pcie, other]);
        assert_eq!((h.level, h.text.as_str()), ("warn", "warn: pcie-link"));
        assert_eq!(health(&g, &[]).text, "ok");
    }
}
