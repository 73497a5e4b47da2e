//! Graph mode on in-process ranks: every operator captured, compiled and replayed with
//! fresh buffers at every launch gives what eager calls give on the same inputs; eager
//! calls between launches; one, three and four ranks (one server, and two servers of
//! two); in place and out of place; steps larger than the CCL buffer; and the analyzer
//! proving the sequence (`graph_check`).

mod common;

use common::{defined_on, every_operator, replay_on, seed, Buffers};
use oxccl::{Communicator, Config, Topology};
use oxccl_graph::Capture;
use oxccl_tests::SMALL_CCL_BYTES;
use std::time::Duration;

fn config(topology: Option<&str>) -> Config {
    Config {
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        exec_timeout: Duration::from_secs(60),
        topology: topology.map(|t| Topology::parse_spec(t).expect("preset")),
        ..Config::default()
    }
}

/// Eager results, then the graph's for the same inputs, on every rank of `comms`.
fn replay_matches_eager(comms: &[Communicator], asked_in_place: bool) {
    std::thread::scope(|s| {
        let ranks: Vec<_> = comms
            .iter()
            .map(|comm| s.spawn(move || replay_on(comm, asked_in_place)))
            .collect();
        for (rank, r) in ranks.into_iter().enumerate() {
            if let Err(e) = r.join().expect("rank thread") {
                panic!("rank {rank}: {e}");
            }
        }
    });
}

#[test]
fn every_operator_replays_as_eager_runs_it() {
    for (n, topology) in [(1, None), (3, None), (4, Some("2x2"))] {
        for in_place in [false, true] {
            let comms = Communicator::init_all(n, config(topology)).unwrap();
            replay_matches_eager(&comms, in_place);
        }
    }
}

#[test]
fn every_operator_replays_staged_as_well() {
    let comms = Communicator::init_all(
        3,
        Config {
            zero_copy: false,
            ..config(None)
        },
    )
    .unwrap();
    replay_matches_eager(&comms, false);
}

#[test]
fn the_analyzer_proves_the_sequence_when_asked() {
    let comms = Communicator::init_all(
        4,
        Config {
            graph_check: true,
            ..config(None)
        },
    )
    .unwrap();
    replay_matches_eager(&comms, true);
}

#[test]
fn one_thread_launches_every_rank_s_graph_as_a_group() {
    // Every operator, with a step larger than the CCL buffer; then the small steps only,
    // which the host device runs as one linked order.
    let all = |r, n| every_operator(r, n);
    let small = |r, n| {
        let mut ops = every_operator(r, n);
        ops.retain(|op| op.count < 1000);
        ops
    };
    group_launches_match_eager(4, all);
    group_launches_match_eager(4, small);
    group_launches_match_eager(1, small);
}

fn group_launches_match_eager(n: usize, sequence: impl Fn(usize, usize) -> Vec<oxccl::OpParam>) {
    let comms = Communicator::init_all(n, config(None)).unwrap();
    let ops: Vec<_> = (0..n).map(|r| sequence(r, n)).collect();
    let compiled: Vec<_> = std::thread::scope(|s| {
        let joins: Vec<_> = comms
            .iter()
            .map(|comm| {
                let ops = &ops[comm.rank()];
                s.spawn(move || {
                    let mut capture = Capture::new();
                    for (mut buf, op) in ops
                        .iter()
                        .map(|op| (Buffers::new(op, comm.rank(), n, false, 0), op))
                    {
                        capture.record(&buf.call(op)).unwrap();
                    }
                    capture.compile(comm).unwrap()
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    for launch in 0..3 {
        let mut expected: Vec<Vec<Buffers>> = (0..n)
            .map(|r| {
                ops[r]
                    .iter()
                    .map(|op| Buffers::new(op, r, n, false, seed(launch)))
                    .collect()
            })
            .collect();
        for step in 0..ops[0].len() {
            let mut group = oxccl::Group::new();
            for (comm, bufs) in comms.iter().zip(expected.iter_mut()) {
                let (param, user) = bufs[step].call(&ops[comm.rank()][step]).into_parts();
                group.execute(comm, param, user);
            }
            group.run().unwrap();
        }
        let mut bufs: Vec<Vec<Buffers>> = (0..n)
            .map(|r| {
                ops[r]
                    .iter()
                    .map(|op| Buffers::new(op, r, n, false, seed(launch)))
                    .collect()
            })
            .collect();
        let launches = comms
            .iter()
            .zip(&compiled)
            .zip(bufs.iter_mut())
            .map(|((comm, graph), bufs)| {
                let calls = bufs
                    .iter_mut()
                    .zip(&ops[comm.rank()])
                    .map(|(b, op)| b.call(op))
                    .collect();
                (graph, comm, calls)
            })
            .collect();
        for result in oxccl_graph::Graph::launch_group(launches) {
            result.unwrap();
        }
        for r in 0..n {
            for (step, op) in ops[r].iter().enumerate() {
                if defined_on(op, r) {
                    assert!(
                        bufs[r][step].result() == expected[r][step].result(),
                        "rank {r}, step {step} ({})",
                        op.kind
                    );
                }
            }
        }
    }
}
