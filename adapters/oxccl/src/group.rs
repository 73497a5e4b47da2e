//! Group calls: one thread runs the collectives of several ranks at once.
//!
//! This is NCCL's `ncclGroupStart`/`ncclGroupEnd` for a thread that drives several devices
//! (nccl-tests' default): add one call per rank, then [`Group::run`] launches them all and
//! blocks until all are done. Calls are validated when added.

use oxccl_framework::op::P2pItem;
use oxccl_framework::{Communicator as Inner, Error, GroupCall, OpParam};
use oxccl_platform::{Element, Rank, ReduceOp, UserBuffers};

use crate::{Communicator, OpCall};

/// Collectives of several ranks, launched together.
#[derive(Default)]
pub struct Group<'a> {
    calls: Vec<GroupCall<'a, 'a>>,
}

impl<'a> Group<'a> {
    /// An empty group.
    pub fn new() -> Self {
        // Room for a server's ranks: an eager group of every local rank (the common
        // case) never grows its list call by call.
        Group {
            calls: Vec::with_capacity(8),
        }
    }

    /// Add an untyped call.
    pub fn execute(
        &mut self,
        comm: &'a Communicator,
        op: OpParam,
        user: UserBuffers<'a>,
    ) -> &mut Self {
        self.add(comm, OpCall::new(op, user))
    }

    /// Add `comm`'s call.
    pub fn add(&mut self, comm: &'a Communicator, call: OpCall<'a>) -> &mut Self {
        self.calls
            .push(OpCall::for_rank(Ok(call), comm.framework()));
        self
    }

    /// Add `comm`'s call, or the refusal its constructor returned: a refused call stays in
    /// the group as this rank's call, so [`Group::run`] tells the other ranks why, at once,
    /// and keeps every rank's calls in step (see [`GroupCall::Refused`]); the refusal is
    /// also returned here.
    pub fn submit(
        &mut self,
        comm: &'a Communicator,
        call: Result<OpCall<'a>, Error>,
    ) -> Result<&mut Self, Error> {
        let refused = call.as_ref().err().cloned();
        self.calls.push(OpCall::for_rank(call, comm.framework()));
        match refused {
            Some(err) => Err(err),
            None => Ok(self),
        }
    }

    /// Add an AllReduce of equal-length `send` into `recv`.
    pub fn all_reduce<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::all_reduce(send, recv, op))
    }

    /// Add an in-place AllReduce.
    pub fn all_reduce_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        op: ReduceOp,
    ) -> &mut Self {
        self.add(comm, OpCall::all_reduce_in_place(buf, op))
    }

    /// Add an AllGather: `recv` holds exactly `comm.size() * send.len()` elements.
    pub fn all_gather<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::all_gather(comm.size(), send, recv))
    }

    /// Add an in-place AllGather: `buf` holds one block per rank, the input in block
    /// `comm.rank()`.
    pub fn all_gather_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::all_gather_in_place(comm.size(), buf))
    }

    /// Add a ReduceScatter: `send` holds exactly `comm.size() * recv.len()` elements.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::reduce_scatter(comm.size(), send, recv, op))
    }

    /// Add an in-place ReduceScatter: the result lands in block `comm.rank()` of `buf`.
    pub fn reduce_scatter_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        op: ReduceOp,
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::reduce_scatter_in_place(comm.size(), buf, op))
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
        self.submit(comm, OpCall::broadcast(send, recv, root))
    }

    /// Add an in-place Broadcast: the root's `buf` is copied into every rank's `buf`.
    pub fn broadcast_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        root: Rank,
    ) -> &mut Self {
        self.add(comm, OpCall::broadcast_in_place(buf, root))
    }

    /// Add a Reduce: the root's `recv` = `op` over every rank's `send`; other ranks'
    /// `recv` is left as it was (pass a buffer of the same length).
    pub fn reduce<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::reduce(send, recv, op, root))
    }

    /// Add an in-place Reduce: the root's `buf` becomes `op` over every rank's `buf`.
    pub fn reduce_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> &mut Self {
        self.add(comm, OpCall::reduce_in_place(buf, op, root))
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
        self.submit(comm, OpCall::scatter(comm.size(), send, recv, root))
    }

    /// Add an in-place Scatter: `buf` holds one block per rank; afterwards block
    /// `comm.rank()` holds that block of the root's `buf`.
    pub fn scatter_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::scatter_in_place(comm.size(), buf, root))
    }

    /// Add a Gather: block `s` of the root's `recv` = rank `s`'s `send`; `recv` holds
    /// exactly `comm.size() * send.len()` elements (left as it was on other ranks).
    pub fn gather<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::gather(comm.size(), send, recv, root))
    }

    /// Add an in-place Gather: each rank's input is block `comm.rank()` of its `buf`;
    /// afterwards the root's `buf` holds every rank's block.
    pub fn gather_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        root: Rank,
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::gather_in_place(comm.size(), buf, root))
    }

    /// Add an AlltoAll: block `s` of `recv` = block `comm.rank()` of rank `s`'s `send`;
    /// both hold `comm.size()` blocks.
    pub fn all_to_all<T: Element>(
        &mut self,
        comm: &'a Communicator,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<&mut Self, Error> {
        self.submit(comm, OpCall::all_to_all(comm.size(), send, recv))
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
        Ok(self.add(comm, OpCall::all_gather_v(send, recv, counts, displs)))
    }

    /// Add an in-place AllGatherV: this rank's input is its own block of `buf`.
    pub fn all_gather_v_in_place<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> &mut Self {
        self.add(comm, OpCall::all_gather_v_in_place(buf, counts, displs))
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
        let call = OpCall::reduce_scatter_v(send, recv, counts, displs, op);
        Ok(self.add(comm, call))
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
        let call = OpCall::reduce_scatter_v_in_place(buf, counts, displs, op);
        self.add(comm, call)
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
        let call = OpCall::all_to_all_v(
            send,
            send_counts,
            send_displs,
            recv,
            recv_counts,
            recv_displs,
        );
        self.add(comm, call)
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
        self.add(comm, OpCall::send_recv(send, sends, recv, recvs))
    }

    /// Add a send of all of `buf` to `peer` (matched by a [`Group::recv`] there).
    pub fn send<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a [T],
        peer: Rank,
    ) -> &mut Self {
        self.add(comm, OpCall::send(buf, peer))
    }

    /// Add a receive of all of `buf` from `peer` (matched by a [`Group::send`] there).
    pub fn recv<T: Element>(
        &mut self,
        comm: &'a Communicator,
        buf: &'a mut [T],
        peer: Rank,
    ) -> &mut Self {
        self.add(comm, OpCall::recv(buf, peer))
    }

    /// Add a Barrier.
    pub fn barrier(&mut self, comm: &'a Communicator) -> &mut Self {
        self.add(comm, OpCall::barrier())
    }

    /// Launch every call and wait for all; the first error, if any.
    pub fn run(self) -> Result<(), Error> {
        Inner::execute_calls(self.calls).into_iter().collect()
    }
}
