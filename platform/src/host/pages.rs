//! Anonymous page mappings: the memory of the host device's own buffers.
//!
//! CCL buffers, scratch and in-process shared user buffers are mapped from the kernel
//! directly, not taken from the global allocator. glibc serves a large allocation with a
//! mapping of its own only until such a block is freed: then it raises its threshold (up
//! to 32 MiB, `mallopt(3)`) and serves the next large allocations from its heap, memory
//! that earlier buffers used, which `alloc_zeroed` clears with a `memset` of the whole
//! buffer. So where a communicator's buffers lay, and whether creating one wrote all of
//! them, depended on what the process had allocated and freed before. A mapping of its
//! own is zeroed by the kernel page by page on first touch (an unused CCL buffer costs
//! address space, not memory), starts on a page, and goes back to the kernel when dropped.
//!
//! Measured on the 2-core development machine, where every point of `oxccl tune` makes
//! fresh communicators: in `oxccl tune --all --ranks 8 -b 512K -e 4M -f 8`, after
//! AllReduce's points had come and gone, AllGather by `mesh-push` measured 1.15x and
//! 1.11x the fastest; tuned alone (two runs, of other sizes around those) 1.00x to
//! 1.05x; with glibc's threshold pinned (`MALLOC_MMAP_THRESHOLD_=131072`, two runs of
//! `--all`) 1.00x to 1.07x. With these mappings, two runs of `--all` measured 1.19x and
//! 1.10x, then 1.03x and 1.07x: the allocator's history is out of the buffers, but it
//! was not the whole of that spread.
//!
//! The mapping is private to the process: ranks in other processes reach the device's
//! buffers through shared-memory segments (`transport::shm`), never through these.

use crate::error::AllocFault;
use rustix::mm::{MapFlags, ProtFlags};
use std::ptr::NonNull;

/// The page size the mappings are aligned to at least (the kernel's may be larger).
pub const PAGE: usize = 4096;

/// `len` bytes of zeroed memory on their own pages, unmapped when dropped.
pub struct Pages {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `Pages` owns its mapping; concurrent access goes through raw pointers whose
// ordering is their users' duty (for device buffers, the analyzer's proof).
unsafe impl Send for Pages {}
// SAFETY: as above; `&Pages` hands out shared bytes or the raw pointer only.
unsafe impl Sync for Pages {}

/// Where an empty mapping points: page aligned, never dereferenced.
#[repr(C, align(4096))]
struct EmptyPage([u8; PAGE]);

impl Pages {
    /// Map `len` zeroed bytes. An empty mapping maps nothing. Fails with the system's
    /// reason when the kernel refuses (out of memory, or a length it cannot map).
    pub fn zeroed(len: usize) -> Result<Self, AllocFault> {
        if len == 0 {
            return Ok(Pages {
                ptr: NonNull::<EmptyPage>::dangling().cast(),
                len: 0,
            });
        }
        // SAFETY: a fresh private anonymous mapping aliases no memory of this process.
        let raw = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .map_err(|errno| match errno {
            rustix::io::Errno::NOMEM => AllocFault::OutOfMemory,
            other => AllocFault::Map(other.to_string()),
        })?;
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or(AllocFault::OutOfMemory)?;
        Ok(Pages { ptr, len })
    }

    /// The first byte, on a page boundary.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, for a user that holds no raw pointer into them while it reads.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes (or `len` is 0) and lives as long as
        // `self`; writes through `as_ptr` are the holder's to order.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `as_bytes`, and `&mut self` excludes other references.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: mapped in `zeroed` with this length; nothing points into it once its
            // owner drops it. An error leaves the mapping in place, which only leaks.
            let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pages")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_start_on_a_page_hold_their_length_and_read_zero() {
        for len in [0, 1, 7, PAGE, 65539, 3 << 20] {
            let mut pages = Pages::zeroed(len).unwrap();
            assert_eq!(pages.as_ptr() as usize % PAGE, 0, "{len} bytes");
            assert_eq!(pages.len(), len);
            assert!(pages.as_bytes().iter().all(|&b| b == 0), "{len} bytes");
            if let Some(last) = pages.as_bytes_mut().last_mut() {
                *last = 7;
            }
            assert_eq!(pages.as_bytes().last().copied(), (len > 0).then_some(7));
        }
    }

    #[test]
    fn a_length_the_kernel_cannot_map_is_an_error_not_a_panic() {
        let err = Pages::zeroed(usize::MAX - PAGE).unwrap_err();
        assert!(
            matches!(err, AllocFault::OutOfMemory | AllocFault::Map(_)),
            "{err}"
        );
    }
}
