//! The `Device` trait: what a backend must offer the framework.
//!
//! Modelled on wgpu-hal's three steps: **resources**, then **compile** (command encoding),
//! then **submit** with a fence.
//!
//! 1. *Resources.* A device serves some **local ranks** of a communicator (the ranks of one
//!    process; [`DeviceConfig::local_ranks`]). For each it owns the CCL buffers, scratch
//!    allocations and a signal bank ([`crate::signal`]), described by [`ResourceHandle`]s
//!    (address, length, memory kind) that a transport can export, map or register. Ranks
//!    that are not local have no resources here: they are reached through transports.
//! 2. *Compile.* [`Device::compile`] turns one rank's [`RankProgram`] into a backend
//!    handle once: the host resolves every device-owned slice to an address and checks it,
//!    computes how far the program reaches into the user's buffers, resolves notifies to
//!    signal words and records the fence peers; a GPU backend would record stream
//!    operations. A program that touches a rank this device does not serve is refused
//!    ([`ConfigFault::NotServed`]).
//! 3. *Submit.* [`Device::submit`] binds the user's buffers to compiled programs and
//!    returns a [`Completion`] per submission; [`Device::run`] submits and waits (what the
//!    framework's eager path uses).
//!
//! ## The epoch fence (why operations need no Close exchange)
//!
//! Every call of a rank has an **epoch**: the communicator's call number plus one, the
//! same on every rank for the same call. Per local rank the device keeps `done_epoch`
//! (monotone, 0 before the first call): the last epoch whose work on that rank is over.
//! Every epoch a rank consumes reaches the device: a submission advances `done_epoch` when
//! its streams end (refused by its gate included), and a call that runs no program (count
//! 0, refused by validation) calls [`Device::retire`]. So no peer ever waits for a hole.
//!
//! - *Entry fence*: a submission of epoch `e` on rank A starts its tasks only after A
//!   itself and every peer in its **fence set** (the peers granted to A's resource
//!   request, given to `compile`) and in the fence set of A's previous submission have
//!   `done_epoch >= e - 1`. (A's own previous epoch matters when A's submissions are
//!   queued: [`Capabilities::queued_submissions`].)
//!   The previous set matters when the calls grant different peers: after a staged mesh,
//!   a ring's rank must not overwrite its CCL buffers while a rank that is no ring
//!   neighbour still reads them for the mesh (the analyzer's sequence check finds exactly
//!   that race without it).
//! - *Exit fence*: when peers may touch A's user buffers ([`CompileRequest::exit_fence`],
//!   the framework's zero-copy mode), A's submission completes only after every fence peer
//!   that can touch them has `done_epoch >= e`: a backend may leave out the peers it
//!   reaches over put-only links (the host device does), which write only A's CCL
//!   buffers and scratch.
//!
//! Why this replaces the two-phase Close: a peer P that posts A's notifies or touches A's
//! buffers in epoch `e` holds a link to A, so A is in P's fence set and P started `e` after
//! A finished `e - 1`. A finished `e - 1` only after consuming every post made to it in
//! `e - 1` (the analyzer proves every post of an operation is consumed within it), so no
//! post of `e` finds a notify left set by `e - 1`, and no write of `e` lands in a buffer A
//! still reads for `e - 1`. Symmetrically A starts `e` after P finished `e - 1`. Linked
//! ranks are thus at most one epoch apart, and the IR's binary notify contract holds
//! across operations without a signal of its own. The exit fence keeps the user's buffers
//! untouched once A's call returns.
//!
//! A backend that can *hold* what a peer sends until the receiving rank finished its
//! current epoch may let that peer's fence lag by two (`done_epoch >= e - 2`): what the
//! fence protects then holds at the receiver instead. The host device does so for ranks
//! it reaches by TCP frames (see `host::tcp::early`): a latency-bound call across hosts
//! no longer waits a message's flight for its peer's Done on every call.
//!
//! Fence waits park (no busy wait), are bounded by
//! `exec_timeout` ([`DeviceError::FenceTimeout`] names rank, epoch and peer), and a device
//! failure releases them at once.
//!
//! The trait is object safe: the framework holds an `Arc<dyn Device>` created through the
//! [`crate::registry`] of backend kinds.

