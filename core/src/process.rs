//! The one way gpu-health runs another program (scontrol, dcgmi): no
//! shell, stdin from /dev/null, its own process group, output read as it
//! comes (bounded), and killed with its whole group at a deadline. No
//! threads: the prolog forks its NVML probe and must stay single-threaded.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} did not finish in {ms} ms (killed)")]
    Timeout { program: String, ms: u64 },
}

/// A program that ran to its end.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Run `program args`, killing it (and everything it started) once
/// `timeout` has passed. At most `max_output` bytes of each stream are
/// kept; the rest is read and dropped so the child never blocks on a
/// full pipe.
pub fn run(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    max_output: usize,
) -> Result<Finished, RunError> {
    let name = program.display().to_string();
    let end = Instant::now() + timeout;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| RunError::Spawn {
            program: name.clone(),
            source,
        })?;
    let timed_out = || RunError::Timeout {
        program: name.clone(),
        ms: timeout.as_millis() as u64,
    };
    let as_file = |fd: Option<OwnedFd>| fd.map(File::from);
    let mut pipes = [
        Pipe::new(as_file(child.stdout.take().map(OwnedFd::from))),
        Pipe::new(as_file(child.stderr.take().map(OwnedFd::from))),
    ];
    let mut status = None;
    while pipes.iter().any(Pipe::open) {
        if status.is_none() {
            status = child.try_wait().ok().flatten();
            if status.is_some() {
                // Whatever it left running may hold our pipes open.
                kill_group(&child);
            }
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            kill_and_reap(&mut child);
            return Err(timed_out());
        }
        // Short polls while the child runs, so its exit is noticed.
        let wait = if status.is_none() {
            left.min(Duration::from_millis(50))
        } else {
            left
        };
        poll_pipes(&mut pipes, wait, max_output);
    }
    let status = match status {
        Some(s) => s,
        None => loop {
            if let Ok(Some(s)) = child.try_wait() {
                break s;
            }
            if Instant::now() >= end {
                kill_and_reap(&mut child);
                return Err(timed_out());
            }
            std::thread::sleep(Duration::from_millis(2));
        },
    };
    let [out, err] = pipes;
    Ok(Finished {
        status,
        stdout: String::from_utf8_lossy(&out.buf).into_owned(),
        stderr: String::from_utf8_lossy(&err.buf).into_owned(),
    })
}

/// One of the child's output pipes, read until EOF.
struct Pipe<R> {
    reader: Option<R>,
    buf: Vec<u8>,
}

impl<R: Read + AsRawFd> Pipe<R> {
    fn new(reader: Option<R>) -> Self {
        Pipe {
            reader,
            buf: Vec::new(),
        }
    }

    fn open(&self) -> bool {
        self.reader.is_some()
    }

    /// Read what is there; close at EOF or on an error.
    fn pump(&mut self, max: usize) {
        let Some(r) = self.reader.as_mut() else {
            return;
        };
        let mut chunk = [0u8; 16 << 10];
        match r.read(&mut chunk) {
            Ok(0) | Err(_) => self.reader = None,
            Ok(k) => {
                let room = max.saturating_sub(self.buf.len());
                self.buf.extend_from_slice(&chunk[..k.min(room)]);
            }
        }
    }
}

fn poll_pipes<R: Read + AsRawFd>(pipes: &mut [Pipe<R>], wait: Duration, max: usize) {
    let mut fds: Vec<libc::pollfd> = pipes
        .iter()
        .filter_map(|p| p.reader.as_ref())
        .map(|r| libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = wait.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: fds is a valid, exclusively borrowed slice of pollfd.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n <= 0 {
        return; // timeout, or EINTR: the caller's loop checks the clock
    }
    for p in pipes.iter_mut() {
        let ready = p
            .reader
            .as_ref()
            .is_some_and(|r| fds.iter().any(|f| f.fd == r.as_raw_fd() && f.revents != 0));
        if ready {
            p.pump(max);
        }
    }
}

fn kill_group(child: &Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill has no memory preconditions; the group is the child's
    // own (process_group(0)), so nothing else is hit.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Kill the group and collect the child if it dies promptly; a process
/// stuck in the kernel cannot be waited for and is left.
fn kill_and_reap(child: &mut Child) {
    kill_group(child);
    let end = Instant::now() + Duration::from_millis(100);
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> Result<Finished, RunError> {
        run(
            Path::new("/bin/sh"),
            &["-c", script],
            Duration::from_millis(timeout_ms),
            1 << 20,
        )
    }

    #[test]
    fn output_and_status() {
        let f = sh("echo out; echo err >&2; exit 3", 5_000).unwrap();
        assert_eq!(f.status.code(), Some(3));
        assert_eq!(f.stdout, "out\n");
        assert_eq!(f.stderr, "err\n");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let t0 = Instant::now();
        let r = sh("sleep 30 & sleep 30", 300);
        assert!(matches!(r, Err(RunError::Timeout { .. })), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_grandchild_holding_the_pipe_does_not_hold_us() {
        let t0 = Instant::now();
        let f = sh("sleep 30 & echo done", 5_000).unwrap();
        assert_eq!(f.stdout, "done\n");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    #[test]
    fn large_output_is_bounded_and_never_blocks() {
        let f = run(
            Path::new("/usr/bin/seq"),
            &["1", "200000"],
            Duration::from_secs(10),
            1000,
        )
        .unwrap();
        assert!(f.status.success());
        assert_eq!(f.stdout.len(), 1000);
    }

    #[test]
    fn missing_program() {
        let r = run(
            Path::new("/nonexistent/scontrol"),
            &[],
            Duration::from_secs(1),
            10,
        );
        assert!(matches!(r, Err(RunError::Spawn { .. })));
    }
}
