//! The registry's own tests: the order of the findings across checks, and
//! one docs fragment per check.

use super::fixtures::*;
use super::REGISTRY;
use crate::finding::Action;
use crate::snapshot::*;

#[test]
fn healthy_node_has_no_findings() {
    assert!(run(&healthy()).is_empty());
}

#[test]
fn nvlink_thermal_power_throttle_persistence() {
    let mut s = healthy();
    s.gpus[0].nvlinks[3].active = false;
    s.gpus[1].temperature_c = Some(95);
    s.gpus[2].power_limit_mw = Some(400_000);
    s.gpus[3].throttle_reasons = Some(throttle::HW_THERMAL_SLOWDOWN | 0x1);
    s.gpus[4].persistence_mode = Some(false);
    let f = run(&s);
    let checks: Vec<(&str, Action)> = f.iter().map(|f| (f.check.as_str(), f.action)).collect();
    assert_eq!(
        checks,
        vec![
            ("nvlink", Action::Warn),
            ("temperature", Action::Warn),
            ("power-limit", Action::Warn),
            ("clock-events", Action::Warn),
            ("persistence-mode", Action::Info),
        ]
    );
    assert_eq!(f[0].summary, "NVLink 1 of 18 inactive GPU0 0000:18:00.0");
}

#[test]
fn every_check_has_a_name_and_its_rows_in_the_docs() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/checks.md"))
        .expect("docs/checks.md");
    let mut names: Vec<&str> = REGISTRY.iter().map(|c| c.name()).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "two checks of one name");
    for c in REGISTRY {
        for row in c.doc().lines() {
            let row = row.trim();
            assert!(
                row.starts_with('|') && row.ends_with('|'),
                "{}: {row}",
                c.name()
            );
            assert!(
                docs.contains(row),
                "docs/checks.md lacks the row of {}: {row}",
                c.name()
            );
        }
    }
}
