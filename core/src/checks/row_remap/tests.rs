use crate::checks::fixtures::*;
use crate::finding::Action;
use crate::snapshot::*;

#[test]
fn remap_failure_drains_pending_warns() {
    let mut s = healthy();
    s.gpus[2].remapped_rows = Some(RemappedRows {
        uncorrectable: 3,
        failure: true,
        ..Default::default()
    });
    s.gpus[4].remapped_rows = Some(RemappedRows {
        pending: true,
        ..Default::default()
    });
    s.gpus[6].retired_pages_pending = Some(true);
    let f = run(&s);
    let actions: Vec<(Option<u32>, Action)> = f.iter().map(|f| (f.gpu, f.action)).collect();
    assert_eq!(
        actions,
        vec![
            (Some(2), Action::Drain),
            (Some(4), Action::Warn),
            (Some(6), Action::Warn)
        ]
    );
}
