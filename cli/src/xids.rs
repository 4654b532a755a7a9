//! `gpu-health xids [--json] [--no-probe] [FILE]`: the NVIDIA Xid and SXid
//! events of a kernel log, with the action the policy gives each;
//! `gpu-health xids --catalog [--json]`: the built-in Xid table.

use gpu_health_core::time::format_utc_ms as format_utc;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpu_health_core::config::Config;
use gpu_health_core::probe;
use gpu_health_core::run::RunContext;
use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::text::printable;
use gpu_health_core::xid::{self, EventKind, Policy, XidEvent};
use serde::Serialize;
use serde_json::{Map, Value};

const USAGE: &str = "usage: gpu-health xids [--json] [--no-probe] [FILE] | --catalog [--json]";
/// Mapping addresses to GPU indices is a nicety: never wait long for it.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

/// `args` are the words after `xids`. Exit: 0 listed (with or without
/// events), 1 the log could not be read, 2 usage error.
pub fn run(args: &[String], start: impl FnOnce() -> RunContext) -> i32 {
    let opts = match parse_args(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!(
                "{USAGE}\n\nThe NVIDIA Xid and SXid events of FILE (default: the configured kernel_log)\n\
                 with the action gpu-health's policy gives each (FILE may be `journal`).\n  \
                 --json      one JSON object per event (or per catalog row)\n  \
                 --no-probe  do not ask NVML which GPU index a PCI address is\n  \
                 --catalog   the built-in Xid table: default action, NVIDIA's action, usual source"
            );
            return 0;
        }
        Err(e) => return crate::usage_error("xids", e, USAGE),
    };
    if opts.catalog {
        print_catalog(opts.json);
        return 0;
    }
    let ctx = start();
    let config = ctx.config();
    let snapshot = if opts.probe {
        let deadline = Duration::from_millis(config.nvml_deadline_ms).min(PROBE_DEADLINE);
        probe::probe_with_deadline(
            config.nvml_library.as_deref(),
            probe::ProbeOptions::default(),
            deadline,
        )
    } else {
        NodeSnapshot::default()
    };
    run_with_snapshot(&opts, config, &snapshot)
}

struct Options {
    json: bool,
    probe: bool,
    catalog: bool,
    file: Option<PathBuf>,
}

/// `Ok(None)` for --help.
fn parse_args(args: &[String]) -> Result<Option<Options>, lexopt::Error> {
    use lexopt::Arg::{Long, Short, Value};
    let mut opts = Options {
        json: false,
        probe: true,
        catalog: false,
        file: None,
    };
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next()? {
        match arg {
            Long("json") => opts.json = true,
            Long("no-probe") => opts.probe = false,
            Long("catalog") => opts.catalog = true,
            Long("help") | Short('h') => return Ok(None),
            Value(v) if opts.file.is_none() => opts.file = Some(PathBuf::from(v)),
            other => return Err(other.unexpected()),
        }
    }
    Ok(Some(opts))
}

fn run_with_snapshot(opts: &Options, config: &Config, snapshot: &NodeSnapshot) -> i32 {
    let path: &Path = opts.file.as_deref().unwrap_or(&config.kernel_log);
    let now = gpu_health_core::time::unix_ms();
    let read = match xid::read_since(path, None, &config.xid, snapshot, now) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpu-health xids: {e}");
            return 1;
        }
    };
    for note in &read.notes {
        eprintln!("gpu-health xids: {note}");
    }
    let policy = Policy::from_config(&config.xid);
    if opts.json {
        // Buffered: a line-buffered stdout would make a system call (and
        // wake a pipe's reader) per event.
        let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
        let written = read
            .events
            .iter()
            .try_for_each(|ev| {
                serde_json::to_writer(&mut out, &json_event(ev, &policy))?;
                out.write_all(b"\n")
            })
            .and_then(|()| out.flush());
        if let Err(e) = written {
            eprintln!("gpu-health xids: cannot write the events: {e}");
            return 1;
        }
    } else {
        print_table(&read.events, &policy);
    }
    0
}

/// One event as `--json` prints it: the keys in alphabetical order (as
/// a JSON map would print them), `xid` or `sxid` by its kind. A struct
/// rather than a map: printed for every event of a log, it must cost
/// little next to reading the log.
#[derive(Serialize)]
struct JsonEvent<'a> {
    action: &'static str,
    count: u64,
    fallen_off_bus: bool,
    forgeable: bool,
    gpu: Option<u32>,
    gpu_instance: Option<u32>,
    message: &'a str,
    monotonic_us: Option<u64>,
    pci: Option<&'a str>,
    pid: Option<u32>,
    process: Option<&'a str>,
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sxid: Option<u32>,
    time: Option<String>,
    time_ms: Option<u64>,
    uuid: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    xid: Option<u32>,
}

