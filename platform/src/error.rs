//! Errors of the platform layer: what a device reports when a program cannot run.
//!
//! Every cause is a typed value, never a string: a refusal keeps the framework's error, an
//! abort keeps the peer's error, an allocation keeps the allocator's, a worker that could
//! not start keeps its `io::Error`. Each is the variant's `source()`, and its text is also
//! part of the variant's message, because callers that flatten errors to one line (logs,
//! the framework's failure record) must still say what went wrong. [`DeviceError`] is `Clone` (one failure is reported to
//! every rank in flight), so causes that are not `Clone` themselves are shared with `Arc`.

use crate::dtype::DataType;
use crate::ir::{Buf, NotifyId, Rank, Slice};
use std::sync::Arc;
use std::time::Duration;

/// Where in a program something happened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TaskLocation {
    pub rank: Rank,
    pub stream: usize,
    pub task: usize,
}

impl std::fmt::Display for TaskLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} stream {} task {}",
            self.rank, self.stream, self.task
        )
    }
}

/// Why a gate refused a launch: whatever error the deciding side had (the framework's
/// agreement verdict, a transport's failure), kept whole.
pub type GateRefusal = Arc<dyn std::error::Error + Send + Sync>;

/// What is wrong with one slice of a task.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceFault {
    #[error("rank {rank} does not exist (the communicator has {ranks})")]
    NoSuchRank { rank: Rank, ranks: usize },
    #[error("length {len} differs from the task's {task_len}")]
    LengthMismatch { len: usize, task_len: usize },
    #[error("programs must not write the user's Input")]
    WritesInput,
    #[error("length is not a multiple of the {dtype} size")]
    PartialElement { dtype: DataType },
    #[error("not aligned to {} bytes for {dtype}", dtype.size())]
    Misaligned { dtype: DataType },
    #[error("the buffer has only {buffer_len} bytes")]
    OutOfBounds { buffer_len: usize },
    #[error("the buffer is read-only")]
    ReadOnly,
    #[error("overlaps {other}")]
    Overlaps { other: Slice },
    #[error("the executor requested no scratch")]
    NoScratch,
    #[error("scratch allocation {id} does not exist")]
    NoSuchScratch { id: usize },
    #[error("rank {rank} has no collective in flight, so its {buf:?} is unbound")]
    Unbound { rank: Rank, buf: Buf },
    #[error(
        "rank {rank}'s user buffers are in another process, out of reach; such a \
         communicator stages through the CCL buffers"
    )]
    UserBufferOutOfReach { rank: Rank },
    #[error(
        "rank {rank} is reached over a put-only link (TCP): a task may write its CclIn, CclOut \
         or scratch, never read them; this executor needs load/store links"
    )]
    ReadOverPutLink { rank: Rank },
    #[error(
        "rank {rank}'s buffers are bound for call epoch {bound}, this task runs epoch {running}"
    )]
    OtherEpoch {
        rank: Rank,
        bound: u64,
        running: u64,
    },
}

/// What is wrong with a task as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskFault {
    #[error("a data task needs sources and destinations")]
    NoOperands,
    #[error("notify {notify:?} does not exist (rank {rank} has {len})")]
    NoSuchNotify {
        notify: NotifyId,
        rank: Rank,
        len: usize,
    },
    #[error("Wait on notify {notify:?} of another rank; waits are local")]
    RemoteWait { notify: NotifyId },
    #[error("two streams wait on {notify_desc}")]
    TwoWaiters { notify_desc: String },
}

