//! Device memory of the cuda backend: per local rank its CCL buffers, scratch and signal
//! words on its GPU, staging buffers for host-slice bindings, and one block of mapped host
//! memory per device for the words both the host and the GPUs read (epochs, progress).

use super::driver::{cu, Gpu};
use crate::error::{AllocFault, DeviceError};
use cudarc::driver::sys;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A device allocation from the GPU's stream-ordered pool, freed on drop.
pub(crate) struct DevAlloc {
    gpu: Arc<Gpu>,
    pub ptr: sys::CUdeviceptr,
    pub len: usize,
}

impl std::fmt::Debug for DevAlloc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}[{:#x}; {}]", self.gpu, self.ptr, self.len)
    }
}

impl DevAlloc {
    /// `len` zeroed bytes on `gpu` (at least one byte, so every buffer has an address),
    /// allocated in stream order on the GPU's allocation stream: no other stream waits.
    pub fn zeroed(gpu: &Arc<Gpu>, len: usize, what: &'static str) -> Result<Self, DeviceError> {
        let _current = gpu.bind()?;
        let alloc = Self::new(gpu, len, what)?;
        cu!(cuMemsetD8Async(alloc.ptr, 0, len.max(1), gpu.alloc_stream))?;
        cu!(cuStreamSynchronize(gpu.alloc_stream))?;
        Ok(alloc)
    }

    /// `bytes` copied into a new allocation on `gpu`.
    pub fn upload(gpu: &Arc<Gpu>, bytes: &[u8], what: &'static str) -> Result<Self, DeviceError> {
        let _current = gpu.bind()?;
        let alloc = Self::new(gpu, bytes.len(), what)?;
        let stream = gpu.alloc_stream;
        if !bytes.is_empty() {
            cu!(cuMemcpyHtoDAsync_v2(
                alloc.ptr,
                bytes.as_ptr().cast(),
                bytes.len(),
                stream
            ))?;
        }
        cu!(cuStreamSynchronize(stream))?;
        Ok(alloc)
    }

    /// `len` bytes (at least one), not yet written.
    fn new(gpu: &Arc<Gpu>, len: usize, what: &'static str) -> Result<Self, DeviceError> {
        let _current = gpu.bind()?;
        let mut ptr = 0;
        cu!(cuMemAllocAsync(&mut ptr, len.max(1), gpu.alloc_stream)).map_err(|e| {
            DeviceError::Alloc {
                what,
                bytes: len,
                fault: AllocFault::Device(e.to_string()),
            }
        })?;
        Ok(DevAlloc {
            gpu: gpu.clone(),
            ptr,
            len,
        })
    }
}

impl Drop for DevAlloc {
    fn drop(&mut self) {
        if let Ok(_current) = self.gpu.bind() {
            // Stream-ordered: the free never waits for the device (see
            // `Gpu::alloc_stream`).
            let _ = cu!(cuMemFreeAsync(self.ptr, self.gpu.alloc_stream));
        }
    }
}

/// Host memory the GPUs map: 32-bit words the host reads and writes as atomics and the
/// program kernel reads and writes (volatile) through `dev`.
pub(crate) struct Mapped {
    host: *mut AtomicU32,
    pub dev: sys::CUdeviceptr,
    words: usize,
    gpu: Arc<Gpu>,
}

// SAFETY: the words are atomics; the pointer stays valid until drop.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// `words` zeroed words, mapped into every context (portable).
    pub fn new(gpu: &Arc<Gpu>, words: usize) -> Result<Self, DeviceError> {
        let _current = gpu.bind()?;
        let bytes = words
            .max(1)
            .checked_mul(4)
            .ok_or(crate::error::ConfigFault::TooLarge {
                what: "mapped host words",
            })?;
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        cu!(cuMemHostAlloc(&mut host, bytes, flags)).map_err(|e| DeviceError::Alloc {
            what: "mapped host words",
            bytes,
            fault: AllocFault::Device(e.to_string()),
        })?;
        let mut mapped = Mapped {
            host: host.cast(),
            dev: 0,
            words,
            gpu: gpu.clone(),
        };
        // SAFETY: `host` points to `bytes` bytes just allocated, aligned for u32.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        cu!(cuMemHostGetDevicePointer_v2(&mut mapped.dev, host, 0))?;
        Ok(mapped)
    }

    /// Word `i` as the host sees it.
    pub fn word(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.words, "mapped word {i} of {}", self.words);
        // SAFETY: `i` is in range and the block lives as long as `self`.
        unsafe { &*self.host.add(i) }
    }

    /// Word `i`'s address for the GPUs.
    pub fn dev_addr(&self, i: usize) -> sys::CUdeviceptr {
        assert!(i < self.words);
        self.dev + 4 * i as u64
    }

    pub fn load(&self, i: usize) -> u32 {
        self.word(i).load(Ordering::Acquire)
    }

    pub fn store(&self, i: usize, v: u32) {
        self.word(i).store(v, Ordering::Release)
    }

    /// Word `i`'s value, replaced by `v`.
    pub fn swap(&self, i: usize, v: u32) -> u32 {
        self.word(i).swap(v, Ordering::AcqRel)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if let Ok(_current) = self.gpu.bind() {
            let _ = cu!(cuMemFreeHost(self.host.cast()));
        }
    }
}

/// Words per rank in the local region of its signals (stream fork/join and
/// executor-private notifies): fixed, so a compiled program's addresses never move.
pub(crate) const LOCAL_NOTIFIES: usize = 4096;

/// Streams one rank's program may have (each has a progress word).
pub(crate) const MAX_STREAMS: usize = 64;

/// One local rank's memory on its GPU.
pub(crate) struct RankMemory {
    pub gpu: Arc<Gpu>,
    pub ccl_in: DevAlloc,
    pub ccl_out: DevAlloc,
    /// The link region, then [`LOCAL_NOTIFIES`] local words.
    pub signals: DevAlloc,
    /// Staging for host-slice bindings: (input, output), grown on demand.
    pub staging: parking_lot::Mutex<(Option<DevAlloc>, Option<DevAlloc>)>,
}

impl RankMemory {
    pub fn new(gpu: &Arc<Gpu>, ccl_bytes: usize, link_words: usize) -> Result<Self, DeviceError> {
        let words = link_words
            .checked_add(LOCAL_NOTIFIES)
            .and_then(|w| w.checked_mul(4))
            .ok_or(crate::error::ConfigFault::TooLarge {
                what: "signal bank",
            })?;
        Ok(RankMemory {
            gpu: gpu.clone(),
            ccl_in: DevAlloc::zeroed(gpu, ccl_bytes, "CclIn")?,
            ccl_out: DevAlloc::zeroed(gpu, ccl_bytes, "CclOut")?,
            signals: DevAlloc::zeroed(gpu, words, "signal words")?,
            staging: parking_lot::Mutex::new((None, None)),
        })
    }

    /// The address of signal word `index`.
    pub fn signal(&self, index: usize) -> sys::CUdeviceptr {
        self.signals.ptr + 4 * index as u64
    }
}

/// A staging buffer of at least `len` bytes in `slot` (kept, or replaced by a larger one).
pub(crate) fn staging(
    gpu: &Arc<Gpu>,
    slot: &mut Option<DevAlloc>,
    len: usize,
    what: &'static str,
) -> Result<sys::CUdeviceptr, DeviceError> {
    if slot.as_ref().is_none_or(|a| a.len < len) {
        *slot = None;
        *slot = Some(DevAlloc::zeroed(gpu, len, what)?);
    }
    Ok(slot.as_ref().map_or(0, |a| a.ptr))
}
