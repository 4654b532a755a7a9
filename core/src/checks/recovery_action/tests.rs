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
