//! [`SharedBuffer`]: a rank's typed user buffer in memory its peers can reach.
//!
//! In a job of processes with `OXCCL_SHARED_BUFFERS=1`, the ranks on one host map each
//! other's shared buffers, and calls on them run zero-copy: a peer reads this rank's send
//! buffer and writes its receive buffer in place, where staged calls copy every byte into
//! the CCL buffers and out again. Such a job refuses calls on other memory. Elsewhere a
//! shared buffer is plain heap memory that serves any call.
//!
//! As with every zero-copy call, a call that fails (an abort, a peer lost) may return
//! while a peer's tasks still finish with its buffers: their contents are undefined
//! after a failure, and the communicator cannot be used again.
//!
//! ```
//! use oxccl::{Communicator, Config, ReduceOp};
//!
//! let comms = Communicator::init_all(2, Config::default()).unwrap();
//! std::thread::scope(|s| {
//!     for comm in &comms {
//!         s.spawn(move || {
//!             let mut send = comm.alloc_shared::<f32>(1000).unwrap();
//!             let mut recv = comm.alloc_shared::<f32>(1000).unwrap();
//!             send.fill(comm.rank() as f32 + 1.0);
//!             comm.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
//!             assert!(recv.iter().all(|&x| x == 3.0));
//!         });
//!     }
//! });
//! ```

use crate::Communicator;
use oxccl_framework::limits::MAX_BUFFER_BYTES;
use oxccl_framework::{ArgError, Error};
use oxccl_platform::{Element, SharedMemory};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// `len` elements of `T` from [`Communicator::alloc_shared`], zeroed when allocated; used
/// as a slice (`&buf`, `&mut buf`) in any call.
pub struct SharedBuffer<T: Element> {
    memory: SharedMemory,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Element> SharedBuffer<T> {
    pub(crate) fn new(comm: &Communicator, len: usize) -> Result<Self, Error> {
        let too_large = ArgError::AllocTooLarge {
            len,
            dtype: T::DTYPE,
            limit: MAX_BUFFER_BYTES,
        };
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .filter(|&b| b <= MAX_BUFFER_BYTES)
            .ok_or(too_large)?;
        let memory = comm.framework().alloc_shared(bytes)?;
        Ok(SharedBuffer {
            memory,
            len,
            _elements: PhantomData,
        })
    }
}

impl<T: Element> Deref for SharedBuffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the memory holds `len * size_of::<T>()` bytes (checked at allocation),
        // page aligned, zeroed (a valid `T`: `T` is `Pod`) or written as `T`s since, and
        // lives as long as `self`. Peers touch it only during a call that borrows it.
        unsafe { std::slice::from_raw_parts(self.memory.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Element> DerefMut for SharedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.memory.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Element> std::fmt::Debug for SharedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("dtype", &T::DTYPE)
            .field("len", &self.len)
            .finish()
    }
}
