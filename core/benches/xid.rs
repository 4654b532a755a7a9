//! Xid engine benchmarks (figures in docs/benchmarks.md, "Kernel log").
//!
//! - what `gpu-health xids --json FILE` does with a generated
//!   1,000,000-line dmesg (the file of ci/bench-xids, [`dmesg_line`]):
//!   `read_since` from the start, then the policy's decision for each
//!   event; and `grep -c 'NVRM: Xid'` on the same file in the same run
//!   (ci/bench-xids times the two whole processes);
//! - the prolog's incremental scan of a 1,000,000-line syslog-format log
//!   after 100 new lines;
//! - a scan of a full kmsg ring (16k records, in memory), and of the
//!   host's /dev/kmsg when it is readable (read only);
//! - a storm: one scan of 60,000 distinct (code, PCI) events;
//! - the journal source: a journal file of 1,000,000 entries (written by
//!   systemd-journal-remote when installed), scanned from a cursor at its
//!   end after 100 new entries, and its first scan (the look-back).
//!
//! Run: `cargo bench -p gpu-health-core --bench xid`.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use gpu_health_core::snapshot::NodeSnapshot;
use gpu_health_core::state::StateDir;
use gpu_health_core::xid::{
    read_since, read_source, scan, Cursor, EventKind, KmsgSource, LogSource, MemoryRing, Policy,
    XidConfig, XidState,
};

const HISTORY_LINES: usize = 1_000_000;
const NOW_MS: u64 = 1_795_962_600_000;

/// A plausible kernel/syslog line mix; one Xid per 10,000 lines, one
/// other NVRM line per 1,000, the rest noise.
fn log_line(i: usize) -> String {
    let (h, m, s) = ((i / 3600) % 24, (i / 60) % 60, i % 60);
    let stamp = format!("Nov 29 {h:02}:{m:02}:{s:02} gpu017");
    let mono = i as f64 * 0.137;
    match i % 10_000 {
        0 => format!(
            "{stamp} kernel: [{mono:12.6}] NVRM: Xid (PCI:0000:18:00): 31, pid={}, name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_4c000000",
            1000 + i % 50_000
        ),
        n if n % 1000 == 500 => format!(
            "{stamp} kernel: [{mono:12.6}] NVRM: GPU at PCI:0000:18:00: GPU-4f1b2c3d-0000-4000-8000-0123456789ab"
        ),
        n if n % 3 == 0 => format!(
            "{stamp} slurmd[2211]: launch task StepId={}.0 request from UID:1000 GID:1000 HOST:10.0.0.{} PORT:5432",
            i / 7,
            i % 250
        ),
        n if n % 3 == 1 => format!(
            "{stamp} systemd[1]: Started session-{}.scope - Session {} of User alice.",
            i % 9999,
            i % 9999
        ),
        _ => format!(
            "{stamp} kernel: [{mono:12.6}] e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex, Flow Control: Rx/Tx"
        ),
    }
}

