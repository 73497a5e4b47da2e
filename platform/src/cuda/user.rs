//! Memory a user owns on a GPU, and the copy bound `oxccl perf --device cuda` compares
//! bus bandwidth with.
//!
//! ## User memory
//!
//! [`DeviceBytes`] is an allocation on one CUDA device that its caller owns: the adapter's
//! typed `DeviceBuffer` wraps it, and
//! [`UserBuffers::Device`](crate::UserBuffers::Device) binds its
//! [`span`](DeviceBytes::span) to a call, used in place. It stands on its own: it lives in
//! the device's primary context (the one the backend's ranks run in, so the ranks use its
//! memory as their own; retained for the life of the process) and has a stream of its own
//! for its copies. So it stays valid after the communicator that placed it is gone, and
//! none of its copies waits for a rank's streams or makes one wait. Its memory comes from the device's stream-ordered
//! pool, as the backend's own buffers do: freeing it never waits for the whole device,
//! where a rank may be waiting for the very thread that frees. It starts zeroed.
//!
//! Copies are synchronous (they return once the data arrived, or with the error), check
//! lengths before touching memory ([`CudaError::CopyLength`] on a mismatch, never a
//! panic), and may be made from any thread.
//!
//! ## The copy bound
//!
//! [`copy_bandwidth`] times `copies` concurrent `cuMemcpyDtoDAsync` of one size on one
//! GPU, one stream each, with CUDA events, after one untimed round. Its
//! [`per_copy_gbps`](CopyBandwidth::per_copy_gbps) is what each of `copies` ranks sharing
//! that GPU could move per second if its collective were nothing but copies of that size:
//! the device-memory bound `oxccl perf --device cuda` sets beside busbw.
//! [`CudaDevice::copy_bound`] runs it for a rank with one copy per rank on its GPU.

use super::driver::{self, cu, PrimaryContext};
use super::{CudaDevice, CudaError};
use crate::device::{Device, DeviceSpan};
use crate::error::{AllocFault, DeviceError};
use crate::ir::Rank;
use cudarc::driver::sys;

/// Bytes of device memory a user owns on one GPU (see the module docs), zeroed when
/// allocated and freed on drop.
pub struct DeviceBytes {
    /// 0 until allocated.
    ptr: sys::CUdeviceptr,
    len: usize,
    /// This buffer's own stream: its allocation, copies and free are ordered on it.
    stream: sys::CUstream,
    /// The context the memory and the stream belong to.
    context: PrimaryContext,
}

// SAFETY: the driver handles may be used from any thread once the context is current,
// which every method makes it first; device memory is written only through `&mut self`
// (or by a call the user bound it to, which borrows it), and `&self` copies only read it.
unsafe impl Send for DeviceBytes {}
// SAFETY: as above; concurrent `copy_to_host` calls share the stream, which the driver
// allows, and each waits for its own copy.
unsafe impl Sync for DeviceBytes {}

impl std::fmt::Debug for DeviceBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cuda:{}[{:#x}; {}]",
            self.context.ordinal, self.ptr, self.len
        )
    }
}

impl DeviceBytes {
    /// `len` zeroed bytes on CUDA device `ordinal` (an empty buffer still has an address).
    pub fn zeroed(ordinal: usize, len: usize) -> Result<Self, DeviceError> {
        let context = PrimaryContext::of(ordinal)?;
        let _current = context.bind()?;
        let stream = driver::new_stream()?;
        // Owned from here: an error below destroys the stream (and frees the memory).
        let mut bytes = DeviceBytes {
            ptr: 0,
            len,
            stream,
            context,
        };
        let size = len.max(1);
        let mut ptr = 0;
        cu!(cuMemAllocAsync(&mut ptr, size, stream)).map_err(|e| DeviceError::Alloc {
            what: "user device buffer",
            bytes: len,
            fault: AllocFault::Device(e.to_string()),
        })?;
        bytes.ptr = ptr;
        cu!(cuMemsetD8Async(ptr, 0, size, stream))?;
        bytes.synchronize()?;
        Ok(bytes)
    }

