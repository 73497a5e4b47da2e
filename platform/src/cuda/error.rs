//! Why the CUDA backend could not start or run: every driver, NVRTC and placement failure
//! as a value, never a panic. Compiled with or without the `cuda` feature, so the
//! framework's error type is the same in every build.

use crate::ir::Rank;
use std::time::Duration;

/// A failure of the CUDA backend.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    #[error(
        "this build has no CUDA backend; rebuild with `--features cuda` (cargo build \
         --features cuda) or use the host device"
    )]
    NotBuilt,
    #[error(
        "no CUDA driver (libcuda.so) on this machine: install the NVIDIA driver, or use the \
         host device (OXCCL_DEVICE=host)"
    )]
    NoDriver,
    #[error(
        "NVRTC (libnvrtc.so) was not found: install the CUDA toolkit or the PyPI wheel \
         nvidia-cuda-nvrtc-cu12 (scripts/install-cuda-ci.sh) and put its lib folder on \
         LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    #[error("{call} failed: {name} ({code})")]
    Driver {
        call: &'static str,
        code: i32,
        name: String,
    },
    #[error(
        "rank {rank} is placed on CUDA device {ordinal}, but this machine has {count}; check \
         OXCCL_CUDA_DEVICES"
    )]
    NoDevice {
        rank: Rank,
        ordinal: usize,
        count: usize,
    },
    #[error(
        "OXCCL_CUDA_DEVICES lists {given} devices for {local} local ranks, this process's \
         first being rank {first} of its host: give one ordinal for all of them, one per \
         local rank, or one per rank of the host"
    )]
    Placement {
        given: usize,
        local: usize,
        first: usize,
    },
    #[error(
        "a task with {operands} sources and destinations: the cuda backend runs at most {max} \
         per task"
    )]
    TooManyOperands { operands: usize, max: usize },
    #[error("a stream of {tasks} tasks: the cuda backend runs at most {max} per stream")]
    TooManyTasks { tasks: usize, max: usize },
    #[error(
        "an offset of {offset} bytes into a user buffer is past what the cuda backend encodes"
    )]
    OffsetTooLarge { offset: usize },
    #[error(
        "device address {addr:#x} has one of its two top bits set, which the cuda backend's \
         program encoding uses to tag user-buffer operands"
    )]
    AddressTooHigh { addr: u64 },
    #[error(
        "a call on CUDA device {ordinal} needs {needed} thread blocks at once (one per stream \
         of every rank on it), but the GPU holds {capacity}: use fewer ranks per GPU or \
         executors with fewer streams"
    )]
    TooManyBlocks {
        ordinal: usize,
        needed: usize,
        capacity: usize,
    },
    #[error(
        "rank {rank}: call epoch {epoch} waited {waited:?} for ranks {missing:?} on the same \
         GPU to make the call (a GPU runs its ranks' programs of a call in one launch); \
         check that every rank makes the same calls, or raise OXCCL_EXEC_TIMEOUT"
    )]
    NeverCalled {
        rank: Rank,
        epoch: u64,
        missing: Vec<Rank>,
        waited: Duration,
    },
    #[error(
        "CUDA device {ordinal} ({name}) lacks {feature}, which the cuda backend needs (a GPU \
         of compute capability 7.0 or newer with a driver of CUDA 12 or newer has it)"
    )]
    Lacks {
        ordinal: usize,
        name: String,
        feature: &'static str,
    },
    #[error(
        "CUDA devices {a} and {b} cannot access each other's memory (no peer access): place \
         the ranks that share a communicator on GPUs linked by NVLink or PCIe P2P"
    )]
    NoPeerAccess { a: usize, b: usize },
    #[error(
        "the CUDA headers (cuda_fp16.h, cuda_bf16.h) were not found in {tried:?}: set \
         OXCCL_CUDA_INCLUDE to their folder (scripts/install-cuda-ci.sh prints it) or \
         CUDA_HOME to the toolkit"
    )]
    NoHeaders { tried: Vec<String> },
    #[error("NVRTC could not compile the program kernel for {arch}:\n{log}")]
    Compile { arch: String, log: String },
    #[error(
        "rank {rank}'s programs need {needed} local notifies; the cuda backend has room for \
         {capacity} per rank"
    )]
    TooManyLocalNotifies {
        rank: Rank,
        needed: usize,
        capacity: usize,
    },
    #[error(
        "rank {rank}'s program has {streams} streams; the cuda backend runs at most {capacity}"
    )]
    TooManyStreams {
        rank: Rank,
        streams: usize,
        capacity: usize,
    },
    #[error(
        "rank {rank}: the user's {what} is device memory of CUDA device {found:?}, but the \
         rank runs on device {ordinal}; allocate it on the rank's device"
    )]
    ForeignMemory {
        rank: Rank,
        what: &'static str,
        ordinal: usize,
        found: Option<usize>,
    },
    #[error(
        "rank {rank}: {what} [{addr:#x}; {len} bytes] is not memory the rank may bind on CUDA \
         device {ordinal}: {found}; pass memory allocated on that device (cudaMalloc after \
         cudaSetDevice({ordinal})) holding the whole count"
    )]
    Pointer {
        rank: Rank,
        what: String,
        addr: u64,
        len: usize,
        ordinal: usize,
        found: String,
    },
    #[error("there is no CUDA device {ordinal}: this machine has {count}")]
    NoOrdinal { ordinal: usize, count: usize },
    #[error(
        "{what}: the source has {source_len} bytes and the destination {destination_len}; a \
         copy between a device buffer and a slice or another buffer needs equal lengths"
    )]
    CopyLength {
        what: &'static str,
        source_len: usize,
        destination_len: usize,
    },
    #[error(
        "rank {peer}'s program reaches {needed} bytes into rank {rank}'s {buf:?}, which has \
         {len}: every rank of a zero-copy call must pass buffers of the size the operator \
         needs"
    )]
    PeerBufferTooShort {
        rank: Rank,
        peer: Rank,
        buf: crate::ir::Buf,
        len: usize,
        needed: usize,
    },
    #[error(
        "rank {peer}'s program reduces in rank {rank}'s {buf:?}, which must be aligned to \
         {align} bytes; pass buffers aligned to their element type"
    )]
    PeerBufferMisaligned {
        rank: Rank,
        peer: Rank,
        buf: crate::ir::Buf,
        align: usize,
    },
    #[error(
        "rank {rank}'s user buffers overlap rank {peer}'s, and one of them is written: in a \
         zero-copy call every rank's output must be memory of its own"
    )]
    UserBuffersOverlap { rank: Rank, peer: Rank },
    #[error(
        "rank {rank}'s program reaches rank {peer}'s user buffer, which did not make this \
         call on the GPU; every rank of a call must run it"
    )]
    PeerNotInCall { rank: Rank, peer: Rank },
    #[error(
        "rank {rank} is past the {max} ranks whose user buffers the cuda backend's program \
         encoding can name"
    )]
    PeerRankTooHigh { rank: Rank, max: usize },
    #[error(
        "rank {rank}: stream {stream} did not finish within {waited:?}; its last task \
         reached was {task}. The device was stopped so that every other rank returns too"
    )]
    Hung {
        rank: Rank,
        stream: usize,
        task: String,
        waited: Duration,
    },
    #[error(
        "a step of a CUDA graph needs a descriptor of {words} words, but the graph holds \
         {capacity} for it (a bug in the cuda backend: please report it); set \
         OXCCL_CUDA_GRAPHS=0 to launch graph mode's steps one by one"
    )]
    GraphDescriptor { words: usize, capacity: usize },
    #[error(
        "rank {rank}: stream {stream:#x} {state}. oxccl's calls wait on the host for the \
         caller's stream, which a CUDA graph capture cannot hold (the wait would invalidate \
         it): make the call outside the capture, or record the calls with \
         oxcclGraphCaptureBegin/oxcclGraphCaptureEnd and replay them with oxcclGraphLaunch"
    )]
    StreamCapturing {
        rank: Rank,
        stream: usize,
        state: CaptureState,
    },
    #[error(
        "rank {rank}: the work queued on the caller's stream {stream:#x} before the call did \
         not finish within {waited:?}, so the call did not start; check that work (a kernel \
         that never ends, a wait on an event never recorded), or raise OXCCL_EXEC_TIMEOUT \
         (the C ABI's config->timeoutSeconds)"
    )]
    StreamTimeout {
        rank: Rank,
        stream: usize,
        waited: Duration,
    },
}

