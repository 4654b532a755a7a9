//! The one way gpu-health runs another program (scontrol, dcgmi,
//! journalctl): no shell, stdin from /dev/null, its own process group,
//! output read as it comes (bounded), and killed with its whole group at a
//! deadline. No threads: the prolog forks its NVML probe and must stay
//! single-threaded.
//!
//! Two ways to take the output: [`run`] keeps a bounded prefix of it;
//! [`run_lines`] hands stdout over line by line as it arrives (each line
//! bounded) and can stop the program once it has what it needs, so that
//! neither memory nor the program's work grows with its output.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
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

/// What a line handler of [`run_lines`] tells the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Enough: the program and its group are killed and reaped, and
    /// nothing more is read.
    Stop,
}

/// One line of a program's stdout, without its newline.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    /// At most the line cap of [`run_lines`].
    pub text: &'a [u8],
    /// The line was longer than the cap: `text` is its beginning only.
    pub cut: bool,
}

/// How a program read by [`run_lines`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It ended by itself (every line it wrote was handed over).
    Exited(ExitStatus),
    /// The line handler said [`Flow::Stop`]; the program was killed.
    Stopped,
}

/// The end of a program read by [`run_lines`].
#[derive(Debug)]
pub struct Streamed {
    pub ended: Ended,
    /// The first [`MAX_STDERR`] bytes of its stderr.
    pub stderr: String,
    /// Lines handed over cut (longer than the cap).
    pub cut_lines: u64,
}

/// stderr kept by [`run_lines`]: enough for any error message.
pub const MAX_STDERR: usize = 64 << 10;

/// One read from a pipe: what a pipe buffer holds (64 KiB on Linux).
const CHUNK: usize = 64 << 10;

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
    run_with(program, args, timeout, max_output, false)
}

/// [`run`], and the program is killed when this process dies
/// ([`die_with_parent`]): for the acceptance tier's gates, which a
/// health check killed by Slurm must not leave running (two bandwidth
/// tests at once measure each other).
pub fn run_tied(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    max_output: usize,
) -> Result<Finished, RunError> {
    run_with(program, args, timeout, max_output, true)
}

