//! Property tests of the public eager and group API on arbitrary arguments.
//!
//! Every call, whatever its counts, displacements, roots, peers, data types, reduce ops
//! and rank count (1..=5, 1..=6 for the fixed-size blocked, point-to-point and barrier
//! properties), must return a typed `Err` or `Ok` with the right data; it must
//! never panic, hang, or write outside the buffers it was given. Every buffer handed to
//! oxccl sits between guard elements filled with a sentinel byte, checked after the call
//! on every rank. Each case runs all ranks (one thread per rank, or one `Group` driving
//! every rank) on a fresh communicator whose `exec_timeout` is 5 s, and must finish well
//! inside it: a bad argument on one rank is refused on every rank at once by the call
//! agreement, not by a timeout.
//!
//! `PROPTEST_CASES` sets the number of cases per property (64 when unset); each property
//! prints `fuzz api_<name>: N cases` (visible with `--nocapture`).

use oxccl::framework::op::P2pItem;
use oxccl::{
    bf16, f16, Communicator, Config, DataType, Element, Error, Group, OpKind, OpParam, ReduceOp,
    UserBuffers,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Guard elements before and after every buffer.
const GUARD: usize = 8;
/// The byte every guard element is filled with.
const SENTINEL: u8 = 0xA5;
/// The communicators' `exec_timeout`: the longest any rank may wait for another.
const EXEC_TIMEOUT: Duration = Duration::from_secs(5);
/// A case must finish within this: a refused call is refused at once on every rank.
const PROMPT: Duration = Duration::from_secs(4);
/// Cases per property when `PROPTEST_CASES` is unset.
const DEFAULT_CASES: u32 = 64;

// ---------------------------------------------------------------------------------------
// Element types and values
// ---------------------------------------------------------------------------------------

/// An element type the harness can fill with small exact integers.
trait Value: Element + Debug + PartialEq {
    /// `v` as this type (exact for every `v` the harness uses, at most 243).
    fn small(v: u32) -> Self;
    /// Another data type of the same size, to make a call that differs only in its dtype.
    const TWIN: DataType;
}

macro_rules! value {
    ($($t:ty => $twin:ident, |$v:ident| $make:expr;)*) => {
        $(impl Value for $t {
            fn small($v: u32) -> Self {
                $make
            }
            const TWIN: DataType = DataType::$twin;
        })*
    };
}

value! {
    u8 => I8, |v| v as u8;
    i32 => F32, |v| v as i32;
    f32 => I32, |v| v as f32;
    f64 => I64, |v| v as f64;
    f16 => Bf16, |v| f16::from_f32(v as f32);
    bf16 => F16, |v| bf16::from_f32(v as f32);
}

/// The element types the properties draw from.
#[derive(Clone, Copy, Debug)]
enum Dtype {
    U8,
    I32,
    F32,
    F64,
    F16,
    Bf16,
}

/// Call the generic `$check::<T>(args)` with the `T` of a [`Dtype`].
macro_rules! with_dtype {
    ($dtype:expr, $check:ident($($arg:expr),*)) => {
        match $dtype {
            Dtype::U8 => $check::<u8>($($arg),*),
            Dtype::I32 => $check::<i32>($($arg),*),
            Dtype::F32 => $check::<f32>($($arg),*),
            Dtype::F64 => $check::<f64>($($arg),*),
            Dtype::F16 => $check::<f16>($($arg),*),
            Dtype::Bf16 => $check::<bf16>($($arg),*),
        }
    };
}

/// Rank `rank`'s small input value at element `i`: 1..=3, so that sums, products, maxima
/// and minima over at most 6 ranks are exact in every dtype (over 6 consecutive ranks
/// each of 1, 2, 3 appears twice: the product is 36; over 5 at most 36 too).
fn input(rank: usize, i: usize) -> u32 {
    1 + ((rank + i) % 3) as u32
}

/// `op` over small integers, as the oracle computes it.
fn reduce_small(op: ReduceOp, values: impl Iterator<Item = u32>) -> u32 {
    match op {
        ReduceOp::Sum => values.sum(),
        ReduceOp::Prod => values.product(),
        ReduceOp::Max => values.max().unwrap_or(0),
        ReduceOp::Min => values.min().unwrap_or(0),
    }
}

/// `op` over element `i` of every rank's input.
fn reduced(op: ReduceOp, ranks: usize, i: usize) -> u32 {
    reduce_small(op, (0..ranks).map(|r| input(r, i)))
}

// ---------------------------------------------------------------------------------------
// Counts and displacements, small or wrapping
// ---------------------------------------------------------------------------------------

/// A count, displacement, offset or root: small, or one of the values where arithmetic
/// on it wraps (`usize::MAX`, `usize::MAX / 2`, `usize::MAX / elem_size`, ...).
#[derive(Clone, Copy, Debug)]
enum Num {
    Small(usize),
    Wild { kind: u8, delta: usize },
}

impl Num {
    /// The value for elements of `elem_size` bytes.
    fn get(self, elem_size: usize) -> usize {
        let Num::Wild { kind, delta } = self else {
            let Num::Small(v) = self else { unreachable!() };
            return v;
        };
        match kind % 8 {
            0 => usize::MAX,
            1 => usize::MAX - delta,
            2 => usize::MAX / 2,
            3 => usize::MAX / 2 + 1 + delta,
            4 => usize::MAX / elem_size,
            5 => (usize::MAX / elem_size).wrapping_add(1),
            6 => (usize::MAX / elem_size).saturating_sub(delta),
            _ => 1 << 40,
        }
    }
}

/// Any value where arithmetic wraps.
fn wild() -> impl Strategy<Value = Num> {
    (any::<u8>(), 0usize..4).prop_map(|(kind, delta)| Num::Wild { kind, delta })
}

/// Mostly a small value below `below`, sometimes a wrapping one.
fn num(below: usize) -> impl Strategy<Value = Num> {
    prop_oneof![6 => (0..below).prop_map(Num::Small), 1 => wild()]
}

fn dtype() -> impl Strategy<Value = Dtype> {
    prop_oneof![
        Just(Dtype::U8),
        Just(Dtype::I32),
        Just(Dtype::F32),
        Just(Dtype::F64),
        Just(Dtype::F16),
        Just(Dtype::Bf16),
    ]
}

fn reduce_op() -> impl Strategy<Value = ReduceOp> {
    prop::sample::select(ReduceOp::ALL.to_vec())
}

/// A rank count, 1..=5.
fn ranks() -> impl Strategy<Value = usize> {
    1usize..=5
}

// ---------------------------------------------------------------------------------------
// Guarded buffers
// ---------------------------------------------------------------------------------------

/// A buffer with [`GUARD`] sentinel elements on each side of the slice given to oxccl.
#[derive(Debug)]
struct Guarded<T> {
    all: Vec<T>,
    len: usize,
}

impl<T: Value> Guarded<T> {
    /// `len` elements, element `i` = `fill(i)`.
    fn from_fn(len: usize, fill: impl Fn(usize) -> T) -> Self {
        let mut sentinel = T::zeroed();
        bytemuck::bytes_of_mut(&mut sentinel).fill(SENTINEL);
        let mut all = vec![sentinel; len + 2 * GUARD];
        for (i, x) in all[GUARD..GUARD + len].iter_mut().enumerate() {
            *x = fill(i);
        }
        Guarded { all, len }
    }

    /// Rank `rank`'s input of `len` elements ([`input`]).
    fn input(rank: usize, len: usize) -> Self {
        Self::from_fn(len, |i| T::small(input(rank, i)))
    }

    /// `len` zeros.
    fn zeros(len: usize) -> Self {
        Self::from_fn(len, |_| T::small(0))
    }

    fn get(&self) -> &[T] {
        &self.all[GUARD..GUARD + self.len]
    }

    fn get_mut(&mut self) -> &mut [T] {
        &mut self.all[GUARD..GUARD + self.len]
    }

    /// Whether both guards still hold the sentinel.
    fn guards_intact(&self) -> bool {
        let bytes: &[u8] = bytemuck::cast_slice(&self.all);
        let guard = GUARD * std::mem::size_of::<T>();
        let (head, tail) = (&bytes[..guard], &bytes[bytes.len() - guard..]);
        head.iter().chain(tail).all(|&b| b == SENTINEL)
    }
}

/// The byte views of a send and a receive buffer, for a call made through `execute`.
fn raw<'a, T: Value>(send: &'a Guarded<T>, recv: &'a mut Guarded<T>) -> UserBuffers<'a> {
    UserBuffers::OutOfPlace {
        input: bytemuck::cast_slice(send.get()),
        output: bytemuck::cast_slice_mut(recv.get_mut()),
    }
}

/// What one rank's call returned, with the buffers it was given.
struct Outcome<T> {
    rank: usize,
    result: Result<(), Error>,
    send: Guarded<T>,
    recv: Guarded<T>,
}

// ---------------------------------------------------------------------------------------
// Running the ranks and checking what they did
// ---------------------------------------------------------------------------------------

fn config() -> Config {
    Config {
        exec_timeout: EXEC_TIMEOUT,
        ..Config::default()
    }
}

fn comms(n: usize) -> Vec<Communicator> {
    Communicator::init_all(n, config()).expect("communicator")
}

/// Run `call` on every rank of a fresh `n`-rank communicator, one thread per rank, and
/// check that every rank returned within [`PROMPT`] with its guards intact.
fn on_every_rank<T: Value>(
    n: usize,
    call: impl Fn(&Communicator) -> Outcome<T> + Sync,
) -> Vec<Outcome<T>> {
    let comms = comms(n);
    let start = Instant::now();
    let outcomes: Vec<Outcome<T>> = std::thread::scope(|s| {
        let threads: Vec<_> = comms.iter().map(|c| s.spawn(|| call(c))).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_prompt(start);
    assert_guards(&outcomes);
    outcomes
}

fn assert_prompt(start: Instant) {
    let took = start.elapsed();
    assert!(
        took < PROMPT,
        "the call took {took:?} (exec_timeout {EXEC_TIMEOUT:?})"
    );
}

fn assert_guards<T: Value>(outcomes: &[Outcome<T>]) {
    for o in outcomes {
        assert!(
            o.send.guards_intact() && o.recv.guards_intact(),
            "rank {}: a guard was overwritten (the call returned {:?})",
            o.rank,
            o.result
        );
    }
}

/// Whether every rank returned `Ok`; panics when some did and some did not (the call
/// agreement makes the ranks agree on whether a call runs).
fn all_ok<T>(outcomes: &[Outcome<T>]) -> bool {
    let ok = outcomes.iter().filter(|o| o.result.is_ok()).count();
    assert!(
        ok == 0 || ok == outcomes.len(),
        "ranks disagree: {:?}",
        results(outcomes)
    );
    ok == outcomes.len()
}

fn results<T>(outcomes: &[Outcome<T>]) -> Vec<&Result<(), Error>> {
    outcomes.iter().map(|o| &o.result).collect()
}

fn assert_all_err<T>(outcomes: &[Outcome<T>], why: &str) {
    assert!(
        outcomes.iter().all(|o| o.result.is_err()),
        "{why}: expected Err on every rank, got {:?}",
        results(outcomes)
    );
}

fn assert_all_ok<T>(outcomes: &[Outcome<T>], why: &str) {
    assert!(
        outcomes.iter().all(|o| o.result.is_ok()),
        "{why}: expected Ok on every rank, got {:?}",
        results(outcomes)
    );
}

/// Compare `got` with the small integers `want(i)`.
fn assert_data<T: Value>(what: &str, got: &[T], want: impl Fn(usize) -> u32) {
    for (i, x) in got.iter().enumerate() {
        assert_eq!(*x, T::small(want(i)), "{what}: element {i}");
    }
}

/// Run one property: `check` on `PROPTEST_CASES` (default 64) cases of `strategy`;
/// prints how many cases ran.
fn fuzz<S: Strategy>(name: &str, strategy: S, check: impl Fn(S::Value))
where
    S::Value: Debug,
{
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    });
    let ran = AtomicUsize::new(0);
    let result = runner.run(&strategy, |case| {
        ran.fetch_add(1, Ordering::Relaxed);
        check(case);
        Ok(())
    });
    println!("fuzz api_{name}: {} cases", ran.load(Ordering::Relaxed));
    if let Err(err) = result {
        panic!("api_{name}: {err}");
    }
}

/// A rank whose arguments differ from the others', when there are at least two ranks.
fn odd_rank_out(n: usize, pick: usize) -> Option<usize> {
    (n >= 2).then_some(pick % n)
}

// ---------------------------------------------------------------------------------------
// AllReduce
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// AllGatherV and ReduceScatterV
// ---------------------------------------------------------------------------------------

/// What is wrong with an AllGatherV or ReduceScatterV.
#[derive(Clone, Copy, Debug)]
enum BlocksFault {
    None,
    /// One rank passes another displacement for one block.
    DisplOnOneRank {
        block: usize,
        displ: Num,
    },
    /// One rank passes another count for one block.
    CountOnOneRank {
        block: usize,
        count: Num,
    },
    /// One rank's larger buffer is one element short.
    ShortOnOneRank,
}

#[derive(Clone, Debug)]
struct BlocksCase {
    gather: bool,
    ranks: usize,
    dtype: Dtype,
    op: ReduceOp,
    counts: Vec<Num>,
    /// Gap before each block (small), or a wild displacement.
    displs: Vec<Num>,
    fault: BlocksFault,
    odd_rank: usize,
}

fn blocks_case() -> impl Strategy<Value = BlocksCase> {
    let fault = prop_oneof![
        3 => Just(BlocksFault::None),
        1 => (0usize..5, num(20)).prop_map(|(block, displ)| BlocksFault::DisplOnOneRank { block, displ }),
        1 => (0usize..5, num(8)).prop_map(|(block, count)| BlocksFault::CountOnOneRank { block, count }),
        1 => Just(BlocksFault::ShortOnOneRank),
    ];
    (
        ranks(),
        any::<bool>(),
        dtype(),
        reduce_op(),
        fault,
        0usize..5,
    )
        .prop_flat_map(move |(ranks, gather, dtype, op, fault, odd_rank)| {
            // Occasionally one count or displacement too many or too few.
            let len = prop_oneof![8 => Just(ranks), 1 => Just(ranks + 1), 1 => Just(ranks - 1)];
            (len.clone(), len).prop_flat_map(move |(counts_len, displs_len)| {
                (
                    prop::collection::vec(num(6), counts_len),
                    prop::collection::vec(num(3), displs_len),
                )
                    .prop_map(move |(counts, displs)| BlocksCase {
                        gather,
                        ranks,
                        dtype,
                        op,
                        counts,
                        displs,
                        fault,
                        odd_rank,
                    })
            })
        })
}

/// Counts and displacements (packed with the small gaps; wild ones as they are) for
/// elements of `elem` bytes.
fn layout(counts: &[Num], gaps: &[Num], elem: usize) -> (Vec<usize>, Vec<usize>) {
    let counts: Vec<usize> = counts.iter().map(|c| c.get(elem)).collect();
    let mut at = 0usize;
    let displs = gaps
        .iter()
        .enumerate()
        .map(|(i, gap)| match gap {
            Num::Small(gap) => {
                let displ = at.saturating_add(*gap);
                at = displ.saturating_add(counts.get(i).copied().unwrap_or(0));
                displ
            }
            wild => wild.get(elem),
        })
        .collect();
    (counts, displs)
}

/// The elements the blocks span, if it is small enough to allocate.
fn extent(counts: &[usize], displs: &[usize]) -> Option<usize> {
    counts
        .iter()
        .zip(displs)
        .try_fold(0usize, |end, (c, d)| Some(end.max(d.checked_add(*c)?)))
        .filter(|&end| end <= 4096)
}

/// Whether the layout is one a correct call must accept: one block per rank, inside
/// `extent`, not overlapping.
fn valid_blocks(n: usize, counts: &[usize], displs: &[usize]) -> bool {
    if counts.len() != n || displs.len() != n || extent(counts, displs).is_none() {
        return false;
    }
    let mut spans: Vec<(usize, usize)> = counts
        .iter()
        .zip(displs)
        .filter(|(c, _)| **c > 0)
        .map(|(c, d)| (*d, d + c))
        .collect();
    spans.sort();
    spans.windows(2).all(|w| w[0].1 <= w[1].0)
}

fn check_blocks<T: Value>(case: &BlocksCase) {
    let n = case.ranks;
    let elem = std::mem::size_of::<T>();
    let (counts, displs) = layout(&case.counts, &case.displs, elem);
    let odd = odd_rank_out(n, case.odd_rank);
    let fault = if odd.is_some() {
        case.fault
    } else {
        BlocksFault::None
    };
    let big = extent(&counts, &displs).unwrap_or(16);
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let is_odd = Some(rank) == odd;
        let (mut counts, mut displs) = (counts.clone(), displs.clone());
        match fault {
            BlocksFault::DisplOnOneRank { block, displ } if is_odd && block < displs.len() => {
                displs[block] = displ.get(elem);
            }
            BlocksFault::CountOnOneRank { block, count } if is_odd && block < counts.len() => {
                counts[block] = count.get(elem);
            }
            _ => {}
        }
        let big = if is_odd && matches!(fault, BlocksFault::ShortOnOneRank) {
            big.saturating_sub(1)
        } else {
            big
        };
        let own = counts.get(rank).copied().unwrap_or(0).min(64);
        let (send, mut recv) = if case.gather {
            (Guarded::<T>::input(rank, own), Guarded::zeros(big))
        } else {
            (Guarded::input(rank, big), Guarded::zeros(own))
        };
        let result = if case.gather {
            comm.all_gather_v(send.get(), recv.get_mut(), &counts, &displs)
        } else {
            comm.reduce_scatter_v(send.get(), recv.get_mut(), &counts, &displs, case.op)
        };
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    let changed = match fault {
        BlocksFault::None => false,
        BlocksFault::DisplOnOneRank { block, .. } if counts.get(block).is_none_or(|&c| c == 0) => {
            // Where an empty block lies may or may not count as a difference.
            all_ok(&outcomes);
            return;
        }
        BlocksFault::DisplOnOneRank { block, displ } => {
            displs.get(block).is_some_and(|&d| d != displ.get(elem))
        }
        BlocksFault::CountOnOneRank { block, count } => {
            counts.get(block).is_some_and(|&c| c != count.get(elem))
        }
        BlocksFault::ShortOnOneRank => big > 0,
    };
    let what = if case.gather {
        "AllGatherV"
    } else {
        "ReduceScatterV"
    };
    if !all_ok(&outcomes) {
        assert!(
            changed || !valid_blocks(n, &counts, &displs),
            "a valid {what} was refused: counts {counts:?} displs {displs:?}: {:?}",
            results(&outcomes)
        );
        return;
    }
    assert!(
        !changed,
        "a mismatched or short {what} ran: {:?}",
        case.fault
    );
    assert!(
        counts.len() == n && displs.len() == n && extent(&counts, &displs).is_some(),
        "{what} ran with blocks outside the buffer: counts {counts:?} displs {displs:?}"
    );
    for o in &outcomes {
        if case.gather {
            for s in 0..n {
                let block = &o.recv.get()[displs[s]..displs[s] + counts[s]];
                if valid_blocks(n, &counts, &displs) {
                    assert_data(&format!("AllGatherV block {s}"), block, |i| input(s, i));
                }
            }
        } else {
            let at = displs[o.rank];
            assert_data("ReduceScatterV", o.recv.get(), |i| {
                reduced(case.op, n, at + i)
            });
        }
    }
}

#[test]
fn api_vector_blocks() {
    fuzz("vector_blocks", blocks_case(), |case| {
        with_dtype!(case.dtype, check_blocks(&case))
    });
}

// ---------------------------------------------------------------------------------------
// AlltoAllV
// ---------------------------------------------------------------------------------------

/// What is wrong with an AlltoAllV.
#[derive(Clone, Copy, Debug)]
enum AlltoAllVFault {
    None,
    /// One rank sends another count to one peer (a small one or a wild one).
    SendCount {
        peer: usize,
        count: Num,
    },
    /// One rank sends from a wild displacement.
    SendDispl {
        peer: usize,
        displ: Num,
    },
    /// One rank receives into a wild displacement.
    RecvDispl {
        peer: usize,
        displ: Num,
    },
}

#[derive(Clone, Debug)]
struct AlltoAllVCase {
    ranks: usize,
    dtype: Dtype,
    /// `counts[s][d]`: elements rank `s` sends to rank `d` (the first `ranks` of each).
    counts: Vec<Vec<usize>>,
    fault: AlltoAllVFault,
    odd_rank: usize,
}

fn all_to_all_v_case() -> impl Strategy<Value = AlltoAllVCase> {
    let fault = prop_oneof![
        2 => Just(AlltoAllVFault::None),
        1 => (0usize..5, num(5)).prop_map(|(peer, count)| AlltoAllVFault::SendCount { peer, count }),
        1 => (0usize..5, wild()).prop_map(|(peer, displ)| AlltoAllVFault::SendDispl { peer, displ }),
        1 => (0usize..5, wild()).prop_map(|(peer, displ)| AlltoAllVFault::RecvDispl { peer, displ }),
    ];
    let counts = prop::collection::vec(prop::collection::vec(0usize..5, 5), 5);
    (ranks(), dtype(), counts, fault, 0usize..5).prop_map(
        |(ranks, dtype, counts, fault, odd_rank)| AlltoAllVCase {
            ranks,
            dtype,
            counts,
            fault,
            odd_rank,
        },
    )
}

/// Packed displacements of `counts`.
fn packed(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            *at += c;
            Some(*at - c)
        })
        .collect()
}

