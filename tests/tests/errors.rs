//! Misuse gets a typed error that says what was wrong; nothing hangs.

use oxccl::{
    ArgError, Communicator, Config, DataType, DeviceError, Error, OpKind, OpParam, ReduceOp,
    Topology, UserBuffers,
};
use std::time::{Duration, Instant};

// Linked so that the plugin's executor appears among the known names.
use oxccl_plugin_bidir_ring as _;

fn comms(n: usize) -> Vec<Communicator> {
    Communicator::init_all(n, Config::default()).unwrap()
}

fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |var| {
        pairs
            .iter()
            .find(|(k, _)| *k == var)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn unknown_algorithm_is_rejected_with_the_known_names() {
    let config = Config::from_lookup(env(&[("OXCCL_ALGO", "all_reduce=warp-speed")])).unwrap();
    let err = Communicator::init_all(2, config).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownAlgorithm { op: OpKind::AllReduce, name, .. } if name == "warp-speed"),
        "{err:?}"
    );
    let msg = err.to_string();
    for known in ["bidir-ring", "mesh", "mesh-push", "one-shot", "ring"] {
        assert!(msg.contains(known), "{msg}");
    }
}

#[test]
fn bad_environment_values_name_the_variable() {
    let err = Config::from_lookup(env(&[("OXCCL_ALGO", "allsum=ring")])).unwrap_err();
    assert_eq!(err.var, "OXCCL_ALGO");
    let err = Config::from_lookup(env(&[("OXCCL_BUFFSIZE", "-3")])).unwrap_err();
    assert_eq!(err.var, "OXCCL_BUFFSIZE");
}

#[test]
fn mismatched_lengths_are_rejected() {
    let c = comms(1);
    let err = c[0]
        .all_reduce(&[1.0f32; 4], &mut [0.0f32; 5], ReduceOp::Sum)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg(ArgError::LengthMismatch { send: 4, recv: 5 })
        ),
        "{err:?}"
    );
}

#[test]
fn short_buffers_are_rejected() {
    let c = comms(1);
    let err = c[0]
        .all_reduce_n(&[1i32; 3], &mut [0i32; 10], 4, ReduceOp::Sum)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg(ArgError::BufferTooShort {
                which: "send",
                need: 4,
                got: 3,
                ..
            })
        ),
        "{err:?}"
    );
    let err = c[0]
        .all_reduce_n(&[1i32; 10], &mut [0i32; 3], 4, ReduceOp::Sum)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Arg(ArgError::BufferTooShort {
                which: "receive",
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("needs 4 int32 elements"), "{err}");
}

#[test]
fn invalid_root_is_rejected() {
    let c = comms(4);
    let op = OpParam::rooted(OpKind::Broadcast, 8, DataType::F32, ReduceOp::Sum, 4);
    let mut buf = [0u8; 32];
    let err = c[0]
        .execute(&op, UserBuffers::InPlace(&mut buf))
        .unwrap_err();
    assert!(
        matches!(err, Error::Arg(ArgError::InvalidRoot { root: 4, ranks: 4 })),
        "{err:?}"
    );
    let missing = OpParam {
        root: None,
        ..op.clone()
    };
    let err = c[0]
        .execute(&missing, UserBuffers::InPlace(&mut buf))
        .unwrap_err();
    assert!(
        matches!(err, Error::Arg(ArgError::MissingRoot { .. })),
        "{err:?}"
    );
}

#[test]
fn an_operator_without_executors_says_so() {
    // A path 0 - 1 - 2 - 3: connected, but no ring exists, the root has one link, and 0
    // and 3 share no neighbour to relay through. Every Broadcast executor refuses it.
    let mut path = Topology::single_server(4);
    for (a, b) in [(0, 2), (0, 3), (1, 3)] {
        path = path.with_broken(a, b).unwrap();
    }
    let config = Config {
        topology: Some(path),
        ..Config::default()
    };
    let c = Communicator::init_all(4, config).unwrap();
    let op = OpParam::rooted(OpKind::Broadcast, 8, DataType::F32, ReduceOp::Sum, 0);
    let err = c[0].framework().prepare(&op, true).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::NoExecutor {
                op: OpKind::Broadcast,
                ..
            }
        ),
        "{err:?}"
    );
    for part in ["ring: ", "relay-mesh: ", "common healthy neighbour"] {
        assert!(err.to_string().contains(part), "{err}");
    }
}