fn json_event<'a>(ev: &'a XidEvent, policy: &Policy) -> JsonEvent<'a> {
    JsonEvent {
        action: policy.decide(ev).action.as_str(),
        count: ev.count,
        fallen_off_bus: ev.fallen_off_bus,
        forgeable: ev.forgeable,
        gpu: ev.gpu,
        gpu_instance: ev.gpu_instance,
        message: &ev.message,
        monotonic_us: ev.monotonic_us,
        pci: ev.pci.as_deref(),
        pid: ev.pid,
        process: ev.process.as_deref(),
        seq: ev.seq,
        sxid: (ev.kind == EventKind::Sxid).then_some(ev.code),
        time: ev.time_ms.map(format_utc),
        time_ms: ev.time_ms,
        uuid: ev.uuid.as_deref(),
        xid: (ev.kind == EventKind::Xid).then_some(ev.code),
    }
}

/// The one Xid table, as the policy uses it before any override.
fn print_catalog(json: bool) {
    for e in xid::CATALOG {
        let default = match e.default {
            xid::DefaultAction::Fixed(a) => a.as_str(),
            xid::DefaultAction::FollowRecoveryAction => "by-recovery-action",
            xid::DefaultAction::BySeverityWord => "by-fatal-word",
        };
        if json {
            let mut m = Map::new();
            m.insert("xid".into(), e.code.into());
            m.insert("meaning".into(), e.meaning.into());
            m.insert("default".into(), default.into());
            m.insert("nvidia".into(), e.resolution.as_str().into());
            m.insert("source".into(), e.source.as_str().into());
            m.insert("why".into(), e.why.into());
            println!("{}", Value::Object(m));
        } else {
            println!(
                "{:<4} {:<18} {:<26} {:<18} {}",
                e.code,
                default,
                e.resolution.as_str(),
                e.source.as_str(),
                e.meaning
            );
        }
    }
}

fn print_table(events: &[XidEvent], policy: &Policy) {
    if events.is_empty() {
        println!("no Xid events");
        return;
    }
    println!(
        "{:<24} {:<10} {:<5} {:<12} {:<8} {:<14} {:<17} MESSAGE",
        "TIME", "EVENT", "GPU", "PCI", "PID", "PROCESS", "ACTION"
    );
    for ev in events {
        let time = match (ev.time_ms, ev.monotonic_us) {
            (Some(t), _) => format_utc(t),
            (None, Some(us)) => format!("boot+{}.{:06}s", us / 1_000_000, us % 1_000_000),
            (None, None) => "-".into(),
        };
        let dash = |s: Option<String>| s.map_or_else(|| "-".into(), |s| printable(&s).into_owned());
        let mut message = if ev.fallen_off_bus {
            format!("(fallen off the bus) {}", ev.message)
        } else {
            ev.message.clone()
        };
        if ev.count > 1 {
            message = format!("(x{}) {message}", ev.count);
        }
        println!(
            "{:<24} {:<10} {:<5} {:<12} {:<8} {:<14} {:<17} {}",
            time,
            ev.label(),
            dash(ev.gpu.map(|g| g.to_string())),
            dash(ev.pci.clone()),
            dash(ev.pid.map(|p| p.to_string())),
            dash(ev.process.clone()),
            policy.decide(ev).action.as_str(),
            printable(&message),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn usage_errors() {
        assert!(parse_args(&args(&["--jsn"])).is_err());
        assert!(parse_args(&args(&["a", "b"])).is_err());
        let o = parse_args(&args(&["--json", "/var/log/kern.log"]))
            .unwrap()
            .unwrap();
        assert!(o.json && o.probe);
        assert_eq!(o.file.as_deref(), Some(Path::new("/var/log/kern.log")));
        assert!(parse_args(&args(&["--help"])).unwrap().is_none());
        assert!(parse_args(&args(&["--catalog"])).unwrap().unwrap().catalog);
    }

    #[test]
    fn json_shape() {
        let line = "[ 5.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=2210, GPU has fallen off the bus.\n\
                    [ 6.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32\n";
        let dir = std::env::temp_dir().join(format!("gpu-health-xids-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("dmesg.txt");
        std::fs::write(&file, line).unwrap();
        let cfg = Config::default();
        let read = xid::read_since(&file, None, &cfg.xid, &NodeSnapshot::default(), 0).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let policy = Policy::from_config(&cfg.xid);
        let a = serde_json::to_value(json_event(&read.events[0], &policy)).unwrap();
        assert_eq!(a["xid"], 79);
        assert_eq!(a["pci"], "0000:3b:00.0");
        assert_eq!(a["pid"], 2210);
        assert_eq!(a["process"], Value::Null);
        assert_eq!(a["action"], "drain");
        assert_eq!(a["message"], "GPU has fallen off the bus.");
        let b = serde_json::to_value(json_event(&read.events[1], &policy)).unwrap();
        assert_eq!(b["sxid"], 12028);
        assert!(b.get("xid").is_none());
        assert_eq!(b["action"], "warn");
    }
}