use crate::error::{AbortCause, ConfigFault, DeviceError};
use crate::gate::Gate;
use crate::ir::{Rank, RankProgram};
use crate::notify::NotifyLayout;
use crate::slice_checks::UserReach;
use crate::user_memory::UserMemory;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// What a device is created with.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Ranks in the communicator.
    pub ranks: usize,
    /// The ranks this device serves (those of one process), distinct, each `< ranks`.
    pub local_ranks: Vec<Rank>,
    /// Size of each of CclIn and CclOut, per rank, in bytes.
    pub ccl_bytes: usize,
    /// Notify channels per link (see [`NotifyLayout`]).
    pub link_channels: usize,
    /// How long a Wait, a gate or a fence may block before it is reported as an error.
    pub exec_timeout: Duration,
    /// Worker threads of the host device (0 = one per core).
    pub host_threads: usize,
    /// Let peers work on a rank's user buffers (zero-copy) when the backend can. The `sim`
    /// backend, which can model either, follows it; the host can when it serves every
    /// rank.
    pub zero_copy: bool,
    /// Reach every rank this device does not serve through shared memory (ranks of other
    /// processes of this host, or of other devices of this one): the shm transport
    /// ([`crate::transport::shm`]). `None`: ranks not served here are not reachable.
    pub shm: Option<ShmJob>,
    /// Reach the ranks it lists over TCP (put-only links): the tcp transport
    /// ([`crate::transport::tcp`]). A rank listed there is not reached through `shm`.
    pub tcp: Option<crate::transport::tcp::TcpJob>,
    /// Where every rank of the job runs, indexed by rank (empty: unknown, as for ranks of
    /// one process): to tell whether a peer's process is alive, and to name it when it
    /// is lost.
    pub processes: Vec<RankProcess>,
    /// The cuda backend's placement: the CUDA device ordinal of each local rank (by its
    /// index in `local_ranks`), one ordinal for all, or one per rank of the host (each
    /// process takes its own); empty: round-robin over the machine's GPUs from the
    /// process's place among its host's ranks. Other backends ignore it.
    pub gpus: Vec<usize>,
    /// The cuda backend runs graph mode's launches as CUDA graphs where it can (else step
    /// by step). Other backends ignore it.
    pub cuda_graphs: bool,
    /// The cuda backend page-locks the host blocks that stage the calls of a job of
    /// processes, so that its copies across the bus run at the bus's speed. Other
    /// backends ignore it.
    pub pin_staging: bool,
}

/// The process a rank runs in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankProcess {
    /// Its process id (0: unknown).
    pub pid: u32,
    /// Its host's name (empty: unknown).
    pub host: String,
}

impl DeviceConfig {
    /// The pid of `rank`'s process, 0 when unknown.
    pub fn pid_of(&self, rank: Rank) -> u32 {
        self.processes.get(rank).map_or(0, |p| p.pid)
    }

    /// The cause for `rank` lost as `loss`, naming its host; `pid` is the process the
    /// report names (the job's own for `rank` when `None`).
    pub fn lost(
        &self,
        rank: Rank,
        pid: Option<u32>,
        loss: crate::error::PeerLoss,
    ) -> crate::error::AbortCause {
        crate::error::AbortCause::PeerProcess {
            rank,
            pid: pid.unwrap_or_else(|| self.pid_of(rank)),
            loss,
            host: self
                .processes
                .get(rank)
                .map(|p| p.host.clone())
                .unwrap_or_default(),
        }
    }
}

/// A job whose ranks meet in shared memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmJob {
    /// Names the job's segments (`/oxccl-<tag>-r<rank>-...`): the same on every rank, and
    /// different for every job (the bootstrap derives it from the job's secret). Letters,
    /// digits, `-` and `_` only.
    pub tag: String,
    /// Peers map the user buffers of a rank's calls, which must then lie in memory from
    /// [`Device::alloc_shared`]: calls run zero-copy across processes (the device reports
    /// [`Capabilities::peer_user_buffers`]). Off, peers reach only the CCL buffers and
    /// scratch, and calls stage through them.
    pub user_buffers: bool,
}

impl ShmJob {
    /// The job `tag`, staging through the CCL buffers (user buffers stay private).
    pub fn new(tag: impl Into<String>) -> Self {
        ShmJob {
            tag: tag.into(),
            user_buffers: false,
        }
    }
}

