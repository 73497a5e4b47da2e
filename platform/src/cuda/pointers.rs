//! What the driver knows of an address, and the cuda backend's user memory by address
//! ([`UserMemory`]: the C ABI's device pointers).
//!
//! [`PointerFacts`] are one `cuPointerGetAttributes` query: the memory's kind, its device
//! and the allocation it lies in. [`PointerFacts::refusal`] judges a span by them, so
//! what a span is refused for is plain code, tested without a GPU. Host memory the driver
//! does not know reads as `Unknown` (the query fills defaults for it and succeeds).
//!
//! The user memory: spans are checked against their allocation (memory of the rank's
//! GPU, or managed memory, holding the whole span, where the driver gives the
//! allocation's extent); blocks are [`DeviceBytes`](super::DeviceBytes); copies run
//! on a stream of their own, made and destroyed per copy, so they never wait for the
//! ranks' streams or the caller's; a caller's stream is waited for (an event recorded
//! on it, polled under the device's timeout) with the rank's GPU current (its primary
//! context, where the runtime API's streams live), and refused when the call is made if
//! it is inside a CUDA graph capture ([`capture_state`]): the blocking wait would
//! invalidate the caller's capture ([`CudaError::StreamCapturing`]).

use super::device::pause;
use super::driver::{cu, Current, PrimaryContext};
use super::{driver, CaptureState, CudaDevice, CudaError};
use crate::device::{Device, DeviceSpan};
use crate::error::DeviceError;
use crate::ir::Rank;
use crate::user_memory::{copy_len, UserBlock, UserMemory};
use cudarc::driver::sys;
use std::time::{Duration, Instant};

/// What kind of memory an address is, as the driver says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum MemoryType {
    /// Not memory the driver knows: pageable host memory, or no memory at all.
    Unknown,
    /// Host memory registered with or allocated by the driver.
    Host,
    /// Memory of one GPU.
    Device,
    /// Managed (unified) memory.
    Managed,
}

/// What the driver knows of one address.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct PointerFacts {
    pub memory: MemoryType,
    /// The device of device memory (`None` otherwise).
    pub ordinal: Option<usize>,
    /// The allocation the address lies in: its first address and its bytes.
    pub range: (u64, u64),
}

impl PointerFacts {
    /// Ask the driver about `addr` (a context current on this thread).
    pub fn of(addr: u64) -> Result<PointerFacts, CudaError> {
        use sys::CUpointer_attribute as A;
        let mut memory: u32 = 0;
        let mut ordinal: i32 = -1;
        let mut start: sys::CUdeviceptr = 0;
        let mut size: usize = 0;
        let mut managed: u32 = 0;
        let mut attributes = [
            A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        ];
        let mut data: [*mut std::ffi::c_void; 5] = [
            (&mut memory as *mut u32).cast(),
            (&mut ordinal as *mut i32).cast(),
            (&mut start as *mut sys::CUdeviceptr).cast(),
            (&mut size as *mut usize).cast(),
            (&mut managed as *mut u32).cast(),
        ];
        // Each data pointer points at a value of the attribute's type (unsigned int, int,
        // CUdeviceptr, size_t, a boolean: zeroed 32 bits hold it whether the driver writes
        // one byte or four), alive for the call.
        cu!(cuPointerGetAttributes(
            attributes.len() as u32,
            attributes.as_mut_ptr(),
            data.as_mut_ptr(),
            addr
        ))?;
        // Managed memory reports the type of where its pages are now (device or host),
        // never a type of its own: the flag says what it is.
        let memory = match memory {
            _ if managed != 0 => MemoryType::Managed,
            m if m == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32 => MemoryType::Host,
            m if m == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 => MemoryType::Device,
            m if m == sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED as u32 => MemoryType::Managed,
            _ => MemoryType::Unknown,
        };
        Ok(PointerFacts {
            memory,
            ordinal: usize::try_from(ordinal)
                .ok()
                .filter(|_| memory == MemoryType::Device),
            range: (start, size as u64),
        })
    }

