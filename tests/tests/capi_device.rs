//! The C ABI on a device whose pointers are device memory, as on cuda: calls bind the
//! caller's pointers as device spans, check them with the device, wait for the caller's
//! stream when they run, lend device blocks for NCCL's unused buffers and stage grouped
//! sends and receives with device copies. CI has no GPU, so the device is the tests'
//! `staged-host` kind (host memory standing for a GPU's), whose [`staged_host::record`]
//! shows which of those paths a call took. Every test here runs with
//! `OXCCL_DEVICE=staged-host` (set once, before any communicator).

mod capi_abi;

use capi_abi::*;
use oxccl_capi as _;
use oxccl_tests::staged_host::{self, CAPTURING_STREAM, REFUSED_STREAM};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::Once;

/// `ranks` communicators of one process on the `staged-host` kind.
fn init_all(ranks: usize) -> Vec<Comm> {
    static DEVICE: Once = Once::new();
    DEVICE.call_once(|| {
        std::env::set_var("OXCCL_DEVICE", staged_host::STAGED_HOST);
        staged_host::start_recording();
    });
    capi_abi::init_all(ranks)
}

/// A stream handle for `rank` of the test `test`: distinct across the binary's tests.
fn stream(test: usize, rank: usize) -> Stream {
    (0x5700_0000 + test * 0x100 + rank) as Stream
}

/// Each rank's floats in `bufs` summed in place as one group, rank `r` on `stream(r)`
/// (recorded instead where its communicator captures); the group's result.
fn sum_in_place(comms: &[Comm], bufs: &mut [Vec<f32>], stream: impl Fn(usize) -> Stream) -> c_int {
    grouped(comms.len(), |r| {
        let (buf, count) = (bufs[r].as_mut_ptr().cast::<c_void>(), bufs[r].len());
        // SAFETY: the buffer holds `count` floats and outlives the call (the test keeps
        // it for every launch of a graph that records it).
        unsafe { sum_floats(buf, buf, count, comms[r], stream(r)) }
    })
}

