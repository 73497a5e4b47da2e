//! The RDMA transport under real communicators: ranks joined with `init_rank` (threads of
//! this process, each with a device of its own, its TCP listener on loopback and a NIC of
//! its own on the fake verbs fabric, since CI has no RDMA device), `OXCCL_TRANSPORT=rdma`
//! forcing RDMA between them. Every operator runs over the queue pairs and is compared
//! with the reference. What a real NIC adds (the verbs calls of `ib.rs`) is not run here.

use oxccl::framework::transport::{RdmaNic, TransportChoice};
use oxccl::platform::transport::rdma::fake::Fabric;
use oxccl::platform::transport::rdma::verbs::SendOp;
use oxccl::{Communicator, Config};
use oxccl_tests::every::every_operator;
use oxccl_tests::SMALL_CCL_BYTES;
use std::time::Duration;

fn config(transport: TransportChoice, nic: Option<RdmaNic>) -> Config {
    Config {
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        exec_timeout: Duration::from_secs(30),
        transport,
        rdma_nic: nic,
        ..Config::default()
    }
}

/// `n` ranks joined over `transport`, rank r with `nic(r)`.
fn join(
    n: usize,
    transport: TransportChoice,
    nic: impl Fn(usize) -> Option<RdmaNic>,
) -> Vec<Result<Communicator, oxccl::Error>> {
    oxccl_tests::join_ranks(n, |r| config(transport, nic(r)))
}

#[test]
fn every_operator_over_rdma_between_four_ranks() {
    every_operator_over_rdma(4);
}

#[test]
fn every_operator_over_rdma_between_three_ranks() {
    every_operator_over_rdma(3);
}

/// Every operator's full matrix on `n` ranks over RDMA, each rank's NIC used.
fn every_operator_over_rdma(n: usize) {
    let fabric = Fabric::new();
    let nics: Vec<_> = (0..n)
        .map(|r| fabric.nic(&format!("fake_{r}")).expect("a fake NIC"))
        .collect();
    let comms: Vec<Communicator> =
        join(n, TransportChoice::Rdma, |r| Some(RdmaNic(nics[r].clone())))
            .into_iter()
            .map(|c| c.expect("joined"))
            .collect();
    every_operator(&comms, false).expect("every operator over RDMA");
    for (r, nic) in nics.iter().enumerate() {
        let log = nic.log();
        let posts = log
            .iter()
            .filter(|w| matches!(w.op, SendOp::WriteImm(_)))
            .count();
        let writes = log.len() - posts;
        assert!(
            posts > 100 && writes > 100,
            "rank {r}: {writes} writes, {posts} posts"
        );
    }
}

#[test]
fn forced_rdma_without_a_port_is_refused_naming_why() {
    let results = join(2, TransportChoice::Rdma, |_| None);
    for result in results {
        let Err(err) = result else {
            panic!("joined without a transport")
        };
        let text = oxccl::framework::error::chain(&err)
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(": ");
        assert!(text.contains("rdma: this rank has no RDMA port"), "{text}");
        assert!(text.contains("tcp: OXCCL_TRANSPORT=rdma"), "{text}");
    }
}
