//! A device whose users' buffers are accelerator memory, run by the host device through
//! host memory: the cuda backend's ranks in a job of processes.
//!
//! Each call bound to device memory
//! ([`UserBuffers::Device`](crate::UserBuffers::Device)) is staged: what its program may
//! read is copied from the device into host memory, the [`HostDevice`] runs the call
//! there (its programs, its transports to other processes and hosts — shared memory, TCP,
//! RDMA — its fences, watchdog and failure propagation, all unchanged), and once the call
//! succeeded what it wrote is copied back. Calls bound to host slices run as on the host.
//! How bytes cross between the accelerator and the host is the backend's
//! ([`StageCopies`]); nothing else here knows of one.
//!
//! Why this shape: a job of processes needs, for every pair of ranks, a transport, a
//! shared view of signals and an abort that reaches every process. The host device has
//! all of them, tested across processes and hosts; the accelerator's own path between
//! processes (CUDA IPC handles for the CCL buffers and signal words, as NCCL's P2P
//! transport) is faster and would replace this where it applies, but every job of GPU
//! processes runs correctly on this one, on any machine the host transports reach: a
//! correct path first, as NCCL keeps its host-memory paths for what P2P cannot reach.
//! The cost is two copies across the bus per call (in, and back) beside the host
//! collective; the host blocks they use are kept between calls (`stage::StagePool`), so
//! a size seen before neither allocates nor faults pages in again, and the backend may
//! page-lock them once when they are made ([`StageCopies::pin`]: cuda does), so its
//! copies run at the bus's speed.
//!
//! What is copied:
//! - out of place: the input's first `extent.0` bytes in; the output's first `extent.1`
//!   bytes back, and also in beforehand unless the rank's own program writes all of them
//!   (bytes a program leaves alone must come back as they were);
//! - in place: the one buffer's reach in, and back;
//! - where peers reach the rank's buffers (zero-copy among the ranks of one device, which
//!   the ranks of a job of processes never are): whole spans in and back, since what the
//!   peers reach is not the rank's own program's to say.
//!
//! A call that fails copies nothing back (its output is undefined, as NCCL's is); a copy
//! that fails before the call stops the device like any submission that cannot start,
//! so its peers are released rather than left waiting.
//!
//! Sequences are not queued ([`Capabilities::queued_submissions`] is off): a step's input
//! is copied in when it is submitted, so it must not be submitted before the step that
//! writes it copied its output back. Graph mode therefore runs such a device step by
//! step.

mod fake;
mod stage;
#[cfg(test)]
mod tests;

pub use fake::HostAddressed;

use crate::device::{
    Capabilities, CompileRequest, Compiled, Completion, Device, DeviceConfig, DeviceSpan, Resource,
    ResourceHandle, ScratchId, Submission,
};
use crate::error::{AbortCause, ConfigFault, DeviceError};
use crate::host::HostDevice;
use crate::ir::{Buf, Rank, RankProgram};
use crate::user_memory::UserMemory;
use stage::{Stage, StagePool, Staged};
use std::sync::Arc;
use std::time::Duration;

/// How a staged device moves bytes between a local rank's accelerator memory and the
/// host. Both copies are synchronous: they return once the bytes arrived, or with the
/// error. `src` and `dst` have equal lengths.
pub trait StageCopies: Send + Sync {
    /// Copy device memory of local rank `rank` (`src`) into `dst`.
    fn to_host(&self, rank: Rank, src: DeviceSpan, dst: &mut [u8]) -> Result<(), DeviceError>;

    /// Copy `src` into device memory of local rank `rank` (`dst`).
    fn to_device(&self, rank: Rank, src: &[u8], dst: DeviceSpan) -> Result<(), DeviceError>;

    /// Page-lock `block`, a staging block the pool just allocated for local rank `rank`
    /// (whole pages, kept and used again by any local rank until it is freed), so that
    /// copies to and from it run at the bus's speed rather than through the driver's
    /// bounce buffers: what keeps it locked, unlocked before the block is freed, or
    /// `None` when the copies gain nothing from it (memory the accelerator reads as it
    /// is) or it could not be locked (the copies still work, slower).
    fn pin(&self, rank: Rank, block: &mut [u8]) -> Option<Box<dyn HostPin>> {
        let _ = (rank, block);
        None
    }
}

