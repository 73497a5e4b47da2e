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
//! ## The IR on streams
//!
//! Stream `s` of a rank's program is a CUDA stream of that rank (non-blocking, created
//! once). A Copy is `cuMemcpyDtoDAsync`, a Reduce the NVRTC kernel of its type and op
//! ([`kernels`]), a Post `cuStreamWriteValue32(word, 1)` and a Wait
//! `cuStreamWaitValue32(word == 1)` then a write of 0: the IR's binary notifies as
//! stream memory operations on signal words in device memory, so the GPU synchronises
//! its ranks without a host thread in the data path. (A post that finds its word set, a
//! lost wakeup, is not detected on the GPU: the analyzer proves no program does that.)
//!
//! ## The epoch fence on the GPU
//!
//! Each rank has an epoch word in mapped host memory. A submission's stream 0 first waits
//! (`cuStreamWaitValue32`, `GEQ`, a cyclic compare, so 32-bit words may wrap) until every
//! entry-fence peer's word reaches `epoch - 1`, then forks the other streams with an
//! event; at the end it joins them, writes `epoch` to the rank's word, and for an exit
//! fence waits for the peers' words to reach `epoch`. The host reads the words for
//! [`Device::done_epoch`](crate::Device::done_epoch) and writes them for [`Device::retire`](crate::Device::retire) (calls that run
//! nothing), as the host device does with its fences.
//!
//! ## Buffers
//!
//! User buffers are device memory ([`UserBuffers::Device`](crate::UserBuffers::Device), the adapter's
//! `DeviceBuffer`), used in place; host slices are accepted too and staged through
//! device buffers of the rank (copied in before the program, out after it), so every
//! test and tool that works on the host device works here. Peers' user buffers are
//! out of reach (see `compile`): the framework runs the staged (CCL buffer) mode.
//!
//! ## Gates, timeouts and aborts
//!
//! A gated submission is queued by the thread that opens its gate. Waiting for a
//! completion polls its event; past `exec_timeout` the waiting thread (the watchdog)
//! reads the progress word each stream writes before every Wait, reports the rank,
//! stream and task that never completed, and stops the device: every signal and epoch
//! word is then flooded until every rank's streams drain, so the others return
//! [`DeviceError::Aborted`](crate::DeviceError::Aborted) promptly and nothing runs on a buffer after its call
//! returned.
//!
//! Files: `driver` (loading, contexts, kernels), `memory`, `compile`, `exec` (tasks as
//! stream work), `launch` (a submission and its completion), `kernels` (CUDA C and
//! NVRTC).

mod error;
pub mod kernels;

pub use error::CudaError;

#[cfg(feature = "cuda")]
mod compile;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod driver;
#[cfg(feature = "cuda")]
mod group;
#[cfg(feature = "cuda")]
mod launch;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod user;
#[cfg(feature = "cuda")]
mod program;

#[cfg(feature = "cuda")]
pub(crate) use device::Shared;
#[cfg(feature = "cuda")]
pub use device::{gpu_count, CudaDevice};
#[cfg(feature = "cuda")]
pub use user::{copy_bandwidth, CopyBandwidth, DeviceBytes};