    /// Why a span of `len` bytes at `addr`, facts `self`, may not be bound by a rank on
    /// CUDA device `ordinal`, or `None` when it may.
    pub fn refusal(&self, addr: u64, len: usize, ordinal: usize) -> Option<String> {
        match self.memory {
            MemoryType::Unknown => {
                return Some("not memory CUDA knows (a host pointer?)".to_string())
            }
            MemoryType::Host => return Some("host memory (pinned or registered)".to_string()),
            MemoryType::Device if self.ordinal != Some(ordinal) => {
                return Some(match self.ordinal {
                    Some(other) => format!("memory of CUDA device {other}"),
                    None => "device memory of an unknown device".to_string(),
                })
            }
            MemoryType::Device | MemoryType::Managed => {}
        }
        let (start, size) = self.range;
        if size == 0 {
            // The driver did not say where the allocation ends: trust the count, as NCCL
            // does, rather than refuse memory it allocated.
            return None;
        }
        let end = start.saturating_add(size);
        let fits = addr >= start && addr.checked_add(len as u64).is_some_and(|e| e <= end);
        (!fits).then(|| {
            format!("its allocation is [{start:#x}, {end:#x}), which does not hold all of it")
        })
    }
}

/// The CUDA device whose memory `addr` is (`None`: not device memory, or the driver
/// could not say).
pub(crate) fn ordinal_of(addr: u64) -> Option<usize> {
    PointerFacts::of(addr).ok()?.ordinal
}

impl CudaDevice {
    /// The ordinal of local rank `rank`'s GPU, with its primary context current while the
    /// guard lives.
    fn current(&self, rank: Rank) -> Result<(usize, Current), DeviceError> {
        let ordinal = self.ordinal_of(rank)?;
        Ok((ordinal, PrimaryContext::of(ordinal)?.bind()?))
    }
}

impl UserMemory for CudaDevice {
    fn check_span(&self, rank: Rank, what: &str, span: DeviceSpan) -> Result<(), DeviceError> {
        if span.len == 0 {
            return Ok(());
        }
        let (ordinal, _current) = self.current(rank)?;
        let facts = PointerFacts::of(span.addr)?;
        match facts.refusal(span.addr, span.len, ordinal) {
            None => Ok(()),
            Some(found) => Err(CudaError::Pointer {
                rank,
                what: what.to_string(),
                addr: span.addr,
                len: span.len,
                ordinal,
                found,
            }
            .into()),
        }
    }

    fn alloc(&self, rank: Rank, bytes: usize) -> Result<UserBlock, DeviceError> {
        let memory = self.alloc_user(rank, bytes)?;
        // SAFETY: the span is the allocation `memory` owns until it drops, and nothing
        // else holds it.
        Ok(unsafe { UserBlock::new(memory.span(), Box::new(memory)) })
    }

    unsafe fn copy(&self, rank: Rank, src: DeviceSpan, dst: DeviceSpan) -> Result<(), DeviceError> {
        let len = copy_len(src, dst)?;
        if len == 0 {
            return Ok(());
        }
        let _current = self.current(rank)?;
        let stream = driver::new_stream()?;
        // Both spans are live memory of the rank's GPU (this function's contract).
        let copied = cu!(cuMemcpyDtoDAsync_v2(dst.addr, src.addr, len, stream))
            .and_then(|()| cu!(cuStreamSynchronize(stream)));
        let _ = cu!(cuStreamDestroy_v2(stream));
        Ok(copied?)
    }

    fn check_stream(&self, rank: Rank, stream: usize) -> Result<(), DeviceError> {
        let _current = self.current(rank)?;
        match capture_of(stream) {
            Ok(None) => Ok(()),
            Ok(Some(state)) => Err(capturing(rank, stream, state)),
            // An invalid handle, or an earlier kernel's fault that the driver reports on
            // any call: left to the wait, whose failure aborts the communicator and so
            // releases the peers (a refusal here would leave them waiting for this rank).
            Err(_) => Ok(()),
        }
    }

    fn sync_stream(&self, rank: Rank, stream: usize) -> Result<(), DeviceError> {
        let _current = self.current(rank)?;
        // Checked again: a capture may have begun since the call was made (a call of a
        // group waits at `oxcclGroupEnd`), and the wait would invalidate it.
        if let Ok(Some(state)) = capture_of(stream) {
            return Err(capturing(rank, stream, state));
        }
        // An event marks the work queued so far: what other threads queue on the stream
        // meanwhile (the legacy stream is the whole process's) is not waited for. It is
        // polled rather than synchronised, so that the wait ends, naming the stream, once
        // the device's timeout passed, and at once when the device stops (an abort from
        // another thread, a peer's failure): work queued before the call that never ends
        // must not hold the call for ever.
        let mark = Mark::record(stream)?;
        wait_polling(
            Device::config(self).exec_timeout,
            || mark.reached(),
            || {
                self.stopped()
                    .map(|cause| DeviceError::Aborted { rank, cause })
            },
            |waited| {
                CudaError::StreamTimeout {
                    rank,
                    stream,
                    waited,
                }
                .into()
            },
        )
    }
}

