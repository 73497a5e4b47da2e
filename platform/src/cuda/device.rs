//! The one-process engine: its GPUs, per-rank memory and streams, and its [`Device`]
//! implementation.

use super::driver::{self, cu, Gpu};
use super::group::{Arrival, GpuGroup};
use super::launch::{CudaCompletion, Launch};
use super::memory::{DevAlloc, Mapped, RankMemory, MAX_STREAMS};
use super::CudaError;
use crate::device::{
    Capabilities, CompileRequest, Compiled, Completion, Device, DeviceConfig, MemoryKind, Resource,
    ResourceHandle, ScratchId, Submission,
};
use crate::error::{AbortCause, DeviceError, SliceFault};
use crate::ir::{Buf, Rank};
use crate::notify::NotifyLayout;
use cudarc::driver::sys::{self, CUstream};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// CUDA devices on this machine (an error when there is no driver).
pub fn gpu_count() -> Result<usize, CudaError> {
    driver::init()
}

/// The ordinal of the CUDA device of the context current on the calling thread, or
/// `None` when no context is current there. It stands for NCCL's `cudaGetDevice` (what
/// `ncclCommInitRank` takes): with a CUDA 12 runtime, `cudaSetDevice` makes the device's
/// primary context current, so a caller that chose a device is found. A caller that
/// never touched CUDA on the thread has none current (`None`), and one that made its own
/// context current is found on that context's device.
pub fn current_gpu() -> Result<Option<usize>, CudaError> {
    let count = driver::init()?;
    let mut context = std::ptr::null_mut();
    cu!(cuCtxGetCurrent(&mut context))?;
    if context.is_null() {
        return Ok(None);
    }
    let mut device = 0;
    cu!(cuCtxGetDevice(&mut device))?;
    // A device handle, which the driver keeps apart from the ordinal.
    for ordinal in 0..count {
        let mut handle = 0;
        let Ok(index) = i32::try_from(ordinal) else {
            break;
        };
        cu!(cuDeviceGet(&mut handle, index))?;
        if handle == device {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}

/// The device's state, shared with its launches.
pub(crate) struct Shared {
    pub config: DeviceConfig,
    pub layout: NotifyLayout,
    pub slots: Vec<Option<usize>>,
    /// Per local slot.
    pub ranks: Vec<RankMemory>,
    /// Per GPU: its ranks and launches.
    pub groups: Vec<GpuGroup>,
    /// Per local slot: its index in `groups`.
    pub group_index: Vec<usize>,
    /// Per local slot: the stream that copies a host binding's output back.
    pub stage_streams: Vec<CUstream>,
    /// Per scratch id, per local slot.
    pub scratch: Mutex<Vec<Vec<DevAlloc>>>,
    /// Per local slot: its epoch word, its fault word, then a progress word per stream;
    /// after them the abort word.
    pub mapped: Mapped,
    /// Per local slot: the last epoch it finished, as the host saw it.
    pub done: Vec<AtomicU64>,
    /// Per local slot: the fence peers of its previous submission.
    pub prev_peers: Vec<Mutex<Vec<usize>>>,
    /// Per local slot: a submission is in flight.
    pub busy: Vec<AtomicBool>,
    /// Set once the device stopped: every later submission is refused with it.
    pub failure: Mutex<Option<AbortCause>>,
    /// Whether graph mode's launches replay as CUDA graphs, and how often they did.
    pub graphs: GraphUse,
    pub id: usize,
}

// SAFETY: the driver handles in `Shared` (streams, events) may be used from any thread
// with their context current; their mutable parts are behind locks.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// What graph mode's launches did: counts, and why the driver refused a graph, which
/// turns graphs off for good (see [`Shared::graphs_on`]).
#[derive(Debug, Default)]
pub(crate) struct GraphUse {
    /// Graphs built.
    pub built: AtomicU64,
    /// Launches replayed as graphs.
    pub replays: AtomicU64,
    /// Why the driver refused to build a graph, which turned graphs off.
    pub refused: Mutex<Option<String>>,
}

/// What graph mode's launches did on a cuda device ([`super::CudaDevice::graph_counts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphCounts {
    /// Whether launches replay as CUDA graphs (`OXCCL_CUDA_GRAPHS`, and the driver built
    /// every graph asked of it).
    pub on: bool,
    /// CUDA graphs built (one per GPU and sequence of programs, kept for its replays).
    pub built: u64,
    /// Graph launches that ran as CUDA graphs.
    pub replays: u64,
    /// Why the driver refused to build a graph (which turned graphs off), if it did.
    pub refused: Option<String>,
}

/// Words per local slot in the mapped block: the epoch, the fault, then progress per
/// stream.
const MAPPED_PER_RANK: usize = 2 + MAX_STREAMS;

impl Shared {
    pub fn slot(&self, rank: Rank) -> Result<usize, DeviceError> {
        self.slots
            .get(rank)
            .copied()
            .flatten()
            .ok_or_else(|| self.config.not_served(rank))
    }

    /// The mapped index of `slot`'s epoch word.
    pub fn epoch_word(&self, slot: usize) -> usize {
        slot * MAPPED_PER_RANK
    }

    /// The mapped index of `slot`'s fault word: a Post that found its word set writes
    /// `stream << 24 | task + 1` there.
    pub fn fault_word(&self, slot: usize) -> usize {
        slot * MAPPED_PER_RANK + 1
    }

    /// The mapped index of `slot`'s progress word for stream `s`.
    pub fn progress_word(&self, slot: usize, s: usize) -> usize {
        slot * MAPPED_PER_RANK + 2 + s
    }

    /// The mapped index of the abort word (nonzero once the device stopped).
    pub fn abort_word(&self) -> usize {
        self.ranks.len() * MAPPED_PER_RANK
    }

    /// Whether peers reach each other's user buffers (zero-copy): every rank of the
    /// communicator is served here, on one GPU, so each call's ranks meet in one launch
    /// that knows all their buffers (see `compile`).
    pub fn peer_user_buffers(&self) -> bool {
        self.groups.len() == 1 && self.slots.iter().all(Option::is_some)
    }

    /// The group of `slot`'s GPU.
    pub fn group_of(&self, slot: usize) -> &GpuGroup {
        &self.groups[self.group_index[slot]]
    }

    /// Device address and length of a local rank's CCL buffer or scratch.
    pub fn region(
        &self,
        slot: usize,
        buf: Buf,
        scratch: Option<ScratchId>,
    ) -> Result<(sys::CUdeviceptr, usize), SliceFault> {
        let memory = &self.ranks[slot];
        match buf {
            Buf::CclIn => Ok((memory.ccl_in.ptr, memory.ccl_in.len)),
            Buf::CclOut => Ok((memory.ccl_out.ptr, memory.ccl_out.len)),
            Buf::Scratch => {
                let id = scratch.ok_or(SliceFault::NoScratch)?.0;
                let all = self.scratch.lock();
                let a = all
                    .get(id)
                    .and_then(|per_slot| per_slot.get(slot))
                    .ok_or(SliceFault::NoSuchScratch { id })?;
                Ok((a.ptr, a.len))
            }
            Buf::Input | Buf::Output => unreachable!("user buffers are bound at submit"),
        }
    }

    /// Stop the device for `cause` (the first cause stays): every later submission is
    /// refused, and the abort word releases every wait of the kernels running, so their
    /// waiters report the abort. What the kernels leave in the buffers is meaningless, as
    /// an aborted NCCL call's is.
    pub fn stop(&self, cause: AbortCause) {
        self.failure.lock().get_or_insert(cause);
        self.mapped.store(self.abort_word(), 1);
    }

    pub fn stopped(&self) -> Option<AbortCause> {
        self.failure.lock().clone()
    }

    /// Whether graph mode's launches replay as CUDA graphs: asked for
    /// (`OXCCL_CUDA_GRAPHS`), and the driver never refused to build one.
    pub fn graphs_on(&self) -> bool {
        self.config.cuda_graphs && self.graphs.refused.lock().is_none()
    }
}

/// The cuda backend's engine when every rank of the communicator is in this process
/// (see [`super::CudaDevice`]).
pub(super) struct OneProcess {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for OneProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gpus: Vec<_> = self.shared.ranks.iter().map(|m| m.gpu.ordinal).collect();
        f.debug_struct("OneProcess")
            .field("ranks", &self.shared.config.ranks)
            .field("gpus", &gpus)
            .finish()
    }
}

