use super::*;
use crate::op::{OpKind, OpParam, VLayout};
use oxccl_platform::{DataType, ReduceOp};

const LONG: Duration = Duration::from_secs(10);

fn call(rank: Rank, op: &OpParam) -> Deposit {
    Deposit::Call(Signature::new(rank, op, Some("ring")))
}

/// Deposit one op per rank on a fresh board and return every rank's verdict.
fn agree(ops: &[OpParam]) -> Vec<Result<(), Error>> {
    let board = CallBoard::new(ops.len());
    for (rank, op) in ops.iter().enumerate() {
        board.deposit(0, rank, call(rank, op));
    }
    (0..ops.len()).map(|r| board.verdict(0, r, LONG)).collect()
}

fn mismatch_of(result: &Result<(), Error>) -> (&'static str, String) {
    match result {
        Err(Error::Mismatch { field, detail, .. }) => (field, detail.clone()),
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

#[test]
fn equal_calls_agree_and_the_round_is_dropped() {
    let op = OpParam::all_reduce(10, DataType::F32, ReduceOp::Sum);
    let board = CallBoard::new(3);
    for r in 0..3 {
        board.deposit(7, r, call(r, &op));
    }
    for r in 0..3 {
        board.verdict(7, r, LONG).unwrap();
    }
    assert!(board.rounds.lock().rounds.is_empty());
}

#[test]
fn every_differing_field_is_named_with_the_ranks() {
    let base = OpParam::all_reduce(10, DataType::F32, ReduceOp::Sum);
    let cases = [
        (
            OpParam {
                count: 12,
                ..base.clone()
            },
            "count",
            "rank 2 passes count 12",
        ),
        (
            OpParam {
                dtype: DataType::I32,
                ..base.clone()
            },
            "data type",
            "rank 2 passes int32",
        ),
        (
            OpParam {
                op: ReduceOp::Max,
                ..base.clone()
            },
            "reduce op",
            "Max",
        ),
        (
            OpParam {
                kind: OpKind::AllGather,
                ..base.clone()
            },
            "operator",
            "all_gather",
        ),
    ];
    for (odd, field, needle) in cases {
        let verdicts = agree(&[base.clone(), base.clone(), odd]);
        for v in &verdicts {
            let (f, detail) = mismatch_of(v);
            assert_eq!(f, field);
            assert!(
                detail.contains("ranks [0, 1]") && detail.contains(needle),
                "{detail}"
            );
        }
    }
    let b = |root| OpParam::rooted(OpKind::Broadcast, 4, DataType::U8, ReduceOp::Sum, root);
    assert_eq!(mismatch_of(&agree(&[b(0), b(1)])[0]).0, "root");
}

#[test]
fn executors_and_block_layouts_are_compared() {
    let op = OpParam::all_reduce(10, DataType::F32, ReduceOp::Sum);
    let board = CallBoard::new(2);
    board.deposit(0, 0, Deposit::Call(Signature::new(0, &op, Some("ring"))));
    board.deposit(0, 1, Deposit::Call(Signature::new(1, &op, Some("mesh"))));
    assert_eq!(mismatch_of(&board.verdict(0, 1, LONG)).0, "executor");
    let v = |counts: &[usize], displs: &[usize]| {
        let layout = VLayout::Blocks {
            counts: counts.to_vec(),
            displs: displs.to_vec(),
        };
        OpParam::vector(OpKind::AllGatherV, layout, DataType::I8, ReduceOp::Sum)
    };
    assert_eq!(
        mismatch_of(&agree(&[v(&[1, 2], &[0, 1]), v(&[2, 1], &[0, 2])])[0]).0,
        "count"
    );
    let (field, detail) = mismatch_of(&agree(&[v(&[1, 2], &[0, 1]), v(&[1, 2], &[0, 3])])[1]);
    assert_eq!(field, "layout");
    assert!(detail.contains("[0, 3]"), "{detail}");
}

#[test]
fn point_to_point_pairs_must_match() {
    let a2av = |send: &[usize], recv: &[usize]| {
        let displs = |c: &[usize]| VLayout::packed_blocks(c).blocks().unwrap().1.to_vec();
        let layout = VLayout::all_to_all_v(send, &displs(send), recv, &displs(recv));
        OpParam::vector(OpKind::AlltoAllV, layout, DataType::F32, ReduceOp::Sum)
    };
    let good = agree(&[a2av(&[1, 2], &[1, 3]), a2av(&[3, 4], &[2, 4])]);
    assert!(good.iter().all(Result::is_ok), "{good:?}");
    let bad = agree(&[a2av(&[1, 2], &[1, 3]), a2av(&[5, 4], &[2, 4])]);
    let (field, detail) = mismatch_of(&bad[0]);
    assert_eq!(field, "layout");
    assert!(
        detail.contains("rank 1 sends counts [5] to rank 0, which receives counts [3]"),
        "{detail}"
    );
}

#[test]
fn a_refusal_reaches_every_rank() {
    let op = OpParam::all_reduce(10, DataType::F32, ReduceOp::Sum);
    let board = CallBoard::new(3);
    board.deposit(0, 0, call(0, &op));
    board.deposit(0, 2, call(2, &op));
    board.deposit(0, 1, Deposit::Refused("receive buffer too short".into()));
    for r in [0, 2] {
        match board.verdict(0, r, LONG) {
            Err(Error::PeerRefused {
                rank: 1, reason, ..
            }) => assert!(reason.contains("too short")),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_missing_rank_times_out_naming_it_and_a_failure_wakes_waiters() {
    let op = OpParam::all_reduce(10, DataType::F32, ReduceOp::Sum);
    let board = CallBoard::new(3);
    board.deposit(4, 0, call(0, &op));
    board.deposit(4, 1, call(1, &op));
    match board.verdict(4, 0, Duration::from_millis(20)) {
        Err(Error::CallTimeout {
            absent,
            call: 4,
            what,
            ..
        }) => {
            assert_eq!(absent, vec![2]);
            assert!(what.contains("all_reduce"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    let failure = Error::Aborted {
        cause: std::sync::Arc::new(Error::Busy { rank: 2 }),
    };
    std::thread::scope(|s| {
        let waiter = s.spawn(|| board.verdict(4, 1, LONG));
        std::thread::sleep(Duration::from_millis(20));
        board.fail(&failure);
        assert!(matches!(waiter.join().unwrap(), Err(Error::Aborted { .. })));
    });
}

#[test]
fn send_recv_pairs_match_in_call_order_whatever_the_interleaving() {
    let item = |peer, count| crate::op::P2pItem {
        peer,
        offset: 0,
        count,
    };
    let send_recv = |sends: Vec<crate::op::P2pItem>, recvs: Vec<crate::op::P2pItem>| {
        let layout = VLayout::P2p { sends, recvs };
        OpParam::vector(OpKind::SendRecv, layout, DataType::F32, ReduceOp::Sum)
    };
    // Rank 0 sends 2 and 3 elements to rank 1 with a send to rank 2 between them, and an
    // empty item, which counts for nothing.
    let rank0 = send_recv(vec![item(1, 2), item(2, 5), item(1, 0), item(1, 3)], vec![]);
    let rank1 = |counts: &[usize]| send_recv(vec![], counts.iter().map(|&c| item(0, c)).collect());
    let rank2 = send_recv(vec![], vec![item(0, 5)]);
    let good = agree(&[rank0.clone(), rank1(&[2, 3]), rank2.clone()]);
    assert!(good.iter().all(Result::is_ok), "{good:?}");
    for (counts, says) in [
        (
            &[3, 2][..],
            "rank 0 sends counts [2, 3] to rank 1, which receives counts [3, 2]",
        ),
        (
            &[2][..],
            "rank 0 sends counts [2, 3] to rank 1, which receives counts [2]",
        ),
        (
            &[][..],
            "rank 0 sends counts [2, 3] to rank 1, which receives nothing",
        ),
    ] {
        let bad = agree(&[rank0.clone(), rank1(counts), rank2.clone()]);
        let (field, detail) = mismatch_of(&bad[2]);
        assert_eq!(field, "layout");
        assert!(detail.contains(says), "{detail}");
    }
    // A receive nobody sends: the first pair in (sender, receiver) order is named.
    let bad = agree(&[
        rank0,
        rank1(&[2, 3]),
        send_recv(vec![], vec![item(0, 5), item(1, 4)]),
    ]);
    assert!(
        mismatch_of(&bad[0])
            .1
            .contains("rank 1 sends nothing to rank 2, which receives counts [4]"),
        "{bad:?}"
    );
}