    /// The buffer as [`UserBuffers::Device`](crate::UserBuffers::Device) binds it.
    pub fn span(&self) -> DeviceSpan {
        DeviceSpan {
            addr: self.ptr,
            len: self.len,
        }
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a buffer of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The CUDA device the memory is on.
    pub fn ordinal(&self) -> usize {
        self.context.ordinal
    }

    /// Copy `src` (exactly [`len`](Self::len) bytes) into the buffer.
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<(), DeviceError> {
        equal_lengths("copy_from_host", src.len(), self.len)?;
        if src.is_empty() {
            return Ok(());
        }
        let _current = self.context.bind()?;
        // `src` holds `len` readable bytes and stays borrowed until the stream is
        // synchronised below.
        cu!(cuMemcpyHtoDAsync_v2(
            self.ptr,
            src.as_ptr().cast(),
            src.len(),
            self.stream
        ))?;
        self.synchronize()
    }

    /// Copy the buffer into `dst` (exactly [`len`](Self::len) bytes).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), DeviceError> {
        equal_lengths("copy_to_host", self.len, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let _current = self.context.bind()?;
        // `dst` holds `len` writable bytes and stays borrowed until the stream is
        // synchronised below.
        cu!(cuMemcpyDtoHAsync_v2(
            dst.as_mut_ptr().cast(),
            self.ptr,
            dst.len(),
            self.stream
        ))?;
        self.synchronize()
    }

    /// Copy `src`, a buffer of the same length on this or another GPU, into this one.
    pub fn copy_from_device(&mut self, src: &DeviceBytes) -> Result<(), DeviceError> {
        equal_lengths("copy_from_device", src.len, self.len)?;
        if src.len == 0 {
            return Ok(());
        }
        let _current = self.context.bind()?;
        cu!(cuMemcpyDtoDAsync_v2(
            self.ptr,
            src.ptr,
            src.len,
            self.stream
        ))?;
        self.synchronize()
    }

    /// Wait for everything ordered on this buffer's stream.
    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(cu!(cuStreamSynchronize(self.stream))?)
    }
}

impl Drop for DeviceBytes {
    fn drop(&mut self) {
        let Ok(_current) = self.context.bind() else {
            return;
        };
        if self.ptr != 0 {
            // Stream-ordered: the free waits for nothing but this buffer's own stream.
            let _ = cu!(cuMemFreeAsync(self.ptr, self.stream));
        }
        // The stream's remaining work (the free) still completes.
        let _ = cu!(cuStreamDestroy_v2(self.stream));
    }
}

/// `Ok` when a copy's source and destination have the same length.
fn equal_lengths(
    what: &'static str,
    source_len: usize,
    destination_len: usize,
) -> Result<(), CudaError> {
    if source_len == destination_len {
        return Ok(());
    }
    Err(CudaError::CopyLength {
        what,
        source_len,
        destination_len,
    })
}

/// How fast one GPU copied: `copies` concurrent copies of `bytes` each, `seconds` per
/// round of them (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CopyBandwidth {
    pub ordinal: usize,
    pub bytes: usize,
    pub copies: usize,
    /// Mean seconds from the start of a round to the end of its last copy.
    pub seconds: f64,
}

impl CopyBandwidth {
    /// GB/s of each copy while all ran: the bound of one of `copies` ranks sharing the
    /// GPU (0 when nothing measurable was copied).
    pub fn per_copy_gbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }

    /// GB/s of all copies together: what the GPU's memory delivered.
    pub fn total_gbps(&self) -> f64 {
        self.per_copy_gbps() * self.copies as f64
    }
}

/// CUDA events that record time, destroyed on drop (with their context current).
struct TimingEvents(Vec<sys::CUevent>);

impl TimingEvents {
    fn new(n: usize) -> Result<Self, CudaError> {
        let mut events = TimingEvents(Vec::with_capacity(n));
        for _ in 0..n {
            events.0.push(driver::new_event(true)?);
        }
        Ok(events)
    }
}

impl Drop for TimingEvents {
    fn drop(&mut self) {
        for &event in &self.0 {
            let _ = cu!(cuEventDestroy_v2(event));
        }
    }
}

