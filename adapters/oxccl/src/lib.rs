//! # oxccl
//!
//! A collective communication library with the three-layer design of Huawei's HCCL
//! (platform, framework, algorithms), where algorithms are plugins: any crate registers
//! executors with [`register_executor!`] and the framework finds and selects them by name.
//!
//! This crate is the facade: it re-exports what users and plugin authors need and offers
//! the **eager API**, safe, blocking, typed calls on host memory:
//!
//! ```
//! use oxccl::{Communicator, Config, ReduceOp};
//!
//! let comms = Communicator::init_all(4, Config::default()).unwrap();
//! std::thread::scope(|s| {
//!     for comm in &comms {
//!         s.spawn(move || {
//!             let send = vec![comm.rank() as f32 + 1.0; 1000];
//!             let mut recv = vec![0.0f32; 1000];
//!             comm.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
//!             assert!(recv.iter().all(|&x| x == 10.0));
//!         });
//!     }
//! });
//! ```
//!
//! Every rank calls the same collectives in the same order, each from its own thread.
//! A [`Group`] runs the calls of several ranks from one thread. Both describe each call
//! with an [`OpCall`], built once per operator and form from the typed buffers, so the
//! rules of an operator are written in one place for every way of calling it.
//! Linking this crate links the built-in executors ([`algorithms`]); a plugin crate is
//! linked only when the final binary names it (`use my_plugin as _;`).
//!
//! [`SharedBuffer`]s (`comm.alloc_shared::<T>(len)`) are user buffers that peers in other
//! processes of the host map: with `OXCCL_SHARED_BUFFERS=1`, calls on them run zero-copy
//! across processes.
//!
//! With the feature `cuda`, `DeviceBuffer` holds a rank's data on its GPU, and the eager
//! calls with a `_device` suffix run on such buffers in place (see the `device_buffer`
//! module's docs).

mod call;
#[cfg(feature = "cuda")]
mod device_buffer;
mod eager;
mod group;
mod logging;
mod shared_buffer;

pub use call::OpCall;
#[cfg(feature = "cuda")]
pub use device_buffer::DeviceBuffer;
pub use eager::Communicator;
pub use group::Group;
/// Half-precision element types.
pub use half::{bf16, f16};
pub use oxccl_algorithms as algorithms;
pub use oxccl_algorithms::templates;
pub use oxccl_framework::bootstrap::UniqueId;
pub use oxccl_framework::{
    self as framework, registry, select_alg, AlgoOverride, ArgError, BufRange, ConfigError,
    Constraints, Error, Executor, ExecutorEntry, KernelArgs, KernelCtx, LinkNeed, Mode, OpKind,
    OpParam, Peers, Plan, PlanCtx, ResourceRequest, SelectRequest, Selection, SelectorEntry,
    TemplateEntry, Topology,
};
pub use oxccl_framework::{register_executor, register_selector, register_template};
pub use oxccl_framework::{Config, HostFiguresFrom};
pub use oxccl_platform::{
    self as platform, Buf, DataType, DeviceError, DeviceSpan, Element, Rank, ReduceOp, Slice,
    UserBuffers,
};
pub use shared_buffer::SharedBuffer;

/// Result of oxccl calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
