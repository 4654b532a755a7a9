use crate::checks::fixtures::*;
use crate::finding::Action;
use crate::snapshot::*;

#[test]
fn pcie_width_warns_generation_informs() {
    let mut s = healthy();
    s.gpus[2].pcie = Some(PcieLink {
        current_gen: 4,
        max_gen: 5,
        current_width: 8,
        max_width: 16,
        replay_counter: None,
    });
    let f = only(&run(&s)).clone();
    assert_eq!(f.action, Action::Warn);
    assert_eq!(f.summary, "PCIe Gen4 x8 of Gen5 x16 GPU2 0000:1a:00.0");
    s.gpus[2].pcie = Some(PcieLink {
        current_gen: 1,
        max_gen: 5,
        current_width: 16,
        max_width: 16,
        replay_counter: None,
    });
    assert_eq!(only(&run(&s)).action, Action::Info);
}