fn run_with(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    max_output: usize,
    tied: bool,
) -> Result<Finished, RunError> {
    let mut stdout = Vec::new();
    let (ended, stderr) = drive(program, args, timeout, max_output, tied, &mut |chunk| {
        keep(&mut stdout, chunk, max_output);
        Flow::Continue
    })?;
    let status = match ended {
        Ended::Exited(s) => s,
        // Not reached: the sink above never stops. Had it, the program
        // would have been killed, and that is what the status says.
        Ended::Stopped => ExitStatus::from_raw(libc::SIGKILL),
    };
    Ok(Finished {
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// Run `program args` and hand each line of its stdout to `on_line` as it
/// arrives, until the program ends, `on_line` says [`Flow::Stop`], or
/// `timeout` has passed (then the program's group is killed and the
/// error says so; what `on_line` got before stays with the caller).
///
/// A line longer than `max_line` bytes is handed over cut (its first
/// `max_line` bytes, [`Line::cut`] set) and the rest of it is dropped: no
/// line is ever held whole. A last line without a newline is handed over
/// when the program ends by itself. stderr is kept up to [`MAX_STDERR`].
pub fn run_lines(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    max_line: usize,
    mut on_line: impl FnMut(Line<'_>) -> Flow,
) -> Result<Streamed, RunError> {
    let mut lines = LineSplitter::new(max_line);
    let (ended, stderr) = drive(program, args, timeout, MAX_STDERR, false, &mut |chunk| {
        lines.feed(chunk, &mut on_line)
    })?;
    if let Ended::Exited(_) = ended {
        lines.finish(&mut on_line);
    }
    Ok(Streamed {
        ended,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        cut_lines: lines.cut_lines,
    })
}

fn keep(buf: &mut Vec<u8>, chunk: &[u8], max: usize) {
    let room = max.saturating_sub(buf.len());
    buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
}

/// Cuts a byte stream into lines of at most `max` bytes.
struct LineSplitter {
    max: usize,
    /// The beginning of a line whose newline has not come yet.
    partial: Vec<u8>,
    /// `partial` reached `max`: the rest of this line is dropped.
    overflow: bool,
    cut_lines: u64,
}

impl LineSplitter {
    fn new(max: usize) -> Self {
        LineSplitter {
            max,
            partial: Vec::new(),
            overflow: false,
            cut_lines: 0,
        }
    }

    fn feed(&mut self, mut chunk: &[u8], on_line: &mut impl FnMut(Line<'_>) -> Flow) -> Flow {
        while let Some(i) = memchr::memchr(b'\n', chunk) {
            let (line, rest) = (&chunk[..i], &chunk[i + 1..]);
            chunk = rest;
            let flow = if self.partial.is_empty() && !self.overflow {
                // The common case: the whole line is in this chunk.
                let cut = line.len() > self.max;
                self.cut_lines += u64::from(cut);
                on_line(Line {
                    text: &line[..line.len().min(self.max)],
                    cut,
                })
            } else {
                self.append(line);
                self.deliver(on_line)
            };
            if flow == Flow::Stop {
                return Flow::Stop;
            }
        }
        self.append(chunk);
        Flow::Continue
    }

    /// Keep what fits of a line's next bytes.
    fn append(&mut self, bytes: &[u8]) {
        if self.partial.len() + bytes.len() > self.max {
            self.overflow = true;
        }
        keep(&mut self.partial, bytes, self.max);
    }

    /// Hand over `partial` as a whole line and start the next.
    fn deliver(&mut self, on_line: &mut impl FnMut(Line<'_>) -> Flow) -> Flow {
        let cut = self.overflow;
        self.cut_lines += u64::from(cut);
        let flow = on_line(Line {
            text: &self.partial,
            cut,
        });
        self.partial.clear();
        self.overflow = false;
        flow
    }

    /// The program ended: a last line without a newline is still a line.
    fn finish(&mut self, on_line: &mut impl FnMut(Line<'_>) -> Flow) {
        if !self.partial.is_empty() || self.overflow {
            self.deliver(on_line);
        }
    }
}

/// Start `program args` and pump its stdout into `sink` and up to
/// `max_stderr` bytes of its stderr into the returned buffer, until it
/// ends, `sink` says stop, or `timeout` passes.
fn drive(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    max_stderr: usize,
    tied: bool,
    sink: &mut dyn FnMut(&[u8]) -> Flow,
) -> Result<(Ended, Vec<u8>), RunError> {
    let name = program.display().to_string();
    let end = Instant::now() + timeout;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if tied {
        die_with_parent(&mut command);
    }
    let mut child = command.spawn().map_err(|source| RunError::Spawn {
        program: name.clone(),
        source,
    })?;
    let timed_out = || RunError::Timeout {
        program: name.clone(),
        ms: timeout.as_millis() as u64,
    };
    let as_file = |fd: Option<OwnedFd>| fd.map(File::from);
    let mut pipes = [
        as_file(child.stdout.take().map(OwnedFd::from)),
        as_file(child.stderr.take().map(OwnedFd::from)),
    ];
    let mut stderr = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    let mut status = None;
    while pipes.iter().any(Option::is_some) {
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
        for (i, ready) in poll_ready(&pipes, wait).into_iter().enumerate() {
            if !ready {
                continue;
            }
            let Some(pipe) = pipes[i].as_mut() else {
                continue;
            };
            match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => pipes[i] = None,
                Ok(k) if i == 0 => {
                    if sink(&chunk[..k]) == Flow::Stop {
                        kill_and_reap(&mut child);
                        return Ok((Ended::Stopped, stderr));
                    }
                }
                Ok(k) => keep(&mut stderr, &chunk[..k], max_stderr),
            }
        }
    }
    // Its pipes closed: the child is exiting. Look again soon (a fixed
    // 2 ms nap here cost every run through the SPANK plugin's step-end
    // notice up to 2 ms), backing off to 2 ms for one that lingers.
    let mut nap = Duration::from_micros(50);
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
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(2));
        },
    };
    Ok((Ended::Exited(status), stderr))
}

/// Which of the open pipes have something to read (or hung up), waiting
/// at most `wait`.
fn poll_ready(pipes: &[Option<File>; 2], wait: Duration) -> [bool; 2] {
    let mut fds: Vec<libc::pollfd> = pipes
        .iter()
        .flatten()
        .map(|r| libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = wait.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: fds is a valid, exclusively borrowed slice of pollfd.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    let mut ready = [false; 2];
    if n <= 0 {
        return ready; // timeout, or EINTR: the caller's loop checks the clock
    }
    for (slot, pipe) in ready.iter_mut().zip(pipes) {
        *slot = pipe
            .as_ref()
            .is_some_and(|r| fds.iter().any(|f| f.fd == r.as_raw_fd() && f.revents != 0));
    }
    ready
}

/// The child is killed when the thread that started it dies (the whole
/// process, for gpu-health's runs, which start programs from their one
/// thread): a run killed by Slurm (the HealthCheckProgram's 60 s) leaves
/// no program behind in its own process group, where Slurm's kill of the
/// run's group does not reach it. Only for the tier's programs: it makes
/// std fork instead of vfork, and the other programs (scontrol, the
/// plugin's step-end from slurmstepd) end within their time limits.
pub fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl and getppid are async-signal-safe system calls; the
    // closure touches no memory of the parent.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the call: then nobody
            // waits for this child.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
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

    /// `sh -c script` through run_lines; `stop` sees each line.
    fn sh_lines(
        script: &str,
        timeout_ms: u64,
        max_line: usize,
        mut stop: impl FnMut(&[u8]) -> bool,
    ) -> (Result<Streamed, RunError>, Vec<(String, bool)>) {
        let mut got = Vec::new();
        let r = run_lines(
            Path::new("/bin/sh"),
            &["-c", script],
            Duration::from_millis(timeout_ms),
            max_line,
            |l| {
                got.push((String::from_utf8_lossy(l.text).into_owned(), l.cut));
                if stop(l.text) {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            },
        );
        (r, got)
    }

    fn exit_code(ended: Ended) -> Option<i32> {
        match ended {
            Ended::Exited(s) => s.code(),
            Ended::Stopped => None,
        }
    }

    #[test]
    fn lines_as_they_come() {
        let script = r"printf 'a\nbb\n\nccc'; echo err >&2; exit 2";
        let (r, got) = sh_lines(script, 5_000, 100, |_| false);
        let r = r.unwrap();
        assert_eq!(exit_code(r.ended), Some(2));
        assert_eq!(r.stderr, "err\n");
        let texts: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            texts,
            ["a", "bb", "", "ccc"],
            "the last line needs no newline"
        );
        assert!(got.iter().all(|(_, cut)| !cut));
        assert_eq!(r.cut_lines, 0);
    }

    #[test]
    fn long_lines_are_cut_never_kept_whole() {
        // A 200,000-byte line spans several reads; the lines around it
        // stay whole, one exactly at the cap too.
        let script = r"echo first; head -c 200000 /dev/zero | tr '\0' a; echo; echo 123456789; echo 1234567890; printf 12345678901";
        let (r, got) = sh_lines(script, 5_000, 10, |_| false);
        let r = r.unwrap();
        let a10 = "a".repeat(10);
        let want = [
            ("first", false),
            (a10.as_str(), true),
            ("123456789", false),
            ("1234567890", false),
            ("1234567890", true),
        ];
        let got: Vec<(&str, bool)> = got.iter().map(|(t, c)| (t.as_str(), *c)).collect();
        assert_eq!(got, want);
        assert_eq!(r.cut_lines, 2);
    }

    #[test]
    fn stop_kills_the_whole_group() {
        let t0 = Instant::now();
        let mut sleeper: Option<libc::pid_t> = None;
        let mut n = 0;
        let (r, _) = sh_lines("sleep 30 & echo $!; exec yes line", 10_000, 100, |l| {
            if sleeper.is_none() {
                sleeper = std::str::from_utf8(l).ok().and_then(|p| p.parse().ok());
            }
            n += 1;
            n == 100_000
        });
        assert_eq!(r.unwrap().ended, Ended::Stopped);
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        // The grandchild went with the group (reaped by init meanwhile).
        let pid = sleeper.unwrap();
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            // SAFETY: signal 0 only checks that the process exists.
            let exists = unsafe { libc::kill(pid, 0) } == 0;
            !exists
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        });
        assert!(gone, "sleep {pid} still runs");
    }

    #[test]
    fn lines_before_a_timeout_stay_with_the_caller() {
        let t0 = Instant::now();
        let (r, got) = sh_lines("echo one; echo two; sleep 30", 300, 100, |_| false);
        assert!(matches!(r, Err(RunError::Timeout { .. })), "{r:?}");
        assert_eq!(got.len(), 2);
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    #[test]
    fn stderr_of_a_stream_is_bounded() {
        let (r, got) = sh_lines("head -c 1000000 /dev/zero >&2; echo x", 10_000, 100, |_| {
            false
        });
        let r = r.unwrap();
        assert_eq!(r.stderr.len(), MAX_STDERR);
        assert_eq!(got, [("x".to_string(), false)]);
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