/// An event recorded on a caller's stream: the work queued on it until then. Created
/// and destroyed with the stream's context current.
struct Mark(sys::CUevent);

impl Mark {
    /// Mark the work queued on `stream` so far (the driver refuses a stale handle).
    fn record(stream: usize) -> Result<Mark, CudaError> {
        let mark = Mark(driver::new_event(false)?);
        // `stream` is the caller's handle (NCCL's contract: a stream of the rank's
        // device, or 0 for its default stream).
        cu!(cuEventRecord(mark.0, stream as sys::CUstream))?;
        Ok(mark)
    }

    /// Whether the marked work is done, or the driver's error (a fault of that work).
    fn reached(&self) -> Result<bool, DeviceError> {
        // SAFETY: a live event of the current context.
        match unsafe { sys::cuEventQuery(self.0) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            answer => Ok(driver::check("cuEventQuery", answer).map(|()| true)?),
        }
    }
}

impl Drop for Mark {
    /// With the context still current (the mark is dropped before the guard that bound
    /// it); an event whose work is pending is freed once the work is done.
    fn drop(&mut self) {
        let _ = cu!(cuEventDestroy_v2(self.0));
    }
}

/// Poll `done` until it is true: `done`'s error, `stopped`'s once it has one, or
/// `timed_out`'s for the time waited once that passed `timeout`.
fn wait_polling(
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool, DeviceError>,
    stopped: impl Fn() -> Option<DeviceError>,
    timed_out: impl FnOnce(Duration) -> DeviceError,
) -> Result<(), DeviceError> {
    let started = Instant::now();
    loop {
        if done()? {
            return Ok(());
        }
        if let Some(error) = stopped() {
            return Err(error);
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(timed_out(waited));
        }
        pause(waited, timeout - waited);
    }
}

/// The capture `stream` is in (`cuStreamIsCapturing`, with the stream's context
/// current), or the driver's error.
fn capture_of(stream: usize) -> Result<Option<CaptureState>, sys::CUresult> {
    let mut status = 0u32;
    // SAFETY: `stream` is the caller's handle (NCCL's contract), its context current;
    // `status` is a live word the driver writes the status enum into (read as a `u32`,
    // so that a value this build does not know is a value, not an invalid enum).
    let result = unsafe {
        sys::cuStreamIsCapturing(
            stream as sys::CUstream,
            (&mut status as *mut u32).cast::<sys::CUstreamCaptureStatus>(),
        )
    };
    capture_state(result, status)
}

/// The refusal of local rank `rank`'s call on `stream`, inside a capture.
fn capturing(rank: Rank, stream: usize, state: CaptureState) -> DeviceError {
    CudaError::StreamCapturing {
        rank,
        stream,
        state,
    }
    .into()
}

