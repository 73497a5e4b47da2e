//! Every registered send/recv executor delivers exactly the matching sends on every shape,
//! for every dtype: a single pair, a ring of sends, every pair at once with the items
//! listed in a different order on each rank (which must not deadlock), several items to
//! one peer (one of them empty), sends to self, and a pair larger than the CCL buffer,
//! zero-copy and staged; and passes the analyzer on a few of them.

use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::op::VLayout;
use oxccl::{Config, DataType, OpKind, ReduceOp, Topology};
use oxccl_tests::vector::{p2p_matrix, run_vector, send_recv, VCase};
use oxccl_tests::{check_on_every_shape, SMALL_CCL_BYTES};

/// The send/recv patterns on `n` ranks, as `(from, to, count)` transfers.
fn patterns(n: usize) -> Vec<Vec<(usize, usize, usize)>> {
    let big = SMALL_CCL_BYTES / 2 + 37;
    let ring = |c: &dyn Fn(usize) -> usize| (0..n).map(|r| (r, (r + 1) % n, c(r))).collect();
    vec![
        vec![(0, n - 1, 7)],
        ring(&|r| r % 3 * 5 + 1),
        (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b, (a * 3 + b * 5) % 4 * 3)))
            .collect(),
        (0..n)
            .flat_map(|r| {
                let (next, far) = ((r + 1) % n, (r + 2) % n);
                [(r, next, 5), (r, next, 0), (r, far, 9), (r, next, 1)]
            })
            .collect(),
        (0..n).flat_map(|r| [(r, r, 3), (r, r, 1)]).collect(),
        vec![(0, n / 2, big), (n - 1, 0, 2)],
    ]
}

fn layouts(n: usize) -> Vec<Vec<VLayout>> {
    patterns(n).iter().map(|t| send_recv(n, t)).collect()
}

#[test]
fn p2p() {
    check_on_every_shape("p2p", |setup| {
        let n = setup.topology.ranks();
        run_vector(OpKind::SendRecv, setup, &p2p_matrix(n, &layouts(n)))
    });
}

/// Send/recv executor `algo` passes the analyzer on `topology` for every pattern, both
/// modes.
fn analyze_on(algo: &str, topology: &Topology) {
    for l in layouts(topology.ranks()) {
        for zero_copy in [true, false] {
            let case = VCase {
                dtype: DataType::I32,
                op: ReduceOp::Sum,
                layouts: l.clone(),
                in_place: false,
            };
            let mut config = Config {
                topology: Some(topology.clone()),
                zero_copy,
                ccl_buffer_bytes: 4096,
                ..Config::default()
            };
            config.algo.set(Some(OpKind::SendRecv), algo);
            let rec = Recording::record_each(&case.params(OpKind::SendRecv), false, config)
                .expect("record");
            let report = analyze(&rec);
            assert!(
                report.failures.is_empty(),
                "{algo} on {}, zero_copy {zero_copy}, {case:?}:\n{report}",
                topology.describe()
            );
        }
    }
}

#[test]
fn p2p_passes_the_analyzer() {
    for ranks in [1, 2, 3, 5, 8] {
        analyze_on("p2p", &Topology::single_server(ranks));
    }
}

#[test]
fn put_p2p() {
    check_on_every_shape("put-p2p", |setup| {
        let n = setup.topology.ranks();
        run_vector(OpKind::SendRecv, setup, &p2p_matrix(n, &layouts(n)))
    });
}

/// put-p2p passes the analyzer on the put-only shapes (`tcp8`, `2x8`) and on one server,
/// where it runs in both modes.
#[test]
fn put_p2p_passes_the_analyzer_on_put_only_links() {
    let mut shapes = oxccl_tests::put_only_shapes();
    shapes.push(Topology::single_server(5));
    for topology in shapes {
        analyze_on("put-p2p", &topology);
    }
}
