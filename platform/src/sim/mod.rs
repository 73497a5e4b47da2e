//! The `sim` device: runs nothing, models the device for the framework's recordings.
//!
//! It plays the role of wgpu's noop backend: the framework drives it exactly as it drives
//! the host device (same resource requests, same orchestration, same compile), so the
//! analyzer and the cost model see the programs the host would run. Its capabilities
//! follow [`DeviceConfig::zero_copy`], so a recording can model either eager mode.
//!
//! Compile checks what every backend checks before it accepts a program (local ranks,
//! notifies of the owner for waits); submit waits for the gate, then completes at once;
//! epochs advance as on a real device.

use crate::device::{
    Capabilities, CompileRequest, Compiled, Completion, Device, DeviceConfig, MemoryKind, Resource,
    ResourceHandle, ScratchId, Submission,
};
use crate::error::{ConfigFault, DeviceError, TaskFault, TaskLocation};
use crate::ir::{Rank, Task};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

crate::register_backend!(
    "sim",
    "records programs without running them (the analyzer's and cost model's device)",
    crate::registry::Memory::PerRank,
    |config| Ok(Arc::new(SimDevice::new(config)?))
);

/// Models a device without running anything.
#[derive(Debug)]
pub struct SimDevice {
    config: DeviceConfig,
    slots: Vec<Option<usize>>,
    scratch: Mutex<Vec<usize>>,
    done: Vec<AtomicU64>,
    id: usize,
}

impl SimDevice {
    /// A sim device; `config.zero_copy` chooses which eager mode the framework uses.
    pub fn new(config: DeviceConfig) -> Result<Self, DeviceError> {
        let slots = config.local_slots()?;
        let local = config.local_ranks.len();
        Ok(SimDevice {
            config,
            slots,
            scratch: Mutex::new(Vec::new()),
            done: (0..local).map(|_| AtomicU64::new(0)).collect(),
            id: crate::device::next_device_id(),
        })
    }

    /// Bytes per rank of each scratch allocation, by [`ScratchId`].
    pub fn scratch_sizes(&self) -> Vec<usize> {
        self.scratch.lock().clone()
    }

    fn slot(&self, rank: Rank) -> Result<usize, DeviceError> {
        self.slots
            .get(rank)
            .copied()
            .flatten()
            .ok_or_else(|| self.config.not_served(rank))
    }
}

/// A sim submission: already over.
struct Over(Option<Result<(), DeviceError>>);

impl Completion for Over {
    fn wait(&mut self, _timeout: Duration) -> Option<Result<(), DeviceError>> {
        Some(self.0.take().unwrap_or(Ok(())))
    }
}

impl Device for SimDevice {
    fn kind(&self) -> &'static str {
        "sim"
    }

    fn config(&self) -> &DeviceConfig {
        &self.config
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            peer_user_buffers: self.config.zero_copy,
            executes: false,
            queued_submissions: false,
            whole_sequences: false,
            memory: MemoryKind::None,
        }
    }

    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError> {
        let mut scratch = self.scratch.lock();
        scratch.push(bytes_per_rank);
        Ok(ScratchId(scratch.len() - 1))
    }

    fn resource(&self, rank: Rank, resource: Resource) -> Result<ResourceHandle, DeviceError> {
        self.slot(rank)?;
        let len = match resource {
            Resource::CclIn | Resource::CclOut => self.config.ccl_bytes,
            Resource::Scratch(id) => self.scratch.lock().get(id.0).copied().unwrap_or(0),
            Resource::Signals => self.config.layout().local_base() as usize * 4,
        };
        Ok(ResourceHandle {
            rank,
            resource,
            memory: MemoryKind::None,
            addr: 0,
            len,
        })
    }

    fn compile(&self, request: CompileRequest) -> Result<Arc<Compiled>, DeviceError> {
        let program = &request.program;
        let rank = program.rank;
        self.slot(rank)?;
        for &peer in &request.peers {
            self.slot(peer)?;
        }
        let mut tasks = 0;
        for (s, stream) in program.streams.iter().enumerate() {
            for (t, task) in stream.tasks.iter().enumerate() {
                tasks += 1;
                match task {
                    Task::Wait { notify } if notify.rank != rank => {
                        let at = TaskLocation {
                            rank,
                            stream: s,
                            task: t,
                        };
                        let fault = TaskFault::RemoteWait { notify: *notify };
                        return Err(DeviceError::InvalidTask { at, fault });
                    }
                    Task::Post { notify } | Task::Wait { notify } => {
                        self.slot(notify.rank)?;
                    }
                    Task::Copy { .. } | Task::Reduce { .. } => {
                        for slice in task.reads().iter().chain(task.writes()) {
                            self.slot(slice.rank)?;
                        }
                    }
                }
            }
        }
        Ok(Arc::new(Compiled {
            rank,
            peers: request.peers.clone(),
            in_place: request.in_place,
            exit_fence: request.exit_fence,
            user_extent: (0, 0),
            user_align: (1, 1),
            tasks,
            device_id: self.id,
            backend: request.program.clone(),
        }))
    }

    unsafe fn submit(
        &self,
        group: Vec<Submission<'_>>,
    ) -> Vec<Result<Box<dyn Completion + '_>, DeviceError>> {
        group
            .into_iter()
            .map(|s| {
                let rank = s.compiled.rank;
                if s.compiled.device_id != self.id {
                    return Err(ConfigFault::ForeignProgram.into());
                }
                let slot = self.slot(rank)?;
                let outcome = match &s.gate {
                    None => Ok(()),
                    Some(gate) => match gate.wait(self.config.exec_timeout) {
                        None => Err(DeviceError::GateTimeout {
                            rank,
                            waited: self.config.exec_timeout,
                        }),
                        Some(Err(cause)) => Err(DeviceError::Refused { rank, cause }),
                        Some(Ok(())) => Ok(()),
                    },
                };
                self.done[slot].fetch_max(s.epoch, Ordering::AcqRel);
                Ok(Box::new(Over(Some(outcome))) as Box<dyn Completion>)
            })
            .collect()
    }

    fn retire(&self, rank: Rank, epoch: u64) -> Result<(), DeviceError> {
        let slot = self.slot(rank)?;
        self.done[slot].fetch_max(epoch, Ordering::AcqRel);
        Ok(())
    }

    fn done_epoch(&self, rank: Rank) -> Result<u64, DeviceError> {
        Ok(self.done[self.slot(rank)?].load(Ordering::Acquire))
    }

    /// Nothing runs on `sim`: nothing to stop.
    fn abort(&self, _cause: crate::error::AbortCause) {}
}
