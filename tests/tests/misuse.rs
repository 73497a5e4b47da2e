//! Misuse of communicators: mismatched calls, a bad argument on one rank, two threads on
//! one rank, groups that mix communicators, programs too large to build. Each is a typed
//! error on every rank involved, promptly (the timeout here is a minute; every test ends
//! in well under it), and leaves the communicator usable where nothing ran.

use oxccl::{ArgError, Communicator, Config, DataType, Error, OpKind, OpParam, ReduceOp};
use std::time::{Duration, Instant};

/// Far longer than any of these tests may take: a test that waits it out fails.
const PATIENCE: Duration = Duration::from_secs(20);

fn comms(n: usize) -> Vec<Communicator> {
    Communicator::init_all(n, Config::default()).unwrap()
}

/// Run `call(rank, comm)` on every rank, each from its own thread; the results in rank
/// order, after checking that they came promptly.
fn on_every_rank<T: Send>(
    comms: &[Communicator],
    call: impl Fn(usize, &Communicator) -> T + Sync,
) -> Vec<T> {
    let start = Instant::now();
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, c)| {
                let call = &call;
                s.spawn(move || call(r, c))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(start.elapsed() < PATIENCE, "took {:?}", start.elapsed());
    results
}

/// An AllReduce of `count` ones on every rank, checked for the sum when it succeeds.
fn all_reduce_ones(comm: &Communicator, count: usize) -> Result<(), Error> {
    let send = vec![1i32; count];
    let mut recv = vec![0i32; count];
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
    assert!(recv.iter().all(|&x| x == comm.size() as i32));
    Ok(())
}

/// The error of a call expected to fail (an `Ok` here would be a program of millions of
/// tasks: not printed).
fn refused<T>(result: Result<T, Error>) -> Error {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(err) => err,
    }
}

fn assert_usable(comms: &[Communicator]) {
    for result in on_every_rank(comms, |_, c| all_reduce_ones(c, 33)) {
        result.unwrap();
    }
}

