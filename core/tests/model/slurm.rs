//! The model slurmctld of the ledger's model test: one partition of
//! [`NODES`] nodes, `n1` the node under test, failing, hanging or killing
//! the run on demand.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

use gpu_health_core::ids::NodeName;
use gpu_health_core::ops::drain::SlurmCalls;
use gpu_health_core::process::RunError;
use gpu_health_core::slurm::{NodeInfo, SlurmError};

use super::NODES;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmMode {
    Works,
    Fails,
    Hangs,
    UpdatesFail,
}

/// A kill: the process dies at the `at`-th Slurm call of the next run,
/// before or after slurmctld applied it.
#[derive(Debug, Clone, Copy)]
pub struct Kill {
    pub at: usize,
    pub applied: bool,
}

/// The model slurmctld: one partition, `n1` is the node under test.
pub struct ModelSlurm {
    pub reasons: Mutex<Vec<Option<String>>>,
    pub comments: Mutex<Vec<Option<String>>>,
    pub mode: Mutex<SlurmMode>,
    pub kill: Mutex<Option<Kill>>,
    pub calls: AtomicUsize,
    pub clock_ms: AtomicU64,
    pub resumes: AtomicUsize,
    /// The nodes a reboot was asked for, in order.
    pub reboots: Mutex<Vec<usize>>,
    /// A reboot asked and not done yet, per node (REBOOT_REQUESTED).
    pub rebooting: Mutex<Vec<bool>>,
    /// Two runs at once: the brake's pause takes real time, so that they
    /// interleave as two processes would.
    pub concurrent: AtomicBool,
}

pub struct Killed;

impl ModelSlurm {
    pub fn new(others_drained: usize) -> ModelSlurm {
        let reasons = (0..NODES)
            .map(|i| {
                (i >= 1 && i <= others_drained)
                    .then(|| format!("gpu-health: Xid 48 GPU0 (drain) of n{}", i + 1))
            })
            .collect();
        ModelSlurm {
            reasons: Mutex::new(reasons),
            comments: Mutex::new(vec![None; NODES]),
            mode: Mutex::new(SlurmMode::Works),
            kill: Mutex::new(None),
            calls: AtomicUsize::new(0),
            clock_ms: AtomicU64::new(0),
            resumes: AtomicUsize::new(0),
            reboots: Mutex::new(Vec::new()),
            rebooting: Mutex::new(vec![false; NODES]),
            concurrent: AtomicBool::new(false),
        }
    }

    pub fn index(node: &NodeName) -> Option<usize> {
        node.as_str()
            .strip_prefix('n')?
            .parse::<usize>()
            .ok()?
            .checked_sub(1)
    }

    /// A call that changes something: fails by mode, dies at a kill.
    pub fn update(&self, node: &NodeName, apply: impl FnOnce(usize)) -> Result<(), SlurmError> {
        self.enter(true)?;
        let i = Self::index(node).ok_or_else(|| failed("no such node"))?;
        let call = self.calls.load(SeqCst);
        let kill = *self.kill.lock().unwrap();
        match kill {
            Some(k) if k.at == call && !k.applied => std::panic::panic_any(Killed),
            Some(k) if k.at == call => {
                apply(i);
                std::panic::panic_any(Killed)
            }
            _ => {
                apply(i);
                Ok(())
            }
        }
    }

    pub fn enter(&self, updates: bool) -> Result<(), SlurmError> {
        self.calls.fetch_add(1, SeqCst);
        let mode = *self.mode.lock().unwrap();
        match mode {
            SlurmMode::Works => Ok(()),
            SlurmMode::UpdatesFail if !updates => Ok(()),
            SlurmMode::Fails | SlurmMode::UpdatesFail => {
                Err(failed("Unable to contact slurm controller"))
            }
            SlurmMode::Hangs => Err(SlurmError::Run(RunError::Timeout {
                program: "scontrol".into(),
                ms: 2500,
            })),
        }
    }

