//! Probing the node: NVML (in a child process with a deadline) and sysfs.

pub mod nvml;
pub mod sysfs;
mod wire;

/// Whether this process runs inside job `job`'s cgroup (`.../job_<id>/...`
/// in any line of `cgroup_file`, i.e. `/proc/self/cgroup`): so a Prolog
/// with `PrologFlags=RunInJob` runs, and the job's device rules apply to
/// it. Unreadable means no.
pub fn in_job_cgroup(cgroup_file: &Path, job: u32) -> bool {
    let mark = format!("/job_{job}/");
    std::fs::read_to_string(cgroup_file).is_ok_and(|t| {
        t.lines()
            .any(|l| l.contains(&mark) || l.ends_with(&mark[..mark.len() - 1]))
    })
}

/// Whether this process runs inside job `job`'s cgroup, as a Prolog or
/// Epilog does with `PrologFlags=RunInJob`: device rules may then hide
/// the node's other GPUs from NVML.
pub fn seen_from_job(job: u32) -> bool {
    in_job_cgroup(Path::new("/proc/self/cgroup"), job)
}

/// For a run that may sit in job `job`'s cgroup (PrologFlags=RunInJob runs
/// the Epilog there too; the plugin's step-end runs under slurmstepd):
/// NVML then numbers only the job's GPUs, while SLURM_JOB_GPUS uses the
/// node's numbers, so renumber the snapshot as the node does.
pub fn number_as_on_node_in_job(snapshot: &mut NodeSnapshot, sysfs_root: &Path, job: u32) {
    if seen_from_job(job) {
        snapshot.pci_gpus = sysfs::nvidia_gpus_on_pci(sysfs_root);
        snapshot.number_as_on_node();
    }
}

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

pub use nvml::{probe_in_process, ProbeOptions};

use crate::snapshot::{NodeSnapshot, NvmlFailure};

/// Largest snapshot we accept from the child (8 GPUs take ~20 KiB).
const MAX_SNAPSHOT_BYTES: u64 = 16 << 20;

/// Probe NVML in a forked child and give up on it after `deadline`.
///
/// A GPU that fell off the bus or a stuck GSP can hold an NVML call in
/// uninterruptible sleep; a thread in that state keeps its process from
/// exiting, so the call must not run in the prolog itself. The child gets
/// /dev/null as stdio (never slurmd's pipes) and sends its snapshot through
/// a pipe ([`wire`]). On timeout it is sent SIGKILL and abandoned.
///
/// Must be called from a single-threaded process (the prolog, epilog and
/// admin command are).
pub fn probe_with_deadline(
    library: Option<&Path>,
    opts: ProbeOptions,
    deadline: Duration,
) -> NodeSnapshot {
    probe_with_deadline_while(library, opts, deadline, || ()).0
}

/// [`probe_with_deadline`], doing `meanwhile` in this process while the
/// child talks to NVML (the two overlap on a node's several cores; the
/// deadline counts from the fork, not from `meanwhile`'s end).
pub fn probe_with_deadline_while<T>(
    library: Option<&Path>,
    opts: ProbeOptions,
    deadline: Duration,
    meanwhile: impl FnOnce() -> T,
) -> (NodeSnapshot, T) {
    let started = Instant::now();
    let taken_at_ms = crate::time::unix_ms();
    let (probed, also) = fork_probe(library, opts, deadline, meanwhile);
    let mut snap = match probed {
        Ok(s) => s,
        Err(failure) => NodeSnapshot {
            nvml_error: Some(failure),
            ..NodeSnapshot::default()
        },
    };
    snap.taken_at_ms = taken_at_ms;
    snap.probe_us = started.elapsed().as_micros() as u64;
    (snap, also)
}

fn fork_probe<T>(
    library: Option<&Path>,
    opts: ProbeOptions,
    deadline: Duration,
    meanwhile: impl FnOnce() -> T,
) -> (Result<NodeSnapshot, NvmlFailure>, T) {
    let crashed = |detail: String| NvmlFailure::ProbeCrashed { detail };
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let e = crashed(format!("pipe: {}", std::io::Error::last_os_error()));
        return (Err(e), meanwhile());
    }
    // SAFETY: both fds were just created and are owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the callers are single-threaded; the child only probes,
    // writes to its pipe and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = crashed(format!("fork: {}", std::io::Error::last_os_error()));
        return (Err(e), meanwhile());
    }
    if pid == 0 {
        drop(read_end);
        child_main(library, opts, write_end);
    }
    let end = Instant::now() + deadline;
    drop(write_end);
    let also = meanwhile();
    let outcome = read_until(read_end, end);
    let probed = match outcome {
        PipeRead::Done(bytes) => {
            reap(pid, Duration::from_millis(200));
            wire::decode(&bytes).map_err(|e| crashed(format!("bad snapshot from probe: {e}")))
        }
        PipeRead::TimedOut => {
            // SAFETY: pid is our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            reap(pid, Duration::from_millis(20));
            Err(NvmlFailure::Timeout {
                deadline_ms: deadline.as_millis() as u64,
            })
        }
        PipeRead::Failed(e) => {
            // SAFETY: pid is our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            reap(pid, Duration::from_millis(20));
            Err(crashed(e))
        }
    };
    (probed, also)
}

