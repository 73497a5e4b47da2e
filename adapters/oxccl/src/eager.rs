//! The eager API: one blocking, typed call per collective.
//!
//! Each method validates its buffers, runs the collective on this rank and returns when
//! this rank's part is done. Slices carry their length, so the counts come from them;
//! the `_n` variants take an explicit count for buffers that are longer than the data.
//!
//! Operators: AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Scatter, Gather,
//! AlltoAll, AllGatherV, ReduceScatterV, AlltoAllV, send/recv (single or grouped) and
//! Barrier. Each is a one-call [`Group`]; a `Group` also launches many calls, of several
//! ranks or several send/recv pairs, at once.
//!
//! Gathers and scatters follow NCCL: the count is the per-rank block, the larger buffer
//! holds one block per rank (block `r` for rank `r`), and the in-place forms take that
//! larger buffer alone. In place, the input of AllGather and Gather is the rank's own
//! block of the buffer, and ReduceScatter and Scatter leave their result in the rank's own
//! block; the other blocks of a ReduceScatter buffer are left as they were. The V forms
//! place blocks by their displacements. AlltoAll(V) and send/recv have no in-place form.

use crate::group::{out_of_place, Group};
use crate::logging;
use oxccl_framework::op::P2pItem;
use oxccl_framework::{Communicator as Inner, Config, Error, OpParam};
use oxccl_platform::{Element, Rank, ReduceOp, UserBuffers};

/// One rank of a communicator.
#[derive(Debug)]
pub struct Communicator {
    inner: Inner,
}

impl Communicator {
    /// Create `n` in-process ranks; hand each to its own thread.
    pub fn init_all(n: usize, config: Config) -> Result<Vec<Communicator>, Error> {
        logging::init(config.log_filter.as_deref());
        Ok(Inner::init_all(n, config)?
            .into_iter()
            .map(|inner| Communicator { inner })
            .collect())
    }

    /// [`Communicator::init_all`] with [`Config::from_env`].
    pub fn init_all_from_env(n: usize) -> Result<Vec<Communicator>, Error> {
        Self::init_all(n, Config::from_env()?)
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.inner.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.inner.size()
    }

    /// The framework communicator (program preparation, topology, device).
    pub fn framework(&self) -> &Inner {
        &self.inner
    }

    /// Untyped call: run `op` on raw byte buffers.
    pub fn execute(&self, op: &OpParam, user: UserBuffers<'_>) -> Result<(), Error> {
        self.inner.execute(op, user)
    }

