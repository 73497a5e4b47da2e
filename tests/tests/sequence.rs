//! Back-to-back operations under the device's epoch fence (`analyzer::sequence`), the
//! only thing that keeps them apart (no Close exchange ends a program any more).
//!
//! The default tests run every ordered pair of AllReduce executors and a mix of operators
//! on a few small shapes; the ignored one runs every operator's pairs on the whole
//! sequence matrix: `cargo test -p oxccl-tests --test sequence -- --ignored --nocapture`.

use oxccl::framework::analyzer::conformance::{sequence_pairs, sequence_shapes};
use oxccl::framework::analyzer::{analyze, analyze_sequence, FenceModel, Recording};
use oxccl::{Config, DataType, OpKind, OpParam, ReduceOp, Topology};
use std::time::Instant;

use oxccl_plugin_bidir_ring as _;

fn assert_pairs_pass(op: OpKind, shapes: &[Topology], model: FenceModel) -> usize {
    let start = Instant::now();
    let pairs = sequence_pairs(op, shapes, model).expect("registry");
    assert!(!pairs.is_empty(), "no executor of {op:?}");
    let mut cases = 0;
    let failed: Vec<String> = pairs
        .iter()
        .inspect(|(_, _, o)| cases += o.cases)
        .filter_map(|(a, b, o)| {
            o.first_failure.as_ref().map(|f| {
                format!(
                    "{a} then {b}: {} of {} failed; first: {f}",
                    o.failures, o.cases
                )
            })
        })
        .collect();
    println!(
        "{op:?}: {} pairs, {cases} cases, {:.1} s",
        pairs.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    cases
}

#[test]
fn every_pair_of_all_reduce_executors_runs_back_to_back() {
    let shapes = [
        Topology::single_server(3),
        Topology::servers(vec![2, 2]).unwrap(),
    ];
    assert!(assert_pairs_pass(OpKind::AllReduce, &shapes, FenceModel::DEVICE) > 0);
}

/// A job across hosts: the links between servers put-only. Zero-copy, every executor that
/// runs there runs Direct (`planner::executor_mode`), with the exit fence, each touching
/// peers' user buffers over the load/store links only: the hierarchical put executors by
/// design, the put-mesh ones by landing their puts across servers in Scratch, capped
/// iterations included. Every ordered pair of the executors that run there, of the
/// operators that have put-mesh or hierarchical put executors, back to back.
#[test]
fn pairs_of_mixed_modes_run_back_to_back_across_hosts() {
    use oxccl::framework::platform::LinkAccess::{LoadStore, Put};
    let two_hosts = Topology::servers(vec![2, 2])
        .unwrap()
        .with_fabric_access(LoadStore, Put);
    let ops = [
        OpKind::AllReduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::Broadcast,
        OpKind::Scatter,
        OpKind::Gather,
        OpKind::AlltoAll,
    ];
    for op in ops {
        let shapes = [two_hosts.clone()];
        assert!(
            assert_pairs_pass(op, &shapes, FenceModel::DEVICE) > 0,
            "{op:?}"
        );
    }
}

/// Every operator's pairs on the whole matrix under the device's fence (which also waits
/// for the previous call's peers: under the first specification staged mesh-type
/// executors followed by executors that grant fewer peers race on 8 ranks, see the test
/// below). About 15 minutes for AllReduce's 225 pairs alone on this machine.
#[test]
#[ignore = "long: every operator's pairs on the whole sequence matrix"]
fn every_pair_of_every_operator_runs_back_to_back() {
    let model = FenceModel::DEVICE;
    let only = std::env::var("OXCCL_SEQUENCE_OPS").ok();
    for op in OpKind::ALL {
        if only
            .as_ref()
            .is_none_or(|o| o.split(',').any(|n| n == op.name()))
        {
            assert_pairs_pass(op, &sequence_shapes(), model);
        }
    }
}

fn record(op: &OpParam, zero_copy: bool, topology: &Topology) -> Recording {
    let config = Config {
        topology: Some(topology.clone()),
        zero_copy,
        ccl_buffer_bytes: 4096,
        ..Config::default()
    };
    Recording::record(op, false, config).expect("record")
}

#[test]
fn different_operators_run_back_to_back() {
    let (f32, sum) = (DataType::F32, ReduceOp::Sum);
    for topology in [
        Topology::single_server(4),
        Topology::servers(vec![2, 2]).unwrap(),
    ] {
        for zero_copy in [true, false] {
            let ops = [
                OpParam::all_reduce(1000, f32, sum),
                OpParam::all_gather(300, f32),
                OpParam::rooted(OpKind::Broadcast, 2000, f32, sum, 1),
                OpParam::barrier(),
                OpParam::reduce_scatter(77, f32, sum),
            ];
            let recs: Vec<Recording> = ops
                .iter()
                .map(|op| record(op, zero_copy, &topology))
                .collect();
            for r in recs.iter() {
                assert!(analyze(r).passed(), "{} alone:\n{}", r.executor, analyze(r));
            }
            for (i, a) in recs.iter().enumerate() {
                for b in recs.iter() {
                    let c = &recs[(i + 2) % recs.len()];
                    for seq in [vec![a, b], vec![a, b, c]] {
                        let report = analyze_sequence(&seq).expect("one communicator");
                        let names: Vec<_> = seq.iter().map(|r| r.executor).collect();
                        assert!(
                            report.passed(),
                            "{names:?} zero_copy {zero_copy} on {:?}:\n{report}",
                            topology.server_sizes()
                        );
                    }
                }
            }
        }
    }
}

/// Staged AllReduce on 8 ranks: a mesh-type executor (every peer reads a rank's CclOut)
/// followed by one that grants fewer peers (rhd, double and bidirectional rings). A fence
/// on the current call's peers only does not wait for the mesh's readers
/// before the next executor writes the same CclOut; the device's fence, which also waits
/// for the previous call's peers, does.
#[test]
fn a_mesh_then_a_ring_needs_the_fence_to_remember_the_previous_peers() {
    use oxccl::framework::analyzer::{analyze_sequence_with, Check, FenceModel};
    let topology = Topology::single_server(8);
    let record_with = |algo: &str, count: usize| {
        let mut config = Config {
            topology: Some(topology.clone()),
            zero_copy: false,
            ..Config::default()
        };
        config.algo.set(Some(OpKind::AllReduce), algo);
        let op = OpParam::all_reduce(count, DataType::F32, ReduceOp::Sum);
        Recording::record(&op, false, config).expect("record")
    };
    for (next, count) in [("rhd", 1), ("double-ring", 25), ("bidir-ring", 25)] {
        let (mesh, next) = (record_with("mesh", count), record_with(next, count));
        let spec = analyze_sequence_with(&[&mesh, &next], FenceModel::CURRENT_PEERS_ONLY)
            .expect("one communicator");
        let race = spec.of(Check::MemoryConflict).next();
        let race = race.unwrap_or_else(|| panic!("{} after mesh passes:\n{spec}", next.executor));
        assert_eq!(race.op, Some(1), "{race}");
        assert!(
            race.message.contains("op 0 rank") && race.message.contains("CclOut"),
            "{race}"
        );
        for seq in [vec![&mesh, &next], vec![&mesh, &next, &mesh]] {
            let report = analyze_sequence(&seq).expect("one communicator");
            assert!(report.passed(), "{}:\n{report}", next.executor);
        }
    }
}
