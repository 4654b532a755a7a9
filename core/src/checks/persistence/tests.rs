use crate::checks::fixtures::*;
use crate::config::Config;
use crate::finding::Action;

#[test]
fn persistence_off_is_on_record_unless_not_required() {
    let mut s = healthy();
    s.gpus[4].persistence_mode = Some(false);
    let f = only(&run(&s)).clone();
    assert_eq!(
        (f.check.as_str(), f.action),
        ("persistence-mode", Action::Info)
    );
    let mut c = Config::default();
    c.thresholds.require_persistence_mode = false;
    assert!(run_with(&s, &c, &Default::default()).is_empty());
}
