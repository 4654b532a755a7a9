//! Per-code rules: repetition on one GPU escalates, the same code moving
//! between GPUs does not, lines users can write never count, and the
//! defaults in docs/xid-policy.md are the code's.

use gpu_health_core::finding::{Action, Finding};
use gpu_health_core::xid::{judge, Policy, RepeatHistory, Seen, XidConfig, XidEvent};

const HOUR_MS: u64 = 3_600_000;
const NOW: u64 = 1_790_000_000_000;

fn event(code: u32, pci: &str, at_ms: u64) -> XidEvent {
    serde_json::from_value(serde_json::json!({
        "kind": "xid",
        "code": code,
        "pci": pci,
        "message": format!("{code}, pid=4242, name=python3, Ch 00000008"),
        "time_ms": at_ms,
    }))
    .unwrap()
}

fn policy(toml_text: &str) -> Policy {
    let cfg: XidConfig = toml::from_str(toml_text).unwrap();
    cfg.validate().unwrap();
    Policy::from_config(&cfg)
}

/// One run per event, the history carried between them as the cursor
/// file carries it: the actions in order.
fn runs(policy: &Policy, events: &[XidEvent]) -> Vec<Finding> {
    let mut history = RepeatHistory::default();
    events
        .iter()
        .flat_map(|ev| {
            judge(
                std::slice::from_ref(ev),
                policy,
                &mut history,
                ev.time_ms.unwrap(),
                Seen::BeforeThisRun,
            )
        })
        .collect()
}

fn actions(findings: &[Finding]) -> Vec<Action> {
    findings.iter().map(|f| f.action).collect()
}

#[test]
fn xid_31_repeated_on_one_gpu_is_kept_for_an_admin() {
    let p = policy("");
    let same: Vec<_> = (0..4)
        .map(|i| event(31, "0000:18:00.0", NOW + i * HOUR_MS))
        .collect();
    let f = runs(&p, &same);
    assert_eq!(
        actions(&f),
        [
            Action::DrainUntilClean,
            Action::DrainUntilClean,
            Action::Drain,
            Action::Drain
        ]
    );
    assert!(
        f[2].message
            .contains("3 bursts on this GPU within 24 h: escalated to drain"),
        "{}",
        f[2].message
    );
}

#[test]
fn the_same_code_on_different_gpus_is_the_applications_and_stays() {
    let p = policy("");
    let moving: Vec<_> = [
        "0000:18:00.0",
        "0000:2a:00.0",
        "0000:3a:00.0",
        "0000:5d:00.0",
    ]
    .iter()
    .enumerate()
    .map(|(i, pci)| event(31, pci, NOW + i as u64 * HOUR_MS))
    .collect();
    assert_eq!(actions(&runs(&p, &moving)), [Action::DrainUntilClean; 4]);
    let xid13: Vec<_> = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]
        .iter()
        .map(|pci| event(13, pci, NOW))
        .collect();
    assert_eq!(actions(&runs(&p, &xid13)), [Action::Warn; 3]);
}

#[test]
fn repeats_outside_the_window_do_not_add_up() {
    let p = policy("");
    let spread: Vec<_> = (0..4)
        .map(|i| event(13, "0000:18:00.0", NOW + i * 13 * HOUR_MS))
        .collect();
    // 0, 13, 26, 39 h: never three within 24 h.
    assert_eq!(actions(&runs(&p, &spread)), [Action::Warn; 4]);
    let close: Vec<_> = (0..3)
        .map(|i| event(13, "0000:18:00.0", NOW + i * 11 * HOUR_MS))
        .collect();
    assert_eq!(
        actions(&runs(&p, &close)),
        [Action::Warn, Action::Warn, Action::DrainUntilClean]
    );
}

#[test]
fn one_crash_logging_many_lines_is_one_burst() {
    let p = policy("");
    // One application crash: a line per SM within seconds, three times.
    let crash = |start: u64| (0..40).map(move |i| event(13, "0000:18:00.0", start + i * 500));
    let two: Vec<_> = crash(NOW).chain(crash(NOW + HOUR_MS)).collect();
    let mut history = RepeatHistory::default();
    let f = judge(&two, &p, &mut history, NOW + HOUR_MS, Seen::BeforeThisRun);
    assert_eq!(actions(&f), [Action::Warn]);
    let third: Vec<_> = crash(NOW + 2 * HOUR_MS).collect();
    let f = judge(
        &third,
        &p,
        &mut history,
        NOW + 2 * HOUR_MS,
        Seen::BeforeThisRun,
    );
    assert_eq!(actions(&f), [Action::DrainUntilClean]);
    // A folded storm of one crash is one burst too.
    let mut storm = event(13, "0000:18:00.0", NOW);
    storm.count = 50_000;
    assert_eq!(actions(&runs(&p, &[storm])), [Action::Warn]);
}

