//! Deliberately wrong executors, registered only in this test binary, each caught by the
//! analyzer with the right check and a message that names what went wrong.

use oxccl::framework::analyzer::{analyze, Check, Recording};
use oxccl::platform::{Buf, Slice};
use oxccl::templates::{all_peers_round, Round};
use oxccl::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
    Topology,
};

/// A wrong AllReduce: `kernel` appends the tasks; resources are a link to every peer plus
/// `slaves` slave streams.
struct Bad {
    slaves: usize,
    kernel: fn(&mut KernelCtx<'_>, &KernelArgs) -> Result<(), Error>,
}

impl Executor for Bad {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest {
            slave_streams: self.slaves,
            ..ResourceRequest::with_peers(Peers::All)
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        (self.kernel)(ctx, args)
    }
}

macro_rules! bad_executor {
    ($name:literal, $slaves:expr, $kernel:expr) => {
        oxccl::register_executor! {
            name: $name,
            op: OpKind::AllReduce,
            description: "deliberately wrong (analyzer test)",
            constraints: Constraints::ANY,
            preference: -100,
            make: || Box::new(Bad { slaves: $slaves, kernel: $kernel }),
        }
    };
}

fn bytes(args: &KernelArgs) -> usize {
    args.op.count * args.op.dtype.size()
}

/// A ready round with every peer, as one-shot starts.
fn ready_round(ctx: &mut KernelCtx<'_>) -> Result<(), Error> {
    all_peers_round(ctx, 0, Round::Ack)
}

fn reduce_from(ctx: &mut KernelCtx<'_>, args: &KernelArgs, ranks: Vec<usize>, shift: usize) {
    let len = bytes(args) - shift;
    let srcs = ranks
        .into_iter()
        .map(|r| args.input.at(r, shift, len))
        .collect();
    let dst = args.output.at(ctx.rank, 0, len);
    ctx.main().reduce(srcs, dst, args.op.dtype, args.op.op);
}

// Waits for an Ack that no peer ever posts.
bad_executor!("bad-deadlock", 0, |ctx, _| {
    let l = ctx.link((ctx.rank + 1) % ctx.ranks, 0)?;
    l.rx_ack(ctx.main());
    Ok(())
});

// Posts the same Ack twice before the peer waits once.
bad_executor!("bad-lost-wakeup", 0, |ctx, args| {
    let l = ctx.link((ctx.rank + 1) % ctx.ranks, 0)?;
    l.tx_ack(ctx.main());
    l.tx_ack(ctx.main());
    let back = ctx.link((ctx.rank + ctx.ranks - 1) % ctx.ranks, 0)?;
    back.rx_ack(ctx.main());
    back.rx_ack(ctx.main());
    reduce_from(ctx, args, (0..ctx.ranks).collect(), 0);
    Ok(())
});

// Every rank writes its input into rank 0's output with no synchronisation at all.
bad_executor!("bad-write-write", 0, |ctx, args| {
    let len = bytes(args);
    let (src, dst) = (args.input.at(ctx.rank, 0, len), args.output.at(0, 0, len));
    ctx.main().copy(src, dst);
    Ok(())
});

// Reads the right neighbour's output while the neighbour writes it, unordered.
bad_executor!("bad-read-write", 0, |ctx, args| {
    ready_round(ctx)?;
    reduce_from(ctx, args, (0..ctx.ranks).collect(), 0);
    let len = bytes(args);
    let right = (ctx.rank + 1) % ctx.ranks;
    let (src, dst) = (
        args.output.at(right, 0, len),
        Slice::new(ctx.rank, Buf::CclIn, 0, len),
    );
    ctx.main().copy(src, dst);
    Ok(())
});

// Forgets the last rank's contribution.
bad_executor!("bad-missing", 0, |ctx, args| {
    ready_round(ctx)?;
    reduce_from(ctx, args, (0..ctx.ranks - 1).collect(), 0);
    Ok(())
});

// Counts its own input twice.
bad_executor!("bad-duplicate", 0, |ctx, args| {
    ready_round(ctx)?;
    let mut ranks: Vec<usize> = (0..ctx.ranks).collect();
    ranks.push(ctx.rank);
    reduce_from(ctx, args, ranks, 0);
    Ok(())
});

// Reads every input one element too far along.
bad_executor!("bad-offset", 0, |ctx, args| {
    ready_round(ctx)?;
    let es = args.op.dtype.size();
    reduce_from(ctx, args, (0..ctx.ranks).collect(), es);
    let len = bytes(args);
    let me = ctx.rank;
    ctx.main().copy(
        args.input.at(me, len - es, es),
        args.output.at(me, len - es, es),
    );
    Ok(())
});

// Writes past the end of its output.
bad_executor!("bad-bounds", 0, |ctx, args| {
    ready_round(ctx)?;
    reduce_from(ctx, args, (0..ctx.ranks).collect(), 0);
    let len = bytes(args);
    let dst = Slice {
        len: len + 64,
        ..args.output.at(ctx.rank, 0, len)
    };
    let src = Slice::new(ctx.rank, Buf::CclIn, 0, len + 64);
    ctx.main().copy(src, dst);
    Ok(())
});

// Forks a slave stream that never joins.
bad_executor!("bad-no-join", 1, |ctx, args| {
    ctx.fork(1..=1);
    ready_round(ctx)?;
    reduce_from(ctx, args, (0..ctx.ranks).collect(), 0);
    let len = bytes(args);
    let (src, dst) = (
        args.input.at(ctx.rank, 0, len),
        Slice::new(ctx.rank, Buf::CclIn, 0, len),
    );
    ctx.stream(1).copy(src, dst);
    Ok(())
});

/// A Reduce whose non-roots keep a copy of their input in their output (where a chain
/// would keep its partials): the root's result is right, but NCCL leaves a non-root's
/// receive buffer unused.
struct ScribblingReduce;

impl Executor for ScribblingReduce {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = args.op.root.expect("a rooted operator");
        ready_round(ctx)?;
        match ctx.rank == root {
            true => reduce_from(ctx, args, (0..ctx.ranks).collect(), 0),
            false => {
                let len = bytes(args);
                let (src, dst) = (
                    args.input.at(ctx.rank, 0, len),
                    args.output.at(ctx.rank, 0, len),
                );
                ctx.main().copy(src, dst);
            }
        }
        Ok(())
    }
}

