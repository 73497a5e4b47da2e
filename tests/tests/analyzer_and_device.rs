//! Where the analyzer and the host device could disagree, each closed: a program the
//! analyzer accepts runs correctly on the device, and one the device would run wrongly is
//! refused by both.
//!
//! Scratch: a device allocates each scratch request on every rank (one allocation per
//! executor and size), so a task of rank `a` on rank `b`'s Scratch reaches `b`'s copy of
//! `a`'s allocation. The analyzer used to size each rank's Scratch from that rank's own
//! request, so an executor whose ranks request different sizes passed it, then on the
//! device returned wrong results with no error (or failed its first call).
//!
//! A peer's user buffers: in zero-copy mode a task may read a peer's Input (or read and
//! write its Output), but the device binds those buffers only once the peer has submitted
//! its call for the same epoch. The analyzer used to treat every rank's Input as present
//! from the start, so an executor that read its peer's Input with no "my data is ready"
//! signal passed it, then on the device failed with `Unbound` or `OtherEpoch`, or ran,
//! depending on when the peer called.

use oxccl::framework::analyzer::{analyze, Check, Recording};
use oxccl::platform::{Buf, Slice};
use oxccl::{
    Communicator, Config, Constraints, DataType, Error, Executor, KernelArgs, KernelCtx, OpKind,
    OpParam, Peers, PlanCtx, ReduceOp, ResourceRequest, Topology,
};

/// A two-rank AllReduce by puts: each rank puts its input into its partner's Scratch at
/// `offset(bytes)`, waits for the partner's put, and reduces. Rank `r` requests
/// `(r + 1) * scale(bytes)` bytes of scratch: asymmetric.
struct Asymmetric {
    offset: fn(usize) -> usize,
}

impl Executor for Asymmetric {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let bytes = ctx.op.count * ctx.op.dtype.size();
        Ok(ResourceRequest {
            scratch_bytes: (ctx.rank + 1) * ((self.offset)(bytes) + bytes),
            ..ResourceRequest::with_peers(Peers::All)
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let bytes = args.op.count * args.op.dtype.size();
        let (me, partner) = (ctx.rank, ctx.rank ^ 1);
        let at = |rank| Slice {
            rank,
            buf: Buf::Scratch,
            offset: (self.offset)(bytes),
            len: bytes,
        };
        let link = ctx.link(partner, 0)?;
        let s = ctx.stream(0);
        if args.iteration > 0 {
            link.tx_ack(s);
            link.rx_ack(s);
        }
        let mine = args.input.at(me, 0, bytes);
        link.tx_async(s, &[(at(partner), mine)]);
        link.rx_async(s);
        link.rx_wait_done(s);
        link.tx_wait_done(s);
        reduce_pair(s, args, (me, mine), at(me));
        Ok(())
    }
}

/// Reduce rank `me`'s block `mine` with its partner's `theirs` into `me`'s Output, lower
/// rank first (so both ranks of a pair sum in the same order and agree bit for bit).
fn reduce_pair(
    s: &mut oxccl::platform::StreamProgram,
    args: &KernelArgs,
    (me, mine): (usize, Slice),
    theirs: Slice,
) {
    let srcs = match me < (me ^ 1) {
        true => vec![mine, theirs],
        false => vec![theirs, mine],
    };
    let out = args.output.at(me, 0, mine.len);
    s.reduce(srcs, out, args.op.dtype, args.op.op);
}

// Rank 0 writes a copy of its own scratch that rank 1 never reads: wrong results, no error.
oxccl::register_executor! {
    name: "asymmetric-scratch",
    op: OpKind::AllReduce,
    description: "ranks request different scratch sizes (analyzer/device test)",
    constraints: Constraints::ANY,
    preference: -100,
    make: || Box::new(Asymmetric { offset: |_| 0 }),
}

// Rank 0 writes past the end of its own request, inside rank 1's.
oxccl::register_executor! {
    name: "asymmetric-scratch-past",
    op: OpKind::AllReduce,
    description: "ranks request different scratch sizes, written past the smaller (analyzer/device test)",
    constraints: Constraints::ANY,
    preference: -100,
    make: || Box::new(Asymmetric { offset: |bytes| bytes }),
}

fn config(algo: &str) -> Config {
    let mut config = Config {
        topology: Some(Topology::single_server(2)),
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), algo);
    config
}

fn op(count: usize) -> OpParam {
    OpParam::all_reduce(count, DataType::I32, ReduceOp::Sum)
}

#[test]
fn the_analyzer_refuses_a_peer_scratch_access_of_another_size() {
    for (algo, bytes) in [("asymmetric-scratch", 20), ("asymmetric-scratch-past", 40)] {
        let rec = Recording::record(&op(5), false, config(algo)).expect("recorded");
        let report = analyze(&rec);
        let found = report
            .failures
            .iter()
            .find(|f| f.check == Check::Bounds && f.message.contains("scratch is symmetric"));
        let found = found.unwrap_or_else(|| panic!("{algo}: not caught: {report:?}"));
        assert_eq!(found.rank, Some(0), "{algo}: {found}");
        assert!(
            found.message.contains(&format!(
                "rank 0 requested {bytes} bytes of scratch and rank 1 {}",
                2 * bytes
            )),
            "{algo}: {found}"
        );
    }
}

