//! Slurm actions: the only place that runs Slurm commands and reads their
//! output.
//!
//! Commands run through [`crate::process`] (no shell, stdin closed,
//! killed at the deadline); every value that reaches an argument is
//! checked first. One [`Scontrol`] serves one run and holds that run's
//! time budget: every call gets what is left of it, so a slow slurmctld
//! cannot hold a job start longer than `scontrol_timeout_ms` in all. Only
//! the failing path calls Slurm (Slurm's docs ask prologs not to on the
//! common path).
//!
//! The node table (`scontrol show node -o`) is read as a stream, one line
//! per node, keeping per node only what the brake and the runs use (name,
//! state, partitions, claim, the reason capped at [`REASON_KEPT`] bytes):
//! memory grows with the number of nodes, not with what else Slurm prints
//! about them (features, gres, comments), and no node is lost however
//! large the cluster.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::finding::{is_own_reason, MAX_REASON_LEN};
use crate::ids::NodeName;
use crate::process::{self, Ended, Flow, RunError};

pub mod comment;
mod node_info;
pub use comment::{claim_comment, withdrawn_comment, CLAIM_PREFIX, DRAINED_PREFIX};
pub mod show_config;
pub use node_info::NodeInfo;

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: String,
        stderr: String,
    },
    #[error("refusing unsafe {what}: {value:?}")]
    BadArgument { what: &'static str, value: String },
    #[error("the run's time for Slurm commands ({budget_ms} ms, scontrol_timeout_ms) is spent")]
    BudgetSpent { budget_ms: u64 },
    #[error("scontrol listed more than {limit} nodes; not reading a node table that large")]
    TooManyNodes { limit: usize },
}

/// What Slurm does with a node after the reboot gpu-health asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterReboot {
    /// `ASAP nextstate=RESUME`: back to service as soon as it registers.
    Resume,
    /// Neither `ASAP` nor `nextstate`: the node, drained by gpu-health
    /// before the reboot is asked, keeps that drain and its reason after
    /// it (docs/operations.md has what each series does), so it returns
    /// only when gpu-health's acceptance tier passed.
    StayDrained,
}

/// Output kept from an update (it prints nothing when it works).
const MAX_OUTPUT: usize = 64 << 10;

/// Bytes read of one line of `scontrol show node -o`; a longer line is
/// cut (its fields past the cut are not seen). Real lines are 0.5 to 2 KB.
const MAX_LINE: usize = 1 << 20;

/// Nodes one read of the node table keeps at most (Slurm's largest
/// clusters have tens of thousands): a bound on memory, not a limit any
/// cluster reaches.
pub const MAX_NODES: usize = 1_000_000;

/// Bytes of a node's reason kept from a read of the node table, unless
/// the node is the one asked for by name (whose reason is kept whole).
/// gpu-health's own reasons are shorter, so whether a drain is ours, and
/// which of ours, is always seen; Slurm may append its own text after ours.
pub const REASON_KEPT: usize = 256;
const _: () = assert!(REASON_KEPT > MAX_REASON_LEN);

/// scontrol for one run, with the run's time budget.
pub struct Scontrol<'a> {
    program: &'a Path,
    budget: Duration,
    deadline: Instant,
}

