//! # oxccl-platform
//!
//! The bottom layer of oxccl, after HCCL's platform layer. It knows nothing of collectives:
//! it defines the **task IR** that every algorithm compiles to and every backend runs, and
//! the backends themselves.
//!
//! - [`ir`]: ranks, buffers, symbolic slices, notifies, the four tasks (Copy, Reduce, Post,
//!   Wait), streams and per-rank programs.
//! - [`notify`]: how a rank's notify table is laid out (link notifies, then local ones);
//!   [`signal`]: the atomic words behind them, one bank per local rank.
//! - [`link`]: one rank's connection to a peer, with HCCL's handshake vocabulary for
//!   SDMA-type and RDMA-type links; each helper appends tasks.
//! - [`dtype`] and [`reduce`]: the twelve element types, the four reduce ops, and the
//!   vectorised reduction kernels.
//! - [`device`]: the object-safe [`Device`] trait the framework drives (resources,
//!   compile, submit, the epoch fence); [`gate`]: the decision a launch may wait for
//!   before it starts; [`registry`]: backends by kind.
//! - [`host`]: the default backend, a worker pool that schedules every stream of every
//!   in-process rank without a thread per stream and without busy-waiting.
//! - [`sim`]: records programs instead of running them, for the analyzer and cost model.
//! - [`staged`]: a device whose users' buffers are accelerator memory, run by the host
//!   device through host memory (the cuda backend's ranks in a job of processes).
//! - [`user_memory`]: a device's user memory by address, for adapters that hold raw
//!   pointers (the C ABI on cuda).
//!
//! Executors never touch memory; they append tasks. The same program therefore runs on the
//! host, is checked by the analyzer, and is replayed by graph mode with new buffers bound.

pub mod cuda;
pub mod device;
pub mod disk_cache;
pub mod dtype;
pub mod error;
pub mod gate;
pub mod host;
pub mod ir;
pub mod link;
pub mod notify;
pub mod reduce;
pub mod registry;
pub mod signal;
pub mod sim;
mod slice_checks;
pub mod staged;
pub mod transport;
pub mod user_memory;

#[doc(hidden)]
pub use inventory;

pub use device::{
    Capabilities, CompileRequest, Compiled, Completion, Device, DeviceConfig, DeviceSpan,
    MemoryKind, RankProcess, Resource, ResourceHandle, ScratchId, SharedMemory, ShmJob, Submission,
    UserBuffers,
};
pub use dtype::{DataType, Element, ReduceOp};
pub use error::{
    AbortCause, AllocFault, ConfigFault, DeviceError, GateRefusal, PeerLoss, SliceFault, TaskFault,
    TaskLocation,
};
pub use gate::Gate;
pub use ir::{Buf, NotifyId, Rank, RankProgram, Slice, StreamProgram, Task};
pub use link::{Link, LinkAccess, LinkKind};
pub use notify::{LinkSignal, NotifyLayout};
pub use user_memory::{UserBlock, UserMemory};
