//! Host memory: device-owned buffers and the registry of user buffers in flight.
//!
//! CCL buffers and scratch live as long as the device, so their addresses are stable and a
//! task resolves them without locking. User buffers are registered by a rank for the
//! duration of its `execute` call. Peers that touch them (zero-copy eager mode) take a
//! counted reference to the registration; unregistering waits until those references are
//! dropped, so no task touches a user buffer after its owner's call returned.

use crate::error::DeviceError;
use crate::ir::{Buf, Rank};
use parking_lot::{Mutex, RwLock};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment of device buffers: enough for every element type. Larger alignments would
/// make the system allocator zero the buffer eagerly instead of taking fresh zeroed pages
/// from the kernel, committing every CCL buffer up front.
const ALIGN: usize = 16;

/// A zeroed, 16-byte aligned heap buffer owned by the device.
pub(crate) struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: HostBuffer owns its allocation; concurrent access goes through raw pointers whose
// ordering is the program's responsibility (proved by the analyzer), like device memory.
unsafe impl Send for HostBuffer {}
// SAFETY: as above; `&HostBuffer` only hands out the raw pointer.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    pub(crate) fn new(len: usize, what: &'static str) -> Result<Self, DeviceError> {
        let alloc_err = |reason: String| DeviceError::Alloc {
            what,
            bytes: len,
            reason,
        };
        if len == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::<u64>::dangling().cast(),
                len: 0,
            });
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|e| alloc_err(e.to_string()))?;
        // SAFETY: layout has non-zero size. Large zeroed allocations come from mmap and are
        // committed lazily, so an unused CCL buffer costs address space, not memory.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| alloc_err("out of memory".into()))?;
        Ok(HostBuffer { ptr, len })
    }

    fn region(&self) -> Region {
        Region {
            ptr: self.ptr.as_ptr(),
            len: self.len,
            writable: true,
        }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this exact layout.
            unsafe {
                dealloc(
                    self.ptr.as_ptr(),
                    Layout::from_size_align_unchecked(self.len, ALIGN),
                )
            }
        }
    }
}

/// A raw memory range that a task may touch.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Region {
    pub ptr: *mut u8,
    pub len: usize,
    pub writable: bool,
}

// SAFETY: a Region is an address range; the code that dereferences it upholds the rules
// documented on `Memory::resolve`.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// A rank's user buffers while its `execute` call runs.
#[derive(Debug)]
pub(crate) struct UserRegions {
    pub input: Region,
    pub output: Region,
}

/// A resolved region plus whatever keeps it alive.
pub(crate) struct Resolved {
    pub region: Region,
    /// Held while a task uses a user buffer, so its owner cannot return in between.
    pub keep: Option<Arc<UserRegions>>,
}

/// All memory of one host device.
pub(crate) struct Memory {
    ccl_in: Vec<HostBuffer>,
    ccl_out: Vec<HostBuffer>,
    scratch: RwLock<Vec<Vec<HostBuffer>>>,
    user: Vec<Mutex<Option<Arc<UserRegions>>>>,
}

impl Memory {
    pub(crate) fn new(ranks: usize, ccl_bytes: usize) -> Result<Self, DeviceError> {
        let buffers = |what| {
            (0..ranks)
                .map(|_| HostBuffer::new(ccl_bytes, what))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Memory {
            ccl_in: buffers("CclIn")?,
            ccl_out: buffers("CclOut")?,
            scratch: RwLock::new(Vec::new()),
            user: (0..ranks).map(|_| Mutex::new(None)).collect(),
        })
    }

    pub(crate) fn alloc_scratch(&self, ranks: usize, bytes: usize) -> Result<usize, DeviceError> {
        let set = (0..ranks)
            .map(|_| HostBuffer::new(bytes, "Scratch"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut scratch = self.scratch.write();
        scratch.push(set);
        Ok(scratch.len() - 1)
    }

    /// Publish `rank`'s user buffers; returns the registration to pass to `unregister`, or
    /// an error if the rank already has a collective in flight.
    pub(crate) fn register(
        &self,
        rank: Rank,
        regions: UserRegions,
    ) -> Result<Arc<UserRegions>, DeviceError> {
        let mut slot = self.user[rank].lock();
        if slot.is_some() {
            return Err(DeviceError::Busy { rank });
        }
        let reg = Arc::new(regions);
        *slot = Some(reg.clone());
        Ok(reg)
    }

    /// Withdraw `rank`'s user buffers and wait until no task still holds them.
    pub(crate) fn unregister(&self, rank: Rank, reg: Arc<UserRegions>) {
        self.user[rank].lock().take();
        let mut spins = 0u32;
        while Arc::strong_count(&reg) > 1 {
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }

    /// The memory behind `(rank, buf)` for a program whose scratch set is `scratch`.
    ///
    /// Device buffers are always valid; user buffers only while their owner is registered.
    /// Callers bounds-check against `Region::len` before touching memory, and must not keep
    /// the pointer past the life of the returned `Resolved`.
    pub(crate) fn resolve(
        &self,
        rank: Rank,
        buf: Buf,
        scratch: Option<usize>,
    ) -> Result<Resolved, String> {
        let region = match buf {
            Buf::CclIn => self.ccl_in[rank].region(),
            Buf::CclOut => self.ccl_out[rank].region(),
            Buf::Scratch => {
                let id = scratch.ok_or("the executor requested no scratch")?;
                self.scratch.read()[id][rank].region()
            }
            Buf::Input | Buf::Output => {
                let reg = self.user[rank].lock().clone().ok_or_else(|| {
                    format!("rank {rank} has no collective in flight, so its {buf:?} is unbound")
                })?;
                let region = if buf == Buf::Input {
                    reg.input
                } else {
                    reg.output
                };
                return Ok(Resolved {
                    region,
                    keep: Some(reg),
                });
            }
        };
        Ok(Resolved { region, keep: None })
    }
}
