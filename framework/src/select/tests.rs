//! select_alg's chain on toy Gather executors registered here: constraint and link
//! rejections, the model on one rank, the cache, zero bytes and the override.

use super::*;
use crate::executor::ResourceRequest;
use crate::executor::{Constraints, Executor, KernelArgs, KernelCtx, Peers, PlanCtx};
use oxccl_platform::{DataType, ReduceOp};

/// A Gather that copies the input to the output: right on one rank only, which is all
/// these tests run; on more ranks it is only screened, never recorded.
struct CopyOnly {
    peers: fn(usize) -> Peers,
}

impl Executor for CopyOnly {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers((self.peers)(ctx.ranks)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        args.copy_input_to_output(ctx);
        Ok(())
    }
}

crate::register_executor! {
    name: "test-needs-four",
    op: OpKind::Gather,
    description: "test fixture: rejected below four ranks",
    constraints: Constraints { min_ranks: 4, ..Constraints::ANY },
    preference: 50,
    make: || Box::new(CopyOnly { peers: |_| Peers::All }),
}

crate::register_executor! {
    name: "test-needs-every-link",
    op: OpKind::Gather,
    description: "test fixture: asks for every link",
    constraints: Constraints::ANY,
    preference: 40,
    make: || Box::new(CopyOnly { peers: |_| Peers::All }),
}

fn gather_request<'a>(op: &'a OpParam, topology: &'a Topology) -> SelectRequest<'a> {
    SelectRequest {
        op,
        ranks: topology.ranks(),
        topology,
        bytes: SelectRequest::input_bytes(op, 0, topology.ranks()),
        ccl_bytes: 1 << 20,
        mode: Mode::Direct,
        in_place: false,
        link_channels: 2,
        tune: None,
    }
}

#[test]
fn no_executor_lists_every_candidate_and_why() {
    let topology = Topology::single_server(3).with_broken(0, 2).unwrap();
    let op = OpParam::rooted(OpKind::Gather, 1000, DataType::F32, ReduceOp::Sum, 0);
    let err = select_alg(&gather_request(&op, &topology), &AlgoOverride::default()).unwrap_err();
    let Error::NoExecutor { op: kind, reason } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*kind, OpKind::Gather);
    assert!(
        reason.contains("test-needs-four: supports 4..=any ranks"),
        "{err}"
    );
    assert!(
        reason.contains("test-needs-every-link: rank 0 needs the link to rank 2"),
        "{err}"
    );
}

#[test]
fn load_store_executors_are_screened_off_put_only_links() {
    let tcp = crate::topology::presets::preset("tcp8").unwrap();
    let op = OpParam::rooted(OpKind::Gather, 1000, DataType::F32, ReduceOp::Sum, 0);
    let err = select_alg(&gather_request(&op, &tcp), &AlgoOverride::default()).unwrap_err();
    let Error::NoExecutor { reason, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        reason.contains("test-needs-every-link: needs load/store access on every link")
            && reason.contains("the link 0-1 is put-only"),
        "{err}"
    );
    let mut over = AlgoOverride::default();
    over.set(Some(OpKind::Gather), "test-needs-every-link");
    let err = select_alg(&gather_request(&op, &tcp), &over).unwrap_err();
    let Error::Unsupported {
        executor, reason, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(executor, "test-needs-every-link");
    assert!(reason.contains("the link 0-1 is put-only"), "{err}");
}

#[test]
fn one_rank_is_modelled_and_cached() {
    let topology = Topology::single_server(1);
    let op = OpParam::rooted(OpKind::Gather, 1000, DataType::F32, ReduceOp::Sum, 0);
    let req = gather_request(&op, &topology);
    let first = select_alg(&req, &AlgoOverride::default()).unwrap();
    assert_eq!(first.executor.name, "test-needs-every-link");
    let e = &first.explanation;
    assert_eq!(
        (e.source.clone(), e.bucket_bytes),
        (Source::Model, Some(4096))
    );
    assert!(e.chosen().unwrap().verdict.modelled().unwrap().time_us > 0.0);
    let (rejected, why) = e.rejected().next().unwrap();
    assert_eq!(
        (rejected.name, why),
        ("test-needs-four", Rejection::Constraint)
    );
    let same_bucket = op.with_count(1024);
    let again = select_alg(
        &gather_request(&same_bucket, &topology),
        &AlgoOverride::default(),
    );
    assert!(Arc::ptr_eq(&again.unwrap().explanation, &first.explanation));
}

#[test]
fn the_override_and_zero_bytes_say_so() {
    let topology = Topology::single_server(1);
    let op = OpParam::rooted(OpKind::Gather, 0, DataType::F32, ReduceOp::Sum, 0);
    let zero = select_alg(&gather_request(&op, &topology), &AlgoOverride::default()).unwrap();
    assert_eq!(zero.explanation.source, Source::Preference);
    assert!(zero.reason.contains("zero bytes"), "{}", zero.reason);
    let mut over = AlgoOverride::default();
    over.set(Some(OpKind::Gather), "test-needs-every-link");
    let forced = select_alg(&gather_request(&op, &topology), &over).unwrap();
    assert_eq!(forced.explanation.source, Source::Override);
    assert_eq!(forced.explanation.candidates.len(), 1);
}

#[test]
fn blocks_v_forms_ask_for_the_same_size_on_every_rank() {
    let layout = VLayout::packed_blocks(&[10, 30, 20]);
    let op = OpParam::vector(OpKind::AllGatherV, layout, DataType::F32, ReduceOp::Sum);
    let sizes: Vec<usize> = (0..3)
        .map(|r| SelectRequest::input_bytes(&op, r, 3))
        .collect();
    assert_eq!(sizes, vec![80, 80, 80]);
}

#[test]
fn override_grammar() {
    let o: AlgoOverride = "all_reduce=ring; all-gather = mesh ;bidir".parse().unwrap();
    assert_eq!(o.for_op(OpKind::AllReduce), Some("ring"));
    assert_eq!(o.for_op(OpKind::AllGather), Some("mesh"));
    assert_eq!(o.for_op(OpKind::Broadcast), Some("bidir"));
    let err = "allsum=ring".parse::<AlgoOverride>().unwrap_err();
    assert!(
        crate::error::with_causes(&err).contains("all_reduce"),
        "the cause lists the operators: {err:?}"
    );
    assert!("all_reduce=".parse::<AlgoOverride>().is_err());
}