impl<'a> Scontrol<'a> {
    /// The budget starts now.
    pub fn new(program: &'a Path, budget: Duration) -> Scontrol<'a> {
        Scontrol {
            program,
            budget,
            deadline: Instant::now() + budget,
        }
    }

    /// What is left of the budget.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Drain `node` with `reason` (which must be one of ours). With
    /// `stamp_ms` the same update replaces the brake's claim (the node's
    /// Comment, see [`Scontrol::claim`]) by the drain's time stamp
    /// ([`DRAINED_PREFIX`]): claim and drain never coexist.
    pub fn drain(
        &self,
        node: &NodeName,
        reason: &str,
        stamp_ms: Option<u64>,
    ) -> Result<(), SlurmError> {
        check_reason(reason)?;
        let node_arg = format!("NodeName={node}");
        let reason_arg = format!("Reason={reason}");
        let comment_arg = stamp_ms.map(|ms| format!("Comment={DRAINED_PREFIX}{ms}"));
        let mut args = vec!["update", &node_arg, "State=DRAIN", &reason_arg];
        if let Some(c) = &comment_arg {
            args.push(c);
        }
        self.run(&args).map(drop)
    }

    /// Ask Slurm to reboot `node` once its jobs are done. Either Slurm
    /// returns it to service after ([`AfterReboot::Resume`]: `scontrol
    /// reboot ASAP nextstate=RESUME reason=... node`), or it leaves the
    /// node drained ([`AfterReboot::StayDrained`]: `scontrol reboot
    /// reason=... node`, the node already drained by gpu-health; without
    /// `ASAP`, whose own drain 22.05 lifts after the reboot). `reason`
    /// must be one of ours.
    pub fn reboot(
        &self,
        node: &NodeName,
        reason: &str,
        after: AfterReboot,
    ) -> Result<(), SlurmError> {
        check_reason(reason)?;
        let reason_arg = format!("reason={reason}");
        let mut args = vec!["reboot"];
        if after == AfterReboot::Resume {
            args.extend(["ASAP", "nextstate=RESUME"]);
        }
        args.push(&reason_arg);
        args.push(node.as_str());
        self.run(&args).map(drop)
    }

    /// Withdraw the reboot of `node` that Slurm has pending (`scontrol
    /// cancel_reboot node`), with whatever `nextstate` it was asked with.
    /// A node drained before the request stays drained with its reason
    /// on 22.05, 24.11 and 26.05 (docs/operations.md); callers look at
    /// the node after it all the same. Slurm refuses it (exit 1) when no
    /// reboot is pending.
    pub fn cancel_reboot(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.run(&["cancel_reboot", node.as_str()]).map(drop)
    }

    /// The drain brake's claim: `Comment=gpu-health-claim:<stamp_ms>` on
    /// `node` (one update; the state and reason are untouched). Every
    /// node that drains through the brake claims first, so racing nodes
    /// see each other before any of them drains.
    /// `reserve` of the budget is left for the calls after it.
    /// `kept`: the node's own drain stamp, kept in the Comment
    /// ([`claim_comment`]).
    pub fn claim(
        &self,
        node: &NodeName,
        stamp_ms: u64,
        kept: Option<u64>,
        reserve: Duration,
    ) -> Result<(), SlurmError> {
        let args = [
            "update",
            &format!("NodeName={node}"),
            &format!("Comment={}", claim_comment(stamp_ms, kept)),
        ];
        self.run_leaving(&args, reserve).map(drop)
    }

    /// Set `node`'s Comment to `comment` (gpu-health's words only:
    /// `comment::comment_with` never overwrites another's note).
    pub fn set_comment(&self, node: &NodeName, comment: &str) -> Result<(), SlurmError> {
        let arg = format!("Comment={comment}");
        self.run(&["update", &format!("NodeName={node}"), &arg])
            .map(drop)
    }

    /// Withdraw this node's claim: the Comment holds the node's own drain
    /// stamp `kept` again, or nothing.
    pub fn release_claim(&self, node: &NodeName, kept: Option<u64>) -> Result<(), SlurmError> {
        let comment = format!("Comment={}", withdrawn_comment(kept));
        self.run(&["update", &format!("NodeName={node}"), &comment])
            .map(drop)
    }

    /// Return `node` to service. Callers check ownership of the drain first.
    pub fn resume(&self, node: &NodeName) -> Result<(), SlurmError> {
        self.run(&["update", &format!("NodeName={node}"), "State=RESUME"])
            .map(drop)
    }

    /// `scontrol show node -o` for one node or all (`None`).
    pub fn show_nodes(&self, node: Option<&NodeName>) -> Result<Vec<NodeInfo>, SlurmError> {
        self.show_nodes_leaving(node, Duration::ZERO)
    }

    /// [`Scontrol::show_nodes`], leaving `reserve` of the budget for the
    /// calls that must follow (the brake's drain or withdrawal).
    pub fn show_nodes_leaving(
        &self,
        node: Option<&NodeName>,
        reserve: Duration,
    ) -> Result<Vec<NodeInfo>, SlurmError> {
        self.show_nodes_where(node, reserve, |_| true)
    }

    /// [`Scontrol::show_nodes_leaving`], keeping only the nodes `keep`
    /// accepts (it sees each node as it is read). The table is read as a
    /// stream: what is not kept takes no memory.
    pub fn show_nodes_where(
        &self,
        node: Option<&NodeName>,
        reserve: Duration,
        keep: impl FnMut(&NodeInfo) -> bool,
    ) -> Result<Vec<NodeInfo>, SlurmError> {
        self.read_nodes(node, reserve, keep, MAX_NODES)
    }

    fn read_nodes(
        &self,
        node: Option<&NodeName>,
        reserve: Duration,
        mut keep: impl FnMut(&NodeInfo) -> bool,
        max_nodes: usize,
    ) -> Result<Vec<NodeInfo>, SlurmError> {
        let mut args = vec!["show", "node", "-o"];
        if let Some(n) = node {
            args.push(n.as_str());
        }
        let left = self.left(reserve)?;
        let mut nodes = Vec::new();
        let mut too_many = false;
        let done = process::run_lines(self.program, &args, left, MAX_LINE, |line| {
            // (Valid UTF-8, as Slurm writes, is checked much faster than
            // the lossy conversion walks it.)
            let text = match std::str::from_utf8(line.text) {
                Ok(t) => std::borrow::Cow::Borrowed(t),
                Err(_) => String::from_utf8_lossy(line.text),
            };
            let Some(mut info) = NodeInfo::parse(&text) else {
                return Flow::Continue;
            };
            let asked_for = node.is_some_and(|n| n.as_str() == info.name);
            info.compact(if asked_for { None } else { Some(REASON_KEPT) });
            if !keep(&info) {
                return Flow::Continue;
            }
            if nodes.len() == max_nodes {
                too_many = true;
                return Flow::Stop;
            }
            nodes.push(info);
            Flow::Continue
        })?;
        if too_many {
            return Err(SlurmError::TooManyNodes { limit: max_nodes });
        }
        if let Ended::Exited(status) = done.ended {
            if !status.success() {
                return Err(self.failed(status.to_string(), &done.stderr));
            }
        }
        if done.cut_lines > 0 {
            log::warn!(
                "scontrol show node: {} node lines longer than {} KiB were read only that far \
                 (a claim in a Comment past it is not seen)",
                done.cut_lines,
                MAX_LINE >> 10
            );
        }
        Ok(nodes)
    }

    /// This node as Slurm sees it (`None`: Slurm does not know it).
    pub fn show_node(&self, node: &NodeName) -> Result<Option<NodeInfo>, SlurmError> {
        Ok(self
            .show_nodes(Some(node))?
            .into_iter()
            .find(|n| n.name == node.as_str()))
    }

    fn run(&self, args: &[&str]) -> Result<String, SlurmError> {
        self.run_leaving(args, Duration::ZERO)
    }

    fn run_leaving(&self, args: &[&str], reserve: Duration) -> Result<String, SlurmError> {
        let left = self.left(reserve)?;
        let done = process::run(self.program, args, left, MAX_OUTPUT)?;
        if !done.status.success() {
            return Err(self.failed(done.status.to_string(), &done.stderr));
        }
        Ok(done.stdout)
    }

    /// The budget a call may use, keeping `reserve` for later calls.
    fn left(&self, reserve: Duration) -> Result<Duration, SlurmError> {
        let left = self.remaining().saturating_sub(reserve);
        if left.is_zero() {
            return Err(SlurmError::BudgetSpent {
                budget_ms: self.budget.as_millis() as u64,
            });
        }
        Ok(left)
    }

    fn failed(&self, status: String, stderr: &str) -> SlurmError {
        SlurmError::Failed {
            program: self.program.display().to_string(),
            status,
            stderr: stderr.trim().chars().take(500).collect(),
        }
    }
}

/// A reason gpu-health gives Slurm: one of ours, one line, within
/// Slurm's bound.
fn check_reason(reason: &str) -> Result<(), SlurmError> {
    if !is_own_reason(reason) || reason.contains(['\n', '\r']) || reason.len() > 255 {
        return Err(SlurmError::BadArgument {
            what: "reason",
            value: reason.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node line as `scontrol show node -o` of Slurm `series` prints
    /// it, padded to about 1 KB with what real clusters carry (features,
    /// gres, OS, TRES, a JSON Extra).
    fn node_line(
        series: &str,
        name: &str,
        state: &str,
        parts: &str,
        reason: Option<&str>,
        comment: Option<&str>,
    ) -> String {
        let mut l = format!(
            "NodeName={name} Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUEfctv=224 CPUTot=224 \
             CPULoad=3.12 AvailableFeatures=h100,nvlink,ib400,sapphirerapids,rack12,rowb \
             ActiveFeatures=h100,nvlink,ib400,sapphirerapids,rack12,rowb \
             Gres=gpu:h100:8(S:0-1),nic:mlx5:8 NodeAddr={name} NodeHostName={name} \
             Version={series}.5 OS=Linux 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22) \
             RealMemory=2063000 AllocMem=0 FreeMem=2011234 Sockets=2 Boards=1 State={state} \
             ThreadsPerCore=2 TmpDisk=3500000 Weight=10 Owner=N/A MCS_label=N/A Partitions={parts} \
             BootTime=2026-11-20T08:00:01 SlurmdStartTime=2026-11-20T08:01:12 \
             LastBusyTime=2026-11-29T13:59:58"
        );
        if series == "24.11" {
            l.push_str(" ResumeAfterTime=None");
        }
        l.push_str(
            " CfgTRES=cpu=224,mem=2063000M,billing=224,gres/gpu=8,gres/gpu:h100=8 AllocTRES= \
             CapWatts=n/a CurrentWatts=0 AveWatts=0",
        );
        if series == "22.05" {
            l.push_str(" ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s");
        }
        if let Some(r) = reason {
            l.push_str(&format!(" Reason={r} [root@2026-11-29T14:00:01]"));
        }
        if let Some(c) = comment {
            l.push_str(&format!(" Comment={c}"));
        }
        l.push_str(r#" Extra={"rack":"r12","row":"b","pdu":"b12-2","asset":"#);
        while l.len() < 1000 {
            l.push('7');
        }
        l.push_str(r#"","owner":"hpc-ops"}"#);
        l
    }

    /// A stand-in scontrol that prints `body`'s output whatever it is asked.
    fn stand_in(dir: &Path, body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("scontrol");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn a_node_behind_twenty_thousand_others_finds_its_claim() {
        let long_admin = format!("admin: {}", "x".repeat(600));
        for series in ["22.05", "24.11"] {
            let dir = tempfile::tempdir().unwrap();
            let table = dir.path().join("table");
            let mut text = String::new();
            for i in 1..20_000 {
                let name = format!("gpu{i:05}");
                let line = match i {
                    7 => node_line(
                        series,
                        &name,
                        "IDLE+DRAIN",
                        "gpu,all",
                        Some("gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)"),
                        None,
                    ),
                    11 => node_line(series, &name, "DOWN+DRAIN", "gpu", Some(&long_admin), None),
                    _ => node_line(series, &name, "MIXED", "gpu,all", None, None),
                };
                text.push_str(&line);
                text.push('\n');
            }
            let me = node_line(
                series,
                "gpu20000",
                "MIXED",
                "gpu,all",
                None,
                Some("gpu-health-claim:1764590000123"),
            );
            text.push_str(&me);
            text.push('\n');
            assert!(text.len() > 20_000_000, "{}", text.len());
            std::fs::write(&table, &text).unwrap();
            let program = stand_in(dir.path(), &format!("exec cat '{}'", table.display()));
            let s = Scontrol::new(&program, Duration::from_secs(60));
            let nodes = s.show_nodes(None).unwrap();
            assert_eq!(nodes.len(), 20_000, "{series}");
            let last = &nodes[19_999];
            assert_eq!(last.name, "gpu20000");
            assert_eq!(last.claim_ms, Some(1_764_590_000_123), "{series}");
            assert_eq!(last.partitions, ["gpu", "all"]);
            assert!(nodes[6].drained_by_us(), "{:?}", nodes[6]);
            assert_eq!(nodes[6].reason_time.as_deref(), Some("2026-11-29T14:00:01"));
            let admin = nodes[10].reason.as_deref().unwrap();
            assert_eq!(admin.len(), REASON_KEPT, "another node's reason is capped");
            assert!(long_admin.starts_with(admin));
            assert!(nodes[10].is_drained() && !nodes[10].drained_by_us());
        }
    }

    #[test]
    fn the_node_asked_for_keeps_its_whole_reason() {
        let dir = tempfile::tempdir().unwrap();
        // A multi-byte character across the cap: cut before it.
        let reason = format!("admin: {}é{}", "x".repeat(REASON_KEPT - 8), "y".repeat(300));
        let line = node_line("24.11", "n1", "IDLE+DRAIN", "gpu", Some(&reason), None);
        std::fs::write(dir.path().join("table"), format!("{line}\n")).unwrap();
        let table = dir.path().join("table");
        let program = stand_in(dir.path(), &format!("exec cat '{}'", table.display()));
        let s = Scontrol::new(&program, Duration::from_secs(10));
        let me = s.show_node(&node("n1")).unwrap().unwrap();
        assert_eq!(me.reason.as_deref(), Some(reason.as_str()));
        let all = s.show_nodes(None).unwrap();
        let cut = all[0].reason.as_deref().unwrap();
        assert_eq!(cut.len(), REASON_KEPT - 1);
        assert!(reason.starts_with(cut));
    }

    #[test]
    fn an_endless_table_is_refused_and_scontrol_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let program = stand_in(
            dir.path(),
            "exec yes 'NodeName=n1 State=IDLE Partitions=gpu'",
        );
        let s = Scontrol::new(&program, Duration::from_secs(20));
        let t0 = Instant::now();
        let r = s.read_nodes(None, Duration::ZERO, |_| true, 1000);
        assert!(
            matches!(r, Err(SlurmError::TooManyNodes { limit: 1000 })),
            "{r:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let msg = SlurmError::TooManyNodes { limit: MAX_NODES }.to_string();
        assert!(msg.contains("1000000 nodes"), "{msg}");
        // Only the nodes kept count towards the bound.
        let mut seen = 0;
        let program = stand_in(
            dir.path(),
            "i=0; while [ $i -lt 3000 ]; do echo \"NodeName=n$i State=IDLE\"; i=$((i+1)); done",
        );
        let s = Scontrol::new(&program, Duration::from_secs(20));
        let kept = s
            .read_nodes(
                None,
                Duration::ZERO,
                |n| {
                    seen += 1;
                    n.name.ends_with('7')
                },
                1000,
            )
            .unwrap();
        assert_eq!((seen, kept.len()), (3000, 300));
    }

    #[test]
    fn a_failing_or_hanging_table_read_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let program = stand_in(
            dir.path(),
            "echo 'NodeName=n1 State=IDLE'; echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1",
        );
        let s = Scontrol::new(&program, Duration::from_secs(10));
        match s.show_nodes(None) {
            Err(SlurmError::Failed { stderr, .. }) => {
                assert!(stderr.contains("Unable to contact"), "{stderr}")
            }
            r => panic!("{r:?}"),
        }
        let program = stand_in(dir.path(), "echo 'NodeName=n1 State=IDLE'; exec sleep 30");
        let s = Scontrol::new(&program, Duration::from_millis(300));
        assert!(matches!(
            s.show_nodes(None),
            Err(SlurmError::Run(RunError::Timeout { .. }))
        ));
    }

    fn node(n: &str) -> NodeName {
        NodeName::parse(n).unwrap()
    }

    #[test]
    fn refuses_foreign_reasons() {
        let s = Scontrol::new(Path::new("/bin/true"), Duration::from_secs(2));
        assert!(matches!(
            s.drain(&node("n1"), "admin: x", None),
            Err(SlurmError::BadArgument { .. })
        ));
        assert!(matches!(
            s.drain(&node("n1"), "gpu-health: x\nNodeName=n2", Some(1)),
            Err(SlurmError::BadArgument { .. })
        ));
        assert!(s
            .drain(&node("n1"), "gpu-health: x (drain)", Some(1))
            .is_ok());
        assert!(matches!(
            s.reboot(&node("n1"), "admin: x", AfterReboot::Resume),
            Err(SlurmError::BadArgument { .. })
        ));
        let long = format!("gpu-health: {}", "x".repeat(250));
        assert!(matches!(
            s.reboot(&node("n1"), &long, AfterReboot::Resume),
            Err(SlurmError::BadArgument { .. })
        ));
    }

    #[test]
    fn drain_stamps_and_reboot_asks_asap_with_the_reason_as_one_word() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("args");
        let program = stand_in(
            dir.path(),
            &format!(
                "printf '%s|' \"$@\" >> {}; echo >> {}",
                log.display(),
                log.display()
            ),
        );
        let s = Scontrol::new(&program, Duration::from_secs(5));
        let n = node("n1");
        s.drain(
            &n,
            "gpu-health: Xid 79 GPU3 (reboot)",
            Some(1_764_590_000_123),
        )
        .unwrap();
        s.reboot(&n, "gpu-health: Xid 79 GPU3 (reboot)", AfterReboot::Resume)
            .unwrap();
        s.reboot(
            &n,
            "gpu-health: Xid 79 GPU3 (reboot)",
            AfterReboot::StayDrained,
        )
        .unwrap();
        let calls = std::fs::read_to_string(&log).unwrap();
        let calls: Vec<&str> = calls.lines().collect();
        assert_eq!(
            calls,
            [
                "update|NodeName=n1|State=DRAIN|Reason=gpu-health: Xid 79 GPU3 (reboot)|\
                 Comment=gpu-health-drained:1764590000123|",
                "reboot|ASAP|nextstate=RESUME|reason=gpu-health: Xid 79 GPU3 (reboot)|n1|",
                "reboot|reason=gpu-health: Xid 79 GPU3 (reboot)|n1|",
            ]
        );
    }

    #[test]
    fn one_budget_for_every_call_of_a_run() {
        let t0 = Instant::now();
        // `sleep update NodeName=...` fails at once; a slow scontrol is
        // stood in for by `sleep` reading its first word as seconds.
        let slow = Scontrol::new(Path::new("/bin/sleep"), Duration::from_millis(300));
        assert!(matches!(
            slow.run(&["5"]),
            Err(SlurmError::Run(RunError::Timeout { .. }))
        ));
        assert!(matches!(
            slow.run(&["5"]),
            Err(SlurmError::BudgetSpent { .. })
        ));
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let s = Scontrol::new(Path::new("/bin/sleep"), Duration::from_secs(2));
        assert!(matches!(s.run(&["x"]), Err(SlurmError::Failed { .. })));
    }
}
