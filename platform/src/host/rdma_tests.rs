//! Host devices whose ranks reach each other over RDMA through the fake verbs layer: two
//! devices of this process stand for two hosts, each with a NIC of its own on one fake
//! fabric, and their TCP connections on loopback carry the rest (connect info, epochs,
//! scratch sizes, failures).

use super::shm_tests::{request, run_ranks, run_requests, swap_and_check, swap_through};
use super::tcp_tests::{double_into_peers_and_check, pair_over, pair_timed};
use super::HostDevice;
use crate::device::{CompileRequest, Device};
use crate::error::{AbortCause, DeviceError};
use crate::ir::{Buf, RankProgram, Slice};
use crate::transport::rdma::fake::{Fabric, FakeNic};
use crate::transport::rdma::verbs::SendOp;
use crate::transport::rdma::{RdmaError, VerbsError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two devices over RDMA, and their NICs (a's, b's).
fn rdma_pair(timeout: Duration) -> (HostDevice, HostDevice, Arc<FakeNic>, Arc<FakeNic>) {
    let fabric = Fabric::new();
    let (na, nb) = (fabric.nic("mlx5_a").unwrap(), fabric.nic("mlx5_b").unwrap());
    let (a, b) = pair_over(timeout, Some((na.clone(), nb.clone())));
    (a, b, na, nb)
}

#[test]
fn ranks_of_two_devices_exchange_data_and_signals_over_rdma() {
    let (a, b, na, nb) = rdma_pair(Duration::from_secs(20));
    for (len, epoch) in [(4096, 1), (0, 2), (1 << 16, 3), (7, 4)] {
        swap_and_check(&a, &b, len, epoch);
    }
    // The data and posts went over the queue pairs: a WRITE and a WRITE_WITH_IMM per
    // rank and call that moves bytes, an immediate alone for the empty one.
    for nic in [&na, &nb] {
        let log = nic.log();
        let writes = log.iter().filter(|w| w.op == SendOp::Write).count();
        let posts = log
            .iter()
            .filter(|w| matches!(w.op, SendOp::WriteImm(_)))
            .count();
        assert_eq!((writes, posts), (2 * 3, 2 * 4), "{log:?}");
    }
}

#[test]
fn a_reduction_into_an_rdma_peer_is_staged_through_the_bounce_buffer() {
    let (a, b, na, _) = rdma_pair(Duration::from_secs(20));
    double_into_peers_and_check(&a, &b);
    let log = na.log();
    assert!(
        log.iter()
            .any(|w| w.op == SendOp::Write && w.local.1 == 1001 * 4),
        "{log:?}"
    );
}

/// [`swap_through`] a scratch set, 8 bytes in.
fn swap_through_scratch(dev: &HostDevice, r: usize, len: usize) -> RankProgram {
    swap_through(dev, r, len, (Buf::Scratch, 8))
}

/// Run `programs` of `dev` (each with its peer) on scratch `scratch` at epoch 2.
fn run_on_scratch(
    dev: &HostDevice,
    programs: Vec<(RankProgram, usize)>,
    scratch: crate::device::ScratchId,
    inputs: &[Vec<u8>],
    outputs: &mut [Vec<u8>],
) -> Vec<Result<(), DeviceError>> {
    let requests = programs.into_iter().map(|(p, peer)| CompileRequest {
        scratch: Some(scratch),
        ..request(p, vec![peer])
    });
    run_requests(dev, requests.collect(), (inputs, outputs), 2)
}

#[test]
fn a_scratch_allocated_after_the_links_is_registered_and_written_over_rdma() {
    let (a, b, _, _) = rdma_pair(Duration::from_secs(20));
    // The links exist before the scratch does: its region reaches the peers later.
    swap_and_check(&a, &b, 64, 1);
    let len = 3000;
    let (ida, idb) = std::thread::scope(|s| {
        let idb = s.spawn(|| b.alloc_scratch(len + 8).expect("scratch b"));
        (
            a.alloc_scratch(len + 8).expect("scratch a"),
            idb.join().unwrap(),
        )
    });
    assert_eq!(ida, idb);
    let input = |r: usize| (0..len).map(|i| (i * 7 + r) as u8).collect::<Vec<u8>>();
    let (mut out_a, mut out_b) = (vec![vec![0u8; len]; 2], vec![vec![0u8; len]; 2]);
    let (in_a, in_b) = ([input(0), input(1)], [input(2), input(3)]);
    std::thread::scope(|s| {
        let rb = s.spawn(|| {
            let programs = vec![
                (swap_through_scratch(&b, 2, len), 0),
                (swap_through_scratch(&b, 3, len), 1),
            ];
            run_on_scratch(&b, programs, idb, &in_b, &mut out_b)
        });
        let programs = vec![
            (swap_through_scratch(&a, 0, len), 2),
            (swap_through_scratch(&a, 1, len), 3),
        ];
        for r in run_on_scratch(&a, programs, ida, &in_a, &mut out_a) {
            r.expect("rank of a");
        }
        for r in rb.join().unwrap() {
            r.expect("rank of b");
        }
    });
    assert_eq!(out_a, [input(2), input(3)]);
    assert_eq!(out_b, [input(0), input(1)]);
}

/// Run one swap of `len` bytes at `epoch` and return every rank's result.
fn swap_results(a: &HostDevice, b: &HostDevice, epoch: u64) -> Vec<Result<(), DeviceError>> {
    use super::shm_tests::swap;
    let len = 256;
    let (mut out_a, mut out_b) = (vec![vec![0u8; len]; 2], vec![vec![0u8; len]; 2]);
    let inputs = [vec![1u8; len], vec![2u8; len]];
    std::thread::scope(|s| {
        let rb = s.spawn(|| {
            let programs = vec![(swap(b, 2, len), vec![0]), (swap(b, 3, len), vec![1])];
            run_ranks(b, programs, &inputs, &mut out_b, epoch)
        });
        let programs = vec![(swap(a, 0, len), vec![2]), (swap(a, 1, len), vec![3])];
        let mut results = run_ranks(a, programs, &inputs, &mut out_a, epoch);
        results.extend(rb.join().unwrap());
        results
    })
}

/// True when `err` is, or was caused on another rank by, an RDMA error that `is` accepts.
fn rdma_error(err: &DeviceError, is: &impl Fn(&RdmaError) -> bool) -> bool {
    match err {
        DeviceError::Rdma(e) => is(e),
        DeviceError::Aborted {
            cause: AbortCause::PeerFailed { error, .. },
            ..
        } => rdma_error(error, is),
        _ => false,
    }
}

#[test]
fn a_failed_queue_pair_fails_the_call_naming_the_peer_and_releases_the_other_host() {
    let timeout = Duration::from_secs(30);
    let (a, b, na, _) = rdma_pair(timeout);
    swap_and_check(&a, &b, 64, 1);
    // Device a's queue pairs: the two it opened (one per local rank) and the two it
    // accepted from b.
    for qp in 0..4 {
        na.fail_qp(qp);
    }
    let started = Instant::now();
    let results = swap_results(&a, &b, 2);
    assert!(started.elapsed() < timeout / 2, "released promptly");
    // A send completion in error, or a receive the failed queue pair could not take
    // back: either names a peer on device b.
    let queue_pair = |e: &RdmaError| match e {
        RdmaError::QueuePair { peer, .. } => *peer == 2 || *peer == 3,
        RdmaError::Verbs {
            peer,
            source: VerbsError::QpInError { .. },
            ..
        } => *peer == 2 || *peer == 3,
        _ => false,
    };
    let failed_here = results[..2]
        .iter()
        .filter(|r| r.as_ref().is_err_and(|e| rdma_error(e, &queue_pair)))
        .count();
    assert!(failed_here >= 1, "{results:?}");
    for r in &results[2..] {
        assert!(r.is_err(), "device b's ranks are released too: {results:?}");
    }
}

#[test]
fn a_lost_completion_fails_the_call_after_the_timeout_naming_the_link() {
    // Device a's link gives up after 2 s; b waits longer, so that a's error comes first
    // rather than b's own timeout waiting for a's data.
    let fabric = Fabric::new();
    let (na, nb) = (fabric.nic("mlx5_a").unwrap(), fabric.nic("mlx5_b").unwrap());
    let timeouts = (Duration::from_secs(2), Duration::from_secs(60));
    let (a, b) = pair_timed(timeouts, Some((na.clone(), nb)));
    swap_and_check(&a, &b, 64, 1);
    na.lose_completions(1);
    let results = swap_results(&a, &b, 2);
    let lost = |e: &RdmaError| matches!(e, RdmaError::LostCompletion { rank: 0 | 1, .. });
    assert!(
        results
            .iter()
            .any(|r| r.as_ref().is_err_and(|e| rdma_error(e, &lost))),
        "{results:?}"
    );
}

#[test]
fn a_peer_without_rdma_refuses_the_link_and_the_compile_that_waited_fails_at_once() {
    // Device b was not told about RDMA: a's links to it cannot be made.
    let timeout = Duration::from_secs(30);
    let fabric = Fabric::new();
    let nic = fabric.nic("mlx5_a").unwrap();
    let (a, b) = super::tcp_tests::pair_half_rdma(timeout, nic);
    let mut p = RankProgram::new(0, 1);
    p.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 8),
        Slice::new(2, Buf::CclIn, 0, 8),
    );
    let started = Instant::now();
    let err = a.compile(request(p, vec![2])).map(|_| ()).unwrap_err();
    assert!(started.elapsed() < timeout / 2, "not after the timeout");
    // b refused the frame as rank 0's fault, stopped, and said so.
    assert!(
        matches!(&err, DeviceError::Aborted { rank: 0, .. }),
        "{err:?}"
    );
    drop(b);
}