    pub fn line(&self, i: usize) -> NodeInfo {
        let reason = self.reasons.lock().unwrap()[i].clone();
        let comment = self.comments.lock().unwrap()[i].clone();
        let rebooting = self.rebooting.lock().unwrap()[i];
        let mut l = format!(
            "NodeName=n{} Arch=x86_64 State={}{} Partitions=gpu",
            i + 1,
            if reason.is_some() {
                "IDLE+DRAIN"
            } else {
                "IDLE"
            },
            if rebooting { "+REBOOT_REQUESTED" } else { "" }
        );
        if let Some(r) = reason {
            l.push_str(&format!(" Reason={r} [root@2026-12-01T00:00:00]"));
        }
        if let Some(c) = comment {
            l.push_str(&format!(" Comment={c}"));
        }
        NodeInfo::parse(&l).expect("a node line")
    }

    pub fn ours_drained(&self) -> usize {
        self.reasons
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.as_deref().is_some_and(|r| r.starts_with("gpu-health:")))
            .count()
    }

    pub fn reason(&self) -> Option<String> {
        self.reasons.lock().unwrap()[0].clone()
    }
}

pub fn failed(why: &str) -> SlurmError {
    SlurmError::Failed {
        program: "scontrol".into(),
        status: "exit status: 1".into(),
        stderr: why.into(),
    }
}

impl SlurmCalls for ModelSlurm {
    fn remaining(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn drain(
        &self,
        node: &NodeName,
        reason: &str,
        stamp_ms: Option<u64>,
    ) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.reasons.lock().unwrap()[i] = Some(reason.to_string());
            if let Some(ms) = stamp_ms {
                self.comments.lock().unwrap()[i] = Some(format!("gpu-health-drained:{ms}"));
            }
        })
    }
    fn reboot(
        &self,
        node: &NodeName,
        reason: &str,
        _: gpu_health_core::slurm::AfterReboot,
    ) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.reasons.lock().unwrap()[i] = Some(reason.to_string());
            self.reboots.lock().unwrap().push(i);
            self.rebooting.lock().unwrap()[i] = true;
        })
    }
    fn cancel_reboot(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.update(node, |i| self.rebooting.lock().unwrap()[i] = false)
    }
    fn set_comment(&self, node: &NodeName, comment: &str) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.comments.lock().unwrap()[i] = (!comment.is_empty()).then(|| comment.to_string());
        })
    }
    fn claim(
        &self,
        node: &NodeName,
        stamp_ms: u64,
        kept: Option<u64>,
        _: Duration,
    ) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.comments.lock().unwrap()[i] =
                Some(gpu_health_core::slurm::claim_comment(stamp_ms, kept));
        })
    }
    fn release_claim(&self, node: &NodeName, kept: Option<u64>) -> Result<(), SlurmError> {
        self.update(node, |i| {
            let c = gpu_health_core::slurm::withdrawn_comment(kept);
            self.comments.lock().unwrap()[i] = (!c.is_empty()).then_some(c);
        })
    }
    fn resume(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.update(node, |i| {
            self.reasons.lock().unwrap()[i] = None;
            self.resumes.fetch_add(1, SeqCst);
        })
    }
    fn show_nodes_leaving(
        &self,
        node: Option<&NodeName>,
        _: Duration,
    ) -> Result<Vec<NodeInfo>, SlurmError> {
        self.enter(false)?;
        Ok(match node {
            Some(n) => Self::index(n).map(|i| self.line(i)).into_iter().collect(),
            None => (0..NODES).map(|i| self.line(i)).collect(),
        })
    }
    fn pause(&self, wait: Duration) {
        if self.concurrent.load(SeqCst) {
            std::thread::sleep(wait);
        }
        self.clock_ms.fetch_add(wait.as_millis() as u64, SeqCst);
    }
    fn now_ms(&self) -> u64 {
        // Two runs at once stamp their claims apart, as two processes.
        self.clock_ms.fetch_add(1, SeqCst)
    }
}