/// Why a device refused a configuration or a program.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigFault {
    #[error("a device needs at least one rank")]
    NoRanks,
    #[error("a device must serve at least one local rank")]
    NoLocalRanks,
    #[error("local rank {rank} is outside the communicator of {ranks} ranks")]
    LocalRankOutOfRange { rank: Rank, ranks: usize },
    #[error("local rank {rank} is listed twice")]
    DuplicateLocalRank { rank: Rank },
    #[error("links need at least one notify channel")]
    NoLinkChannels,
    #[error("cannot start {threads} worker threads")]
    Threads {
        threads: usize,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("unknown device kind {kind:?}; known kinds: {}", known.join(", "))]
    UnknownKind {
        kind: String,
        known: Vec<&'static str>,
    },
    #[error(
        "rank {rank} is not served by this device (it serves {local:?}) and no transport \
         reaches it"
    )]
    NotServed { rank: Rank, local: Vec<Rank> },
    #[error("the compiled program belongs to another device")]
    ForeignProgram,
    #[error(
        "the program was compiled for {} buffers but bound with {}",
        in_place_name(*compiled),
        in_place_name(*bound)
    )]
    BindingForm { compiled: bool, bound: bool },
    #[error(
        "the user's {buf:?} has {len} bytes; the program touches {needed} (check the count \
         against the buffer)"
    )]
    UserBufferTooShort { buf: Buf, len: usize, needed: usize },
    #[error(
        "the user's {buf:?} is not aligned to {align} bytes, as the program's reductions need"
    )]
    UserBufferMisaligned { buf: Buf, align: usize },
    #[error("rank {rank} has {count} submissions in one group; one per rank")]
    RankTwiceInGroup { rank: Rank, count: usize },
    #[error(
        "rank {rank} was set up with (link words, CCL buffer bytes) = {theirs:?}, this rank \
         with {ours:?}; start every rank with the same OXCCL_BUFFSIZE and rank count"
    )]
    PeerShape {
        rank: Rank,
        theirs: (usize, usize),
        ours: (usize, usize),
    },
    #[error(
        "rank {rank}'s device says it sleeps on rank {bell_rank}'s doorbell, which is no \
         rank reached here; every rank of the job must run the same build"
    )]
    PeerBell { rank: Rank, bell_rank: usize },
    #[error(
        "the {kind} device runs on host memory and was given device memory: pass slices, \
         or create the communicator on the cuda device (OXCCL_DEVICE=cuda)"
    )]
    DeviceMemory { kind: &'static str },
    #[error(
        "the {kind} device has no host memory to share for user buffers (alloc_shared); \
         allocate the buffers its way (a DeviceBuffer on cuda)"
    )]
    NoSharedMemory { kind: &'static str },
    #[error(
        "the {kind} device has no streams of a caller's to wait for (stream {stream:#x}); \
         pass NULL"
    )]
    NoStreams { kind: &'static str, stream: usize },
    #[error("a copy of {source_len} bytes into {destination_len}: a copy takes equal spans")]
    CopyLengths {
        source_len: usize,
        destination_len: usize,
    },
    #[error("the {what} is too large to lay out")]
    TooLarge { what: &'static str },
}

fn in_place_name(in_place: bool) -> &'static str {
    if in_place {
        "in-place"
    } else {
        "out-of-place"
    }
}

/// Why the allocator gave no memory.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AllocFault {
    #[error("the size is too large for a memory layout")]
    Layout(#[from] std::alloc::LayoutError),
    #[error("out of memory")]
    OutOfMemory,
    #[error("the GPU refused: {0}")]
    Device(String),
}

/// Why a launch was aborted although it did nothing wrong itself.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AbortCause {
    #[error("rank {rank} failed: {error}")]
    PeerFailed {
        rank: Rank,
        #[source]
        error: Arc<DeviceError>,
    },
    #[error("rank {rank} (process {pid}) {loss}{}", on_host(host))]
    PeerProcess {
        rank: Rank,
        pid: u32,
        loss: PeerLoss,
        /// The host it ran on, as the job's table says (empty: unknown).
        host: String,
    },
    #[error("the communicator of rank {rank} was aborted by its user")]
    UserAbort { rank: Rank },
    /// A rank's call failed before its device ran it (planning, compiling, binding the
    /// buffers): its peers' launches wait for tasks that will never run.
    #[error("rank {rank} failed its call before running it: {reason}")]
    CallFailed { rank: Rank, reason: String },
}

impl AbortCause {
    /// Why a device stops when `rank`'s submission could not start with `err` (its peers
    /// would wait for it), or `None` when nothing more stops: the submission met the
    /// device's own stop (`Aborted`) or a refused gate (`Refused`).
    pub fn failed_start(rank: Rank, err: &DeviceError) -> Option<AbortCause> {
        match err {
            DeviceError::Aborted { .. } | DeviceError::Refused { .. } => None,
            _ => Some(AbortCause::PeerFailed {
                rank,
                error: Arc::new(err.clone()),
            }),
        }
    }
}

/// `; it ran on host H`, or nothing for an unknown host.
fn on_host(host: &str) -> String {
    match host {
        "" => String::new(),
        h => format!("; it ran on host {h}"),
    }
}

/// How a rank in another process was lost.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PeerLoss {
    /// Its device stopped on an error of its own (reported in its process).
    Failed,
    /// Its process is gone (killed, crashed, exited).
    Died,
}

impl std::fmt::Display for PeerLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerLoss::Failed => "failed (its own error is reported in its process)",
            PeerLoss::Died => "died",
        })
    }
}