impl DeviceConfig {
    /// A configuration serving every rank of an in-process communicator of `ranks`.
    pub fn all_local(ranks: usize) -> Self {
        DeviceConfig {
            ranks,
            local_ranks: (0..ranks).collect(),
            ccl_bytes: 1 << 20,
            link_channels: 2,
            exec_timeout: Duration::from_secs(60),
            host_threads: 0,
            zero_copy: true,
            shm: None,
            tcp: None,
            processes: Vec::new(),
            gpus: Vec::new(),
            cuda_graphs: true,
            pin_staging: true,
        }
    }

    /// The notify layout every rank of this device uses.
    pub fn layout(&self) -> NotifyLayout {
        NotifyLayout {
            ranks: self.ranks,
            link_channels: self.link_channels,
        }
    }

    /// Check the fields every backend relies on; returns, per communicator rank, its
    /// index among the local ranks.
    pub fn local_slots(&self) -> Result<Vec<Option<usize>>, DeviceError> {
        if self.ranks == 0 {
            return Err(ConfigFault::NoRanks.into());
        }
        if self.local_ranks.is_empty() {
            return Err(ConfigFault::NoLocalRanks.into());
        }
        if self.link_channels == 0 {
            return Err(ConfigFault::NoLinkChannels.into());
        }
        let mut slots = vec![None; self.ranks];
        for (slot, &rank) in self.local_ranks.iter().enumerate() {
            let entry = slots
                .get_mut(rank)
                .ok_or(ConfigFault::LocalRankOutOfRange {
                    rank,
                    ranks: self.ranks,
                })?;
            if entry.replace(slot).is_some() {
                return Err(ConfigFault::DuplicateLocalRank { rank }.into());
            }
        }
        Ok(slots)
    }

    /// The refusal for a rank this device does not serve.
    pub fn not_served(&self, rank: Rank) -> DeviceError {
        ConfigFault::NotServed {
            rank,
            local: self.local_ranks.clone(),
        }
        .into()
    }
}

/// What a backend can do, which decides how the framework drives it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Peers over load/store links may read and write a rank's user buffers while its
    /// call runs, so eager calls run zero-copy towards them; otherwise they stage through
    /// the CCL buffers. Across processes ([`ShmJob::user_buffers`]) the buffers must lie
    /// in [`Device::alloc_shared`] memory. Peers over put-only links (TCP, RDMA) never
    /// touch user buffers, whatever this says: what crosses them writes registered
    /// buffers only.
    pub peer_user_buffers: bool,
    /// Programs really run (false for a device that only records them, like `sim`).
    pub executes: bool,
    /// One [`Device::submit`] may carry several submissions of one rank (with increasing
    /// epochs): each starts after the rank's previous epoch finished, as if submitted one
    /// call at a time, without the caller's thread in between. Graph mode hands a whole
    /// sequence of calls to such a device at once; on others it submits step by step.
    pub queued_submissions: bool,
    /// [`Device::run_sequence_group`] takes whole sequences (every step of a graph
    /// launch's ranks at once, several submissions per rank in epoch order) even where
    /// `submit` does not queue: the backend runs them its own way (the cuda backend as
    /// CUDA graphs) and step by step where it cannot.
    pub whole_sequences: bool,
    /// Where the CCL buffers, scratch and signal banks live.
    pub memory: MemoryKind,
}

/// Where a resource lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Private heap memory of this process: reachable by its threads only. A transport
    /// would have to register it (RDMA) or the backend would place it in a segment.
    ProcessHeap,
    /// A shared-memory segment other processes can map.
    SharedSegment,
    /// Accelerator memory.
    Device,
    /// Nothing is allocated (the `sim` device).
    None,
}

/// Which per-rank resource.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Resource {
    CclIn,
    CclOut,
    Scratch(ScratchId),
    /// The rank's signal bank: its notify words.
    Signals,
}

/// A per-rank resource as a transport sees it: where it is and how big.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ResourceHandle {
    pub rank: Rank,
    pub resource: Resource,
    pub memory: MemoryKind,
    /// Address in this process (0 when `memory` is [`MemoryKind::None`]). For signals,
    /// the link region's first word (the local region grows in segments of its own).
    pub addr: usize,
    /// Bytes. For signals: the link region's 4-byte state words, contiguous (the host
    /// keeps its process-local waker slots apart from them).
    pub len: usize,
}

