//! The host device: ranks are threads of this process, memory is host memory.
//!
//! A small pool of worker threads (one per core unless `host_threads` says otherwise) runs
//! every stream of every local rank, as a device's scheduler would: a stream blocked on a
//! Wait holds no thread, a Post makes the waiting stream runnable again, and big Copy and
//! Reduce tasks are split across idle workers. User buffers are registered for the
//! duration of each submission, so peers can read and write them directly (zero-copy).
//!
//! Small launches (at most `compile::INLINE_BYTES` moved) never wake a worker: the
//! submitting thread queues their streams quietly and runs them itself while it waits
//! (see `pool`). On a machine with fewer cores than ranks, a futex wake and a context
//! switch cost more than a 1 KiB collective's whole work.
//!
//! Files: `memory` (buffers and user-buffer registry), `compile` (programs resolved and
//! checked once), `launch` (a submission: gate, fences, streams, notifies, timeouts),
//! `fence` (per-rank `done_epoch`), `exec` (Copy/Reduce), `pool` (workers). The signal
//! banks are [`crate::signal`]'s.

pub mod calibration;
mod compile;
pub use compile::INLINE_BYTES;
pub use exec::{traffic_bytes, SPLIT_BYTES};
mod exec;
mod fence;
mod launch;
mod memory;
mod pool;
mod rdma;
mod serial;
mod shm;
mod tcp;

use crate::device::{
    Capabilities, CompileRequest, Compiled, Completion, Device, DeviceConfig, MemoryKind, Resource,
    ResourceHandle, ScratchId, SharedMemory, Submission, UserBuffers,
};
use crate::error::{AbortCause, ConfigFault, DeviceError};
use crate::ir::Rank;
use crate::signal::SignalBank;
use compile::HostProgram;
use launch::{Launch, Shared};
use memory::{Memory, Region, UserRegions};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

crate::register_backend!(
    "host",
    "threads of this process on CPU cores, host memory",
    crate::registry::Memory::SharedBus,
    |config| Ok(Arc::new(HostDevice::new(config)?))
);

/// The default backend: collectives between threads of one process on CPU cores.
pub struct HostDevice {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDevice")
            .field("ranks", &self.shared.config.ranks)
            .field("local_ranks", &self.shared.config.local_ranks.len())
            .field("ccl_bytes", &self.shared.config.ccl_bytes)
            .field("threads", &self.shared.pool.threads())
            .finish()
    }
}

