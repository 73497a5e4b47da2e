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
//!
//! This file holds what every property shares (element types, small or wrapping numbers,
//! guarded buffers, running the ranks); each operator family has its module.

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

mod all_reduce;
mod all_to_all_v;
mod barrier_mix;
mod blocked;
mod group;
mod regressions;
mod rooted;
mod send_recv;
mod vector_blocks;