    /// `recv = op(send of every rank)`, element-wise; `send` and `recv` have equal length.
    pub fn all_reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        single(|g| g.all_reduce(self, send, recv, op).map(drop))
    }

    /// AllReduce of the first `count` elements of `send` into `recv`.
    pub fn all_reduce_n<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        count: usize,
        op: ReduceOp,
    ) -> Result<(), Error> {
        self.inner.execute(
            &OpParam::all_reduce(count, T::DTYPE, op),
            out_of_place(send, recv),
        )
    }

    /// AllReduce in place: `buf = op(buf of every rank)`.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        single(|g| {
            g.all_reduce_in_place(self, buf, op);
            Ok(())
        })
    }

    /// `recv` block `s` = `send` of rank `s`; `recv` holds exactly `size() * send.len()`
    /// elements.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        single(|g| g.all_gather(self, send, recv).map(drop))
    }

    /// AllGather in place: `buf` holds one block per rank, this rank's input in block
    /// `rank()`; afterwards block `s` holds rank `s`'s.
    pub fn all_gather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<(), Error> {
        single(|g| g.all_gather_in_place(self, buf).map(drop))
    }

    /// `recv = op(block rank() of send of every rank)`; `send` holds exactly
    /// `size() * recv.len()` elements.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        single(|g| g.reduce_scatter(self, send, recv, op).map(drop))
    }

    /// ReduceScatter in place: `buf` holds one block per rank; afterwards block `rank()`
    /// holds `op` over block `rank()` of every rank's `buf`.
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        single(|g| g.reduce_scatter_in_place(self, buf, op).map(drop))
    }
    /// Broadcast: `recv` = the root's `send` (equal lengths).
    pub fn broadcast<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: Rank,
    ) -> Result<(), Error> {
        single(|g| g.broadcast(self, send, recv, root).map(drop))
    }

    /// Broadcast in place: every `buf` becomes the root's.
    pub fn broadcast_in_place<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<(), Error> {
        single(|g| {
            g.broadcast_in_place(self, buf, root);
            Ok(())
        })
    }

    /// Reduce: the root's `recv` = `op` over every rank's `send`; other ranks' `recv` is
    /// undefined afterwards.
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> Result<(), Error> {
        single(|g| g.reduce(self, send, recv, op, root).map(drop))
    }

    /// Reduce in place: the root's `buf` becomes `op` over every rank's `buf`.
    pub fn reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        root: Rank,
    ) -> Result<(), Error> {
        single(|g| {
            g.reduce_in_place(self, buf, op, root);
            Ok(())
        })
    }

    /// Scatter: `recv` = block `rank()` of the root's `send` (`size()` blocks of
    /// `recv.len()`).
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: Rank) -> Result<(), Error> {
        single(|g| g.scatter(self, send, recv, root).map(drop))
    }

    /// Scatter in place: block `rank()` of `buf` becomes that block of the root's `buf`.
    pub fn scatter_in_place<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<(), Error> {
        single(|g| g.scatter_in_place(self, buf, root).map(drop))
    }

    /// Gather: block `s` of the root's `recv` = rank `s`'s `send`.
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: Rank) -> Result<(), Error> {
        single(|g| g.gather(self, send, recv, root).map(drop))
    }

    /// Gather in place: each rank's input is block `rank()` of its `buf`.
    pub fn gather_in_place<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<(), Error> {
        single(|g| g.gather_in_place(self, buf, root).map(drop))
    }

    /// AlltoAll: block `s` of `recv` = block `rank()` of rank `s`'s `send`.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), Error> {
        single(|g| g.all_to_all(self, send, recv).map(drop))
    }

    /// AllGatherV (see [`Group::all_gather_v`]).
    pub fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<(), Error> {
        single(|g| g.all_gather_v(self, send, recv, counts, displs).map(drop))
    }

    /// ReduceScatterV (see [`Group::reduce_scatter_v`]).
    pub fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        op: ReduceOp,
    ) -> Result<(), Error> {
        single(|g| {
            g.reduce_scatter_v(self, send, recv, counts, displs, op)
                .map(drop)
        })
    }

    /// AlltoAllV with per-peer counts and displacements (see [`Group::all_to_all_v`]).
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<(), Error> {
        single(|g| {
            g.all_to_all_v(
                self,
                send,
                send_counts,
                send_displs,
                recv,
                recv_counts,
                recv_displs,
            );
            Ok(())
        })
    }

    /// Grouped sends and receives of this rank in one call (see [`Group::send_recv`]).
    pub fn send_recv<T: Element>(
        &self,
        send: &[T],
        sends: &[P2pItem],
        recv: &mut [T],
        recvs: &[P2pItem],
    ) -> Result<(), Error> {
        single(|g| {
            g.send_recv(self, send, sends, recv, recvs);
            Ok(())
        })
    }

    /// Send all of `buf` to `peer`, which calls [`Communicator::recv`].
    pub fn send<T: Element>(&self, buf: &[T], peer: Rank) -> Result<(), Error> {
        single(|g| {
            g.send(self, buf, peer);
            Ok(())
        })
    }

    /// Receive all of `buf` from `peer`, which calls [`Communicator::send`].
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: Rank) -> Result<(), Error> {
        single(|g| {
            g.recv(self, buf, peer);
            Ok(())
        })
    }

    /// Return once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<(), Error> {
        single(|g| {
            g.barrier(self);
            Ok(())
        })
    }
}

/// Run the one call `add` puts into a fresh group. A call refused by its own checks is
/// run too: the group holds it as refused, and running it tells the other ranks.
fn single<'a>(add: impl FnOnce(&mut Group<'a>) -> Result<(), Error>) -> Result<(), Error> {
    let mut group = Group::new();
    let added = add(&mut group);
    let ran = group.run();
    added.and(ran)
}