impl OneProcess {
    /// Open the GPUs the local ranks are placed on and allocate every rank's memory.
    pub fn new(config: DeviceConfig) -> Result<Self, DeviceError> {
        let slots = config.local_slots()?;
        let count = driver::init()?;
        let ordinals = super::placement::placement(&config, count)?;
        let mut gpus: Vec<Arc<Gpu>> = Vec::new();
        for &ordinal in &ordinals {
            if !gpus.iter().any(|g| g.ordinal == ordinal) {
                gpus.push(Arc::new(Gpu::open(ordinal)?));
            }
        }
        for a in &gpus {
            for b in &gpus {
                a.reach(b)?;
            }
        }
        let gpu_of = |o: usize| {
            gpus.iter()
                .find(|g| g.ordinal == o)
                .cloned()
                .expect("opened")
        };
        let layout = config.layout();
        let link_words = layout.local_base() as usize;
        let ranks = ordinals
            .iter()
            .map(|&o| RankMemory::new(&gpu_of(o), config.ccl_bytes, link_words))
            .collect::<Result<Vec<_>, _>>()?;
        let local = ranks.len();
        let words = local
            .checked_mul(MAPPED_PER_RANK)
            .and_then(|w| w.checked_add(1))
            .ok_or(crate::error::ConfigFault::TooLarge {
                what: "epoch and progress words",
            })?;
        let mapped = Mapped::new(&gpus[0], words)?;
        let mut groups = Vec::with_capacity(gpus.len());
        let mut group_index = vec![0; local];
        for (g, gpu) in gpus.iter().enumerate() {
            let slots: Vec<usize> = (0..local).filter(|&s| ordinals[s] == gpu.ordinal).collect();
            for &slot in &slots {
                group_index[slot] = g;
            }
            groups.push(GpuGroup::new(gpu.clone(), slots)?);
        }
        let mut stage_streams = Vec::with_capacity(local);
        for memory in &ranks {
            let _current = memory.gpu.bind()?;
            stage_streams.push(driver::new_stream()?);
        }
        let shared = Arc::new(Shared {
            layout,
            slots,
            done: (0..local).map(|_| AtomicU64::new(0)).collect(),
            prev_peers: (0..local).map(|_| Mutex::new(Vec::new())).collect(),
            busy: (0..local).map(|_| AtomicBool::new(false)).collect(),
            ranks,
            groups,
            group_index,
            stage_streams,
            scratch: Mutex::new(Vec::new()),
            mapped,
            failure: Mutex::new(None),
            graphs: GraphUse::default(),
            config,
            id: crate::device::next_device_id(),
        });
        Ok(OneProcess { shared })
    }

