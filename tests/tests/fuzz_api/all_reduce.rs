//! AllReduce.

use super::*;

/// What is wrong with an AllReduce.
#[derive(Clone, Copy, Debug)]
enum ReduceFault {
    None,
    /// One rank asks for another count (through `all_reduce_n`, possibly past its buffers).
    CountOnOneRank(Num),
    /// One rank asks for another reduce op.
    OpOnOneRank,
    /// One rank asks for another dtype of the same size.
    DtypeOnOneRank,
    /// Every rank passes a receive buffer shorter than its send buffer.
    ShortRecvEverywhere,
}

#[derive(Clone, Debug)]
struct AllReduceCase {
    ranks: usize,
    dtype: Dtype,
    op: ReduceOp,
    count: usize,
    in_place: bool,
    fault: ReduceFault,
    odd_rank: usize,
}

fn all_reduce_case() -> impl Strategy<Value = AllReduceCase> {
    let fault = prop_oneof![
        3 => Just(ReduceFault::None),
        1 => num(40).prop_map(ReduceFault::CountOnOneRank),
        1 => Just(ReduceFault::OpOnOneRank),
        1 => Just(ReduceFault::DtypeOnOneRank),
        1 => Just(ReduceFault::ShortRecvEverywhere),
    ];
    (
        ranks(),
        dtype(),
        reduce_op(),
        0usize..40,
        any::<bool>(),
        fault,
        0usize..5,
    )
        .prop_map(
            |(ranks, dtype, op, count, in_place, fault, odd_rank)| AllReduceCase {
                ranks,
                dtype,
                op,
                count,
                in_place,
                fault,
                odd_rank,
            },
        )
}

fn check_all_reduce<T: Value>(case: &AllReduceCase) {
    let n = case.ranks;
    let odd = odd_rank_out(n, case.odd_rank);
    let fault = match case.fault {
        ReduceFault::ShortRecvEverywhere => case.fault,
        _ if odd.is_none() => ReduceFault::None,
        fault => fault,
    };
    let other_op = ReduceOp::ALL[(case.op as usize + 1) % ReduceOp::ALL.len()];
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let mut send = Guarded::<T>::input(rank, case.count);
        let recv_len = match fault {
            ReduceFault::ShortRecvEverywhere => case.count.saturating_sub(1),
            _ => case.count,
        };
        let mut recv = Guarded::<T>::zeros(recv_len);
        let is_odd = Some(rank) == odd;
        let result = match fault {
            ReduceFault::CountOnOneRank(count) if is_odd => {
                let count = count.get(std::mem::size_of::<T>());
                comm.all_reduce_n(send.get(), recv.get_mut(), count, case.op)
            }
            ReduceFault::OpOnOneRank if is_odd && case.in_place => {
                comm.all_reduce_in_place(send.get_mut(), other_op)
            }
            ReduceFault::OpOnOneRank if is_odd => {
                comm.all_reduce(send.get(), recv.get_mut(), other_op)
            }
            ReduceFault::DtypeOnOneRank if is_odd => {
                let param = OpParam::all_reduce(case.count, T::TWIN, case.op);
                comm.execute(&param, raw(&send, &mut recv))
            }
            _ if case.in_place && !matches!(fault, ReduceFault::ShortRecvEverywhere) => {
                comm.all_reduce_in_place(send.get_mut(), case.op)
            }
            _ => comm.all_reduce(send.get(), recv.get_mut(), case.op),
        };
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    match fault {
        ReduceFault::None => {
            assert_all_ok(&outcomes, "valid AllReduce");
            for o in &outcomes {
                let out = if case.in_place { &o.send } else { &o.recv };
                assert_data("AllReduce", out.get(), |i| reduced(case.op, n, i));
            }
        }
        ReduceFault::CountOnOneRank(count) if count.get(std::mem::size_of::<T>()) == case.count => {
            all_ok(&outcomes);
        }
        ReduceFault::ShortRecvEverywhere if case.count == 0 => {
            all_ok(&outcomes);
        }
        _ => assert_all_err(&outcomes, "AllReduce with a bad or mismatched argument"),
    }
}

#[test]
fn api_all_reduce() {
    fuzz("all_reduce", all_reduce_case(), |case| {
        with_dtype!(case.dtype, check_all_reduce(&case))
    });
}
