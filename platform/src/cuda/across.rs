//! Ranks of a job of processes on GPUs: each process's ranks on their GPUs, the job's
//! collectives run by the host device through host memory ([`crate::staged`]).
//!
//! A device created with a transport to other processes (`DeviceConfig::shm` or `tcp`:
//! `Communicator::init_rank` under `oxccl perf --procs`, `mpirun` or `torchrun`) takes
//! this path: every call bound to a rank's device buffers is copied into host memory, run over
//! the host transports (shared memory on a host; RDMA or TCP between hosts), and what it
//! wrote copied back. Each rank has its GPU's primary context (the memory its
//! `DeviceBuffer`s come from) and a stream of its own for those copies. The host blocks
//! the copies go through are page-locked once, when the staging pool makes them
//! (`cuMemHostRegister`, portable to every GPU of the process, as the pool lends a block
//! to any local rank), so the copies are DMA at the bus's speed rather than staged again
//! through the driver's pageable bounce buffers; `DeviceConfig::pin_staging` off
//! (`OXCCL_CUDA_PIN_STAGING=0`), a GPU without host registration, or a platform that
//! refuses to lock (warned once) leave them pageable, and a block that could not be
//! locked for now (warned) stays pageable while the next ones are tried. Graph mode runs
//! step by step here, and no CUDA graph is built.

use super::driver::{self, cu, PrimaryContext};
use super::placement::placement;
use super::CudaError;
use crate::device::{DeviceConfig, DeviceSpan};
use crate::error::DeviceError;
use crate::ir::Rank;
use crate::staged::{HostPin, StageCopies, StagedDevice};
use cudarc::driver::sys;
use std::sync::atomic::{AtomicBool, Ordering};

/// The cuda backend's engine for ranks in a job of processes.
pub(super) struct AcrossProcesses {
    pub device: StagedDevice,
    /// Per local rank (by its index in the config's `local_ranks`), its GPU.
    ordinals: Vec<usize>,
}

impl std::fmt::Debug for AcrossProcesses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcrossProcesses")
            .field("gpus", &self.ordinals)
            .field("device", &self.device)
            .finish()
    }
}

impl AcrossProcesses {
    /// Place the local ranks (see [`placement`]), open their GPUs' contexts and the host
    /// device that joins them to the job.
    pub fn new(config: DeviceConfig) -> Result<Self, DeviceError> {
        config.local_slots()?;
        let count = driver::init()?;
        let ordinals = placement(&config, count)?;
        let ranks = ordinals
            .iter()
            .map(|&o| RankCopies::open(o))
            .collect::<Result<Vec<_>, _>>()?;
        let pinning = config.pin_staging && can_register_host(&ranks);
        let copies = CudaCopies {
            local: config.local_ranks.clone(),
            ranks,
            pinning: AtomicBool::new(pinning),
        };
        let device = StagedDevice::new("cuda", config, Box::new(copies))?;
        Ok(AcrossProcesses { device, ordinals })
    }

    /// The CUDA device ordinal local rank `rank` runs on.
    pub fn ordinal_of(&self, rank: Rank) -> Result<usize, DeviceError> {
        let config = crate::device::Device::config(&self.device);
        Ok(self.ordinals[slot_of(&config.local_ranks, rank)?])
    }
}

/// Where local rank `rank` stands in `local` (a process serves one rank, or a few), or
/// the refusal naming the ranks served here.
fn slot_of(local: &[Rank], rank: Rank) -> Result<usize, DeviceError> {
    local.iter().position(|&r| r == rank).ok_or_else(|| {
        crate::error::ConfigFault::NotServed {
            rank,
            local: local.to_vec(),
        }
        .into()
    })
}

/// One local rank's way to its GPU's memory.
struct RankCopies {
    /// Its copies are ordered on it alone.
    stream: sys::CUstream,
    /// The context the stream belongs to.
    context: PrimaryContext,
}

impl RankCopies {
    fn open(ordinal: usize) -> Result<Self, CudaError> {
        let context = PrimaryContext::of(ordinal)?;
        let _current = context.bind()?;
        let stream = driver::new_stream()?;
        Ok(RankCopies { stream, context })
    }

    /// Bind the context, let `copy` order a copy on the stream, and wait for it.
    fn copy(
        &self,
        copy: impl FnOnce(sys::CUstream) -> Result<(), CudaError>,
    ) -> Result<(), DeviceError> {
        let _current = self.context.bind()?;
        copy(self.stream)?;
        Ok(cu!(cuStreamSynchronize(self.stream))?)
    }
}

impl Drop for RankCopies {
    fn drop(&mut self) {
        if let Ok(_current) = self.context.bind() {
            let _ = cu!(cuStreamSynchronize(self.stream));
            let _ = cu!(cuStreamDestroy_v2(self.stream));
        }
    }
}

/// Whether every local rank's GPU can page-lock host memory it did not allocate
/// (`CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED`: not on every platform). A driver that
/// cannot say counts as "no": pageable blocks work everywhere.
fn can_register_host(ranks: &[RankCopies]) -> bool {
    ranks.iter().all(|rank| {
        let mut supported = 0;
        let asked = cu!(cuDeviceGetAttribute(
            &mut supported,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED,
            rank.context.device
        ));
        asked.is_ok() && supported != 0
    })
}

