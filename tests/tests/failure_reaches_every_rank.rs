//! One rank's failure reaches every rank of the operation within a second, whatever
//! failed: a bounds error, a scratch error, a broken-link refusal, a lost wakeup. The
//! other ranks of each executor below wait for a signal the failing rank would have sent;
//! without the release they would wait out `exec_timeout` (set far above the bound
//! measured here). Each case runs with the call agreement on and off, since the release
//! must not depend on it.

use oxccl::framework::error::ExpectedPost;
use oxccl::platform::{Buf, Slice};
use oxccl::{
    Communicator, Config, Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers,
    PlanCtx, ReduceOp, ResourceRequest, Topology,
};
use std::time::{Duration, Instant};

/// How rank 1 fails; ranks 0, 2 and 3 wait for rank 1's data signal (for a lost wakeup,
/// rank 0 waits for rank 3's, which waits for rank 1's).
#[derive(Copy, Clone)]
enum Fault {
    /// Copies from past the end of its Output (refused when the device binds buffers).
    Bounds,
    /// Writes Scratch it never requested (refused when the device compiles).
    Scratch,
    /// Uses the link to rank 2, which the topology marks broken (refused at planning, on
    /// ranks 1 and 2).
    BrokenLink,
    /// Posts rank 0's data signal twice, which rank 0 never waits for (a lost wakeup the
    /// device sees at the second post), then would signal ranks 2 and 3.
    LostWakeup,
    /// Posts rank 0's data signal once, which rank 0 never waits for, then signals ranks 2
    /// and 3: rank 0 ends its call with the notify left set.
    LeftSet,
}

struct FailsOnRankOne(Fault);

impl Executor for FailsOnRankOne {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = match (self.0, ctx.rank) {
            (_, 1) => vec![0, 2, 3],
            (Fault::LostWakeup | Fault::LeftSet, 0) => vec![1, 3],
            (Fault::LostWakeup | Fault::LeftSet, 3) => vec![0, 1],
            _ => vec![1],
        };
        Ok(ResourceRequest::with_peers(Peers::List(peers)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if let (Fault::LostWakeup | Fault::LeftSet, 0 | 3) = (self.0, ctx.rank) {
            return chain_behind_rank_one(ctx);
        }
        if ctx.rank != 1 {
            ctx.link(1, 0)?.rx_data_signal(ctx.main());
            return Ok(());
        }
        match self.0 {
            Fault::Bounds => {
                let past_the_end = args.output.offset + args.output.len;
                let src = Slice::new(1, Buf::Output, past_the_end, 8);
                ctx.main().copy(src, Slice::new(1, Buf::Output, 0, 8));
            }
            Fault::Scratch => {
                let src = args.input.at(1, 0, 8);
                ctx.main().copy(src, Slice::new(1, Buf::Scratch, 0, 8));
            }
            Fault::BrokenLink => {
                ctx.link(2, 0)?.tx_data_signal(ctx.main());
            }
            Fault::LostWakeup | Fault::LeftSet => {
                let link = ctx.link(0, 0)?;
                link.tx_data_signal(ctx.main());
                if let Fault::LostWakeup = self.0 {
                    link.tx_data_signal(ctx.main());
                }
                for peer in [2, 3] {
                    ctx.link(peer, 0)?.tx_data_signal(ctx.main());
                }
            }
        }
        Ok(())
    }
}

/// Rank 3 waits for rank 1, then signals rank 0, which waits for it.
fn chain_behind_rank_one(ctx: &mut KernelCtx<'_>) -> Result<(), Error> {
    if ctx.rank == 3 {
        ctx.link(1, 0)?.rx_data_signal(ctx.main());
        ctx.link(0, 0)?.tx_data_signal(ctx.main());
    } else {
        ctx.link(3, 0)?.rx_data_signal(ctx.main());
    }
    Ok(())
}

macro_rules! failing {
    ($name:literal, $fault:expr) => {
        oxccl::register_executor! {
            name: $name,
            op: OpKind::AllReduce,
            description: "test only: rank 1 fails, the others wait for it",
            constraints: Constraints::ANY,
            preference: -100,
            make: || Box::new(FailsOnRankOne($fault)),
        }
    };
}

failing!("fails-bounds", Fault::Bounds);
failing!("fails-scratch", Fault::Scratch);
failing!("fails-broken-link", Fault::BrokenLink);
failing!("fails-lost-wakeup", Fault::LostWakeup);
failing!("fails-left-set", Fault::LeftSet);

/// The generous bound on "within a second" (the machine is shared and noisy).
const BOUND: Duration = Duration::from_secs(5);

fn run(algo: &str, check_calls: bool) -> (Duration, Vec<Result<(), Error>>) {
    let comms = communicators(algo, check_calls);
    let start = Instant::now();
    let results = all_reduce_on_every_rank(&comms);
    (start.elapsed(), results)
}

/// Four ranks on one server (rank 1-2 broken for `fails-broken-link`) that run `algo`.
fn communicators(algo: &str, check_calls: bool) -> Vec<Communicator> {
    let topology = match algo {
        "fails-broken-link" => Topology::single_server(4)
            .with_broken(1, 2)
            .expect("topology"),
        _ => Topology::single_server(4),
    };
    let mut config = Config {
        exec_timeout: Duration::from_secs(60),
        check_calls,
        topology: Some(topology),
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), algo);
    Communicator::init_all(4, config).expect("init")
}