#[test]
fn the_device_refuses_it_on_every_rank_before_any_task_runs() {
    let comms = Communicator::init_all(2, config("asymmetric-scratch")).expect("init");
    let results = std::thread::scope(|s| {
        let runs: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let input = vec![comm.rank() as i32 + 1; 5];
                    let mut output = vec![0i32; 5];
                    comm.all_reduce(&input, &mut output, ReduceOp::Sum)
                        .map(|()| output)
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("no panic"))
            .collect::<Vec<_>>()
    });
    for (rank, result) in results.iter().enumerate() {
        match result {
            Err(Error::AsymmetricScratch {
                rank: 0,
                bytes: 20,
                peer: 1,
                peer_bytes: 40,
                ..
            }) => {}
            other => panic!("rank {rank}: expected AsymmetricScratch, got {other:?}"),
        }
    }
    // Refused before any task ran: the communicator still works with a real executor.
    let config = config("ring");
    drop(comms);
    let comms = Communicator::init_all(2, config).expect("init");
    std::thread::scope(|s| {
        for comm in &comms {
            s.spawn(move || {
                let input = vec![comm.rank() as i32 + 1; 5];
                let mut output = vec![0i32; 5];
                comm.all_reduce(&input, &mut output, ReduceOp::Sum)
                    .expect("a symmetric executor runs");
                assert_eq!(output, vec![3; 5]);
            });
        }
    });
}

/// A slice past its range and a copy of unequal lengths: built without a panic in any
/// build (this test runs in the debug profile), refused by the analyzer and the device.
struct BadSlices;

impl Executor for BadSlices {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let me = ctx.rank;
        let past = args.output.at(me, usize::MAX - 2, 8);
        ctx.main().copy(args.input.at(me, 0, 8), past);
        let short = args.output.at(me, 0, 4);
        ctx.main().copy(args.input.at(me, 0, 8), short);
        Ok(())
    }
}

oxccl::register_executor! {
    name: "bad-slices",
    op: OpKind::AllReduce,
    description: "a slice past its range, a copy of unequal lengths (analyzer/device test)",
    constraints: Constraints::ANY,
    preference: -100,
    make: || Box::new(BadSlices),
}

#[test]
fn bad_slices_are_refused_not_panics() {
    let rec = Recording::record(&op(5), false, config("bad-slices")).expect("recorded");
    let report = analyze(&rec);
    let bounds: Vec<_> = report
        .failures
        .iter()
        .filter(|f| f.check == Check::Bounds)
        .map(|f| f.message.as_str())
        .collect();
    assert!(
        bounds.iter().any(|m| m.contains("past the end")),
        "{bounds:?}"
    );
    assert!(
        bounds.iter().any(|m| m.contains("unequal length")),
        "{bounds:?}"
    );
    let comms = Communicator::init_all(2, config("bad-slices")).expect("init");
    std::thread::scope(|s| {
        for comm in &comms {
            s.spawn(move || {
                let input = [1i32; 5];
                let mut output = [0i32; 5];
                let err = comm
                    .all_reduce(&input, &mut output, ReduceOp::Sum)
                    .expect_err("refused");
                let text = oxccl::framework::error::with_causes(&err);
                assert!(text.contains("rank"), "{text}");
            });
        }
    });
}

/// Wrong on rank 2 only: a copy past the end of its Output (and no AllReduce anywhere).
struct BadOnRankTwo;

impl Executor for BadOnRankTwo {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        args.copy_input_to_output(ctx);
        if ctx.rank == 2 {
            let past = args.output.at(2, args.output.len, 4);
            ctx.main().copy(args.input.at(2, 0, 4), past);
        }
        Ok(())
    }
}

oxccl::register_executor! {
    name: "bad-on-rank-two",
    op: OpKind::AllReduce,
    description: "a copy past the end on rank 2 (conformance report test)",
    constraints: Constraints { min_ranks: 3, ..Constraints::ANY },
    preference: -100,
    make: || Box::new(BadOnRankTwo),
}

#[test]
fn a_conformance_failure_names_the_executor_the_case_and_the_rank() {
    use oxccl::framework::analyzer::conformance::check_conformance;
    let err = check_conformance(OpKind::AllReduce, "bad-on-rank-two").expect_err("refused");
    let text = err.to_string();
    for part in [
        "bad-on-rank-two",
        "conformance cases",
        "[3] ",
        "count 1 ",
        "rank 2 stream 0 task 1: [Bounds]",
    ] {
        assert!(text.contains(part), "`{part}` not in: {text}");
    }
}

/// A two-rank AllReduce that reduces its own and its partner's Input straight into its
/// Output. Without `ready`, nothing tells a rank that its partner has entered the call, so
/// in zero-copy mode the partner's Input may not be bound yet; with it, an Ack round first,
/// as every built-in does.
struct PeerInputReader {
    ready: bool,
}

