//! The kind of drain is what tells an admin whether to wait or act, and
//! it ends the reason: every reason, however many findings of whichever
//! check, fits in the width the docs recommend for `sinfo -R`, kind
//! included, and the docs recommend no narrower one.

use std::path::Path;

use gpu_health_core::checks::REGISTRY;
use gpu_health_core::finding::{
    drain_reason_marked, own_reason, Action, Finding, INSPECTION_MARK, MAX_REASON_LEN, REBOOT_MARK,
    SINFO_REASON_WIDTH,
};

/// A finding of `check` with a summary of `len` bytes, as long as any
/// the check could write and longer (names, PCI addresses, counts).
fn finding(check: &str, action: Action, gpu: u32, len: usize) -> Finding {
    let mut summary = format!("{check} GPU{gpu} 0000:{gpu:02x}:00.0 ");
    while summary.len() < len {
        summary.push_str("mlx5_10:1,");
    }
    summary.truncate(len);
    Finding::gpu(check, action, gpu, None, summary, "m".into())
}

/// Where the reason's kind ends (a byte count), and the kind.
fn kind_end(reason: &str) -> (usize, Action) {
    let (ours, kind) = own_reason(reason).unwrap_or_else(|| panic!("no kind in {reason:?}"));
    (ours.len(), kind)
}

#[test]
fn every_checks_longest_reason_shows_its_kind_at_the_docs_width() {
    for check in REGISTRY.iter().map(|c| c.name()) {
        for len in [20, 60, 90, 150, 400] {
            for count in [1, 2, 3, 8, 40] {
                for kind in [Action::DrainUntilClean, Action::Drain] {
                    let findings: Vec<Finding> =
                        (0..count).map(|g| finding(check, kind, g, len)).collect();
                    for mark in [None, Some(REBOOT_MARK), Some(INSPECTION_MARK)] {
                        let reason = drain_reason_marked(&findings, mark).unwrap();
                        assert!(
                            reason.len() <= MAX_REASON_LEN,
                            "{} bytes: {reason}",
                            reason.len()
                        );
                        let (end, read) = kind_end(&reason);
                        assert!(
                            end <= SINFO_REASON_WIDTH,
                            "the kind ends at byte {end}, past %{SINFO_REASON_WIDTH}E: {reason}"
                        );
                        let want = if mark.is_some() { Action::Drain } else { kind };
                        assert_eq!(read, want, "{reason}");
                    }
                }
            }
        }
    }
}

/// Every `sinfo -R -o "%<width>E ..."` the docs, the demo and the
/// end-to-end tests show is at least as wide as every reason.
#[test]
fn the_docs_recommend_a_sinfo_width_that_shows_the_kind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.extend([
        root.join("README.md"),
        root.join("ci/demo"),
        root.join("ci/e2e/10-prolog.sh"),
    ]);
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (i, _) in text.match_indices("sinfo -R") {
            let line = &text[i..text[i..].find('\n').map_or(text.len(), |n| i + n)];
            let Some(o) = line.find(" -o ").or_else(|| line.find(" -h -o ")) else {
                continue;
            };
            let fmt = &line[o..];
            let Some(pct) = fmt.find('%') else { continue };
            let digits: String = fmt[pct + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if !fmt[pct + 1 + digits.len()..].starts_with('E') {
                continue;
            }
            let width: usize = digits.parse().unwrap_or(0);
            assert!(
                width >= SINFO_REASON_WIDTH,
                "{}: {line:?} cuts reasons at {width} (they are up to {MAX_REASON_LEN} bytes)",
                file.display()
            );
            seen += 1;
        }
    }
    assert!(seen >= 3, "the docs show sinfo -R with a width");
}
