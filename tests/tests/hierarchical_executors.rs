//! The hierarchical executors (level 0 inside each server, level 1 across servers) produce
//! exactly the reference on every shape (1 to 9 ranks on one server, and 2x2, 3+2, 2x4,
//! 3x3, 2x8, 8+4, 4x8), for every dtype and reduce op, at boundary counts and counts
//! larger than the CCL buffer, in place and out of place, zero-copy and staged; and each
//! passes the analyzer's conformance matrix.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::platform::LinkAccess;
use oxccl::{DataType, OpKind, ReduceOp, Topology};
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::rooted::{rooted_matrix, run_rooted};
use oxccl_tests::{check_on_shapes, full_matrix, run_all_reduce, Case, Setup, SMALL_CCL_BYTES};

/// The shapes `algo` is checked on: every shape, except that the RHD and NHR level-1
/// variants skip single servers, where level 1 is empty and they run exactly what
/// `hier-ring` runs (their level-1 templates have their own tests in log_step_executors).
fn keep_shape(algo: &str) -> impl Fn(&oxccl::Topology) -> bool + '_ {
    move |t| !matches!(algo, "hier-rhd" | "hier-nhr") || t.server_sizes().len() > 1
}

fn check_on_every_shape(algo: &'static str, run: impl Fn(&Setup) -> Result<(), String>) {
    check_on_shapes(algo, keep_shape(algo), run)
}

fn check_all_reduce(algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        run_all_reduce(setup, &full_matrix(setup.topology.ranks(), SMALL_CCL_BYTES))
    });
}

fn check_blocks(kind: OpKind, algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        run_blocks(
            kind,
            setup,
            &block_matrix(kind, setup.topology.ranks(), SMALL_CCL_BYTES),
        )
    });
}

fn check_broadcast(algo: &'static str) {
    let kind = OpKind::Broadcast;
    check_on_every_shape(algo, |setup| {
        run_rooted(
            kind,
            setup,
            &rooted_matrix(kind, setup.topology.ranks(), SMALL_CCL_BYTES),
        )
    });
}

#[test]
fn all_reduce_hier_ring() {
    check_all_reduce("hier-ring");
}

#[test]
fn all_reduce_hier_ring_conforms() {
    assert_conforms(OpKind::AllReduce, "hier-ring");
}

#[test]
fn all_gather_hier_ring() {
    check_blocks(OpKind::AllGather, "hier-ring");
}

#[test]
fn all_gather_hier_ring_conforms() {
    assert_conforms(OpKind::AllGather, "hier-ring");
}

#[test]
fn reduce_scatter_hier_ring() {
    check_blocks(OpKind::ReduceScatter, "hier-ring");
}

#[test]
fn reduce_scatter_hier_ring_conforms() {
    assert_conforms(OpKind::ReduceScatter, "hier-ring");
}

#[test]
fn all_reduce_hier_rhd() {
    check_all_reduce("hier-rhd");
}

#[test]
fn all_reduce_hier_rhd_conforms() {
    assert_conforms(OpKind::AllReduce, "hier-rhd");
}

#[test]
fn all_gather_hier_rhd() {
    check_blocks(OpKind::AllGather, "hier-rhd");
}

#[test]
fn all_gather_hier_rhd_conforms() {
    assert_conforms(OpKind::AllGather, "hier-rhd");
}

#[test]
fn reduce_scatter_hier_rhd() {
    check_blocks(OpKind::ReduceScatter, "hier-rhd");
}

#[test]
fn reduce_scatter_hier_rhd_conforms() {
    assert_conforms(OpKind::ReduceScatter, "hier-rhd");
}

#[test]
fn broadcast_hier_ring() {
    check_broadcast("hier-ring");
}

#[test]
fn broadcast_hier_ring_conforms() {
    assert_conforms(OpKind::Broadcast, "hier-ring");
}

#[test]
fn all_reduce_hier_nhr() {
    check_all_reduce("hier-nhr");
}

#[test]
fn all_reduce_hier_nhr_conforms() {
    assert_conforms(OpKind::AllReduce, "hier-nhr");
}

#[test]
fn all_gather_hier_nhr() {
    check_blocks(OpKind::AllGather, "hier-nhr");
}

#[test]
fn all_gather_hier_nhr_conforms() {
    assert_conforms(OpKind::AllGather, "hier-nhr");
}

#[test]
fn reduce_scatter_hier_nhr() {
    check_blocks(OpKind::ReduceScatter, "hier-nhr");
}

#[test]
fn reduce_scatter_hier_nhr_conforms() {
    assert_conforms(OpKind::ReduceScatter, "hier-nhr");
}

#[test]
fn broadcast_hier_rhd() {
    check_broadcast("hier-rhd");
}

#[test]
fn broadcast_hier_rhd_conforms() {
    assert_conforms(OpKind::Broadcast, "hier-rhd");
}

#[test]
fn broadcast_hier_nhr() {
    check_broadcast("hier-nhr");
}

#[test]
fn broadcast_hier_nhr_conforms() {
    assert_conforms(OpKind::Broadcast, "hier-nhr");
}

#[test]
fn all_reduce_hier_pipelined() {
    check_all_reduce("hier-pipelined");
}

#[test]
fn all_reduce_hier_pipelined_conforms() {
    assert_conforms(OpKind::AllReduce, "hier-pipelined");
}

/// Counts large enough for several pipeline segments per iteration, zero-copy and staged
/// (where the CCL buffer also splits the operation into iterations).
#[test]
fn all_reduce_hier_pipelined_runs_several_segments() {
    let segment = oxccl::algorithms::all_reduce::hier_pipelined::MIN_SEGMENT_BYTES;
    // Segments are at least 32 MiB: one uneven shape keeps the test's time reasonable.
    for servers in [vec![3, 2]] {
        for zero_copy in [true, false] {
            let setup = Setup {
                algo: Some("hier-pipelined"),
                // Load/store across servers: hier-pipelined reads peers over every link.
                topology: Topology::servers(servers.clone())
                    .expect("valid shape")
                    .with_fabric_access(LinkAccess::LoadStore, LinkAccess::LoadStore),
                zero_copy,
                ccl_bytes: 2 * segment,
                device: None,
            };
            let cases: Vec<Case> = [
                (DataType::F32, ReduceOp::Sum),
                (DataType::I32, ReduceOp::Max),
            ]
            .into_iter()
            .enumerate()
            .map(|(i, (dtype, op))| Case {
                dtype,
                op,
                count: (2 * segment + segment / 4) / dtype.size() + 13,
                in_place: i % 2 == 1,
            })
            .collect();
            if let Err(e) = run_all_reduce(&setup, &cases) {
                panic!("{e}");
            }
        }
    }
}