/// The capture a caller's stream is in, as `cuStreamIsCapturing` answered `result` and
/// `status`: `None` when it is in none; the legacy stream tied to a capture counts as in
/// one (the status is unspecified then). `Err` is any other answer (a stale handle).
fn capture_state(
    result: sys::CUresult,
    status: u32,
) -> Result<Option<CaptureState>, sys::CUresult> {
    use sys::CUstreamCaptureStatus as S;
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(match status {
            s if s == S::CU_STREAM_CAPTURE_STATUS_NONE as u32 => None,
            s if s == S::CU_STREAM_CAPTURE_STATUS_ACTIVE as u32 => Some(CaptureState::Active),
            s if s == S::CU_STREAM_CAPTURE_STATUS_INVALIDATED as u32 => {
                Some(CaptureState::Invalidated)
            }
            other => Some(CaptureState::Unknown(other)),
        }),
        sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => Ok(Some(CaptureState::ImplicitLegacy)),
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(memory: MemoryType, ordinal: Option<usize>, start: u64, size: u64) -> PointerFacts {
        PointerFacts {
            memory,
            ordinal,
            range: (start, size),
        }
    }

    #[test]
    fn a_span_inside_an_allocation_of_the_rank_s_gpu_passes() {
        let f = facts(MemoryType::Device, Some(1), 0x1000, 0x100);
        assert_eq!(f.refusal(0x1000, 0x100, 1), None);
        assert_eq!(f.refusal(0x1080, 0x80, 1), None);
        let managed = facts(MemoryType::Managed, None, 0x1000, 0x100);
        assert_eq!(managed.refusal(0x1010, 0x10, 3), None);
        let no_range = facts(MemoryType::Device, Some(1), 0, 0);
        assert_eq!(
            no_range.refusal(0x1000, 1 << 20, 1),
            None,
            "an extent unknown"
        );
    }

    #[test]
    fn host_memory_another_gpu_and_spans_past_the_allocation_are_refused() {
        let unknown = facts(MemoryType::Unknown, None, 0, 0);
        assert!(unknown
            .refusal(0x1000, 4, 0)
            .unwrap()
            .contains("host pointer"));
        let host = facts(MemoryType::Host, None, 0x1000, 0x100);
        assert!(host.refusal(0x1000, 4, 0).unwrap().contains("host memory"));
        let other = facts(MemoryType::Device, Some(2), 0x1000, 0x100);
        assert!(other.refusal(0x1000, 4, 0).unwrap().contains("device 2"));
        let f = facts(MemoryType::Device, Some(0), 0x1000, 0x100);
        assert!(f
            .refusal(0x1080, 0x81, 0)
            .unwrap()
            .contains("[0x1000, 0x1100)"));
        assert!(f.refusal(0xff0, 0x20, 0).is_some());
        assert!(f.refusal(u64::MAX - 1, 4, 0).is_some());
    }

    #[test]
    fn a_stream_in_any_capture_is_refused_and_a_stale_one_is_the_driver_s_error() {
        use sys::CUresult as R;
        use sys::CUstreamCaptureStatus as S;
        let none = S::CU_STREAM_CAPTURE_STATUS_NONE as u32;
        assert_eq!(capture_state(R::CUDA_SUCCESS, none), Ok(None));
        let active = S::CU_STREAM_CAPTURE_STATUS_ACTIVE as u32;
        assert_eq!(
            capture_state(R::CUDA_SUCCESS, active),
            Ok(Some(CaptureState::Active))
        );
        let invalidated = S::CU_STREAM_CAPTURE_STATUS_INVALIDATED as u32;
        assert_eq!(
            capture_state(R::CUDA_SUCCESS, invalidated),
            Ok(Some(CaptureState::Invalidated))
        );
        assert_eq!(
            capture_state(R::CUDA_SUCCESS, 7),
            Ok(Some(CaptureState::Unknown(7))),
            "a status this build does not know is refused, not trusted"
        );
        assert_eq!(
            capture_state(R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, 99),
            Ok(Some(CaptureState::ImplicitLegacy)),
            "the status is unspecified with this error"
        );
        assert_eq!(
            capture_state(R::CUDA_ERROR_INVALID_HANDLE, none),
            Err(R::CUDA_ERROR_INVALID_HANDLE)
        );
        let message = CudaError::StreamCapturing {
            rank: 3,
            stream: 0x40,
            state: CaptureState::Active,
        }
        .to_string();
        for part in ["rank 3", "0x40", "capturing", "oxcclGraphCaptureBegin"] {
            assert!(message.contains(part), "{message}");
        }
    }

    #[test]
    fn a_stream_wait_ends_done_failed_stopped_or_timed_out() {
        use crate::error::AbortCause;
        let long = Duration::from_secs(60);
        let timed_out = |waited| {
            CudaError::StreamTimeout {
                rank: 2,
                stream: 0x40,
                waited,
            }
            .into()
        };
        let mut polls = 0;
        let done_third = wait_polling(
            long,
            || {
                polls += 1;
                Ok(polls == 3)
            },
            || None,
            timed_out,
        );
        assert!(done_third.is_ok());
        assert_eq!(polls, 3);
        let failed = wait_polling(long, || Err(CudaError::NoDriver.into()), || None, timed_out);
        assert!(matches!(
            failed,
            Err(DeviceError::Cuda(CudaError::NoDriver))
        ));
        let aborted = || {
            Some(DeviceError::Aborted {
                rank: 2,
                cause: AbortCause::UserAbort { rank: 2 },
            })
        };
        let stopped = wait_polling(long, || Ok(false), aborted, timed_out);
        assert!(matches!(stopped, Err(DeviceError::Aborted { rank: 2, .. })));
        let short = Duration::from_millis(5);
        let late = wait_polling(short, || Ok(false), || None, timed_out);
        let Err(DeviceError::Cuda(CudaError::StreamTimeout { waited, .. })) = late else {
            panic!("not the timeout: {late:?}");
        };
        assert!(waited >= short);
        let message = timed_out(waited).to_string();
        assert!(
            message.contains("0x40") && message.contains("OXCCL_EXEC_TIMEOUT"),
            "{message}"
        );
    }
}
