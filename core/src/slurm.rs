//! Slurm actions: the only place that runs Slurm commands.
//!
//! Commands run without a shell, with stdin closed and a hard timeout;
//! every value that reaches an argument is checked first. Only the failing
//! path calls Slurm (Slurm's docs ask prologs not to on the common path).

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::finding::is_own_reason;

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} did not finish in {ms} ms (killed)")]
    Timeout { program: String, ms: u64 },
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: String,
        stderr: String,
    },
    #[error("refusing unsafe {what}: {value:?}")]
    BadArgument { what: &'static str, value: String },
    #[error("unexpected output from {program}: {detail}")]
    Parse { program: String, detail: String },
}

/// Output kept from a command (bounded: a huge cluster listing is cut).
const MAX_OUTPUT: usize = 8 << 20;

pub struct Scontrol<'a> {
    pub program: &'a Path,
    pub timeout: Duration,
}

/// A node name we are willing to put on a command line.
pub fn valid_node_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && !n.starts_with('-')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn check_node(node: &str) -> Result<(), SlurmError> {
    if valid_node_name(node) {
        Ok(())
    } else {
        Err(SlurmError::BadArgument {
            what: "node name",
            value: node.to_string(),
        })
    }
}

impl Scontrol<'_> {
    /// Drain `node` with `reason` (which must be one of ours).
    pub fn drain(&self, node: &str, reason: &str) -> Result<(), SlurmError> {
        check_node(node)?;
        if !is_own_reason(reason) || reason.contains('\n') {
            return Err(SlurmError::BadArgument {
                what: "reason",
                value: reason.to_string(),
            });
        }
        self.run(&[
            "update",
            &format!("NodeName={node}"),
            "State=DRAIN",
            &format!("Reason={reason}"),
        ])
        .map(drop)
    }

    /// Return `node` to service. Callers check ownership of the drain first.
    pub fn resume(&self, node: &str) -> Result<(), SlurmError> {
        check_node(node)?;
        self.run(&["update", &format!("NodeName={node}"), "State=RESUME"])
            .map(drop)
    }

    /// `scontrol show node -o` output for one node or all (`None`).
    pub fn show_nodes(&self, node: Option<&str>) -> Result<Vec<NodeInfo>, SlurmError> {
        let mut args = vec!["show", "node", "-o"];
        if let Some(n) = node {
            check_node(n)?;
            args.push(n);
        }
        let out = self.run(&args)?;
        Ok(out.lines().filter_map(NodeInfo::parse).collect())
    }

    fn run(&self, args: &[&str]) -> Result<String, SlurmError> {
        run_with_timeout(self.program, args, self.timeout)
    }
}

/// One line of `scontrol show node -o`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// e.g. `IDLE+DRAIN`, `MIXED`, `DOWN*+DRAIN`.
    pub state: String,
    pub reason: Option<String>,
    pub partitions: Vec<String>,
}

impl NodeInfo {
    /// Parse `NodeName=n1 Arch=... State=IDLE+DRAIN ... Reason=text [root@...]`.
    /// Reason is the last field and may contain spaces.
    pub fn parse(line: &str) -> Option<NodeInfo> {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|t| t.strip_prefix(key).map(str::to_string))
        };
        let name = field("NodeName=")?;
        let state = field("State=").unwrap_or_default();
        let partitions = field("Partitions=")
            .map(|p| {
                p.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let reason = line.find(" Reason=").map(|i| {
            let r = &line[i + " Reason=".len()..];
            // Slurm appends " [user@time]".
            match r.rfind(" [") {
                Some(j) if r.trim_end().ends_with(']') => r[..j].to_string(),
                _ => r.trim_end().to_string(),
            }
        });
        Some(NodeInfo {
            name,
            state,
            reason: reason.filter(|r| !r.is_empty() && r != "(null)"),
            partitions,
        })
    }

    pub fn is_drained(&self) -> bool {
        self.state
            .split('+')
            .any(|s| s == "DRAIN" || s == "DRAINED" || s == "DRAINING")
    }
}