#[test]
fn different_counts_are_a_mismatch_on_every_rank_and_nothing_runs() {
    let c = comms(3);
    let results = on_every_rank(&c, |r, comm| {
        all_reduce_ones(comm, if r == 1 { 10 } else { 12 })
    });
    for result in results {
        match result {
            Err(Error::Mismatch {
                field,
                detail,
                call: 0,
            }) => {
                assert_eq!(field, "count");
                assert!(detail.contains("ranks [0, 2] pass count 12"), "{detail}");
                assert!(detail.contains("rank 1 passes count 10"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_usable(&c);
}

#[test]
fn different_operators_are_a_mismatch() {
    let c = comms(2);
    let results = on_every_rank(&c, |r, comm| {
        let mut buf = vec![1u8; 8];
        match r {
            0 => comm.broadcast_in_place(&mut buf, 0),
            _ => comm.all_reduce_in_place(&mut buf, ReduceOp::Max),
        }
    });
    for result in results {
        assert!(
            matches!(
                &result,
                Err(Error::Mismatch {
                    field: "operator",
                    ..
                })
            ),
            "{result:?}"
        );
    }
    assert_usable(&c);
}

#[test]
fn a_group_mixing_data_types_fails_on_every_rank() {
    let c = comms(2);
    let (f_send, mut f_recv) = ([1.0f32; 4], [0.0f32; 4]);
    let (i_send, mut i_recv) = ([1i32; 4], [0i32; 4]);
    let mut group = oxccl::Group::new();
    group
        .all_reduce(&c[0], &f_send, &mut f_recv, ReduceOp::Sum)
        .unwrap();
    group
        .all_reduce(&c[1], &i_send, &mut i_recv, ReduceOp::Sum)
        .unwrap();
    let err = group.run().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Mismatch {
                field: "data type",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!((f_recv, i_recv), ([0.0; 4], [0; 4]), "nothing ran");
    assert_usable(&c);
}

#[test]
fn a_bad_argument_on_one_rank_releases_the_others_at_once() {
    let c = comms(4);
    let results = on_every_rank(&c, |r, comm| {
        let send = vec![1i32; 16];
        let mut recv = vec![0i32; if r == 2 { 15 } else { 16 }];
        comm.all_reduce_n(&send, &mut recv, 16, ReduceOp::Sum)
    });
    for (r, result) in results.into_iter().enumerate() {
        match (r, result) {
            (2, Err(Error::Arg(ArgError::BufferTooShort { .. }))) => {}
            (
                _,
                Err(Error::PeerRefused {
                    rank: 2, reason, ..
                }),
            ) => {
                assert!(reason.contains("too short"), "{reason}")
            }
            (r, other) => panic!("rank {r}: {other:?}"),
        }
    }
    assert_usable(&c);
}

#[test]
fn a_second_thread_on_a_busy_rank_is_refused_without_aborting() {
    let c = comms(2);
    std::thread::scope(|s| {
        // Rank 0's call waits for rank 1, which comes only after the intruder was refused.
        let first = s.spawn(|| all_reduce_ones(&c[0], 8));
        // Let the first call get in flight (it then waits for rank 1's agreement).
        std::thread::sleep(Duration::from_millis(300));
        let err = all_reduce_ones(&c[0], 8).unwrap_err();
        assert!(matches!(err, Error::Busy { rank: 0 }), "{err:?}");
        assert!(err.to_string().contains("unaffected"), "{err}");
        all_reduce_ones(&c[1], 8).unwrap();
        first.join().unwrap().unwrap();
    });
    assert_usable(&c);
}

#[test]
fn a_group_of_two_communicators_is_refused_before_anything_runs() {
    let a = comms(2);
    let b = comms(2);
    let (send, mut r1, mut r2) = ([1u8; 4], [0u8; 4], [0u8; 4]);
    let start = Instant::now();
    let mut group = oxccl::Group::new();
    group
        .all_reduce(&a[0], &send, &mut r1, ReduceOp::Sum)
        .unwrap();
    group
        .all_reduce(&b[1], &send, &mut r2, ReduceOp::Sum)
        .unwrap();
    let err = group.run().unwrap_err();
    assert!(err.to_string().contains("same init_all"), "{err}");
    assert!(start.elapsed() < PATIENCE, "took {:?}", start.elapsed());
    assert_usable(&a);
    assert_usable(&b);
}

#[test]
fn programs_too_large_to_build_are_refused_not_built() {
    // 512 GiB through 512 KiB CCL buffers: a million staged iterations of several tasks.
    let config = Config {
        ccl_buffer_bytes: 512 << 10,
        zero_copy: false,
        ..Config::default()
    };
    let op = OpParam::all_reduce(1 << 36, DataType::F64, ReduceOp::Sum);
    let start = Instant::now();
    // Selection models every candidate: each is refused, and the error says why.
    let c = Communicator::init_all(2, config.clone()).unwrap();
    let err = refused(c[0].framework().prepare(&op, false));
    assert!(matches!(err, Error::NoExecutor { .. }), "{err:?}");
    assert!(err.to_string().contains("MAX_TASKS"), "{err}");
    // A forced executor gets the refusal itself.
    let mut forced = config;
    forced.algo.set(Some(OpKind::AllReduce), "one-shot");
    let c = Communicator::init_all(2, forced).unwrap();
    let err = refused(c[0].framework().prepare(&op, false));
    assert!(matches!(err, Error::TooManyTasks { .. }), "{err:?}");
    assert!(err.to_string().contains("OXCCL_BUFFSIZE"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    // Past the buffer bound: refused by validation, before any planning.
    let huge = OpParam::all_reduce(usize::MAX / 4, DataType::F64, ReduceOp::Sum);
    let err = refused(c[0].framework().prepare(&huge, false));
    assert!(
        matches!(err, Error::Arg(ArgError::CountOverflow { .. })),
        "{err:?}"
    );
}

#[test]
fn out_of_range_roots_and_ranks_are_errors_in_prepare_and_select() {
    let c = comms(3);
    for kind in [
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::Scatter,
        OpKind::Gather,
    ] {
        let op = OpParam::rooted(kind, 4, DataType::F32, ReduceOp::Sum, 3);
        for err in [
            c[1].framework().prepare(&op, false).unwrap_err(),
            c[1].framework().select(&op, true).map(|_| ()).unwrap_err(),
        ] {
            assert!(
                matches!(err, Error::Arg(ArgError::InvalidRoot { root: 3, ranks: 3 })),
                "{kind}: {err:?}"
            );
        }
    }
    let err = Communicator::init_all(oxccl::framework::limits::MAX_RANKS + 1, Config::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("MAX_RANKS") || err.to_string().contains("4096"),
        "{err}"
    );
}
