//! [`CudaDevice`]: the cuda backend as the framework sees it, and the engine that runs it.
//!
//! - A communicator whose every rank is in this process runs on the one-process engine
//!   (`device`): programs as kernels on the GPUs, signals in device memory, zero-copy
//!   between the ranks of a GPU, graph mode as CUDA graphs.
//! - A rank of a job of processes (a device created with a transport to other processes:
//!   `DeviceConfig::shm` or `tcp`) runs on `across`: its calls staged through host memory
//!   and run by the host device over its transports.

use super::across::AcrossProcesses;
use super::device::{GraphCounts, OneProcess};
use crate::device::{
    Capabilities, CompileRequest, Compiled, Completion, Device, DeviceConfig, Resource,
    ResourceHandle, ScratchId, SharedMemory, Submission,
};
use crate::error::{AbortCause, DeviceError};
use crate::ir::Rank;
use crate::user_memory::UserMemory;
use std::sync::Arc;

crate::register_backend!(
    "cuda",
    "NVIDIA GPUs through the CUDA driver (one or several ranks per GPU, or a process per GPU)",
    crate::registry::Memory::PerRank,
    |config| Ok(Arc::new(CudaDevice::new(config)?))
);

/// NVIDIA GPUs as a device.
#[derive(Debug)]
pub struct CudaDevice {
    engine: Engine,
}

#[derive(Debug)]
enum Engine {
    OneProcess(OneProcess),
    AcrossProcesses(AcrossProcesses),
}

impl CudaDevice {
    /// Open the GPUs the local ranks are placed on and what joins them: every rank's
    /// memory on its GPU when all are in this process, else the host transports to the
    /// job's other processes.
    pub fn new(config: DeviceConfig) -> Result<Self, DeviceError> {
        let engine = match config.shm.is_some() || config.tcp.is_some() {
            true => Engine::AcrossProcesses(AcrossProcesses::new(config)?),
            false => Engine::OneProcess(OneProcess::new(config)?),
        };
        Ok(CudaDevice { engine })
    }

    fn engine(&self) -> &dyn Device {
        match &self.engine {
            Engine::OneProcess(d) => d,
            Engine::AcrossProcesses(d) => &d.device,
        }
    }

    /// Whether calls stage through host memory: a rank of a job of processes, whose
    /// collectives the host device runs (see `across`).
    pub fn staged(&self) -> bool {
        matches!(self.engine, Engine::AcrossProcesses(_))
    }

    /// What graph mode's launches did on this device: whether they replay as CUDA graphs,
    /// how many graphs were built and how many launches replayed one (none when
    /// [`staged`](Self::staged)).
    pub fn graph_counts(&self) -> GraphCounts {
        match &self.engine {
            Engine::OneProcess(d) => d.graph_counts(),
            Engine::AcrossProcesses(_) => GraphCounts::default(),
        }
    }

    /// The CUDA device ordinal local rank `rank` runs on.
    pub fn ordinal_of(&self, rank: Rank) -> Result<usize, DeviceError> {
        match &self.engine {
            Engine::OneProcess(d) => d.ordinal_of(rank),
            Engine::AcrossProcesses(d) => d.ordinal_of(rank),
        }
    }
}

impl Device for CudaDevice {
    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn config(&self) -> &DeviceConfig {
        self.engine().config()
    }

    fn capabilities(&self) -> Capabilities {
        self.engine().capabilities()
    }

    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError> {
        self.engine().alloc_scratch(bytes_per_rank)
    }

    fn alloc_shared(&self, rank: Rank, bytes: usize) -> Result<SharedMemory, DeviceError> {
        self.engine().alloc_shared(rank, bytes)
    }

    /// Both engines: user memory is the rank's GPU's (`pointers`).
    fn user_memory(&self) -> Option<&dyn UserMemory> {
        Some(self)
    }

    fn resource(&self, rank: Rank, resource: Resource) -> Result<ResourceHandle, DeviceError> {
        self.engine().resource(rank, resource)
    }

    fn compile(&self, request: CompileRequest) -> Result<Arc<Compiled>, DeviceError> {
        self.engine().compile(request)
    }

    unsafe fn submit(
        &self,
        group: Vec<Submission<'_>>,
    ) -> Vec<Result<Box<dyn Completion + '_>, DeviceError>> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.engine().submit(group) }
    }

    fn retire(&self, rank: Rank, epoch: u64) -> Result<(), DeviceError> {
        self.engine().retire(rank, epoch)
    }

    fn done_epoch(&self, rank: Rank) -> Result<u64, DeviceError> {
        self.engine().done_epoch(rank)
    }

    fn abort(&self, cause: AbortCause) {
        self.engine().abort(cause);
    }

    fn stopped(&self) -> Option<AbortCause> {
        self.engine().stopped()
    }

    fn run_sequence_group(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        self.engine().run_sequence_group(group)
    }

    fn run(&self, group: Vec<Submission<'_>>) -> Vec<Result<(), DeviceError>> {
        self.engine().run(group)
    }
}
