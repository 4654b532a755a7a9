use crate::checks::fixtures::*;
use crate::checks::{EccHistory, LinkHistory};
use crate::config::Config;
use crate::finding::Action;

#[test]
fn pcie_only_boards_have_no_nvlink_finding() {
    let mut s = healthy();
    for g in &mut s.gpus {
        g.nvlinks.clear();
    }
    assert!(run(&s).is_empty());
}

/// A link never active since boot is on record (info) but warns nobody; a
/// link seen active earlier in this boot that is down now warns; a new
/// boot forgets what was seen.
#[test]
fn nvlinks_never_active_since_boot_do_not_warn() {
    let mut s = healthy();
    s.gpus[0].nvlinks[3].active = false;
    s.gpus[0].nvlinks[17].active = false;
    let cfg = Config::default();
    let ecc = EccHistory::default();
    let mut seen = LinkHistory::default().for_boot("boot-1");
    // Links 0-16 of GPU0 were seen up (17 never), every link of the others.
    seen.record(s.gpus.iter().flat_map(|g| {
        let uuid = g.uuid.as_deref().unwrap_or("");
        g.nvlinks
            .iter()
            .filter(move |l| !(g.index == 0 && l.link == 17))
            .map(move |l| (uuid, l.link))
    }));
    let f = run_seen(&s, &cfg, &ecc, &seen);
    let got: Vec<(&str, Action, &str)> = f
        .iter()
        .map(|f| (f.check.as_str(), f.action, f.summary.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "nvlink",
                Action::Warn,
                "NVLink 1 of 18 inactive GPU0 0000:18:00.0"
            ),
            (
                "nvlink-unused",
                Action::Info,
                "NVLink 1 of 18 never active GPU0 0000:18:00.0"
            ),
        ]
    );
    assert!(
        f[0].message.contains("links 3 went down since boot"),
        "{}",
        f[0].message
    );
    // After a reboot nothing was seen yet: both are only on record.
    let rebooted = seen.for_boot("boot-2");
    let f = run_seen(&s, &cfg, &ecc, &rebooted);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].check.as_str(), f[0].action),
        ("nvlink-unused", Action::Info)
    );
    assert!(f[0]
        .message
        .contains("links 3,17 have not been active since boot"));
}
