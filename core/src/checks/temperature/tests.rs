use crate::checks::fixtures::*;
use crate::finding::Action;

#[test]
fn hot_gpus_warn_at_the_threshold_not_below() {
    let mut s = healthy();
    s.gpus[1].temperature_c = Some(87);
    assert!(run(&s).is_empty(), "87 C is the default limit itself");
    s.gpus[1].temperature_c = Some(88);
    let f = only(&run(&s)).clone();
    assert_eq!((f.check.as_str(), f.action), ("temperature", Action::Warn));
    assert_eq!(f.summary, "temperature 88C GPU1 0000:19:00.0");
}
