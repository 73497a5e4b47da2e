//! A deliberately wrong executor that reads over put-only links, registered only in this
//! test binary, is caught three ways: the analyzer reports the read (naming rank, stream,
//! task, slice and link), the planner refuses the program when the executor lies about
//! its need, and selection refuses it when forced on a put-only topology.

use oxccl::framework::analyzer::{analyze, Check, Recording};
use oxccl::framework::LinkNeed;
use oxccl::templates::{all_peers_round, Round};
use oxccl::{
    Config, Constraints, DataType, Error, Executor, KernelArgs, KernelCtx, OpKind, OpParam, Peers,
    PlanCtx, ReduceOp, ResourceRequest, Topology,
};

/// An AllReduce that pulls every peer's input and reduces it locally: right on load/store
/// links, impossible on put-only ones.
struct PullEveryInput;

impl Executor for PullEveryInput {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let len = args.op.count * args.op.dtype.size();
        all_peers_round(ctx, 0, Round::Ack)?;
        let srcs = (0..ctx.ranks).map(|r| args.input.at(r, 0, len)).collect();
        let dst = args.output.at(ctx.rank, 0, len);
        ctx.main()
            .reduce_to(srcs, vec![dst], args.op.dtype, args.op.op);
        all_peers_round(ctx, 0, Round::DataSignal)
    }
}

oxccl::register_executor! {
    name: "test-pull-honest",
    op: OpKind::AllReduce,
    description: "pulls peers' inputs and says it needs load/store links (test only)",
    constraints: Constraints::ANY,
    preference: -100,
    make: || Box::new(PullEveryInput),
}

oxccl::register_executor! {
    name: "test-pull-lying",
    op: OpKind::AllReduce,
    description: "pulls peers' inputs but claims it only puts (test only)",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: -100,
    make: || Box::new(PullEveryInput),
}

fn config(topology: Topology, algo: &str) -> Config {
    let mut config = Config {
        topology: Some(topology),
        zero_copy: false,
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), algo);
    config
}

fn op() -> OpParam {
    OpParam::all_reduce(64, DataType::F32, ReduceOp::Sum)
}

fn preset(name: &str) -> Topology {
    Topology::parse_spec(name).expect("preset")
}

#[test]
fn the_analyzer_reports_each_read_over_a_put_only_link() {
    let mesh = Topology::single_server(8);
    let mut rec = Recording::record(&op(), false, config(mesh, "test-pull-honest")).unwrap();
    assert!(
        analyze(&rec).of(Check::Link).next().is_none(),
        "pulling is legal over load/store links"
    );
    rec.topology = preset("tcp8");
    let report = analyze(&rec);
    let reads: Vec<String> = report
        .of(Check::Link)
        .map(|f| f.message.clone())
        .filter(|m| m.contains("put-only"))
        .collect();
    assert_eq!(
        reads.len(),
        8 * 7,
        "every rank reads every peer: {reads:#?}"
    );
    assert!(
        reads.iter().any(|m| m.contains("rank 0 stream 0 task")
            && m.contains("(Reduce) reads rank 1 CclIn[0..256] over the put-only link 0-1")),
        "{reads:#?}"
    );
}

#[test]
fn the_planner_refuses_an_executor_that_lies_about_its_links() {
    for shape in ["tcp8", "2x8"] {
        let err = Recording::record(&op(), false, config(preset(shape), "test-pull-lying"))
            .expect_err("a read over a put-only link must be refused");
        let Error::PutOnlyLink { executor, access } = &err else {
            panic!("{shape}: {err}");
        };
        assert_eq!(executor, "test-pull-lying");
        assert!(!access.write, "{err}");
        assert_ne!(access.slice.rank, access.rank, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("stream {} task {}", access.stream, access.task))
                && text.contains("put-only link"),
            "{text}"
        );
    }
}

#[test]
fn selection_refuses_a_load_store_executor_forced_on_put_only_links() {
    for shape in ["tcp8", "2x8"] {
        let err = Recording::record(&op(), false, config(preset(shape), "test-pull-honest"))
            .expect_err("selection must refuse it");
        let Error::Unsupported {
            executor, reason, ..
        } = &err
        else {
            panic!("{shape}: {err}");
        };
        assert_eq!(executor, "test-pull-honest");
        let link = if shape == "tcp8" { "0-1" } else { "0-8" };
        assert!(
            reason.contains(&format!("the link {link} is put-only")),
            "{shape}: {reason}"
        );
    }
    let mesh = Topology::single_server(8);
    assert!(Recording::record(&op(), false, config(mesh, "test-pull-honest")).is_ok());
}

#[test]
fn unforced_selection_on_put_only_links_skips_load_store_executors() {
    for shape in ["tcp8", "2x8"] {
        let mut config = config(preset(shape), "test-pull-honest");
        config.algo = Default::default();
        for kind in [OpKind::Broadcast, OpKind::AlltoAll, OpKind::Barrier] {
            let op = match kind {
                OpKind::Barrier => OpParam::barrier(),
                OpKind::Broadcast => OpParam::rooted(kind, 100, DataType::I32, ReduceOp::Sum, 3),
                _ => OpParam::new(kind, 100, DataType::I32, ReduceOp::Sum),
            };
            let rec = Recording::record(&op, false, config.clone())
                .unwrap_or_else(|e| panic!("{shape} {kind}: {e}"));
            let entry = oxccl::registry()
                .unwrap()
                .executor(kind, rec.executor)
                .unwrap();
            // A put executor, or one that loads and stores only inside servers (which the
            // put-only links of both shapes leave it).
            let need = entry.constraints.links;
            assert_ne!(need, LinkNeed::LoadStore, "{shape} {kind}");
            assert_eq!(need.refusal(&preset(shape)), None, "{shape} {kind}");
            assert!(analyze(&rec).passed(), "{shape} {kind}");
        }
    }
}
