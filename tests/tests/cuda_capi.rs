//! The C ABI on cuda, as a NCCL caller drives it: `OXCCL_DEVICE=cuda`, every rank of
//! `oxcclCommInitAll` on GPU 0 (`OXCCL_CUDA_DEVICES=0`, virtual ranks), device pointers
//! from the driver, the default stream.
//!
//! Without a CUDA driver (CI), init is refused with the driver's typed error. With a GPU:
//! AllReduce on counts 1, odd and past the CCL buffer, in and out of place; Reduce whose
//! non-roots pass NULL; grouped sends and receives staged through device blocks;
//! `oxcclMemAlloc`'s device memory in a call; a host pointer refused before anything
//! runs; a stream capturing a CUDA graph refused without invalidating the capture; the
//! calling thread's current GPU found, which `oxcclCommInitRank` runs its rank on. The
//! same paths run without a GPU on the tests' `staged-host` kind (`capi_device.rs`).

#![cfg(feature = "cuda")]

mod capi_abi;

use capi_abi::*;
use oxccl::platform::cuda::DeviceBytes;
use oxccl_capi as _;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::Once;

/// `ranks` communicators on GPU 0, or `None` (and why, printed) without a GPU.
fn gpu_comms(ranks: usize) -> Option<Vec<Comm>> {
    match oxccl::platform::cuda::gpu_count() {
        Ok(0) => eprintln!("skipped: the CUDA driver reports no GPU"),
        Ok(_) => return Some(cuda_init_all(ranks).expect("init on the GPU")),
        Err(e) => eprintln!("skipped: {e}"),
    }
    None
}

/// `oxcclCommInitAll` on cuda, every rank on GPU 0, with a CCL buffer of 1 MiB (the
/// smallest `OXCCL_BUFFSIZE`, so that large counts take several loops).
fn cuda_init_all(ranks: usize) -> Result<Vec<Comm>, c_int> {
    static DEVICE: Once = Once::new();
    DEVICE.call_once(|| {
        std::env::set_var("OXCCL_DEVICE", "cuda");
        std::env::set_var("OXCCL_CUDA_DEVICES", "0");
        std::env::set_var("OXCCL_BUFFSIZE", "1");
        std::env::set_var("OXCCL_EXEC_TIMEOUT", "30");
    });
    try_init_all(ranks)
}

/// `values` on GPU 0.
fn on_gpu<T: bytemuck::Pod>(values: &[T]) -> DeviceBytes {
    let bytes: &[u8] = bytemuck::cast_slice(values);
    let mut memory = DeviceBytes::zeroed(0, bytes.len()).expect("device memory");
    memory.copy_from_host(bytes).expect("copy to the GPU");
    memory
}

/// `memory`'s contents as `T`s.
fn from_gpu<T: bytemuck::Pod>(memory: &DeviceBytes) -> Vec<T> {
    let mut values = vec![T::zeroed(); memory.len() / size_of::<T>()];
    memory
        .copy_to_host(bytemuck::cast_slice_mut(&mut values))
        .expect("copy from the GPU");
    values
}

fn ptr(memory: &DeviceBytes) -> *mut c_void {
    memory.span().addr as usize as *mut c_void
}

#[test]
fn without_a_driver_init_is_refused_with_the_driver_s_error() {
    if oxccl::platform::cuda::gpu_count().is_ok() {
        eprintln!("skipped: this machine has a CUDA driver (the GPU tests below run instead)");
        return;
    }
    let refused = cuda_init_all(2).expect_err("no driver, no communicator");
    assert_ne!(refused, SUCCESS);
    let message = last_error();
    assert!(message.contains("no CUDA driver"), "{message}");
}