#[test]
fn a_disconnected_topology_is_refused_at_init() {
    let config = Config {
        topology: Some(Topology::single_server(2).with_broken(0, 1).unwrap()),
        ..Config::default()
    };
    let err = Communicator::init_all(2, config).unwrap_err();
    assert!(matches!(&err, Error::Disconnected { .. }), "{err:?}");
    assert!(
        err.to_string().contains("no path of healthy links"),
        "{err}"
    );
}

#[test]
fn a_rank_that_never_calls_times_out_naming_it_and_aborts_the_communicator() {
    let config = Config {
        exec_timeout: Duration::from_millis(200),
        ..Config::default()
    };
    let c = Communicator::init_all(3, config).unwrap();
    let start = Instant::now();
    // Rank 2 never makes call #0: ranks 0 and 1 agree on nothing and give up.
    std::thread::scope(|s| {
        for comm in &c[..2] {
            s.spawn(move || {
                let err = comm
                    .all_reduce(&[1.0f32; 16], &mut [0.0f32; 16], ReduceOp::Sum)
                    .unwrap_err();
                // The first rank to time out aborts the communicator, which wakes the
                // other with that cause.
                assert!(
                    matches!(&err, Error::CallTimeout { absent, call: 0, .. } if absent == &[2])
                        || matches!(&err, Error::Aborted { .. }),
                    "{err:?}"
                );
                // An abort names its cause in its source chain.
                let msg = oxccl::framework::error::with_causes(&err);
                for part in ["call #0", "all_reduce", "ranks [2]"] {
                    assert!(msg.contains(part), "{msg}");
                }
            });
        }
    });
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    // The abort's cause names the rank whose call failed first, then its error.
    let err = c[2].barrier().unwrap_err();
    let Error::Aborted { cause } = &err else {
        panic!("{err:?}")
    };
    let chain = oxccl::framework::error::with_causes(cause.as_ref());
    assert!(
        chain.contains("call failed first") && chain.contains("call #0"),
        "{chain}"
    );
}

