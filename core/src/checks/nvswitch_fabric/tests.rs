use crate::checks::fixtures::*;
use crate::finding::Action;
use crate::snapshot::fabric_state::{COMPLETED, IN_PROGRESS};
use crate::snapshot::FabricInfo;

#[test]
fn an_unregistered_fabric_drains_until_clean_a_completed_one_is_fine() {
    let mut s = healthy();
    s.gpus[0].fabric = Some(FabricInfo {
        state: COMPLETED,
        status: 0,
    });
    assert!(run(&s).is_empty());
    s.gpus[0].fabric = Some(FabricInfo {
        state: IN_PROGRESS,
        status: 0,
    });
    let f = only(&run(&s)).clone();
    assert_eq!(
        (f.check.as_str(), f.action),
        ("fabric", Action::DrainUntilClean)
    );
    assert_eq!(
        f.summary,
        "fabric not ready GPU0 0000:18:00.0 (in progress)"
    );
    s.gpus[0].fabric = Some(FabricInfo {
        state: COMPLETED,
        status: 7,
    });
    assert!(only(&run(&s))
        .summary
        .starts_with("fabric registration failed"));
}
