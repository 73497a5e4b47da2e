//! With broken links (still connected), the built-in selection finds an executor that
//! avoids them, and it produces correct data on the host device.

use oxccl::{Communicator, Config, DataType, OpParam, ReduceOp, Topology};
use oxccl_tests::{full_matrix, run_all_reduce, Setup};

fn broken(pairs: &[(usize, usize)]) -> Topology {
    pairs.iter().fold(Topology::single_server(8), |t, &(a, b)| {
        t.with_broken(a, b).unwrap()
    })
}

#[test]
fn selection_avoids_broken_links_and_the_data_is_right() {
    for pairs in [
        vec![(0, 1)],
        vec![(0, 1), (2, 3)],
        vec![(0, 1), (2, 5), (3, 4)],
    ] {
        let topology = broken(&pairs);
        let comms = Communicator::init_all(
            8,
            Config {
                topology: Some(topology.clone()),
                ..Config::default()
            },
        )
        .unwrap();
        let op = OpParam::all_reduce(1 << 20, DataType::F32, ReduceOp::Sum);
        let chosen = comms[0].framework().prepare(&op, false).unwrap().selection;
        // The ring executors follow a Hamiltonian cycle of healthy links; the double ring
        // (both directions of it) is preferred.
        assert_eq!(
            chosen.executor.name, "double-ring",
            "{pairs:?}: {}",
            chosen.reason
        );
        for zero_copy in [true, false] {
            let setup = Setup {
                algo: None,
                topology: topology.clone(),
                zero_copy,
                ccl_bytes: 1 << 20,
            };
            let cases: Vec<_> = full_matrix(8, 1 << 20)
                .into_iter()
                .filter(|c| c.op == ReduceOp::Sum || c.count > 5000)
                .collect();
            run_all_reduce(&setup, &cases).unwrap();
        }
    }
}