#[test]
fn a_wait_that_is_never_satisfied_times_out_naming_what_it_waited_for() {
    // Without the call agreement (which would catch the missing rank first), the
    // device's own timeout names the wait.
    let config = Config {
        exec_timeout: Duration::from_millis(200),
        check_calls: false,
        ..Config::default()
    };
    let c = Communicator::init_all(2, config).unwrap();
    let start = Instant::now();
    // Rank 1 never joins: rank 0's first Wait can never be satisfied.
    let err = c[0]
        .all_reduce(&[1.0f32; 16], &mut [0.0f32; 16], ReduceOp::Sum)
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    let Error::WaitNeverPosted {
        call: 0,
        expected,
        cause: DeviceError::WaitTimeout { at, notify, .. },
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((at.rank, notify.rank), (0, 0));
    // The task that should have posted: rank 1's, planned again on rank 0.
    let oxccl::framework::error::ExpectedPost::Tasks(posters) = &**expected else {
        panic!("{expected:?}")
    };
    assert!(posters.iter().all(|t| t.rank == 1), "{posters:?}");
    let msg = oxccl::framework::error::with_causes(&err);
    for part in [
        "rank 0 stream 0 task",
        "from rank 1",
        "timed out",
        "OXCCL_EXEC_TIMEOUT",
        &format!("{} (Post) should have posted it", posters[0]),
        "if every rank made this same call",
    ] {
        assert!(msg.contains(part), "{msg}");
    }
    // The communicator is now aborted, for every rank.
    let err = c[1]
        .all_reduce(&[1.0f32; 16], &mut [0.0f32; 16], ReduceOp::Sum)
        .unwrap_err();
    // The cause is rank 0's original error, typed, named as rank 0's, and the source of
    // the abort.
    let Error::Aborted { cause } = &err else {
        panic!("{err:?}")
    };
    let Error::RankFailed { rank: 0, cause } = cause.as_ref() else {
        panic!("{cause:?}")
    };
    assert!(
        matches!(**cause, Error::WaitNeverPosted { .. }),
        "{cause:?}"
    );
    let chain = oxccl::framework::error::with_causes(&err);
    assert!(chain.contains("timed out"), "{chain}");
}

#[test]
fn a_peer_planned_for_each_form_when_its_form_moves_its_posts() {
    // Rank 1 never joins, and rank 0 cannot know whether it would have called in place:
    // the zero-copy AllGather ring's out-of-place program copies the rank's own block into
    // place first, which moves its Posts, so the error names rank 1's posting tasks for
    // each form.
    let mut algo = oxccl::AlgoOverride::default();
    algo.set(Some(OpKind::AllGather), "ring");
    let config = Config {
        exec_timeout: Duration::from_millis(200),
        check_calls: false,
        zero_copy: true,
        algo,
        ..Config::default()
    };
    let c = Communicator::init_all(2, config).unwrap();
    let err = c[0]
        .all_gather(&[1.0f32; 16], &mut [0.0f32; 32])
        .unwrap_err();
    let Error::WaitNeverPosted { expected, .. } = &err else {
        panic!("{err:?}")
    };
    use oxccl::framework::error::ExpectedPost;
    let ExpectedPost::ByForm {
        in_place,
        out_of_place,
    } = &**expected
    else {
        panic!("{expected:?}")
    };
    let (ExpectedPost::Tasks(a), ExpectedPost::Tasks(b)) = (&**in_place, &**out_of_place) else {
        panic!("{expected:?}")
    };
    assert_ne!(a, b);
    assert!(a.iter().chain(b).all(|t| t.rank == 1), "{expected:?}");
    let msg = oxccl::framework::error::with_causes(&err);
    for part in [
        format!("in place, {} (Post) should have posted it", a[0]),
        format!("out of place, {} (Post) should have posted it", b[0]),
    ] {
        assert!(msg.contains(&part), "{msg}");
    }
}

#[test]
fn executors_that_need_a_broken_link_are_refused() {
    let topology = Topology::single_server(4).with_broken(1, 2).unwrap();
    let mut config = Config {
        topology: Some(topology),
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), "mesh");
    let c = Communicator::init_all(4, config.clone()).unwrap();
    let err = c[0]
        .all_reduce(&[1u8; 8], &mut [0u8; 8], ReduceOp::Sum)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported { executor, .. } if executor == "mesh"),
        "{err:?}"
    );
    assert!(err.to_string().contains("broken or missing links"), "{err}");
}

#[test]
fn without_a_ring_of_healthy_links_the_ring_says_so() {
    // Rank 0 keeps one link only: no ring passes through it.
    let topology = Topology::single_server(4)
        .with_broken(0, 2)
        .unwrap()
        .with_broken(0, 3)
        .unwrap();
    let mut config = Config {
        topology: Some(topology.clone()),
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), "ring");
    let c = Communicator::init_all(4, config).unwrap();
    let err = c[1]
        .all_reduce(&[1u8; 8], &mut [0u8; 8], ReduceOp::Sum)
        .unwrap_err();
    assert!(
        err.to_string().contains("no ring of healthy links"),
        "{err}"
    );
    // The built-in selector rejects the ring for that reason and relays through rank 1
    // instead, and says so for every candidate.
    let c = Communicator::init_all(
        4,
        Config {
            topology: Some(topology),
            ..Config::default()
        },
    )
    .unwrap();
    let op = OpParam::all_reduce(8, DataType::U8, ReduceOp::Sum);
    let selection = c[1].framework().select(&op, false).unwrap();
    assert_eq!(selection.executor.name, "relay-mesh");
    let table = selection.explanation.table("");
    for part in ["ring", "no ring of healthy links", "mesh", "relay-mesh"] {
        assert!(table.contains(part), "{table}");
    }
}
