//! The example plugin is discovered when a test references it, and selectable by name.

use oxccl::{registry, Communicator, Config, DataType, OpKind, OpParam, ReduceOp};
use oxccl_plugin_bidir_ring as _;

#[test]
fn the_plugin_executor_is_registered_with_its_crate() {
    let entry = registry()
        .unwrap()
        .executor(OpKind::AllReduce, "bidir-ring")
        .unwrap();
    assert_eq!(entry.crate_name, "oxccl-plugin-bidir-ring");
    let builtin = registry()
        .unwrap()
        .executor(OpKind::AllReduce, "ring")
        .unwrap();
    assert_eq!(builtin.crate_name, "oxccl-algorithms");
}

#[test]
fn oxccl_algo_selects_the_plugin() {
    let config =
        Config::from_lookup(|v| (v == "OXCCL_ALGO").then(|| "all_reduce=bidir-ring".to_string()))
            .unwrap();
    let comms = Communicator::init_all(4, config).unwrap();
    let op = OpParam::all_reduce(1000, DataType::F32, ReduceOp::Sum);
    let prepared = comms[0].framework().prepare(&op, false).unwrap();
    assert_eq!(prepared.selection.executor.name, "bidir-ring");
    assert!(
        prepared.selection.reason.contains("OXCCL_ALGO"),
        "{}",
        prepared.selection.reason
    );
    // The plugin forks one slave stream for its counter-clockwise ring.
    assert_eq!(prepared.program.streams.len(), 2);
}

#[test]
fn registry_iteration_is_sorted() {
    let names: Vec<(OpKind, &str)> = registry()
        .unwrap()
        .executors()
        .map(|e| (e.op, e.name))
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}
