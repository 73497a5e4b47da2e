//! Device buffers in the eager API (`DeviceBuffer`, the `_device` calls): a communicator
//! on host memory refuses them (checked on every machine); on a machine with a GPU,
//! collectives on device buffers of virtual ranks of GPU 0 against the expected values,
//! and copies of the wrong length refused with a typed error. Tests that need a GPU skip
//! with a printed reason.

#![cfg(feature = "cuda")]

use oxccl::platform::cuda::CudaError;
use oxccl::platform::ConfigFault;
use oxccl::{
    Communicator, Config, DataType, DeviceBuffer, DeviceError, DeviceSpan, Error, OpParam,
    ReduceOp, Topology, UserBuffers,
};
use std::time::Duration;

fn config(device: &str, ranks: usize) -> Config {
    Config {
        device: device.into(),
        topology: Some(Topology::single_server(ranks)),
        exec_timeout: Duration::from_secs(20),
        ccl_buffer_bytes: 1 << 20,
        gpus: vec![0],
        ..Config::default()
    }
}

/// `ranks` virtual ranks of GPU 0, or `None` (and why, printed) without a GPU.
fn gpu_comms(ranks: usize) -> Option<Vec<Communicator>> {
    match oxccl::platform::cuda::gpu_count() {
        Ok(0) => {
            eprintln!("skipped: the CUDA driver reports no GPU");
            None
        }
        Ok(_) => Some(Communicator::init_all(ranks, config("cuda", ranks)).unwrap()),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

fn is_device_memory_refusal(err: &Error) -> bool {
    matches!(
        err,
        Error::Device(DeviceError::Config(ConfigFault::DeviceMemory { .. }))
    ) || oxccl::framework::error::chain(err).any(|e| {
        matches!(
            e.downcast_ref::<DeviceError>(),
            Some(DeviceError::Config(ConfigFault::DeviceMemory { .. }))
        )
    })
}

fn is_copy_length(err: &Error, source: usize, destination: usize) -> bool {
    matches!(
        err,
        Error::Device(DeviceError::Cuda(CudaError::CopyLength {
            source_len,
            destination_len,
            ..
        })) if (*source_len, *destination_len) == (source, destination)
    )
}

#[test]
fn a_host_communicator_refuses_to_allocate_device_buffers() {
    let comms = Communicator::init_all(2, config("host", 2)).unwrap();
    let err = DeviceBuffer::<f32>::zeroed(&comms[0], 16).unwrap_err();
    assert!(is_device_memory_refusal(&err), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("host") && text.contains("OXCCL_DEVICE=cuda"),
        "the refusal says what to do: {text}"
    );
    let err = DeviceBuffer::from_host(&comms[1], &[1u8, 2, 3]).unwrap_err();
    assert!(is_device_memory_refusal(&err), "{err}");
}

#[test]
fn a_host_communicator_refuses_device_spans_in_a_call() {
    let comms = Communicator::init_all(1, config("host", 1)).unwrap();
    let span = DeviceSpan {
        addr: 0x7000_0000,
        len: 64,
    };
    let user = UserBuffers::Device {
        input: span,
        output: span,
        in_place: true,
    };
    let op = OpParam::all_reduce(16, DataType::F32, ReduceOp::Sum);
    let err = comms[0].execute(&op, user).unwrap_err();
    assert!(is_device_memory_refusal(&err), "{err}");
}

#[test]
fn all_reduce_on_device_buffers_of_two_virtual_ranks() {
    let Some(comms) = gpu_comms(2) else { return };
    // 300_000 floats are past the 1 MiB CCL buffers: the call stages in several rounds.
    for count in [0usize, 1, 7, 1000, 300_000] {
        std::thread::scope(|s| {
            for comm in &comms {
                s.spawn(move || {
                    let r = comm.rank() as f32;
                    let data: Vec<f32> = (0..count).map(|i| r + (i % 13) as f32).collect();
                    let send = DeviceBuffer::from_host(comm, &data).unwrap();
                    let mut recv = DeviceBuffer::<f32>::zeroed(comm, count).unwrap();
                    comm.all_reduce_device(&send, &mut recv, ReduceOp::Sum)
                        .unwrap_or_else(|e| panic!("rank {}: {e}", comm.rank()));
                    let got = recv.to_host().unwrap();
                    for (i, v) in got.iter().enumerate() {
                        let want = 1.0 + 2.0 * (i % 13) as f32;
                        assert_eq!(*v, want, "count {count}, element {i}");
                    }
                    // In place, the result summed again: twice the sum over both ranks.
                    let mut buf = DeviceBuffer::from_host(comm, &got).unwrap();
                    comm.all_reduce_in_place_device(&mut buf, ReduceOp::Sum)
                        .unwrap();
                    let doubled = buf.to_host().unwrap();
                    assert!(doubled.iter().zip(&got).all(|(d, g)| *d == 2.0 * g));
                });
            }
        });
    }
}

#[test]
fn gather_scatter_and_broadcast_on_device_buffers() {
    let Some(comms) = gpu_comms(2) else { return };
    let count = 4096;
    std::thread::scope(|s| {
        for comm in &comms {
            s.spawn(move || {
                let r = comm.rank() as i32;
                let mine: Vec<i32> = (0..count).map(|i| 10 * r + i).collect();
                let send = DeviceBuffer::from_host(comm, &mine).unwrap();
                let mut all = DeviceBuffer::<i32>::zeroed(comm, 2 * count as usize).unwrap();
                comm.all_gather_device(&send, &mut all).unwrap();
                let want: Vec<i32> = (0..2)
                    .flat_map(|q| (0..count).map(move |i| 10 * q + i))
                    .collect();
                assert_eq!(all.to_host().unwrap(), want);

                let mut block = DeviceBuffer::<i32>::zeroed(comm, count as usize).unwrap();
                comm.reduce_scatter_device(&all, &mut block, ReduceOp::Sum)
                    .unwrap();
                let at = comm.rank() * count as usize;
                let want: Vec<i32> = want[at..at + count as usize]
                    .iter()
                    .map(|v| 2 * v)
                    .collect();
                assert_eq!(block.to_host().unwrap(), want);

                let mut out = DeviceBuffer::<i32>::zeroed(comm, count as usize).unwrap();
                comm.broadcast_device(&send, &mut out, 1).unwrap();
                let root: Vec<i32> = (0..count).map(|i| 10 + i).collect();
                assert_eq!(out.to_host().unwrap(), root);
            });
        }
    });
}

#[test]
fn copies_of_the_wrong_length_are_typed_errors() {
    let Some(comms) = gpu_comms(1) else { return };
    let comm = &comms[0];
    let mut buf = DeviceBuffer::<f32>::zeroed(comm, 8).unwrap();
    assert_eq!((buf.len(), buf.span().len, buf.ordinal()), (8, 32, 0));
    let err = buf.copy_from_host(&[1.0; 7]).unwrap_err();
    assert!(is_copy_length(&err, 28, 32), "{err}");
    let mut short = vec![0f32; 9];
    let err = buf.copy_to_host(&mut short).unwrap_err();
    assert!(is_copy_length(&err, 32, 36), "{err}");
    let other = DeviceBuffer::<f32>::zeroed(comm, 4).unwrap();
    let err = buf.copy_from_device(&other).unwrap_err();
    assert!(is_copy_length(&err, 16, 32), "{err}");
    // Nothing was written by the refused copies.
    assert_eq!(buf.to_host().unwrap(), vec![0.0; 8]);
    let data: Vec<f32> = (0..8).map(|i| i as f32).collect();
    buf.copy_from_host(&data).unwrap();
    let mut copy = DeviceBuffer::<f32>::zeroed(comm, 8).unwrap();
    copy.copy_from_device(&buf).unwrap();
    assert_eq!(copy.to_host().unwrap(), data);
    // Mismatched buffers of a call: the same argument error as for slices.
    let mut recv = DeviceBuffer::<f32>::zeroed(comm, 9).unwrap();
    let err = comm
        .all_reduce_device(&buf, &mut recv, ReduceOp::Sum)
        .unwrap_err();
    assert!(matches!(err, Error::Arg(_)), "{err}");
}

#[test]
fn a_host_communicator_refuses_a_device_buffer_in_a_call() {
    let Some(gpu) = gpu_comms(1) else { return };
    let send = DeviceBuffer::from_host(&gpu[0], &[1f32; 64]).unwrap();
    let mut recv = DeviceBuffer::<f32>::zeroed(&gpu[0], 64).unwrap();
    let host = Communicator::init_all(1, config("host", 1)).unwrap();
    let err = host[0]
        .all_reduce_device(&send, &mut recv, ReduceOp::Sum)
        .unwrap_err();
    assert!(is_device_memory_refusal(&err), "{err}");
}

#[test]
fn the_copy_bound_counts_the_ranks_sharing_a_gpu() {
    let Some(comms) = gpu_comms(4) else { return };
    let cuda = comms[0].cuda_device().unwrap();
    assert_eq!(cuda.ranks_sharing_gpu(0).unwrap(), 4);
    let bound = cuda.copy_bound(0, 1 << 20, 3).unwrap();
    assert_eq!((bound.copies, bound.bytes, bound.ordinal), (4, 1 << 20, 0));
    assert!(
        bound.seconds > 0.0 && bound.per_copy_gbps() > 0.0,
        "{bound:?}"
    );
}