#[test]
fn a_folded_storm_counts_for_its_events() {
    let p = policy("");
    let mut storm = event(94, "0000:18:00.0", NOW);
    storm.count = 999;
    assert_eq!(actions(&runs(&p, &[storm.clone()])), [Action::Warn]);
    storm.count = 1000;
    assert_eq!(actions(&runs(&p, &[storm])), [Action::DrainUntilClean]);
}

#[test]
fn lines_users_can_write_never_escalate_nor_count_for_the_driver() {
    let p = policy("");
    let mut forged: Vec<_> = (0..5)
        .map(|i| {
            let mut ev = event(31, "0000:18:00.0", NOW + i * HOUR_MS);
            ev.forgeable = true;
            ev
        })
        .collect();
    let f = runs(&p, &forged);
    assert!(f.iter().all(|f| f.action == Action::Warn && f.forgeable));
    // Forged lines first, then one real Xid 31: it is the first of its
    // kind on this GPU.
    forged.push(event(31, "0000:18:00.0", NOW + 6 * HOUR_MS));
    assert_eq!(runs(&p, &forged)[5].action, Action::DrainUntilClean);
}

#[test]
fn sites_change_or_turn_off_escalation() {
    let off = policy("[rules.31]\nescalate_after = 0\n");
    let same: Vec<_> = (0..5)
        .map(|i| event(31, "0000:18:00.0", NOW + i * HOUR_MS))
        .collect();
    assert_eq!(actions(&runs(&off, &same)), [Action::DrainUntilClean; 5]);

    let own = policy("[rules.48]\nescalate_after = 2\nescalate_window_hours = 1\n");
    // A code without a default escalation gets the default target: drain.
    let p = runs(
        &own,
        &[
            event(48, "0000:18:00.0", NOW),
            event(48, "0000:18:00.0", NOW + 10 * 60_000),
        ],
    );
    assert_eq!(actions(&p), [Action::Drain, Action::Drain]);

    let to_warn = policy("[rules.92]\nescalate_after = 2\nescalate_to = \"drain-until-clean\"\n");
    let p = runs(
        &to_warn,
        &[
            event(92, "0000:18:00.0", NOW),
            event(92, "0000:18:00.0", NOW + HOUR_MS),
        ],
    );
    assert_eq!(actions(&p), [Action::Warn, Action::DrainUntilClean]);
}

#[test]
fn an_escalation_never_softens() {
    // A site that escalates a draining code to something milder gets the
    // code's own action.
    let p = policy("[rules.79]\nescalate_after = 2\nescalate_to = \"warn\"\n");
    let f = runs(
        &p,
        &[
            event(79, "0000:18:00.0", NOW),
            event(79, "0000:18:00.0", NOW + HOUR_MS),
        ],
    );
    assert_eq!(actions(&f), [Action::Drain, Action::Drain]);
}

#[test]
fn out_of_range_rules_are_refused() {
    for bad in [
        "[rules.31]\nescalate_after = 5000\n",
        "[rules.31]\nescalate_window_hours = 0\n",
        "[rules.31]\nescalate_to = \"explode\"\n",
    ] {
        let parsed: Result<XidConfig, _> = toml::from_str(bad);
        let refused = match parsed {
            Ok(cfg) => cfg.validate().is_err(),
            Err(_) => true,
        };
        assert!(refused, "{bad}");
    }
}

/// docs/xid-policy.md shows the default escalations as the code has them;
/// regenerate with `GPU_HEALTH_WRITE_DOCS=1 cargo test -p gpu-health-core
/// --test xid_rules`.
#[test]
fn the_docs_escalation_table_is_the_codes() {
    const BEGIN: &str = "<!-- escalation-table:begin (generated from core/src/xid/rules.rs) -->\n";
    const END: &str = "<!-- escalation-table:end -->";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/xid-policy.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc.find(BEGIN).expect("begin marker") + BEGIN.len();
    let end = doc.find(END).expect("end marker");
    let table = gpu_health_core::xid::escalation_table();
    if std::env::var_os("GPU_HEALTH_WRITE_DOCS").is_some() {
        let updated = format!("{}{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        &doc[start..end],
        table,
        "regenerate (see this test's comment)"
    );
}