#[test]
fn all_reduce_on_device_pointers_of_virtual_ranks() {
    let ranks = 3;
    let Some(comms) = gpu_comms(ranks) else {
        return;
    };
    // 300 000 floats: past the 1 MiB CCL buffer.
    for count in [1usize, 1001, 300_000] {
        let sends: Vec<DeviceBytes> = (0..ranks)
            .map(|r| {
                on_gpu(
                    &(0..count)
                        .map(|i| (r * 7 + i % 13) as f32)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let recvs: Vec<DeviceBytes> = (0..ranks).map(|_| on_gpu(&vec![0f32; count])).collect();
        let rc = grouped(ranks, |r| {
            // SAFETY: device memory of `count` floats on the rank's GPU, alive for the group.
            unsafe { sum_floats(ptr(&sends[r]), ptr(&recvs[r]), count, comms[r], null_mut()) }
        });
        assert_eq!(rc, SUCCESS, "count {count}: {}", last_error());
        let want: Vec<f32> = (0..count).map(|i| (21 + 3 * (i % 13)) as f32).collect();
        for (r, recv) in recvs.iter().enumerate() {
            assert_eq!(from_gpu::<f32>(recv), want, "rank {r}, count {count}");
        }
        // In place: the sum again, on the receive buffers.
        let rc = grouped(ranks, |r| {
            let buf = ptr(&recvs[r]);
            // SAFETY: as above.
            unsafe { sum_floats(buf, buf, count, comms[r], null_mut()) }
        });
        assert_eq!(rc, SUCCESS, "count {count} in place: {}", last_error());
        let thrice: Vec<f32> = want.iter().map(|x| x * 3.0).collect();
        assert!(
            recvs.iter().all(|b| from_gpu::<f32>(b) == thrice),
            "count {count} in place"
        );
    }
    destroy(comms);
}

#[test]
fn reduce_with_null_receive_buffers_off_the_root() {
    let (ranks, count, root) = (3, 5003, 1);
    let Some(comms) = gpu_comms(ranks) else {
        return;
    };
    let host: Vec<Vec<i32>> = (0..ranks)
        .map(|r| (0..count).map(|i| (i as i32 * 5 + r as i32) % 17).collect())
        .collect();
    let sends: Vec<DeviceBytes> = host.iter().map(|v| on_gpu(v)).collect();
    let result = on_gpu(&vec![0i32; count]);
    let rc = grouped(ranks, |r| {
        let recv = if r == root { ptr(&result) } else { null_mut() };
        // SAFETY: device memory of `count` ints; NULL off the root, as NCCL allows.
        unsafe { max_ints_onto(ptr(&sends[r]), recv, count, root, comms[r]) }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    let want: Vec<i32> = (0..count)
        .map(|i| host.iter().map(|v| v[i]).max().unwrap())
        .collect();
    assert_eq!(from_gpu::<i32>(&result), want);
    destroy(comms);
}

#[test]
fn grouped_sends_and_receives_and_mem_alloc_memory() {
    let (ranks, count) = (4, 3001);
    let Some(comms) = gpu_comms(ranks) else {
        return;
    };
    let right: Vec<DeviceBytes> = (0..ranks)
        .map(|r| on_gpu(&vec![r as u8 + 1; count]))
        .collect();
    let left: Vec<DeviceBytes> = (0..ranks)
        .map(|r| on_gpu(&vec![r as u8 + 101; count]))
        .collect();
    let mut from_left = vec![null_mut(); ranks];
    for (r, slot) in from_left.iter_mut().enumerate() {
        // SAFETY: a live handle and a writable pointer.
        assert_eq!(
            unsafe { oxcclMemAlloc(comms[r], slot, count) },
            SUCCESS,
            "{}",
            last_error()
        );
    }
    let from_right: Vec<DeviceBytes> = (0..ranks).map(|_| on_gpu(&vec![0u8; count])).collect();
    // SAFETY: group calls take no arguments.
    assert_eq!(unsafe { oxcclGroupStart() }, SUCCESS);
    for r in 0..ranks {
        let (next, prev) = (
            ((r + 1) % ranks) as c_int,
            ((r + ranks - 1) % ranks) as c_int,
        );
        let comm = comms[r];
        // SAFETY: device memory of `count` bytes each, alive for the group.
        unsafe {
            assert_eq!(
                oxcclSend(ptr(&right[r]), count, UINT8, next, comm, null_mut()),
                0
            );
            assert_eq!(
                oxcclSend(ptr(&left[r]), count, UINT8, prev, comm, null_mut()),
                0
            );
            assert_eq!(
                oxcclRecv(from_left[r], count, UINT8, prev, comm, null_mut()),
                0
            );
            assert_eq!(
                oxcclRecv(ptr(&from_right[r]), count, UINT8, next, comm, null_mut()),
                0
            );
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { oxcclGroupEnd() }, SUCCESS, "{}", last_error());
    for (r, recv) in from_right.iter().enumerate() {
        let next = (r + 1) % ranks;
        assert!(
            from_gpu::<u8>(recv).iter().all(|&b| b == next as u8 + 101),
            "rank {r}"
        );
    }
    // What arrived in oxcclMemAlloc's memory, read through a call that sends from it.
    let gathered: Vec<DeviceBytes> = (0..ranks)
        .map(|_| on_gpu(&vec![0u8; count * ranks]))
        .collect();
    let rc = grouped(ranks, |r| {
        // SAFETY: `count` bytes from oxcclMemAlloc, `count * ranks` of device memory.
        unsafe {
            oxcclAllGather(
                from_left[r],
                ptr(&gathered[r]),
                count,
                UINT8,
                comms[r],
                null_mut(),
            )
        }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    let blocks = from_gpu::<u8>(&gathered[0]);
    for (r, block) in blocks.chunks(count).enumerate() {
        let prev = (r + ranks - 1) % ranks;
        assert!(
            block.iter().all(|&b| b == prev as u8 + 1),
            "rank {r}'s receive"
        );
    }
    for &p in &from_left {
        // SAFETY: memory from oxcclMemAlloc that no call uses now.
        assert_eq!(unsafe { oxcclMemFree(p) }, SUCCESS);
    }
    destroy(comms);
}

#[test]
fn a_host_pointer_is_refused_before_anything_runs() {
    let Some(comms) = gpu_comms(1) else {
        return;
    };
    let host = [1f32; 16];
    let recv = on_gpu(&[0f32; 16]);
    // SAFETY: the pointers are checked before use; the host one is refused.
    let rc = unsafe { sum_floats(host.as_ptr().cast(), ptr(&recv), 16, comms[0], null_mut()) };
    assert_invalid(rc, &["sendbuff", "not memory"]);
    assert_eq!(from_gpu::<f32>(&recv), vec![0f32; 16]);
    destroy(comms);
}

#[test]
fn a_stream_capturing_a_cuda_graph_is_refused_and_its_capture_survives() {
    use cudarc::driver::{sys, CudaContext};
    let ranks = 2;
    let Some(comms) = gpu_comms(ranks) else {
        return;
    };
    let bufs: Vec<DeviceBytes> = (0..ranks).map(|_| on_gpu(&[1f32; 64])).collect();
    let context = CudaContext::new(0).expect("GPU 0's primary context");
    let stream = context.new_stream().expect("a stream");
    let sum_on_stream = |r: usize| {
        // SAFETY: 64 floats of GPU 0, alive for the call.
        unsafe {
            let buf = ptr(&bufs[r]);
            sum_floats(buf, buf, 64, comms[r], stream.cu_stream().cast())
        }
    };
    // Thread-local mode forbids the capturing thread what global mode (PyTorch's default
    // for `torch.cuda.graph`) does, without reaching the other tests' threads, which
    // run beside this one. Refused before anything runs, rank 0's call needs no peer.
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    stream.begin_capture(mode).expect("capture begins");
    let rc = sum_on_stream(0);
    let message = last_error();
    let status = stream.capture_status().expect("the capture's status");
    let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    assert_eq!(rc, 5, "oxcclInvalidUsage: {message}");
    assert!(message.contains("capturing"), "{message}");
    assert_eq!(
        status,
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
        "the refused call left the caller's capture valid"
    );
    if let Err(error) = ended {
        panic!("the capture ends: {error}");
    }
    // The same calls on the stream, captured no more, run: 1 + 1.
    assert_eq!(grouped(ranks, sum_on_stream), SUCCESS, "{}", last_error());
    assert!(bufs.iter().all(|b| from_gpu::<f32>(b) == vec![2f32; 64]));
    destroy(comms);
}

#[test]
fn the_current_gpu_is_the_calling_thread_s_context_s() {
    use cudarc::driver::CudaContext;
    use oxccl::platform::cuda::current_gpu;
    match oxccl::platform::cuda::gpu_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => return eprintln!("skipped: the CUDA driver reports no GPU"),
        Err(e) => return eprintln!("skipped: {e}"),
    }
    let fresh = std::thread::spawn(current_gpu).join().expect("no panic");
    assert_eq!(
        fresh.expect("the driver answers"),
        None,
        "no context current"
    );
    let context = CudaContext::new(0).expect("GPU 0's primary context");
    context.bind_to_thread().expect("current");
    assert_eq!(current_gpu().expect("the driver answers"), Some(0));
}
