//! The analyzer's fold: a long loop whose iterations repeat is proved on a window of a few
//! of them. These executors, registered only in this test binary, run 63 iterations (16
//! elements each, then 8); each wrong one must still be caught, with the whole program's
//! failures, and the right one must fold. Then every real executor of the blocked
//! operators gets the same verdict folded and whole.

use oxccl::framework::analyzer::{analyze, analyze_unfolded, Check, Recording, Report};
use oxccl::platform::{Buf, Slice};
use oxccl::templates::{all_peers_round, Round};
use oxccl::{
    registry, Config, Constraints, DataType, Error, Executor, KernelArgs, KernelCtx, OpKind,
    OpParam, Peers, PlanCtx, ReduceOp, ResourceRequest, Topology,
};

use oxccl_plugin_bidir_ring as _;

/// Elements per iteration of the test executors.
const PER_LOOP: usize = 16;

/// Elements of the test operation: 62 full iterations and a last one of 8.
const COUNT: usize = 1000;

/// An AllReduce whose loop takes [`PER_LOOP`] elements per iteration; `kernel` appends
/// one iteration.
struct Looped {
    kernel: fn(&mut KernelCtx<'_>, &KernelArgs) -> Result<(), Error>,
}

impl Executor for Looped {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest {
            max_count_per_loop: Some(PER_LOOP),
            ..ResourceRequest::with_peers(Peers::All)
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        (self.kernel)(ctx, args)
    }
}

macro_rules! looped {
    ($name:literal, $kernel:expr) => {
        oxccl::register_executor! {
            name: $name,
            op: OpKind::AllReduce,
            description: "a long loop (fold test)",
            constraints: Constraints::ANY,
            preference: -100,
            make: || Box::new(Looped { kernel: $kernel }),
        }
    };
}

fn bytes(args: &KernelArgs) -> usize {
    args.op.count * args.op.dtype.size()
}

fn ccl_in(rank: usize, len: usize) -> Slice {
    Slice::new(rank, Buf::CclIn, 0, len)
}

/// Stage the input into the own CclIn, tell every peer it is there.
fn publish(ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
    let me = ctx.rank;
    ctx.main()
        .copy(args.input.at(me, 0, bytes(args)), ccl_in(me, bytes(args)));
    all_peers_round(ctx, 0, Round::DataSignal)
}

/// Reduce the CclIn of `ranks` into the output.
fn reduce_staged(ctx: &mut KernelCtx<'_>, args: &KernelArgs, ranks: impl Iterator<Item = usize>) {
    let len = bytes(args);
    let srcs = ranks.map(|r| ccl_in(r, len)).collect();
    let dst = args.output.at(ctx.rank, 0, len);
    ctx.main().reduce(srcs, dst, args.op.dtype, args.op.op);
}

/// Right: stage, reduce every rank's CclIn, then an Ack round so nobody overwrites a
/// CclIn a peer still reads.
fn staged(ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
    publish(ctx, args)?;
    reduce_staged(ctx, args, 0..ctx.ranks);
    all_peers_round(ctx, 1, Round::Ack)
}

looped!("fold-staged", staged);

// Holds its Ack round before the reduce instead of after: every signal pairs up, but
// the next iteration overwrites a CclIn that peers may still read.
looped!("fold-racy", |ctx, args| {
    publish(ctx, args)?;
    all_peers_round(ctx, 1, Round::Ack)?;
    reduce_staged(ctx, args, 0..ctx.ranks);
    Ok(())
});

// Right except in iteration 17, which forgets the last rank.
looped!("fold-late", |ctx, args| {
    if args.iteration != 17 {
        return staged(ctx, args);
    }
    publish(ctx, args)?;
    reduce_staged(ctx, args, 0..ctx.ranks - 1);
    all_peers_round(ctx, 1, Round::Ack)
});

// Right in the first iteration; afterwards it reduces before it stages, so it sums the
// previous iteration's inputs (ordered, so no race: only the values are wrong).
looped!("fold-stale", |ctx, args| {
    if args.iteration == 0 {
        return staged(ctx, args);
    }
    all_peers_round(ctx, 0, Round::DataSignal)?;
    reduce_staged(ctx, args, 0..ctx.ranks);
    all_peers_round(ctx, 1, Round::Ack)?;
    let me = ctx.rank;
    ctx.main()
        .copy(args.input.at(me, 0, bytes(args)), ccl_in(me, bytes(args)));
    all_peers_round(ctx, 0, Round::Ack)?;
    all_peers_round(ctx, 1, Round::DataSignal)
});

// Right, and also copies the previous iteration's input into CclOut, which nobody reads:
// harmless, but it touches another iteration's user bytes, so the loop does not fold.
looped!("fold-peeks", |ctx, args| {
    staged(ctx, args)?;
    if args.first_element >= PER_LOOP {
        let me = ctx.rank;
        let len = bytes(args);
        let back = args.input.at(me, 0, len);
        let previous = Slice::new(me, back.buf, back.offset - len, len);
        ctx.main()
            .copy(previous, Slice::new(me, Buf::CclOut, 0, len));
    }
    Ok(())
});

fn record(algo: &str, ranks: usize) -> Recording {
    oxccl_tests::record_all_reduce(algo, ranks, COUNT)
}

/// The fold's report on `algo` is the whole program's, failure for failure.
fn same_as_whole(algo: &str, ranks: usize) -> Report {
    let rec = record(algo, ranks);
    let (folded, whole) = (analyze(&rec), analyze_unfolded(&rec));
    assert_eq!(folded.failures, whole.failures, "{algo} on {ranks} ranks");
    assert_eq!(folded.failure_count, whole.failure_count, "{algo}");
    assert_eq!(folded.tasks, whole.tasks, "{algo}");
    folded
}

fn caught(algo: &str, check: Check) {
    for ranks in [2, 3, 4] {
        let report = same_as_whole(algo, ranks);
        assert!(
            report.folded.is_none(),
            "{algo}: a failing fold was trusted"
        );
        assert!(
            report.of(check).next().is_some(),
            "{algo} on {ranks}: no {check:?} failure in {report}"
        );
    }
}

#[test]
fn a_right_loop_folds_to_two_iterations_and_the_last() {
    for ranks in [1, 2, 3, 5] {
        let report = same_as_whole("fold-staged", ranks);
        assert!(report.passed(), "{report}");
        let folded = report.folded.clone().expect("folded");
        assert_eq!(
            (folded.iterations, folded.prefix, folded.period),
            (63, 0, 1)
        );
        assert_eq!(folded.kept, vec![0..2, 62..63]);
        assert!(folded.window_tasks * 20 < report.tasks, "{folded}");
        assert!(
            report.to_string().contains("proved on iterations"),
            "{report}"
        );
    }
}

#[test]
fn a_race_between_iterations_is_caught() {
    caught("fold-racy", Check::MemoryConflict);
}

#[test]
fn a_bug_in_one_late_iteration_is_caught() {
    caught("fold-late", Check::Semantics);
}

#[test]
fn stale_data_from_the_previous_iteration_is_caught() {
    caught("fold-stale", Check::Semantics);
}

#[test]
fn touching_another_iterations_user_bytes_prevents_the_fold() {
    let report = same_as_whole("fold-peeks", 3);
    assert!(report.passed(), "{report}");
    assert!(report.folded.is_none(), "folded: {:?}", report.folded);
}

/// The operators the loop splits into iterations, with a count per rank that makes a
/// few dozen iterations through a 256-byte CCL buffer.
const LOOPED: [OpKind; 8] = [
    OpKind::AllReduce,
    OpKind::Broadcast,
    OpKind::Reduce,
    OpKind::AllGather,
    OpKind::Gather,
    OpKind::ReduceScatter,
    OpKind::Scatter,
    OpKind::AlltoAll,
];

/// Servers, zero-copy, in place.
const SHAPES: [(&[usize], bool, bool); 4] = [
    (&[3], false, false),
    (&[4], true, true),
    (&[5], false, true),
    (&[4, 4], false, false),
];

fn looped_op(kind: OpKind, count: usize) -> OpParam {
    match kind.has_root() {
        true => OpParam::rooted(kind, count, DataType::F32, ReduceOp::Sum, 1),
        false => OpParam::new(kind, count, DataType::F32, ReduceOp::Sum),
    }
}

#[test]
fn every_real_executor_gets_the_same_verdict_folded_and_whole() {
    let mut folds = 0;
    let mut recorded = 0;
    for kind in LOOPED {
        let names: Vec<&str> = registry()
            .expect("registry")
            .executors_for(kind)
            .map(|e| e.name)
            .filter(|n| !n.starts_with("fold-"))
            .collect();
        for name in names {
            for (servers, zero_copy, in_place) in SHAPES {
                let topology = Topology::servers(servers.to_vec()).expect("topology");
                let ranks = topology.ranks();
                let mut config = Config {
                    topology: Some(topology),
                    zero_copy,
                    ccl_buffer_bytes: 256,
                    ..Config::default()
                };
                config.algo.set(Some(kind), name);
                let op = looped_op(kind, 301);
                if in_place && !op.in_place_allowed() {
                    continue;
                }
                // Some executors refuse so small a CCL buffer: nothing to compare.
                let Ok(rec) = Recording::record(&op, in_place, config) else {
                    continue;
                };
                recorded += 1;
                let (folded, whole) = (analyze(&rec), analyze_unfolded(&rec));
                let case = format!("{name} ({kind:?}) on {ranks}, zero_copy {zero_copy}");
                assert_eq!(folded.failures, whole.failures, "{case}");
                assert!(whole.passed(), "{case}: {whole}");
                folds += usize::from(folded.folded.is_some());
            }
        }
    }
    println!("{folds} of {recorded} recordings folded");
    assert!(recorded > 100, "only {recorded} recordings");
    assert!(folds * 2 > recorded, "only {folds} of {recorded} folded");
}