/// What keeps a staging block page-locked ([`StageCopies::pin`]).
pub trait HostPin: Send + Sync {
    /// Unlock the block, which is freed next; `false` when it could not be, and the
    /// block is then never freed (memory the driver may still hold locked must not go
    /// back to the allocator).
    fn unpin(self: Box<Self>) -> bool;
}

/// A device whose calls on device memory run staged through host memory (see the module
/// docs).
pub struct StagedDevice {
    kind: &'static str,
    host: HostDevice,
    copies: Box<dyn StageCopies>,
    /// What [`Device::user_memory`] offers (see [`StagedDevice::with_user_memory`]).
    user_memory: Option<Box<dyn UserMemory>>,
    pool: Arc<StagePool>,
    id: usize,
}

impl std::fmt::Debug for StagedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedDevice")
            .field("kind", &self.kind)
            .field("host", &self.host)
            .finish()
    }
}

/// A program compiled by a [`StagedDevice`]: the host device's (whose `user_extent` says
/// what the program reaches on its rank), and what staging needs.
struct StagedProgram {
    host: Arc<Compiled>,
    /// Copy the output in before the call (see the module docs).
    preload_output: bool,
    /// Peers reach the rank's buffers (zero-copy): copy whole spans in and back.
    whole_buffers: bool,
}

impl StagedProgram {
    /// The staged program behind `compiled`, when the device `device_id` compiled it.
    fn of(compiled: &Compiled, device_id: usize) -> Result<Arc<StagedProgram>, DeviceError> {
        if compiled.device_id != device_id {
            return Err(ConfigFault::ForeignProgram.into());
        }
        compiled
            .backend
            .clone()
            .downcast()
            .map_err(|_| ConfigFault::ForeignProgram.into())
    }
}

impl StagedDevice {
    /// A host device for `config` (calls staged through the CCL buffers: peers in other
    /// processes never map a rank's staging memory), reached by `kind`'s users through
    /// `copies`.
    pub fn new(
        kind: &'static str,
        mut config: DeviceConfig,
        copies: Box<dyn StageCopies>,
    ) -> Result<Self, DeviceError> {
        if let Some(shm) = &mut config.shm {
            shm.user_buffers = false;
        }
        let keep = config.local_ranks.len().saturating_mul(2);
        Ok(StagedDevice {
            kind,
            host: HostDevice::new(config)?,
            copies,
            user_memory: None,
            pool: StagePool::new(keep),
            id: crate::device::next_device_id(),
        })
    }

    /// The device, offering `memory` as its user memory by address
    /// ([`Device::user_memory`]: what the C ABI binds raw pointers through). A device
    /// whose facade offers its own (the cuda backend's) leaves it out.
    pub fn with_user_memory(mut self, memory: Box<dyn UserMemory>) -> Self {
        self.user_memory = Some(memory);
        self
    }

    /// Stage every submission; one that cannot be staged stops the device (its peers
    /// would wait for it) and takes its error in its place.
    fn stage_group<'a>(
        &self,
        group: Vec<Submission<'a>>,
    ) -> (Vec<Submission<'a>>, Vec<Result<Option<Stage>, DeviceError>>) {
        let mut host = Vec::with_capacity(group.len());
        let mut stages = Vec::with_capacity(group.len());
        for s in group {
            let rank = s.compiled.rank;
            match stage::stage(&*self.copies, &self.pool, self.id, s) {
                Ok(Staged { host: h, stage }) => {
                    host.push(h);
                    stages.push(Ok(stage));
                }
                Err(err) => {
                    if let Some(cause) = AbortCause::failed_start(rank, &err) {
                        self.host.abort(cause);
                    }
                    stages.push(Err(err));
                }
            }
        }
        (host, stages)
    }
}

/// Whether the program's own writes cover the first `extent` bytes of its Output.
fn writes_whole_output(program: &RankProgram, extent: usize) -> bool {
    let mut spans: Vec<(usize, usize)> = program
        .streams
        .iter()
        .flat_map(|s| &s.tasks)
        .flat_map(|t| t.writes())
        .filter(|w| w.rank == program.rank && w.buf == Buf::Output)
        .map(|w| (w.offset, w.offset.saturating_add(w.len)))
        .collect();
    spans.sort_unstable();
    let mut covered = 0;
    for (start, end) in spans {
        if start > covered {
            break;
        }
        covered = covered.max(end);
    }
    covered >= extent
}

