//! The reliability campaign (docs/reliability.md): each fault the prolog
//! can meet, run against the real binary. For every one: no crash, no hang
//! past the deadline, no drain caused by the tool's own trouble.

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::{drain_reason, Node};

fn json_file(n: &Node, p: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(n.path(p)).unwrap()).unwrap()
}

#[test]
fn nvml_library_missing() {
    let n = Node::new("h100x8-healthy");
    n.write_dropin("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n[brake]\nenabled = false\n");
    // Nothing says this node has GPUs: tell, don't drain.
    let r = n.prolog("201", "");
    assert_eq!(r.code, 0, "{}", r.log);
    assert_eq!(
        json_file(&n, "state/jobs/201.json")["findings"][0]["check"],
        "nvml"
    );
    // A node that must have 8 GPUs cannot run GPU jobs without its driver.
    n.write_dropin("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\nexpected_gpus = 8\n[brake]\nenabled = false\n");
    let r = n.prolog("202", "");
    assert_eq!(r.code, 1);
    assert_eq!(
        drain_reason(&r).as_deref(),
        Some("gpu-health: NVML library missing (drain)")
    );
}

#[test]
fn nvml_init_failing() {
    let n = Node::new("h100x8-healthy");
    std::fs::write(
        n.path("lib/scenario.json"),
        r#"{"count": 8, "init_error": "LIB_RM_VERSION_MISMATCH"}"#,
    )
    .unwrap();
    n.write_dropin("expected_gpus = 8\n[brake]\nenabled = false\n");
    let r = n.prolog("203", "");
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(
        drain_reason(&r).as_deref(),
        Some("gpu-health: NVML init failed (drain)")
    );
}

