//! The C ABI as the tests call it: its functions (from `oxccl-capi`, linked as a Rust
//! library), NCCL's numbers, and helpers for communicators of one process driven from
//! one thread. Shared by the test binaries that `mod capi_abi;` it.

#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;

pub type Comm = *mut c_void;
pub type Stream = *mut c_void;
pub type Graph = *mut c_void;

pub const SUCCESS: c_int = 0;
pub const INVALID_ARGUMENT: c_int = 4;
pub const UINT8: c_int = 1;
pub const INT32: c_int = 2;
pub const FLOAT: c_int = 7;
pub const SUM: c_int = 0;
pub const MAX: c_int = 2;

extern "C" {
    pub fn oxcclCommInitAll(comms: *mut Comm, ndev: c_int, devlist: *const c_int) -> c_int;
    pub fn oxcclCommDestroy(comm: Comm) -> c_int;
    pub fn oxcclCommGetAsyncError(comm: Comm, error: *mut c_int) -> c_int;
    pub fn oxcclGetLastError(comm: Comm) -> *const c_char;
    pub fn oxcclGroupStart() -> c_int;
    pub fn oxcclGroupEnd() -> c_int;
    pub fn oxcclAllReduce(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: c_int,
        op: c_int,
        comm: Comm,
        stream: Stream,
    ) -> c_int;
    pub fn oxcclAllGather(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: c_int,
        comm: Comm,
        stream: Stream,
    ) -> c_int;
    pub fn oxcclReduce(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: c_int,
        op: c_int,
        root: c_int,
        comm: Comm,
        stream: Stream,
    ) -> c_int;
    pub fn oxcclSend(
        send: *const c_void,
        count: usize,
        dtype: c_int,
        peer: c_int,
        comm: Comm,
        stream: Stream,
    ) -> c_int;
    pub fn oxcclRecv(
        recv: *mut c_void,
        count: usize,
        dtype: c_int,
        peer: c_int,
        comm: Comm,
        stream: Stream,
    ) -> c_int;
    pub fn oxcclGraphCaptureBegin(comm: Comm) -> c_int;
    pub fn oxcclGraphCaptureEnd(comm: Comm, graph: *mut Graph) -> c_int;
    pub fn oxcclGraphLaunch(graph: Graph, stream: Stream) -> c_int;
    pub fn oxcclGraphDestroy(graph: Graph) -> c_int;
    pub fn oxcclMemAlloc(comm: Comm, ptr: *mut *mut c_void, size: usize) -> c_int;
    pub fn oxcclMemFree(ptr: *mut c_void) -> c_int;
}

/// `ranks` communicators of one process (`OXCCL_DEVICE` says on which device), or the
/// result code of the refusal.
pub fn try_init_all(ranks: usize) -> Result<Vec<Comm>, c_int> {
    let mut comms = vec![null_mut(); ranks];
    // SAFETY: `comms` holds `ranks` handles; no devlist.
    let rc = unsafe { oxcclCommInitAll(comms.as_mut_ptr(), ranks as c_int, std::ptr::null()) };
    match rc {
        SUCCESS => Ok(comms),
        refused => Err(refused),
    }
}

/// `ranks` communicators of one process.
pub fn init_all(ranks: usize) -> Vec<Comm> {
    try_init_all(ranks).unwrap_or_else(|rc| panic!("init ({rc}): {}", last_error()))
}

pub fn destroy(comms: Vec<Comm>) {
    for comm in comms {
        // SAFETY: a live handle from `init_all`.
        assert_eq!(unsafe { oxcclCommDestroy(comm) }, SUCCESS);
    }
}

/// This thread's last error message.
pub fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated string valid until this thread's next
    // failing call.
    unsafe { CStr::from_ptr(oxcclGetLastError(null_mut())) }
        .to_string_lossy()
        .into_owned()
}

/// Run `call(rank)` for every rank inside one group; the group's result.
pub fn grouped(ranks: usize, mut call: impl FnMut(usize) -> c_int) -> c_int {
    // SAFETY: group calls take no arguments.
    assert_eq!(unsafe { oxcclGroupStart() }, SUCCESS);
    for rank in 0..ranks {
        assert_eq!(call(rank), SUCCESS, "rank {rank}: {}", last_error());
    }
    // SAFETY: as above.
    unsafe { oxcclGroupEnd() }
}

/// `oxcclAllReduce` summing `count` floats of `send` into `recv`.
///
/// # Safety
/// `oxcclAllReduce`'s: both buffers hold `count` floats and stay valid for the call.
pub unsafe fn sum_floats(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    comm: Comm,
    stream: Stream,
) -> c_int {
    // SAFETY: this function's contract.
    unsafe { oxcclAllReduce(send, recv, count, FLOAT, SUM, comm, stream) }
}

/// Assert that `rc` is `oxcclInvalidArgument` with a message naming each of `words`.
pub fn assert_invalid(rc: c_int, words: &[&str]) {
    assert_eq!(rc, INVALID_ARGUMENT);
    let message = last_error();
    assert!(words.iter().all(|w| message.contains(w)), "{message}");
}

/// `oxcclReduce` of `count` ints by their maximum onto `root`, on the default stream.
///
/// # Safety
/// `oxcclReduce`'s: `send` holds `count` ints, `recv` too on the root (NULL elsewhere).
pub unsafe fn max_ints_onto(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    root: usize,
    comm: Comm,
) -> c_int {
    // SAFETY: this function's contract.
    unsafe {
        oxcclReduce(
            send,
            recv,
            count,
            INT32,
            MAX,
            root as c_int,
            comm,
            null_mut(),
        )
    }
}
