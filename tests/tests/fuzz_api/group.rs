//! Group calls: one thread drives every rank.

use super::*;

#[derive(Clone, Debug)]
struct GroupCase {
    ranks: usize,
    dtype: Dtype,
    op: ReduceOp,
    count: usize,
    /// Odd ranks call with another dtype of the same size.
    mixed_dtypes: bool,
}

fn group_case() -> impl Strategy<Value = GroupCase> {
    (ranks(), dtype(), reduce_op(), 0usize..20, any::<bool>()).prop_map(
        |(ranks, dtype, op, count, mixed_dtypes)| GroupCase {
            ranks,
            dtype,
            op,
            count,
            mixed_dtypes,
        },
    )
}

fn check_group_all_reduce<T: Value>(case: &GroupCase) {
    let n = case.ranks;
    let comms = comms(n);
    let mut sends: Vec<Guarded<T>> = (0..n).map(|r| Guarded::input(r, case.count)).collect();
    let mut recvs: Vec<Guarded<T>> = (0..n).map(|_| Guarded::zeros(case.count)).collect();
    let start = Instant::now();
    let result = {
        let mut group = Group::new();
        for ((comm, send), recv) in comms.iter().zip(&sends).zip(&mut recvs) {
            if case.mixed_dtypes && comm.rank() % 2 == 1 {
                let param = OpParam::all_reduce(case.count, T::TWIN, case.op);
                group.execute(comm, param, raw(send, recv));
            } else {
                group
                    .all_reduce(comm, send.get(), recv.get_mut(), case.op)
                    .expect("equal lengths");
            }
        }
        group.run()
    };
    assert_prompt(start);
    let outcomes: Vec<Outcome<T>> = sends
        .drain(..)
        .zip(recvs.drain(..))
        .enumerate()
        .map(|(rank, (send, recv))| Outcome {
            rank,
            result: result.clone(),
            send,
            recv,
        })
        .collect();
    assert_guards(&outcomes);
    if case.mixed_dtypes && n >= 2 {
        assert!(result.is_err(), "a group mixing dtypes ran");
        return;
    }
    result.expect("valid group AllReduce");
    for o in &outcomes {
        assert_data("group AllReduce", o.recv.get(), |i| reduced(case.op, n, i));
    }
}

#[test]
fn api_group_all_reduce() {
    fuzz("group_all_reduce", group_case(), |case| {
        with_dtype!(case.dtype, check_group_all_reduce(&case))
    });
}
