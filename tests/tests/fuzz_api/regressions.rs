//! Regressions for the defects the probe found.

use super::*;

/// Run `call` on every rank of a fresh `n`-rank communicator with `f32` buffers of the
/// given lengths; the outcomes, checked for promptness and guards.
fn regression(
    n: usize,
    lens: impl Fn(usize) -> (usize, usize) + Sync,
    call: impl Fn(&Communicator, &[f32], &mut [f32]) -> Result<(), Error> + Sync,
) -> Vec<Outcome<f32>> {
    on_every_rank(n, |comm| {
        let rank = comm.rank();
        let (send_len, recv_len) = lens(rank);
        let send = Guarded::input(rank, send_len);
        let mut recv = Guarded::zeros(recv_len);
        let result = call(comm, send.get(), recv.get_mut());
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    })
}

#[test]
fn all_gather_v_with_wrapping_displacement_or_counts_is_refused() {
    let wrapping = [
        (vec![2, 2], vec![0, usize::MAX]),
        (vec![usize::MAX, 2], vec![0, 2]),
        (vec![usize::MAX / 2 + 1, usize::MAX / 2 + 1], vec![0, 0]),
        (vec![2, usize::MAX / 4], vec![0, 2]),
    ];
    for (counts, displs) in wrapping {
        let outcomes = regression(
            2,
            |_| (2, 8),
            |comm, send, recv| comm.all_gather_v(send, recv, &counts, &displs),
        );
        assert_all_err(&outcomes, "AllGatherV past usize::MAX");
    }
}

#[test]
fn all_to_all_v_with_a_huge_send_count_is_refused_at_once() {
    for huge in [usize::MAX, usize::MAX / 4, usize::MAX / 4 - 1, 1 << 40] {
        let start = Instant::now();
        let outcomes = regression(
            2,
            |_| (4, 4),
            |comm, send, recv| {
                let sends = if comm.rank() == 0 { [huge, 2] } else { [2, 2] };
                comm.all_to_all_v(send, &sends, &[0, 2], recv, &[2, 2], &[0, 2])
            },
        );
        assert_all_err(&outcomes, "AlltoAllV with a huge count");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    }
}

#[test]
fn all_to_all_v_whose_displacement_wraps_writes_nothing_outside() {
    for wrap in [
        usize::MAX,
        usize::MAX - 1,
        usize::MAX / 4 + 1,
        usize::MAX / 2,
    ] {
        let outcomes = regression(
            2,
            |_| (4, 4),
            |comm, send, recv| {
                let recv_displs = if comm.rank() == 1 { [0, wrap] } else { [0, 2] };
                comm.all_to_all_v(send, &[2, 2], &[0, 2], recv, &[2, 2], &recv_displs)
            },
        );
        assert_all_err(&outcomes, "AlltoAllV with a wrapping displacement");
    }
}

#[test]
fn all_reduce_with_different_counts_is_refused_on_both_ranks() {
    let outcomes = regression(
        2,
        |rank| (4 + rank, 4 + rank),
        |comm, send, recv| comm.all_reduce(send, recv, ReduceOp::Sum),
    );
    for o in &outcomes {
        let err = o
            .result
            .as_ref()
            .expect_err("different counts must be refused");
        assert!(err.to_string().contains("count"), "rank {}: {err}", o.rank);
    }
}

#[test]
fn group_mixing_f32_and_i32_all_reduce_is_refused_on_every_rank() {
    let comms = comms(2);
    let (send_f, mut recv_f) = (vec![1.0f32; 4], vec![0.0f32; 4]);
    let (send_i, mut recv_i) = (vec![1i32; 4], vec![0i32; 4]);
    let mut group = Group::new();
    group
        .all_reduce(&comms[0], &send_f, &mut recv_f, ReduceOp::Sum)
        .unwrap();
    group
        .all_reduce(&comms[1], &send_i, &mut recv_i, ReduceOp::Sum)
        .unwrap();
    let start = Instant::now();
    assert!(group.run().is_err());
    assert_prompt(start);
    // Each rank on its own thread: both refused.
    let comms = self::comms(2);
    std::thread::scope(|s| {
        let f = s.spawn(|| comms[0].all_reduce(&[1.0f32; 4], &mut [0.0; 4], ReduceOp::Sum));
        let i = s.spawn(|| comms[1].all_reduce(&[1i32; 4], &mut [0; 4], ReduceOp::Sum));
        assert!(f.join().unwrap().is_err());
        assert!(i.join().unwrap().is_err());
    });
}

#[test]
fn out_of_range_root_is_refused_by_prepare_and_select() {
    let n = 3;
    for comm in &comms(n) {
        for kind in [
            OpKind::Broadcast,
            OpKind::Reduce,
            OpKind::Scatter,
            OpKind::Gather,
        ] {
            for root in [n, n + 1, usize::MAX] {
                let op = OpParam::rooted(kind, 4, DataType::F32, ReduceOp::Sum, root);
                for in_place in [false, true] {
                    assert!(comm.framework().prepare(&op, in_place).is_err());
                    assert!(comm.framework().select(&op, in_place).is_err());
                }
            }
        }
    }
}

/// The typed calls check their buffer lengths (`same_length`, `block_count`) before the
/// op exists; a rank that fails them must still deposit its refusal (`GroupCall::Refused`),
/// or the other ranks would wait the whole `exec_timeout` for it and the failing rank's
/// call count would fall behind.
#[test]
fn typed_length_error_on_one_rank_releases_the_others_at_once() {
    let outcomes = regression(
        3,
        |rank| (4, if rank == 1 { 3 } else { 4 }),
        |comm, send, recv| comm.all_reduce(send, recv, ReduceOp::Sum),
    );
    assert_all_err(&outcomes, "AllReduce with one short receive buffer");
}
