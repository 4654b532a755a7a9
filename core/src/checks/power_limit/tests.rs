use crate::checks::fixtures::*;
use crate::finding::Action;

#[test]
fn a_limit_below_the_share_of_the_default_warns() {
    let mut s = healthy();
    s.gpus[2].power_limit_mw = Some(630_000);
    assert!(run(&s).is_empty(), "90% of 700 W is still fine");
    s.gpus[2].power_limit_mw = Some(400_000);
    let f = only(&run(&s)).clone();
    assert_eq!((f.check.as_str(), f.action), ("power-limit", Action::Warn));
    assert_eq!(f.summary, "power limit 400 W of 700 W GPU2 0000:1a:00.0");
    s.gpus[2].default_power_limit_mw = Some(0);
    assert!(run(&s).is_empty(), "no default, nothing to compare");
}
