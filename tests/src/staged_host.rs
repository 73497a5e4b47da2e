//! `staged-host`: a backend kind for tests, registered by this crate (so by every test
//! binary and rank program that links it): the staged device
//! ([`oxccl::platform::staged`]) with host memory standing for a GPU's. It is what the
//! cuda backend runs for the ranks of a job of processes, with `memcpy` where a GPU has
//! its copies across the bus; CI has no GPU, so the framework, the transports and real
//! processes drive that path through this kind. [`crate::execute_on`] binds its calls as
//! device spans (`UserBuffers::Device`) over the test's host buffers.
//!
//! It offers user memory by address ([`oxccl::platform::UserMemory`], what the C ABI
//! binds pointers through) and, once a test asked for it ([`start_recording`]), records
//! what passes through it ([`Record`]): the streams it waited for, the blocks it lent, the
//! copies it made and the spans it staged, so that a test sees the C ABI's calls take the
//! device path. Off by default: the executor matrix runs millions of staged calls. Any
//! stream handle is accepted except [`CAPTURING_STREAM`] and those given to
//! [`begin_capture`] (refused when the call is made and again when it waits, as cuda
//! refuses a stream inside a CUDA graph capture) and [`REFUSED_STREAM`] (refused when
//! the call waits for it), and any span except one starting at an address given to
//! [`refuse_spans_at`].

use oxccl::platform::cuda::{CaptureState, CudaError};
use oxccl::platform::registry::Memory;
use oxccl::platform::staged::{HostAddressed, StageCopies, StagedDevice};
use oxccl::platform::{ConfigFault, DeviceError, UserBlock, UserMemory};
use oxccl::{Communicator, DeviceSpan, Rank, UserBuffers};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

/// The kind's name, for `Config::device` or `OXCCL_DEVICE`.
pub const STAGED_HOST: &str = "staged-host";

oxccl::platform::register_backend!(
    STAGED_HOST,
    "tests only: the cuda backend's staging across processes, host memory for a GPU's",
    Memory::PerRank,
    |config| {
        // SAFETY: device spans reach this kind through `device_binding`, which spans
        // buffers the caller borrows for the whole call, and through the C ABI, whose
        // tests pass host buffers alive for their calls (NCCL's contract).
        let (copies, memory) = unsafe { (HostAddressed::new(), HostAddressed::new()) };
        let device = StagedDevice::new(STAGED_HOST, config, Box::new(Recorded(copies)))?
            .with_user_memory(Box::new(Recorded(memory)));
        Ok(Arc::new(device))
    }
);

/// A stream handle the kind's user memory refuses to wait for, as a driver refuses a
/// stale one.
pub const REFUSED_STREAM: usize = usize::MAX - 0xfff;

/// A stream handle the kind's user memory refuses when the call is made, as cuda refuses
/// a stream that is capturing a CUDA graph.
pub const CAPTURING_STREAM: usize = usize::MAX - 0x1fff;

/// Stream handles that began "capturing" ([`begin_capture`]).
static CAPTURING: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Make the kind treat `stream` as inside a CUDA graph capture from now on, as
/// [`CAPTURING_STREAM`] always is.
pub fn begin_capture(stream: usize) {
    CAPTURING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(stream);
}

/// The refusal of `rank`'s call on `stream` when it is "capturing".
fn capture_refusal(rank: Rank, stream: usize) -> Result<(), DeviceError> {
    let capturing = CAPTURING.lock().unwrap_or_else(|p| p.into_inner());
    if stream == CAPTURING_STREAM || capturing.contains(&stream) {
        return Err(CudaError::StreamCapturing {
            rank,
            stream,
            state: CaptureState::Active,
        }
        .into());
    }
    Ok(())
}

/// What the kind's user memory and staging did, process-wide (tests of one binary run
/// at once: look for what a test's own handles and buffers left).
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// (rank, stream) of every stream waited for.
    pub synced: Vec<(Rank, usize)>,
    /// (stream, thread) of every stream waited for: the thread that waited (a stream
    /// handle may name the calling thread's own stream, as `cudaStreamPerThread` does).
    pub synced_on: Vec<(usize, ThreadId)>,
    /// Bytes of every block lent.
    pub blocks: Vec<usize>,
    /// (source, destination) of every copy between user memory.
    pub copies: Vec<(u64, u64)>,
    /// Device addresses staged in to the host or back.
    pub staged: Vec<u64>,
}