/// Staging copies through each local rank's context and stream.
struct CudaCopies {
    /// The local ranks, in the order of `ranks`.
    local: Vec<Rank>,
    ranks: Vec<RankCopies>,
    /// Page-lock new staging blocks: asked for, every GPU can, and the platform has not
    /// refused a lock ([`never_locks`]).
    pinning: AtomicBool,
}

// SAFETY: the streams and contexts are driver handles usable from any thread once the
// context is current, which every copy makes it first; the driver orders concurrent
// copies on one stream, and each copy waits for the stream before it returns.
unsafe impl Send for CudaCopies {}
// SAFETY: as above.
unsafe impl Sync for CudaCopies {}

impl CudaCopies {
    fn rank(&self, rank: Rank) -> Result<&RankCopies, DeviceError> {
        Ok(&self.ranks[slot_of(&self.local, rank)?])
    }
}

impl StageCopies for CudaCopies {
    fn to_host(&self, rank: Rank, src: DeviceSpan, dst: &mut [u8]) -> Result<(), DeviceError> {
        equal(src.len, dst.len())?;
        // `dst` is borrowed, and `src` is the caller's device memory, until the copy is
        // waited for.
        self.rank(rank)?.copy(|stream| {
            cu!(cuMemcpyDtoHAsync_v2(
                dst.as_mut_ptr().cast(),
                src.addr,
                dst.len(),
                stream
            ))
        })
    }

    fn to_device(&self, rank: Rank, src: &[u8], dst: DeviceSpan) -> Result<(), DeviceError> {
        equal(src.len(), dst.len)?;
        self.rank(rank)?.copy(|stream| {
            cu!(cuMemcpyHtoDAsync_v2(
                dst.addr,
                src.as_ptr().cast(),
                src.len(),
                stream
            ))
        })
    }

    fn pin(&self, rank: Rank, block: &mut [u8]) -> Option<Box<dyn HostPin>> {
        if !self.pinning.load(Ordering::Relaxed) {
            return None;
        }
        let context = self.rank(rank).ok()?.context;
        let error = match Pinned::lock(context, block) {
            Ok(pinned) => return Some(Box::new(pinned)),
            Err(error) => error,
        };
        // A platform that refuses page-locking refuses every block: stop asking. Other
        // failures (memory short for now) leave this block pageable, and the next one
        // is tried again.
        let refused = never_locks(&error);
        if !refused || self.pinning.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                gpu = context.ordinal,
                bytes = block.len(),
                %error,
                for_good = refused,
                "a staging block stays pageable: it could not be page-locked (copies to \
                 and from the GPU through it run slower)"
            );
        }
        None
    }
}

/// Whether `error`, a failed `cuMemHostRegister`, says the platform never page-locks
/// memory it did not allocate (rather than that it could not lock this block now).
fn never_locks(error: &CudaError) -> bool {
    use sys::CUresult as R;
    let refusals = [R::CUDA_ERROR_NOT_SUPPORTED, R::CUDA_ERROR_NOT_PERMITTED];
    matches!(error, CudaError::Driver { code, .. } if refusals.iter().any(|r| *r as i32 == *code))
}

/// A staging block page-locked for every context of the process, unlocked before the
/// pool frees the block ([`HostPin::unpin`]).
struct Pinned {
    addr: usize,
    /// Where it was locked, current again to unlock it.
    context: PrimaryContext,
}

impl Pinned {
    fn lock(context: PrimaryContext, block: &mut [u8]) -> Result<Self, CudaError> {
        let _current = context.bind()?;
        // Portable: the pool lends the block to any local rank, on any GPU of the process.
        cu!(cuMemHostRegister_v2(
            block.as_mut_ptr().cast(),
            block.len(),
            sys::CU_MEMHOSTREGISTER_PORTABLE
        ))?;
        Ok(Pinned {
            addr: block.as_mut_ptr() as usize,
            context,
        })
    }
}

impl HostPin for Pinned {
    fn unpin(self: Box<Self>) -> bool {
        // No copy uses the block any more: each is waited for before it returns, and the
        // pool holds the block while it is unlocked.
        let Ok(_current) = self.context.bind() else {
            return false;
        };
        cu!(cuMemHostUnregister(self.addr as *mut std::ffi::c_void)).is_ok()
    }
}

/// A staging copy's two sides have one length (the staged device sizes them so).
fn equal(device: usize, host: usize) -> Result<(), CudaError> {
    match device == host {
        true => Ok(()),
        false => Err(CudaError::CopyLength {
            what: "staging copy",
            source_len: device,
            destination_len: host,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(code: sys::CUresult) -> CudaError {
        CudaError::Driver {
            call: "cuMemHostRegister_v2",
            code: code as i32,
            name: format!("{code:?}"),
        }
    }

    #[test]
    fn only_a_platform_that_never_locks_turns_page_locking_off() {
        use sys::CUresult as R;
        assert!(never_locks(&driver(R::CUDA_ERROR_NOT_SUPPORTED)));
        assert!(never_locks(&driver(R::CUDA_ERROR_NOT_PERMITTED)));
        for passing in [
            R::CUDA_ERROR_OUT_OF_MEMORY,
            R::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
            R::CUDA_ERROR_INVALID_VALUE,
        ] {
            assert!(!never_locks(&driver(passing)), "{passing:?}");
        }
        assert!(!never_locks(&CudaError::NoDriver));
    }
}
