//! Reading the node table (figures in docs/benchmarks.md, "Node table"):
//! `Scontrol::show_nodes(None)`, as the drain brake calls it, against a
//! stand-in scontrol that `cat`s a prepared 20,000-node table of 1 KB
//! lines (Slurm 24.11's shape, with features, gres, a JSON Extra, some
//! long reasons), the asking node last with its claim; and, in the same
//! run, the `cat` of that file alone through `process::run` (the floor:
//! the program and the pipe, nothing kept).
//!
//! The bench uses only what the base commit has too (`Scontrol::new`,
//! `show_nodes`, `NodeInfo`'s fields), so the same file measures either.
//!
//! ```text
//! cargo bench -p gpu-health-core --bench node_table            # criterion
//! cargo bench -p gpu-health-core --bench node_table -- --once  # one read: time, nodes, peak RSS
//! ```
//!
//! `--once` reads the table once and prints the time, what was found and
//! the process's peak RSS before and after (VmHWM); `--floor` runs the
//! stand-in once and keeps nothing; `--prepare-only` writes the table.
//! `NODE_TABLE_DIR` keeps the table there (made once, then reused).
//! ci/bench-node-table times these whole processes, this build's against
//! a baseline's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::Criterion;
use gpu_health_core::process;
use gpu_health_core::slurm::Scontrol;

const NODES: usize = 20_000;
const STAMP: u64 = 1_764_590_000_123;

