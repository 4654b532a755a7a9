//! gpu-health's words in a node's Slurm Comment, joined by commas into
//! one word: the drain brake's claim and drain stamp, and the reboots
//! gpu-health asked for, kept beside them so that they survive a state
//! directory emptied at every boot (diskless nodes):
//! `gpu-health-reboots:` then `<unix s>=<kind>` entries joined by `;`
//! (`Xid 79` written `Xid_79`), as in
//! `gpu-health-drained:<ms>,gpu-health-reboots:1767000000=Xid_79`.
//! Slurm keeps a node's Comment across its reboots and resumes.

/// What a brake claim's Comment starts with; the stamp (unix ms of the
/// claiming node's clock) follows.
pub const CLAIM_PREFIX: &str = "gpu-health-claim:";

/// What the Comment of a node gpu-health drained through the brake
/// starts with; the drain's time (unix ms of the draining node's clock)
/// follows. The brake's time window counts these (`ops::brake`).
pub const DRAINED_PREFIX: &str = "gpu-health-drained:";

/// The Comment of the brake's claim at `stamp_ms` on a node whose own
/// earlier drain was stamped `kept`: the claim, then that stamp, one word
/// (`gpu-health-claim:<ms>,gpu-health-drained:<ms>`), so that the time
/// window still counts that drain while the claim stands.
pub fn claim_comment(stamp_ms: u64, kept: Option<u64>) -> String {
    match kept {
        Some(d) => format!("{CLAIM_PREFIX}{stamp_ms},{DRAINED_PREFIX}{d}"),
        None => format!("{CLAIM_PREFIX}{stamp_ms}"),
    }
}

/// The Comment once a claim is withdrawn: the node's own drain stamp
/// back, or nothing.
pub fn withdrawn_comment(kept: Option<u64>) -> String {
    kept.map(|d| format!("{DRAINED_PREFIX}{d}"))
        .unwrap_or_default()
}

pub const REBOOTS_PREFIX: &str = "gpu-health-reboots:";

/// Entries kept at most (`[remediation] max_reboots` is small; the
/// newest are kept).
pub const MAX_ENTRIES: usize = 16;

/// Bytes of a kind kept (kinds are `Xid 79`, `SXid 12028`, check names).
const MAX_KIND: usize = 32;

/// A kind as the word writes it: letters, digits, `_` (for a space) and
/// `-`, at most [`MAX_KIND`] bytes (never the word's own `,`, `;`, `=`).
fn written_kind(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= MAX_KIND
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The word for `reboots` (unix seconds, kind), or `None` for none.
pub fn reboots_word(reboots: &[(u64, String)]) -> Option<String> {
    let start = reboots.len().saturating_sub(MAX_ENTRIES);
    let entries: Vec<String> = reboots[start..]
        .iter()
        .filter_map(|(s, kind)| {
            let k = kind.replace(' ', "_");
            written_kind(&k).then(|| format!("{s}={k}"))
        })
        .collect();
    (!entries.is_empty()).then(|| format!("{REBOOTS_PREFIX}{}", entries.join(";")))
}

/// The reboots a Comment holds (none when it holds no such word or a
/// malformed one: nothing is guessed).
pub fn reboots_in(comment: &str) -> Vec<(u64, String)> {
    let Some(word) = comment
        .split(',')
        .find_map(|w| w.strip_prefix(REBOOTS_PREFIX))
    else {
        return Vec::new();
    };
    word.split(';')
        .take(MAX_ENTRIES)
        .filter_map(|e| {
            let (s, k) = e.split_once('=')?;
            let s: u64 = s.parse().ok()?;
            written_kind(k).then(|| (s, k.replace('_', " ")))
        })
        .collect()
}

/// The Comment with its reboots word replaced by `word` (removed for
/// `None`), or `None` when the Comment holds anything that is not
/// gpu-health's (an admin's note is never overwritten).
pub fn comment_with(comment: Option<&str>, word: Option<&str>) -> Option<String> {
    let mut words: Vec<&str> = Vec::new();
    for w in comment
        .unwrap_or_default()
        .split(',')
        .filter(|w| !w.is_empty())
    {
        if w.starts_with(REBOOTS_PREFIX) {
            continue;
        }
        if !(w.starts_with(CLAIM_PREFIX) || w.starts_with(DRAINED_PREFIX)) {
            return None;
        }
        words.push(w);
    }
    words.extend(word);
    Some(words.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_and_read_back() {
        let list = vec![
            (1_767_000_000, "Xid 79".to_string()),
            (1_767_003_600, "ecc-uncorrected".to_string()),
        ];
        let word = reboots_word(&list).unwrap();
        assert_eq!(
            word,
            "gpu-health-reboots:1767000000=Xid_79;1767003600=ecc-uncorrected"
        );
        let comment = comment_with(Some("gpu-health-drained:1767000000123"), Some(&word)).unwrap();
        assert_eq!(reboots_in(&comment), list);
        // The brake's words read as before.
        let info =
            crate::slurm::NodeInfo::parse(&format!("NodeName=n1 State=IDLE Comment={comment}"))
                .unwrap();
        assert_eq!(info.drained_ms, Some(1_767_000_000_123));
        assert_eq!(reboots_in(info.comment.as_deref().unwrap()), list);
        // Replaced, then removed; the drain stamp stays.
        let one = reboots_word(&list[..1]).unwrap();
        let replaced = comment_with(Some(&comment), Some(&one)).unwrap();
        assert_eq!(reboots_in(&replaced), list[..1]);
        assert_eq!(
            comment_with(Some(&replaced), None).unwrap(),
            "gpu-health-drained:1767000000123"
        );
    }

    #[test]
    fn an_admins_comment_is_left_alone_and_junk_is_not_guessed() {
        assert_eq!(comment_with(Some("RMA-4411"), Some("x")), None);
        assert_eq!(comment_with(None, None).unwrap(), "");
        for junk in [
            "gpu-health-reboots:",
            "gpu-health-reboots:x=Xid_79",
            "gpu-health-reboots:17=",
            "gpu-health-reboots:17=Xid 79",
            "gpu-health-reboots:17=a$b",
        ] {
            assert!(reboots_in(junk).is_empty(), "{junk}");
        }
        let many: Vec<(u64, String)> = (0..40).map(|i| (i, "Xid 79".to_string())).collect();
        let word = reboots_word(&many).unwrap();
        let back = reboots_in(&word);
        assert_eq!(back.len(), MAX_ENTRIES);
        assert_eq!(back[0].0, 40 - MAX_ENTRIES as u64, "the newest are kept");
    }
}