static RECORD: Mutex<Record> = Mutex::new(Record {
    synced: Vec::new(),
    synced_on: Vec::new(),
    blocks: Vec::new(),
    copies: Vec::new(),
    staged: Vec::new(),
});

/// Whether [`note`] records (see [`start_recording`]).
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Record from now on what the kind does, in every test of this process.
pub fn start_recording() {
    RECORDING.store(true, Ordering::Relaxed);
}

/// Span starts `check_span` refuses.
static REFUSED_SPANS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// What the kind did so far.
pub fn record() -> Record {
    RECORD.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Make the kind's user memory refuse spans that start at `addr`, as cuda refuses memory
/// of another GPU.
pub fn refuse_spans_at(addr: u64) {
    REFUSED_SPANS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(addr);
}

fn note(f: impl FnOnce(&mut Record)) {
    if RECORDING.load(Ordering::Relaxed) {
        f(&mut RECORD.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// [`HostAddressed`], recording what passes through it.
struct Recorded(HostAddressed);

impl StageCopies for Recorded {
    fn to_host(&self, rank: Rank, src: DeviceSpan, dst: &mut [u8]) -> Result<(), DeviceError> {
        note(|r| r.staged.push(src.addr));
        self.0.to_host(rank, src, dst)
    }

    fn to_device(&self, rank: Rank, src: &[u8], dst: DeviceSpan) -> Result<(), DeviceError> {
        note(|r| r.staged.push(dst.addr));
        self.0.to_device(rank, src, dst)
    }
}

impl UserMemory for Recorded {
    fn check_span(&self, rank: Rank, what: &str, span: DeviceSpan) -> Result<(), DeviceError> {
        let refused = REFUSED_SPANS.lock().unwrap_or_else(|p| p.into_inner());
        if span.len > 0 && refused.contains(&span.addr) {
            return Err(CudaError::Pointer {
                rank,
                what: what.to_string(),
                addr: span.addr,
                len: span.len,
                ordinal: 0,
                found: "a span the test refused".to_string(),
            }
            .into());
        }
        self.0.check_span(rank, what, span)
    }

    fn alloc(&self, rank: Rank, bytes: usize) -> Result<UserBlock, DeviceError> {
        note(|r| r.blocks.push(bytes));
        self.0.alloc(rank, bytes)
    }

    unsafe fn copy(&self, rank: Rank, src: DeviceSpan, dst: DeviceSpan) -> Result<(), DeviceError> {
        note(|r| r.copies.push((src.addr, dst.addr)));
        // SAFETY: the caller's promise, passed on.
        unsafe { self.0.copy(rank, src, dst) }
    }

    fn check_stream(&self, rank: Rank, stream: usize) -> Result<(), DeviceError> {
        capture_refusal(rank, stream)
    }

    fn sync_stream(&self, rank: Rank, stream: usize) -> Result<(), DeviceError> {
        capture_refusal(rank, stream)?;
        if stream == REFUSED_STREAM {
            return Err(ConfigFault::NoStreams {
                kind: "staged-host",
                stream,
            }
            .into());
        }
        note(|r| {
            r.synced.push((rank, stream));
            r.synced_on.push((stream, std::thread::current().id()));
        });
        Ok(())
    }
}

/// Whether `comm` runs on the `staged-host` kind.
pub fn runs_staged(comm: &Communicator) -> bool {
    comm.framework().device().kind() == STAGED_HOST
}

/// `bytes` as a span of "device memory" for the `staged-host` kind: its address and
/// length.
pub fn span_of(bytes: &[u8]) -> DeviceSpan {
    DeviceSpan {
        addr: bytes.as_ptr() as u64,
        len: bytes.len(),
    }
}

/// `input` and `out` as a call's device buffers (`out` alone when `in_place`): the
/// spans of host memory the `staged-host` kind copies from and back to. Both borrows
/// outlive the call made with the binding.
pub fn device_binding<'a>(in_place: bool, input: &'a [u8], out: &'a mut [u8]) -> UserBuffers<'a> {
    let output = span_of(out);
    let input = match in_place {
        true => output,
        false => span_of(input),
    };
    UserBuffers::Device {
        input,
        output,
        in_place,
    }
}