/// Whether block `peer` of `counts` at displacement `displ` ends past the packed buffer.
fn out_of(counts: &[usize], peer: usize, displ: usize) -> bool {
    let len: usize = counts.iter().sum();
    counts[peer] > 0 && displ.checked_add(counts[peer]).is_none_or(|end| end > len)
}

fn check_all_to_all_v<T: Value>(case: &AlltoAllVCase) {
    let n = case.ranks;
    let elem = std::mem::size_of::<T>();
    let sends = |s: usize| case.counts[s][..n].to_vec();
    let recvs = |d: usize| (0..n).map(|s| case.counts[s][d]).collect::<Vec<_>>();
    let odd = odd_rank_out(n, case.odd_rank);
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let (mut send_counts, mut recv_counts) = (sends(rank), recvs(rank));
        let (mut send_displs, mut recv_displs) = (packed(&send_counts), packed(&recv_counts));
        let send = Guarded::<T>::input(rank, send_counts.iter().sum());
        let mut recv = Guarded::<T>::zeros(recv_counts.iter().sum());
        if Some(rank) == odd {
            match case.fault {
                AlltoAllVFault::None => {}
                AlltoAllVFault::SendCount { peer, count } => {
                    send_counts[peer % n] = count.get(elem)
                }
                AlltoAllVFault::SendDispl { peer, displ } => {
                    send_displs[peer % n] = displ.get(elem)
                }
                AlltoAllVFault::RecvDispl { peer, displ } => {
                    recv_displs[peer % n] = displ.get(elem)
                }
            }
        }
        let result = comm.all_to_all_v(
            send.get(),
            &send_counts,
            &send_displs,
            recv.get_mut(),
            &recv_counts,
            &recv_displs,
        );
        recv_counts.clear();
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    let changed = match (odd, case.fault) {
        (None, _) | (_, AlltoAllVFault::None) => false,
        (Some(r), AlltoAllVFault::SendCount { peer, count }) => {
            sends(r)[peer % n] != count.get(elem)
        }
        // A wild displacement of an empty block may be ignored.
        // Another displacement inside the buffer is this rank's own business: skip the
        // data check; one past the buffer must be refused.
        (Some(r), AlltoAllVFault::SendDispl { peer, displ }) => {
            let (counts, d) = (sends(r), displ.get(elem));
            if counts[peer % n] > 0 && d == packed(&counts)[peer % n] {
                false
            } else if out_of(&counts, peer % n, d) {
                true
            } else {
                all_ok(&outcomes);
                return;
            }
        }
        (Some(r), AlltoAllVFault::RecvDispl { peer, displ }) => {
            let (counts, d) = (recvs(r), displ.get(elem));
            if counts[peer % n] > 0 && d == packed(&counts)[peer % n] {
                false
            } else if out_of(&counts, peer % n, d) {
                true
            } else {
                all_ok(&outcomes);
                return;
            }
        }
    };
    if changed {
        assert_all_err(&outcomes, "AlltoAllV with one bad rank");
        return;
    }
    if matches!(case.fault, AlltoAllVFault::None) || odd.is_none() {
        assert_all_ok(&outcomes, "valid AlltoAllV");
    }
    if !all_ok(&outcomes) {
        return;
    }
    for o in &outcomes {
        let d = o.rank;
        let (counts, displs) = (recvs(d), packed(&recvs(d)));
        for s in 0..n {
            let at = packed(&sends(s))[d];
            let block = &o.recv.get()[displs[s]..displs[s] + counts[s]];
            assert_data(&format!("AlltoAllV {s}->{d}"), block, |i| input(s, at + i));
        }
    }
}

