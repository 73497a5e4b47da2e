//! The `Device` trait: what a backend must offer the framework.
//!
//! A device serves the local ranks of one communicator. It owns their CCL buffers, scratch
//! buffers and notify tables, and runs one rank's [`RankProgram`] at a time per rank, with
//! the user's buffers bound for the duration of the call. The trait is object safe: the
//! framework holds an `Arc<dyn Device>` and never knows which backend it talks to.

use crate::error::DeviceError;
use crate::gate::Gate;
use crate::ir::RankProgram;
use crate::notify::NotifyLayout;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// What a device is created with.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Ranks served by this device (all ranks of an in-process communicator).
    pub ranks: usize,
    /// Size of each of CclIn and CclOut, per rank, in bytes.
    pub ccl_bytes: usize,
    /// Notify channels per link (see [`NotifyLayout`]).
    pub link_channels: usize,
    /// How long a Wait may block before it is reported as an error.
    pub exec_timeout: Duration,
    /// Worker threads of the host device (0 = one per core).
    pub host_threads: usize,
}

impl DeviceConfig {
    /// The notify layout every rank of this device uses.
    pub fn layout(&self) -> NotifyLayout {
        NotifyLayout {
            ranks: self.ranks,
            link_channels: self.link_channels,
        }
    }
}

/// Handle of a scratch allocation: one buffer of the same size on every rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScratchId(pub usize);

/// The user's buffers bound to `Buf::Input` and `Buf::Output` for one execution.
pub enum UserBuffers<'a> {
    /// Distinct send and receive buffers.
    OutOfPlace {
        input: &'a [u8],
        output: &'a mut [u8],
    },
    /// One buffer that is both the input and the output.
    InPlace(&'a mut [u8]),
}

impl UserBuffers<'_> {
    /// True for in-place bindings.
    pub fn is_in_place(&self) -> bool {
        matches!(self, UserBuffers::InPlace(_))
    }
}

/// One rank's program with its buffers bound.
pub struct Execution<'a> {
    pub program: Arc<RankProgram>,
    /// Bound to `Buf::Input` and `Buf::Output`.
    pub user: UserBuffers<'a>,
    /// Bound to `Buf::Scratch`.
    pub scratch: Option<ScratchId>,
    /// When set, no task runs before the gate opens; a refused gate ends the execution
    /// with [`DeviceError::Refused`] before it touched anything (see [`crate::gate`]).
    pub gate: Option<Arc<Gate>>,
}

/// A backend.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Short backend name (`host`, `sim`, ...).
    fn kind(&self) -> &'static str;

    /// The configuration the device was created with.
    fn config(&self) -> &DeviceConfig;

    /// Whether a program may touch another rank's `Input`/`Output` while that rank's op runs.
    /// When true, eager ops run zero-copy on user buffers; otherwise they stage through the
    /// CCL buffers.
    fn remote_user_buffers(&self) -> bool;

    /// Allocate `bytes_per_rank` of scratch on every rank.
    fn alloc_scratch(&self, bytes_per_rank: usize) -> Result<ScratchId, DeviceError>;

    /// Make sure every rank's notify table has room for `local` local notifies.
    fn reserve_local_notifies(&self, local: usize) -> Result<(), DeviceError>;

    /// Run several ranks' programs at once (a group call: one thread drives many ranks) and
    /// block until all are done. Returns one result per execution, in order. When one fails,
    /// the others are aborted rather than left to time out. In every case no task touches
    /// any of the user buffers after this returns.
    fn execute_group(&self, group: Vec<Execution<'_>>) -> Vec<Result<(), DeviceError>>;

    /// Run one rank's program (see [`Device::execute_group`]).
    fn execute(&self, execution: Execution<'_>) -> Result<(), DeviceError> {
        self.execute_group(vec![execution])
            .pop()
            .expect("one result per execution")
    }

    /// For backends with extra capabilities (the `sim` device's recorded programs).
    fn as_any(&self) -> &dyn Any;
}
