//! The CUDA backend (feature `cuda`): the task IR on NVIDIA GPUs, through `cudarc`'s
//! driver API and NVRTC, both loaded at run time, so a build with the feature starts on a
//! machine without a driver and says so ([`CudaError::NoDriver`]) instead of failing to
//! load.
//!
//! ## Ranks and GPUs
//!
//! A device serves the local ranks of its process, each placed on a CUDA device
//! ([`DeviceConfig::gpus`](crate::DeviceConfig::gpus): one ordinal per local rank; empty spreads them round-robin
//! over the GPUs, so 8 ranks on 8 GPUs get one each and 8 ranks on one GPU are 8
//! *virtual ranks* of it). Every rank has its own streams, CCL buffers, scratch and
//! signal words on its GPU; ranks on different GPUs need peer access between them.
//!
//! ## Ranks in other processes
//!
//! A device created with a transport to other processes (a rank of a job under `oxccl
//! perf --procs`, `mpirun` or `torchrun`, one process per GPU or several) runs its
//! calls staged through host memory by the host device ([`crate::staged`], `across`):
//! its device buffers are copied to the host, the collective runs over the host transports
//! (shared memory, RDMA, TCP), and the result is copied back. Placement then starts at
//! the process's place among its host's ranks (`placement`), so each process of a host
//! takes its own GPU. What follows (kernels, device signals, CUDA graphs) is the
//! one-process engine, for communicators whose every rank is in this process.
//!
//! ## The IR in one kernel per GPU and call
//!
//! Every local rank of a GPU makes each call: it brings its compiled program, or
//! nothing (a call that runs nothing on it, a refused gate). The last to arrive launches
//! the program kernel once for all of them (`group`), cooperatively, so all its blocks
//! are resident at once. The kernel's blocks interpret the ranks' streams, encoded at
//! compile as lists of words (`program`, `program.cu`): each stream gets K blocks, a
//! Copy or Reduce is split over them (the NVRTC kernels of [`kernels`]), and between
//! barriers of the K a Post sets its signal word to 1 and a Wait spins until it is set,
//! then clears it: the IR's binary notifies, with no host thread and no stream wait in
//! the data path. A Post that finds its word set (a lost wakeup, which the analyzer
//! proves absent) is recorded in the rank's fault word and reported.
//!
//! ## The epoch fence
//!
//! Launches of one GPU follow each other on its stream, so its ranks need no fence among
//! themselves. For peers on other GPUs, the kernel waits (cyclic compare, so 32-bit words
//! may wrap) until each entry-fence peer's epoch word, in mapped host memory, reaches
//! `epoch - 1`; at its end it writes `epoch` to the rank's word and, for an exit fence,
//! waits for the peers' words to reach `epoch`. The host reads the words for
//! [`Device::done_epoch`](crate::Device::done_epoch) and writes them for
//! [`Device::retire`](crate::Device::retire) (calls that run nothing), as the host device
//! does with its fences.
//!
//! ## Buffers
//!
//! User buffers are device memory ([`UserBuffers::Device`](crate::UserBuffers::Device), the adapter's
//! `DeviceBuffer`), used in place; host slices are accepted too and staged through
//! device buffers of the rank (copied in before the launch, out after it), so every
//! test and tool that works on the host device works here. Where every rank of the
//! communicator is on one GPU, peers reach each other's user buffers (zero-copy,
//! capability `peer_user_buffers`): a call's ranks meet in one launch, whose table of
//! user buffers the kernel reads, after the launch checked each peer's reach against
//! the buffers bound (see `compile` and `zero_copy`). Ranks on several GPUs stage through
//! the CCL buffers.
//!
//! ## Gates, timeouts and aborts
//!
//! A gated submission arrives at its group when its gate opens. Waiting for a completion
//! polls the group's done event; past `exec_timeout` the waiting thread (the watchdog)
//! reads the progress word each stream writes before every Wait, reports the rank,
//! stream and task that never completed (or, for a call still gathering, the ranks of the
//! GPU that never made it), and stops the device: the abort word, which every spin of the
//! kernel watches, releases every block, so the others return
//! [`DeviceError::Aborted`](crate::DeviceError::Aborted) promptly and nothing runs on a
//! buffer after its call returned.
//!
//! ## Graph mode
//!
//! A graph launch that holds every local rank's steps on device buffers runs as one CUDA
//! graph per GPU: the same program kernels, one node per step, built once per sequence
//! of programs and replayed with the buffers of each launch (`replay`, `graph`). Other
//! launches run step by step, as eager calls.
//!
//! Files: `engine` ([`CudaDevice`] and which engine runs it), `placement` (a GPU per local
//! rank), `across` (ranks in other processes), `device` (the one-process engine),
//! `driver` (loading, contexts, the kernel), `memory`, `compile`, `program`
//! (the encoding and the kernel's argument), `group` (a GPU's ranks and launches),
//! `launch` (a submission and its completion), `kernels` (CUDA C and NVRTC),
//! `module_cache` (NVRTC's output kept on disk), `user` (memory the user owns on a GPU), `zero_copy`
//! (what a launch checks of its ranks' user buffers), `pointers` (what the driver knows
//! of an address; user memory by address, for the C ABI), `graph` (a sequence as a CUDA
//! graph), `replay` (graph mode's launches: replayed, or step by step).

mod error;
pub mod kernels;

pub use error::{CaptureState, CudaError};

#[cfg(feature = "cuda")]
mod across;
#[cfg(feature = "cuda")]
mod compile;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod driver;
#[cfg(feature = "cuda")]
mod engine;
#[cfg(feature = "cuda")]
mod graph;
#[cfg(feature = "cuda")]
mod group;
#[cfg(feature = "cuda")]
mod launch;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod module_cache;
#[cfg(feature = "cuda")]
mod placement;
#[cfg(feature = "cuda")]
mod pointers;
#[cfg(feature = "cuda")]
mod program;
#[cfg(feature = "cuda")]
mod replay;
#[cfg(feature = "cuda")]
mod user;
#[cfg(feature = "cuda")]
mod zero_copy;

#[cfg(feature = "cuda")]
pub(crate) use device::Shared;
#[cfg(feature = "cuda")]
pub use device::{current_gpu, gpu_count, GraphCounts};

/// Without the `cuda` feature there is no driver to ask: [`CudaError::NotBuilt`].
#[cfg(not(feature = "cuda"))]
pub fn current_gpu() -> Result<Option<usize>, CudaError> {
    Err(CudaError::NotBuilt)
}
#[cfg(feature = "cuda")]
pub use engine::CudaDevice;
#[cfg(feature = "cuda")]
pub use user::{copy_bandwidth, CopyBandwidth, DeviceBytes};
