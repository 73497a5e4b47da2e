//! What graph mode refuses, and that a refusal leaves the communicator usable: ranks that
//! captured different sequences (told at compile, on every rank, naming the first
//! differing step), a step refused on one rank, and launches whose bindings differ from
//! the capture or that run on another rank's communicator.

use oxccl::{Communicator, Config, DataType, Error, OpCall, OpParam, ReduceOp, UserBuffers};
use oxccl_graph::{Capture, Graph};
use std::time::Duration;

fn comms(n: usize) -> Vec<Communicator> {
    let config = Config {
        exec_timeout: Duration::from_secs(60),
        ..Config::default()
    };
    Communicator::init_all(n, config).unwrap()
}

/// Compile on every rank the capture `ops(rank)` describes (out of place, buffers sized
/// by the op); one result per rank.
fn compile_each(
    comms: &[Communicator],
    ops: impl Fn(usize) -> Vec<OpParam> + Sync,
) -> Vec<Result<Graph, Error>> {
    std::thread::scope(|s| {
        let ops = &ops;
        let joins: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let mut capture = Capture::new();
                    for op in ops(comm.rank()) {
                        let (i, o) = op.buffer_bytes(comm.rank(), comm.size());
                        let (input, mut output) = (vec![0u8; i], vec![0u8; o]);
                        let user = UserBuffers::OutOfPlace {
                            input: &input,
                            output: &mut output,
                        };
                        capture.record(&OpCall::new(op, user)).unwrap();
                    }
                    capture.compile(comm)
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    })
}

/// Every rank still runs an AllReduce correctly.
fn still_usable(comms: &[Communicator]) {
    std::thread::scope(|s| {
        for comm in comms {
            s.spawn(move || {
                let mut x = vec![1i32; 100];
                comm.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                assert!(x.iter().all(|&v| v == comm.size() as i32));
            });
        }
    });
}

fn sum(count: usize) -> OpParam {
    OpParam::all_reduce(count, DataType::I32, ReduceOp::Sum)
}

