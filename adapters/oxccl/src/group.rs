//! Group calls: one thread runs the collectives of several ranks at once.
//!
//! This is NCCL's `ncclGroupStart`/`ncclGroupEnd` for a thread that drives several devices
//! (nccl-tests' default): add one call per rank, then [`Group::run`] launches them all and
//! blocks until all are done. Calls are validated when added.

use oxccl_framework::op::{P2pItem, VLayout};
use oxccl_framework::{Communicator as Inner, Error, GroupCall, OpKind, OpParam};
use oxccl_platform::{DataType, Element, Rank, ReduceOp, UserBuffers};

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
    calls: Vec<GroupCall<'a, 'a>>,
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
        self.calls.push(GroupCall::Run(comm.framework(), op, user));
        self
    }

    /// Pass on the result of a rank's own check of its typed buffers. An error keeps the
    /// call in the group as refused: [`Group::run`] then tells the other ranks why, at once,
    /// and keeps every rank's calls in step (see [`GroupCall::Refused`]).
    fn admit<T>(
        &mut self,
        comm: &'a Communicator,
        checked: Result<T, impl Into<Error>>,
    ) -> Result<T, Error> {
        checked.map_err(|e| {
            let err = e.into();
            self.calls
                .push(GroupCall::Refused(comm.framework(), err.clone()));
            err
        })
    }

    /// Add an AllReduce of equal-length `send` into `recv`.
    pub fn all_reduce<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        self.admit(comm, Inner::same_length(send.len(), recv.len()))?;
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
        let count = self.admit(
            comm,
            OpKind::AllGather.block_count(comm.size(), send.len(), recv.len()),
        )?;
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
        let count = self.admit(
            comm,
            OpKind::AllGather.in_place_block_count(comm.size(), buf.len()),
        )?;
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
        let count = self.admit(
            comm,
            OpKind::ReduceScatter.block_count(comm.size(), send.len(), recv.len()),
        )?;
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
        let count = self.admit(
            comm,
            OpKind::ReduceScatter.in_place_block_count(comm.size(), buf.len()),
        )?;
        let user = in_place(buf);
        Ok(self.execute(comm, OpParam::reduce_scatter(count, T::DTYPE, op), user))
    }

    /// Add a Broadcast: `recv` = the root's `send` (`send` and `recv` of equal length;
    /// only the root's `send` is read).
    pub fn broadcast<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        self.admit(comm, Inner::same_length(send.len(), recv.len()))?;
        let param = OpParam::rooted(OpKind::Broadcast, send.len(), T::DTYPE, ReduceOp::Sum, root);
        Ok(self.execute(comm, param, out_of_place(send, recv)))
    }

    /// Add an in-place Broadcast: the root's `buf` is copied into every rank's `buf`.
    pub fn broadcast_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        root: Rank,
    ) -> &mut Self {
        let param = OpParam::rooted(OpKind::Broadcast, buf.len(), T::DTYPE, ReduceOp::Sum, root);
        self.execute(comm, param, in_place(buf))
    }

    /// Add a Reduce: the root's `recv` = `op` over every rank's `send`; other ranks'
    /// `recv` is left undefined (pass a buffer of the same length).
    pub fn reduce<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> Result<&mut Self, Error> {
        self.admit(comm, Inner::same_length(send.len(), recv.len()))?;
        let param = OpParam::rooted(OpKind::Reduce, send.len(), T::DTYPE, op, root);
        Ok(self.execute(comm, param, out_of_place(send, recv)))
    }

    /// Add an in-place Reduce: the root's `buf` becomes `op` over every rank's `buf`.
    pub fn reduce_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> &mut Self {
        let param = OpParam::rooted(OpKind::Reduce, buf.len(), T::DTYPE, op, root);
        self.execute(comm, param, in_place(buf))
    }

    /// Add a Scatter: `recv` = block `comm.rank()` of the root's `send`, which holds
    /// exactly `comm.size() * recv.len()` elements (on every rank, as in nccl-tests).
    pub fn scatter<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        let count = self.admit(
            comm,
            OpKind::Scatter.block_count(comm.size(), send.len(), recv.len()),
        )?;
        let param = OpParam::rooted(OpKind::Scatter, count, T::DTYPE, ReduceOp::Sum, root);
        Ok(self.execute(comm, param, out_of_place(send, recv)))
    }

    /// Add an in-place Scatter: `buf` holds one block per rank; afterwards block
    /// `comm.rank()` holds that block of the root's `buf`.
    pub fn scatter_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        let count = self.admit(
            comm,
            OpKind::Scatter.in_place_block_count(comm.size(), buf.len()),
        )?;
        let param = OpParam::rooted(OpKind::Scatter, count, T::DTYPE, ReduceOp::Sum, root);
        Ok(self.execute(comm, param, in_place(buf)))
    }

    /// Add a Gather: block `s` of the root's `recv` = rank `s`'s `send`; `recv` holds
    /// exactly `comm.size() * send.len()` elements (undefined on other ranks).
    pub fn gather<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        let count = self.admit(
            comm,
            OpKind::Gather.block_count(comm.size(), send.len(), recv.len()),
        )?;
        let param = OpParam::rooted(OpKind::Gather, count, T::DTYPE, ReduceOp::Sum, root);
        Ok(self.execute(comm, param, out_of_place(send, recv)))
    }

    /// Add an in-place Gather: each rank's input is block `comm.rank()` of its `buf`;
    /// afterwards the root's `buf` holds every rank's block.
    pub fn gather_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        let count = self.admit(
            comm,
            OpKind::Gather.in_place_block_count(comm.size(), buf.len()),
        )?;
        let param = OpParam::rooted(OpKind::Gather, count, T::DTYPE, ReduceOp::Sum, root);
        Ok(self.execute(comm, param, in_place(buf)))
    }

    /// Add an AlltoAll: block `s` of `recv` = block `comm.rank()` of rank `s`'s `send`;
    /// both hold `comm.size()` blocks.
    pub fn all_to_all<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<&mut Self, Error> {
        let count = self.admit(
            comm,
            OpKind::AlltoAll.block_count(comm.size(), send.len(), recv.len()),
        )?;
        let param = OpParam::new(OpKind::AlltoAll, count, T::DTYPE, ReduceOp::Sum);
        Ok(self.execute(comm, param, out_of_place(send, recv)))
    }

    /// Add an AllGatherV: block `s` of `recv` (`counts[s]` elements at `displs[s]`) =
    /// rank `s`'s `send`, which holds `counts[comm.rank()]` elements. Every rank passes
    /// the same `counts` and `displs`.
    pub fn all_gather_v<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<&mut Self, Error> {
        let param = blocks(OpKind::AllGatherV, counts, displs, T::DTYPE, ReduceOp::Sum);
        Ok(self.execute(comm, param, out_of_place(send, recv)))
    }

    /// Add an in-place AllGatherV: this rank's input is its own block of `buf`.
    pub fn all_gather_v_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> &mut Self {
        let param = blocks(OpKind::AllGatherV, counts, displs, T::DTYPE, ReduceOp::Sum);
        self.execute(comm, param, in_place(buf))
    }

    /// Add a ReduceScatterV: `recv` (`counts[comm.rank()]` elements) = `op` over block
    /// `comm.rank()` (`counts[r]` elements at `displs[r]`) of every rank's `send`.
    pub fn reduce_scatter_v<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        let param = blocks(OpKind::ReduceScatterV, counts, displs, T::DTYPE, op);
        Ok(self.execute(comm, param, out_of_place(send, recv)))
    }

    /// Add an in-place ReduceScatterV: the result lands in this rank's block of `buf`.
    pub fn reduce_scatter_v_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
        op: ReduceOp,
    ) -> &mut Self {
        let param = blocks(OpKind::ReduceScatterV, counts, displs, T::DTYPE, op);
        self.execute(comm, param, in_place(buf))
    }

    /// Add an AlltoAllV with MPI's per-peer counts and displacements (elements): this
    /// rank sends `send_counts[p]` elements at `send_displs[p]` to rank `p` and receives
    /// `recv_counts[p]` at `recv_displs[p]` from it; `recv_counts[p]` must equal rank
    /// `p`'s `send_counts[comm.rank()]`.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_v<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &'a mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> &mut Self {
        let layout = VLayout::all_to_all_v(send_counts, send_displs, recv_counts, recv_displs);
        let param = OpParam::vector(OpKind::AlltoAllV, layout, T::DTYPE, ReduceOp::Sum);
        self.execute(comm, param, out_of_place(send, recv))
    }

    /// Add grouped point-to-point transfers of one rank: each of `sends` sends `count`
    /// elements at `offset` of `send` to `peer`, each of `recvs` receives into `recv`.
    /// The `k`-th send of rank `a` to rank `b` matches the `k`-th receive of `b` from `a`;
    /// items may be listed in any order on any rank without deadlock.
    pub fn send_recv<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        sends: &[P2pItem],
        recv: &'a mut [T],
        recvs: &[P2pItem],
    ) -> &mut Self {
        let layout = VLayout::P2p {
            sends: sends.to_vec(),
            recvs: recvs.to_vec(),
        };
        let param = OpParam::vector(OpKind::SendRecv, layout, T::DTYPE, ReduceOp::Sum);
        self.execute(comm, param, out_of_place(send, recv))
    }

    /// Add a send of all of `buf` to `peer` (matched by a [`Group::recv`] there).
    pub fn send<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a [T],
        peer: Rank,
    ) -> &mut Self {
        let item = P2pItem {
            peer,
            offset: 0,
            count: buf.len(),
        };
        self.send_recv(comm, buf, &[item], &mut [], &[])
    }

    /// Add a receive of all of `buf` from `peer` (matched by a [`Group::send`] there).
    pub fn recv<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        peer: Rank,
    ) -> &mut Self {
        let item = P2pItem {
            peer,
            offset: 0,
            count: buf.len(),
        };
        self.send_recv(comm, &[], &[], buf, &[item])
    }

    /// Add a Barrier.
    pub fn barrier(&mut self, comm: &'a Communicator) -> &mut Self {
        self.execute(comm, OpParam::barrier(), out_of_place::<u8>(&[], &mut []))
    }

    /// Launch every call and wait for all; the first error, if any.
    pub fn run(self) -> Result<(), Error> {
        Inner::execute_calls(self.calls).into_iter().collect()
    }
}

/// AllGatherV or ReduceScatterV over blocks given by counts and displacements.
fn blocks(
    kind: OpKind,
    counts: &[usize],
    displs: &[usize],
    dtype: DataType,
    op: ReduceOp,
) -> OpParam {
    let layout = VLayout::Blocks {
        counts: counts.to_vec(),
        displs: displs.to_vec(),
    };
    OpParam::vector(kind, layout, dtype, op)
}