/// A process-wide unique id for a new device, so a program compiled by one device is
/// refused by every other ([`Compiled::device_id`]).
pub fn next_device_id() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Handle of a scratch allocation: one buffer of the same size on every local rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScratchId(pub usize);

/// The user's buffers bound to `Buf::Input` and `Buf::Output` for one submission.
pub enum UserBuffers<'a> {
    /// Distinct send and receive buffers.
    OutOfPlace {
        input: &'a [u8],
        output: &'a mut [u8],
    },
    /// One buffer that is both the input and the output.
    InPlace(&'a mut [u8]),
    /// Accelerator memory by address (the cuda backend; the adapter's `DeviceBuffer`).
    /// Whoever builds it keeps both spans allocated, and leaves them alone, until the
    /// submission's completion reported its outcome. `in_place`: one buffer, both spans
    /// equal. A backend whose ranks use host memory refuses it.
    Device {
        input: DeviceSpan,
        output: DeviceSpan,
        in_place: bool,
    },
}

/// A span of accelerator memory: its device address and length in bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpan {
    pub addr: u64,
    pub len: usize,
}

impl DeviceSpan {
    /// The `len` bytes at `offset` of this span, or `None` when they do not lie inside it
    /// (a receive buffer between guard bytes, a block of a larger buffer).
    pub fn slice(&self, offset: usize, len: usize) -> Option<DeviceSpan> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        let addr = self.addr.checked_add(u64::try_from(offset).ok()?)?;
        Some(DeviceSpan { addr, len })
    }
}

impl UserBuffers<'_> {
    /// True for in-place bindings.
    pub fn is_in_place(&self) -> bool {
        match self {
            UserBuffers::InPlace(_) => true,
            UserBuffers::OutOfPlace { .. } => false,
            UserBuffers::Device { in_place, .. } => *in_place,
        }
    }

    /// Bytes of (input, output) as an operator's checks take them: input `None` in
    /// place (the one buffer is the output).
    pub fn lens_by_form(&self) -> (Option<usize>, usize) {
        match self.lens() {
            (_, output) if self.is_in_place() => (None, output),
            (input, output) => (Some(input), output),
        }
    }

    /// Bytes of (Input, Output).
    pub fn lens(&self) -> (usize, usize) {
        match self {
            UserBuffers::OutOfPlace { input, output } => (input.len(), output.len()),
            UserBuffers::InPlace(buf) => (buf.len(), buf.len()),
            UserBuffers::Device { input, output, .. } => (input.len, output.len),
        }
    }

    /// Whether the buffers are accelerator memory.
    pub fn is_device(&self) -> bool {
        matches!(self, UserBuffers::Device { .. })
    }
}

/// What [`Device::compile`] needs besides the program.
#[derive(Clone, Debug)]
pub struct CompileRequest {
    pub program: Arc<RankProgram>,
    /// Bound to `Buf::Scratch`.
    pub scratch: Option<ScratchId>,
    /// The peers granted to the rank's resource request: the fence set.
    pub peers: Vec<Rank>,
    /// Local notifies the program uses (the local region it needs).
    pub local_notifies: usize,
    /// The program is for in-place bindings.
    pub in_place: bool,
    /// Peers may touch this rank's user buffers (zero-copy): completion waits for them.
    pub exit_fence: bool,
    /// Bytes the whole operation's user buffers take on this rank's host (every rank's
    /// input and output there that the operation touches), or 0 when not known: a hint
    /// for how a backend stores a copy's result (the host's
    /// [`copy_streams`](crate::reduce::copy_streams)), never a bound.
    pub footprint: usize,
}

