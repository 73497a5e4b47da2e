//! Deliberately wrong executors that only fail back to back, registered only in this test
//! binary, caught by the sequence analysis with the operation, rank, stream and task.

use oxccl::framework::analyzer::{analyze, analyze_sequence, Check, Recording};
use oxccl::templates::{all_peers_round, Round};
use oxccl::{
    Config, Constraints, DataType, Error, Executor, KernelArgs, KernelCtx, OpKind, OpParam, Peers,
    PlanCtx, ReduceOp, ResourceRequest, Topology,
};

/// A wrong AllReduce whose kernel is `kernel`, granted `peers(rank, ranks)`.
struct Bad {
    peers: fn(usize, usize) -> Peers,
    kernel: fn(&mut KernelCtx<'_>, &KernelArgs) -> Result<(), Error>,
}

impl Executor for Bad {
    fn resources(&self, plan: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers((self.peers)(
            plan.rank, plan.ranks,
        )))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        (self.kernel)(ctx, args)
    }
}

macro_rules! bad_executor {
    ($name:literal, $peers:expr, $kernel:expr) => {
        oxccl::register_executor! {
            name: $name,
            op: OpKind::AllReduce,
            description: "deliberately wrong (sequence analysis test)",
            constraints: Constraints::ANY,
            preference: -100,
            make: || Box::new(Bad { peers: $peers, kernel: $kernel }),
        }
    };
}

/// A correct one-shot AllReduce body: ready round, reduce every input into my output,
/// done round (every peer finished reading my input).
fn one_shot(ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
    all_peers_round(ctx, 0, Round::Ack)?;
    let len = args.op.count * args.op.dtype.size();
    let srcs = (0..ctx.ranks).map(|r| args.input.at(r, 0, len)).collect();
    let dst = args.output.at(ctx.rank, 0, len);
    ctx.main().reduce(srcs, dst, args.op.dtype, args.op.op);
    all_peers_round(ctx, 0, Round::DataSignal)
}

// The body alone is correct (the control of the test above).
bad_executor!("bad-one-shot-body", |_, _| Peers::All, one_shot);

// One-shot, then one more Ack to the right neighbour that nobody waits for: the notify is
// left set, and the next operation's first Ack to it is lost.
bad_executor!("bad-leaves-ack-set", |_, _| Peers::All, |ctx, args| {
    one_shot(ctx, args)?;
    let right = ctx.link((ctx.rank + 1) % ctx.ranks, 0)?;
    right.tx_ack(ctx.main());
    Ok(())
});

// Every rank writes its input into its right neighbour's CclIn and signals it, but grants
// only its right neighbour: its left neighbour writes its CclIn unseen by its fence.
bad_executor!(
    "bad-one-way-grant",
    |rank, ranks| Peers::List(vec![(rank + 1) % ranks]),
    |ctx, args| {
        let (me, n) = (ctx.rank, ctx.ranks);
        let len = args.op.count * args.op.dtype.size();
        let right = ctx.link((me + 1) % n, 0)?;
        ctx.main().copy(
            args.input.at(me, 0, len),
            oxccl::platform::Slice::new((me + 1) % n, oxccl::platform::Buf::Scratch, 0, len),
        );
        right.tx_data_signal(ctx.main());
        Ok(())
    }
);

fn record(algo: &str) -> Recording {
    let mut config = Config {
        topology: Some(Topology::single_server(3)),
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), algo);
    let op = OpParam::all_reduce(100, DataType::F32, ReduceOp::Sum);
    Recording::record(&op, false, config).expect("record")
}

#[test]
fn a_notify_left_set_is_a_lost_wakeup_in_the_next_operation() {
    let rec = record("bad-leaves-ack-set");
    let report = analyze_sequence(&[&rec, &rec]).expect("one communicator");
    let hit = report
        .of(Check::LostWakeup)
        .find(|f| f.op == Some(1) && f.message.contains("Ack from rank"));
    let f = hit.unwrap_or_else(|| panic!("no lost wakeup in operation 1:\n{report}"));
    assert!(
        f.rank.is_some() && f.stream == Some(0) && f.task.is_some(),
        "{f:?}"
    );
    assert!(f.message.contains("op 1 rank"), "{f}");
    let good = record("bad-one-shot-body");
    assert!(analyze(&good).passed(), "{}", analyze(&good));
    let report = analyze_sequence(&[&good, &good]).unwrap();
    assert!(report.passed(), "{report}");
}

#[test]
fn a_writer_its_peer_does_not_grant_breaks_the_grant_rule() {
    let rec = record("bad-one-way-grant");
    let f = analyze_sequence(&[&rec, &rec])
        .expect("one communicator")
        .of(Check::Grant)
        .next()
        .cloned()
        .expect("a grant failure");
    assert_eq!(
        (f.op, f.rank, f.stream, f.task),
        (Some(0), Some(0), Some(0), Some(0))
    );
    assert!(
        f.message.contains("writes rank 1 Scratch")
            && f.message
                .contains("rank 0 is not among rank 1's granted peers"),
        "{f}"
    );
    // Alone, the operation breaks no per-operation rule about the grant: only the fence
    // needs it.
    assert!(analyze(&rec).of(Check::Grant).next().is_none());
}
