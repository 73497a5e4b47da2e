//! Host memory: device-owned buffers and the registry of user buffers in flight.
//!
//! One set of buffers per **local** rank (index: the rank's slot among the device's local
//! ranks). CCL buffers and scratch live as long as the device, so their addresses are
//! stable: `compile` resolves them once. User buffers are registered by a rank for the
//! duration of its submission, with the submission's epoch. Peers that touch them
//! (zero-copy eager mode) take a counted reference to the registration; unregistering
//! waits until those references are dropped, so no task touches a user buffer after its
//! owner's call returned, even when a failure released the exit fence early.

use crate::error::{AllocFault, DeviceError, SliceFault};
use crate::ir::{Buf, Rank};
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment of device buffers: enough for every element type. Larger alignments would
/// make the system allocator zero the buffer eagerly instead of taking fresh zeroed pages
/// from the kernel, committing every CCL buffer up front.
const ALIGN: usize = 16;

/// A zeroed, 16-byte aligned buffer owned by the device: on the heap, or in a
/// shared-memory segment that `keep` keeps mapped.
pub(crate) struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    keep: Option<Arc<dyn Send + Sync>>,
}

// SAFETY: HostBuffer owns its allocation; concurrent access goes through raw pointers whose
// ordering is the program's responsibility (proved by the analyzer), like device memory.
unsafe impl Send for HostBuffer {}
// SAFETY: as above; `&HostBuffer` only hands out the raw pointer.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    pub(crate) fn new(len: usize, what: &'static str) -> Result<Self, DeviceError> {
        let alloc_err = |fault: AllocFault| DeviceError::Alloc {
            what,
            bytes: len,
            fault,
        };
        if len == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::<u64>::dangling().cast(),
                len: 0,
                keep: None,
            });
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|e| alloc_err(e.into()))?;
        // SAFETY: layout has non-zero size. Large zeroed allocations come from mmap and are
        // committed lazily, so an unused CCL buffer costs address space, not memory.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| alloc_err(AllocFault::OutOfMemory))?;
        Ok(HostBuffer {
            ptr,
            len,
            keep: None,
        })
    }

    /// A buffer at `region` in memory that `keep` owns (a shared-memory segment).
    pub(crate) fn in_shared(region: Region, keep: Arc<dyn Send + Sync>) -> Self {
        HostBuffer {
            ptr: NonNull::new(region.ptr).unwrap_or(NonNull::<u64>::dangling().cast()),
            len: region.len,
            keep: Some(keep),
        }
    }

    pub(crate) fn region(&self) -> Region {
        Region {
            ptr: self.ptr.as_ptr(),
            len: self.len,
            writable: true,
        }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.len > 0 && self.keep.is_none() {
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

/// `bytes` of zeroed heap memory aligned to a page (what [`crate::device::Device::alloc_shared`]
/// promises), and what frees it.
pub(crate) fn page_aligned(
    bytes: usize,
) -> Result<(*mut u8, Box<dyn std::any::Any + Send + Sync>), DeviceError> {
    const PAGE: usize = 4096;
    struct PageAligned(NonNull<u8>, Layout);
    // SAFETY: owns its allocation; the pointer is only freed on drop.
    unsafe impl Send for PageAligned {}
    // SAFETY: as above: `&PageAligned` exposes nothing.
    unsafe impl Sync for PageAligned {}
    impl Drop for PageAligned {
        fn drop(&mut self) {
            // SAFETY: allocated below with this layout (non-zero size).
            unsafe { dealloc(self.0.as_ptr(), self.1) }
        }
    }
    if bytes == 0 {
        return Ok((
            NonNull::<[u8; PAGE]>::dangling().as_ptr().cast(),
            Box::new(()),
        ));
    }
    let fault = |fault: AllocFault| DeviceError::Alloc {
        what: "shared user memory",
        bytes,
        fault,
    };
    let layout = Layout::from_size_align(bytes, PAGE).map_err(|e| fault(e.into()))?;
    // SAFETY: the layout has a non-zero size.
    let ptr =
        NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(fault(AllocFault::OutOfMemory))?;
    Ok((ptr.as_ptr(), Box::new(PageAligned(ptr, layout))))
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

/// A rank's user buffers while its submission runs.
#[derive(Copy, Clone, Debug)]
pub(crate) struct UserRegions {
    pub input: Region,
    pub output: Region,
    /// The submission's epoch: a peer's task of another epoch must not use them.
    pub epoch: u64,
}

/// A launch's user buffers as the key of the tasks bound with them: (address, length,
/// writable) of its input, then of its output.
pub(crate) type BindingKey = [(usize, usize, bool); 2];

impl UserRegions {
    /// The key of tasks bound with these buffers (see `serial`).
    pub(crate) fn key(&self) -> BindingKey {
        let r = |r: &Region| (r.ptr as usize, r.len, r.writable);
        [r(&self.input), r(&self.output)]
    }
}

/// All memory of one host device, indexed by local slot.
pub(crate) struct Memory {
    pub ccl_in: Vec<HostBuffer>,
    pub ccl_out: Vec<HostBuffer>,
    scratch: RwLock<Vec<Arc<Vec<HostBuffer>>>>,
    /// Per local slot, the user buffers of its submissions in flight, one per epoch
    /// (several when a rank's submissions are queued: graph mode hands a sequence of
    /// calls to the device at once; each runs after the previous one on its rank).
    user: Vec<Mutex<SmallVec<[Arc<UserRegions>; 2]>>>,
}

impl Memory {
    pub(crate) fn new(local: usize, ccl_bytes: usize) -> Result<Self, DeviceError> {
        let buffers = |what| {
            (0..local)
                .map(|_| HostBuffer::new(ccl_bytes, what))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Memory {
            ccl_in: buffers("CclIn")?,
            ccl_out: buffers("CclOut")?,
            scratch: RwLock::new(Vec::new()),
            user: (0..local).map(|_| Mutex::new(SmallVec::new())).collect(),
        })
    }

    /// Memory whose CCL buffers are the shared-memory blocks of the local ranks.
    pub(crate) fn in_blocks(blocks: &[super::shm::Block]) -> Self {
        let keep = super::shm::Block::keep;
        Memory {
            ccl_in: blocks
                .iter()
                .map(|b| HostBuffer::in_shared(b.ccl_in(), keep(b)))
                .collect(),
            ccl_out: blocks
                .iter()
                .map(|b| HostBuffer::in_shared(b.ccl_out(), keep(b)))
                .collect(),
            scratch: RwLock::new(Vec::new()),
            user: blocks.iter().map(|_| Mutex::new(SmallVec::new())).collect(),
        }
    }

    pub(crate) fn alloc_scratch(&self, local: usize, bytes: usize) -> Result<usize, DeviceError> {
        let set = (0..local)
            .map(|_| HostBuffer::new(bytes, "Scratch"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut scratch = self.scratch.write();
        scratch.push(Arc::new(set));
        Ok(scratch.len() - 1)
    }

    /// How many scratch sets were allocated (the next one's id).
    pub(crate) fn scratch_sets(&self) -> usize {
        self.scratch.read().len()
    }

    /// Allocate a scratch set whose buffer for local slot `slot` is `make(slot, id)`'s
    /// region, kept mapped by what `make` returns with it (the shm transport's segment).
    pub(crate) fn alloc_scratch_with(
        &self,
        mut make: impl FnMut(usize, usize) -> Result<(Region, Arc<dyn Send + Sync>), DeviceError>,
    ) -> Result<usize, DeviceError> {
        let mut scratch = self.scratch.write();
        let id = scratch.len();
        let set = (0..self.user.len())
            .map(|slot| {
                let (region, keep) = make(slot, id)?;
                Ok(HostBuffer::in_shared(region, keep))
            })
            .collect::<Result<Vec<_>, DeviceError>>()?;
        scratch.push(Arc::new(set));
        Ok(id)
    }

    /// Bytes of every device-owned buffer of local slot `slot`: its CCL buffers and
    /// scratch.
    pub(crate) fn device_bytes(&self, slot: usize) -> usize {
        let scratch = self.scratch.read();
        let scratch = scratch.iter().map(|set| set[slot].region().len);
        let ccl = [&self.ccl_in[slot], &self.ccl_out[slot]].map(|b| b.region().len);
        ccl.into_iter()
            .chain(scratch)
            .fold(0usize, usize::saturating_add)
    }

    /// The device-owned region behind `(slot, buf)`; `scratch` is the program's set.
    /// Device buffers live as long as the device.
    pub(crate) fn device_region(
        &self,
        slot: usize,
        buf: Buf,
        scratch: Option<usize>,
    ) -> Result<Region, SliceFault> {
        match buf {
            Buf::CclIn => Ok(self.ccl_in[slot].region()),
            Buf::CclOut => Ok(self.ccl_out[slot].region()),
            Buf::Scratch => {
                let id = scratch.ok_or(SliceFault::NoScratch)?;
                let sets = self.scratch.read();
                let set = sets.get(id).ok_or(SliceFault::NoSuchScratch { id })?;
                Ok(set[slot].region())
            }
            Buf::Input | Buf::Output => unreachable!("user buffers are bound per submission"),
        }
    }

    /// Publish `slot`'s user buffers for the submission of `regions.epoch`; returns the
    /// registration to pass to `unregister`, or an error if the rank already has a
    /// submission of that epoch in flight.
    pub(crate) fn register(
        &self,
        slot: usize,
        rank: Rank,
        regions: UserRegions,
    ) -> Result<Arc<UserRegions>, DeviceError> {
        let mut entry = self.user[slot].lock();
        if entry.iter().any(|r| r.epoch == regions.epoch) {
            return Err(DeviceError::Busy { rank });
        }
        let reg = Arc::new(regions);
        entry.push(reg.clone());
        Ok(reg)
    }

    /// Withdraw the user buffers `reg` registered and wait until no task still holds
    /// them.
    pub(crate) fn unregister(&self, slot: usize, reg: Arc<UserRegions>) {
        self.user[slot].lock().retain(|r| !Arc::ptr_eq(r, &reg));
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

    /// A peer's user buffer for a task of `epoch`: the region and the registration that
    /// keeps it alive. The caller bounds-checks against `Region::len` before touching it.
    pub(crate) fn peer_user(
        &self,
        slot: usize,
        rank: Rank,
        buf: Buf,
        epoch: u64,
    ) -> Result<(Region, Arc<UserRegions>), SliceFault> {
        let reg = {
            let regs = self.user[slot].lock();
            match regs.iter().find(|r| r.epoch == epoch) {
                Some(reg) => reg.clone(),
                None => {
                    let bound = regs.first().ok_or(SliceFault::Unbound { rank, buf })?;
                    return Err(SliceFault::OtherEpoch {
                        rank,
                        bound: bound.epoch,
                        running: epoch,
                    });
                }
            }
        };
        let region = if buf == Buf::Input {
            reg.input
        } else {
            reg.output
        };
        Ok((region, reg))
    }
}