/// One AllReduce on every rank of `comms`, each from its own thread: every rank's result.
fn all_reduce_on_every_rank(comms: &[Communicator]) -> Vec<Result<(), Error>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|c| s.spawn(move || c.all_reduce(&[1u64; 4], &mut [0u64; 4], ReduceOp::Sum)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    })
}

/// Every rank of `algo`'s call fails within [`BOUND`] with rank 1's fault in its error
/// (`fault`, a part of rank 1's own message), and every rank but rank 1 names rank 1.
fn reaches_every_rank(algo: &str, fault: &str) {
    for check_calls in [true, false] {
        let (took, results) = run(algo, check_calls);
        assert!(
            took < BOUND,
            "{algo} (check_calls {check_calls}): the ranks returned after {took:?}"
        );
        for (rank, result) in results.iter().enumerate() {
            let err = match result {
                Err(err) => oxccl::framework::error::with_causes(err),
                Ok(()) => panic!("{algo}: rank {rank} succeeded"),
            };
            assert!(
                err.contains(fault) && (rank == 1 || err.contains("rank 1")),
                "{algo} (check_calls {check_calls}): rank {rank}'s error does not name \
                 rank 1's fault `{fault}`: {err}"
            );
        }
    }
}

#[test]
fn a_bounds_error_reaches_every_rank() {
    reaches_every_rank("fails-bounds", "the user's Output has 32 bytes");
}

#[test]
fn a_scratch_error_reaches_every_rank() {
    reaches_every_rank("fails-scratch", "Scratch[0..8] is invalid");
}

#[test]
fn a_broken_link_refusal_reaches_every_rank() {
    reaches_every_rank("fails-broken-link", "which is broken");
}

#[test]
fn a_lost_wakeup_reaches_every_rank() {
    reaches_every_rank("fails-lost-wakeup", "a lost wakeup");
}

/// A notify left set at the end of a call is reported by that call, on the rank that owns
/// it (not by the next call, whose wait would consume the stale post), and every rank's
/// next call is refused naming it. Rank 0 sees the post before it ends: rank 1 made it
/// before signalling rank 3, which rank 0 waits for.
#[test]
fn a_notify_left_set_is_reported_by_the_call_that_left_it() {
    for check_calls in [true, false] {
        let comms = communicators("fails-left-set", check_calls);
        let results = all_reduce_on_every_rank(&comms);
        let err = results[0]
            .as_ref()
            .expect_err("rank 0 ends with the post left set");
        let text = oxccl::framework::error::with_causes(err);
        let left = "rank 0 finished operation 1 with notify 7 of rank 0 (DataSignal from rank 1";
        assert!(text.contains(left), "check_calls {check_calls}: {text}");
        for (rank, next) in all_reduce_on_every_rank(&comms).iter().enumerate() {
            let next = oxccl::framework::error::with_causes(next.as_ref().unwrap_err());
            assert!(next.contains(left), "rank {rank}'s next call: {next}");
        }
    }
}

/// Rank 0 waits for a signal that rank 1's program never posts.
struct Deadlocks;

impl Executor for Deadlocks {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, _: &KernelArgs) -> Result<(), Error> {
        if ctx.rank == 0 {
            ctx.link(1, 0)?.rx_data_signal(ctx.main());
        }
        Ok(())
    }
}

oxccl::register_executor! {
    name: "deadlocks",
    op: OpKind::AllReduce,
    description: "test only: rank 0 waits for a post rank 1 never makes",
    constraints: Constraints::ANY,
    preference: -100,
    make: || Box::new(Deadlocks),
}

/// With the call agreement, a wait that times out in an agreed call is the executor's
/// deadlock, and the error says so (naming it and the wait) instead of asking to check
/// that every rank made the same call.
#[test]
fn a_wait_never_posted_in_an_agreed_call_blames_the_executor() {
    // Staged: no exit fence, so rank 1 ends and only rank 0's own wait times out.
    let mut config = Config {
        exec_timeout: Duration::from_millis(300),
        zero_copy: false,
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), "deadlocks");
    let comms = Communicator::init_all(2, config).expect("init");
    let results = all_reduce_on_every_rank(&comms);
    let err = results[0].as_ref().expect_err("rank 0 waits forever");
    let Error::ExecutorStuck {
        call: 0,
        executor: "deadlocks",
        expected,
        cause,
    } = err
    else {
        panic!("{err:?}")
    };
    assert!(cause.to_string().contains("from rank 1"), "{cause}");
    // Rank 1's program, planned again on rank 0, has no task that posts it.
    assert_eq!(**expected, ExpectedPost::Nobody { rank: 1 });
    assert!(
        err.to_string()
            .contains("no task of rank 1's program for this call posts it"),
        "{err}"
    );
    let text = oxccl::framework::error::with_causes(err);
    assert!(text.contains("oxccl check --algo deadlocks"), "{text}");
}
