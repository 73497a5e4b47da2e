//! Raw addresses of a device's user memory: what an adapter without typed buffers (the C
//! ABI, whose callers hand it pointers) needs to bind a device's calls to accelerator
//! memory ([`UserBuffers::Device`](crate::UserBuffers::Device)).
//!
//! A device whose calls may bind accelerator memory offers [`UserMemory`] through
//! [`Device::user_memory`](crate::Device::user_memory); a device whose calls bind host
//! memory has none (the host device: a C caller's pointers are slices there). Through it
//! the adapter:
//!
//! - checks a caller's pointer before binding it ([`UserMemory::check_span`]): on cuda,
//!   that the span lies in one allocation on the rank's GPU, so that a host pointer, a
//!   pointer to another GPU or a count past the allocation's end is a typed error rather
//!   than a GPU fault that would poison the context (NCCL's `NCCL_CHECK_POINTERS`, always
//!   on, and stricter: it checks the extent too);
//! - allocates blocks of its own ([`UserMemory::alloc`]: NCCL's unused buffers, sends
//!   and receives staged into one block) and copies between them and the caller's
//!   buffers ([`UserMemory::copy`]);
//! - checks a caller's stream when the call is made ([`UserMemory::check_stream`]: on
//!   cuda, that it is not capturing a CUDA graph, which a blocking call cannot join), and
//!   orders the call after the work the caller queued on it
//!   ([`UserMemory::sync_stream`]). Calls are blocking: the call waits on the host for
//!   the caller's stream, runs, and returns once its results are in place, so work the
//!   caller queues on that stream afterwards sees them.

use crate::device::DeviceSpan;
use crate::error::{ConfigFault, DeviceError};
use crate::ir::Rank;
use std::any::Any;

/// A device's user memory by address (see the module docs).
pub trait UserMemory: Send + Sync {
    /// Refuse `span`, the argument named `what`, unless it is memory local rank `rank`'s
    /// calls may bind: the error says what it is instead. Empty spans pass.
    fn check_span(&self, rank: Rank, what: &str, span: DeviceSpan) -> Result<(), DeviceError>;

    /// `bytes` zeroed bytes of memory that local rank `rank`'s calls may bind, freed when
    /// the block drops.
    fn alloc(&self, rank: Rank, bytes: usize) -> Result<UserBlock, DeviceError>;

    /// Copy `src` into `dst` (spans of one length) and return once the bytes are there.
    ///
    /// # Safety
    /// Both spans must be memory of local rank `rank` that stays allocated during the
    /// copy, `dst` memory nothing else reads or writes meanwhile.
    unsafe fn copy(&self, rank: Rank, src: DeviceSpan, dst: DeviceSpan) -> Result<(), DeviceError>;

    /// Refuse `stream`, a stream of the caller's (as for [`UserMemory::sync_stream`]),
    /// when local rank `rank`'s calls cannot wait for it (on cuda: a stream inside a CUDA
    /// graph capture): the error says why. Called when the call is made, before anything
    /// reaches the other ranks, so a refusal leaves the communicator usable; a failure
    /// only the wait can tell (a stale handle) is left to the wait, which aborts the
    /// communicator and so releases the peers.
    fn check_stream(&self, rank: Rank, stream: usize) -> Result<(), DeviceError>;

    /// Wait for the work queued so far on `stream`, a stream of the caller's (an opaque
    /// handle: a `CUstream` on cuda; 0 is the device's default stream), with local rank
    /// `rank`'s device current: at most the device's `exec_timeout` (an error naming the
    /// stream), and no longer once the device stopped (an abort, a peer's failure).
    fn sync_stream(&self, rank: Rank, stream: usize) -> Result<(), DeviceError>;
}

/// The bytes a [`UserMemory::copy`] of `src` into `dst` moves (0: nothing to do), or
/// its refusal when their lengths differ: every implementation's first step.
pub fn copy_len(src: DeviceSpan, dst: DeviceSpan) -> Result<usize, DeviceError> {
    if src.len != dst.len {
        return Err(ConfigFault::CopyLengths {
            source_len: src.len,
            destination_len: dst.len,
        }
        .into());
    }
    Ok(src.len)
}

/// A block from [`UserMemory::alloc`]: its span, and what keeps the memory allocated.
pub struct UserBlock {
    span: DeviceSpan,
    _keep: Box<dyn Any + Send + Sync>,
}

impl UserBlock {
    /// The block at `span`, allocated while `keep` lives. A backend's constructor.
    ///
    /// # Safety
    /// `span` must be memory of the device that stays allocated, and that nothing but
    /// the block's holder uses, as long as `keep` is alive.
    pub unsafe fn new(span: DeviceSpan, keep: Box<dyn Any + Send + Sync>) -> Self {
        UserBlock { span, _keep: keep }
    }

    /// Where the block is.
    pub fn span(&self) -> DeviceSpan {
        self.span
    }
}

impl std::fmt::Debug for UserBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserBlock[{:#x}; {}]", self.span.addr, self.span.len)
    }
}
