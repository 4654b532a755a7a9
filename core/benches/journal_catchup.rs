//! Catching up a journal backlog (figures in docs/benchmarks.md, "Journal
//! backlog"): a journal directory (written by systemd-journal-remote)
//! with a cursor at its start and a backlog after it of kernel entries,
//! nine in ten of them NVRM lines that are no Xids, with an Xid 79 early
//! on; then `xid::scan` from that cursor, run after run as the prolog
//! would, each timed, until the cursor reaches the end (or stalls).
//!
//! Not criterion: each run is one measurement, and the point is how many
//! runs it takes. Only what the base commit has too is used, so the same
//! file measures either.
//!
//! ```text
//! cargo bench -p gpu-health-core --bench journal_catchup
//! JOURNAL_BACKLOG_DIR=/tmp/j JOURNAL_BACKLOG_MB=1024 cargo bench -p gpu-health-core --bench journal_catchup
//! ```
//!
//! - `JOURNAL_BACKLOG_DIR`: keep the journal there (made once, reused while
//!   its `ready` file is there); default a temporary directory.
//! - `JOURNAL_BACKLOG_MB`: size of the journal files to write (default 128).
//! - `JOURNAL_TIMEOUT_MS`: `journal_timeout_ms` (default the default).
//! - `JOURNAL_MAX_RUNS`: give up after this many runs (default 100).
//! - `JOURNALCTL`: the journalctl to run (e.g. a wrapper that refuses
//!   `--grep`, as one built without PCRE2 does).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use gpu_health_core::snapshot::{GpuSnapshot, NodeSnapshot};
use gpu_health_core::xid::{scan, Cursor, XidConfig, XidState, JOURNAL};

/// Entries per call of systemd-journal-remote.
const CHUNK: u64 = 200_000;
const BOOT: &str = "0123456789abcdef0123456789abcdef";

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn journal_remote() -> PathBuf {
    [
        "/lib/systemd/systemd-journal-remote",
        "/usr/lib/systemd/systemd-journal-remote",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("systemd-journal-remote (apt-get install systemd-journal-remote)")
}

fn message(i: u64) -> String {
    match i {
        10 => "NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
            .to_string(),
        i if i % 10 == 0 => format!(
            "mlx5_core 0000:c1:00.0: mlx5_fw_tracer_handle_traces: FW tracer event {i} dropped"
        ),
        i => format!(
            "NVRM: nvAssertOkFailedNoLog: Assertion failed: Failure: Generic Error \
             [NV_ERR_GENERIC] (0x0000FFFF) returned from pRmApi->Control(pRmApi, hClient, \
             hObject, NV2080_CTRL_CMD_GPU_GET_INFO_V2) @ kern_bus_gm107.c:{} seq {i}",
            i % 5000
        ),
    }
}

/// Append entries `from..to` (one a millisecond from `start_us`).
fn append(dir: &Path, start_us: u64, from: u64, to: u64) {
    let export = dir.join("chunk.export");
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&export).expect("export"));
    for i in from..to {
        let us = start_us + i * 1000;
        let msg = if i == 0 {
            "usb 1-1: new high-speed USB device (the cursor's entry)".to_string()
        } else {
            message(i)
        };
        write!(
            w,
            "__REALTIME_TIMESTAMP={us}\n__MONOTONIC_TIMESTAMP={}\n_BOOT_ID={BOOT}\n\
             _TRANSPORT=kernel\nPRIORITY=4\nSYSLOG_FACILITY=0\nSYSLOG_IDENTIFIER=kernel\n\
             MESSAGE={msg}\n\n",
            1_000_000 + i * 1000
        )
        .expect("write");
    }
    w.flush().expect("flush");
    drop(w);
    let out = Command::new(journal_remote())
        .arg(format!("--output={}", dir.join("node.journal").display()))
        .arg(&export)
        .output()
        .expect("systemd-journal-remote");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&export).ok();
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("journal dir")
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The cursor of the journal's last entry.
fn last_cursor(dir: &Path) -> String {
    let out = Command::new("journalctl")
        .arg(format!("--directory={}", dir.display()))
        .args(["--no-pager", "-q", "-o", "json", "-n", "1"])
        .output()
        .expect("journalctl");
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("journalctl -o json -n 1");
    v["__CURSOR"].as_str().expect("__CURSOR").to_string()
}

