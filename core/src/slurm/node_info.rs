//! One line of `scontrol show node -o`: what gpu-health keeps of a node.

use super::{CLAIM_PREFIX, DRAINED_PREFIX};
use crate::finding::is_own_reason;

/// One line of `scontrol show node -o`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// e.g. `IDLE+DRAIN`, `MIXED`, `DOWN*+DRAIN`.
    pub state: String,
    pub reason: Option<String>,
    /// When slurmctld set the reason: `2026-11-29T14:00:01` from
    /// ` [root@2026-11-29T14:00:01]` (ISO stamps of one slurmctld sort as
    /// strings; the drain brake ranks drains by them).
    pub reason_time: Option<String>,
    pub partitions: Vec<String>,
    /// The drain brake's claim on this node (`Comment=gpu-health-claim:<ms>`):
    /// the claiming node's clock in unix ms.
    pub claim_ms: Option<u64>,
    /// When gpu-health drained this node through the brake
    /// (`Comment=gpu-health-drained:<ms>`, the draining node's clock):
    /// the brake's time window counts it. A stamp that is not a number
    /// reads as [`u64::MAX`] (from the future: counted as recent).
    pub drained_ms: Option<u64>,
    /// The Comment as printed when it is gpu-health's (its words are one
    /// word: `slurm::reboots_word`); another's is not kept (a node table
    /// of thousands of nodes holds only what gpu-health reads).
    pub comment: Option<String>,
    /// The node has a Comment that is not gpu-health's (an admin's note):
    /// gpu-health does not write over it.
    pub foreign_comment: bool,
}

/// Bytes of a gpu-health Comment kept (its words are about 200).
const MAX_COMMENT: usize = 1024;

/// Digits of a stamp read at most (unix ms have 13).
const MAX_STAMP_DIGITS: usize = 20;

