//! `gpu-health watch [-l N] [--count K] [--csv | --json]`: the columns
//! admins read with `nvidia-smi --query-gpu=timestamp,index,name,
//! utilization.gpu,memory.used,memory.total,power.draw,power.limit,
//! temperature.gpu,fan.speed --format=csv -l 5`, plus the health of each
//! GPU as gpu-health judges it, every N seconds, through the prolog's own
//! probe, deadline and checks (read only: nothing is drained, no cursor
//! moves). Ctrl-C ends it after the current refresh.

mod render;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpu_health_core::probe::ProbeOptions;
use gpu_health_core::records::describe_nvml_failure;
use gpu_health_core::run::{node_check, RunContext};

use crate::spec::Parsed;

use render::{Format, Refresh};

struct Options {
    interval: Duration,
    count: Option<u64>,
    format: Format,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Exit 0 after the last refresh (or Ctrl-C) when every refresh reached
/// NVML, 1 when one did not, 2 on a usage or configuration error.
pub fn run(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let opts = match options(p) {
        Ok(o) => o,
        Err(e) => return crate::usage_error(&crate::commands::WATCH, &e),
    };
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let ctx = start();
    let terminal = opts.format == Format::Table && std::io::stdout().is_terminal();
    let colour = terminal && std::env::var_os("NO_COLOR").is_none();
    let config_error = ctx.loaded.error.as_ref().map(|e| e.to_string());
    let mut out = std::io::stdout().lock();
    let mut done = 0u64;
    let mut nvml_failed = false;
    let head = render::head(opts.format, config_error.as_deref());
    if out.write_all(head.as_bytes()).is_err() {
        return 0;
    }
    while !STOP.load(Ordering::SeqCst) {
        let began = Instant::now();
        let check = node_check::check_node(&ctx, ProbeOptions::default());
        let nvml_error = check
            .snapshot
            .nvml_error
            .as_ref()
            .map(describe_nvml_failure);
        nvml_failed |= nvml_error.is_some();
        let text = render::refresh(&Refresh {
            node: ctx.node.as_str(),
            gpus: &check.snapshot.gpus,
            findings: &check.findings,
            nvml_error: nvml_error.as_deref(),
            config_error: config_error.as_deref(),
            format: opts.format,
            colour,
            redraw: terminal.then_some(done == 0),
            interval: opts.interval,
            now_ms: gpu_health_core::time::unix_ms(),
        });
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
    if config_error.is_some() {
        2
    } else {
        i32::from(nvml_failed)
    }
}

const MIN_INTERVAL_S: f64 = 0.1;
const MAX_INTERVAL_S: f64 = 86_400.0;

fn options(p: &Parsed) -> Result<Options, String> {
    let mut opts = Options {
        interval: Duration::from_secs(5),
        count: None,
        format: if p.flag("csv") {
            Format::Csv
        } else if p.flag("json") {
            Format::Json
        } else {
            Format::Table
        },
    };
    if let Some(v) = p.value("loop") {
        let secs = v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && (MIN_INTERVAL_S..=MAX_INTERVAL_S).contains(s));
        let Some(secs) = secs else {
            return Err(format!(
                "option '-l, --loop' wants a number of seconds from {MIN_INTERVAL_S} to \
                 {MAX_INTERVAL_S}, not {:?}",
                gpu_health_core::text::printable(v)
            ));
        };
        opts.interval = Duration::from_secs_f64(secs);
    }
    if let Some(v) = p.value("count") {
        match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 => opts.count = Some(n),
            _ => {
                return Err(format!(
                    "option '--count' wants a number of refreshes, at least 1, not {:?}",
                    gpu_health_core::text::printable(v)
                ))
            }
        }
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse, Outcome};

    fn opts(v: &[&str]) -> Result<Options, String> {
        let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        match parse(&crate::commands::WATCH, &args)? {
            Outcome::Run(p) => options(&p),
            Outcome::Help => Err("help".into()),
        }
    }

    #[test]
    fn arguments() {
        let o = opts(&["-l", "2", "--count", "3", "--csv"]).unwrap();
        assert_eq!(
            (o.interval, o.count, o.format),
            (Duration::from_secs(2), Some(3), Format::Csv)
        );
        assert!(opts(&["--count", "0"]).is_err());
        assert!(opts(&["--bogus"]).is_err());
        assert!(opts(&["-l", "nan"]).is_err());
    }

    /// Issue 24: `-l 0` answered with a Rust range (`0.1..=86400`).
    #[test]
    fn a_bad_interval_is_told_in_words() {
        let e = opts(&["-l", "0"]).err().unwrap();
        assert_eq!(
            e,
            "option '-l, --loop' wants a number of seconds from 0.1 to 86400, not \"0\""
        );
        assert!(!e.contains("..="));
    }

    /// Issue 24: `--json --csv` was accepted (the last won).
    #[test]
    fn formats_exclude_each_other() {
        assert_eq!(
            opts(&["--json", "--csv"]).err().unwrap(),
            "--json and --csv exclude each other"
        );
    }
}
