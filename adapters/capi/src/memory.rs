//! `oxcclMemAlloc`/`oxcclMemFree`: user buffers that the ranks in other processes of the
//! host map (NCCL's `ncclMemAlloc`, made collective as MPI's `MPI_Win_allocate_shared`).
//!
//! With `OXCCL_SHARED_BUFFERS=1`, a job's calls run zero-copy across processes and must
//! be given such memory; elsewhere it is heap memory that serves any call. On a
//! communicator whose pointers are device memory (cuda: see [`crate::side`]) it is
//! memory of the rank's device, as NCCL's, and not collective. Allocations are kept in
//! a table by address, so freeing an address oxccl did not hand out (or
//! freeing one twice) is `oxcclInvalidArgument`, not undefined behaviour.

use crate::buffers::write_out;
use crate::handles::{Comm, OxcclComm};
use crate::result::{guard, CError, OxcclResult};
use parking_lot::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::LazyLock;

/// A live allocation, kept until freed: host memory the host's ranks map
/// ([`SharedMemory`](oxccl::platform::SharedMemory)), or device memory of a rank
/// ([`Block`](crate::side::Block)).
type Allocation = Box<dyn Any + Send>;

/// The live allocations, by address.
static ALLOCATIONS: LazyLock<Mutex<HashMap<usize, Allocation>>> = LazyLock::new(Default::default);

/// `ncclMemAlloc`, with the communicator whose peers map the memory: `size` zeroed bytes,
/// page aligned, at `*ptr`. Collective: every rank of `comm` allocates, in the same order
/// (sizes may differ), each from its own thread.
///
/// # Safety
/// `comm` is a handle from oxccl (checked); `ptr` points at a writable `void*` (checked).
#[no_mangle]
pub unsafe extern "C" fn oxcclMemAlloc(
    comm: *mut OxcclComm,
    ptr: *mut *mut c_void,
    size: usize,
) -> OxcclResult {
    guard("oxcclMemAlloc", || {
        let comm = Comm::usable(comm)?;
        // SAFETY: `ptr` is writable when valid (this function's contract); checked first,
        // so a bad `ptr` allocates nothing.
        unsafe { write_out("ptr", ptr, std::ptr::null_mut()) }?;
        // One byte at least: every live allocation has an address of its own.
        let (addr, memory) = match comm.user_memory() {
            Some(_) => {
                let block = comm.zeroed_block(size.max(1))?;
                (block.span().addr, Box::new(block) as Allocation)
            }
            None => {
                let shared = comm
                    .inner
                    .framework()
                    .alloc_shared(size.max(1))
                    .map_err(|e| CError::from_oxccl(&e, Some(comm.rank())))?;
                (shared.as_ptr() as usize, Box::new(shared) as Allocation)
            }
        };
        ALLOCATIONS.lock().insert(addr, memory);
        // SAFETY: as above.
        unsafe { write_out("ptr", ptr, addr as *mut c_void) }
    })
}

/// `ncclMemFree`: free what `oxcclMemAlloc` returned. No call may be using it.
///
/// # Safety
/// `ptr` is an address from `oxcclMemAlloc` (checked) that no call in flight uses.
#[no_mangle]
pub unsafe extern "C" fn oxcclMemFree(ptr: *mut c_void) -> OxcclResult {
    guard("oxcclMemFree", || {
        let memory = ALLOCATIONS.lock().remove(&(ptr as usize));
        match memory {
            Some(memory) => {
                drop(memory);
                Ok(())
            }
            None => Err(CError::invalid(format!(
                "ptr {ptr:?} is not memory from oxcclMemAlloc (or it was freed already)"
            ))),
        }
    })
}