/// A compiled program: what every backend knows about it, plus the backend's own part.
pub struct Compiled {
    pub rank: Rank,
    /// The fence set (see the module docs).
    pub peers: Vec<Rank>,
    pub in_place: bool,
    pub exit_fence: bool,
    /// Bytes of (Input, Output) the program reaches on its own rank: a binding must be at
    /// least this long.
    pub user_extent: (usize, usize),
    /// Alignment the program's reductions need of (Input, Output).
    pub user_align: (usize, usize),
    /// Tasks in the program.
    pub tasks: usize,
    /// Identifies the device that compiled it (a handle is refused by any other).
    pub device_id: usize,
    /// The backend's part (host: resolved addresses and signal words).
    pub backend: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("rank", &self.rank)
            .field("peers", &self.peers)
            .field("in_place", &self.in_place)
            .field("exit_fence", &self.exit_fence)
            .field("user_extent", &self.user_extent)
            .field("tasks", &self.tasks)
            .finish()
    }
}

impl Compiled {
    /// Check that `user` fits what the program reaches: O(1) per buffer, never per task.
    pub fn check_binding(&self, user: &UserBuffers<'_>) -> Result<(), DeviceError> {
        if user.is_in_place() != self.in_place {
            return Err(ConfigFault::BindingForm {
                compiled: self.in_place,
                bound: user.is_in_place(),
            }
            .into());
        }
        let addrs = match user {
            UserBuffers::OutOfPlace { input, output } => {
                (input.as_ptr() as u64, output.as_ptr() as u64)
            }
            UserBuffers::InPlace(buf) => (buf.as_ptr() as u64, buf.as_ptr() as u64),
            UserBuffers::Device { input, output, .. } => (input.addr, output.addr),
        };
        let reach = UserReach {
            extent: self.user_extent,
            align: self.user_align,
        };
        Ok(reach.fits(user.lens(), addrs).map_err(ConfigFault::from)?)
    }
}

/// One rank's compiled program with its buffers bound, for one epoch.
pub struct Submission<'a> {
    pub compiled: Arc<Compiled>,
    /// Bound to `Buf::Input` and `Buf::Output`.
    pub user: UserBuffers<'a>,
    /// The call's epoch (see the module docs): the communicator's call number plus one.
    pub epoch: u64,
    /// When set, no task runs before the gate opens; a refused gate ends the submission
    /// with [`DeviceError::Refused`] before it touched anything (see [`crate::gate`]).
    pub gate: Option<Arc<Gate>>,
}

/// Host memory from [`Device::alloc_shared`]: `len` bytes at `ptr`, page aligned, zeroed
/// when allocated, released when dropped (a segment is unmapped here; the peers' mappings
/// go when they drop their allocation of the same turn).
pub struct SharedMemory {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    _keep: Box<dyn Any + Send + Sync>,
}

