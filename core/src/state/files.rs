//! Every file under `state_dir`, by what it holds: its name, its size
//! cap, its mode and whether a write must reach the disk before the run
//! goes on. No other module spells a state file name.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ids::JobId;
use crate::snapshot::{NodeSnapshot, NodeTopology};
use crate::verdict::JobVerdict;

/// A value kept in a state file. The type decides the file, so no caller
/// can read one file as another file's type: `state.load::<EccHistory>(())`.
/// Each type's impl lives beside the type (here for the types of the
/// layers below this one); `run`'s tests check that no file has two.
pub trait StateValue: Serialize + DeserializeOwned {
    /// `()` for the node's own files, the job for per-job files.
    type Key: Copy;
    fn file(key: Self::Key) -> StateFile;
}

impl StateValue for NodeSnapshot {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::NodeSnapshot
    }
}

impl StateValue for NodeTopology {
    type Key = ();
    fn file((): ()) -> StateFile {
        StateFile::NodeTopology
    }
}

impl StateValue for JobVerdict {
    type Key = JobId;
    fn file(job: JobId) -> StateFile {
        StateFile::JobVerdict(job)
    }
}

/// The per-job subdirectory (verdicts, start snapshots).
pub(super) const JOBS_DIR: &str = "jobs";
/// Job records that could not be appended yet.
pub(super) const SPOOL_DIR: &str = "pending";
/// The default records directory inside `state_dir`.
pub const RECORDS_DIR: &str = "records";
/// The records file inside the records directory.
pub const RECORDS_FILE: &str = "jobs.jsonl";

const START_SUFFIX: &str = ".start.json";
const POWER_SUFFIX: &str = ".power.json";

/// A file under `state_dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFile {
    /// Where the node's kernel-log scan stopped, and the Xid repeat history.
    KernelLogCursor,
    /// Corrected-ECC samples for the growth-rate check.
    EccHistory,
    /// The NVLinks seen active since this boot.
    NvlinkHistory,
    /// The node snapshot of the last probe whose GPUs or topology changed
    /// (for admins).
    NodeSnapshot,
    /// The node's GPUs and their links (the SPANK plugin reads it at step
    /// launch), rewritten when they change.
    NodeTopology,
    /// The NVIDIA GPUs on the PCI bus, with the boot and bus listing they
    /// were read in (read again when either changes).
    PciBus,
    /// The node's fault ledger: every open fault, what was done about
    /// it, gpu-health's drain and the automatic returns (`ledger`).
    Ledger,
    /// A ledger that could not be read, moved aside for the admin.
    LedgerUnreadable,
    /// The lock file that makes the runs of one node take turns.
    RunLock,
    /// The lock file of the writers of the Prometheus textfile.
    TextfileLock,
    /// Held while an acceptance tier runs on the node (outside the run
    /// lock, for seconds): two tiers at once would measure each other.
    TierLock,
    /// Before the ledger: the drain gpu-health made (read once, folded
    /// into the ledger, removed).
    LegacyDrainRecord,
    /// Before the ledger: draining findings not acted on yet.
    LegacyPendingDrain,
    /// Before the ledger: the automatic returns.
    LegacyReturnHistory,
    /// The latest job records, for the Prometheus textfile.
    RecentJobs,
    /// When gpu-health last drained the node through the brake (the
    /// stamp in its Comment), for the next claim to keep
    /// (`ops::drain::DrainStamp`).
    DrainStamp,
    /// The node's health for the Prometheus textfile: the latest check,
    /// the GPUs, the live power, the Xid events of this boot
    /// (`records::metrics`).
    HealthMetrics,
    /// The prolog's verdict on a job (read by the SPANK plugin).
    JobVerdict(JobId),
    /// The job's counters at start (read by the epilog).
    JobStart(JobId),
    /// The highest power each of the job's GPUs drew at the health checks
    /// during the job (written by the health check, read by the epilog).
    JobPowerPeaks(JobId),
    /// A job record waiting to be appended to the records file.
    SpooledRecord { end_ms: u64, job: JobId },
}