#[test]
fn api_all_to_all_v() {
    fuzz("all_to_all_v", all_to_all_v_case(), |case| {
        with_dtype!(case.dtype, check_all_to_all_v(&case))
    });
}

// ---------------------------------------------------------------------------------------
// Broadcast, Reduce, Scatter, Gather
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Group calls: one thread drives every rank
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// AllGather, ReduceScatter, AlltoAll: fixed-size blocks
// ---------------------------------------------------------------------------------------

/// A value that tells ranks and positions apart (1..=241, exact in every dtype), for the
/// operators that move data without reducing it.
fn tag(rank: usize, i: usize) -> u32 {
    1 + ((rank * 53 + i * 7) % 241) as u32
}

impl<T: Value> Guarded<T> {
    /// Rank `rank`'s tagged data of `len` elements ([`tag`]).
    fn tagged(rank: usize, len: usize) -> Self {
        Self::from_fn(len, |i| T::small(tag(rank, i)))
    }
}

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

// ---------------------------------------------------------------------------------------
// Point-to-point: send_recv, send and recv
// ---------------------------------------------------------------------------------------

/// What is wrong with a point-to-point call.
#[derive(Clone, Copy, Debug)]
enum P2pFault {
    None,
    /// One rank names a peer that is not a rank (`n + delta`, `usize::MAX`, ...) in one
    /// of its sends (`recv` false) or receives.
    Peer {
        recv: bool,
        item: usize,
        which: u8,
    },
    /// One rank's non-empty send or receive starts so that it wraps or ends past the
    /// buffer.
    Offset {
        recv: bool,
        item: usize,
        which: u8,
    },
    /// One rank's non-empty receive counts one element more or less than its send.
    RecvCount {
        item: usize,
        more: bool,
    },
    /// One rank's non-empty receive is moved onto another of its non-empty receives.
    Overlap {
        item: usize,
        onto: usize,
    },
}

