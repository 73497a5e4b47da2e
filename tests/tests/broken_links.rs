//! Every operator keeps running when links die: on `mesh8` with 0-1 broken, with two and
//! with three broken links (the graph stays connected), select_alg finds an executor that
//! avoids them, the analyzer proves its programs (among its checks: no task uses a broken
//! or missing link) and the host device produces exactly the reference data, zero-copy and
//! staged.
//!
//! The data matrices are the per-operator ones of the harness, thinned to every third case
//! plus every case that crosses the CCL buffer, so the whole file stays quick; each
//! executor's own test file runs its full matrix.

use oxccl::framework::analyzer::conformance::cases;
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::executor::Peers;
use oxccl::{Communicator, Config, DataType, OpKind, OpParam, ReduceOp, Topology};
use oxccl_tests::all_to_all::run_all_to_all;
use oxccl_tests::barrier::run_barriers;
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::rooted::{rooted_matrix, run_rooted};
use oxccl_tests::vector::{all_to_all_v, blocks_matrix, p2p_matrix, run_vector, send_recv};
use oxccl_tests::{full_matrix, run_all_reduce, Setup, SMALL_CCL_BYTES};

/// The broken-link sets of the issue: one, two and three links, every graph connected.
const BROKEN: [&[(usize, usize)]; 3] = [&[(0, 1)], &[(0, 1), (2, 3)], &[(0, 1), (2, 5), (3, 4)]];

fn mesh8_without(pairs: &[(usize, usize)]) -> Topology {
    pairs.iter().fold(Topology::single_server(8), |t, &(a, b)| {
        t.with_broken(a, b).expect("a linked pair")
    })
}

/// Every broken-link set, zero-copy and staged, with select_alg's choice.
fn for_each_broken_mesh(run: impl Fn(&Setup) -> Result<(), String>) {
    for pairs in BROKEN {
        for zero_copy in [true, false] {
            let setup = Setup {
                algo: None,
                topology: mesh8_without(pairs),
                zero_copy,
                ccl_bytes: SMALL_CCL_BYTES,
                device: None,
            };
            run(&setup).unwrap_or_else(|e| panic!("broken {pairs:?}: {e}"));
        }
    }
}

/// Every third case, and every case whose data crosses the CCL buffer.
fn thinned<T: Clone>(cases: &[T], big: impl Fn(&T) -> bool) -> Vec<T> {
    cases
        .iter()
        .enumerate()
        .filter(|(i, c)| i % 3 == 0 || big(c))
        .map(|(_, c)| c.clone())
        .collect()
}

#[test]
fn all_reduce() {
    for_each_broken_mesh(|setup| {
        let all = full_matrix(8, SMALL_CCL_BYTES);
        let big = |c: &oxccl_tests::Case| c.count * c.dtype.size() > SMALL_CCL_BYTES;
        run_all_reduce(setup, &thinned(&all, big))
    });
}

#[test]
fn all_gather_and_reduce_scatter() {
    for kind in [OpKind::AllGather, OpKind::ReduceScatter] {
        for_each_broken_mesh(|setup| {
            let all = block_matrix(kind, 8, SMALL_CCL_BYTES);
            let big = |c: &oxccl_tests::Case| 8 * c.count * c.dtype.size() > SMALL_CCL_BYTES;
            run_blocks(kind, setup, &thinned(&all, big))
        });
    }
}

#[test]
fn rooted_operators() {
    for kind in [
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::Scatter,
        OpKind::Gather,
    ] {
        for_each_broken_mesh(|setup| {
            let all = rooted_matrix(kind, 8, SMALL_CCL_BYTES);
            let big = |c: &oxccl_tests::Case| c.count * c.dtype.size() > SMALL_CCL_BYTES / 8;
            run_rooted(kind, setup, &thinned(&all, big))
        });
    }
}

#[test]
fn all_to_all() {
    for_each_broken_mesh(|setup| run_all_to_all(setup, |i, j| (i + j) % 3 == 0 || j == 6));
}