impl Device for StagedDevice {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn config(&self) -> &DeviceConfig {
        self.host.config()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            queued_submissions: false,
            whole_sequences: false,
            ..self.host.capabilities()
        }
    }

    fn user_memory(&self) -> Option<&dyn UserMemory> {
        self.user_memory.as_deref()
    }

    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError> {
        self.host.alloc_scratch(bytes_per_rank)
    }

    fn resource(&self, rank: Rank, resource: Resource) -> Result<ResourceHandle, DeviceError> {
        self.host.resource(rank, resource)
    }

    fn compile(&self, request: CompileRequest) -> Result<Arc<Compiled>, DeviceError> {
        let program = request.program.clone();
        let peers_touch_buffers = request.exit_fence;
        let host = self.host.compile(request)?;
        let extent = host.user_extent;
        let preload_output =
            !host.in_place && extent.1 > 0 && !writes_whole_output(&program, extent.1);
        Ok(Arc::new(Compiled {
            rank: host.rank,
            peers: host.peers.clone(),
            in_place: host.in_place,
            exit_fence: host.exit_fence,
            user_extent: host.user_extent,
            user_align: host.user_align,
            tasks: host.tasks,
            device_id: self.id,
            backend: Arc::new(StagedProgram {
                host,
                preload_output,
                whole_buffers: peers_touch_buffers,
            }),
        }))
    }

    unsafe fn submit(
        &self,
        group: Vec<Submission<'_>>,
    ) -> Vec<Result<Box<dyn Completion + '_>, DeviceError>> {
        let (host, stages) = self.stage_group(group);
        // SAFETY: each host submission's staging memory moves into its completion, which
        // drops the host completion first; the caller's promise covers the rest.
        let mut started = unsafe { self.host.submit(host) }.into_iter();
        stages
            .into_iter()
            .map(|stage| {
                let stage = stage?;
                let inner = started.next().expect("one result per staged submission")?;
                Ok(Box::new(StagedCompletion {
                    inner,
                    stage,
                    copies: &*self.copies,
                    outcome: None,
                }) as Box<dyn Completion + '_>)
            })
            .collect()
    }

    /// Staged, then the host device's `run` (which links what it can), then copied back.
    fn run(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        let (host, stages) = self.stage_group(group);
        let mut ran = self.host.run(host).into_iter();
        stages
            .into_iter()
            .map(|stage| {
                let stage = stage?;
                ran.next().expect("one result per staged submission")?;
                stage.map_or(Ok(()), |s| s.copy_back(&*self.copies))
            })
            .collect()
    }

    fn retire(&self, rank: Rank, epoch: u64) -> Result<(), DeviceError> {
        self.host.retire(rank, epoch)
    }

    fn done_epoch(&self, rank: Rank) -> Result<u64, DeviceError> {
        self.host.done_epoch(rank)
    }

    fn abort(&self, cause: AbortCause) {
        self.host.abort(cause);
    }

    fn stopped(&self) -> Option<AbortCause> {
        self.host.stopped()
    }
}

/// A staged submission in flight: the host device's completion, then the copy back.
struct StagedCompletion<'a> {
    /// Declared before `stage`, so dropped first: its tasks end before the staging
    /// memory they use is freed.
    inner: Box<dyn Completion + 'a>,
    stage: Option<Stage>,
    copies: &'a dyn StageCopies,
    outcome: Option<Result<(), DeviceError>>,
}

impl Completion for StagedCompletion<'_> {
    fn wait(&mut self, timeout: Duration) -> Option<Result<(), DeviceError>> {
        if let Some(outcome) = &self.outcome {
            return Some(outcome.clone());
        }
        let outcome = self.inner.wait(timeout)?.and_then(|()| {
            self.stage
                .as_ref()
                .map_or(Ok(()), |s| s.copy_back(self.copies))
        });
        self.outcome = Some(outcome.clone());
        Some(outcome)
    }
}
