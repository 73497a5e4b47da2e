//! Every registered executor has its tests: the lists below name, per operator, exactly the
//! executors the registry holds, and the test file that checks each one's results on the
//! host device and runs it through the analyzer's conformance matrix. Registering a new
//! executor fails this test until it is added here, with its tests.

use oxccl::OpKind;
use oxccl_tests::assert_executors_covered;

#[test]
fn every_registered_executor_is_covered_by_a_test_file() {
    let covered: [(OpKind, &[&str]); 13] = [
        // put_executors (put-*, hier-put-ring, every operator below that has them),
        // all_reduce_executors (built-in + plugin), double_ring_executors,
        // log_step_executors (rhd, nhr, nb), hierarchical_executors (hier-*),
        // relay_mesh_executors (relay-*, also for AllGather and ReduceScatter).
        (
            OpKind::AllReduce,
            &[
                "bidir-ring",
                "double-ring",
                "hier-nhr",
                "hier-pipelined",
                "hier-put-ring",
                "hier-rhd",
                "hier-ring",
                "mesh",
                "mesh-push",
                "nb",
                "nhr",
                "one-shot",
                "put-mesh",
                "put-rd",
                "put-rhd",
                "put-ring",
                "relay-mesh",
                "relay-mesh-single",
                "rhd",
                "ring",
            ],
        ),
        // all_gather_executors, double_ring_executors, log_step_executors,
        // hierarchical_executors, put_executors (hier-put-ring).
        (
            OpKind::AllGather,
            &[
                "double-ring",
                "hier-nhr",
                "hier-put-ring",
                "hier-rhd",
                "hier-ring",
                "mesh",
                "mesh-push",
                "nb",
                "nhr",
                "put-mesh",
                "put-rhd",
                "put-ring",
                "relay-mesh",
                "rhd",
                "ring",
            ],
        ),
        // reduce_scatter_executors, double_ring_executors, log_step_executors,
        // hierarchical_executors, put_executors (hier-put-ring).
        (
            OpKind::ReduceScatter,
            &[
                "double-ring",
                "hier-nhr",
                "hier-put-ring",
                "hier-rhd",
                "hier-ring",
                "mesh",
                "nb",
                "nhr",
                "put-mesh",
                "put-rhd",
                "put-ring",
                "relay-mesh",
                "rhd",
                "ring",
            ],
        ),
        // broadcast_executors, hierarchical_executors, relay_rooted_executors (relay-*),
        // put_executors (hier-put-ring).
        (
            OpKind::Broadcast,
            &[
                "hier-nhr",
                "hier-put-ring",
                "hier-rhd",
                "hier-ring",
                "mesh",
                "mesh-push",
                "put-mesh",
                "relay-mesh",
                "relay-scatter-allgather",
                "ring",
                "tree",
            ],
        ),
        // reduce_executors, scatter_executors, gather_executors, relay_rooted_executors.
        (
            OpKind::Reduce,
            &[
                "mesh",
                "put-mesh",
                "put-rhd",
                "relay-mesh",
                "relay-reduce-scatter-gather",
                "ring",
                "tree",
            ],
        ),
        (OpKind::Scatter, &["mesh", "put-mesh", "relay-mesh", "tree"]),
        (OpKind::Gather, &["mesh", "put-mesh", "relay-mesh", "tree"]),
        // all_to_all_executors, relay_p2p_executors.
        (
            OpKind::AlltoAll,
            &["mesh", "pairwise", "put-mesh", "relay-mesh"],
        ),
        // vector_executors, relay_rooted_executors (relay-mesh of the V forms),
        // relay_p2p_executors (relay-pairwise).
        (
            OpKind::AllGatherV,
            &["mesh", "put-ring", "relay-mesh", "ring"],
        ),
        (
            OpKind::ReduceScatterV,
            &["mesh", "put-ring", "relay-mesh", "ring"],
        ),
        (
            OpKind::AlltoAllV,
            &[
                "mesh",
                "pairwise",
                "put-mesh",
                "put-pairwise",
                "relay-pairwise",
            ],
        ),
        // send_recv_executors, barrier_executors, relay_p2p_executors.
        (OpKind::SendRecv, &["p2p", "put-p2p", "relay-p2p"]),
        (OpKind::Barrier, &["dissemination", "spanning-tree"]),
    ];
    assert_eq!(covered.len(), OpKind::ALL.len(), "every operator listed");
    for (kind, names) in covered {
        assert_executors_covered(kind, names);
    }
}