#[test]
fn gpu_lost_mid_probe() {
    let n = Node::new("h100x8-healthy");
    std::fs::write(
        n.path("lib/scenario.json"),
        r#"{"count": 8, "gpus": {"2": {"lost": true, "lost_mode": "queries_fail"}}}"#,
    )
    .unwrap();
    let r = n.prolog("204", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    let reason = drain_reason(&r).unwrap();
    assert!(
        reason.contains("GPU2") && reason.contains("lost"),
        "{reason}"
    );
}

#[test]
fn state_dir_unusable() {
    // Under a regular file: cannot be created.
    let n = Node::new("h100x8-healthy");
    std::fs::write(n.path("blocker"), "").unwrap();
    n.write_dropin(&format!(
        "state_dir = {:?}\n[brake]\nenabled = false\n",
        n.path("blocker/state")
    ));
    let r = n.prolog("205", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(r.log.contains("is unusable"), "{}", r.log);
    // World-writable: refused, nothing written through it.
    let n = Node::new("h100x8-healthy");
    std::fs::create_dir(n.path("state")).unwrap();
    std::fs::set_permissions(n.path("state"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = n.prolog("206", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert!(r.log.contains("writable"), "{}", r.log);
    assert!(!n.path("state/node-snapshot.json").exists());
}

#[test]
fn disk_full() {
    let n = Node::new("h100x8-healthy");
    let mut cmd = n.command("207", "0");
    // Every write of more than a byte fails with EFBIG, as on a full disk.
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 1,
                rlim_max: 1,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            Ok(())
        });
    }
    let r = n.run(cmd);
    assert_eq!(r.code, 0, "a full disk must not fail the job: {}", r.log);
}

/// slurmd may start the Prolog with a standard descriptor closed. The run
/// must not take it for one of its own files: with stderr closed, the
/// log file would land on descriptor 2 and get every line twice (once as
/// the log, once as stderr); with all three closed, the probe child's
/// /dev/null on 0-2 could cover the pipe its answer goes through.
#[test]
fn closed_standard_descriptors_are_not_the_runs_files() {
    let close = |fds: &'static [i32]| {
        move || {
            for &fd in fds {
                // SAFETY: async-signal-safe, between fork and exec.
                unsafe { libc::close(fd) };
            }
            Ok(())
        }
    };
    let n = Node::new("h100x8-healthy");
    for (job, fds) in [("212", &[2][..]), ("213", &[0, 1, 2][..])] {
        // A job GPU list with a bad entry: the run logs a warning after
        // its log file is open.
        let mut cmd = n.command(job, "0,x");
        // SAFETY: the closure only closes descriptors.
        unsafe { cmd.pre_exec(close(fds)) };
        let r = n.run(cmd);
        assert_eq!(r.code, 0, "{}", r.log);
        let warned = r.log.matches("ignoring SLURM_JOB_GPUS").count();
        assert_eq!(warned, 1, "closed {fds:?}: {}", r.log);
        let verdict = json_file(&n, &format!("state/jobs/{job}.json"));
        assert_eq!(verdict["findings"], serde_json::json!([]), "{verdict}");
    }
}

#[test]
fn corrupt_and_truncated_state_files() {
    let n = Node::new("h100x8-healthy");
    assert_eq!(n.prolog("208", "0").code, 0);
    for f in [
        "state/ecc-history.json",
        "state/kernel-log-cursor.json",
        "state/node-snapshot.json",
    ] {
        let full = std::fs::read(n.path(f)).unwrap();
        std::fs::write(n.path(f), &full[..full.len() / 2]).unwrap();
    }
    std::fs::write(n.path("state/drain.json"), b"\x00\xff garbage").unwrap();
    let r = n.prolog("209", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    // Replaced by good ones.
    json_file(&n, "state/ecc-history.json");
    json_file(&n, "state/kernel-log-cursor.json");
    json_file(&n, "state/node-snapshot.json");
}

#[test]
fn planted_symlinks_are_not_followed() {
    let n = Node::new("h100x8-healthy");
    assert_eq!(n.prolog("210", "0").code, 0);
    let victim = n.path("victim");
    std::fs::write(&victim, "precious").unwrap();
    for f in [
        "state/jobs/211.json",
        "state/node-snapshot.json",
        "state/kernel-log-cursor.json",
    ] {
        let _ = std::fs::remove_file(n.path(f));
        std::os::unix::fs::symlink(&victim, n.path(f)).unwrap();
    }
    let r = n.prolog("211", "0");
    assert_eq!(r.code, 0, "{}", r.log);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    json_file(&n, "state/jobs/211.json");
}

#[test]
fn eight_concurrent_prologs() {
    let n = Node::new("h100x8-healthy");
    let children: Vec<_> = (0..8)
        .map(|i| n.command(&format!("3{i}"), &i.to_string()).spawn().unwrap())
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    for i in 0..8 {
        let v = json_file(&n, &format!("state/jobs/3{i}.json"));
        assert_eq!(v["job_gpus"], serde_json::json!([i]));
    }
    json_file(&n, "state/ecc-history.json");
    json_file(&n, "state/kernel-log-cursor.json");
}

#[test]
fn scontrol_failing_or_hanging() {
    for (name, body) in [
        ("scontrol-fails", "echo boom >&2; exit 1"),
        ("scontrol-hangs", "exec sleep 30"),
    ] {
        let n = Node::new("h100x8-dbe");
        let s = n.script(name, body);
        // Brake on (the default): the claim cannot be made, so nothing is
        // drained by gpu-health (fail safe), and the job does not start
        // on a node with a DBE merely because scontrol failed (exit 1:
        // Slurm drains the node itself). The default budget leaves room
        // for the claim's wait.
        n.write_dropin(&format!("scontrol = {s:?}\nscontrol_timeout_ms = 2500\n"));
        let r = n.prolog("212", "3");
        assert!(
            r.elapsed < Duration::from_secs(5),
            "{name}: took {:?}",
            r.elapsed
        );
        assert_eq!(r.code, 1, "{name}: {}", r.log);
        assert!(
            r.log.contains("not draining (fail safe)"),
            "{name}: {}",
            r.log
        );
        let v = json_file(&n, "state/jobs/212.json");
        assert!(
            v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["check"] == "ecc-uncorrected"),
            "{v}"
        );
    }
}

#[test]
fn ten_million_line_kernel_log_and_garbage() {
    let n = Node::new("h100x8-healthy");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(n.path("kernel.log")).unwrap());
        let filler = "[    1.000000] eth0: link up\n".repeat(1000);
        for _ in 0..10_000 {
            f.write_all(filler.as_bytes()).unwrap();
        }
        f.write_all(b"\xff\xfe\x00garbage\x01\x02 NVRM: Xid (PCI:zz\n")
            .unwrap();
        f.write_all(b"[ 9000.100000] NVRM: Xid (PCI:0000:5d:00): 48, pid=77, name=train, An uncorrectable double bit error\n")
            .unwrap();
    }
    let r = n.prolog("213", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(
        drain_reason(&r).as_deref(),
        Some("gpu-health: Xid 48 GPU3 0000:5d:00.0 (drain)")
    );
    assert!(r.elapsed < Duration::from_secs(30), "{:?}", r.elapsed);
    assert!(
        r.log.contains("only its last 256 MiB are read"),
        "{}",
        r.log
    );
    // The drain failed (no scontrol here): the Xid is kept as pending and
    // the cursor is at the end, so the next run reads nothing old but
    // still drains for it.
    let r = n.prolog("214", "0");
    assert_eq!(r.code, 1, "{}", r.log);
    assert!(r.log.contains("stay pending: Xid 48 GPU3"), "{}", r.log);
    assert!(r.elapsed < Duration::from_secs(3), "{:?}", r.elapsed);
}
