//! Host memory standing for an accelerator's, for tests of staging without one.

use super::StageCopies;
use crate::device::DeviceSpan;
use crate::error::{AllocFault, ConfigFault, DeviceError};
use crate::ir::Rank;
use crate::user_memory::{copy_len, UserBlock, UserMemory};

/// [`StageCopies`] whose "device addresses" are host addresses: a [`StagedDevice`]
/// built on it runs every path a GPU's staging does (what is copied in and back, and
/// when; failures; transports to other processes) with `memcpy` for the bus. CI has no
/// GPU, so this is how the tests reach those paths, as the fake verbs fabric does for
/// RDMA.
///
/// [`StagedDevice`]: super::StagedDevice
#[derive(Debug)]
pub struct HostAddressed(());

impl HostAddressed {
    /// # Safety
    ///
    /// Every [`DeviceSpan`] bound to a call of a device built on it must span host memory
    /// of this process that stays allocated, and that nothing else touches, until the
    /// call's completion reported its outcome.
    pub unsafe fn new() -> Self {
        HostAddressed(())
    }
}

impl StageCopies for HostAddressed {
    fn to_host(&self, _rank: Rank, src: DeviceSpan, dst: &mut [u8]) -> Result<(), DeviceError> {
        let len = src.len.min(dst.len());
        // SAFETY: `src` spans live host memory (the constructor's contract), not `dst`,
        // which the caller borrows mutably.
        let src = unsafe { std::slice::from_raw_parts(src.addr as usize as *const u8, len) };
        dst[..len].copy_from_slice(src);
        Ok(())
    }

    fn to_device(&self, _rank: Rank, src: &[u8], dst: DeviceSpan) -> Result<(), DeviceError> {
        let len = src.len().min(dst.len);
        // SAFETY: as above.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst.addr as usize as *mut u8, len) };
        dst.copy_from_slice(&src[..len]);
        Ok(())
    }
}

/// The addresses are host memory of this process, so the fake's "device memory" for an
/// adapter's blocks is heap memory, its copies `memcpy`, and it has no streams (only the
/// default one, 0, which has nothing queued). It checks no span: its constructor's
/// contract is what vouches for them.
impl UserMemory for HostAddressed {
    fn check_span(&self, _rank: Rank, _what: &str, _span: DeviceSpan) -> Result<(), DeviceError> {
        Ok(())
    }

    fn alloc(&self, _rank: Rank, bytes: usize) -> Result<UserBlock, DeviceError> {
        // Words of 8 bytes: aligned for every data type's elements.
        let words = bytes.div_ceil(8);
        let mut memory = Vec::<u64>::new();
        memory
            .try_reserve_exact(words)
            .map_err(|_| DeviceError::Alloc {
                what: "user block",
                bytes,
                fault: AllocFault::OutOfMemory,
            })?;
        memory.resize(words, 0);
        let span = DeviceSpan {
            addr: memory.as_ptr() as u64,
            len: bytes,
        };
        // SAFETY: the vector's heap memory holds `bytes` bytes and does not move when the
        // vector does; nothing else holds it.
        Ok(unsafe { UserBlock::new(span, Box::new(memory)) })
    }

    unsafe fn copy(
        &self,
        _rank: Rank,
        src: DeviceSpan,
        dst: DeviceSpan,
    ) -> Result<(), DeviceError> {
        let len = copy_len(src, dst)?;
        if len > 0 {
            // SAFETY: both spans are live host memory (the constructor's contract and
            // this function's), `dst` unused by others; `copy` allows overlap.
            unsafe {
                std::ptr::copy(
                    src.addr as usize as *const u8,
                    dst.addr as usize as *mut u8,
                    len,
                )
            };
        }
        Ok(())
    }

    fn check_stream(&self, _rank: Rank, stream: usize) -> Result<(), DeviceError> {
        match stream {
            0 => Ok(()),
            _ => Err(ConfigFault::NoStreams {
                kind: "staged test",
                stream,
            }
            .into()),
        }
    }

    fn sync_stream(&self, rank: Rank, stream: usize) -> Result<(), DeviceError> {
        self.check_stream(rank, stream)
    }
}
