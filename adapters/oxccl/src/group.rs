//! Group calls: one thread runs the collectives of several ranks at once.
//!
//! This is NCCL's `ncclGroupStart`/`ncclGroupEnd` for a thread that drives several devices
//! (nccl-tests' default): add one call per rank, then [`Group::run`] launches them all and
//! blocks until all are done. Calls are validated when added.

use oxccl_framework::{Communicator as Inner, Error, OpKind, OpParam};
use oxccl_platform::{Element, ReduceOp, UserBuffers};

use crate::Communicator;

/// Typed send and receive buffers as the device's byte view.
pub(crate) fn out_of_place<'a, T: Element>(send: &'a [T], recv: &'a mut [T]) -> UserBuffers<'a> {
    UserBuffers::OutOfPlace {
        input: bytemuck::cast_slice(send),
        output: bytemuck::cast_slice_mut(recv),
    }
}

/// One typed buffer, input and output at once, as the device's byte view.
pub(crate) fn in_place<T: Element>(buf: &mut [T]) -> UserBuffers<'_> {
    UserBuffers::InPlace(bytemuck::cast_slice_mut(buf))
}

/// Collectives of several ranks, launched together.
#[derive(Default)]
pub struct Group<'a> {
    calls: Vec<(&'a Inner, OpParam, UserBuffers<'a>)>,
}

impl<'a> Group<'a> {
    /// An empty group.
    pub fn new() -> Self {
        Group { calls: Vec::new() }
    }

    /// Add an untyped call.
    pub fn execute(
        &mut self,
        comm: &'a Communicator,
        op: OpParam,
        user: UserBuffers<'a>,
    ) -> &mut Self {
        self.calls.push((comm.framework(), op, user));
        self
    }

    /// Add an AllReduce of equal-length `send` into `recv`.
    pub fn all_reduce<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        Inner::same_length(send.len(), recv.len())?;
        let param = OpParam::all_reduce(send.len(), T::DTYPE, op);
        let user = out_of_place(send, recv);
        Ok(self.execute(comm, param, user))
    }

    /// Add an in-place AllReduce.
    pub fn all_reduce_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        op: ReduceOp,
    ) -> &mut Self {
        let param = OpParam::all_reduce(buf.len(), T::DTYPE, op);
        self.execute(comm, param, in_place(buf))
    }

    /// Add an AllGather: `recv` holds exactly `comm.size() * send.len()` elements.
    pub fn all_gather<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<&mut Self, Error> {
        let count = OpKind::AllGather.block_count(comm.size(), send.len(), recv.len())?;
        let user = out_of_place(send, recv);
        Ok(self.execute(comm, OpParam::all_gather(count, T::DTYPE), user))
    }

    /// Add an in-place AllGather: `buf` holds one block per rank, the input in block
    /// `comm.rank()`.
    pub fn all_gather_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
    ) -> Result<&mut Self, Error> {
        let count = OpKind::AllGather.in_place_block_count(comm.size(), buf.len())?;
        let user = in_place(buf);
        Ok(self.execute(comm, OpParam::all_gather(count, T::DTYPE), user))
    }

    /// Add a ReduceScatter: `send` holds exactly `comm.size() * recv.len()` elements.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        let count = OpKind::ReduceScatter.block_count(comm.size(), send.len(), recv.len())?;
        let user = out_of_place(send, recv);
        Ok(self.execute(comm, OpParam::reduce_scatter(count, T::DTYPE, op), user))
    }

    /// Add an in-place ReduceScatter: the result lands in block `comm.rank()` of `buf`.
    pub fn reduce_scatter_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        let count = OpKind::ReduceScatter.in_place_block_count(comm.size(), buf.len())?;
        let user = in_place(buf);
        Ok(self.execute(comm, OpParam::reduce_scatter(count, T::DTYPE, op), user))
    }

    /// Launch every call and wait for all; the first error, if any.
    pub fn run(self) -> Result<(), Error> {
        Inner::execute_group(self.calls).into_iter().collect()
    }
}
