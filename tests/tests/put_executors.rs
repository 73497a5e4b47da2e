//! The put-based executors (issue 11, link capabilities): each passes the analyzer over
//! the conformance matrix (1 to 9 ranks, 4+4, 8+8, 8+4 and three servers 4+3+4) with the
//! links it declares put-only made so ([`oxccl_tests::puts`]: no read of a peer's buffer,
//! no write of a peer's user buffer over them), and produces exactly the reference data
//! on the host device on every shape, at boundary counts, for every dtype and reduce op,
//! in place and out of place, zero-copy and staged. The audit itself is checked against
//! the pull executors it must refuse.

use oxccl::framework::LinkNeed;
use oxccl::OpKind;
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::puts::audit_executor;
use oxccl_tests::rooted::check_rooted_executor;
use oxccl_tests::vector::{blocks_matrix, run_vector};
use oxccl_tests::{check_on_every_shape, full_matrix, run_all_reduce, SMALL_CCL_BYTES};

fn audited(kind: OpKind, algo: &str) {
    match audit_executor(kind, algo, None) {
        Ok(cases) => assert!(cases > 0, "{kind} {algo}: no case ran"),
        Err(problem) => panic!("{problem}"),
    }
}

fn runs(kind: OpKind, algo: &'static str) {
    if kind == OpKind::Broadcast {
        // Roots 0, n/2 and n-1 on every shape.
        return check_rooted_executor(kind, algo);
    }
    check_on_every_shape(algo, |setup| match kind {
        OpKind::AllReduce => {
            run_all_reduce(setup, &full_matrix(setup.topology.ranks(), SMALL_CCL_BYTES))
        }
        OpKind::AllGatherV | OpKind::ReduceScatterV => {
            let n = setup.topology.ranks();
            run_vector(kind, setup, &blocks_matrix(kind, n, SMALL_CCL_BYTES))
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
        assert!(
            err.contains("over the put-only link"),
            "{kind} {algo}: {err}"
        );
    }
}

put_executor_tests!(
    OpKind::AllReduce,
    "put-mesh",
    all_reduce_put_mesh_audited,
    all_reduce_put_mesh_runs
);
put_executor_tests!(
    OpKind::AllReduce,
    "put-rd",
    all_reduce_put_rd_audited,
    all_reduce_put_rd_runs
);
put_executor_tests!(
    OpKind::ReduceScatter,
    "put-mesh",
    reduce_scatter_put_mesh_audited,
    reduce_scatter_put_mesh_runs
);
put_executor_tests!(
    OpKind::AllGather,
    "put-mesh",
    all_gather_put_mesh_audited,
    all_gather_put_mesh_runs
);

put_executor_tests!(
    OpKind::AllReduce,
    "put-rhd",
    all_reduce_put_rhd_audited,
    all_reduce_put_rhd_runs
);
put_executor_tests!(
    OpKind::ReduceScatter,
    "put-rhd",
    reduce_scatter_put_rhd_audited,
    reduce_scatter_put_rhd_runs
);
put_executor_tests!(
    OpKind::AllGather,
    "put-rhd",
    all_gather_put_rhd_audited,
    all_gather_put_rhd_runs
);

/// Reduce put-rhd: the reduce-scatter above, then a put of every chunk to the root.
#[test]
fn reduce_put_rhd_audited() {
    audited(OpKind::Reduce, "put-rhd");
}

put_executor_tests!(
    OpKind::AllGatherV,
    "put-ring",
    all_gather_v_put_ring_audited,
    all_gather_v_put_ring_runs
);
put_executor_tests!(
    OpKind::ReduceScatterV,
    "put-ring",
    reduce_scatter_v_put_ring_audited,
    reduce_scatter_v_put_ring_runs
);

/// The hierarchical AllReduce with a put level 1: load/store inside a server, puts only
/// between servers (audited as [`LinkNeed::LoadStoreWithinServer`]).
#[test]
fn all_reduce_hier_put_ring_audited() {
    audited(OpKind::AllReduce, "hier-put-ring");
}

#[test]
fn all_reduce_hier_put_ring_runs() {
    runs(OpKind::AllReduce, "hier-put-ring");
}

/// The hierarchical AllGather with a put level 1 (audited as
/// [`LinkNeed::LoadStoreWithinServer`]).
#[test]
fn all_gather_hier_put_ring_audited() {
    audited(OpKind::AllGather, "hier-put-ring");
}

#[test]
fn all_gather_hier_put_ring_runs() {
    runs(OpKind::AllGather, "hier-put-ring");
}

/// The hierarchical ReduceScatter with a put level 1 (audited as
/// [`LinkNeed::LoadStoreWithinServer`]).
#[test]
fn reduce_scatter_hier_put_ring_audited() {
    audited(OpKind::ReduceScatter, "hier-put-ring");
}

#[test]
fn reduce_scatter_hier_put_ring_runs() {
    runs(OpKind::ReduceScatter, "hier-put-ring");
}

/// The hierarchical Broadcast with puts across servers (audited as
/// [`LinkNeed::LoadStoreWithinServer`]).
#[test]
fn broadcast_hier_put_ring_audited() {
    audited(OpKind::Broadcast, "hier-put-ring");
}

#[test]
fn broadcast_hier_put_ring_runs() {
    runs(OpKind::Broadcast, "hier-put-ring");
}

/// The audit of a within-server executor refuses the load/store hierarchical AllReduce,
/// whose level-1 ring reads across servers.
#[test]
fn the_audit_refuses_loads_across_servers() {
    let err = audit_executor(
        OpKind::AllReduce,
        "hier-ring",
        Some(LinkNeed::LoadStoreWithinServer),
    )
    .expect_err("hier-ring passed the within-server audit");
    assert!(err.contains("over the put-only link"), "{err}");
}

/// What the put executors cost next to their load/store equivalents: tasks of rank 0 and
/// the modelled time of a 1 KiB and a 1 MiB f32 AllReduce-like op (per-rank count for the
/// blocked ones), on 8 ranks (`2x8` for the hierarchical pair), zero-copy and staged.
/// `cargo test -p oxccl-tests --test put_executors -- --ignored --nocapture cost_figures`
#[test]
#[ignore]
fn cost_figures() {
    use oxccl::framework::analyzer::Recording;
    use oxccl::framework::cost::{model, CostParams};
    use oxccl::platform::LinkAccess;
    use oxccl::{Config, DataType, OpParam, ReduceOp, Topology};
    let pairs = [
        (OpKind::AllReduce, "put-ring", "ring"),
        (OpKind::AllReduce, "put-rhd", "rhd"),
        (OpKind::AllReduce, "put-mesh", "mesh"),
        (OpKind::AllReduce, "put-mesh", "mesh-push"),
        (OpKind::AllReduce, "put-mesh", "one-shot"),
        (OpKind::ReduceScatter, "put-ring", "ring"),
        (OpKind::ReduceScatter, "put-rhd", "rhd"),
        (OpKind::ReduceScatter, "put-mesh", "mesh"),
        (OpKind::AllGather, "put-ring", "ring"),
        (OpKind::AllGather, "put-rhd", "rhd"),
        (OpKind::AllGather, "put-mesh", "mesh"),
        (OpKind::AllReduce, "hier-put-ring", "hier-ring"),
    ];
    for (kind, put, load_store) in pairs {
        // Two servers joined by load/store links, so that the load/store twin can run.
        let topo = match put.starts_with("hier") {
            true => Topology::servers(vec![8, 8])
                .unwrap()
                .with_fabric_access(LinkAccess::LoadStore, LinkAccess::LoadStore),
            false => Topology::single_server(8),
        };
        for zero_copy in [true, false] {
            for count in [256, 256 * 1024] {
                let mut row = Vec::new();
                for algo in [put, load_store] {
                    let mut config = Config {
                        topology: Some(topo.clone()),
                        zero_copy,
                        ..Config::default()
                    };
                    config.algo.set(Some(kind), algo);
                    let op = OpParam {
                        kind,
                        ..OpParam::all_reduce(count, DataType::F32, ReduceOp::Sum)
                    };
                    let rec = Recording::record(&op, false, config).expect("record");
                    let tasks = rec.ranks[0].program.task_count();
                    let report = model(&rec, &CostParams::default()).expect("model");
                    row.push(format!(
                        "{algo} {tasks} tasks {:.2} us",
                        report.time_s * 1e6
                    ));
                }
                println!(
                    "{kind} {:?} {} count {count}: {}",
                    topo.server_sizes(),
                    if zero_copy { "zero-copy" } else { "staged" },
                    row.join(" | ")
                );
            }
        }
    }
}