/// Every communicator's capture ended as one group: their graphs.
fn end_captures(comms: &[Comm]) -> Vec<Graph> {
    let mut graphs = vec![null_mut(); comms.len()];
    let rc = grouped(comms.len(), |r| {
        // SAFETY: a live handle; `graphs` outlives the group.
        unsafe { oxcclGraphCaptureEnd(comms[r], &mut graphs[r]) }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    graphs
}

/// Destroy `graphs`, live graphs.
fn destroy_graphs(graphs: Vec<Graph>) {
    for graph in graphs {
        // SAFETY: a live graph.
        assert_eq!(unsafe { oxcclGraphDestroy(graph) }, SUCCESS);
    }
}

/// Each communicator's `oxcclCommGetAsyncError`.
fn async_errors(comms: &[Comm]) -> Vec<c_int> {
    comms
        .iter()
        .map(|&comm| {
            let mut error = SUCCESS;
            // SAFETY: a live handle and a writable result.
            assert_eq!(unsafe { oxcclCommGetAsyncError(comm, &mut error) }, SUCCESS);
            error
        })
        .collect()
}

#[test]
fn all_reduce_binds_device_pointers_and_waits_for_each_rank_s_stream() {
    let ranks = 4;
    let count = 1001;
    let comms = init_all(ranks);
    let sends: Vec<Vec<f32>> = (0..ranks)
        .map(|r| (0..count).map(|i| ((r + 1) * (i % 7)) as f32).collect())
        .collect();
    let mut recvs = vec![vec![0f32; count]; ranks];
    let rc = grouped(ranks, |r| {
        // SAFETY: both buffers hold `count` floats and outlive the group.
        unsafe {
            let (send, recv) = (sends[r].as_ptr().cast(), recvs[r].as_mut_ptr().cast());
            sum_floats(send, recv, count, comms[r], stream(1, r))
        }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    for recv in &recvs {
        for (i, &x) in recv.iter().enumerate() {
            assert_eq!(x, (10 * (i % 7)) as f32, "element {i}");
        }
    }
    let record = staged_host::record();
    for (r, send) in sends.iter().enumerate() {
        assert!(
            record.synced.contains(&(r, stream(1, r) as usize)),
            "rank {r}'s stream"
        );
        assert!(
            record.staged.contains(&(send.as_ptr() as u64)),
            "rank {r}'s send buffer was bound as device memory"
        );
    }
    // In place, on the default stream (NULL).
    let rc = grouped(ranks, |r| {
        let buf = recvs[r].as_mut_ptr().cast::<c_void>();
        // SAFETY: the buffer holds `count` floats and outlives the group.
        unsafe { sum_floats(buf, buf, count, comms[r], null_mut()) }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    assert!(recvs.iter().all(|v| v
        .iter()
        .enumerate()
        .all(|(i, &x)| x == (40 * (i % 7)) as f32)));
    assert!(staged_host::record().synced.contains(&(3, 0)));
    destroy(comms);
}

#[test]
fn reduce_lends_device_blocks_to_non_roots_that_pass_null() {
    let (ranks, count, root) = (3, 333, 2);
    let comms = init_all(ranks);
    let sends: Vec<Vec<i32>> = (0..ranks)
        .map(|r| {
            (0..count)
                .map(|i| (i as i32 * 3 + r as i32) % 11 - 5)
                .collect()
        })
        .collect();
    let mut result = vec![0i32; count];
    let rc = grouped(ranks, |r| {
        let recv = match r == root {
            true => result.as_mut_ptr().cast(),
            false => null_mut(),
        };
        // SAFETY: the send buffer holds `count` ints, the root's receive buffer too.
        unsafe { max_ints_onto(sends[r].as_ptr().cast(), recv, count, root, comms[r]) }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    for (i, &x) in result.iter().enumerate() {
        let want = sends.iter().map(|s| s[i]).max().unwrap();
        assert_eq!(x, want, "element {i}");
    }
    let lent = staged_host::record().blocks;
    let bytes = count * 4;
    assert!(
        lent.iter().filter(|&&b| b == bytes).count() >= ranks - 1,
        "each non-root binds a device block of {bytes} bytes: {lent:?}"
    );
    destroy(comms);
}

#[test]
fn grouped_sends_and_receives_stage_through_device_copies() {
    let (ranks, count) = (4, 77);
    let comms = init_all(ranks);
    let right: Vec<Vec<u8>> = (0..ranks).map(|r| vec![r as u8 + 1; count]).collect();
    let left: Vec<Vec<u8>> = (0..ranks).map(|r| vec![r as u8 + 101; count]).collect();
    let mut from_left = vec![vec![0u8; count]; ranks];
    let mut from_right = vec![vec![0u8; count]; ranks];
    // SAFETY: group calls take no arguments.
    assert_eq!(unsafe { oxcclGroupStart() }, SUCCESS);
    for r in 0..ranks {
        let (next, prev) = (
            ((r + 1) % ranks) as c_int,
            ((r + ranks - 1) % ranks) as c_int,
        );
        let (comm, s) = (comms[r], stream(3, r));
        // SAFETY: every buffer holds `count` bytes and outlives the group.
        unsafe {
            assert_eq!(
                oxcclSend(right[r].as_ptr().cast(), count, UINT8, next, comm, s),
                0
            );
            assert_eq!(
                oxcclSend(left[r].as_ptr().cast(), count, UINT8, prev, comm, s),
                0
            );
            let into_left = from_left[r].as_mut_ptr().cast();
            assert_eq!(oxcclRecv(into_left, count, UINT8, prev, comm, s), 0);
            let into_right = from_right[r].as_mut_ptr().cast();
            assert_eq!(oxcclRecv(into_right, count, UINT8, next, comm, s), 0);
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { oxcclGroupEnd() }, SUCCESS, "{}", last_error());
    for r in 0..ranks {
        let (next, prev) = ((r + 1) % ranks, (r + ranks - 1) % ranks);
        assert!(
            from_left[r].iter().all(|&b| b == prev as u8 + 1),
            "rank {r}"
        );
        assert!(
            from_right[r].iter().all(|&b| b == next as u8 + 101),
            "rank {r}"
        );
    }
    let record = staged_host::record();
    for r in 0..ranks {
        let sent = right[r].as_ptr() as u64;
        let received = from_left[r].as_ptr() as u64;
        assert!(
            record.copies.iter().any(|&(src, _)| src == sent),
            "rank {r}'s send copied in"
        );
        assert!(
            record.copies.iter().any(|&(_, dst)| dst == received),
            "rank {r}'s receive copied out"
        );
        assert!(record.synced.contains(&(r, stream(3, r) as usize)));
    }
    destroy(comms);
}

#[test]
fn a_stream_the_device_refuses_fails_the_call_on_every_rank_without_a_hang() {
    let ranks = 3;
    let comms = init_all(ranks);
    let sends = vec![vec![1f32; 64]; ranks];
    let mut recvs = vec![vec![0f32; 64]; ranks];
    let rc = grouped(ranks, |r| {
        let s = match r {
            1 => REFUSED_STREAM as Stream,
            _ => stream(4, r),
        };
        // SAFETY: both buffers hold 64 floats and outlive the group.
        unsafe {
            let recv = recvs[r].as_mut_ptr().cast();
            sum_floats(sends[r].as_ptr().cast(), recv, 64, comms[r], s)
        }
    });
    assert_ne!(rc, SUCCESS);
    let message = last_error();
    assert!(message.contains("stream"), "{message}");
    for (r, error) in async_errors(&comms).into_iter().enumerate() {
        assert_ne!(error, SUCCESS, "rank {r} knows the communicator broke");
    }
    assert!(recvs.iter().all(|v| v.iter().all(|&x| x == 0.0)));
    destroy(comms);
}

/// `oxcclInvalidUsage`: a call that cannot run as made.
const INVALID_USAGE: c_int = 5;

#[test]
fn streams_are_waited_for_on_the_calling_thread_when_devices_run_side_by_side() {
    // Two communicators of one rank each: two devices, which a group runs on two
    // threads.
    let comms: Vec<Comm> = (0..2).flat_map(|_| init_all(1)).collect();
    let mut bufs: Vec<Vec<f32>> = vec![vec![1.0; 16]; 2];
    let rc = sum_in_place(&comms, &mut bufs, |r| stream(8, r));
    assert_eq!(rc, SUCCESS, "{}", last_error());
    for &comm in &comms {
        // SAFETY: a live handle.
        assert_eq!(unsafe { oxcclGraphCaptureBegin(comm) }, SUCCESS);
    }
    let rc = sum_in_place(&comms, &mut bufs, |_| null_mut());
    assert_eq!(rc, SUCCESS, "{}", last_error());
    let graphs = end_captures(&comms);
    let rc = grouped(2, |r| {
        // SAFETY: a live graph whose buffer is alive.
        unsafe { oxcclGraphLaunch(graphs[r], stream(8, 10 + r)) }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    let here = std::thread::current().id();
    let synced_on = staged_host::record().synced_on;
    for s in [0, 1, 10, 11] {
        let handle = stream(8, s) as usize;
        let threads: Vec<_> = synced_on.iter().filter(|(h, _)| *h == handle).collect();
        assert!(!threads.is_empty(), "stream {s} was waited for");
        assert!(
            threads.iter().all(|(_, t)| *t == here),
            "stream {s} was waited for on the calling thread"
        );
    }
    destroy_graphs(graphs);
    destroy(comms);
}

#[test]
fn a_stream_inside_a_cuda_graph_capture_is_refused_at_the_call_recorded_or_not() {
    let ranks = 2;
    let comms = init_all(ranks);
    let mut bufs: Vec<Vec<f32>> = (0..ranks).map(|r| vec![r as f32 + 1.0; 32]).collect();
    let capturing = CAPTURING_STREAM as Stream;
    let assert_refused = |rc: c_int| {
        assert_eq!(rc, INVALID_USAGE, "{}", last_error());
        let message = last_error();
        for word in ["capturing", "oxcclGraphCaptureBegin"] {
            assert!(message.contains(word), "{message}");
        }
    };
    let buf = bufs[0].as_mut_ptr().cast::<c_void>();
    // SAFETY: the buffer holds 32 floats; the call is refused before it reads them.
    assert_refused(unsafe { sum_floats(buf, buf, 32, comms[0], capturing) });
    // SAFETY: group calls take no arguments.
    assert_eq!(unsafe { oxcclGroupStart() }, SUCCESS);
    // SAFETY: as above.
    assert_refused(unsafe { sum_floats(buf, buf, 32, comms[0], capturing) });
    // SAFETY: group calls take no arguments. The group reports its refused call again.
    assert_refused(unsafe { oxcclGroupEnd() });
    assert_eq!(
        async_errors(&comms),
        vec![SUCCESS; ranks],
        "a refused stream leaves the communicator whole"
    );
    let record_graph = grouped(ranks, |r| {
        // SAFETY: a live handle.
        unsafe { oxcclGraphCaptureBegin(comms[r]) }
    });
    assert_eq!(record_graph, SUCCESS, "{}", last_error());
    // A call to be recorded never waits for its stream, but making it may allocate,
    // which a thread inside a CUDA graph capture must not: refused too.
    // SAFETY: as above.
    assert_refused(unsafe { sum_floats(buf, buf, 32, comms[0], capturing) });
    let rc = sum_in_place(&comms, &mut bufs, |r| stream(6, r));
    assert_eq!(rc, SUCCESS, "{}", last_error());
    let graphs = end_captures(&comms);
    // SAFETY: a live graph; the launch is refused before it runs.
    assert_refused(unsafe { oxcclGraphLaunch(graphs[0], capturing) });
    // Nothing ran, and the same calls on streams that do not capture run: 1 + 2.
    assert!(bufs
        .iter()
        .enumerate()
        .all(|(r, b)| b.iter().all(|&x| x == r as f32 + 1.0)));
    let rc = grouped(ranks, |r| {
        // SAFETY: a live graph whose buffers are alive.
        unsafe { oxcclGraphLaunch(graphs[r], stream(6, 10 + r)) }
    });
    assert_eq!(rc, SUCCESS, "{}", last_error());
    assert!(
        bufs.iter().all(|b| b.iter().all(|&x| x == 3.0)),
        "{:?}",
        &bufs[0][..4]
    );
    destroy_graphs(graphs);
    destroy(comms);
}

#[test]
fn a_capture_begun_before_group_end_fails_the_call_on_every_rank_without_a_hang() {
    let ranks = 3;
    let comms = init_all(ranks);
    let mut bufs = vec![vec![1f32; 64]; ranks];
    // SAFETY: group calls take no arguments.
    assert_eq!(unsafe { oxcclGroupStart() }, SUCCESS);
    for r in 0..ranks {
        let buf = bufs[r].as_mut_ptr().cast::<c_void>();
        // SAFETY: the buffer holds 64 floats and outlives the group.
        let rc = unsafe { sum_floats(buf, buf, 64, comms[r], stream(9, r)) };
        assert_eq!(rc, SUCCESS, "{}", last_error());
    }
    // Rank 1's stream begins a capture after its call was made: found before the wait,
    // which would invalidate it.
    staged_host::begin_capture(stream(9, 1) as usize);
    // SAFETY: group calls take no arguments.
    // The group's first error is rank 0's, whose call ran and met the abort; it names
    // rank 1's cause.
    let rc = unsafe { oxcclGroupEnd() };
    assert_ne!(rc, SUCCESS);
    assert!(last_error().contains("capturing"), "{}", last_error());
    for (r, error) in async_errors(&comms).into_iter().enumerate() {
        assert_ne!(error, SUCCESS, "rank {r} knows the call failed");
    }
    assert!(
        bufs.iter().all(|b| b.iter().all(|&x| x == 1.0)),
        "nothing ran"
    );
    destroy(comms);
}

#[test]
fn a_pointer_the_device_refuses_is_an_argument_error_before_anything_runs() {
    let comms = init_all(1);
    let send = [1f32; 16];
    let mut recv = vec![0f32; 16];
    staged_host::refuse_spans_at(recv.as_ptr() as u64);
    // SAFETY: both buffers hold 16 floats.
    let rc = unsafe {
        let recv = recv.as_mut_ptr().cast();
        sum_floats(send.as_ptr().cast(), recv, 16, comms[0], null_mut())
    };
    assert_invalid(rc, &["recvbuff", "refused"]);
    assert!(recv.iter().all(|&x| x == 0.0));
    destroy(comms);
}

#[test]
fn a_graph_launches_after_the_launch_stream_on_its_captured_device_pointers() {
    let ranks = 2;
    let comms = init_all(ranks);
    let mut bufs: Vec<Vec<f32>> = (0..ranks).map(|r| vec![r as f32 + 1.0; 100]).collect();
    for &comm in &comms {
        // SAFETY: a live handle.
        assert_eq!(unsafe { oxcclGraphCaptureBegin(comm) }, SUCCESS);
    }
    let rc = sum_in_place(&comms, &mut bufs, |r| stream(5, r));
    assert_eq!(rc, SUCCESS, "{}", last_error());
    let graphs = end_captures(&comms);
    for (r, buf) in bufs.iter().enumerate() {
        assert!(
            buf.iter().all(|&x| x == r as f32 + 1.0),
            "captured, not run"
        );
    }
    for launch in 0..2 {
        let rc = grouped(ranks, |r| {
            // SAFETY: a live graph whose buffers are alive.
            unsafe { oxcclGraphLaunch(graphs[r], stream(5, 10 + 2 * launch + r)) }
        });
        assert_eq!(rc, SUCCESS, "{}", last_error());
    }
    // 1 and 2, summed twice: 3, then 6.
    assert!(
        bufs.iter().all(|b| b.iter().all(|&x| x == 6.0)),
        "{:?}",
        &bufs[0][..4]
    );
    let synced = staged_host::record().synced;
    for r in 0..ranks {
        for launch in 0..2 {
            assert!(synced.contains(&(r, stream(5, 10 + 2 * launch + r) as usize)));
        }
    }
    destroy_graphs(graphs);
    destroy(comms);
}

#[test]
fn mem_alloc_lends_device_memory_of_the_rank() {
    let comms = init_all(1);
    let mut ptr = null_mut();
    let size = 4093;
    // SAFETY: a live handle and a writable pointer.
    assert_eq!(unsafe { oxcclMemAlloc(comms[0], &mut ptr, size) }, SUCCESS);
    assert!(!ptr.is_null());
    assert!(staged_host::record().blocks.contains(&size));
    // SAFETY: the staged-host kind's device memory is host memory of this process:
    // `size` zeroed bytes at `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, size) };
    assert!(bytes.iter().all(|&b| b == 0));
    // SAFETY: memory from oxcclMemAlloc, unused.
    assert_eq!(unsafe { oxcclMemFree(ptr) }, SUCCESS);
    // SAFETY: freeing twice is refused, not undefined.
    assert_eq!(unsafe { oxcclMemFree(ptr) }, INVALID_ARGUMENT);
    destroy(comms);
}