#[derive(Clone, Debug)]
struct P2pCase {
    ranks: usize,
    dtype: Dtype,
    /// `counts[a][b]`: the counts of rank `a`'s sends to rank `b`, in order (the first
    /// `ranks` of each).
    counts: Vec<Vec<Vec<usize>>>,
    /// Drives the order in which each rank lists its items, and the gaps between its
    /// receives.
    shuffle: u64,
    /// `(a, b, count)`: one `send` of `count` elements from rank `a` to a rank `b != a`
    /// (both taken modulo the rank count) and its `recv`, instead of one grouped
    /// `send_recv` per rank (with at least two ranks).
    single: Option<(usize, usize, usize)>,
    fault: P2pFault,
    odd_rank: usize,
}

fn p2p_case() -> impl Strategy<Value = P2pCase> {
    let fault = prop_oneof![
        3 => Just(P2pFault::None),
        1 => (any::<bool>(), 0usize..8, any::<u8>())
            .prop_map(|(recv, item, which)| P2pFault::Peer { recv, item, which }),
        1 => (any::<bool>(), 0usize..8, any::<u8>())
            .prop_map(|(recv, item, which)| P2pFault::Offset { recv, item, which }),
        1 => (0usize..8, any::<bool>()).prop_map(|(item, more)| P2pFault::RecvCount { item, more }),
        1 => (0usize..8, 0usize..8).prop_map(|(item, onto)| P2pFault::Overlap { item, onto }),
    ];
    let list = prop_oneof![
        2 => Just(vec![]),
        3 => prop::collection::vec(0usize..12, 1..=3),
    ];
    let counts = prop::collection::vec(prop::collection::vec(list, 6), 6);
    let single = prop::option::weighted(0.25, (0usize..6, 0usize..6, 0usize..300));
    (
        1usize..=6,
        dtype(),
        counts,
        any::<u64>(),
        single,
        fault,
        0usize..6,
    )
        .prop_map(
            |(ranks, dtype, counts, shuffle, single, fault, odd_rank)| P2pCase {
                ranks,
                dtype,
                counts,
                shuffle,
                single,
                fault,
                odd_rank,
            },
        )
}