// SAFETY: the memory is owned through `_keep`; access goes through the raw pointer, whose
// use the holder orders (the framework lends it out as a slice).
unsafe impl Send for SharedMemory {}
// SAFETY: as above: `&SharedMemory` only hands out the pointer and the length.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// `len` bytes at `ptr`, valid while `keep` lives. A backend's constructor.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes of `len` bytes, aligned to 4096 bytes
    /// (or dangling and aligned when `len` is 0), for as long as `keep` is alive.
    pub unsafe fn new(ptr: *mut u8, len: usize, keep: Box<dyn Any + Send + Sync>) -> Self {
        let ptr = std::ptr::NonNull::new(ptr)
            .unwrap_or(std::ptr::NonNull::<[u8; 4096]>::dangling().cast());
        SharedMemory {
            ptr,
            len,
            _keep: keep,
        }
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// A submission in flight.
pub trait Completion: Send {
    /// Wait up to `timeout` for the submission to end: its outcome, or `None` while it
    /// still runs. Once it returned `Some`, no task touches the submission's buffers.
    fn wait(&mut self, timeout: Duration) -> Option<Result<(), DeviceError>>;
}

/// A backend.
///
/// `Any` is a supertrait so that a caller holding `Arc<dyn Device>` can reach the
/// backend's own API when it knows the kind (`device.downcast_ref::<CudaDevice>()`, for the
/// cuda backend's user allocations); every backend is a `'static` type, so it costs
/// implementors nothing.
pub trait Device: Any + Send + Sync + std::fmt::Debug {
    /// Short backend name (`host`, `sim`, ...), as registered.
    fn kind(&self) -> &'static str;

    /// The configuration the device was created with.
    fn config(&self) -> &DeviceConfig;

    /// What the backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Allocate `bytes_per_rank` of scratch on every local rank.
    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError>;

    /// `bytes` of host memory for local rank `rank`'s user buffers, zeroed, aligned to a
    /// page, that the device's peers can reach: on a host device whose peers in other
    /// processes map user buffers ([`ShmJob::user_buffers`]), a shared-memory segment
    /// they map; otherwise this process's heap, which the ranks of this process reach
    /// anyway. A call whose buffers lie in it runs zero-copy where the device allows.
    ///
    /// Collective, like MPI's `MPI_Win_allocate_shared`: every rank of the communicator
    /// allocates, in the same order (the sizes may differ), each from its own thread as
    /// for any collective, because each process maps its peers' `n`-th allocation when
    /// it makes its own, and returns once they mapped its own. A rank that does not
    /// allocate is named in the others' error after the device's timeout. Backends
    /// without host memory for users refuse it ([`ConfigFault::NoSharedMemory`]).
    fn alloc_shared(&self, rank: Rank, bytes: usize) -> Result<SharedMemory, DeviceError> {
        let _ = (rank, bytes);
        Err(ConfigFault::NoSharedMemory { kind: self.kind() }.into())
    }

    /// The device's user memory by address, when its calls may bind accelerator memory
    /// ([`UserBuffers::Device`]); `None` (the default) for a device whose calls bind host
    /// memory only. What an adapter that holds raw pointers (the C ABI) binds through.
    fn user_memory(&self) -> Option<&dyn UserMemory> {
        None
    }

    /// A local rank's resource, for a transport to export, map or register.
    fn resource(&self, rank: Rank, resource: Resource) -> Result<ResourceHandle, DeviceError>;

    /// Compile one rank's program once (see the module docs); refuses a program that
    /// touches a rank this device does not serve, or a slice or notify that does not exist.
    fn compile(&self, request: CompileRequest) -> Result<Arc<Compiled>, DeviceError>;

    /// Start every submission (a group call: one thread drives many ranks); one result
    /// per submission, in order. A submission that cannot start stops the device, which
    /// aborts the others in flight (they would wait for it).
    ///
    /// # Safety
    ///
    /// Each submission's user buffers are borrowed only for this call's lifetime, but the
    /// device touches them until its [`Completion`] reported an outcome. The caller must
    /// wait on every returned completion until it returns `Some` before the borrows end
    /// (before the buffers are used, moved or freed). Dropping or leaking a completion
    /// early is undefined behaviour. [`Device::run`] does this for you.
    unsafe fn submit(
        &self,
        group: Vec<Submission<'_>>,
    ) -> Vec<Result<Box<dyn Completion + '_>, DeviceError>>;

    /// Record that `rank` consumed `epoch` without running a program (count 0, refused),
    /// so peers fenced on it go on.
    fn retire(&self, rank: Rank, epoch: u64) -> Result<(), DeviceError>;

    /// The last epoch `rank` finished.
    fn done_epoch(&self, rank: Rank) -> Result<u64, DeviceError>;

    /// Stop the device (NCCL's `ncclCommAbort`), from any thread: every submission in
    /// flight ends at once with [`DeviceError::Aborted`] carrying `cause`, every later one
    /// is refused, and peers reached through a transport are told, so their waits on
    /// this device's ranks end too. `cause` names the local rank it comes from: its user
    /// asked ([`AbortCause::UserAbort`]), or its call failed before the device ran it
    /// ([`AbortCause::CallFailed`]).
    fn abort(&self, cause: AbortCause);

    /// Why the device stopped, once it did (an abort, a failed submission, or a peer in
    /// another process that failed and told it), whether or not a call met it yet; `None`
    /// while it runs. A backend that cannot tell answers `None`.
    fn stopped(&self) -> Option<AbortCause> {
        None
    }

    /// [`Device::run`] for a group of prepared sequences (graph mode's launches: the same
    /// compiled programs submitted again and again, every rank's steps at once). A backend
    /// may link such a group once and run it by a faster path; the outcome is the same as
    /// [`Device::run`]'s. (The host device links in `run` itself, eager group calls
    /// included: a group of every local rank's small programs runs as one precomputed
    /// order, without signals.)
    fn run_sequence_group(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        self.run(group)
    }

    /// Submit and wait for every submission: the safe way to run.
    fn run(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        let timeout = self.config().exec_timeout;
        // SAFETY: every completion is waited on until it reports an outcome before this
        // returns, so no task touches the borrowed buffers afterwards.
        let started = unsafe { self.submit(group) };
        started
            .into_iter()
            .map(|c| wait_out(&mut *c?, timeout))
            .collect()
    }
}

impl dyn Device {
    /// The backend as its concrete type `T`, or `None` when it is another kind: the way
    /// to a backend's own API from the framework's `Arc<dyn Device>`
    /// (`comm.device().downcast_ref::<CudaDevice>()`).
    pub fn downcast_ref<T: Device>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref::<T>()
    }
}