impl HostDevice {
    /// Create a host device for `config.local_ranks`, with their CCL buffers, signal
    /// banks and the workers.
    pub fn new(config: DeviceConfig) -> Result<Self, DeviceError> {
        let slots = config.local_slots()?;
        let threads = match config.host_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let pool = pool::WorkerPool::new(threads).map_err(|e| ConfigFault::Threads {
            threads,
            source: Arc::new(e),
        })?;
        let layout = config.layout();
        let local = config.local_ranks.len();
        let link_words = layout.local_base() as usize;
        let links = match &config.shm {
            Some(job) => Some(Arc::new(shm::ShmLinks::open(&config, job, link_words)?)),
            None => None,
        };
        let tcp = match &config.tcp {
            Some(job) => Some(Arc::new(tcp::TcpLinks::new(&config, job, link_words)?)),
            None => None,
        };
        let (memory, banks) = match &links {
            Some(links) => (
                Memory::in_blocks(&links.own),
                links
                    .own
                    .iter()
                    .map(|b| SignalBank::with_external_link(b.external_states()))
                    .collect(),
            ),
            None => (
                Memory::new(local, config.ccl_bytes)?,
                (0..local).map(|_| SignalBank::new(link_words)).collect(),
            ),
        };
        // Fence slots: the local ranks, then a proxy per peer reached through a transport.
        let mut fence_ranks = config.local_ranks.clone();
        fence_ranks.extend(links.iter().flat_map(|l| l.peer_ranks()));
        fence_ranks.extend(tcp.iter().flat_map(|t| t.job.peer_ranks()));
        let mut fence_of = vec![None; config.ranks];
        for (slot, &rank) in fence_ranks.iter().enumerate() {
            fence_of[rank] = Some(slot);
        }
        // A peer whose frames this device holds when they come early may lag two epochs
        // at a launch's entry (see `tcp::early`); every other fence slot one.
        let held =
            |slot: usize, rank| slot >= local && tcp.as_ref().is_some_and(|t| t.frames_from(rank));
        let fence_lags = fence_ranks
            .iter()
            .enumerate()
            .map(|(slot, &rank)| if held(slot, rank) { 2 } else { 1 })
            .collect();
        let shared = Arc::new(Shared {
            memory,
            banks,
            fences: fence_ranks.iter().map(|_| Default::default()).collect(),
            fence_ranks,
            fence_lags,
            fence_of,
            shm: links.clone(),
            tcp: tcp.clone(),
            pool,
            running: Mutex::new(Default::default()),
            stopped: parking_lot::Condvar::new(),
            schedules: Default::default(),
            slots,
            layout,
            config,
            id: crate::device::next_device_id(),
        });
        // From here a failure drops the device, which tells its peers (Drop).
        let device = HostDevice { shared };
        if let Some(links) = links {
            shm::start_service(&device.shared, links).map_err(|e| ConfigFault::Threads {
                threads: 1,
                source: Arc::new(e),
            })?;
        }
        if let Some(tcp) = tcp {
            // Connections are opened by the compiles that need them (see `tcp`).
            tcp::receiver::start(&device.shared, tcp.clone())?;
        }
        Ok(device)
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.shared.pool.threads()
    }

    /// The TCP peers local slot `slot` has connected to (connections are lazy).
    #[cfg(test)]
    pub(crate) fn tcp_connected(&self, slot: usize) -> Vec<Rank> {
        self.shared
            .tcp
            .as_ref()
            .map_or_else(Vec::new, |tcp| tcp.connected(slot))
    }

    /// Validate a submission, register its user buffers and start its launch (gated,
    /// fenced or at once).
    fn start(&self, s: Submission<'_>) -> Result<HostCompletion, DeviceError> {
        let gate = s.gate.clone();
        let completion = self.admit(s)?;
        match gate {
            Some(gate) => {
                let gated = completion.launch.clone();
                gate.when_decided(Box::new(move |outcome| gated.gate_decided(outcome)));
            }
            None => completion.launch.pass_entry_fence(0),
        }
        Ok(completion)
    }

