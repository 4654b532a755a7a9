//! The default policy table, Xid 154's recovery actions, SXids, overrides.

use gpu_health_core::xid::{recovery_action, EventKind, Policy, PolicyAction, XidConfig, XidEvent};

fn event(kind: EventKind, code: u32, message: &str) -> XidEvent {
    XidEvent {
        pci: Some("0000:18:00.0".into()),
        ..XidEvent::new(kind, code, message)
    }
}

fn action(policy: &Policy, code: u32) -> PolicyAction {
    policy.decide(&event(EventKind::Xid, code, "")).action
}

#[test]
fn default_table_as_the_issue_asks() {
    let p = Policy::from_config(&XidConfig::default());
    for code in [31, 43] {
        assert_eq!(
            action(&p, code),
            PolicyAction::DrainUntilClean,
            "Xid {code}"
        );
    }
    // NVIDIA's reset and reboot classes, and the newest codes that need one.
    for code in [
        46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 167, 169,
        171, 172,
    ] {
        assert_eq!(action(&p, code), PolicyAction::Drain, "Xid {code}");
    }
    // Application faults, follow-ups, and codes unused on Ampere and newer
    // (left to default_action).
    for code in [13, 45, 61, 63, 68, 92, 94, 1, 8, 56, 999] {
        assert_eq!(action(&p, code), PolicyAction::Warn, "Xid {code}");
    }
    for code in [37, 38, 44, 137, 160, 162] {
        assert_eq!(action(&p, code), PolicyAction::Info, "Xid {code}");
    }
    // NVLink5 Xids follow the record's own word.
    let fatal = event(
        EventKind::Xid,
        149,
        "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)",
    );
    assert_eq!(p.decide(&fatal).action, PolicyAction::Drain);
    let nonfatal = event(
        EventKind::Xid,
        145,
        "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)",
    );
    assert_eq!(p.decide(&nonfatal).action, PolicyAction::Warn);
    let mut lost = event(EventKind::Xid, 79, "");
    lost.fallen_off_bus = true;
    assert_eq!(p.decide(&lost).action, PolicyAction::Drain);
    assert_eq!(p.decide(&lost).repeat, 1);
}

#[test]
fn xid_154_follows_the_recovery_action() {
    let msg = |to: &str| format!("GPU recovery action changed from 0x0 (None) to {to}");
    assert_eq!(recovery_action(&msg("0x0 (None)")), PolicyAction::Info);
    assert_eq!(
        recovery_action(&msg("0x1 (GPU Reset Required)")),
        PolicyAction::Drain
    );
    assert_eq!(
        recovery_action(&msg("0x2 (Node Reboot Required)")),
        PolicyAction::Drain
    );
    assert_eq!(
        recovery_action(&msg("0x2 (OS Reboot)")),
        PolicyAction::Drain
    );
    assert_eq!(recovery_action(&msg("0x1 (PF FLR)")), PolicyAction::Drain);
    assert_eq!(
        recovery_action(&msg("0x3 (Drain P2P)")),
        PolicyAction::Drain
    );
    assert_eq!(
        recovery_action(&msg("0x4 (Drain and Reset)")),
        PolicyAction::Drain
    );
    assert_eq!(
        recovery_action(&msg("(Node Reboot Required)")),
        PolicyAction::Drain
    );
    assert_eq!(recovery_action(&msg("(None)")), PolicyAction::Info);
    assert_eq!(
        recovery_action(&msg("0x42 (Something New)")),
        PolicyAction::Warn
    );
    assert_eq!(recovery_action("garbled"), PolicyAction::Warn);
    let p = Policy::from_config(&XidConfig::default());
    let e = event(EventKind::Xid, 154, &msg("0x2 (Node Reboot Required)"));
    assert_eq!(p.decide(&e).action, PolicyAction::Drain);
}

#[test]
fn sxid_fatal_drains_others_warn() {
    let p = Policy::from_config(&XidConfig::default());
    let fatal = event(
        EventKind::Sxid,
        24007,
        "Fatal, Link 44 sourcetrack TCEN0 crumbstore ECC DBE Error",
    );
    let nonfatal = event(
        EventKind::Sxid,
        12028,
        "Non-fatal, Link 32 egress non-posted PRIV error (First)",
    );
    assert_eq!(p.decide(&fatal).action, PolicyAction::Drain);
    assert_eq!(p.decide(&nonfatal).action, PolicyAction::Warn);
    // SXid codes do not collide with Xid codes.
    assert_eq!(
        p.decide(&event(EventKind::Sxid, 79, "Non-fatal")).action,
        PolicyAction::Warn
    );
}

#[test]
fn config_overrides_win() {
    let cfg: XidConfig = toml::from_str(
        "default_action = \"info\"\nsxid_fatal_action = \"warn\"\n\
         [actions]\n13 = \"ignore\"\n48 = \"drain-until-clean\"\nsxid-12028 = \"drain\"\n\
         [rules.31]\naction = \"drain\"\nrepeat = 3\nwindow_minutes = 30\n\
         [rules.43]\nrepeat = 2\n",
    )
    .unwrap();
    cfg.validate().unwrap();
    let p = Policy::from_config(&cfg);
    assert_eq!(action(&p, 13), PolicyAction::Ignore);
    assert_eq!(action(&p, 48), PolicyAction::DrainUntilClean);
    assert_eq!(action(&p, 999), PolicyAction::Info);
    let d31 = p.decide(&event(EventKind::Xid, 31, ""));
    assert_eq!(
        (d31.action, d31.repeat, d31.window_minutes),
        (PolicyAction::Drain, 3, 30)
    );
    let d43 = p.decide(&event(EventKind::Xid, 43, ""));
    assert_eq!(
        (d43.action, d43.repeat),
        (PolicyAction::DrainUntilClean, 2),
        "rule keeps the table's action"
    );
    assert_eq!(
        p.decide(&event(EventKind::Sxid, 12028, "Non-fatal")).action,
        PolicyAction::Drain
    );
    assert_eq!(
        p.decide(&event(EventKind::Sxid, 1, "Fatal, x")).action,
        PolicyAction::Warn
    );
}

#[test]
fn conflicting_action_and_rule_are_refused() {
    let cfg: XidConfig =
        toml::from_str("[actions]\n31 = \"warn\"\n[rules.31]\naction = \"drain\"\n").unwrap();
    assert!(cfg.validate().unwrap_err().contains("31"));
}

/// docs/xid-policy.md shows the one Xid table as the code has it. After a
/// change to core/src/xid/catalog.rs, regenerate it with
/// `GPU_HEALTH_WRITE_DOCS=1 cargo test -p gpu-health-core --test xid_policy`.
#[test]
fn the_docs_table_is_the_code_table() {
    const BEGIN: &str = "<!-- xid-table:begin (generated from core/src/xid/catalog.rs) -->\n";
    const END: &str = "<!-- xid-table:end -->";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/xid-policy.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc.find(BEGIN).expect("begin marker") + BEGIN.len();
    let end = doc.find(END).expect("end marker");
    let table = gpu_health_core::xid::markdown_table();
    if std::env::var_os("GPU_HEALTH_WRITE_DOCS").is_some() {
        let updated = format!("{}{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        &doc[start..end],
        table,
        "docs/xid-policy.md's table differs from the code's; regenerate it (see this test's comment)"
    );
}