/// How a group of sequences runs step by step: the `k`-th submission of every sequence
/// together, wave after wave. `sequences[i]` names the sequence entry `i` belongs to (a
/// rank, a graph launch's entry); returns the entries' indices per wave, in order.
pub fn waves(sequences: &[usize]) -> Vec<Vec<usize>> {
    let mut waves: Vec<Vec<usize>> = Vec::new();
    let mut position: std::collections::BTreeMap<usize, usize> = Default::default();
    for (index, &sequence) in sequences.iter().enumerate() {
        let k = position.entry(sequence).or_default();
        if waves.len() <= *k {
            waves.push(Vec::new());
        }
        waves[*k].push(index);
        *k += 1;
    }
    waves
}

/// Run `group` (sequences of several submissions per rank, in epoch order) step by step
/// on `device`: the [`waves`] of its ranks' submissions, one [`Device::run`] each. For a
/// backend that takes whole sequences but cannot run one its own way.
pub fn run_in_waves(
    device: &dyn Device,
    group: Vec<Submission<'_>>,
) -> Vec<Result<(), DeviceError>> {
    let ranks: Vec<usize> = group.iter().map(|s| s.compiled.rank).collect();
    let mut pending: Vec<Option<Submission<'_>>> = group.into_iter().map(Some).collect();
    let mut outcomes: Vec<Option<Result<(), DeviceError>>> =
        (0..pending.len()).map(|_| None).collect();
    for wave in waves(&ranks) {
        let submissions = wave.iter().filter_map(|&i| pending[i].take()).collect();
        for (&index, outcome) in wave.iter().zip(device.run(submissions)) {
            outcomes[index] = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.expect("every submission is in one wave"))
        .collect()
}

/// Wait for `completion` until it reports its outcome, `timeout` at a time.
pub fn wait_out(completion: &mut dyn Completion, timeout: Duration) -> Result<(), DeviceError> {
    loop {
        if let Some(outcome) = completion.wait(timeout) {
            return outcome;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_slice_stays_inside_the_span() {
        let span = DeviceSpan {
            addr: 0x1000,
            len: 256,
        };
        let inner = DeviceSpan {
            addr: 0x1040,
            len: 128,
        };
        assert_eq!(span.slice(64, 128), Some(inner));
        assert_eq!(span.slice(0, 256), Some(span));
        assert_eq!(span.slice(256, 0).map(|s| s.len), Some(0));
        assert_eq!(span.slice(200, 57), None);
        assert_eq!(span.slice(usize::MAX, 2), None);
        let top = DeviceSpan {
            addr: u64::MAX - 1,
            len: usize::MAX,
        };
        assert_eq!(top.slice(8, 1), None, "the address would wrap");
    }

    #[test]
    fn sequences_run_in_waves_of_their_kth_submissions() {
        assert!(waves(&[]).is_empty());
        // Two ranks' three steps, interleaved as a group launch may bring them.
        assert_eq!(
            waves(&[0, 0, 1, 0, 1, 1]),
            vec![vec![0, 2], vec![1, 4], vec![3, 5]]
        );
        // A sequence longer than the others runs its last steps alone.
        assert_eq!(waves(&[3, 3, 3, 7]), vec![vec![0, 3], vec![1], vec![2]]);
    }

    #[test]
    fn a_device_downcasts_to_its_own_kind_only() {
        let device = crate::registry::create("sim", DeviceConfig::all_local(2)).unwrap();
        assert!(device.downcast_ref::<crate::sim::SimDevice>().is_some());
        assert!(device.downcast_ref::<crate::host::HostDevice>().is_none());
    }
}
