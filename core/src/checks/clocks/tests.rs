use crate::checks::fixtures::*;
use crate::finding::Action;
use crate::snapshot::throttle;

#[test]
fn only_slowdowns_warn_idle_and_application_clocks_do_not() {
    let mut s = healthy();
    s.gpus[3].throttle_reasons = Some(0x1);
    assert!(run(&s).is_empty(), "GPU idle is no slowdown");
    s.gpus[3].throttle_reasons = Some(throttle::HW_POWER_BRAKE_SLOWDOWN);
    let f = only(&run(&s)).clone();
    assert_eq!((f.check.as_str(), f.action), ("clock-events", Action::Warn));
    assert_eq!(f.summary, "throttled (power brake) GPU3 0000:1b:00.0");
}
