//! The cuda backend's path across processes without a GPU: ranks joined with `init_rank`
//! (threads of this process, each with a device of its own and its transport to the
//! others, as processes have) on the `staged-host` kind, which stages every call's
//! device spans through host memory as the cuda backend does for a job of processes,
//! with host memory standing for the GPU's. Every operator's cases are bound as device
//! spans and compared with the reference; a graph whose second step reads what its
//! first wrote runs step by step with the right values. `processes.rs` runs every
//! operator in real processes.

use oxccl::framework::transport::TransportChoice;
use oxccl::{Communicator, Config, DataType, OpCall, OpKind, OpParam, ReduceOp, UserBuffers};
use oxccl_graph::Capture;
use oxccl_tests::every::every_operator;
use oxccl_tests::staged_host::{device_binding, span_of, STAGED_HOST};
use oxccl_tests::SMALL_CCL_BYTES;
use std::time::Duration;

fn join(n: usize, transport: TransportChoice) -> Vec<Communicator> {
    let config = Config {
        device: STAGED_HOST.into(),
        transport,
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        exec_timeout: Duration::from_secs(30),
        ..Config::default()
    };
    let joined = oxccl_tests::join_ranks(n, |_| config.clone());
    joined.into_iter().map(Result::unwrap).collect()
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

/// Each rank's graph: an AllReduce (sum) of its input into `mid`, then an in-place
/// AllReduce (sum) of `mid`, which reads what the first step wrote: a device that ran
/// the second step before the first copied its output back would read stale bytes.
/// Launched twice from each rank's thread, with new inputs.
#[test]
fn a_graph_whose_step_reads_the_last_one_s_output_runs_step_by_step() {
    let comms = join(3, TransportChoice::Shm);
    let n = comms.len();
    let count = 5000;
    let param = OpParam::all_reduce(count, DataType::I32, ReduceOp::Sum);
    let input = |rank: usize, launch: usize| -> Vec<i32> {
        (0..count)
            .map(|i| (rank * 10 + launch * 100 + i % 7) as i32)
            .collect()
    };
    std::thread::scope(|s| {
        for comm in &comms {
            let param = &param;
            s.spawn(move || {
                let bytes = |v: &mut Vec<i32>| bytemuck::cast_slice_mut::<i32, u8>(v).to_vec();
                let mut send = bytes(&mut input(comm.rank(), 0));
                let mut mid = vec![0u8; send.len()];
                // Device spans are addresses: both calls name `mid` (the vectors outlive
                // every launch and are not touched while one runs).
                let calls = |send: &mut Vec<u8>, mid: &mut Vec<u8>| {
                    let (send, mid) = (span_of(send), span_of(mid));
                    let first = UserBuffers::Device {
                        input: send,
                        output: mid,
                        in_place: false,
                    };
                    let second = UserBuffers::Device {
                        input: mid,
                        output: mid,
                        in_place: true,
                    };
                    (
                        OpCall::new(param.clone(), first),
                        OpCall::new(param.clone(), second),
                    )
                };
                let mut capture = Capture::new();
                {
                    let (first, second) = calls(&mut send, &mut mid);
                    capture.record(&first).unwrap();
                    capture.record(&second).unwrap();
                }
                let graph = capture.compile(comm).unwrap();
                for launch in 0..2 {
                    send = bytes(&mut input(comm.rank(), launch));
                    let (first, second) = calls(&mut send, &mut mid);
                    graph.launch(comm, vec![first, second]).unwrap();
                    let got: Vec<i32> = bytemuck::cast_slice(&mid).to_vec();
                    let want: Vec<i32> = (0..count)
                        .map(|i| n as i32 * (0..n).map(|r| input(r, launch)[i]).sum::<i32>())
                        .collect();
                    assert_eq!(got, want, "rank {}, launch {launch}", comm.rank());
                }
            });
        }
    });
}

/// A Reduce to rank 1 on device spans: the root gets the sum, and the other ranks'
/// receive buffers come back as they were (what the cuda test on a GPU checks too).
#[test]
fn a_reduce_leaves_the_non_roots_device_receive_buffers_as_they_were() {
    let comms = join(3, TransportChoice::Shm);
    for count in [1usize, 1001, 20_000] {
        let param = OpParam::rooted(OpKind::Reduce, count, DataType::I32, ReduceOp::Sum, 1);
        let input =
            |r: usize| -> Vec<i32> { (0..count).map(|i| (r * 5 + i % 11) as i32).collect() };
        std::thread::scope(|s| {
            for comm in &comms {
                let param = &param;
                s.spawn(move || {
                    let r = comm.rank();
                    let send: Vec<u8> = bytemuck::cast_slice(&input(r)).to_vec();
                    let mut recv: Vec<u8> = bytemuck::cast_slice(&vec![-7i32; count]).to_vec();
                    let user = device_binding(false, &send, &mut recv);
                    comm.execute(param, user).unwrap();
                    let got: Vec<i32> = bytemuck::cast_slice(&recv).to_vec();
                    let want: Vec<i32> = match r {
                        1 => (0..count)
                            .map(|i| (0..3).map(|q| input(q)[i]).sum())
                            .collect(),
                        _ => vec![-7; count],
                    };
                    assert_eq!(got, want, "rank {r}, count {count}");
                });
            }
        });
    }
}