impl StateFile {
    /// The subdirectory the file lives in, if not `state_dir` itself.
    pub(super) fn subdir(self) -> Option<&'static str> {
        match self {
            StateFile::JobVerdict(_) | StateFile::JobStart(_) | StateFile::JobPowerPeaks(_) => {
                Some(JOBS_DIR)
            }
            StateFile::SpooledRecord { .. } => Some(SPOOL_DIR),
            _ => None,
        }
    }

    pub(super) fn name(self) -> String {
        match self {
            StateFile::KernelLogCursor => "kernel-log-cursor.json".into(),
            StateFile::EccHistory => "ecc-history.json".into(),
            StateFile::NvlinkHistory => "nvlink-history.json".into(),
            StateFile::NodeSnapshot => "node-snapshot.json".into(),
            StateFile::NodeTopology => "node-topology.json".into(),
            StateFile::PciBus => "pci-bus.json".into(),
            StateFile::Ledger => "ledger.json".into(),
            StateFile::LedgerUnreadable => "ledger.unreadable.json".into(),
            StateFile::RunLock => "run.lock".into(),
            StateFile::TextfileLock => "textfile.lock".into(),
            StateFile::TierLock => "tier.lock".into(),
            StateFile::LegacyDrainRecord => "drain.json".into(),
            StateFile::LegacyPendingDrain => "pending-drain.json".into(),
            StateFile::LegacyReturnHistory => "returns.json".into(),
            StateFile::RecentJobs => "recent-jobs.json".into(),
            StateFile::DrainStamp => "drain-stamp.json".into(),
            StateFile::HealthMetrics => "health-metrics.json".into(),
            StateFile::JobVerdict(job) => format!("{job}.json"),
            StateFile::JobStart(job) => format!("{job}{START_SUFFIX}"),
            StateFile::JobPowerPeaks(job) => format!("{job}{POWER_SUFFIX}"),
            StateFile::SpooledRecord { end_ms, job } => format!("{end_ms:013}-{job}.json"),
        }
    }

    /// Far above what gpu-health writes (a few KiB to a few hundred KiB);
    /// a larger file is not ours and is refused unread.
    pub(super) fn max_bytes(self) -> u64 {
        match self {
            // The ledger is bounded by construction (`ledger::MAX_FAULTS`,
            // capped texts) to a few hundred KiB.
            StateFile::Ledger | StateFile::SpooledRecord { .. } => 1 << 20,
            StateFile::RunLock | StateFile::TextfileLock | StateFile::TierLock => 0,
            StateFile::RecentJobs => 16 << 20,
            _ => 4 << 20,
        }
    }

    /// Written with fsync: what must survive a power loss (a drain, a
    /// finding not acted on, a record). The cursor is not synced: an older
    /// one after a crash rereads a few records, the safe direction.
    pub(super) fn durable(self) -> bool {
        matches!(
            self,
            StateFile::Ledger | StateFile::LedgerUnreadable | StateFile::SpooledRecord { .. }
        )
    }

    /// The job whose start snapshot has this file name.
    pub(super) fn parse_job_start(name: &str) -> Option<JobId> {
        JobId::parse(name.strip_suffix(START_SUFFIX)?).ok()
    }

    /// The job whose power peaks have this file name.
    pub(super) fn parse_job_power(name: &str) -> Option<JobId> {
        JobId::parse(name.strip_suffix(POWER_SUFFIX)?).ok()
    }

    /// The spooled record with this file name.
    pub(super) fn parse_spooled(name: &str) -> Option<StateFile> {
        let (end, job) = name.strip_suffix(".json")?.split_once('-')?;
        if end.len() != 13 || !end.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(StateFile::SpooledRecord {
            end_ms: end.parse().ok()?,
            job: JobId::parse(job).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let job = JobId::from(42);
        assert_eq!(StateFile::JobVerdict(job).name(), "42.json");
        assert_eq!(StateFile::JobStart(job).name(), "42.start.json");
        assert_eq!(StateFile::JobPowerPeaks(job).name(), "42.power.json");
        assert_eq!(StateFile::parse_job_power("42.power.json"), Some(job));
        assert_eq!(StateFile::parse_job_start("42.power.json"), None);
        assert_eq!(StateFile::parse_job_start("42.start.json"), Some(job));
        assert_eq!(StateFile::parse_job_start("42.json"), None);
        assert_eq!(StateFile::parse_job_start("../42.start.json"), None);
        let spooled = StateFile::SpooledRecord {
            end_ms: 1_700_000_000_000,
            job,
        };
        assert_eq!(spooled.name(), "1700000000000-42.json");
        assert_eq!(StateFile::parse_spooled(&spooled.name()), Some(spooled));
        assert_eq!(StateFile::parse_spooled("17-42.json"), None);
        assert_eq!(StateFile::parse_spooled("1700000000000-x.json"), None);
    }
}