/// A small deterministic generator for the order of items.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// One rank's items: `(peer, count)` per item, in listing order (the items for each peer
/// in their own order, the peers interleaved by `rng`).
fn interleave(per_peer: Vec<Vec<usize>>, rng: &mut Lcg) -> Vec<(usize, usize)> {
    let mut queues: Vec<(usize, std::collections::VecDeque<usize>)> = per_peer
        .into_iter()
        .enumerate()
        .map(|(p, counts)| (p, std::collections::VecDeque::from(counts)))
        .filter(|(_, q)| !q.is_empty())
        .collect();
    let mut items = Vec::new();
    while !queues.is_empty() {
        let k = rng.below(queues.len());
        let (peer, queue) = &mut queues[k];
        items.push((*peer, queue.pop_front().unwrap()));
        if queue.is_empty() {
            queues.swap_remove(k);
        }
    }
    items
}

/// Place `items` one after another, each after a gap of 0..=2 elements drawn from `rng`;
/// the items and the length of the buffer they fill.
fn place(items: &[(usize, usize)], rng: &mut Lcg) -> (Vec<P2pItem>, usize) {
    let mut at = 0;
    let placed = items
        .iter()
        .map(|&(peer, count)| {
            let offset = at + rng.below(3);
            at = offset + count;
            P2pItem {
                peer,
                offset,
                count,
            }
        })
        .collect();
    (placed, at + rng.below(3))
}