impl Executor for PeerInputReader {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let bytes = args.op.count * args.op.dtype.size();
        let (me, partner) = (ctx.rank, ctx.rank ^ 1);
        let link = ctx.link(partner, 0)?;
        let s = ctx.stream(0);
        if self.ready {
            link.tx_ack(s);
            link.rx_ack(s);
        }
        let (mine, theirs) = (
            args.input.at(me, 0, bytes),
            args.input.at(partner, 0, bytes),
        );
        reduce_pair(s, args, (me, mine), theirs);
        Ok(())
    }
}

oxccl::register_executor! {
    name: "peer-input-unsignalled",
    op: OpKind::AllReduce,
    description: "reads the partner's Input with no ready signal (analyzer/device test)",
    constraints: Constraints { min_ranks: 2, max_ranks: 2, ..Constraints::ANY },
    preference: -100,
    make: || Box::new(PeerInputReader { ready: false }),
}

oxccl::register_executor! {
    name: "peer-input-after-ack",
    op: OpKind::AllReduce,
    description: "reads the partner's Input after an Ack round (analyzer/device test)",
    constraints: Constraints { min_ranks: 2, max_ranks: 2, ..Constraints::ANY },
    preference: -100,
    make: || Box::new(PeerInputReader { ready: true }),
}

fn zero_copy(algo: &str) -> Config {
    Config {
        zero_copy: true,
        ..config(algo)
    }
}

#[test]
fn the_analyzer_refuses_a_peer_input_read_before_the_peer_signalled() {
    let rec =
        Recording::record(&op(5), false, zero_copy("peer-input-unsignalled")).expect("recorded");
    let report = analyze(&rec);
    let found: Vec<_> = report.of(Check::PeerReady).collect();
    assert_eq!(found.len(), 2, "one per rank: {report}");
    for (f, (me, peer)) in found.iter().zip([(0, 1), (1, 0)]) {
        assert_eq!((f.rank, f.stream), (Some(me), Some(0)), "{f}");
        for part in [
            format!("rank {me} stream 0 task {} (Reduce) reads rank {peer} Input[0..20], a user buffer of rank {peer}, before rank {peer} has entered the operation", f.task.unwrap()),
            format!("signal from rank {peer} that its buffers are ready before touching them, e.g. tx_ack/rx_ack or a DataSignal round"),
        ] {
            assert!(f.message.contains(&part), "`{part}` not in: {f}");
        }
    }
    // The same reads after an Ack round pass every check.
    let rec =
        Recording::record(&op(5), false, zero_copy("peer-input-after-ack")).expect("recorded");
    let report = analyze(&rec);
    assert!(report.passed(), "{report}");
}

/// What each of the two ranks' calls returned.
type Results = (Result<Vec<i32>, Error>, Result<Vec<i32>, Error>);

/// Run `algo` on two ranks with the call agreement off (so nothing but the program waits
/// for the peer), rank 1 calling after rank 0: once rank 0's call has returned, or, when
/// `rank_zero_waits`, while it runs (for a program that waits for rank 1).
fn rank_one_late(algo: &str, rank_zero_waits: bool) -> Results {
    let config = Config {
        check_calls: false,
        exec_timeout: std::time::Duration::from_secs(10),
        ..zero_copy(algo)
    };
    let comms = Communicator::init_all(2, config).expect("init");
    let call = |comm: &Communicator| {
        let input = vec![comm.rank() as i32 + 1; 5];
        let mut output = vec![0i32; 5];
        comm.all_reduce(&input, &mut output, ReduceOp::Sum)
            .map(|()| output)
    };
    std::thread::scope(|s| {
        let zero = s.spawn(|| call(&comms[0]));
        if !rank_zero_waits {
            // Rank 0 cannot wait for rank 1 here: its call returns before rank 1 calls.
            let zero = zero.join().expect("no panic");
            return (zero, call(&comms[1]));
        }
        let one = call(&comms[1]);
        (zero.join().expect("no panic"), one)
    })
}

#[test]
fn on_the_device_the_unsignalled_read_finds_the_peer_unbound() {
    // The task the analyzer names is the one the device refuses.
    let rec =
        Recording::record(&op(5), false, zero_copy("peer-input-unsignalled")).expect("recorded");
    let report = analyze(&rec);
    let found = report.of(Check::PeerReady).find(|f| f.rank == Some(0));
    let task = found.and_then(|f| f.task).expect("caught on rank 0");
    // Deterministic: rank 1 has not called when rank 0's read runs.
    let (zero, _) = rank_one_late("peer-input-unsignalled", false);
    let err = zero.expect_err("rank 0 read a buffer that was not bound");
    let text = oxccl::framework::error::with_causes(&err);
    let want = format!(
        "rank 0 stream 0 task {task}: slice rank 1 Input[0..20] is invalid: rank 1 has no \
         collective in flight, so its Input is unbound"
    );
    assert!(text.contains(&want), "`{want}` not in: {text}");
    // With the Ack round, rank 0 waits for rank 1 however late it calls.
    let (zero, one) = rank_one_late("peer-input-after-ack", true);
    assert_eq!(zero.expect("rank 0"), vec![3; 5]);
    assert_eq!(one.expect("rank 1"), vec![3; 5]);
}
