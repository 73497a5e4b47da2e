//! AllGather, ReduceScatter, AlltoAll: fixed-size blocks.

use super::*;

/// A config whose CCL buffer is small (4 KiB: a staged call loops many times) and which
/// stages through it instead of reading the user buffers directly when `!zero_copy`.
fn config_with(small_buffer: bool, zero_copy: bool) -> Config {
    Config {
        ccl_buffer_bytes: if small_buffer { 4096 } else { 32 << 20 },
        zero_copy,
        ..config()
    }
}

/// [`on_every_rank`] on a communicator made with `config`.
fn on_every_rank_with<T: Value>(
    n: usize,
    config: Config,
    call: impl Fn(&Communicator) -> Outcome<T> + Sync,
) -> Vec<Outcome<T>> {
    let comms = Communicator::init_all(n, config).expect("communicator");
    let start = Instant::now();
    let outcomes: Vec<Outcome<T>> = std::thread::scope(|s| {
        let threads: Vec<_> = comms.iter().map(|c| s.spawn(|| call(c))).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_prompt(start);
    assert_guards(&outcomes);
    outcomes
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum BlockedOp {
    AllGather,
    ReduceScatter,
    AlltoAll,
}

/// What is wrong with a fixed-size blocked call.
#[derive(Clone, Copy, Debug)]
enum BlockedFault {
    None,
    /// One rank's receive buffer (in place: its buffer) is one element short.
    ShortOnOneRank,
    /// One rank's receive buffer (in place: its buffer) is one element longer.
    LongOnOneRank,
    /// One rank passes buffers of another block count, consistent in themselves.
    BlockOnOneRank(usize),
    /// Every rank's larger buffer (in place: its buffer) is `n * count + extra`
    /// elements, `extra` in `1..n`: not a whole number of blocks.
    NotDivisibleEverywhere(usize),
}

#[derive(Clone, Debug)]
struct BlockedCase {
    kind: BlockedOp,
    /// Ignored for AlltoAll, which has no in-place form.
    in_place: bool,
    ranks: usize,
    dtype: Dtype,
    op: ReduceOp,
    /// Elements per block.
    count: usize,
    small_buffer: bool,
    zero_copy: bool,
    fault: BlockedFault,
    odd_rank: usize,
}

/// A block count: 0, 1, small (odd or even), or more than a 4 KiB CCL buffer holds.
fn block_count() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        1 => Just(1usize),
        4 => 2usize..40,
        1 => 500usize..1500,
        1 => 4000usize..4500,
    ]
}

fn blocked_case() -> impl Strategy<Value = BlockedCase> {
    let kind = prop::sample::select(vec![
        BlockedOp::AllGather,
        BlockedOp::ReduceScatter,
        BlockedOp::AlltoAll,
    ]);
    let fault = prop_oneof![
        4 => Just(BlockedFault::None),
        1 => Just(BlockedFault::ShortOnOneRank),
        1 => Just(BlockedFault::LongOnOneRank),
        1 => block_count().prop_map(BlockedFault::BlockOnOneRank),
        1 => (1usize..6).prop_map(BlockedFault::NotDivisibleEverywhere),
    ];
    (
        (kind, any::<bool>(), 1usize..=6, dtype(), reduce_op()),
        (
            block_count(),
            prop::bool::weighted(0.4),
            prop::bool::weighted(0.7),
            fault,
            0usize..6,
        ),
    )
        .prop_map(
            |(
                (kind, in_place, ranks, dtype, op),
                (count, small_buffer, zero_copy, fault, odd_rank),
            )| {
                BlockedCase {
                    kind,
                    in_place: in_place && kind != BlockedOp::AlltoAll,
                    ranks,
                    dtype,
                    op,
                    count,
                    small_buffer,
                    zero_copy,
                    fault,
                    odd_rank,
                }
            },
        )
}

/// One rank's blocked call; in place, `send` is the buffer.
fn blocked_call<T: Value>(
    comm: &Communicator,
    case: &BlockedCase,
    send: &mut Guarded<T>,
    recv: &mut Guarded<T>,
) -> Result<(), Error> {
    let (buf, recv) = (send.get_mut(), recv.get_mut());
    match (case.kind, case.in_place) {
        (BlockedOp::AllGather, true) => comm.all_gather_in_place(buf),
        (BlockedOp::AllGather, false) => comm.all_gather(buf, recv),
        (BlockedOp::ReduceScatter, true) => comm.reduce_scatter_in_place(buf, case.op),
        (BlockedOp::ReduceScatter, false) => comm.reduce_scatter(buf, recv, case.op),
        (BlockedOp::AlltoAll, _) => comm.all_to_all(buf, recv),
    }
}

/// The input and output lengths of a blocked call with blocks of `c` elements on `n`
/// ranks (in place: the buffer, and 0).
fn blocked_lens(kind: BlockedOp, in_place: bool, n: usize, c: usize) -> (usize, usize) {
    match (kind, in_place) {
        (_, true) => (n * c, 0),
        (BlockedOp::AllGather, false) => (c, n * c),
        (BlockedOp::ReduceScatter, false) => (n * c, c),
        (BlockedOp::AlltoAll, false) => (n * c, n * c),
    }
}

fn check_blocked<T: Value>(case: &BlockedCase) {
    let n = case.ranks;
    let c = case.count;
    let odd = odd_rank_out(n, case.odd_rank);
    // Whether the fault changes anything: a fault of one rank needs two ranks, an empty
    // buffer cannot be one element short, and every length is a multiple of one rank.
    let fault = match case.fault {
        BlockedFault::ShortOnOneRank | BlockedFault::LongOnOneRank if odd.is_none() => {
            BlockedFault::None
        }
        BlockedFault::ShortOnOneRank if c == 0 => BlockedFault::None,
        BlockedFault::BlockOnOneRank(other) if odd.is_none() || other == c => BlockedFault::None,
        BlockedFault::NotDivisibleEverywhere(_) if n == 1 => BlockedFault::None,
        BlockedFault::NotDivisibleEverywhere(extra) => {
            BlockedFault::NotDivisibleEverywhere(1 + (extra - 1) % (n - 1))
        }
        fault => fault,
    };
    let config = config_with(case.small_buffer, case.zero_copy);
    let outcomes = on_every_rank_with(n, config, |comm| {
        let rank = comm.rank();
        let is_odd = Some(rank) == odd;
        let block = match fault {
            BlockedFault::BlockOnOneRank(other) if is_odd => other,
            _ => c,
        };
        let (mut send_len, mut recv_len) = blocked_lens(case.kind, case.in_place, n, block);
        // The buffer the fault resizes: in place the only one, else the receive buffer,
        // or for NotDivisible the larger one (both for AlltoAll).
        let (resize_send, resize_recv) = match (case.kind, case.in_place, fault) {
            (_, true, _) => (true, false),
            (BlockedOp::ReduceScatter, false, BlockedFault::NotDivisibleEverywhere(_)) => {
                (true, false)
            }
            (BlockedOp::AlltoAll, false, BlockedFault::NotDivisibleEverywhere(_)) => (true, true),
            _ => (false, true),
        };
        let resize = |len: &mut usize| match fault {
            BlockedFault::ShortOnOneRank if is_odd => *len -= 1,
            BlockedFault::LongOnOneRank if is_odd => *len += 1,
            BlockedFault::NotDivisibleEverywhere(extra) => *len += extra,
            _ => {}
        };
        if resize_send {
            resize(&mut send_len);
        }
        if resize_recv {
            resize(&mut recv_len);
        }
        let mut send = match case.kind {
            BlockedOp::ReduceScatter => Guarded::<T>::input(rank, send_len),
            _ => Guarded::<T>::tagged(rank, send_len),
        };
        let mut recv = Guarded::<T>::zeros(recv_len);
        let result = blocked_call(comm, case, &mut send, &mut recv);
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    if !matches!(fault, BlockedFault::None) {
        assert_all_err(&outcomes, "blocked call with a bad or mismatched buffer");
        return;
    }
    assert_all_ok(&outcomes, "valid blocked call");
    for o in &outcomes {
        let r = o.rank;
        let out = if case.in_place { &o.send } else { &o.recv };
        match case.kind {
            BlockedOp::AllGather => {
                // Block s holds rank s's input: its send, or in place its own block.
                let shift = if case.in_place { c } else { 0 };
                assert_data("AllGather", out.get(), |i| {
                    let (s, j) = (i / c, i % c);
                    tag(s, s * shift + j)
                });
            }
            BlockedOp::ReduceScatter if case.in_place => {
                // Block r is reduced; the others are left as they were.
                assert_data("ReduceScatter in place", out.get(), |i| {
                    if i / c == r {
                        reduced(case.op, n, i)
                    } else {
                        input(r, i)
                    }
                });
            }
            BlockedOp::ReduceScatter => {
                assert_data("ReduceScatter", out.get(), |i| {
                    reduced(case.op, n, r * c + i)
                });
            }
            BlockedOp::AlltoAll => {
                assert_data("AlltoAll", out.get(), |i| {
                    let (s, j) = (i / c, i % c);
                    tag(s, r * c + j)
                });
            }
        }
    }
}

#[test]
fn api_blocked() {
    fuzz("blocked", blocked_case(), |case| {
        with_dtype!(case.dtype, check_blocked(&case))
    });
}
