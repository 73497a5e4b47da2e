//! The put-based executors (issue 11, link capabilities): each passes the analyzer over
//! the conformance matrix (1 to 9 ranks, 4+4, 8+8, 8+4 and three servers 4+3+4) and the
//! put-only audit of [`oxccl_tests::puts`] (no read of a peer's buffer, no write of a
//! peer's user buffer, over any link it declares put-only), and produces exactly the
//! reference data on the host device on every shape, at boundary counts, for every dtype
//! and reduce op, in place and out of place, zero-copy and staged. The audit itself is
//! checked against the pull executors it must refuse.

use oxccl::framework::LinkNeed;
use oxccl::OpKind;
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::puts::audit_executor;
use oxccl_tests::{check_on_every_shape, full_matrix, run_all_reduce, SMALL_CCL_BYTES};

fn audited(kind: OpKind, algo: &str) {
    match audit_executor(kind, algo, None) {
        Ok(cases) => assert!(cases > 0, "{kind} {algo}: no case ran"),
        Err(problem) => panic!("{problem}"),
    }
}

fn runs(kind: OpKind, algo: &'static str) {
    check_on_every_shape(algo, |setup| match kind {
        OpKind::AllReduce => {
            run_all_reduce(setup, &full_matrix(setup.topology.ranks(), SMALL_CCL_BYTES))
        }
        kind => run_blocks(
            kind,
            setup,
            &block_matrix(kind, setup.topology.ranks(), SMALL_CCL_BYTES),
        ),
    });
}

macro_rules! put_executor_tests {
    ($kind:expr, $algo:literal, $audit:ident, $run:ident) => {
        #[test]
        fn $audit() {
            audited($kind, $algo);
        }

        #[test]
        fn $run() {
            runs($kind, $algo);
        }
    };
}

put_executor_tests!(
    OpKind::AllReduce,
    "put-ring",
    all_reduce_put_ring_audited,
    all_reduce_put_ring_runs
);
put_executor_tests!(
    OpKind::ReduceScatter,
    "put-ring",
    reduce_scatter_put_ring_audited,
    reduce_scatter_put_ring_runs
);
put_executor_tests!(
    OpKind::AllGather,
    "put-ring",
    all_gather_put_ring_audited,
    all_gather_put_ring_runs
);

/// The audit can fail: the pull ring reads its neighbours' buffers, one-shot and
/// mesh-push read and write peers' user buffers zero-copy.
#[test]
fn the_audit_refuses_pull_executors() {
    for (kind, algo) in [
        (OpKind::AllReduce, "ring"),
        (OpKind::AllReduce, "mesh-push"),
        (OpKind::AllGather, "ring"),
        (OpKind::ReduceScatter, "ring"),
    ] {
        let err = audit_executor(kind, algo, Some(LinkNeed::Put))
            .expect_err("a pull executor passed the put-only audit");
        assert!(err.contains("over a put-only link"), "{kind} {algo}: {err}");
    }
}