fn child_main(library: Option<&Path>, opts: ProbeOptions, out: OwnedFd) -> ! {
    // SAFETY: plain libc calls on fds owned by this process; the name
    // (15 bytes and its NUL) tells the probe apart in ps, top and profiles.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"gpu-health-nvml".as_ptr());
        let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if devnull >= 0 {
            libc::dup2(devnull, 0);
            libc::dup2(devnull, 1);
            libc::dup2(devnull, 2);
        }
    }
    let snap = probe_in_process(library, opts);
    let mut file = std::fs::File::from(out);
    // One write of the whole answer (the parent polls per read), in the
    // compact form of `wire`, not JSON: both ends are this program.
    let ok = std::io::Write::write_all(&mut file, &wire::encode(&snap)).is_ok();
    drop(file);
    // SAFETY: _exit skips atexit handlers and destructors that belong to
    // the parent (the NVML library's own teardown may block).
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

enum PipeRead {
    Done(Vec<u8>),
    TimedOut,
    Failed(String),
}

fn read_until(fd: OwnedFd, end: Instant) -> PipeRead {
    use std::os::fd::AsRawFd;
    let mut file = std::fs::File::from(fd);
    let mut buf = Vec::with_capacity(32 << 10);
    let mut chunk = [0u8; 16 << 10];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return PipeRead::TimedOut;
        }
        let mut pfd = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: pfd is a valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return PipeRead::Failed(format!("poll: {e}"));
        }
        if n == 0 {
            return PipeRead::TimedOut;
        }
        match file.read(&mut chunk) {
            Ok(0) => return PipeRead::Done(buf),
            Ok(k) => {
                buf.extend_from_slice(&chunk[..k]);
                if buf.len() as u64 > MAX_SNAPSHOT_BYTES {
                    return PipeRead::Failed("snapshot too large".into());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return PipeRead::Failed(format!("read: {e}")),
        }
    }
}

/// Collect the child's exit status if it ends within `wait`; otherwise
/// leave it (a process stuck in the driver cannot be waited for).
///
/// The child closes its pipe just before it exits, so it is usually a
/// few dozen microseconds from its end here: its pidfd (Linux 5.3) wakes
/// this process the moment it ends, where sleeping in steps would wait a
/// whole step. Without pidfds it polls in steps of 200 µs.
fn reap(pid: libc::pid_t, wait: Duration) {
    let reaped = || {
        let mut status = 0;
        // SAFETY: pid is our child; WNOHANG never blocks.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) != 0 }
    };
    if reaped() {
        return;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if let Ok(raw) = libc::c_int::try_from(pidfd) {
        if raw >= 0 {
            // SAFETY: the fd was just opened and is owned here.
            let pidfd = unsafe { OwnedFd::from_raw_fd(raw) };
            let mut pfd = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&pidfd),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = wait.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
            // SAFETY: pfd is a valid pollfd. An interrupted poll only
            // ends the wait early: the zombie is then left to init.
            unsafe { libc::poll(&mut pfd, 1, ms) };
            reaped();
            return;
        }
    }
    let end = Instant::now() + wait;
    while !reaped() && Instant::now() < end {
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_cgroups_are_recognised() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("cgroup");
        std::fs::write(
            &f,
            "0::/system.slice/slurmstepd.scope/job_42/step_extern/user/task_special\n",
        )
        .unwrap();
        assert!(in_job_cgroup(&f, 42));
        assert!(!in_job_cgroup(&f, 4));
        std::fs::write(&f, "5:devices:/slurm/uid_0/job_7\n0::/\n").unwrap();
        assert!(in_job_cgroup(&f, 7));
        std::fs::write(&f, "0::/system.slice/slurmd.service\n").unwrap();
        assert!(!in_job_cgroup(&f, 7));
        assert!(!in_job_cgroup(&d.path().join("none"), 7));
    }
}
