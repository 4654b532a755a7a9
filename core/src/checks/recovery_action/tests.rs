use crate::checks::fixtures::*;
use crate::finding::Action;

#[test]
fn any_recovery_action_but_none_drains() {
    let mut s = healthy();
    s.gpus[4].recovery_action = Some(0);
    assert!(run(&s).is_empty());
    s.gpus[4].recovery_action = Some(2);
    let f = only(&run(&s)).clone();
    assert_eq!(
        (f.check.as_str(), f.action),
        ("recovery-action", Action::Drain)
    );
    assert_eq!(f.summary, "recovery action GPU4 0000:1c:00.0: node reboot");
}

#[test]
fn only_a_reset_or_reboot_action_is_cleared_by_a_reboot() {
    use crate::finding::Remedy;
    let remedy_of = |a: u32| {
        let mut s = healthy();
        s.gpus[4].recovery_action = Some(a);
        only(&run(&s)).remedy
    };
    for a in [1, 2, 4, 6, 7] {
        assert_eq!(remedy_of(a), Remedy::Reboot, "action {a}");
    }
    for a in [3, 5, 99] {
        assert_eq!(remedy_of(a), Remedy::Person, "action {a}");
    }
}