/// Line `i` of the dmesg ci/bench-xids generates (the two make the same
/// bytes): one NVIDIA line in 100 (Xids with and without a MIG instance,
/// 79, 154, 48, an SXid, other NVRM lines), the rest a node's usual
/// kernel lines; 81 bytes a line on average.
fn dmesg_line(i: usize) -> String {
    const NVIDIA: [&str; 10] = [
        "NVRM: Xid (PCI:0000:18:00): 31, pid={p}, name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_4c000000",
        "NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid={p}, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
        "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid={p}, name=a.out, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
        "NVRM: GPU at PCI:0000:18:00: GPU-4f1b2c3d-0000-4000-8000-0123456789ab",
        "nvidia-nvswitch1: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
        "NVRM: GPU 0000:18:00.0: GPU serial number is 1653723052734.",
        "NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  575.51.02  Tue May 13 16:53:40 UTC 2025",
        "NVRM: Xid (PCI:0000:18:00): 154, pid={p}, name=python3, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        "NVRM: Xid (PCI:0000:b5:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
    ];
    let us = i as u64 * 137_000;
    let message = if i % 100 == 0 {
        NVIDIA[(i / 100) % NVIDIA.len()].replace("{p}", &(1000 + i % 50_000).to_string())
    } else {
        match i % 5 {
            0 => "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex".to_string(),
            1 => format!(
                "audit: type=1400 audit(1732885201.{}:{i}): apparmor=\"DENIED\"",
                i % 1000
            ),
            2 => format!(
                "usb 1-1.{}: new high-speed USB device number {} using xhci_hcd",
                i % 8,
                i % 128
            ),
            3 => "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode".to_string(),
            _ => "systemd-journald[812]: Received client request to flush runtime journal."
                .to_string(),
        }
    };
    format!("[{:5}.{:06}] {message}", us / 1_000_000, us % 1_000_000)
}

fn write_lines(path: &Path, lines: usize, line: impl Fn(usize) -> String) {
    let file = std::fs::File::create(path).expect("bench log");
    let mut w = BufWriter::with_capacity(1 << 20, file);
    for i in 0..lines {
        writeln!(w, "{}", line(i)).expect("write");
    }
    w.flush().expect("flush");
}

fn write_log(path: &Path, from: usize, to: usize, append: bool) {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(path)
        .expect("bench log");
    let mut w = BufWriter::with_capacity(1 << 20, file);
    for i in from..to {
        writeln!(w, "{}", log_line(i)).expect("write");
    }
    w.flush().expect("flush");
}

fn min_time(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn grep_count(path: &Path) -> usize {
    let out = Command::new("grep")
        .arg("-c")
        .arg("NVRM: Xid")
        .arg(path)
        .output()
        .expect("grep");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("kern.log");
    let state = StateDir::open(&dir.path().join("state"));
    write_log(&log, 0, HISTORY_LINES, false);
    let cfg = XidConfig::default();
    let snap = NodeSnapshot::default();

    // `gpu-health xids --json FILE`'s work on ci/bench-xids's dmesg, and
    // grep on the same file, side by side (best of 5 each).
    let dmesg = dir.path().join("dmesg.txt");
    write_lines(&dmesg, HISTORY_LINES, dmesg_line);
    let size = std::fs::metadata(&dmesg).expect("dmesg").len();
    let xids_json = || {
        let read = read_since(&dmesg, None, &cfg, &snap, NOW_MS).expect("read");
        let policy = Policy::from_config(&cfg);
        let actions: Vec<&str> = read
            .events
            .iter()
            .map(|e| policy.decide(e).action.as_str())
            .collect();
        (read, actions.len())
    };
    let (read, _) = xids_json();
    let xids = read
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Xid)
        .count();
    let grep_hits = grep_count(&dmesg);
    assert_eq!(xids, grep_hits, "parser and grep disagree");
    let ours = min_time(5, || {
        xids_json();
    });
    let grep = min_time(5, || {
        grep_count(&dmesg);
    });
    eprintln!(
        "xid full parse: {} lines of dmesg, {:.1} MB, {xids} Xids ({} events): ours {:.1} ms, grep -c {:.1} ms, ratio {:.2}",
        HISTORY_LINES,
        size as f64 / 1e6,
        read.events.len(),
        ours.as_secs_f64() * 1e3,
        grep.as_secs_f64() * 1e3,
        ours.as_secs_f64() / grep.as_secs_f64()
    );

    let mut g = c.benchmark_group("xid_full_parse_1m_lines");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    g.bench_function("gpu_health_xids_json", |b| b.iter(xids_json));
    g.bench_function("grep_c_nvrm_xid", |b| b.iter(|| grep_count(&dmesg)));
    g.finish();
    let parse_all = || read_since(&log, None, &cfg, &snap, NOW_MS).expect("read");

    // Incremental: cursor at the end of the history, 100 new lines.
    let history_end = parse_all().cursor.expect("cursor");
    let saved = XidState {
        cursor: Some(history_end.clone()),
        ..XidState::fresh()
    };
    state.save((), &saved).expect("save the cursor");
    write_log(&log, HISTORY_LINES, HISTORY_LINES + 100, true);
    let mut g = c.benchmark_group("xid_incremental_1m_history_100_new");
    g.sample_size(50).measurement_time(Duration::from_secs(3));
    g.bench_function("read_since_cursor", |b| {
        b.iter(|| read_since(&log, Some(&history_end), &cfg, &snap, NOW_MS).expect("read"))
    });
    // The prolog's call: loads the cursor file, reads, judges (no commit).
    g.bench_function("scan_with_cursor_file", |b| {
        b.iter(|| {
            let loaded = state.load::<XidState>(());
            let (st, _) = XidState::checked(loaded.expect("cursor"));
            scan(&log, st, &cfg, &snap, NOW_MS)
        })
    });
    g.finish();

    // A full kmsg ring: 16k records of ~120 bytes (a 2 MiB ring).
    let ring_text: String = (0..16_384)
        .map(|i| {
            let body = log_line(i);
            let msg = body.split_once("] ").map_or(body.as_str(), |(_, m)| m);
            format!("4,{i},{},-;{msg}\n SUBSYSTEM=pci\n", i as u64 * 137_000)
        })
        .collect();
    let ring = MemoryRing::from_dump(ring_text.as_bytes());
    let at_end = Cursor::Kmsg {
        boot_id: String::new(),
        next_seq: 16_384,
    };
    let ring_cfg = XidConfig {
        boot_id_path: dir.path().join("boot_id"),
        uptime_path: dir.path().join("uptime"),
        ..XidConfig::default()
    };
    std::fs::write(&ring_cfg.boot_id_path, "").expect("boot id");
    std::fs::write(&ring_cfg.uptime_path, "3000.0 1.0\n").expect("uptime");
    let mut g = c.benchmark_group("xid_kmsg_ring_16k_records");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.bench_function("memory_ring_from_start", |b| {
        let mut r = ring.clone();
        b.iter(|| {
            r.rewind().expect("rewind");
            read_source(LogSource::Kmsg(&mut r), None, &ring_cfg, &snap, NOW_MS).expect("ring")
        })
    });
    g.bench_function("memory_ring_nothing_new", |b| {
        let mut r = ring.clone();
        b.iter(|| {
            r.rewind().expect("rewind");
            read_source(
                LogSource::Kmsg(&mut r),
                Some(&at_end),
                &ring_cfg,
                &snap,
                NOW_MS,
            )
            .expect("ring")
        })
    });
    // The host's own ring, read only, when this user may read it.
    let dev = Path::new("/dev/kmsg");
    if let Ok(first) = read_since(dev, None, &cfg, &snap, NOW_MS) {
        let records = match &first.cursor {
            Some(Cursor::Kmsg { next_seq, .. }) => *next_seq,
            _ => 0,
        };
        eprintln!(
            "xid /dev/kmsg: next seq {records}, {} Xids",
            first.events.len()
        );
        g.bench_function("dev_kmsg_from_start", |b| {
            b.iter(|| read_since(dev, None, &cfg, &snap, NOW_MS).expect("kmsg"))
        });
        let end = first.cursor.clone();
        g.bench_function("dev_kmsg_nothing_new", |b| {
            b.iter(|| read_since(dev, end.as_ref(), &cfg, &snap, NOW_MS).expect("kmsg"))
        });
    }
    g.finish();
    storm(c, dir.path());
    journal(c, dir.path());
}

/// One scan of a 60,000-event storm of distinct (code, PCI) pairs, an
/// Xid 79 first.
fn storm(c: &mut Criterion, dir: &Path) {
    let log = dir.join("storm.log");
    let mut text = String::from(
        "[  100.0] NVRM: Xid (PCI:0000:c1:00): 79, pid=2210, GPU has fallen off the bus.\n",
    );
    for i in 0..60_000u32 {
        let code = [13, 45, 68, 94][(i % 4) as usize];
        text.push_str(&format!(
            "[  200.{i:06}] NVRM: Xid (PCI:{:04x}:{:02x}:{:02x}): {code}, pid={i}, storm\n",
            i / 8192,
            i % 256,
            (i / 256) % 32
        ));
    }
    std::fs::write(&log, &text).expect("storm log");
    let cfg = XidConfig::default();
    let snap = NodeSnapshot::default();
    let once = scan(&log, XidState::fresh(), &cfg, &snap, NOW_MS);
    eprintln!(
        "xid storm: 60,001 events, {} kept, {} findings, drains: {}",
        once.events.len(),
        once.findings.len(),
        once.findings.iter().any(|f| f.action.drains())
    );
    let mut g = c.benchmark_group("xid_storm_60k_distinct_events");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    g.bench_function("scan", |b| {
        b.iter(|| scan(&log, XidState::fresh(), &cfg, &snap, NOW_MS))
    });
    g.finish();
}

const JOURNAL_HISTORY: usize = 1_000_000;

/// Append `entries` (realtime µs, transport, message) to a journal file.
fn write_journal(remote: &Path, file: &Path, dir: &Path, from: usize, to: usize) {
    let export = dir.join("entries.export");
    let f = std::fs::File::create(&export).expect("export");
    let mut w = BufWriter::with_capacity(1 << 20, f);
    for i in from..to {
        let us = (NOW_MS - 3_600_000) * 1000 + i as u64 * 1000;
        let line = log_line(i);
        let (transport, msg) = match line.split_once(" kernel: ") {
            Some((_, m)) => (
                "kernel",
                m.split_once("] ").map_or(m, |(_, m)| m).to_string(),
            ),
            None => ("syslog", line.clone()),
        };
        writeln!(
            w,
            "__REALTIME_TIMESTAMP={us}\n__MONOTONIC_TIMESTAMP={i}\n_BOOT_ID=0123456789abcdef0123456789abcdef\n_TRANSPORT={transport}\nMESSAGE={msg}\n"
        )
        .expect("write");
    }
    w.flush().expect("flush");
    drop(w);
    let ok = Command::new(remote)
        .arg(format!("--output={}", file.display()))
        .arg(&export)
        .output()
        .expect("systemd-journal-remote");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    std::fs::remove_file(&export).ok();
}

fn journal(c: &mut Criterion, dir: &Path) {
    let Some(remote) = [
        "/lib/systemd/systemd-journal-remote",
        "/usr/lib/systemd/systemd-journal-remote",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.exists()) else {
        eprintln!("xid journal: systemd-journal-remote not installed, journal benches skipped");
        return;
    };
    // A directory: journal-remote rotates its output file as it grows,
    // and --directory reads the archived files too.
    let jdir = dir.join("journal");
    std::fs::create_dir_all(&jdir).expect("journal dir");
    let file = jdir.join("node.journal");
    let snap = NodeSnapshot::default();
    let journal = Path::new(gpu_health_core::xid::JOURNAL);
    // The same scan with 1,000 entries of history, for the ratio.
    write_journal(remote, &file, dir, 0, 1_000);
    let small_cfg = XidConfig {
        journal_path: Some(jdir.clone()),
        ..XidConfig::default()
    };
    let small_end = read_since(journal, None, &small_cfg, &snap, NOW_MS)
        .expect("journal")
        .cursor
        .expect("cursor");
    let small = min_time(20, || {
        read_since(journal, Some(&small_end), &small_cfg, &snap, NOW_MS).expect("journal");
    });
    let t = Instant::now();
    write_journal(remote, &file, dir, 1_000, JOURNAL_HISTORY);
    let entries = Command::new("journalctl")
        .arg(format!("--directory={}", jdir.display()))
        .args(["--no-pager", "-q", "-o", "cat"])
        .output()
        .map_or(0, |o| o.stdout.iter().filter(|&&b| b == b'\n').count());
    let bytes: u64 = std::fs::read_dir(&jdir)
        .expect("journal dir")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "xid journal: {JOURNAL_HISTORY} entries written in {:.1} s; journalctl sees {entries} ({:.0} MB in {})",
        t.elapsed().as_secs_f64(),
        bytes as f64 / 1e6,
        jdir.display()
    );
    let cfg = small_cfg;
    let large = min_time(20, || {
        read_since(journal, Some(&small_end), &cfg, &snap, NOW_MS).expect("journal");
    });
    let latest_before = read_since(journal, Some(&small_end), &cfg, &snap, NOW_MS)
        .expect("journal")
        .cursor
        .expect("cursor");
    let at_end_large = min_time(20, || {
        read_since(journal, Some(&latest_before), &cfg, &snap, NOW_MS).expect("journal");
    });
    eprintln!(
        "xid journal: nothing new at the end of 1,000 entries {:.1} ms (best of 20); at the end of {JOURNAL_HISTORY} {:.1} ms; reading the 999,000 entries after the first 1,000 {:.0} ms",
        small.as_secs_f64() * 1e3,
        at_end_large.as_secs_f64() * 1e3,
        large.as_secs_f64() * 1e3
    );
    let first = read_since(journal, None, &cfg, &snap, NOW_MS).expect("journal");
    let end = first.cursor.clone().expect("cursor");
    write_journal(remote, &file, dir, JOURNAL_HISTORY, JOURNAL_HISTORY + 100);
    let new = read_since(journal, Some(&end), &cfg, &snap, NOW_MS).expect("journal");
    eprintln!(
        "xid journal: first scan {} Xids; 100 new entries from the cursor: {} Xids",
        first.events.len(),
        new.events.len()
    );
    let mut g = c.benchmark_group("xid_journal_1m_history");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.bench_function("cursor_100_new", |b| {
        b.iter(|| read_since(journal, Some(&end), &cfg, &snap, NOW_MS).expect("journal"))
    });
    let latest = new.cursor.clone().expect("cursor");
    g.bench_function("cursor_nothing_new", |b| {
        b.iter(|| read_since(journal, Some(&latest), &cfg, &snap, NOW_MS).expect("journal"))
    });
    g.finish();
}

criterion_group!(xid_benches, benches);
criterion_main!(xid_benches);
