//! A stand-in slurmctld for the tests of the brake and the fault ledger:
//! a shell `scontrol` over a directory that keeps every node's State,
//! Reason and Comment as slurmctld does, for several nodes of one
//! partition (the end-to-end tests run the real one).

use std::path::{Path, PathBuf};

/// How the stand-in answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Works,
    /// Every call exits 1, as when slurmctld is down.
    Fails,
    /// Every call hangs (the run's budget must end it).
    Hangs,
    /// `show node` answers, `update` fails (a controller refusing writes).
    UpdatesFail,
}

pub struct FakeCluster {
    dir: PathBuf,
}

impl FakeCluster {
    /// A partition `gpu` of `nodes`, all idle, in `dir` (created).
    pub fn new(dir: &Path, nodes: &[&str]) -> FakeCluster {
        std::fs::create_dir_all(dir).expect("cluster dir");
        for n in nodes {
            std::fs::write(dir.join(format!("{n}.node")), "").expect("node file");
        }
        let c = FakeCluster {
            dir: dir.to_path_buf(),
        };
        c.set_mode(Mode::Works);
        c.write_script();
        c
    }

    /// The stand-in's path, for `scontrol = ...` in a configuration.
    pub fn scontrol(&self) -> PathBuf {
        self.dir.join("scontrol")
    }

    pub fn set_mode(&self, mode: Mode) {
        let word = match mode {
            Mode::Works => "works",
            Mode::Fails => "fails",
            Mode::Hangs => "hangs",
            Mode::UpdatesFail => "update-fails",
        };
        std::fs::write(self.dir.join("mode"), word).expect("mode");
    }

    /// Drain `node` with `reason`, as an admin (or another node's
    /// gpu-health) would.
    pub fn drain(&self, node: &str, reason: &str) {
        std::fs::write(self.dir.join(format!("{node}.reason")), reason).expect("reason");
    }

    pub fn resume(&self, node: &str) {
        let _ = std::fs::remove_file(self.dir.join(format!("{node}.reason")));
    }

    /// The drain reason of `node`, if drained.
    pub fn reason(&self, node: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(format!("{node}.reason"))).ok()
    }

    pub fn comment(&self, node: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(format!("{node}.comment"))).ok()
    }

    /// Every call the stand-in got, one line each.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The node comes back from a reboot Slurm had pending for it, as
    /// slurmctld applies the request's `nextstate` (`RESUME`: back in
    /// service; none: drained as before). False when none was pending.
    pub fn boot(&self, node: &str) -> bool {
        let pending = self.dir.join(format!("{node}.reboot"));
        let Ok(next) = std::fs::read_to_string(&pending) else {
            return false;
        };
        if next == "RESUME" {
            self.resume(node);
        }
        std::fs::remove_file(pending).expect("pending reboot");
        true
    }

    /// The reboot Slurm has pending for `node`: its `nextstate` ("" for
    /// none).
    pub fn reboot_pending(&self, node: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(format!("{node}.reboot"))).ok()
    }

    /// The `State=DRAIN` updates it got.
    pub fn drains(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.contains("State=DRAIN"))
            .count()
    }

    fn write_script(&self) {
        use std::os::unix::fs::PermissionsExt;
        let d = self.dir.display();
        let body = format!(
            r#"#!/bin/sh
d="{d}"
echo "$*" >> "$d/calls"
mode=$(cat "$d/mode")
case "$mode" in
fails) echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1 ;;
hangs) exec sleep 30 ;;
esac
line() {{
    st=IDLE; r=""; c=""
    if [ -f "$d/$1.reason" ]; then
        st=IDLE+DRAIN
        r=" Reason=$(cat "$d/$1.reason") [root@2026-12-01T00:00:00]"
    fi
    [ -f "$d/$1.reboot" ] && st="$st+REBOOT_REQUESTED"
    [ -f "$d/$1.comment" ] && c=" Comment=$(cat "$d/$1.comment")"
    echo "NodeName=$1 Arch=x86_64 CoresPerSocket=1 State=$st ThreadsPerCore=1 Partitions=gpu$r$c"
}}
case "$1 $2" in
"show node")
    if [ -n "$4" ]; then
        [ -f "$d/$4.node" ] || {{ echo "Node $4 not found" >&2; exit 1; }}
        line "$4"
    else
        for f in "$d"/*.node; do line "$(basename "$f" .node)"; done
    fi
    exit 0 ;;
esac
case "$1" in
reboot)
    shift
    next=""; asap=""; reason=""
    while [ $# -gt 1 ]; do
        case "$1" in
        ASAP) asap=1 ;;
        nextstate=*) next=${{1#nextstate=}} ;;
        reason=*) reason=${{1#reason=}} ;;
        esac
        shift
    done
    [ -f "$d/$1.node" ] || exit 1
    # A request while one is pending changes nothing (22.05, 24.11 and
    # 26.05: its nextstate and reason are ignored, it succeeds).
    [ -f "$d/$1.reboot" ] && exit 0
    printf '%s' "$next" > "$d/$1.reboot"
    if [ -n "$asap" ] || [ -f "$d/$1.reason" ]; then printf '%s' "$reason" > "$d/$1.reason"; fi
    exit 0 ;;
cancel_reboot)
    # The node stays drained with its reason (measured on 22.05, 24.11
    # and 26.05 for a node drained before the request). Without a reboot
    # pending slurmctld refuses (22.05 and 24.11 print this, 26.05
    # "slurm_update error: Invalid node state transition").
    [ -f "$d/$2.reboot" ] || {{ echo 'slurm_update error: Invalid node state specified' >&2; exit 1; }}
    rm -f "$d/$2.reboot"
    exit 0 ;;
update)
    [ "$mode" = update-fails ] && {{ echo 'slurm_update error: Unable to contact slurm controller' >&2; exit 1; }}
    n=${{2#NodeName=}}
    [ -f "$d/$n.node" ] || exit 1
    shift 2
    drain=""
    for a in "$@"; do
        case "$a" in
        State=DRAIN) drain=1 ;;
        State=RESUME) rm -f "$d/$n.reason" ;;
        Reason=*) printf '%s' "${{a#Reason=}}" > "$d/$n.reason.new.$$" ;;
        Comment=) rm -f "$d/$n.comment" ;;
        Comment=*) printf '%s' "${{a#Comment=}}" > "$d/$n.comment" ;;
        esac
    done
    if [ -n "$drain" ]; then mv "$d/$n.reason.new.$$" "$d/$n.reason"; fi
    rm -f "$d/$n.reason.new.$$"
    exit 0 ;;
esac
exit 1
"#
        );
        let p = self.scontrol();
        std::fs::write(&p, body).expect("write scontrol");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}
