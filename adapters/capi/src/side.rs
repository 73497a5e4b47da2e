//! Which memory a communicator's pointers are: host memory, or its device's memory.
//!
//! A communicator whose device offers user memory by address
//! ([`oxccl::platform::Device::user_memory`]: the cuda backend) takes NCCL's device
//! pointers. Its calls bind them as device spans
//! ([`UserBuffers::Device`](oxccl::UserBuffers::Device)), each checked by the device
//! when the call is made (on cuda: memory of the rank's GPU holding the whole count); the
//! blocks oxccl binds of its own (unused buffers, staged sends and receives) are device
//! memory of the rank, and staging copies run on the device. Its `stream` argument is
//! honoured the blocking way: the call waits for the work queued on the caller's stream
//! (NULL: the device's default stream) when it runs — at `oxcclGroupEnd` for a call in a
//! group, as NCCL queues a group's calls there — and returns once its results are in
//! place, so whatever the caller queues on the stream afterwards sees them. A stream
//! inside a CUDA graph capture, which that wait would invalidate, is refused when the
//! call is made ([`UserMemory::check_stream`]), a call to be recorded by
//! `oxcclGraphCaptureBegin` too.
//!
//! Every other communicator (the host device) binds host memory: pointers become slices,
//! blocks are [`HostBlock`]s, copies are `memcpy`, and the stream must be NULL.

use crate::buffers::{self, HostBlock, Span};
use crate::collectives::OxcclStream;
use crate::handles::Comm;
use crate::result::{CError, OxcclResult};
use oxccl::platform::{DeviceError, DeviceSpan, UserBlock, UserMemory};
use oxccl::Error;

/// Memory oxccl owns for a call, of the kind the communicator's calls bind.
pub enum Block {
    Host(HostBlock),
    Device(UserBlock),
}

impl Block {
    /// The whole block.
    pub fn span(&self) -> Span {
        match self {
            Block::Host(block) => block.span(),
            Block::Device(block) => span_of(block.span()),
        }
    }

    /// `len` bytes at `offset` of the block.
    pub fn part(&self, offset: usize, len: usize) -> Span {
        let whole = self.span();
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= whole.len),
            "a part inside the block"
        );
        Span {
            addr: whole.addr + offset,
            len,
        }
    }
}

/// A device span as a C span (device addresses fit a pointer: the caller gave them as
/// one, and blocks are the rank's own memory).
fn span_of(span: DeviceSpan) -> Span {
    Span {
        addr: span.addr as usize,
        len: span.len,
    }
}

/// A stream the device refused when the call was made: a CUDA error has the code every
/// CUDA error has ([`crate::result::code_of`]: a stream inside a CUDA graph capture
/// `oxcclInvalidUsage`, the driver's failure to bind the rank's context
/// `oxcclUnhandledCudaError`), anything else (a device without streams given one) is the
/// caller's argument error. None breaks the communicator: nothing reached its peers.
fn stream_refusal(err: DeviceError) -> CError {
    let code = match &err {
        DeviceError::Cuda(_) => crate::result::code_of(&err.clone().into(), None),
        _ => OxcclResult::InvalidArgument,
    };
    CError::new(code, err.to_string())
}

/// A C span as the device span it names.
pub fn device_span(span: Span) -> DeviceSpan {
    DeviceSpan {
        addr: span.addr as u64,
        len: span.len,
    }
}

impl Comm {
    /// The device's user memory when the communicator's pointers are device memory.
    pub fn user_memory(&self) -> Option<&dyn UserMemory> {
        self.inner.framework().device().user_memory()
    }

