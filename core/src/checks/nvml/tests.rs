use crate::checks::fixtures::*;
use crate::finding::Action;
use crate::snapshot::*;

#[test]
fn nvml_timeout_drains() {
    let s = NodeSnapshot {
        nvml_error: Some(NvmlFailure::Timeout { deadline_ms: 3000 }),
        ..Default::default()
    };
    let f = only(&run(&s)).clone();
    assert_eq!(f.action, Action::Drain);
    assert_eq!(f.summary, "NVML did not answer in 3000 ms");
}

#[test]
fn missing_library_drains_only_when_gpus_are_expected() {
    let mut s = NodeSnapshot {
        nvml_error: Some(NvmlFailure::LibraryMissing { detail: "x".into() }),
        ..Default::default()
    };
    assert_eq!(only(&run(&s)).action, Action::Warn);
    s.pci_gpus = vec!["0000:18:00.0".into()];
    assert_eq!(only(&run(&s)).action, Action::Drain);
    s.nvml_error = Some(NvmlFailure::ProbeCrashed { detail: "y".into() });
    assert_eq!(only(&run(&s)).action, Action::Warn);
}