/// Run `program args` without a shell, stdin from /dev/null, and kill it
/// after `timeout`. Returns stdout on exit status 0.
pub fn run_with_timeout(
    program: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<String, SlurmError> {
    let name = program.display().to_string();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| SlurmError::Spawn {
            program: name.clone(),
            source,
        })?;
    let end = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Drain both pipes while waiting, so a large listing cannot block the
    // child on a full pipe.
    while stdout.is_some() || stderr.is_some() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SlurmError::Timeout {
                program: name,
                ms: timeout.as_millis() as u64,
            });
        }
        let mut fds: Vec<libc::pollfd> = [
            stdout.as_ref().map(|s| s.as_raw_fd()),
            stderr.as_ref().map(|s| s.as_raw_fd()),
        ]
        .into_iter()
        .flatten()
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: fds is a valid slice of pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        let ready = |fd: i32| fds.iter().any(|p| p.fd == fd && p.revents != 0);
        for (pipe, buf) in [
            (&mut stdout as &mut dyn PipeSlot, &mut out),
            (&mut stderr as &mut dyn PipeSlot, &mut err),
        ] {
            if pipe.fd().is_some_and(ready) && !pipe.pump(buf) {
                pipe.close();
            }
        }
    }
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|source| SlurmError::Spawn {
            program: name.clone(),
            source,
        })? {
            break s;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SlurmError::Timeout {
                program: name,
                ms: timeout.as_millis() as u64,
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    if !status.success() {
        return Err(SlurmError::Failed {
            program: name,
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&err)
                .trim()
                .chars()
                .take(500)
                .collect(),
        });
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A child pipe being read until EOF.
trait PipeSlot {
    fn fd(&self) -> Option<i32>;
    /// Read what is there; false at EOF or error.
    fn pump(&mut self, buf: &mut Vec<u8>) -> bool;
    fn close(&mut self);
}

impl<R: Read + AsRawFd> PipeSlot for Option<R> {
    fn fd(&self) -> Option<i32> {
        self.as_ref().map(|r| r.as_raw_fd())
    }
    fn pump(&mut self, buf: &mut Vec<u8>) -> bool {
        let Some(r) = self.as_mut() else { return false };
        let mut chunk = [0u8; 16 << 10];
        match r.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(k) => {
                if buf.len() < MAX_OUTPUT {
                    buf.extend_from_slice(&chunk[..k]);
                }
                true
            }
        }
    }
    fn close(&mut self) {
        *self = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_node_lines() {
        let l = "NodeName=n2 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 \
                 Partitions=gpu,debug Reason=gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain) [root@2026-11-29T14:00:01]";
        let n = NodeInfo::parse(l).unwrap();
        assert_eq!(n.name, "n2");
        assert!(n.is_drained());
        assert_eq!(n.partitions, vec!["gpu", "debug"]);
        assert_eq!(
            n.reason.as_deref(),
            Some("gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)")
        );
        let idle = NodeInfo::parse("NodeName=n1 State=IDLE Partitions=gpu").unwrap();
        assert!(!idle.is_drained());
        assert_eq!(idle.reason, None);
        assert!(NodeInfo::parse("garbage").is_none());
    }

    #[test]
    fn refuses_unsafe_arguments() {
        let s = Scontrol {
            program: Path::new("/bin/true"),
            timeout: Duration::from_secs(1),
        };
        assert!(matches!(
            s.drain("-h", "gpu-health: x"),
            Err(SlurmError::BadArgument { .. })
        ));
        assert!(matches!(
            s.drain("n1 n2", "gpu-health: x"),
            Err(SlurmError::BadArgument { .. })
        ));
        assert!(matches!(
            s.drain("n1", "admin: x"),
            Err(SlurmError::BadArgument { .. })
        ));
        assert!(s.drain("n1", "gpu-health: x (drain)").is_ok());
    }

    #[test]
    fn timeout_kills_and_failures_report() {
        let t0 = Instant::now();
        let r = run_with_timeout(Path::new("/bin/sleep"), &["5"], Duration::from_millis(200));
        assert!(matches!(r, Err(SlurmError::Timeout { .. })), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(matches!(
            run_with_timeout(Path::new("/bin/false"), &[], Duration::from_secs(2)),
            Err(SlurmError::Failed { .. })
        ));
        assert!(matches!(
            run_with_timeout(
                Path::new("/nonexistent/scontrol"),
                &[],
                Duration::from_secs(2)
            ),
            Err(SlurmError::Spawn { .. })
        ));
        let big = run_with_timeout(
            Path::new("/usr/bin/seq"),
            &["1", "200000"],
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(big.lines().count(), 200000);
    }
}