/// A peer that is not a rank of `n`.
fn bad_peer(n: usize, which: u8) -> usize {
    match which % 4 {
        0 => n,
        1 => n + 1 + which as usize / 4,
        2 => usize::MAX,
        _ => usize::MAX / 2,
    }
}

/// An offset for a non-empty item of `count` elements that wraps or ends past a buffer of
/// `len` elements of `elem` bytes.
fn bad_offset(len: usize, count: usize, elem: usize, which: u8) -> usize {
    match which % 5 {
        0 => usize::MAX,
        1 => usize::MAX - (count - 1) / 2,
        2 => len - count + 1,
        3 => len,
        _ => usize::MAX / elem,
    }
}

/// One rank's layout: its sends, its receives, and its buffer lengths.
struct P2pLayout {
    sends: Vec<P2pItem>,
    recvs: Vec<P2pItem>,
    send_len: usize,
    recv_len: usize,
}

fn p2p_layouts(case: &P2pCase) -> Vec<P2pLayout> {
    let n = case.ranks;
    (0..n)
        .map(|r| {
            let mut rng = Lcg(case.shuffle ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let to: Vec<Vec<usize>> = (0..n).map(|b| case.counts[r][b].clone()).collect();
            let from: Vec<Vec<usize>> = (0..n).map(|a| case.counts[a][r].clone()).collect();
            let (sends, send_len) = place(&interleave(to, &mut rng), &mut rng);
            let (recvs, recv_len) = place(&interleave(from, &mut rng), &mut rng);
            P2pLayout {
                sends,
                recvs,
                send_len,
                recv_len,
            }
        })
        .collect()
}

/// Apply `fault` to one rank's layout; whether it changed anything.
fn p2p_fault(layout: &mut P2pLayout, fault: P2pFault, n: usize, elem: usize) -> bool {
    let non_empty = |items: &[P2pItem]| -> Vec<usize> {
        (0..items.len()).filter(|&i| items[i].count > 0).collect()
    };
    match fault {
        P2pFault::None => false,
        P2pFault::Peer { recv, item, which } => {
            let items = if recv {
                &mut layout.recvs
            } else {
                &mut layout.sends
            };
            let peer = bad_peer(n, which);
            match items.len() {
                0 => items.push(P2pItem {
                    peer,
                    offset: 0,
                    count: item % 2,
                }),
                len => items[item % len].peer = peer,
            }
            true
        }
        P2pFault::Offset { recv, item, which } => {
            let (items, len) = if recv {
                (&mut layout.recvs, layout.recv_len)
            } else {
                (&mut layout.sends, layout.send_len)
            };
            let picks = non_empty(items);
            let Some(&k) = picks.get(item % picks.len().max(1)) else {
                return false;
            };
            items[k].offset = bad_offset(len, items[k].count, elem, which);
            true
        }
        P2pFault::RecvCount { item, more } => {
            let picks = non_empty(&layout.recvs);
            let Some(&k) = picks.get(item % picks.len().max(1)) else {
                return false;
            };
            let it = &mut layout.recvs[k];
            if more {
                it.count += 1;
                layout.recv_len = layout.recv_len.max(it.offset + it.count);
            } else {
                it.count -= 1;
            }
            true
        }
        P2pFault::Overlap { item, onto } => {
            let picks = non_empty(&layout.recvs);
            if picks.len() < 2 {
                return false;
            }
            let k = picks[item % picks.len()];
            let others: Vec<usize> = picks.into_iter().filter(|&j| j != k).collect();
            let j = others[onto % others.len()];
            layout.recvs[k].offset = layout.recvs[j].offset;
            layout.recv_len = layout
                .recv_len
                .max(layout.recvs[k].offset + layout.recvs[k].count);
            true
        }
    }
}

fn check_p2p<T: Value>(case: &P2pCase) {
    match case.single {
        Some(single) if case.ranks >= 2 => check_single_p2p::<T>(case, single),
        _ => check_grouped_p2p::<T>(case),
    }
}

fn check_grouped_p2p<T: Value>(case: &P2pCase) {
    let n = case.ranks;
    let elem = std::mem::size_of::<T>();
    let mut layouts = p2p_layouts(case);
    let odd = odd_rank_out(n, case.odd_rank).or((n == 1).then_some(0));
    let changed = odd.is_some_and(|r| p2p_fault(&mut layouts[r], case.fault, n, elem));
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let l = &layouts[rank];
        let send = Guarded::<T>::tagged(rank, l.send_len);
        let mut recv = Guarded::<T>::zeros(l.recv_len);
        let result = comm.send_recv(send.get(), &l.sends, recv.get_mut(), &l.recvs);
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    if changed {
        assert_all_err(&outcomes, "send_recv with a bad or mismatched item");
        return;
    }
    assert_all_ok(&outcomes, "valid send_recv");
    // Receive k of b from a holds send k of a to b; the gaps are untouched.
    let layouts = p2p_layouts(case);
    for o in &outcomes {
        let b = o.rank;
        let mut want = vec![0u32; layouts[b].recv_len];
        let mut taken = vec![0usize; n];
        for item in &layouts[b].recvs {
            let a = item.peer;
            let send = layouts[a]
                .sends
                .iter()
                .filter(|s| s.peer == b)
                .nth(taken[a])
                .expect("a matching send");
            taken[a] += 1;
            for j in 0..item.count {
                want[item.offset + j] = tag(a, send.offset + j);
            }
        }
        assert_data(&format!("send_recv into rank {b}"), o.recv.get(), |i| {
            want[i]
        });
    }
}

/// One `send` from rank `a` to rank `b != a` of `count` elements; the other ranks call
/// `send_recv` with no items (every rank makes every call).
fn check_single_p2p<T: Value>(case: &P2pCase, (a, b, count): (usize, usize, usize)) {
    let n = case.ranks;
    let a = a % n;
    let b = (a + 1 + b % (n - 1)) % n;
    let odd = odd_rank_out(n, case.odd_rank).unwrap();
    // Faults: a bad peer on `odd`'s send or recv, or a receive of another length.
    let (mut send_peer, mut recv_peer, mut recv_len) = (b, a, count);
    let changed = match case.fault {
        P2pFault::Peer {
            recv: false, which, ..
        } if odd == a => {
            send_peer = bad_peer(n, which);
            true
        }
        P2pFault::Peer {
            recv: true, which, ..
        } if odd == b => {
            recv_peer = bad_peer(n, which);
            true
        }
        P2pFault::RecvCount { more, .. } if more || count > 0 => {
            recv_len = if more { count + 1 } else { count - 1 };
            true
        }
        _ => false,
    };
    let outcomes = on_every_rank(n, |comm| {
        let rank = comm.rank();
        let send = Guarded::<T>::tagged(rank, if rank == a { count } else { 0 });
        let mut recv = Guarded::<T>::zeros(if rank == b { recv_len } else { 0 });
        let result = if rank == a {
            comm.send(send.get(), send_peer)
        } else if rank == b {
            comm.recv(recv.get_mut(), recv_peer)
        } else {
            comm.send_recv(send.get(), &[], recv.get_mut(), &[])
        };
        Outcome {
            rank,
            result,
            send,
            recv,
        }
    });
    if changed {
        assert_all_err(&outcomes, "send/recv with a bad peer or another count");
        return;
    }
    assert_all_ok(&outcomes, "valid send/recv");
    assert_data("recv", outcomes[b].recv.get(), |i| tag(a, i));
}

#[test]
fn api_send_recv() {
    fuzz("send_recv", p2p_case(), |case| {
        with_dtype!(case.dtype, check_p2p(&case))
    });
}

// ---------------------------------------------------------------------------------------
// Barrier against AllReduce, several calls on the same communicators
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum BarrierStep {
    /// Every rank calls `barrier()`.
    AllBarrier,
    /// Every rank calls `all_reduce` on one element.
    AllReduce,
    /// One rank calls `all_reduce` on `count` (0 or 1) elements, the others `barrier()`.
    OneReduces { odd: usize, count: usize },
    /// One rank calls `barrier()`, the others `all_reduce` on one element.
    OneBarrier { odd: usize },
}

#[derive(Clone, Debug)]
struct BarrierCase {
    ranks: usize,
    steps: Vec<BarrierStep>,
}

fn barrier_case() -> impl Strategy<Value = BarrierCase> {
    let step = prop_oneof![
        2 => Just(BarrierStep::AllBarrier),
        1 => Just(BarrierStep::AllReduce),
        2 => (0usize..6, 0usize..2).prop_map(|(odd, count)| BarrierStep::OneReduces { odd, count }),
        1 => (0usize..6).prop_map(|odd| BarrierStep::OneBarrier { odd }),
    ];
    (1usize..=6, prop::collection::vec(step, 1..=5))
        .prop_map(|(ranks, steps)| BarrierCase { ranks, steps })
}

fn check_barrier_mix(case: &BarrierCase) {
    let n = case.ranks;
    let comms = comms(n);
    let start = Instant::now();
    // Per rank, per step: the outcome (an AllReduce's buffers, or empty ones).
    let per_rank: Vec<Vec<Outcome<f32>>> = std::thread::scope(|s| {
        let threads: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let rank = comm.rank();
                    let steps = case.steps.iter().map(|step| {
                        let reduce = match *step {
                            BarrierStep::AllBarrier => None,
                            BarrierStep::AllReduce => Some(1),
                            BarrierStep::OneReduces { odd, count } => {
                                (n == 1 || rank == odd % n).then_some(count)
                            }
                            BarrierStep::OneBarrier { odd } => {
                                (n > 1 && rank != odd % n).then_some(1)
                            }
                        };
                        let send = Guarded::<f32>::input(rank, reduce.unwrap_or(0));
                        let mut recv = Guarded::zeros(reduce.unwrap_or(0));
                        let result = match reduce {
                            Some(_) => comm.all_reduce(send.get(), recv.get_mut(), ReduceOp::Sum),
                            None => comm.barrier(),
                        };
                        Outcome {
                            rank,
                            result,
                            send,
                            recv,
                        }
                    });
                    steps.collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_prompt(start);
    for (k, step) in case.steps.iter().enumerate() {
        let outcomes: Vec<&Outcome<f32>> = per_rank.iter().map(|steps| &steps[k]).collect();
        for o in &outcomes {
            assert!(
                o.send.guards_intact() && o.recv.guards_intact(),
                "step {k}: rank {}: a guard was overwritten ({:?})",
                o.rank,
                o.result
            );
        }
        let mismatch = n > 1
            && matches!(
                step,
                BarrierStep::OneReduces { .. } | BarrierStep::OneBarrier { .. }
            );
        let results: Vec<&Result<(), Error>> = outcomes.iter().map(|o| &o.result).collect();
        if mismatch {
            assert!(
                results.iter().all(|r| r.is_err()),
                "step {k} {step:?}: a barrier against an AllReduce: expected Err on every rank, got {results:?}"
            );
            // A mismatch moves no byte.
            for o in &outcomes {
                assert_data("AllReduce refused", o.recv.get(), |_| 0);
            }
            continue;
        }
        assert!(
            results.iter().all(|r| r.is_ok()),
            "step {k} {step:?}: expected Ok on every rank (after {:?}), got {results:?}",
            &case.steps[..k]
        );
        for o in &outcomes {
            assert_data("AllReduce", o.recv.get(), |i| reduced(ReduceOp::Sum, n, i));
        }
    }
}

#[test]
fn api_barrier_mix() {
    fuzz("barrier_mix", barrier_case(), |case| {
        check_barrier_mix(&case)
    });
}

// ---------------------------------------------------------------------------------------
// Regressions for the defects the probe found
// ---------------------------------------------------------------------------------------

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