oxccl::register_executor! {
    name: "bad-scribble",
    op: OpKind::Reduce,
    description: "deliberately wrong (analyzer test)",
    constraints: Constraints::ANY,
    preference: -100,
    make: || Box::new(ScribblingReduce),
}

fn record(algo: &str, ranks: usize) -> Recording {
    oxccl_tests::record_all_reduce(algo, ranks, 1000)
}

/// The analyzer reports `check` for `algo`, with every fragment in one message.
fn caught(algo: &str, check: Check, fragments: &[&str]) {
    let report = analyze(&record(algo, 4));
    assert!(!report.passed(), "{algo} passed the analyzer");
    let found = report.failures.iter().find(|f| f.check == check);
    let Some(f) = found else {
        panic!("{algo}: no {check:?} failure in {:#?}", report.failures)
    };
    for part in fragments {
        assert!(
            f.message.contains(part),
            "{algo}: `{part}` not in: {}",
            f.message
        );
    }
}

#[test]
fn deadlock() {
    caught(
        "bad-deadlock",
        Check::Deadlock,
        &["rank", "stream 0", "task", "Ack"],
    );
}

#[test]
fn lost_wakeup() {
    caught("bad-lost-wakeup", Check::LostWakeup, &["rank", "Ack"]);
}

#[test]
fn unordered_write_write() {
    caught(
        "bad-write-write",
        Check::MemoryConflict,
        &["rank 0", "Output"],
    );
}

#[test]
fn unordered_read_write() {
    caught("bad-read-write", Check::MemoryConflict, &["Output"]);
}

#[test]
fn missing_contribution() {
    caught("bad-missing", Check::Semantics, &["rank 3"]);
}

#[test]
fn duplicated_contribution() {
    caught("bad-duplicate", Check::Semantics, &["duplicated", "rank 0"]);
}

#[test]
fn wrong_offset() {
    caught("bad-offset", Check::Semantics, &["offset"]);
}

#[test]
fn out_of_bounds_slice() {
    caught("bad-bounds", Check::Bounds, &["Output", "bytes"]);
}

#[test]
fn slave_stream_that_never_joins() {
    caught("bad-no-join", Check::ForkJoin, &["stream 1"]);
}

#[test]
fn a_non_root_s_reduce_output_written() {
    let mut config = oxccl::Config {
        topology: Some(Topology::single_server(4)),
        ..oxccl::Config::default()
    };
    config.algo.set(Some(OpKind::Reduce), "bad-scribble");
    let op = oxccl::OpParam::rooted(
        OpKind::Reduce,
        1000,
        oxccl::DataType::F32,
        oxccl::ReduceOp::Sum,
        2,
    );
    let report = analyze(&Recording::record(&op, false, config).expect("record"));
    let f = report
        .failures
        .iter()
        .find(|f| f.check == Check::Semantics)
        .unwrap_or_else(|| panic!("no Semantics failure in {:#?}", report.failures));
    for part in ["rank 0 Output", "non-root's output", "recvbuff"] {
        assert!(f.message.contains(part), "`{part}` not in: {}", f.message);
    }
}

#[test]
fn use_of_a_broken_link() {
    // Programs built for a healthy mesh, checked after the 0-1 link broke.
    let mut rec = record("mesh", 4);
    rec.topology = Topology::single_server(4).with_broken(0, 1).unwrap();
    let report = analyze(&rec);
    let f = report
        .failures
        .iter()
        .find(|f| f.check == Check::Link)
        .expect("a link failure");
    assert!(
        f.message.contains("rank 0") || f.message.contains("rank 1"),
        "{}",
        f.message
    );
}

#[test]
fn the_real_executors_pass() {
    for algo in ["mesh", "mesh-push", "one-shot", "ring"] {
        for ranks in [1, 2, 3, 8] {
            let report = analyze(&record(algo, ranks));
            assert!(report.passed(), "{algo} on {ranks}: {:#?}", report.failures);
        }
    }
}