#[test]
fn vector_operators() {
    for kind in [OpKind::AllGatherV, OpKind::ReduceScatterV] {
        for_each_broken_mesh(|setup| {
            let all = blocks_matrix(kind, 8, SMALL_CCL_BYTES);
            run_vector(kind, setup, &thinned(&all, |_| false))
        });
    }
    // Every pair exchanges (0 with 1 included), uneven counts; and a ring of sends whose
    // first hop is the broken 0 -> 1.
    let exchanges = vec![
        all_to_all_v(8, |a, b| (a * 3 + b * 5) % 4 * 3 + 1),
        all_to_all_v(8, |a, b| usize::from(a != b) * (SMALL_CCL_BYTES / 16 + a)),
    ];
    let rings = vec![
        send_recv(
            8,
            &(0..8)
                .map(|r| (r, (r + 1) % 8, r * 5 + 1))
                .collect::<Vec<_>>(),
        ),
        send_recv(8, &[(1, 0, 9), (0, 1, SMALL_CCL_BYTES / 16 + 3), (2, 3, 4)]),
    ];
    for (kind, layouts) in [(OpKind::AlltoAllV, exchanges), (OpKind::SendRecv, rings)] {
        for_each_broken_mesh(|setup| {
            let all = p2p_matrix(8, &layouts);
            run_vector(kind, setup, &thinned(&all, |_| false))
        });
    }
}

#[test]
fn barrier() {
    for_each_broken_mesh(run_barriers);
}

/// The analyzer on select_alg's programs for every operator, at every boundary count of
/// one dtype (rotating with the topology) and in every mode: all checks pass, and no rank
/// even asks for a broken link.
#[test]
fn selected_programs_pass_the_analyzer_and_avoid_broken_links() {
    let dtypes = [DataType::F32, DataType::I32, DataType::Bf16];
    for (t, pairs) in BROKEN.into_iter().enumerate() {
        let topology = mesh8_without(pairs);
        for kind in OpKind::ALL {
            for case in cases(kind, 8, SMALL_CCL_BYTES) {
                let op = &case.ops[0];
                let first_op = op.op == ReduceOp::ALL[0] || !kind.reduces();
                if kind != OpKind::Barrier && (op.dtype != dtypes[t] || !first_op) {
                    continue;
                }
                // A relayed point-to-point pair carries at most what the relays' slots
                // hold per call (a typed error beyond; see `relay_p2p`).
                if kind.is_p2p() && op.count * op.dtype.size() > SMALL_CCL_BYTES {
                    continue;
                }
                let config = Config {
                    topology: Some(topology.clone()),
                    zero_copy: case.zero_copy,
                    ccl_buffer_bytes: SMALL_CCL_BYTES,
                    ..Config::default()
                };
                let what = format!("{kind} broken {pairs:?} count {} {case:?}", op.count);
                let rec = Recording::record_each(&case.ops, case.in_place, config)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let report = analyze(&rec);
                assert!(report.passed(), "{what} ({}):\n{report}", rec.executor);
                assert_no_broken_peer(&rec, &topology, &what);
            }
        }
    }
}

fn assert_no_broken_peer(rec: &Recording, topology: &Topology, what: &str) {
    for (rank, r) in rec.ranks.iter().enumerate() {
        let peers: Vec<usize> = match &r.request.peers {
            Peers::All => (0..8).filter(|&p| p != rank).collect(),
            Peers::List(list) => list.clone(),
        };
        for p in peers {
            assert!(
                !topology.is_broken(rank, p),
                "{what}: {} on rank {rank} asks for the broken link to {p}",
                rec.executor
            );
        }
    }
}

/// The communicator refuses a broken link outright: forcing an executor that needs it is
/// an error naming the link, not a hang.
#[test]
fn forcing_an_executor_over_a_broken_link_is_refused() {
    let mut config = Config {
        topology: Some(mesh8_without(&[(0, 1)])),
        ..Config::default()
    };
    config.algo.set(Some(OpKind::AllReduce), "mesh");
    let comms = Communicator::init_all(8, config).expect("init");
    let op = OpParam::all_reduce(1024, DataType::F32, ReduceOp::Sum);
    let err = comms[0]
        .framework()
        .prepare(&op, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mesh"), "{err}");
}