    /// The stream argument of a call: `None` on host memory, where it must be NULL; the
    /// handle (0 for NULL, the default stream) on device memory, checked by the device
    /// ([`UserMemory::check_stream`]). A call recorded by `oxcclGraphCaptureBegin` never
    /// waits for its stream, but is checked too: making it may allocate (an unused
    /// buffer's block), which a thread inside a CUDA graph capture must not.
    pub fn stream(&self, stream: *const OxcclStream) -> Result<Option<usize>, CError> {
        if let Some(memory) = self.user_memory() {
            let handle = stream as usize;
            memory
                .check_stream(self.rank(), handle)
                .map_err(stream_refusal)?;
            return Ok(Some(handle));
        }
        if stream.is_null() {
            return Ok(None);
        }
        Err(CError::invalid(format!(
            "stream {stream:p}: rank {}'s communicator runs on host memory ({} device), \
             which has no streams, and every call blocks; pass NULL",
            self.rank(),
            self.inner.framework().device().kind()
        )))
    }

    /// `len` zeroed bytes oxccl owns, where the communicator's calls bind memory.
    pub fn zeroed_block(&self, len: usize) -> Result<Block, CError> {
        match self.user_memory() {
            None => HostBlock::zeroed(len).map(Block::Host),
            Some(memory) => memory
                .alloc(self.rank(), len)
                .map(Block::Device)
                .map_err(|e| self.failed(&e.into())),
        }
    }

    /// Refuse the first of `spans` (each with whether the call writes it: a `recvbuff`,
    /// else a `sendbuff`) that the device says the rank may not bind. Host memory never
    /// refuses: its pointers are the caller's promise.
    pub fn check_spans(&self, spans: &[(Span, bool)]) -> Result<(), CError> {
        let Some(memory) = self.user_memory() else {
            return Ok(());
        };
        for &(span, writes) in spans {
            let what = if writes { "recvbuff" } else { "sendbuff" };
            memory
                .check_span(self.rank(), what, device_span(span))
                .map_err(|e| CError::invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// Wait for the work queued on `streams` (device memory only; none on host).
    pub fn sync_streams(&self, streams: &[usize]) -> Result<(), Error> {
        let Some(memory) = self.user_memory() else {
            return Ok(());
        };
        for &stream in streams {
            memory.sync_stream(self.rank(), stream)?;
        }
        Ok(())
    }

    /// Copy `from` into `to`, a span of the same length, where the communicator's memory
    /// is.
    ///
    /// # Safety
    /// `from` must be readable and `to` writable, disjoint, neither used elsewhere
    /// meanwhile.
    pub unsafe fn copy(&self, from: Span, to: Span) -> Result<(), Error> {
        match self.user_memory() {
            // SAFETY: this function's contract (`buffers::copy` checks the lengths).
            None => unsafe { buffers::copy(from, to, from.len) },
            // SAFETY: as above, both the rank's memory (checked when the step was made);
            // the device checks the lengths.
            Some(memory) => unsafe {
                memory.copy(self.rank(), device_span(from), device_span(to))?
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_s_part_is_its_bytes_at_the_offset() {
        let block = Block::Host(HostBlock::zeroed(24).unwrap());
        let whole = block.span();
        assert_eq!(
            block.part(8, 16),
            Span {
                addr: whole.addr + 8,
                len: 16
            }
        );
        assert_eq!(block.part(24, 0).addr, whole.addr + 24);
    }

    #[test]
    #[should_panic(expected = "a part inside the block")]
    fn a_part_past_the_block_is_a_bug() {
        Block::Host(HostBlock::zeroed(24).unwrap()).part(16, 9);
    }

    #[test]
    fn a_capturing_stream_is_invalid_usage_and_a_device_without_streams_an_argument_error() {
        use oxccl::platform::cuda::{CaptureState, CudaError};
        use oxccl::platform::ConfigFault;
        let capturing = DeviceError::Cuda(CudaError::StreamCapturing {
            rank: 1,
            stream: 0x70,
            state: CaptureState::Active,
        });
        let refused = stream_refusal(capturing);
        assert_eq!(refused.code, OxcclResult::InvalidUsage);
        assert!(refused.message.contains("0x70"), "{}", refused.message);
        let no_streams = DeviceError::Config(ConfigFault::NoStreams {
            kind: "staged test",
            stream: 0x70,
        });
        assert_eq!(
            stream_refusal(no_streams).code,
            OxcclResult::InvalidArgument
        );
    }
}
