//! Names that reach file paths, command lines and log lines: the node's
//! Slurm name and job ids. Validated once, where they enter, so nothing
//! downstream has to wonder whether `../` or a terminal escape hides in one.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::text::printable;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{0:?} is not a node name (1-64 of A-Z a-z 0-9 . _ -, not starting with . or -)")]
    NodeName(String),
    #[error("{0:?} is not a Slurm job id (a whole number below 2^32)")]
    JobId(String),
}

/// A Slurm node name safe as a file name (drop-ins, `%n`), as a word of an
/// scontrol command line and in a log line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeName(String);

impl NodeName {
    pub fn parse(s: &str) -> Result<NodeName, IdError> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && !s.starts_with(['-', '.'])
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if ok {
            Ok(NodeName(s.to_string()))
        } else {
            Err(IdError::NodeName(printable(s).into_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// This node's Slurm name: `SLURMD_NODENAME` (slurmd sets it for the
/// Prolog, Epilog, HealthCheckProgram and slurmstepd; several slurmd may
/// share a host), else the short host name. `env` is the environment
/// lookup; the second value says why SLURMD_NODENAME was not used when it
/// was set but unusable.
pub fn this_node(env: impl Fn(&str) -> Option<String>) -> (NodeName, Option<String>) {
    let mut note = None;
    if let Some(n) = env("SLURMD_NODENAME").filter(|n| !n.is_empty()) {
        match NodeName::parse(&n) {
            Ok(name) => return (name, None),
            Err(e) => {
                note = Some(format!(
                    "ignoring SLURMD_NODENAME: {e}; using the host name"
                ))
            }
        }
    }
    let host = hostname();
    match NodeName::parse(&host) {
        Ok(name) => (name, note),
        Err(e) => {
            let why = format!("the host name is unusable ({e}); calling this node \"localhost\"");
            let note = Some(match note {
                Some(n) => format!("{n}; {why}"),
                None => why,
            });
            (NodeName("localhost".into()), note)
        }
    }
}

/// The short host name (up to the first dot).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; the last byte stays 0, so
    // the name is NUL-terminated even when it was cut.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let full = String::from_utf8_lossy(&buf[..end]).into_owned();
    full.split('.').next().unwrap_or("localhost").to_string()
}

/// A Slurm job id (`SLURM_JOB_ID`, `S_JOB_ID`): Slurm's `uint32_t`. The
/// prolog, epilog, SPANK plugin and records all name a job's state files
/// by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(u32);

impl JobId {
    pub fn parse(s: &str) -> Result<JobId, IdError> {
        let digits = !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
        match s.parse::<u32>() {
            Ok(n) if digits => Ok(JobId(n)),
            _ => Err(IdError::JobId(printable(s).into_owned())),
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl From<u32> for JobId {
    fn from(n: u32) -> Self {
        JobId(n)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Written as a string (`"job_id": "42"`), as in the records.
impl Serialize for JobId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_env as env;

    #[test]
    fn node_names() {
        for good in ["n1", "gpu-h100-017", "a.b", "x_y", &"n".repeat(64)] {
            assert!(NodeName::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "-h",
            ".hidden",
            "n1\x1b[2J",
            "n 1",
            "n\n1",
            &"n".repeat(65),
        ] {
            assert!(NodeName::parse(bad).is_err(), "{bad:?}");
        }
        let e = NodeName::parse("n1\x1b[2J").unwrap_err().to_string();
        assert!(!e.contains('\x1b'), "{e}");
    }

    #[test]
    fn node_from_environment() {
        let (n, note) = this_node(env(&[("SLURMD_NODENAME", "gpu7")]));
        assert_eq!((n.as_str(), note), ("gpu7", None));
        let (n, note) = this_node(env(&[("SLURMD_NODENAME", "../../etc")]));
        assert_eq!(n.as_str(), NodeName::parse(&hostname()).unwrap().as_str());
        assert!(note.unwrap().contains("ignoring SLURMD_NODENAME"));
        let (_, note) = this_node(env(&[("SLURMD_NODENAME", "")]));
        assert_eq!(note, None);
    }

    #[test]
    fn job_ids() {
        assert_eq!(JobId::parse("12345").unwrap().get(), 12345);
        assert_eq!(JobId::parse("4294967295").unwrap().get(), u32::MAX);
        for bad in ["", "4294967296", "12_3", "-1", "+1", "1 2", "../x", "0x10"] {
            assert!(JobId::parse(bad).is_err(), "{bad}");
        }
        let j: JobId = serde_json::from_str("\"42\"").unwrap();
        assert_eq!(serde_json::to_string(&j).unwrap(), "\"42\"");
        assert!(serde_json::from_str::<JobId>("\"4x\"").is_err());
    }
}
