//! `gpu-health xids [--json] [--no-probe] [FILE]`: the NVIDIA Xid and SXid
//! events of a kernel log, with the action the policy gives each; exit 1
//! when one drains, as grep exits 1 on a match (its table: `commands`).
//! `gpu-health xids --catalog [CODE]`: the Xid table with the site's
//! overrides applied.

use gpu_health_core::time::format_utc_ms as format_utc;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpu_health_core::config::{CodeKey, Config, PolicyAction, XidConfig};
use gpu_health_core::probe;
use gpu_health_core::run::RunContext;
use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::text::printable;
use gpu_health_core::xid::{self, EventKind, Policy, RepeatHistory, Seen, XidEvent};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::spec::Parsed;

/// Mapping addresses to GPU indices is a nicety: never wait long for it.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

/// Exit: 0 no event that drains, 1 an event that drains, 2 the log could
/// not be read or a configuration error (see the command's table).
pub fn run(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let opts = Options {
        json: p.flag("json"),
        probe: !p.flag("no-probe"),
        file: p.operand(0).map(PathBuf::from),
    };
    let ctx = start();
    let config = ctx.config();
    let config_error = ctx.loaded.error.as_ref().map(|e| e.to_string());
    if let Some(e) = &config_error {
        if opts.json {
            println!("{}", json!({ "configuration_error": e }));
        } else {
            println!(
                "configuration error: {}\n  (the actions below are the built-in policy's: gpu-health config check)",
                printable(e)
            );
        }
    }
    let code = if p.flag("catalog") {
        print_catalog(&config.xid, p.operand(0), opts.json)
    } else {
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
    };
    if config_error.is_some() {
        2
    } else {
        code
    }
}

struct Options {
    json: bool,
    probe: bool,
    file: Option<PathBuf>,
}

fn run_with_snapshot(opts: &Options, config: &Config, snapshot: &NodeSnapshot) -> i32 {
    let path: &Path = opts.file.as_deref().unwrap_or(&config.kernel_log);
    let now = gpu_health_core::time::unix_ms();
    let read = match xid::read_since(path, None, &config.xid, snapshot, now) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpu-health xids: {e}");
            return 2;
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
    i32::from(drains(&read.events, &policy, now))
}

/// Whether the events hold one that drains under `policy`, repeat rules
/// counted over the events themselves (as the node's first scan of them
/// would).
fn drains(events: &[XidEvent], policy: &Policy, now_ms: u64) -> bool {
    xid::judge(
        events,
        policy,
        &mut RepeatHistory::default(),
        now_ms,
        Seen::BeforeThisRun,
    )
    .iter()
    .any(|f| f.action.drains())
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

/// The action the site's `[xid]` gives `key`, when it overrides the
/// built-in one (`actions`, or a rule's action or repeat).
fn site_action(cfg: &XidConfig, key: CodeKey) -> Option<(Option<PolicyAction>, u32, u32)> {
    let matches = |k: &String| CodeKey::parse(k) == Some(key);
    let action = cfg
        .actions
        .iter()
        .find(|(k, _)| matches(k))
        .map(|(_, a)| *a);
    let rule = cfg.rules.iter().find(|(k, _)| matches(k)).map(|(_, r)| r);
    match (action, rule) {
        (None, None) => None,
        (a, Some(r)) => Some((a.or(r.action), r.repeat, r.window_minutes)),
        (a, None) => Some((a, 1, 60)),
    }
}

fn builtin(d: xid::DefaultAction) -> &'static str {
    match d {
        xid::DefaultAction::Fixed(a) => a.as_str(),
        xid::DefaultAction::FollowRecoveryAction => "by-recovery-action",
        xid::DefaultAction::BySeverityWord => "by-fatal-word",
    }
}

/// One catalog row: code, the action in force, the built-in one, and
/// NVIDIA's words.
struct CatalogRow {
    key: String,
    action: String,
    builtin: &'static str,
    site: bool,
    nvidia: &'static str,
    source: &'static str,
    meaning: String,
}

fn catalog_rows(cfg: &XidConfig) -> Vec<CatalogRow> {
    let effective = |key: CodeKey, builtin: &'static str| match site_action(cfg, key) {
        None => (builtin.to_string(), false),
        Some((action, repeat, window)) => {
            let a = action.map_or(builtin, PolicyAction::as_str);
            let text = if repeat > 1 {
                format!("{a} after {repeat} in {window} min")
            } else {
                a.to_string()
            };
            (text, true)
        }
    };
    let mut rows: Vec<CatalogRow> = xid::CATALOG
        .iter()
        .map(|e| {
            let b = builtin(e.default);
            let (action, site) = effective(CodeKey::Xid(e.code), b);
            CatalogRow {
                key: e.code.to_string(),
                action,
                builtin: b,
                site,
                nvidia: e.resolution.as_str(),
                source: e.source.as_str(),
                meaning: e.meaning.to_string(),
            }
        })
        .collect();
    // Codes the site names that the table has not: unknown Xids, SXids.
    let mut extra: Vec<CodeKey> = cfg
        .actions
        .keys()
        .chain(cfg.rules.keys())
        .filter_map(|k| CodeKey::parse(k))
        .filter(|k| !matches!(k, CodeKey::Xid(c) if xid::entry(*c).is_some()))
        .collect();
    extra.sort();
    extra.dedup();
    for key in extra {
        let (name, b, meaning) = match key {
            CodeKey::Xid(c) => (
                c.to_string(),
                cfg.default_action.as_str(),
                "not in the table: xid.default_action".to_string(),
            ),
            CodeKey::Sxid(c) => (
                format!("sxid-{c}"),
                "by-fatal-word",
                "NVSwitch error: xid.sxid_fatal_action or sxid_default_action".to_string(),
            ),
        };
        let (action, site) = effective(key, b);
        rows.push(CatalogRow {
            key: name,
            action,
            builtin: b,
            site,
            nvidia: "-",
            source: "-",
            meaning,
        });
    }
    rows
}