/// Why a caller's stream is inside a CUDA graph capture ([`CudaError::StreamCapturing`]),
/// as `cuStreamIsCapturing` tells it.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum CaptureState {
    /// The stream is capturing (`CU_STREAM_CAPTURE_STATUS_ACTIVE`).
    Active,
    /// An error invalidated the stream's capture, which has not ended yet
    /// (`CU_STREAM_CAPTURE_STATUS_INVALIDATED`).
    Invalidated,
    /// The stream is the legacy default stream while a blocking stream of its context
    /// captures (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`).
    ImplicitLegacy,
    /// A capture status this build does not know (a newer driver's).
    Unknown(u32),
}

impl std::fmt::Display for CaptureState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureState::Active => write!(f, "is capturing a CUDA graph"),
            CaptureState::Invalidated => write!(
                f,
                "is in a CUDA graph capture that an earlier error invalidated (end it with \
                 cudaStreamEndCapture)"
            ),
            CaptureState::ImplicitLegacy => write!(
                f,
                "is the legacy default stream (NULL or CU_STREAM_LEGACY) while a blocking \
                 stream of the GPU captures a CUDA graph"
            ),
            CaptureState::Unknown(status) => {
                write!(
                    f,
                    "has capture status {status}, which this build does not know"
                )
            }
        }
    }
}
