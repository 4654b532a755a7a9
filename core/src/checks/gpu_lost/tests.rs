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

#[test]
fn a_gpu_off_the_bus_is_cleared_by_a_reboot() {
    use crate::finding::Remedy;
    let mut s = healthy();
    s.gpus[5] = GpuSnapshot {
        index: 5,
        lost: true,
        ..Default::default()
    };
    let f = run(&s);
    assert!(f.iter().all(|f| f.remedy == Remedy::Reboot), "{f:#?}");
    // Every other finding of a healthy node needs a person.
    let mut warm = healthy();
    warm.gpus[0].recovery_action = Some(3);
    assert!(run(&warm).iter().all(|f| f.remedy == Remedy::Person));
}