#[test]
fn a_rank_with_another_count_is_named_at_compile_on_every_rank() {
    let comms = comms(3);
    let results = compile_each(&comms, |rank| {
        vec![sum(8), sum(if rank == 2 { 6 } else { 5 }), sum(9)]
    });
    for result in results {
        let err = result.unwrap_err();
        let Error::CaptureMismatch {
            step,
            field,
            detail,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!((*step, *field), (1, "count"), "{err}");
        assert_eq!(detail, "ranks [0, 1] pass count 5; rank 2 passes count 6");
        assert!(err.to_string().contains("no graph was compiled"), "{err}");
    }
    still_usable(&comms);
}

#[test]
fn a_rank_with_another_operator_or_length_is_named() {
    let comms = comms(2);
    let results = compile_each(&comms, |rank| match rank {
        0 => vec![sum(4), OpParam::all_gather(4, DataType::I32)],
        _ => vec![
            sum(4),
            OpParam::reduce_scatter(4, DataType::I32, ReduceOp::Sum),
        ],
    });
    for result in results {
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                Error::CaptureMismatch {
                    step: 1,
                    field: "operator",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    let results = compile_each(&comms, |rank| vec![sum(4); 2 + rank]);
    for result in results {
        let err = result.unwrap_err();
        let Error::CaptureMismatch {
            step,
            field,
            detail,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!((*step, *field), (2, "length"));
        assert_eq!(detail, "rank 0 passes 2 steps; rank 1 passes 3 steps");
    }
    still_usable(&comms);
}

#[test]
fn a_step_refused_on_one_rank_gives_it_its_own_error_and_the_others_the_step() {
    let comms = comms(3);
    let rooted = |root| {
        OpParam::rooted(
            oxccl::OpKind::Broadcast,
            4,
            DataType::I32,
            ReduceOp::Sum,
            root,
        )
    };
    let results = compile_each(&comms, |rank| {
        vec![sum(4), rooted(if rank == 1 { 7 } else { 0 })]
    });
    for (rank, result) in results.into_iter().enumerate() {
        let err = result.unwrap_err();
        match rank {
            1 => assert!(err.to_string().contains("root 7"), "{err}"),
            _ => assert!(
                matches!(&err, Error::CaptureMismatch { step: 1, field: "arguments", detail }
                    if detail.contains("rank 1 refused")),
                "{err:?}"
            ),
        }
    }
    still_usable(&comms);
}

#[test]
fn launches_that_bind_other_shapes_are_refused_before_anything_runs() {
    let comms = comms(2);
    let graphs: Vec<Graph> = compile_each(&comms, |_| vec![sum(4), sum(6)])
        .into_iter()
        .map(Result::unwrap)
        .collect();
    std::thread::scope(|s| {
        for (comm, graph) in comms.iter().zip(&graphs) {
            s.spawn(move || {
                let (a, b) = (vec![1i32; 4], vec![1i32; 6]);
                let (mut x, mut y) = (vec![0i32; 4], vec![0i32; 6]);
                let refusals = [
                    graph.launch(comm, vec![OpCall::all_reduce(&a, &mut x, ReduceOp::Sum).unwrap()]),
                    graph.launch(
                        comm,
                        vec![
                            OpCall::all_reduce(&a, &mut x, ReduceOp::Sum).unwrap(),
                            OpCall::all_reduce_n(&b, &mut y, 5, ReduceOp::Sum),
                        ],
                    ),
                    graph.launch(
                        comm,
                        vec![
                            OpCall::all_reduce(&a, &mut x, ReduceOp::Sum).unwrap(),
                            OpCall::all_reduce_in_place(&mut y, ReduceOp::Sum),
                        ],
                    ),
                ];
                let expected = [
                    "2 steps were captured and 1 calls bound",
                    "was captured as all_reduce int32 Sum count 6 and is bound as all_reduce int32 Sum count 5",
                    "was captured out of place but is bound in place",
                ];
                for (err, text) in refusals.into_iter().zip(expected) {
                    let err = err.unwrap_err();
                    assert!(matches!(err, Error::GraphBinding { .. }), "{err:?}");
                    assert!(err.to_string().contains(text), "{err}");
                }
                let long = vec![1i32; 8];
                let mut longer = vec![0i32; 8];
                let err = graph
                    .launch(
                        comm,
                        vec![
                            OpCall::all_reduce(&a, &mut x, ReduceOp::Sum).unwrap(),
                            OpCall::all_reduce_n(&long, &mut longer, 6, ReduceOp::Sum),
                        ],
                    )
                    .unwrap_err();
                assert!(
                    err.to_string().contains(
                        "was captured with a 24-byte input and a 24-byte output but is bound \
                         with a 32-byte input and a 32-byte output"
                    ),
                    "{err}"
                );
                // Nothing ran and no call number was taken: the graph still launches.
                graph
                    .launch(
                        comm,
                        vec![
                            OpCall::all_reduce(&a, &mut x, ReduceOp::Sum).unwrap(),
                            OpCall::all_reduce(&b, &mut y, ReduceOp::Sum).unwrap(),
                        ],
                    )
                    .unwrap();
                assert_eq!((x, y), (vec![2; 4], vec![2; 6]));
            });
        }
    });
    // Each rank launches the other rank's graph, then a graph of another communicator:
    // refused on both ranks, which count the launches alike, so both communicators stay
    // usable.
    let one: Vec<Graph> = compile_each(&comms, |_| vec![sum(4)])
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let other = self::comms(2);
    std::thread::scope(|s| {
        for (rank, (comm, theirs)) in other.iter().zip(one.iter().rev()).enumerate() {
            let mine = &one[rank];
            let comm_here = &comms[rank];
            s.spawn(move || {
                let a = vec![1i32; 4];
                let mut x = vec![0i32; 4];
                let mut y = vec![0i32; 4];
                let call = OpCall::all_reduce(&a, &mut x, ReduceOp::Sum).unwrap();
                let err = theirs.launch(comm_here, vec![call]).unwrap_err();
                let text = format!(
                    "was compiled for rank {} of this communicator and is launched on rank {rank}",
                    1 - rank
                );
                assert!(err.to_string().contains(&text), "{err}");
                let call = OpCall::all_reduce(&a, &mut y, ReduceOp::Sum).unwrap();
                let err = mine.launch(comm, vec![call]).unwrap_err();
                assert!(err.to_string().contains("of another communicator"), "{err}");
            });
        }
    });
    still_usable(&other);
    still_usable(&comms);
}

#[test]
fn a_launch_refused_on_one_rank_releases_the_others_at_once() {
    let comms = comms(3);
    let graphs: Vec<Graph> = compile_each(&comms, |_| vec![sum(4), sum(6)])
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for (comm, graph) in comms.iter().zip(&graphs) {
            s.spawn(move || {
                let (a, b) = (vec![1i32; 4], vec![1i32; 6]);
                let (mut x, mut y) = (vec![0i32; 4], vec![0i32; 7]);
                let y_len = if comm.rank() == 2 { 7 } else { 6 };
                let calls = vec![
                    OpCall::all_reduce(&a, &mut x, ReduceOp::Sum).unwrap(),
                    OpCall::all_reduce_n(&b, &mut y[..y_len], 6, ReduceOp::Sum),
                ];
                let err = graph.launch(comm, calls).unwrap_err();
                match comm.rank() {
                    2 => assert!(
                        matches!(err, Error::GraphBinding { step: 1, .. }),
                        "{err:?}"
                    ),
                    _ => assert!(matches!(err, Error::PeerRefused { rank: 2, .. }), "{err:?}"),
                }
            });
        }
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "released promptly"
    );
    still_usable(&comms);
}