/// Make the journal (unless it is there): one entry, its cursor, then
/// the backlog; returns the cursor of the first entry.
fn prepare(dir: &Path, target_bytes: u64) -> String {
    let ready = dir.join("ready");
    if let Ok(cursor) = std::fs::read_to_string(&ready) {
        eprintln!("journal backlog: reusing {}", dir.display());
        return cursor;
    }
    std::fs::create_dir_all(dir).expect("journal dir");
    let t = Instant::now();
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64;
    let start_us = now_us - 3 * 3_600_000_000;
    append(dir, start_us, 0, 1);
    let cursor = last_cursor(dir);
    let mut next = 1;
    while dir_bytes(dir) < target_bytes {
        append(dir, start_us, next, next + CHUNK);
        next += CHUNK;
    }
    eprintln!(
        "journal backlog: {} entries after the cursor, {:.0} MB of journal files, written in {:.0} s",
        next - 1,
        dir_bytes(dir) as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    std::fs::write(&ready, &cursor).expect("ready");
    cursor
}

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:")?.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list`: nothing to list
    }
    let keep = std::env::var_os("JOURNAL_BACKLOG_DIR").map(PathBuf::from);
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = keep.unwrap_or_else(|| temp.path().join("journal"));
    let target = env_u64("JOURNAL_BACKLOG_MB", 128) * 1_000_000;
    let start = prepare(&dir, target);
    let end = last_cursor(&dir);
    let defaults = XidConfig::default();
    let cfg = XidConfig {
        journal_path: Some(dir.clone()),
        journal_timeout_ms: env_u64("JOURNAL_TIMEOUT_MS", defaults.journal_timeout_ms),
        journalctl: std::env::var_os("JOURNALCTL")
            .map_or(defaults.journalctl.clone(), PathBuf::from),
        ..defaults
    };
    let snapshot = NodeSnapshot {
        gpus: vec![GpuSnapshot {
            index: 1,
            pci_bus_id: Some("0000:18:00.0".into()),
            ..GpuSnapshot::default()
        }],
        ..NodeSnapshot::default()
    };
    let max_runs = env_u64("JOURNAL_MAX_RUNS", 100);
    let mut state = XidState {
        cursor: Some(Cursor::Journal { cursor: start }),
        ..XidState::fresh()
    };
    let (mut total_s, mut stalled) = (0.0, 0);
    for run in 1..=max_runs {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        let before = state.cursor.clone();
        let t = Instant::now();
        let s = scan(Path::new(JOURNAL), state, &cfg, &snapshot, now_ms);
        let took = t.elapsed().as_secs_f64();
        total_s += took;
        let findings: Vec<String> = s.findings.iter().map(|f| f.summary.clone()).collect();
        let at_end = matches!(&s.state.cursor, Some(Cursor::Journal { cursor }) if *cursor == end);
        println!(
            "run {run:3}: {took:6.2} s, {} events, findings {findings:?}, cursor {}, notes {:?}",
            s.events.len(),
            if s.state.cursor == before {
                "unchanged"
            } else if at_end {
                "at the end"
            } else {
                "moved"
            },
            s.notes
        );
        stalled = if s.state.cursor == before {
            stalled + 1
        } else {
            0
        };
        state = s.state;
        if at_end {
            println!(
                "caught up in {run} runs, {total_s:.1} s of scans; peak RSS {} kB",
                vm_hwm_kb()
            );
            return;
        }
        if stalled == 3 {
            println!(
                "stalled: the cursor did not move in 3 runs ({run} runs, {total_s:.1} s); peak RSS {} kB",
                vm_hwm_kb()
            );
            return;
        }
    }
    println!("not caught up in {max_runs} runs ({total_s:.1} s)");
}