/// One node line of about 1 KB, as Slurm 24.11 prints it with `-o`.
fn node_line(i: usize) -> String {
    let name = format!("gpu{i:05}");
    let (state, reason) = match i % 100 {
        // 1% drained by gpu-health, 2% by an admin with a long note.
        7 => (
            "IDLE+DRAIN",
            Some("gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)".to_string()),
        ),
        13 | 61 => (
            "DOWN+DRAIN",
            Some(format!(
                "admin: RMA ticket {i}: {}",
                "replace tray ".repeat(40)
            )),
        ),
        _ => ("MIXED", None),
    };
    let mut l = format!(
        "NodeName={name} Arch=x86_64 CoresPerSocket=56 CPUAlloc=112 CPUEfctv=224 CPUTot=224 \
         CPULoad=57.12 AvailableFeatures=h100,nvlink,ib400,sapphirerapids,rack{r},row{w} \
         ActiveFeatures=h100,nvlink,ib400,sapphirerapids,rack{r},row{w} \
         Gres=gpu:h100:8(S:0-1),nic:mlx5:8 NodeAddr={name} NodeHostName={name} \
         Version=24.11.5 OS=Linux 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22) \
         RealMemory=2063000 AllocMem=1031500 FreeMem=1011234 Sockets=2 Boards=1 State={state} \
         ThreadsPerCore=2 TmpDisk=3500000 Weight=10 Owner=N/A MCS_label=N/A \
         Partitions=gpu,gpu-{p},all BootTime=2026-11-20T08:00:01 SlurmdStartTime=2026-11-20T08:01:12 \
         LastBusyTime=2026-11-29T13:59:58 ResumeAfterTime=None \
         CfgTRES=cpu=224,mem=2063000M,billing=224,gres/gpu=8,gres/gpu:h100=8 \
         AllocTRES=cpu=112,mem=1031500M,gres/gpu=4,gres/gpu:h100=4 CurrentWatts=0 AveWatts=0",
        r = i / 32,
        w = i / 512,
        p = i % 4,
    );
    if let Some(r) = reason {
        l.push_str(&format!(" Reason={r} [root@2026-11-29T14:00:01]"));
    }
    if i == NODES {
        l.push_str(&format!(" Comment=gpu-health-claim:{STAMP}"));
    }
    l.push_str(r#" Extra={"rack":"r12","row":"b","pdu":"b12-2","asset":"A"#);
    while l.len() < 1020 {
        l.push('7');
    }
    l.push_str("\"}");
    l
}

/// The table file and a stand-in scontrol that prints it (reused when
/// `dir` has them).
fn prepare(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let table = dir.join("nodes.txt");
    let scontrol = dir.join("scontrol");
    if table.exists() && scontrol.exists() {
        return (table, scontrol);
    }
    let mut w = std::io::BufWriter::new(std::fs::File::create(&table).expect("table"));
    for i in 1..=NODES {
        writeln!(w, "{}", node_line(i)).expect("write");
    }
    w.flush().expect("flush");
    std::fs::write(
        &scontrol,
        format!("#!/bin/sh\nexec cat '{}'\n", table.display()),
    )
    .expect("script");
    std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (table, scontrol)
}

/// kB figures of /proc/self/status (`VmHWM`, `VmRSS`).
fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn once(scontrol: &Path, table: &Path) {
    let bytes = std::fs::metadata(table).map_or(0, |m| m.len());
    let (rss0, hwm0) = (status_kb("VmRSS:"), status_kb("VmHWM:"));
    let s = Scontrol::new(scontrol, Duration::from_secs(60));
    let t = Instant::now();
    let nodes = s.show_nodes(None).expect("show_nodes");
    let took = t.elapsed();
    let hwm = status_kb("VmHWM:");
    let me = nodes.iter().find(|n| n.name == format!("gpu{NODES:05}"));
    let reasons: usize = nodes
        .iter()
        .filter_map(|n| n.reason.as_ref())
        .map(String::len)
        .sum();
    println!(
        "node table: {NODES} lines, {bytes} bytes; read in {:.1} ms; kept {} nodes \
         ({} drained by gpu-health, {} bytes of reasons); the last node {}; \
         VmRSS before {rss0} kB, VmHWM before {hwm0} kB, after {hwm} kB (+{} kB)",
        took.as_secs_f64() * 1e3,
        nodes.len(),
        nodes.iter().filter(|n| n.drained_by_us()).count(),
        reasons,
        match me.map(|n| n.claim_ms) {
            Some(Some(STAMP)) => "found, with its claim",
            Some(_) => "found, without its claim",
            None => "NOT FOUND",
        },
        hwm.saturating_sub(hwm0.max(rss0)),
    );
}

fn bench(c: &mut Criterion, scontrol: &Path, table: &Path) {
    let mut g = c.benchmark_group("node_table");
    g.sample_size(20).measurement_time(Duration::from_secs(8));
    g.bench_function("show_nodes 20000 x 1 KB", |b| {
        let s = Scontrol::new(scontrol, Duration::from_secs(3600));
        b.iter(|| s.show_nodes(None).expect("show_nodes"))
    });
    let table_arg = table.display().to_string();
    g.bench_function("cat of the same file, nothing kept (floor)", |b| {
        b.iter(|| {
            process::run(
                Path::new("/bin/cat"),
                &[table_arg.as_str()],
                Duration::from_secs(60),
                0,
            )
            .expect("cat")
        })
    });
    g.finish();
}

/// The stand-in run once with nothing kept: the same processes and pipe
/// as a read, without the reading.
fn floor(scontrol: &Path) {
    let t = Instant::now();
    let done = process::run(
        scontrol,
        &["show", "node", "-o"],
        Duration::from_secs(60),
        0,
    )
    .expect("scontrol");
    println!(
        "floor: the stand-in scontrol, output dropped: {:.1} ms, {}",
        t.elapsed().as_secs_f64() * 1e3,
        done.status
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |a: &str| args.iter().any(|x| x == a);
    let temp = tempfile::tempdir().expect("tempdir");
    let dir =
        std::env::var_os("NODE_TABLE_DIR").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&dir).expect("table dir");
    let (table, scontrol) = prepare(&dir);
    if has("--prepare-only") {
        return;
    }
    if has("--once") {
        once(&scontrol, &table);
        return;
    }
    if has("--floor") {
        floor(&scontrol);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &scontrol, &table);
    c.final_summary();
}
