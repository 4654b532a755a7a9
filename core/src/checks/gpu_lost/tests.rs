use crate::checks::fixtures::*;
use crate::finding::Action;
use crate::snapshot::*;

#[test]
fn lost_gpu_and_count_drain() {
    let mut s = healthy();
    s.gpus[5] = GpuSnapshot {
        index: 5,
        lost: true,
        ..Default::default()
    };
    let f = run(&s);
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(f.iter().all(|f| f.action == Action::Drain));
    assert_eq!(f[0].summary, "GPU count 7 of 8");
    assert_eq!(f[1].gpu, Some(5));
}