    /// What graph mode's launches did on this device: whether they replay as CUDA graphs,
    /// how many graphs were built and how many launches replayed one.
    pub fn graph_counts(&self) -> GraphCounts {
        let graphs = &self.shared.graphs;
        GraphCounts {
            on: self.shared.graphs_on(),
            built: graphs.built.load(Ordering::Relaxed),
            replays: graphs.replays.load(Ordering::Relaxed),
            refused: graphs.refused.lock().clone(),
        }
    }

    /// The CUDA device ordinal local rank `rank` runs on.
    pub fn ordinal_of(&self, rank: Rank) -> Result<usize, DeviceError> {
        let slot = self.shared.slot(rank)?;
        Ok(self.shared.ranks[slot].gpu.ordinal)
    }

    fn start_group(&self, group: Vec<Submission<'_>>) -> Vec<Result<CudaCompletion, DeviceError>> {
        let mut results = Vec::with_capacity(group.len());
        for s in group {
            let rank = s.compiled.rank;
            let started = Launch::start(&self.shared, s);
            // Its peers would wait for it: stop the device, which releases them.
            if let Some(cause) = started
                .as_ref()
                .err()
                .and_then(|e| AbortCause::failed_start(rank, e))
            {
                self.shared.stop(cause);
            }
            results.push(started);
        }
        results
    }
}