/// Why a device could not run a program.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "{at}: Wait on {notify_desc} timed out after {waited:?}; nobody posted it. Either \
         a rank did not make the same call (OXCCL_CHECK_CALLS=1 checks every call), or the \
         executor never posts it (`oxccl check` proves it); if the peer is only slow, raise \
         OXCCL_EXEC_TIMEOUT"
    )]
    WaitTimeout {
        at: TaskLocation,
        notify: NotifyId,
        notify_desc: String,
        waited: Duration,
    },
    #[error(
        "{at}: Post on {notify_desc} found it already set: a lost wakeup (two posts before \
         one wait). The program is wrong; run `oxccl check` on its executor"
    )]
    LostWakeup {
        at: TaskLocation,
        notify: NotifyId,
        notify_desc: String,
    },
    #[error(
        "rank {rank} finished operation {epoch} with {notify_desc} still set: it was posted \
         and no wait of the operation consumed it, so the next operation's wait on it would \
         return before its data is there. The program is wrong; run `oxccl check` on its \
         executor"
    )]
    NotifyLeftSet {
        rank: Rank,
        epoch: u64,
        notify: NotifyId,
        notify_desc: String,
    },
    #[error(
        "{at}: Post on {notify_desc} came after rank {owner} finished operation {epoch}: \
         no wait of the operation is left to consume it, so it would be left set for the \
         next one. The program is wrong; run `oxccl check` on its executor"
    )]
    PostAfterEnd {
        at: TaskLocation,
        owner: Rank,
        epoch: u64,
        notify: NotifyId,
        notify_desc: String,
    },
    #[error("{at}: invalid task: {fault}")]
    InvalidTask {
        at: TaskLocation,
        #[source]
        fault: TaskFault,
    },
    #[error("{at}: slice {slice} is invalid: {fault}")]
    InvalidSlice {
        at: TaskLocation,
        slice: Slice,
        #[source]
        fault: SliceFault,
    },
    #[error("device cannot allocate {bytes} bytes for {what}: {fault}")]
    Alloc {
        what: &'static str,
        bytes: usize,
        #[source]
        fault: AllocFault,
    },
    #[error("rank {rank}: aborted because {cause}")]
    Aborted {
        rank: Rank,
        #[source]
        cause: AbortCause,
    },
    #[error(
        "rank {rank} already has a collective in flight; a communicator runs one collective \
         at a time, so call it from one thread"
    )]
    Busy { rank: Rank },
    #[error(
        "rank {rank}: its {buf:?} buffer is not in memory from alloc_shared, and its peers in \
         other processes must map it (this job runs zero-copy across processes: \
         OXCCL_SHARED_BUFFERS=1); allocate the call's buffers with alloc_shared, or turn \
         OXCCL_SHARED_BUFFERS off to stage through the CCL buffers"
    )]
    NotShared { rank: Rank, buf: Buf },
    #[error("rank {rank}: not started because its gate refused it: {cause}")]
    Refused {
        rank: Rank,
        #[source]
        cause: GateRefusal,
    },
    #[error(
        "rank {rank}: waited {waited:?} for its gate to open (the agreement of every rank \
         on the call); check that every rank makes the same calls, or raise OXCCL_EXEC_TIMEOUT"
    )]
    GateTimeout { rank: Rank, waited: Duration },
    #[error(
        "rank {rank}: call epoch {epoch} waited {waited:?} for rank {peer} to finish epoch \
         {needed} (it has finished {reached}); check that every rank makes the same calls, \
         or raise OXCCL_EXEC_TIMEOUT"
    )]
    FenceTimeout {
        rank: Rank,
        epoch: u64,
        peer: Rank,
        needed: u64,
        reached: u64,
        waited: Duration,
    },
    #[error("bad device configuration: {0}")]
    Config(#[source] ConfigFault),
    #[error("the shared-memory transport failed")]
    Shm(#[source] crate::transport::shm::ShmError),
    #[error("the TCP transport failed")]
    Tcp(#[source] crate::transport::tcp::TcpError),
    /// Boxed: the RDMA errors name a port and a verbs call, and would make every
    /// `Result<_, DeviceError>` as large.
    #[error("the RDMA transport failed")]
    Rdma(#[source] Box<crate::transport::rdma::RdmaError>),
    #[error("the CUDA backend failed: {0}")]
    Cuda(#[source] crate::cuda::CudaError),
}

impl From<crate::transport::rdma::RdmaError> for DeviceError {
    fn from(e: crate::transport::rdma::RdmaError) -> Self {
        DeviceError::Rdma(Box::new(e))
    }
}

/// In every build: the error type is the same with or without the `cuda` feature.
impl From<crate::cuda::CudaError> for DeviceError {
    fn from(e: crate::cuda::CudaError) -> Self {
        DeviceError::Cuda(e)
    }
}

impl From<ConfigFault> for DeviceError {
    fn from(fault: ConfigFault) -> Self {
        DeviceError::Config(fault)
    }
}