impl NodeInfo {
    /// Parse `NodeName=n1 Arch=... State=IDLE+DRAIN ... Reason=text [root@...]`.
    /// Reason is the last field and may contain spaces.
    pub fn parse(line: &str) -> Option<NodeInfo> {
        // One pass over the words; the first of each key counts (and the
        // first Comment that is a claim).
        let (mut name, mut state, mut partitions, mut claim) = (None, None, None, None);
        let (mut drained, mut comment) = (None, None);
        for word in line.split_ascii_whitespace() {
            // Most of a 1 KB line is fields of no interest: look at the
            // words that may be ours only.
            if !matches!(word.as_bytes().first(), Some(b'N' | b'S' | b'P' | b'C')) {
                continue;
            }
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            match key {
                "NodeName" if name.is_none() => name = Some(value),
                "State" if state.is_none() => state = Some(value),
                "Partitions" if partitions.is_none() => partitions = Some(value),
                "Comment" if comment.is_none() => {
                    comment = Some(value);
                    // A claim may keep the node's drain stamp after it
                    // (`slurm::claim_comment`).
                    let mut parts = value.splitn(3, ',');
                    let first = parts.next().unwrap_or_default();
                    claim = first.strip_prefix(CLAIM_PREFIX);
                    drained = first.strip_prefix(DRAINED_PREFIX);
                    if claim.is_some() {
                        drained = parts.next().and_then(|p| p.strip_prefix(DRAINED_PREFIX));
                    }
                }
                _ => {}
            }
        }
        let name = name?.to_string();
        let state = state.unwrap_or_default().to_string();
        let partitions = partitions
            .map(|p| {
                p.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let (reason, reason_time) = match memchr::memmem::find(line.as_bytes(), b" Reason=") {
            None => (None, None),
            Some(i) => split_reason(&line[i + " Reason=".len()..]),
        };
        let claim_ms = claim.and_then(|ms| ms.parse().ok());
        let drained_ms = drained.map(|ms| {
            Some(ms)
                .filter(|ms| ms.len() <= MAX_STAMP_DIGITS)
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(u64::MAX)
        });
        Some(NodeInfo {
            name,
            state,
            reason: reason.filter(|r| !r.is_empty() && r != "(null)"),
            reason_time,
            partitions,
            claim_ms,
            drained_ms,
            foreign_comment: comment
                .is_some_and(|c| !c.is_empty() && c != "(null)" && !c.starts_with("gpu-health-")),
            comment: comment
                .filter(|c| c.starts_with("gpu-health-") && c.len() <= MAX_COMMENT)
                .map(str::to_string),
        })
    }

    /// Keep at most `reason_cap` bytes of the reason (cut at a character
    /// boundary), and no spare capacity: a table of thousands of nodes
    /// holds only what it uses.
    pub(super) fn compact(&mut self, reason_cap: Option<usize>) {
        if let (Some(r), Some(cap)) = (self.reason.as_mut(), reason_cap) {
            if r.len() > cap {
                let mut end = cap;
                while !r.is_char_boundary(end) {
                    end -= 1;
                }
                r.truncate(end);
            }
        }
        if let Some(r) = self.reason.as_mut() {
            r.shrink_to_fit();
        }
        self.partitions.shrink_to_fit();
    }

    pub fn is_drained(&self) -> bool {
        self.state
            .split('+')
            .any(|s| s == "DRAIN" || s == "DRAINED" || s == "DRAINING")
    }

    /// Slurm has a reboot of the node pending (`scontrol reboot`:
    /// REBOOT_REQUESTED, then REBOOT_ISSUED): Slurm sets the node's state
    /// after the reboot, and 25.11 and later refuse to set it IDLE before.
    pub fn reboot_pending(&self) -> bool {
        self.state.split('+').any(|s| s.starts_with("REBOOT"))
    }

    /// A job runs or ends on the node (`ALLOCATED`, `MIXED`,
    /// `COMPLETING`, also as a flag after the base state).
    pub fn has_jobs(&self) -> bool {
        self.state.split('+').any(|s| {
            matches!(
                s.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']),
                "ALLOCATED" | "ALLOC" | "MIXED" | "COMPLETING"
            )
        })
    }

    /// Drained with a reason of gpu-health's.
    pub fn drained_by_us(&self) -> bool {
        self.is_drained() && self.has_own_reason()
    }

    /// Out of service for gpu-health: drained, rebooting or down (a
    /// reboot it asked for) with a reason of its own. The brake counts
    /// these, and the runs take them as gpu-health's drain.
    pub fn held_by_us(&self) -> bool {
        (self.is_drained() || self.reboot_pending() || self.is_down()) && self.has_own_reason()
    }

    /// `DOWN` (also `DOWN*`), as during a reboot.
    pub fn is_down(&self) -> bool {
        self.state
            .split('+')
            .any(|s| s.trim_end_matches('*') == "DOWN")
    }

    fn has_own_reason(&self) -> bool {
        self.reason.as_deref().is_some_and(is_own_reason)
    }
}

/// The fields `scontrol show node -o` may print after the reason.
const AFTER_REASON: [&str; 5] = [
    " Comment=",
    " Extra=",
    " InstanceId=",
    " InstanceType=",
    " ReservationName=",
];

/// `text [user@time] Comment=...` -> the reason and its time. Slurm puts
/// the reason's stamp right after it, and the optional Comment, Extra,
/// ... fields after that; without a stamp the reason ends at the first of
/// those fields.
fn split_reason(rest: &str) -> (Option<String>, Option<String>) {
    let mut from = 0;
    while let Some(j) = rest[from..].find(" [").map(|j| j + from) {
        let inner_end = rest[j + 2..].find(']').map(|k| k + j + 2);
        if let Some(end) = inner_end {
            let stamp = &rest[j + 2..end];
            let after = &rest[end + 1..];
            let ends_here =
                after.trim_end().is_empty() || AFTER_REASON.iter().any(|k| after.starts_with(k));
            if ends_here && !stamp.contains(char::is_whitespace) {
                let time = stamp.rsplit_once('@').map_or(stamp, |(_, t)| t);
                return (Some(rest[..j].to_string()), Some(time.to_string()));
            }
        }
        from = j + 2;
    }
    let end = AFTER_REASON
        .iter()
        .filter_map(|k| rest.find(k))
        .min()
        .unwrap_or(rest.len());
    (Some(rest[..end].trim_end().to_string()), None)
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
        assert!(n.is_drained() && n.drained_by_us());
        assert_eq!(n.partitions, vec!["gpu", "debug"]);
        assert_eq!(
            n.reason.as_deref(),
            Some("gpu-health: Xid 79 GPU3 0000:5d:00.0 (drain)")
        );
        assert_eq!(n.reason_time.as_deref(), Some("2026-11-29T14:00:01"));
        let idle = NodeInfo::parse("NodeName=n1 State=IDLE Partitions=gpu").unwrap();
        assert!(!idle.is_drained());
        assert_eq!((idle.reason, idle.reason_time), (None, None));
        let plain = NodeInfo::parse("NodeName=n3 State=DRAIN Reason=admin").unwrap();
        assert_eq!(plain.reason.as_deref(), Some("admin"));
        assert!(!plain.drained_by_us());
        assert!(NodeInfo::parse("garbage").is_none());
    }

    #[test]
    fn reason_ends_before_comment_and_extra() {
        // As 22.05 and 24.11 print them: the reason's stamp, then the
        // optional Comment and Extra.
        let l = "NodeName=n4 State=IDLE+DRAIN Partitions=gpu \
                 Reason=gpu-health: Xid 79 GPU3 (drain) [root@2026-11-29T14:00:01] \
                 Comment=RMA ticket [ops@x] 42 Extra=rack=7";
        let n = NodeInfo::parse(l).unwrap();
        assert_eq!(n.reason.as_deref(), Some("gpu-health: Xid 79 GPU3 (drain)"));
        assert_eq!(n.reason_time.as_deref(), Some("2026-11-29T14:00:01"));
        assert_eq!(n.claim_ms, None, "an admin's comment is no claim");
        let claimed = NodeInfo::parse(
            "NodeName=n5 State=MIXED Partitions=gpu Comment=gpu-health-claim:1764590000123",
        )
        .unwrap();
        assert_eq!(claimed.claim_ms, Some(1_764_590_000_123));
        assert_eq!(claimed.reason, None);
        let both = NodeInfo::parse(
            "NodeName=n6 State=IDLE Reason=admin: cables [root@2026-11-29T14:00:01] \
             Comment=gpu-health-claim:17",
        )
        .unwrap();
        assert_eq!(both.reason.as_deref(), Some("admin: cables"));
        assert_eq!(both.claim_ms, Some(17));
        // No stamp: the reason still ends at the next field.
        let bare = NodeInfo::parse("NodeName=n7 State=DOWN Reason=broken Extra=x").unwrap();
        assert_eq!(
            (bare.reason.as_deref(), bare.reason_time),
            (Some("broken"), None)
        );
        let garbled =
            NodeInfo::parse("NodeName=n8 State=IDLE Comment=gpu-health-claim:12x").unwrap();
        assert_eq!(garbled.claim_ms, None);
        // A claim that keeps the node's own drain stamp: both read.
        let kept = NodeInfo::parse(
            "NodeName=n9 State=IDLE Comment=gpu-health-claim:20,gpu-health-drained:10",
        )
        .unwrap();
        assert_eq!((kept.claim_ms, kept.drained_ms), (Some(20), Some(10)));
        let c = crate::slurm::claim_comment(20, Some(10));
        assert_eq!(c, "gpu-health-claim:20,gpu-health-drained:10");
        assert_eq!(
            crate::slurm::withdrawn_comment(Some(10)),
            "gpu-health-drained:10"
        );
        assert_eq!(crate::slurm::withdrawn_comment(None), "");
        // Only a claim keeps a stamp after it.
        let odd =
            NodeInfo::parse("NodeName=n9 State=IDLE Comment=RMA,gpu-health-drained:10").unwrap();
        assert_eq!((odd.claim_ms, odd.drained_ms), (None, None));
    }

    #[test]
    fn drain_stamps_are_read_and_garbage_is_recent() {
        let at = |c: &str| {
            NodeInfo::parse(&format!("NodeName=n1 State=IDLE+DRAIN Comment={c}"))
                .unwrap()
                .drained_ms
        };
        assert_eq!(
            at("gpu-health-drained:1764590000123"),
            Some(1_764_590_000_123)
        );
        assert_eq!(at("gpu-health-drained:12x"), Some(u64::MAX));
        assert_eq!(at("gpu-health-drained:"), Some(u64::MAX));
        assert_eq!(
            at(&format!("gpu-health-drained:{}", "9".repeat(5000))),
            Some(u64::MAX)
        );
        assert_eq!(at("gpu-health-claim:17"), None);
        assert_eq!(at("RMA"), None);
        let rebooting = NodeInfo::parse(
            "NodeName=n1 State=DOWN+REBOOT_ISSUED Reason=gpu-health: Xid 79 GPU3 (reboot)",
        )
        .unwrap();
        assert!(rebooting.held_by_us() && !rebooting.drained_by_us());
        let down = NodeInfo::parse("NodeName=n1 State=DOWN* Reason=gpu-health: x (drain)").unwrap();
        assert!(down.held_by_us());
        let admin = NodeInfo::parse("NodeName=n1 State=DOWN Reason=cables").unwrap();
        assert!(!admin.held_by_us());
    }

    #[test]
    fn a_pending_reboot_is_seen_in_the_state_flags() {
        for (state, pending) in [
            ("MIXED+DRAIN+REBOOT_REQUESTED", true),
            ("IDLE+DRAIN+REBOOT_ISSUED", true),
            ("DOWN+REBOOT_ISSUED+NOT_RESPONDING", true),
            ("IDLE+DRAIN", false),
            ("REBOOTING", true),
            ("MIXED", false),
        ] {
            let n = NodeInfo::parse(&format!("NodeName=n1 State={state} Partitions=gpu")).unwrap();
            assert_eq!(n.reboot_pending(), pending, "{state}");
        }
    }
}
