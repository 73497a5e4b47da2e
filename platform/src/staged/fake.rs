//! Host memory standing for an accelerator's, for tests of staging without one.

use super::StageCopies;
use crate::device::DeviceSpan;
use crate::error::DeviceError;
use crate::ir::Rank;

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