/// Time `copies` (at least 1) concurrent device-to-device copies of `bytes` on CUDA device
/// `ordinal`, one stream each, `iters` (at least 1) rounds after an untimed one; each
/// copy has its own source and destination. Allocates `2 * copies * bytes` for the while.
pub fn copy_bandwidth(
    ordinal: usize,
    bytes: usize,
    copies: usize,
    iters: usize,
) -> Result<CopyBandwidth, DeviceError> {
    let (copies, iters) = (copies.max(1), iters.max(1));
    let pairs = (0..copies)
        .map(|_| {
            let src = DeviceBytes::zeroed(ordinal, bytes)?;
            Ok((src, DeviceBytes::zeroed(ordinal, bytes)?))
        })
        .collect::<Result<Vec<_>, DeviceError>>()?;
    let _current = pairs[0].0.context.bind()?;
    let round = || -> Result<(), CudaError> {
        for (src, dst) in &pairs {
            cu!(cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, bytes, dst.stream))?;
        }
        Ok(())
    };
    round()?;
    for (_, dst) in &pairs {
        dst.synchronize()?;
    }
    let events = TimingEvents::new(1 + copies)?;
    let (start, ends) = (events.0[0], &events.0[1..]);
    cu!(cuEventRecord(start, pairs[0].1.stream))?;
    for (_, dst) in &pairs[1..] {
        cu!(cuStreamWaitEvent(dst.stream, start, 0))?;
    }
    for _ in 0..iters {
        round()?;
    }
    for ((_, dst), &end) in pairs.iter().zip(ends) {
        cu!(cuEventRecord(end, dst.stream))?;
    }
    let mut longest_ms = 0f32;
    for &end in ends {
        cu!(cuEventSynchronize(end))?;
        let mut ms = 0f32;
        cu!(cuEventElapsedTime(&mut ms, start, end))?;
        longest_ms = longest_ms.max(ms);
    }
    Ok(CopyBandwidth {
        ordinal,
        bytes,
        copies,
        seconds: f64::from(longest_ms) / 1e3 / iters as f64,
    })
}

impl CudaDevice {
    /// `bytes` of zeroed user memory on the GPU local rank `rank` runs on, for
    /// [`UserBuffers::Device`](crate::UserBuffers::Device) bindings of its calls.
    pub fn alloc_user(&self, rank: Rank, bytes: usize) -> Result<DeviceBytes, DeviceError> {
        DeviceBytes::zeroed(self.ordinal_of(rank)?, bytes)
    }

    /// How many local ranks run on the GPU of local rank `rank` (itself included): its
    /// virtual ranks.
    pub fn ranks_sharing_gpu(&self, rank: Rank) -> Result<usize, DeviceError> {
        let ordinal = self.ordinal_of(rank)?;
        let mut sharing = 0;
        for &local in &self.config().local_ranks {
            if self.ordinal_of(local)? == ordinal {
                sharing += 1;
            }
        }
        Ok(sharing)
    }

    /// The copy bound of local rank `rank` for messages of `bytes`: one concurrent copy
    /// per rank sharing its GPU ([`copy_bandwidth`], `iters` timed rounds).
    pub fn copy_bound(
        &self,
        rank: Rank,
        bytes: usize,
        iters: usize,
    ) -> Result<CopyBandwidth, DeviceError> {
        let copies = self.ranks_sharing_gpu(rank)?;
        copy_bandwidth(self.ordinal_of(rank)?, bytes, copies, iters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_unequal_lengths_are_refused_before_any_driver_call() {
        let err = equal_lengths("copy_from_host", 3, 4).unwrap_err();
        assert!(matches!(
            err,
            CudaError::CopyLength {
                source_len: 3,
                destination_len: 4,
                ..
            }
        ));
        let text = err.to_string();
        assert!(
            text.contains("copy_from_host") && text.contains("equal"),
            "{text}"
        );
        assert!(equal_lengths("copy_to_host", 5, 5).is_ok());
    }

    #[test]
    fn bandwidth_of_a_round() {
        let bw = CopyBandwidth {
            ordinal: 0,
            bytes: 1 << 30,
            copies: 4,
            seconds: 0.5,
        };
        assert!((bw.per_copy_gbps() - 2.147_483_648).abs() < 1e-9);
        assert!((bw.total_gbps() - 4.0 * bw.per_copy_gbps()).abs() < 1e-9);
        let none = CopyBandwidth { seconds: 0.0, ..bw };
        assert_eq!(none.per_copy_gbps(), 0.0);
    }

    #[test]
    fn without_a_driver_allocation_is_a_typed_error() {
        if driver::init().is_ok() {
            eprintln!("skipped: this machine has a CUDA driver");
            return;
        }
        let err = DeviceBytes::zeroed(0, 16).unwrap_err();
        assert!(
            matches!(err, DeviceError::Cuda(CudaError::NoDriver)),
            "{err}"
        );
        let err = copy_bandwidth(0, 16, 2, 1).unwrap_err();
        assert!(
            matches!(err, DeviceError::Cuda(CudaError::NoDriver)),
            "{err}"
        );
    }
}
