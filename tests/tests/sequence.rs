//! Back-to-back operations under the device's epoch fence (`analyzer::sequence`), with
//! the programs as recorded (Close exchange at the end) and with Close stripped, as they
//! will look once the fence replaces it.
//!
//! The default tests run every ordered pair of AllReduce executors and a mix of operators
//! on a few small shapes; the ignored one runs every operator's pairs on the whole
//! sequence matrix: `cargo test -p oxccl-tests --test sequence -- --ignored --nocapture`.

use oxccl::framework::analyzer::conformance::{sequence_pairs, sequence_shapes};
use oxccl::framework::analyzer::{analyze, analyze_sequence, without_close, Recording};
use oxccl::{Config, DataType, OpKind, OpParam, ReduceOp, Topology};
use std::time::Instant;

use oxccl_plugin_bidir_ring as _;

fn assert_pairs_pass(op: OpKind, shapes: &[Topology]) -> usize {
    let start = Instant::now();
    let pairs = sequence_pairs(op, shapes).expect("registry");
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
    assert!(assert_pairs_pass(OpKind::AllReduce, &shapes) > 0);
}

#[test]
#[ignore = "minutes: every operator's pairs on the whole sequence matrix"]
fn every_pair_of_every_operator_runs_back_to_back() {
    for op in OpKind::ALL {
        assert_pairs_pass(op, &sequence_shapes());
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
            let bare: Vec<Recording> = recs.iter().map(without_close).collect();
            for set in [&recs, &bare] {
                for r in set.iter() {
                    assert!(analyze(r).passed(), "{} alone:\n{}", r.executor, analyze(r));
                }
                for (i, a) in set.iter().enumerate() {
                    for b in set.iter() {
                        let c = &set[(i + 2) % set.len()];
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
}
