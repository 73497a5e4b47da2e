//! Ranks of a job on GPUs: `init_rank` with the cuda device, each rank with a device of
//! its own joined to the others through shared memory or TCP on loopback, as the
//! processes of a job are (threads of this process stand for them here; `oxccl perf
//! --procs N --device cuda` runs real processes). Calls on device buffers stage through
//! host memory and run over the host transports.
//!
//! Without a CUDA driver (CI), every rank of such a job fails its init with the driver's
//! typed error, and none waits for the others. With a GPU, every rank on GPU 0 (the
//! device machine has one): the `_device` calls on counts 0, 1, odd and past the CCL
//! buffer against host-computed values, every operator on host slices against the
//! reference, and a Reduce whose non-roots' receive buffers come back untouched.

#![cfg(feature = "cuda")]

use oxccl::framework::transport::TransportChoice;
use oxccl::platform::cuda::CudaError;
use oxccl::{
    Communicator, Config, DataType, DeviceBuffer, DeviceError, Error, OpKind, OpParam, ReduceOp,
};
use oxccl_tests::every::every_operator;
use oxccl_tests::SMALL_CCL_BYTES;
use std::time::Duration;

fn config(transport: TransportChoice) -> Config {
    Config {
        device: "cuda".into(),
        transport,
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        exec_timeout: Duration::from_secs(30),
        gpus: vec![0],
        ..Config::default()
    }
}

/// `n` ranks joined over `transport`, each from a thread of its own.
fn join(n: usize, transport: TransportChoice) -> Vec<Result<Communicator, Error>> {
    oxccl_tests::join_ranks(n, |_| config(transport))
}

/// The job's communicators when this machine has a GPU; `None` (and why, printed)
/// otherwise.
fn gpu_job(n: usize, transport: TransportChoice) -> Option<Vec<Communicator>> {
    match oxccl::platform::cuda::gpu_count() {
        Ok(0) => {
            eprintln!("skipped: the CUDA driver reports no GPU");
            None
        }
        Ok(_) => Some(join(n, transport).into_iter().map(Result::unwrap).collect()),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn without_a_driver_every_rank_of_a_job_fails_its_init_with_the_driver_s_error() {
    if oxccl::platform::cuda::gpu_count().is_ok() {
        eprintln!("skipped: this machine has a CUDA driver (the GPU tests below run instead)");
        return;
    }
    for transport in [TransportChoice::Shm, TransportChoice::Tcp] {
        for (rank, joined) in join(3, transport).into_iter().enumerate() {
            let err = joined.expect_err("no driver");
            let named = matches!(err, Error::Device(DeviceError::Cuda(CudaError::NoDriver)))
                || oxccl::framework::error::chain(&err)
                    .any(|e| matches!(e.downcast_ref(), Some(CudaError::NoDriver)));
            assert!(named, "rank {rank} over {transport:?}: {err}");
        }
    }
}

#[test]
fn device_buffers_across_three_ranks_through_shared_memory() {
    device_calls_across(3, TransportChoice::Shm);
}

#[test]
fn device_buffers_across_three_ranks_over_tcp() {
    device_calls_across(3, TransportChoice::Tcp);
}

fn device_calls_across(n: usize, transport: TransportChoice) {
    let Some(comms) = gpu_job(n, transport) else {
        return;
    };
    for comm in &comms {
        assert!(comm.cuda_device().unwrap().staged(), "rank {}", comm.rank());
    }
    // 20 000 floats are past the CCL buffers: the calls stage in several rounds.
    for count in [0usize, 1, 1001, 20_000] {
        std::thread::scope(|s| {
            for comm in &comms {
                s.spawn(move || {
                    device_calls(comm, count)
                        .unwrap_or_else(|e| panic!("rank {}, count {count}: {e}", comm.rank()))
                });
            }
        });
    }
}

/// Every `_device` call of `comm`'s rank on `count` elements, checked against the values
/// the host computes.
fn device_calls(comm: &Communicator, count: usize) -> Result<(), Error> {
    let (n, r) = (comm.size(), comm.rank());
    let mine = |r: usize| -> Vec<i32> { (0..count).map(|i| (r * 1000 + i % 97) as i32).collect() };
    let send = DeviceBuffer::from_host(comm, &mine(r))?;

    let mut sum = DeviceBuffer::<i32>::zeroed(comm, count)?;
    comm.all_reduce_device(&send, &mut sum, ReduceOp::Sum)?;
    let want: Vec<i32> = (0..count)
        .map(|i| (0..n).map(|q| mine(q)[i]).sum())
        .collect();
    assert_eq!(sum.to_host()?, want, "AllReduce sum");

    let mut max = DeviceBuffer::from_host(comm, &mine(r))?;
    comm.all_reduce_in_place_device(&mut max, ReduceOp::Max)?;
    assert_eq!(max.to_host()?, mine(n - 1), "AllReduce max in place");

    let mut all = DeviceBuffer::<i32>::zeroed(comm, n * count)?;
    comm.all_gather_device(&send, &mut all)?;
    let gathered: Vec<i32> = (0..n).flat_map(mine).collect();
    assert_eq!(all.to_host()?, gathered, "AllGather");

    let mut block = DeviceBuffer::<i32>::zeroed(comm, count)?;
    comm.reduce_scatter_device(&all, &mut block, ReduceOp::Sum)?;
    let doubled: Vec<i32> = gathered[r * count..(r + 1) * count]
        .iter()
        .map(|v| n as i32 * v)
        .collect();
    assert_eq!(block.to_host()?, doubled, "ReduceScatter");

    let mut from_last = DeviceBuffer::<i32>::zeroed(comm, count)?;
    comm.broadcast_device(&send, &mut from_last, n - 1)?;
    assert_eq!(from_last.to_host()?, mine(n - 1), "Broadcast");

    // A Reduce to rank 0: a non-root's receive buffer is left as it was.
    let sentinel = vec![-7i32; count];
    let mut reduced = DeviceBuffer::from_host(comm, &sentinel)?;
    let op = OpParam::rooted(OpKind::Reduce, count, DataType::I32, ReduceOp::Sum, 0);
    comm.execute(&op, DeviceBuffer::out_of_place(&send, &mut reduced))?;
    let expected = if r == 0 { &want } else { &sentinel };
    assert_eq!(&reduced.to_host()?, expected, "Reduce");
    Ok(())
}

#[test]
fn every_operator_on_host_slices_across_four_ranks_of_a_gpu_job() {
    let Some(comms) = gpu_job(4, TransportChoice::Shm) else {
        return;
    };
    every_operator(&comms, true).unwrap();
}