    /// The schedule that runs `group` serially (see [`serial`]), when it can: every
    /// submission is this device's, bound to host memory that fits, past its gate, and
    /// every local rank finished the epoch before the group's.
    fn linked(&self, group: &[Submission<'_>]) -> Option<Arc<serial::Schedule>> {
        let shared = &self.shared;
        // Every local rank is in every epoch of a linked group: a smaller group (a rank's
        // own thread's call) is not looked up, so rank threads do not meet on the cache.
        let local = shared.config.local_ranks.len();
        if shared.shm.is_some() || shared.tcp.is_some() || group.len() < local {
            return None;
        }
        let first = group.iter().map(|s| s.epoch).min()?;
        let mut parts = Vec::with_capacity(group.len());
        for s in group {
            let open = s
                .gate
                .as_ref()
                .is_none_or(|g| matches!(g.outcome(), Some(Ok(()))));
            let fits = s.compiled.device_id == shared.id
                && !s.user.is_device()
                && s.compiled.check_binding(&s.user).is_ok();
            if !open || !fits {
                return None;
            }
            let program = s.compiled.backend.downcast_ref::<HostProgram>()?;
            parts.push((&s.compiled, program, s.epoch - first));
        }
        let previous = first.checked_sub(1)?;
        if shared.fences[..local].iter().any(|f| f.done() != previous) {
            return None;
        }
        shared.schedules.of(&parts, local)
    }

    /// Run `group` through the scheduler: submit, then run queued jobs on this thread
    /// until every launch of the group is done (a small group never wakes a worker), then
    /// collect the outcomes.
    fn run_scheduled(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        let timeout = self.shared.config.exec_timeout;
        let pool = &self.shared.pool;
        let poller = shm::Poller::start(&self.shared);
        let started = pool.quiet(|| self.start_group(group));
        // Launches before `first_busy` are done (or never started): each is asked once
        // more only until it is, not once per job run.
        let mut first_busy = 0;
        let mut busy = || {
            while started
                .get(first_busy)
                .is_some_and(|c| c.as_ref().map_or(true, |c| c.launch.is_done()))
            {
                first_busy += 1;
            }
            first_busy < started.len()
        };
        let small = started.iter().flatten().all(|c| c.launch.program.small());
        pool.drain(&mut busy);
        // Polling, this thread runs what the peers wake: quietly, as it drains (a worker
        // woken for a stream this thread takes first is a context switch for nothing).
        // With TCP peers, one loop looks at both transports on every turn: polling shared
        // memory first and TCP after would leave the peers' posts of the other unseen
        // (posts to a polled device ring no doorbell) until the first loop gave up.
        pool.quiet(|| match (&poller, self.shared.tcp.is_some()) {
            (shm, true) => tcp::receiver::poll_while(&self.shared, small, shm.as_ref(), &mut busy),
            (Some(poller), false) => poller.poll_while(&mut busy),
            (None, false) => {}
        });
        // Peers ring the doorbell again before this thread may sleep in `wait_out`.
        drop(poller);
        pool.kick();
        started
            .into_iter()
            .map(|c| crate::device::wait_out(&mut c?, timeout))
            .collect()
    }

    /// Replay a linked `group` by the tasks `schedule` keeps bound with these buffers
    /// ([`serial::Schedule::replay`]); `None` when it must be bound (or the device has
    /// stopped: the serial run reports why). A stop that arrives while it runs fails
    /// every submission, as a serial run's launches would have been aborted.
    fn replay(
        &self,
        group: &[Submission<'_>],
        schedule: &serial::Schedule,
    ) -> Option<Vec<Result<(), DeviceError>>> {
        if self.shared.failure().is_some() {
            return None;
        }
        let mut replayed = Vec::with_capacity(group.len());
        for s in group {
            let program = s.compiled.backend.downcast_ref::<HostProgram>()?;
            let key = serial::bindings_of_user(&s.user);
            replayed.push((program.slot, s.epoch, key));
        }
        if !schedule.replay(&self.shared, &replayed) {
            return None;
        }
        Some(match self.shared.failure() {
            None => group.iter().map(|_| Ok(())).collect(),
            Some(cause) => group
                .iter()
                .map(|s| {
                    Err(DeviceError::Aborted {
                        rank: s.compiled.rank,
                        cause: cause.clone(),
                    })
                })
                .collect(),
        })
    }

    /// Run `group` by `schedule` on this thread (see [`serial`]).
    fn run_linked(
        &self,
        group: Vec<Submission<'_>>,
        schedule: &serial::Schedule,
    ) -> Vec<Result<(), DeviceError>> {
        let timeout = self.shared.config.exec_timeout;
        let ranks: Vec<Rank> = group.iter().map(|s| s.compiled.rank).collect();
        let admitted: Vec<Result<HostCompletion, DeviceError>> =
            group.into_iter().map(|s| self.admit_as(s, false)).collect();
        let refused = ranks
            .iter()
            .zip(&admitted)
            .find_map(|(&rank, a)| Some((rank, a.as_ref().err()?)));
        if let Some((rank, err)) = refused {
            // Only a stopped device refuses a submission `linked` accepted: the launches
            // admitted end as aborted, none of their tasks having run.
            let cause = AbortCause::PeerFailed {
                rank,
                error: Arc::new(err.clone()),
            };
            self.shared.stop(cause, None);
        } else {
            let launches: Vec<Arc<Launch>> = admitted
                .iter()
                .flatten()
                .map(|c| c.launch.clone())
                .collect();
            let started: Vec<bool> = launches.iter().map(|l| l.start_serially()).collect();
            if started.iter().all(|&s| s) {
                serial::run(schedule, &launches);
            } else {
                // Only a stop cancels an admitted launch: the others end aborted too,
                // none of their tasks having run.
                let cause = self.shared.failure();
                let ending: Vec<&Arc<Launch>> = launches
                    .iter()
                    .zip(started)
                    .filter_map(|(launch, started)| started.then_some(launch))
                    .collect();
                for launch in &ending {
                    if let Some(cause) = cause.clone() {
                        let rank = launch.rank();
                        launch.abort(DeviceError::Aborted { rank, cause });
                    }
                }
                Launch::end_serially(&ending);
            }
        }
        // Every launch ended on this thread (serial runs pass their exit fences at once):
        // read the outcomes without waiting, unless one did not.
        admitted
            .into_iter()
            .map(|c| match c {
                Ok(c) if c.launch.is_done() => c.launch.result(),
                c => crate::device::wait_out(&mut c?, timeout),
            })
            .collect()
    }

    /// Validate a submission, register its user buffers and create its launch, not
    /// started: waiting for its gate (when it has one) or its entry fence.
    fn admit(&self, s: Submission<'_>) -> Result<HostCompletion, DeviceError> {
        self.admit_as(s, true)
    }

    /// [`HostDevice::admit`]; `registered`: publish the user buffers in the registry for
    /// peers' tasks. A serial run (see [`serial`]) hands its tasks the run's buffers
    /// itself and ends every launch before it returns, so it does not.
    fn admit_as(&self, s: Submission<'_>, registered: bool) -> Result<HostCompletion, DeviceError> {
        let compiled = s.compiled;
        if compiled.device_id != self.shared.id {
            return Err(ConfigFault::ForeignProgram.into());
        }
        let program: Arc<HostProgram> = compiled
            .backend
            .clone()
            .downcast()
            .map_err(|_| DeviceError::from(ConfigFault::ForeignProgram))?;
        if s.user.is_device() {
            return Err(ConfigFault::DeviceMemory { kind: "host" }.into());
        }
        compiled.check_binding(&s.user)?;
        let rank = compiled.rank;
        let slot = program.slot;
        let regions = user_regions(s.user, s.epoch);
        if let Some(shm) = self.shared.shm_mapping_user(&compiled) {
            shm.check_shared(slot, rank, &regions)?;
        }
        // The registration lives until the completion unregisters it, which waits for
        // every task (local or a peer's) still using these buffers; the caller of the
        // unsafe `submit` keeps the borrow alive until then.
        let registration = match registered {
            true => Some(self.shared.memory.register(slot, rank, regions)?),
            false => None,
        };
        let launch = Launch::new(
            self.shared.clone(),
            compiled,
            program,
            s.epoch,
            regions,
            s.gate.is_some(),
        );
        let admitted = self.shared.admit(&launch).and_then(|()| {
            launch
                .want_peer_epochs()
                .map_err(|e| self.shared.tcp_send_failed(e))
        });
        if let Err(err) = admitted {
            drop(launch);
            if let Some(registration) = registration {
                self.shared.memory.unregister(slot, registration);
            }
            return Err(err);
        }
        Ok(HostCompletion {
            launch,
            slot,
            registration,
        })
    }

    /// Start every submission of a group; a part that cannot start stops the device.
    fn start_group(&self, group: Vec<Submission<'_>>) -> Vec<Result<HostCompletion, DeviceError>> {
        let mut results = Vec::new();
        let mut start_error = None;
        for s in group {
            let rank = s.compiled.rank;
            match self.start(s) {
                Ok(c) => results.push(Ok(c)),
                Err(err) => {
                    if start_error.is_none() {
                        start_error = AbortCause::failed_start(rank, &err);
                    }
                    results.push(Err(err));
                }
            }
        }
        // A part of the group that could not start leaves its peers waiting for it: stop
        // the device, which aborts every launch in flight (this group's and others').
        if let Some(cause) = start_error {
            self.shared.stop(cause, None);
        }
        results
    }
}

fn user_regions(user: UserBuffers<'_>, epoch: u64) -> UserRegions {
    match user {
        UserBuffers::OutOfPlace { input, output } => UserRegions {
            input: Region {
                ptr: input.as_ptr().cast_mut(),
                len: input.len(),
                writable: false,
            },
            output: Region {
                ptr: output.as_mut_ptr(),
                len: output.len(),
                writable: true,
            },
            epoch,
        },
        UserBuffers::InPlace(buf) => {
            let region = Region {
                ptr: buf.as_mut_ptr(),
                len: buf.len(),
                writable: true,
            };
            UserRegions {
                input: Region {
                    writable: false,
                    ..region
                },
                output: region,
                epoch,
            }
        }
        UserBuffers::Device { .. } => unreachable!("refused by start"),
    }
}

/// A host submission in flight.
struct HostCompletion {
    launch: Arc<Launch>,
    slot: usize,
    /// Taken when the outcome is known (and the buffers unregistered).
    registration: Option<Arc<UserRegions>>,
}

impl HostCompletion {
    fn finish(&mut self) {
        if let Some(reg) = self.registration.take() {
            self.launch.shared.memory.unregister(self.slot, reg);
        }
    }
}

impl Completion for HostCompletion {
    fn wait(&mut self, timeout: Duration) -> Option<Result<(), DeviceError>> {
        // Work instead of sleeping while the queue has jobs: small operations then finish
        // on this thread without a wakeup.
        let launch = &self.launch;
        launch.shared.pool.drain(|| !launch.is_done());
        let outcome = self.launch.wait_done(timeout)?;
        self.finish();
        Some(outcome)
    }
}

impl Drop for HostCompletion {
    /// A completion dropped before its outcome was read still waits for it: the user's
    /// buffers stay registered until no task touches them (a leaked one cannot, hence
    /// `submit`'s safety contract).
    fn drop(&mut self) {
        if self.registration.is_some() {
            let launch = &self.launch;
            launch.shared.pool.drain(|| !launch.is_done());
            while self
                .launch
                .wait_done(self.launch.shared.config.exec_timeout)
                .is_none()
            {}
            self.finish();
        }
    }
}

impl Device for HostDevice {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn config(&self) -> &DeviceConfig {
        &self.shared.config
    }

    fn capabilities(&self) -> Capabilities {
        let shared_memory = self.shared.shm.is_some();
        let shm_maps_user = self.shared.shm.as_ref().is_none_or(|s| s.user_buffers);
        Capabilities {
            // Ranks in other processes reach this process's user buffers only when they
            // map them (shared user buffers). A TCP peer never does: its links are
            // put-only, which reach registered buffers alone (the framework plans what
            // crosses them staged), so TCP peers leave this as the other peers make it.
            peer_user_buffers: shm_maps_user,
            executes: true,
            queued_submissions: true,
            whole_sequences: true,
            memory: match shared_memory {
                true => MemoryKind::SharedSegment,
                false => MemoryKind::ProcessHeap,
            },
        }
    }

    fn alloc_shared(&self, rank: Rank, bytes: usize) -> Result<SharedMemory, DeviceError> {
        let slot = self.shared.slot(rank)?;
        let (ptr, keep) = match &self.shared.shm {
            Some(links) if links.user_buffers => links.alloc_user(slot, rank, bytes)?,
            // Ranks of this process reach heap memory as it is.
            _ => memory::page_aligned(bytes)?,
        };
        // SAFETY: `ptr` is `bytes` long, page aligned and zeroed, valid while `keep` lives.
        Ok(unsafe { SharedMemory::new(ptr, bytes, keep) })
    }

    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError> {
        let config = &self.shared.config;
        let id = match &self.shared.shm {
            Some(links) => {
                let id = self.shared.memory.alloc_scratch_with(|slot, id| {
                    links.create_scratch(config.local_ranks[slot], id, bytes_per_rank)
                })?;
                // Every rank allocates the same scratch at the same call: map the peers'.
                links.attach_scratch(id)?;
                id
            }
            None => {
                let local = config.local_ranks.len();
                self.shared.memory.alloc_scratch(local, bytes_per_rank)?
            }
        };
        if let Some(tcp) = &self.shared.tcp {
            tcp.announce_scratch(&self.shared, id, bytes_per_rank)?;
        }
        Ok(ScratchId(id))
    }

    fn resource(&self, rank: Rank, resource: Resource) -> Result<ResourceHandle, DeviceError> {
        let slot = self.shared.slot(rank)?;
        let memory = &self.shared.memory;
        let (addr, len) = match resource {
            Resource::CclIn => region_span(memory.ccl_in[slot].region()),
            Resource::CclOut => region_span(memory.ccl_out[slot].region()),
            Resource::Scratch(id) => region_span(
                memory
                    .device_region(slot, crate::ir::Buf::Scratch, Some(id.0))
                    .map_err(|fault| DeviceError::InvalidSlice {
                        at: crate::error::TaskLocation {
                            rank,
                            stream: 0,
                            task: 0,
                        },
                        slice: crate::ir::Slice::new(rank, crate::ir::Buf::Scratch, 0, 0),
                        fault,
                    })?,
            ),
            Resource::Signals => {
                let bank = &self.shared.banks[slot];
                let states = bank.link_states();
                (states.as_ptr() as usize, std::mem::size_of_val(states))
            }
        };
        Ok(ResourceHandle {
            rank,
            resource,
            memory: self.capabilities().memory,
            addr,
            len,
        })
    }

    fn compile(&self, request: CompileRequest) -> Result<Arc<Compiled>, DeviceError> {
        compile::compile(&self.shared, request)
    }

    unsafe fn submit(
        &self,
        group: Vec<Submission<'_>>,
    ) -> Vec<Result<Box<dyn Completion + '_>, DeviceError>> {
        // The caller waits for (or drops) every completion, and both drain the queue.
        self.shared
            .pool
            .quiet(|| self.start_group(group))
            .into_iter()
            .map(|c| c.map(|c| Box::new(c) as Box<dyn Completion>))
            .collect()
    }

    /// A group that can be linked (every local rank's small program, bound to host
    /// memory, past its gate: a group call or a graph launch from one thread) runs as its
    /// precomputed order on this thread ([`serial`]); any other through the scheduler.
    fn run(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        match self.linked(&group) {
            Some(schedule) => match self.replay(&group, &schedule) {
                Some(results) => results,
                None => self.run_linked(group, &schedule),
            },
            None => self.run_scheduled(group),
        }
    }

    fn stopped(&self) -> Option<AbortCause> {
        self.shared.failure()
    }

    fn retire(&self, rank: Rank, epoch: u64) -> Result<(), DeviceError> {
        let slot = self.shared.slot(rank)?;
        self.shared.advance(slot, epoch);
        Ok(())
    }

    fn done_epoch(&self, rank: Rank) -> Result<u64, DeviceError> {
        let slot = self.shared.slot(rank)?;
        Ok(self.shared.fences[slot].done())
    }

    fn abort(&self, cause: AbortCause) {
        self.shared.stop(cause, None);
    }
}

impl Drop for HostDevice {
    /// Tell the peers this device closes in order, and end the doorbell service.
    fn drop(&mut self) {
        if let Some(links) = &self.shared.shm {
            shm::close(links);
        }
        if let Some(tcp) = &self.shared.tcp {
            tcp.close();
        }
    }
}

fn region_span(region: Region) -> (usize, usize) {
    (region.ptr as usize, region.len)
}

#[cfg(test)]
mod rdma_tests;
#[cfg(test)]
mod shm_tests;
#[cfg(test)]
mod shm_user_tests;
#[cfg(test)]
mod tcp_tests;
#[cfg(test)]
pub(crate) mod tests;