/// The Xid table with the site's overrides, or the row of `code`.
fn print_catalog(cfg: &XidConfig, code: Option<&str>, json: bool) -> i32 {
    let mut rows = catalog_rows(cfg);
    if let Some(code) = code {
        let Some(key) = CodeKey::parse(code) else {
            eprintln!(
                "gpu-health xids: {:?} is neither an Xid code (79) nor an SXid (sxid-12028)",
                printable(code)
            );
            return 2;
        };
        let name = match key {
            CodeKey::Xid(c) => c.to_string(),
            CodeKey::Sxid(c) => format!("sxid-{c}"),
        };
        rows.retain(|r| r.key == name);
        if rows.is_empty() {
            // Not in the table and not configured: what applies to it.
            let (action, meaning) = match key {
                CodeKey::Xid(_) => (
                    cfg.default_action.as_str(),
                    "not in the table: xid.default_action",
                ),
                CodeKey::Sxid(_) => (
                    "by-fatal-word",
                    "NVSwitch error: xid.sxid_fatal_action or sxid_default_action",
                ),
            };
            rows.push(CatalogRow {
                key: name,
                action: action.to_string(),
                builtin: action,
                site: false,
                nvidia: "-",
                source: "-",
                meaning: meaning.to_string(),
            });
        }
    }
    if !json {
        println!(
            "{:<10} {:<28} {:<18} {:<26} {:<18} MEANING",
            "CODE", "ACTION", "BUILT-IN", "NVIDIA", "SOURCE"
        );
    }
    for r in &rows {
        if json {
            let mut m = Map::new();
            match r.key.strip_prefix("sxid-") {
                Some(c) => m.insert("sxid".into(), c.parse::<u32>().unwrap_or(0).into()),
                None => m.insert("xid".into(), r.key.parse::<u32>().unwrap_or(0).into()),
            };
            m.insert("action".into(), r.action.clone().into());
            m.insert("site".into(), r.site.into());
            m.insert("default".into(), r.builtin.into());
            m.insert("nvidia".into(), r.nvidia.into());
            m.insert("source".into(), r.source.into());
            m.insert("meaning".into(), r.meaning.clone().into());
            if let Some(e) = r.key.parse().ok().and_then(xid::entry) {
                m.insert("why".into(), e.why.into());
            }
            println!("{}", Value::Object(m));
        } else {
            let action = if r.site {
                format!("{} (site)", r.action)
            } else {
                r.action.clone()
            };
            println!(
                "{:<10} {:<28} {:<18} {:<26} {:<18} {}",
                r.key, action, r.builtin, r.nvidia, r.source, r.meaning
            );
        }
    }
    0
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
        if ev.forgeable {
            message = format!("(forgeable: a line users can write) {message}");
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

    fn parsed(a: &[&str]) -> Result<Parsed, String> {
        match crate::spec::parse(&crate::commands::XIDS, &args(a))? {
            crate::spec::Outcome::Run(p) => Ok(p),
            crate::spec::Outcome::Help => Err("help".into()),
        }
    }

    #[test]
    fn usage_errors() {
        assert!(parsed(&["--jsn"]).is_err());
        assert!(parsed(&["a", "b"]).is_err());
        let o = parsed(&["--json", "/var/log/kern.log"]).unwrap();
        assert!(o.flag("json") && !o.flag("no-probe"));
        assert_eq!(o.operand(0), Some("/var/log/kern.log"));
        assert_eq!(parsed(&["--help"]).unwrap_err(), "help");
        assert!(parsed(&["--catalog"]).unwrap().flag("catalog"));
    }

    /// Issue 24: `xids --catalog 79` showed every row and the built-in
    /// action, not the site's override.
    #[test]
    fn the_catalog_shows_the_sites_action() {
        let cfg = gpu_health_core::config::parse(
            Path::new("/etc/slurm/gpu-health.toml"),
            "[xid.actions]\n79 = \"warn\"\nsxid-12028 = \"drain\"\n[xid.rules.31]\naction = \"drain\"\nrepeat = 3\n",
            None,
        )
        .unwrap()
        .xid;
        let rows = catalog_rows(&cfg);
        let row = |k: &str| rows.iter().find(|r| r.key == k).unwrap();
        assert_eq!(
            (row("79").action.as_str(), row("79").builtin, row("79").site),
            ("warn", "drain", true)
        );
        assert_eq!(row("31").action, "drain after 3 in 60 min");
        assert_eq!(row("48").action, "drain");
        assert!(!row("48").site);
        assert_eq!(row("sxid-12028").action, "drain");
    }

    /// Issue 24: `xids` exited 0 with Xid 79 and 48 in the file; like
    /// grep it exits 1 when what matters (an event that drains) is there.
    #[test]
    fn an_event_that_drains_is_exit_1() {
        let cfg = Config::default();
        let policy = Policy::from_config(&cfg.xid);
        let read = |text: &str| {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("kern.log");
            std::fs::write(&file, text).unwrap();
            xid::read_since(&file, None, &cfg.xid, &NodeSnapshot::default(), 0)
                .unwrap()
                .events
        };
        let fatal =
            read("[ 5.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=2210, GPU has fallen off the bus.\n");
        assert!(drains(&fatal, &policy, 0));
        let mild = read("[ 5.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=2210, Graphics Exception\n");
        assert!(!mild.is_empty() && !drains(&mild, &policy, 0));
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
