//! A plugin selector (a `linkme` slice entry) decides before the built-in choice, and the
//! OXCCL_ALGO override decides before it. (Own binary: the selector is global.)

use oxccl::{Communicator, Config, DataType, OpKind, OpParam, ReduceOp, SelectRequest};

fn ring_for_777(req: &SelectRequest<'_>) -> Option<&'static str> {
    (req.op.count == 777).then_some("ring")
}

oxccl::register_selector!(RING_FOR_777, "ring-for-777", 100, ring_for_777);

fn selected(config: Config, count: usize) -> (String, String) {
    let comms = Communicator::init_all(4, config).unwrap();
    let op = OpParam::all_reduce(count, DataType::I32, ReduceOp::Sum);
    let p = comms[0].framework().prepare(&op, false).unwrap();
    (p.selection.executor.name.to_string(), p.selection.reason)
}

#[test]
fn plugin_selectors_come_between_the_override_and_the_builtin_choice() {
    let (name, reason) = selected(Config::default(), 777);
    assert_eq!(name, "ring");
    assert!(reason.contains("ring-for-777"), "{reason}");

    let (name, reason) = selected(Config::default(), 778);
    assert_ne!(name, "ring");
    assert!(reason.contains("built-in"), "{reason}");

    let mut forced = Config::default();
    forced.algo.set(Some(OpKind::AllReduce), "mesh");
    let (name, reason) = selected(forced, 777);
    assert_eq!(name, "mesh");
    assert!(reason.contains("OXCCL_ALGO"), "{reason}");
}