impl Device for OneProcess {
    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn config(&self) -> &DeviceConfig {
        &self.shared.config
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Only where one launch holds every rank's call (see `compile`).
            peer_user_buffers: self.shared.peer_user_buffers(),
            executes: true,
            queued_submissions: false,
            // As CUDA graphs (`replay`), else step by step.
            whole_sequences: true,
            memory: MemoryKind::Device,
        }
    }

    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError> {
        let per_slot = self
            .shared
            .ranks
            .iter()
            .map(|m| DevAlloc::zeroed(&m.gpu, bytes_per_rank, "scratch"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut all = self.shared.scratch.lock();
        all.push(per_slot);
        Ok(ScratchId(all.len() - 1))
    }

    fn resource(&self, rank: Rank, resource: Resource) -> Result<ResourceHandle, DeviceError> {
        let slot = self.shared.slot(rank)?;
        let memory = &self.shared.ranks[slot];
        let (addr, len) = match resource {
            Resource::CclIn => (memory.ccl_in.ptr, memory.ccl_in.len),
            Resource::CclOut => (memory.ccl_out.ptr, memory.ccl_out.len),
            Resource::Scratch(id) => {
                self.shared
                    .region(slot, Buf::Scratch, Some(id))
                    .map_err(|fault| DeviceError::InvalidSlice {
                        at: crate::error::TaskLocation {
                            rank,
                            stream: 0,
                            task: 0,
                        },
                        slice: crate::ir::Slice::new(rank, Buf::Scratch, 0, 0),
                        fault,
                    })?
            }
            Resource::Signals => (
                memory.signals.ptr,
                self.shared.layout.local_base() as usize * 4,
            ),
        };
        Ok(ResourceHandle {
            rank,
            resource,
            memory: MemoryKind::Device,
            addr: addr as usize,
            len,
        })
    }

    fn compile(&self, request: CompileRequest) -> Result<Arc<Compiled>, DeviceError> {
        super::compile::compile(&self.shared, request)
    }

    unsafe fn submit(
        &self,
        group: Vec<Submission<'_>>,
    ) -> Vec<Result<Box<dyn Completion + '_>, DeviceError>> {
        self.start_group(group)
            .into_iter()
            .map(|c| c.map(|c| Box::new(c) as Box<dyn Completion>))
            .collect()
    }

    /// Graph mode's launches: as CUDA graphs where the launch allows it (see `replay`),
    /// else step by step.
    fn run_sequence_group(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        match super::replay::run_sequences(&self.shared, group) {
            Ok(outcomes) => outcomes,
            Err(group) => crate::device::run_in_waves(self, group),
        }
    }

    fn retire(&self, rank: Rank, epoch: u64) -> Result<(), DeviceError> {
        let shared = &self.shared;
        let slot = shared.slot(rank)?;
        shared.done[slot].fetch_max(epoch, Ordering::AcqRel);
        shared.mapped.store(shared.epoch_word(slot), epoch as u32);
        // The other ranks of the GPU may be waiting for this one to launch the call.
        shared
            .group_of(slot)
            .arrive(shared, slot, epoch, Arrival::Nothing);
        Ok(())
    }

    fn done_epoch(&self, rank: Rank) -> Result<u64, DeviceError> {
        let slot = self.shared.slot(rank)?;
        Ok(self.shared.done[slot].load(Ordering::Acquire))
    }

    fn abort(&self, cause: AbortCause) {
        self.shared.stop(cause);
    }
}

impl Drop for Shared {
    /// Nothing of the device may still run when its memory goes: the fields drop after
    /// this, `ranks` (frees ordered on the allocation stream, not on the kernels' streams)
    /// before `groups`. A kernel normally finished before its last completion let go of
    /// the device, but one whose done event failed to record or to query may not have:
    /// the abort word releases it (a kernel spinning on a peer that never came would
    /// otherwise hold the synchronize forever), then every stream is drained.
    fn drop(&mut self) {
        self.mapped.store(self.abort_word(), 1);
        for group in &self.groups {
            group.drain();
        }
        for (memory, &stream) in self.ranks.iter().zip(&self.stage_streams) {
            if let Ok(_current) = memory.gpu.bind() {
                let _ = cu!(cuStreamSynchronize(stream));
                let _ = cu!(cuStreamDestroy_v2(stream));
            }
        }
    }
}

/// How long a waiter sleeps between polls of an event, at most.
pub(crate) const MAX_POLL_SLEEP: Duration = Duration::from_millis(1);

/// A waiter's pause after `waited`, with `left` before its deadline: a yield at first
/// (a short wait ends within a spin), then a sixteenth of the time waited, at most
/// [`MAX_POLL_SLEEP`] (so an end is seen at most that late) and no longer than `left`.
pub(crate) fn pause(waited: Duration, left: Duration) {
    if waited < Duration::from_micros(200) {
        std::thread::yield_now();
    } else {
        std::thread::sleep((waited / 16).min(MAX_POLL_SLEEP).min(left));
    }
}
