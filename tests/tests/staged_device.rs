//! The cuda backend's path across processes without a GPU: ranks joined with `init_rank`
//! (threads of this process, each with a device of its own and its transport to the
//! others, as processes have) on the `staged-host` kind, which stages every call's
//! device spans through host memory as the cuda backend does for a job of processes,
//! with host memory standing for the GPU's. Every operator's cases are bound as device
//! spans and compared with the reference. `processes.rs` runs the same in real
//! processes.

use oxccl::framework::transport::TransportChoice;
use oxccl::{Communicator, Config, UniqueId};
use oxccl_tests::every::every_operator;
use oxccl_tests::staged_host::STAGED_HOST;
use oxccl_tests::SMALL_CCL_BYTES;
use std::time::Duration;

fn join(n: usize, transport: TransportChoice) -> Vec<Communicator> {
    let id = UniqueId::create(n, Duration::from_secs(60)).expect("root");
    let config = Config {
        device: STAGED_HOST.into(),
        transport,
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        exec_timeout: Duration::from_secs(30),
        ..Config::default()
    };
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..n)
            .map(|r| {
                let (id, config) = (&id, config.clone());
                s.spawn(move || Communicator::init_rank(id, n, r, config))
            })
            .collect();
        joins
            .into_iter()
            .map(|j| j.join().unwrap().unwrap())
            .collect()
    })
}

#[test]
fn every_operator_on_device_spans_across_three_ranks_through_shared_memory() {
    let comms = join(3, TransportChoice::Shm);
    assert!(comms.iter().all(oxccl_tests::staged_host::runs_staged));
    every_operator(&comms, false).unwrap();
}

#[test]
fn every_operator_on_device_spans_across_four_ranks_over_tcp() {
    let comms = join(4, TransportChoice::Tcp);
    every_operator(&comms, true).unwrap();
}
