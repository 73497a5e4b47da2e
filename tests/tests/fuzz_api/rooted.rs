//! Broadcast, Reduce, Scatter, Gather.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Rooted {
    Broadcast,
    Reduce,
    Scatter,
    Gather,
}

#[derive(Clone, Debug)]
struct RootedCase {
    kind: Rooted,
    in_place: bool,
    ranks: usize,
    dtype: Dtype,
    op: ReduceOp,
    /// Elements per rank (per block for Scatter and Gather).
    count: usize,
    root: Num,
    /// One rank names the next root instead.
    root_differs: bool,
    odd_rank: usize,
}

fn rooted_case() -> impl Strategy<Value = RootedCase> {
    let kind = prop::sample::select(vec![
        Rooted::Broadcast,
        Rooted::Reduce,
        Rooted::Scatter,
        Rooted::Gather,
    ]);
    let root = prop_oneof![6 => (0usize..7).prop_map(Num::Small), 1 => wild()];
    (
        (kind, any::<bool>(), ranks(), dtype(), reduce_op()),
        (0usize..12, root, prop::bool::weighted(0.25), 0usize..5),
    )
        .prop_map(
            |((kind, in_place, ranks, dtype, op), (count, root, root_differs, odd_rank))| {
                RootedCase {
                    kind,
                    in_place,
                    ranks,
                    dtype,
                    op,
                    count,
                    root,
                    root_differs,
                    odd_rank,
                }
            },
        )
}

/// One rank's rooted call on its buffers; in place, `send` is the buffer.
fn rooted_call<T: Value>(
    comm: &Communicator,
    case: &RootedCase,
    root: usize,
    send: &mut Guarded<T>,
    recv: &mut Guarded<T>,
) -> Result<(), Error> {
    let (buf, recv) = (send.get_mut(), recv.get_mut());
    match (case.kind, case.in_place) {
        (Rooted::Broadcast, true) => comm.broadcast_in_place(buf, root),
        (Rooted::Broadcast, false) => comm.broadcast(buf, recv, root),
        (Rooted::Reduce, true) => comm.reduce_in_place(buf, case.op, root),
        (Rooted::Reduce, false) => comm.reduce(buf, recv, case.op, root),
        (Rooted::Scatter, true) => comm.scatter_in_place(buf, root),
        (Rooted::Scatter, false) => comm.scatter(buf, recv, root),
        (Rooted::Gather, true) => comm.gather_in_place(buf, root),
        (Rooted::Gather, false) => comm.gather(buf, recv, root),
    }
}

fn check_rooted<T: Value>(case: &RootedCase) {
    let n = case.ranks;
    let c = case.count;
    let root = case.root.get(std::mem::size_of::<T>());
    let odd = odd_rank_out(n, case.odd_rank).filter(|_| case.root_differs && root < n);
    let (send_len, recv_len) = match (case.kind, case.in_place) {
        (Rooted::Broadcast | Rooted::Reduce, _) => (c, c),
        (_, true) => (n * c, 0),
        (Rooted::Scatter, false) => (n * c, c),
        (Rooted::Gather, false) => (c, n * c),
    };
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let mut send = Guarded::<T>::input(rank, send_len);
        let mut recv = Guarded::<T>::zeros(recv_len);
        let my_root = if Some(rank) == odd {
            (root + 1) % n
        } else {
            root
        };
        let result = rooted_call(comm, case, my_root, &mut send, &mut recv);
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    if root >= n || odd.is_some() {
        assert_all_err(&outcomes, "rooted call with a bad or mismatched root");
        return;
    }
    assert_all_ok(&outcomes, "valid rooted call");
    for o in &outcomes {
        let r = o.rank;
        let out = if case.in_place { &o.send } else { &o.recv };
        match case.kind {
            Rooted::Broadcast => assert_data("Broadcast", out.get(), |i| input(root, i)),
            Rooted::Reduce if r == root => {
                assert_data("Reduce", out.get(), |i| reduced(case.op, n, i))
            }
            Rooted::Scatter => {
                let block = if case.in_place {
                    &out.get()[r * c..(r + 1) * c]
                } else {
                    out.get()
                };
                assert_data("Scatter", block, |i| input(root, r * c + i));
            }
            Rooted::Gather if r == root => {
                let shift = if case.in_place { c } else { 0 };
                // Block s holds rank s's input: its first block, or in place its own.
                assert_data("Gather", out.get(), |i| {
                    let (s, j) = (i / c, i % c);
                    input(s, s * shift + j)
                });
            }
            _ => {}
        }
    }
}

#[test]
fn api_rooted() {
    fuzz("rooted", rooted_case(), |case| {
        with_dtype!(case.dtype, check_rooted(&case))
    });
}
